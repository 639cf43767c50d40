//! The program's side of softrnic: what the drop-in `libibverbs.so.1` and `librdmacm.so.1`
//! link, and nothing of the daemon.
//!
//! - [`proto`]: the requests and replies between a program and the daemon, over a Unix socket,
//!   and where that socket is by default.
//! - [`shm`]: the rings in shared memory through which posted work and completions pass with
//!   no message per work request; [`slot`]: the fixed layout of their slots, the data-plane
//!   contract of both sides.
//! - [`client`]: a program's connection to the daemon, with its rings.
//!
//! - `share`: registered memory moved onto a memfd the daemon maps, where that is safe.
//!
//! `unsafe` is confined to [`shm`] and `share` (memory shared with another process).

pub mod client;
mod objects;
pub mod proto;
#[allow(unsafe_code)]
mod share;
#[allow(unsafe_code)]
pub mod shm;
pub mod slot;

pub use client::{Client, Error};
