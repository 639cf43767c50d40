//! softrnic: a userspace RoCEv2 software RNIC. This library holds what the `softrnic` command
//! shares with its tests: reading, writing and dissecting capture files, reading them as
//! conversations and drawing those as ladders, and the lessons run on the simulated network.

pub mod capture;
pub mod conversation;
pub mod fuzz;
pub mod incast;
pub mod ladder;
pub mod lesson;

/// The Rust examples of README.md, compiled and run as doc tests, so they work as shown.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;

/// The Rust examples of docs/engine.md, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/engine.md")]
pub struct EngineDocExamples;

/// The Rust examples of docs/fuzzing.md, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/fuzzing.md")]
pub struct FuzzingDocExamples;
