//! KPL de-aggregation of untrusted record payloads.
//! The body, its properties and its documentation: `fuzz/src/targets/kpl_deaggregate.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardkeeper_fuzz::targets::kpl_deaggregate::run(data));
