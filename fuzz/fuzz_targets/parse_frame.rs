#![no_main]
//! Arbitrary bytes into the frame parser: must never panic, and what parses is consistent.
libfuzzer_sys::fuzz_target!(|data: &[u8]| softrnic_wire::fuzz::parse_frame(data));
