//! What only a kernel RDMA device has: fork support (nothing is needed here), sysfs files,
//! importing another process's objects, ECE, and the kernel ABI helpers; each answers as
//! rdma-core does for a device without them.

use std::ffi::{c_char, c_int, c_void};

use crate::abi::*;
use crate::{or_null, set_errno};

/// A NUL-terminated string literal as a C string.
macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr().cast::<c_char>()
    };
}

exported! {
    /// `ibv_fork_init`: nothing to prepare; the daemon reads memory by address, pages copied
    /// on write after a fork stay this process's, and a child makes its copy of pages shared
    /// with the daemon its own (the client's `share`).
    fn ibv_fork_init() -> c_int {
        0
    }

    /// `ibv_is_fork_initialized`: fork needs nothing here.
    fn ibv_is_fork_initialized() -> u32 {
        IBV_FORK_UNNEEDED
    }

    /// `ibv_dontfork_range`.
    fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
        let _ = (base, size);
        0
    }

    /// `ibv_dofork_range`.
    fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
        let _ = (base, size);
        0
    }

    /// `ibv_get_sysfs_path`: softrnic devices are not in sysfs.
    fn ibv_get_sysfs_path() -> *const c_char {
        cstr!("/sys")
    }

    /// `ibv_read_sysfs_file`: there is no sysfs entry to read.
    fn ibv_read_sysfs_file(dir: *const c_char, file: *const c_char, buf: *mut c_char, size: usize) -> c_int {
        let _ = (dir, file, buf, size);
        set_errno(libc::ENOENT);
        -1
    }

    /// `ibv_read_ibdev_sysfs_file`: likewise.
    fn ibv_read_ibdev_sysfs_file(buf: *mut c_char, size: usize, sysfs_dev: *mut c_void, fnfmt: *const c_char) -> c_int {
        let _ = (buf, size, sysfs_dev, fnfmt);
        set_errno(libc::ENOENT);
        -1
    }

    /// `ibv_import_device`: sharing a context between processes needs the kernel.
    fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
        let _ = cmd_fd;
        or_null(Err(libc::EOPNOTSUPP))
    }

    /// `ibv_import_pd`.
    fn ibv_import_pd(context: *mut ibv_context, handle: u32) -> *mut ibv_pd {
        let _ = (context, handle);
        or_null(Err(libc::EOPNOTSUPP))
    }

    /// `ibv_unimport_pd`.
    fn ibv_unimport_pd(pd: *mut ibv_pd) {
        let _ = pd;
    }

    /// `ibv_import_mr`.
    fn ibv_import_mr(pd: *mut ibv_pd, handle: u32) -> *mut ibv_mr {
        let _ = (pd, handle);
        or_null(Err(libc::EOPNOTSUPP))
    }

    /// `ibv_unimport_mr`.
    fn ibv_unimport_mr(mr: *mut ibv_mr) {
        let _ = mr;
    }

    /// `ibv_import_dm`: no device memory.
    fn ibv_import_dm(context: *mut ibv_context, handle: u32) -> *mut ibv_dm {
        let _ = (context, handle);
        or_null(Err(libc::EOPNOTSUPP))
    }

    /// `ibv_unimport_dm`.
    fn ibv_unimport_dm(dm: *mut ibv_dm) {
        let _ = dm;
    }

    /// `ibv_set_ece`: no enhanced connection establishment.
    fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
        let _ = (qp, ece);
        libc::EOPNOTSUPP
    }

    /// `ibv_query_ece`.
    fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
        let _ = (qp, ece);
        libc::EOPNOTSUPP
    }

    /// `ibv_query_qp_data_in_order`: softrnic writes a message's data in order, but promises
    /// nothing beyond what IBA does (0: not guaranteed), as rxe.
    fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: u32, flags: u32) -> c_int {
        let _ = (qp, op, flags);
        0
    }

    /// `ibv_copy_ah_attr_from_kern`: a kernel uverbs helper; there is no kernel ABI here.
    fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *mut c_void) {
        let _ = (dst, src);
    }

    /// `ibv_copy_qp_attr_from_kern`: likewise.
    fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *mut c_void) {
        let _ = (dst, src);
    }

    /// `ibv_copy_path_rec_from_kern`: likewise.
    fn ibv_copy_path_rec_from_kern(dst: *mut c_void, src: *mut c_void) {
        let _ = (dst, src);
    }

    /// `ibv_copy_path_rec_to_kern`: likewise.
    fn ibv_copy_path_rec_to_kern(dst: *mut c_void, src: *mut c_void) {
        let _ = (dst, src);
    }
}

crate::private::other_private_versions!(ibv_read_ibdev_sysfs_file);
