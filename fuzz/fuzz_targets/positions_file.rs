//! A positions file, as `import` reads it.
//! The body, its properties and its documentation: `fuzz/src/targets/positions_file.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardkeeper_fuzz::targets::positions_file::run(data));
