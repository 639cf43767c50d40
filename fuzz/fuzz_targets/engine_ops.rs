#![no_main]
//! Arbitrary sequences of verbs calls, frames and time into the engine.
libfuzzer_sys::fuzz_target!(|data: &[u8]| softrnic_emu_core::fuzz::ops(data));
