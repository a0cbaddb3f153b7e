#![no_main]
//! `ferry_fuzz::sqs_request` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::sqs_request(data));
