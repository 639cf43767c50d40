//! XRC (IBA Annex A14) verbs: XRC domains (`ibv_open_xrcd`, shared by every program that opens
//! one with the same file, as the kernel shares them), XRC SRQs (`ibv_create_srq_ex`,
//! `ibv_get_srq_num`), and XRC target QPs (`ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`,
//! `ibv_open_qp`). Initiator QPs are made as other QPs are (`qp.rs`).

use std::ffi::c_int;

use softrnic_emu_core::QpType;

use crate::abi::*;
use crate::context::Context;
use crate::or_null;
use crate::qp::{Qp, Srq};

/// An XRC domain: what the program reads, then the daemon's handle.
#[repr(C)]
pub struct Xrcd {
    /// What the program reads.
    pub xrcd: ibv_xrcd,
    handle: u32,
}

/// The daemon's handle of a domain the program holds.
///
/// # Safety
/// `xrcd` must be null or one of ours.
unsafe fn handle(xrcd: *mut ibv_xrcd) -> Result<u32, c_int> {
    if xrcd.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's.
    Ok(unsafe { (*xrcd.cast::<Xrcd>()).handle })
}

/// `verbs_context.open_xrcd`: with a file descriptor (`IBV_XRCD_INIT_ATTR_FD`), the domain of
/// that file, which `O_CREAT` makes if there is none and `O_EXCL` requires there be none.
pub unsafe extern "C" fn open_xrcd(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    or_null(unsafe { open(context, attr) }.map(|p| p.cast()))
}

unsafe fn open(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> Result<*mut Xrcd, c_int> {
    if context.is_null() || attr.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the program's.
    let a = unsafe { &*attr };
    if a.comp_mask & !(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS) != 0 {
        return Err(libc::EINVAL);
    }
    let oflags = if a.comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS != 0 {
        a.oflags
    } else {
        0
    };
    let file = if a.comp_mask & IBV_XRCD_INIT_ATTR_FD != 0 && a.fd != -1 {
        // SAFETY: plain data.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid buffer.
        if unsafe { libc::fstat(a.fd, &mut st) } != 0 {
            return Err(libc::EBADF);
        }
        Some((st.st_dev, st.st_ino))
    } else {
        None
    };
    let (create, exclusive) = (oflags & libc::O_CREAT != 0, oflags & libc::O_EXCL != 0);
    // SAFETY: one of ours.
    let ctx = unsafe { Context::from_ibv(context) };
    let handle = ctx.call("ibv_open_xrcd", |c| c.open_xrcd(file, create, exclusive))?;
    Ok(Box::into_raw(Box::new(Xrcd {
        xrcd: ibv_xrcd { context },
        handle,
    })))
}

/// `verbs_context.close_xrcd`: EBUSY while SRQs or target QPs remain in the domain.
pub unsafe extern "C" fn close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    let h = match unsafe { handle(xrcd) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    // SAFETY: one of ours.
    let ctx = unsafe { Context::from_ibv((*xrcd).context) };
    // SAFETY: allocated by `open` as a Box<Xrcd>.
    unsafe {
        ctx.destroy("ibv_close_xrcd", xrcd.cast::<Xrcd>(), |s| {
            s.client.close_xrcd(h)
        })
    }
}

/// `verbs_context.create_srq_ex`: basic SRQs as `ibv_create_srq`, XRC SRQs with their domain
/// and CQ; tag matching is EOPNOTSUPP.
pub unsafe extern "C" fn create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    or_null(unsafe { create_srq(context, attr) }.map(|p| p.cast()))
}

unsafe fn create_srq(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> Result<*mut Srq, c_int> {
    if context.is_null() || attr.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the program's.
    let a = unsafe { &*attr };
    let has = |bit| a.comp_mask & bit != 0;
    let srq_type = if has(IBV_SRQ_INIT_ATTR_TYPE) {
        a.srq_type
    } else {
        IBV_SRQT_BASIC
    };
    if a.comp_mask & !(IBV_SRQ_INIT_ATTR_RESERVED - 1) != 0 || has(IBV_SRQ_INIT_ATTR_TM) {
        return Err(libc::EOPNOTSUPP);
    }
    if !has(IBV_SRQ_INIT_ATTR_PD) || a.pd.is_null() {
        return Err(libc::EINVAL);
    }
    let (max_wr, max_sge) = (a.attr.max_wr, a.attr.max_sge);
    // SAFETY: ours, checked non-null.
    let pd = unsafe { (*a.pd).handle };
    // SAFETY: one of ours.
    let ctx = unsafe { Context::from_ibv(context) };
    let id = match srq_type {
        IBV_SRQT_BASIC => ctx.call("ibv_create_srq_ex", |c| c.create_srq(pd, max_wr, max_sge))?,
        IBV_SRQT_XRC => {
            if !has(IBV_SRQ_INIT_ATTR_XRCD) || !has(IBV_SRQ_INIT_ATTR_CQ) || a.cq.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: ours.
            let (xrcd, cq) = (unsafe { handle(a.xrcd)? }, unsafe { (*a.cq).handle });
            ctx.call("ibv_create_srq_ex", |c| {
                c.create_xrc_srq(pd, xrcd, cq, max_wr, max_sge)
            })?
        }
        IBV_SRQT_TM => return Err(libc::EOPNOTSUPP),
        _ => return Err(libc::EINVAL),
    };
    // SAFETY: pd is ours.
    Ok(unsafe { Srq::boxed(a.pd, a.srq_context, id, &a.attr) })
}

/// `verbs_context.get_srq_num`: the number initiators name the SRQ by.
pub unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, num: *mut u32) -> c_int {
    if srq.is_null() || num.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: ours, and the program's out-parameter.
    unsafe { *num = (*srq.cast::<Srq>()).num() };
    0
}

/// An XRC target QP (`ibv_create_qp_ex` with `IBV_QPT_XRC_RECV` and an XRC domain): no PD,
/// CQs or queues of its own.
///
/// # Safety
/// `context` must be one of ours and `a` the program's attributes.
pub(crate) unsafe fn create_recv_qp(
    context: *mut ibv_context,
    a: &ibv_qp_init_attr_ex,
) -> Result<*mut Qp, c_int> {
    if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 {
        return Err(libc::EINVAL);
    }
    let xrcd = unsafe { handle(a.xrcd)? };
    // SAFETY: the caller's.
    let ctx = unsafe { Context::from_ibv(context) };
    let qpn = ctx.call("ibv_create_qp_ex", |c| c.create_xrc_recv_qp(xrcd))?;
    let base = Qp::base(context, qpn, IBV_QPT_XRC_RECV, a.qp_context);
    // SAFETY: the context is ours.
    Ok(unsafe { Qp::boxed(base, QpType::XrcRecv, false) })
}

/// `verbs_context.open_qp`: another program's XRC target QP, in a domain this one opened.
pub unsafe extern "C" fn open_qp(
    context: *mut ibv_context,
    attr: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    or_null(unsafe { open_target(context, attr) }.map(|p| p.cast()))
}

unsafe fn open_target(
    context: *mut ibv_context,
    attr: *mut ibv_qp_open_attr,
) -> Result<*mut Qp, c_int> {
    if context.is_null() || attr.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the program's.
    let a = unsafe { &*attr };
    let needed = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    if a.comp_mask & needed != needed || a.comp_mask & !(IBV_QP_OPEN_ATTR_RESERVED - 1) != 0 {
        return Err(libc::EINVAL);
    }
    if a.qp_type != IBV_QPT_XRC_RECV {
        return Err(libc::EINVAL);
    }
    let xrcd = unsafe { handle(a.xrcd)? };
    let qpn = a.qp_num;
    // SAFETY: one of ours.
    let ctx = unsafe { Context::from_ibv(context) };
    ctx.call("ibv_open_qp", |c| c.open_qp(xrcd, qpn))?;
    let qp_context = if a.comp_mask & IBV_QP_OPEN_ATTR_CONTEXT != 0 {
        a.qp_context
    } else {
        std::ptr::null_mut()
    };
    let base = Qp::base(context, qpn, IBV_QPT_XRC_RECV, qp_context);
    // SAFETY: the context is ours.
    Ok(unsafe { Qp::boxed(base, QpType::XrcRecv, false) })
}
