//! The fuzz targets of shardkeeper (`targets`), each a function of one
//! input: libFuzzer runs them through `fuzz_targets/` (`cargo fuzz`), and
//! the integration tests run them on the seeds and on bounded mutations of
//! them (`tests/it/fuzz.rs`, on the stable toolchain, in CI).

pub mod targets;

pub use targets::{block_on, within};
