#![no_main]
//! Arbitrary bytes into the frame parser and the dissector: must never panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| softrnic_wire::fuzz::parse_frame(data));
