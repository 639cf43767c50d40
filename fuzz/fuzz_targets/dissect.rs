#![no_main]
//! Arbitrary bytes into the dissector, whole and as a capture's cut: must never panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| softrnic_wire::fuzz::dissect(data));
