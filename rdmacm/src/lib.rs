//! The drop-in `librdmacm.so.1`: unmodified programs that connect through librdmacm run on
//! the softrnic daemon, which plays the part of the kernel's rdma_cm.
//!
//! rdma-core's librdmacm writes commands to `/dev/infiniband/rdma_cm` and reads events back;
//! this one sends the same requests to the daemon: an event channel is one connection to it,
//! whose notification pipe is the channel's pollable fd ([`channel`]). Ids ([`id`]) mirror the
//! daemon's, and the library does what rdma-core's does on the program's side: it opens every
//! device ([`device`]), moves the program's QP through its states with the attributes
//! `rdma_init_qp_attr` gives ([`qp`]), waits on its own channel for synchronous ids, and fills
//! `struct rdma_cm_event` from the daemon's events. The verbs it needs are libibverbs' ([`verbs`],
//! resolved by the dynamic linker: softrnic's `libibverbs.so.1` under `softrnic exec`).
//!
//! The shared object exports rdma-core 44's symbols with their versions (`librdmacm.map`) and
//! lays out `<rdma/rdma_cma.h>`'s structures exactly ([`abi`], checked by `tests/tests/layout.rs`).

// Every exported function is a C entry point whose safety contract is librdmacm's documented
// API (valid pointers to the structures it names), which no Rust signature can state.
#![allow(unsafe_code, unsafe_op_in_unsafe_fn, clippy::missing_safety_doc)]

#[macro_use]
extern crate softrnic_verbs_abi;

pub mod abi;
pub mod addrinfo;
pub mod channel;
pub mod device;
pub mod id;
pub mod multicast;
pub mod qp;
pub mod rsocket;
mod sockaddr;
mod verbs;

use core::ffi::c_int;

use softrnic_verbs_abi::set_errno;

/// A failed call as librdmacm returns it: -1 with errno set.
pub(crate) fn fail(errno: c_int) -> c_int {
    set_errno(errno);
    -1
}

/// The errno of a daemon refusal, logged when `SOFTRNIC_DEBUG` is set.
pub(crate) fn errno_of(call: &str, e: &softrnic_client::client::Error) -> c_int {
    if std::env::var_os("SOFTRNIC_DEBUG").is_some() {
        eprintln!("softrnic: {call}: {e}");
    }
    e.errno
}

/// 0, or -1 with errno set to `e` (for the libibverbs calls that return an errno).
pub(crate) fn seterrno(ret: c_int) -> c_int {
    if ret == 0 { 0 } else { fail(ret.abs()) }
}
