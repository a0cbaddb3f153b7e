#![no_main]
//! `ferry_fuzz::sqs_body` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::sqs_body(data));
