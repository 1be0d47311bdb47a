//! Kinesis event-source-mapping events, read the way a consumer function
//! The body, its properties and its documentation: `fuzz/src/targets/kinesis_event.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardkeeper_fuzz::targets::kinesis_event::run(data));
