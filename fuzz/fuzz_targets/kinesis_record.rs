//! One Kinesis record's payload as a shard worker holds it (`Unit::kinesis`).
//! The body, its properties and its documentation: `fuzz/src/targets/kinesis_record.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardkeeper_fuzz::targets::kinesis_record::run(data));
