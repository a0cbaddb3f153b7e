#![no_main]
//! `ferry_fuzz::amqp10_message` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::amqp10_message(data));
