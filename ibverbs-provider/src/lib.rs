//! The drop-in `libibverbs.so.1`: unmodified RDMA programs, built against Debian's rdma-core
//! (33 to 65), run on the softrnic daemon.
//!
//! The shared object exports rdma-core 65's symbols with their versions (`libibverbs.map`, and
//! every release's private node: [`private`]), and lays out every structure a program touches
//! exactly as `<infiniband/verbs.h>` does ([`abi`], checked against each release's header by
//! the workspace's `tests/tests/layout.rs`). Each
//! `ibv_open_device` is one connection to the daemon (one device context): control calls are
//! messages on it, while work requests and completions move through the shared-memory rings of
//! [`softrnic_link::client`], with no message per work request. The daemon reaches
//! registered memory with `process_vm_readv` and `process_vm_writev`; the context allows that
//! with `prctl(PR_SET_PTRACER)`.
//!
//! Modules follow the objects: [`device`] (the device list), [`context`] (open, queries, async
//! events), [`memory`] (PDs, MRs, memory windows, address handles), [`cq`] (CQs, completion
//! channels, the extended poll API), [`qp`] (QPs and their work requests, SRQs), [`qp_ex`] (the
//! `ibv_wr_*` API), [`misc`] (strings and rates), [`recent`] (rdma-core 65's new verbs),
//! [`private`] (what other providers import),
//! and `compat` (the hidden `IBVERBS_1.0` versions).

// Every function here is a C entry point: its safety contract is libibverbs' documented API
// (valid pointers to the structures it names), which no Rust signature can state.
#![allow(unsafe_code, unsafe_op_in_unsafe_fn, clippy::missing_safety_doc)]

#[macro_use]
extern crate softrnic_verbs_abi;

pub use softrnic_verbs_abi::{abi, set_errno};

pub mod addressing;
mod compat;
pub mod context;
pub mod convert;
pub mod cq;
pub mod device;
pub mod kernel;
pub mod memory;
pub mod names;
pub mod private;
pub mod qp;
pub mod qp_ex;
pub mod recent;
pub mod xrc;

/// Takes one notification byte from a channel's or the context's event fd, blocking or not as
/// the program set the fd: `Ok(true)`, or `Ok(false)` when the daemon's end has closed (the
/// daemon is gone); the errno otherwise (EAGAIN when none waits on a non-blocking fd).
pub(crate) fn take_notification(fd: std::ffi::c_int) -> Result<bool, i32> {
    match softrnic_sys::take_notification(fd) {
        Ok(true) => Ok(true),
        Ok(false) => Err(libc::EAGAIN),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

/// A call that makes an object, as C returns it: the object, or null with errno set.
pub(crate) fn or_null<T>(made: Result<*mut T, i32>) -> *mut T {
    made.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// A call that destroys an object: once the daemon has let it go, its C structure (allocated
/// as a `Box<T>`) is freed. 0, or the errno.
///
/// # Safety
/// `object` must come from `Box::into_raw` and not be used again after success.
pub(crate) unsafe fn free_after<T>(released: Result<(), i32>, object: *mut T) -> i32 {
    match released {
        Ok(()) => {
            drop(unsafe { Box::from_raw(object) });
            0
        }
        Err(e) => e,
    }
}

/// Logs why a call failed when `SOFTRNIC_DEBUG` is set; returns the errno.
pub(crate) fn fail(call: &str, e: &softrnic_client::client::Error) -> i32 {
    if std::env::var_os("SOFTRNIC_DEBUG").is_some() {
        eprintln!("softrnic: {call}: {e}");
    }
    e.errno
}

/// `fail`, then errno set and a null pointer (for the calls that return an object).
pub(crate) fn fail_null<T>(call: &str, e: &softrnic_client::client::Error) -> *mut T {
    set_errno(fail(call, e));
    std::ptr::null_mut()
}
