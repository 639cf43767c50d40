#![no_main]
//! parse -> emit -> parse must agree.
libfuzzer_sys::fuzz_target!(|data: &[u8]| softrnic_wire::fuzz::round_trip(data));
