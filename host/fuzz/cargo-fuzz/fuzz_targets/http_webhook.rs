#![no_main]
//! `ferry_fuzz::http_webhook` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::http_webhook(data));
