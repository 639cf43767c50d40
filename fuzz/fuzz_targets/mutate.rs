#![no_main]
//! Templates (every opcode's sample, or generated packets) changed by `softrnic_wire::mutate`,
//! the structure-aware mutator for fuzzing other implementations: every variant must parse or
//! be refused, without a panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| softrnic_wire::fuzz::mutate(data));
