//! The program's side of softrnic: what the drop-in `libibverbs.so.1` and `librdmacm.so.1`
//! link, and nothing of the daemon.
//!
//! - [`proto`]: the requests and replies between a program and the daemon, over a Unix socket,
//!   and where that socket is by default.
//! - [`shm`]: the fixed-layout rings in shared memory through which posted work and
//!   completions pass with no message per work request.
//! - [`client`]: a program's connection to the daemon, with its rings.
//!
//! `unsafe` is confined to [`shm`] (memory shared with another process).

pub mod client;
pub mod proto;
#[allow(unsafe_code)]
pub mod shm;

pub use client::{Client, Error};
