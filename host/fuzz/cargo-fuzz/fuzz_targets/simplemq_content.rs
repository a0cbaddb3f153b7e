#![no_main]
//! `ferry_fuzz::simplemq_content` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::simplemq_content(data));
