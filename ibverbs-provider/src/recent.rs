//! The verbs rdma-core added after 44 (`IBVERBS_1.15` to `IBVERBS_1.18`, up to rdma-core 65),
//! as libibverbs gives them for a provider that has no op of its own (its `dummy_ops.c`), which
//! is what kernel rxe's provider gives too: no DMA handles, completion counters, dma-buf
//! exports or port speed query (EOPNOTSUPP); `ibv_alloc_buf` is page-aligned heap memory, and
//! `ibv_reg_mr_ex` registers by address.

use std::ffi::{c_int, c_void};
use std::ptr;

use crate::abi::*;
use crate::{or_null, set_errno};

/// The registration `ibv_reg_mr_ex` asks for, checked as libibverbs checks it: a buffer from
/// `ibv_alloc_buf` is turned into its address range, then only an address-based registration
/// is possible here (a dma-buf one is not supported, nor a DMA handle).
unsafe fn reg_mr_ex(pd: *mut ibv_pd, attr: &ibv_mr_init_attr) -> Result<*mut ibv_mr, c_int> {
    let mut mask = attr.comp_mask;
    if mask & IBV_REG_MR_MASK_BUF != 0 {
        let buf = attr.buf.as_ref().ok_or(libc::EINVAL)?;
        let base = buf.addr as usize;
        let start = (attr.addr as usize).checked_sub(base).ok_or(libc::EINVAL)?;
        let in_buf = start <= buf.size && attr.length <= buf.size - start;
        if buf.pd != pd
            || mask & IBV_REG_MR_MASK_ADDR == 0
            || mask & (IBV_REG_MR_MASK_FD | IBV_REG_MR_MASK_FD_OFFSET) != 0
            || !in_buf
        {
            return Err(libc::EINVAL);
        }
        mask &= !IBV_REG_MR_MASK_BUF;
    }
    let known = IBV_REG_MR_MASK_IOVA
        | IBV_REG_MR_MASK_ADDR
        | IBV_REG_MR_MASK_FD
        | IBV_REG_MR_MASK_FD_OFFSET;
    if mask & !known != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if mask & IBV_REG_MR_MASK_FD != 0 {
        let complete = mask & IBV_REG_MR_MASK_ADDR == 0
            && mask & IBV_REG_MR_MASK_FD_OFFSET != 0
            && mask & IBV_REG_MR_MASK_IOVA != 0;
        return Err(if complete {
            libc::EOPNOTSUPP
        } else {
            libc::EINVAL
        });
    }
    if mask & IBV_REG_MR_MASK_ADDR == 0 || mask & IBV_REG_MR_MASK_FD_OFFSET != 0 {
        return Err(libc::EINVAL);
    }
    let iova = if mask & IBV_REG_MR_MASK_IOVA != 0 {
        attr.iova
    } else {
        attr.addr as u64
    };
    crate::memory::reg(pd, attr.addr, attr.length, iova, attr.access as u32)
}

exported! {
    /// `ibv_reg_mr_ex` (rdma-core 65).
    fn ibv_reg_mr_ex(pd: *mut ibv_pd, mr_init_attr: *mut ibv_mr_init_attr) -> *mut ibv_mr {
        match mr_init_attr.as_ref() {
            Some(attr) => or_null(reg_mr_ex(pd, attr)),
            None => or_null(Err(libc::EINVAL)),
        }
    }

    /// `ibv_alloc_buf` (rdma-core 65): `size` bytes aligned to a page, for `ibv_reg_buf_mr`.
    fn ibv_alloc_buf(pd: *mut ibv_pd, size: usize, buf: *mut *mut ibv_buf) -> *mut c_void {
        if pd.is_null() || buf.is_null() {
            set_errno(libc::EINVAL);
            return ptr::null_mut();
        }
        let mut addr = ptr::null_mut();
        let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
        let e = libc::posix_memalign(&mut addr, page, size);
        if e != 0 {
            set_errno(e);
            return ptr::null_mut();
        }
        *buf = Box::into_raw(Box::new(ibv_buf { addr, size, pd }));
        addr
    }

    /// `ibv_free_buf` (rdma-core 65).
    fn ibv_free_buf(buf: *mut ibv_buf) {
        if !buf.is_null() {
            let buf = Box::from_raw(buf);
            libc::free(buf.addr);
        }
    }

    /// `ibv_reg_buf_mr` (rdma-core 65): registers part of a buffer from `ibv_alloc_buf`.
    fn ibv_reg_buf_mr(pd: *mut ibv_pd, buf: *mut ibv_buf, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr {
        // SAFETY: plain data; the pointers are set below.
        let mut attr: ibv_mr_init_attr = std::mem::zeroed();
        attr.length = length;
        attr.access = access;
        attr.comp_mask = IBV_REG_MR_MASK_BUF | IBV_REG_MR_MASK_ADDR;
        attr.addr = addr;
        attr.buf = buf;
        or_null(reg_mr_ex(pd, &attr))
    }

    /// `ibv_export_buf_dmabuf_fd` (rdma-core 65): heap memory has no dma-buf (ENODATA, as
    /// libibverbs says for such a buffer).
    fn ibv_export_buf_dmabuf_fd(buf: *mut ibv_buf) -> c_int {
        let _ = buf;
        set_errno(libc::ENODATA);
        -1
    }

    /// `ibv_alloc_dmah` (rdma-core 65): not supported.
    fn ibv_alloc_dmah(context: *mut ibv_context, attr: *mut c_void) -> *mut ibv_dmah {
        let _ = (context, attr);
        or_null(Err(libc::EOPNOTSUPP))
    }

    /// `ibv_dealloc_dmah` (rdma-core 65): there is none to free.
    fn ibv_dealloc_dmah(dmah: *mut ibv_dmah) -> c_int {
        let _ = dmah;
        libc::EOPNOTSUPP
    }

    /// `ibv_dm_export_dmabuf_fd` (rdma-core 65): device memory is not supported.
    fn ibv_dm_export_dmabuf_fd(dm: *mut c_void) -> c_int {
        let _ = dm;
        set_errno(libc::EOPNOTSUPP);
        -1
    }

    /// `ibv_query_port_speed` (rdma-core 65): not supported, as with rxe; `ibv_query_port`'s
    /// width and speed tell it.
    fn ibv_query_port_speed(context: *mut ibv_context, port_num: u32, port_speed: *mut u64) -> c_int {
        let _ = (context, port_num, port_speed);
        libc::EOPNOTSUPP
    }

    /// `_ibv_query_comp_cntr_caps` (rdma-core 65, behind the inline `ibv_query_comp_cntr_caps`):
    /// no completion counters.
    fn _ibv_query_comp_cntr_caps(context: *mut ibv_context, caps: *mut c_void, caps_size: usize) -> c_int {
        let _ = (context, caps, caps_size);
        libc::EOPNOTSUPP
    }

    /// `ibv_create_comp_cntr` (rdma-core 65): no completion counters.
    fn ibv_create_comp_cntr(context: *mut ibv_context, cc_attr: *mut c_void) -> *mut c_void {
        let _ = (context, cc_attr);
        or_null(Err(libc::EOPNOTSUPP))
    }
}

/// The completion-counter calls on a counter, which `ibv_create_comp_cntr` never made.
macro_rules! no_comp_cntr {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        exported! {$(
            /// A completion-counter call (rdma-core 65): no completion counters.
            fn $name($($arg: $ty),*) -> c_int {
                let _ = ($($arg),*);
                libc::EOPNOTSUPP
            }
        )*}
    };
}

no_comp_cntr! {
    ibv_destroy_comp_cntr(comp_cntr: *mut c_void);
    ibv_set_comp_cntr(comp_cntr: *mut c_void, value: u64);
    ibv_set_err_comp_cntr(comp_cntr: *mut c_void, value: u64);
    ibv_inc_comp_cntr(comp_cntr: *mut c_void, amount: u64);
    ibv_inc_err_comp_cntr(comp_cntr: *mut c_void, amount: u64);
    ibv_read_comp_cntr(comp_cntr: *mut c_void, value: *mut u64);
    ibv_read_err_comp_cntr(comp_cntr: *mut c_void, value: *mut u64);
    ibv_qp_attach_comp_cntr(qp: *mut ibv_qp, comp_cntr: *mut c_void, attr: *mut c_void);
}
