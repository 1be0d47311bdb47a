//! An item of a KCL lease table, as `import-kcl` reads it.
//! The body, its properties and its documentation: `fuzz/src/targets/kcl_item.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardkeeper_fuzz::targets::kcl_item::run(data));
