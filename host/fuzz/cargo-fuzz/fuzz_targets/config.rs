#![no_main]
//! `ferry_fuzz::config` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::config(data));
