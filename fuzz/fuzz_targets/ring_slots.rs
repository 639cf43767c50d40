#![no_main]
//! Arbitrary bytes as a ring slot a program wrote: the daemon's decoders must never panic, and
//! what decodes must encode back the same.
libfuzzer_sys::fuzz_target!(|data: &[u8]| softrnic_client::slot::fuzz(data));
