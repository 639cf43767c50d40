#![no_main]
//! Arbitrary MADs, consumer calls and time into the Communication Manager.
libfuzzer_sys::fuzz_target!(|data: &[u8]| softrnic_emu_core::fuzz::cm(data));
