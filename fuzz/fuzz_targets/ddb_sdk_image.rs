//! A DynamoDB Streams record through the SDK's types against the same record as an event.
//! The body, its properties and its documentation: `fuzz/src/targets/ddb_sdk_image.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardkeeper_fuzz::targets::ddb_sdk_image::run(data));
