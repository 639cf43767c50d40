//! The sans-IO RoCEv2 engine: memory regions, queues and the RC/UC/UD transports, driven by time,
//! packets and verbs calls as inputs (the shape of quinn-proto and Linux rxe).
//!
//! Not written yet: this crate reserves its place in the workspace. See issue 3.
