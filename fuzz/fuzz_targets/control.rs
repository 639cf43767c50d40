#![no_main]
//! Arbitrary bytes as what a hostile program writes on its connection to the daemon: every
//! request must be answered without a panic, another context's objects must come through
//! untouched, and closing the connection must free everything it made.
libfuzzer_sys::fuzz_target!(|data: &[u8]| softrnic_daemon::fuzz::control(data));
