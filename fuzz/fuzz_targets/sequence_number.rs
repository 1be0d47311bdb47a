//! Sequence numbers and checkpoints parsed from untrusted text.
//! The body, its properties and its documentation: `fuzz/src/targets/sequence_number.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardkeeper_fuzz::targets::sequence_number::run(data));
