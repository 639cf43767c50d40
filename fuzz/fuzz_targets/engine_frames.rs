#![no_main]
//! Arbitrary frames into responders and requesters of every type in every state.
libfuzzer_sys::fuzz_target!(|data: &[u8]| softrnic_emu_core::fuzz::frames(data));
