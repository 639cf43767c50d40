//! softrnic: a userspace RoCEv2 software RNIC. This library holds what the `softrnic` command
//! shares with its tests: reading, writing and dissecting capture files.

pub mod capture;

/// The Rust examples of README.md, compiled and run as doc tests, so they work as shown.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;

/// The Rust examples of docs/engine.md, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/engine.md")]
pub struct EngineDocExamples;
