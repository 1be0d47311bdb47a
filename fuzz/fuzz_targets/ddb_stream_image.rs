//! DynamoDB Streams records and events: one stream record decoded into a
//! The body, its properties and its documentation: `fuzz/src/targets/ddb_stream_image.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardkeeper_fuzz::targets::ddb_stream_image::run(data));
