#![no_main]
//! `ferry_fuzz::sigv4` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::sigv4(data));
