#![no_main]
//! `ferry_fuzz::amqp091_properties` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::amqp091_properties(data));
