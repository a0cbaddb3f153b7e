#![no_main]
//! `ferry_fuzz::json_wire` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::json_wire(data));
