#![no_main]
//! `ferry_fuzz::mqtt_publish` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::mqtt_publish(data));
