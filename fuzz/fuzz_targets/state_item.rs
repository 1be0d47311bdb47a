//! An item of the state table, through every decoder of a stored item.
//! The body, its properties and its documentation: `fuzz/src/targets/state_item.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardkeeper_fuzz::targets::state_item::run(data));
