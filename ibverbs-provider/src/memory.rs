//! Protection domains, memory regions, memory windows and address handles.

use std::ffi::{c_int, c_void};

use softrnic_emu_core::{AddressHandle, MwBind, MwType, SendFlags, SendOp, SendWr};

use crate::abi::*;
use crate::context::Context;
use crate::convert;
use crate::qp::Qp;
use crate::{free_after, or_null, set_errno};

/// An address handle: the C structure, then the address vector UD work requests carry.
#[repr(C)]
pub struct Ah {
    /// What the program holds.
    pub ah: ibv_ah,
    /// The address.
    pub handle: AddressHandle,
}

/// Registers `[addr, addr + length)`, which work requests and remote peers name from `iova` on.
pub(crate) unsafe fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> Result<*mut ibv_mr, c_int> {
    // The kernel's ib_umem_get pins no empty region: EINVAL, as with rxe.
    if pd.is_null() || length == 0 {
        return Err(libc::EINVAL);
    }
    let access = convert::access(access)?;
    let ctx = Context::from_ibv((*pd).context);
    let key = ctx.call("ibv_reg_mr", |c| {
        c.reg_mr_iova((*pd).handle, addr as u64, length as u64, iova, access)
    })?;
    Ok(Box::into_raw(Box::new(ibv_mr {
        context: (*pd).context,
        pd,
        addr,
        length,
        handle: key,
        lkey: key,
        rkey: key,
    })))
}

/// `ibv_rereg_mr`'s work; the error is the code to return and errno.
unsafe fn rereg(
    mr: *mut ibv_mr,
    flags: u32,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: u32,
) -> Result<(), (c_int, c_int)> {
    let input = |e| (IBV_REREG_MR_ERR_INPUT, e);
    if mr.is_null() || flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0 {
        return Err(input(libc::EINVAL));
    }
    let translate = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
    if translate && (length == 0 || addr.is_null()) {
        return Err(input(libc::EINVAL));
    }
    let new_pd = flags & IBV_REREG_MR_CHANGE_PD != 0;
    if new_pd && pd.is_null() {
        return Err(input(libc::EINVAL));
    }
    let cmd = |e| (IBV_REREG_MR_ERR_CMD, e);
    // The kernel's uverbs refuses a rereg that changes nothing.
    if flags == 0 {
        return Err(cmd(libc::EINVAL));
    }
    let access = match flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
        true => Some(convert::access(access).map_err(cmd)?),
        false => None,
    };
    let pd = new_pd.then_some(pd);
    let translation = translate.then_some((addr as u64, length as u64));
    let ctx = Context::from_ibv((*mr).context);
    ctx.call("ibv_rereg_mr", |c| {
        c.rereg_mr((*mr).lkey, pd.map(|p| (*p).handle), translation, access)
    })
    .map_err(cmd)?;
    if let Some(pd) = pd {
        (*mr).pd = pd;
    }
    if translate {
        ((*mr).addr, (*mr).length) = (addr, length);
    }
    Ok(())
}

/// `ops.alloc_mw`.
pub unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, mw_type: u32) -> *mut ibv_mw {
    let t = match mw_type {
        IBV_MW_TYPE_1 => MwType::Type1,
        IBV_MW_TYPE_2 => MwType::Type2,
        _ => return or_null(Err(libc::EINVAL)),
    };
    let ctx = Context::from_ibv((*pd).context);
    or_null(
        ctx.call("ibv_alloc_mw", |c| c.alloc_mw((*pd).handle, t))
            .map(|key| {
                Box::into_raw(Box::new(ibv_mw {
                    context: (*pd).context,
                    pd,
                    rkey: key,
                    handle: key,
                    r#type: mw_type,
                }))
            }),
    )
}

/// `ops.dealloc_mw`.
pub unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    let ctx = Context::from_ibv((*mw).context);
    free_after(
        ctx.call("ibv_dealloc_mw", |c| c.dealloc_mw((*mw).handle)),
        mw,
    )
}

/// An address handle: checked here (a GRH, an existing source GID); the daemon resolves its
/// MAC when a work request uses it.
unsafe fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> Result<*mut ibv_ah, c_int> {
    if pd.is_null() || attr.is_null() {
        return Err(libc::EINVAL);
    }
    let handle = convert::address(&*attr)?;
    // An empty source GID entry: ENODATA, as the kernel's rdma_get_gid_attr.
    if handle.sgid_index as usize >= Context::from_ibv((*pd).context).gids()?.len() {
        return Err(libc::ENODATA);
    }
    let ah = Box::new(Ah {
        ah: ibv_ah {
            context: (*pd).context,
            pd,
            handle: 0,
        },
        handle,
    });
    Ok(Box::into_raw(ah).cast())
}

/// `ops.bind_mw`: binds a type 1 window through the QP's send queue, as a BIND_MW work
/// request with the next key (`ibv_inc_rkey`); the window's rkey is the new one at once.
pub unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    if qp.is_null() || mw.is_null() || bind.is_null() || (*mw).r#type != IBV_MW_TYPE_1 {
        return libc::EINVAL;
    }
    let b = &*bind;
    let info = &b.bind_info;
    let access = match convert::access(info.mw_access_flags) {
        Ok(a) => a,
        Err(e) => return e,
    };
    // A zero length unbinds, and needs no region.
    let mr_lkey = if info.mr.is_null() {
        if info.length != 0 {
            return libc::EINVAL;
        }
        0
    } else {
        (*info.mr).lkey
    };
    let old = (*mw).rkey;
    let new = (old & !0xff) | (old.wrapping_add(1) & 0xff);
    let wr = SendWr {
        wr_id: b.wr_id,
        op: SendOp::BindMw(MwBind {
            mw_rkey: old,
            new_key: new as u8,
            mr_lkey,
            addr: info.addr,
            len: info.length,
            access,
        }),
        sgl: Vec::new(),
        flags: SendFlags::from_bits_retain(b.send_flags),
        ud: None,
        xrc_srqn: None,
    };
    let q = &*qp.cast::<Qp>();
    match q.ctx().call("ibv_bind_mw", |c| {
        let r = c.push_send(q.qpn(), &wr, None);
        let rung = c.doorbell();
        r.and(rung)
    }) {
        Ok(()) => {
            (*mw).rkey = new;
            0
        }
        Err(e) => e,
    }
}

exported! {
    /// `ibv_alloc_pd`.
    fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
        if context.is_null() {
            return or_null(Err(libc::EINVAL));
        }
        let pd = Context::from_ibv(context).call("ibv_alloc_pd", |c| c.alloc_pd());
        or_null(pd.map(|h| Box::into_raw(Box::new(ibv_pd { context, handle: h }))))
    }

    /// `ibv_dealloc_pd`: EBUSY while objects use it.
    fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
        if pd.is_null() {
            return libc::EINVAL;
        }
        let ctx = Context::from_ibv((*pd).context);
        free_after(ctx.call("ibv_dealloc_pd", |c| c.dealloc_pd((*pd).handle)), pd)
    }

    /// `ibv_reg_mr`.
    fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr {
        or_null(reg(pd, addr, length, addr as u64, access as u32))
    }

    /// `ibv_reg_mr_iova`.
    fn ibv_reg_mr_iova(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_int) -> *mut ibv_mr {
        or_null(reg(pd, addr, length, iova, access as u32))
    }

    /// `ibv_reg_mr_iova2` (what the `ibv_reg_mr` macro calls for non-constant flags).
    fn ibv_reg_mr_iova2(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: u32) -> *mut ibv_mr {
        or_null(reg(pd, addr, length, iova, access))
    }

    /// `ibv_reg_dmabuf_mr`: no dma-buf in a software NIC.
    fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int) -> *mut ibv_mr {
        let _ = (pd, offset, length, iova, fd, access);
        or_null(Err(libc::EOPNOTSUPP))
    }

    /// `ibv_rereg_mr`: changes the region's PD, memory (named by its address) and access, as
    /// `flags` says, its keys kept. rdma-core's codes: IBV_REREG_MR_ERR_INPUT for what
    /// libibverbs itself refuses, IBV_REREG_MR_ERR_CMD for what the device refuses (errno
    /// says why; the region is then as it was).
    fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> c_int {
        match rereg(mr, flags as u32, pd, addr, length, access as u32) {
            Ok(()) => 0,
            Err((code, errno)) => {
                set_errno(errno);
                code
            }
        }
    }

    /// `ibv_dereg_mr`: EBUSY while a memory window is bound to it.
    fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
        if mr.is_null() {
            return libc::EINVAL;
        }
        let ctx = Context::from_ibv((*mr).context);
        free_after(ctx.call("ibv_dereg_mr", |c| c.dereg_mr((*mr).lkey)), mr)
    }

    /// `ibv_create_ah`.
    fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
        or_null(create_ah(pd, attr))
    }

    /// `ibv_destroy_ah`.
    fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
        if ah.is_null() {
            return libc::EINVAL;
        }
        free_after(Ok(()), ah.cast::<Ah>())
    }
}
