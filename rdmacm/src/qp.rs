//! An id's QP (and CQs, SRQ): made with libibverbs, and moved through INIT, RTR and RTS with
//! the attributes the daemon's rdma_cm gives (rdma-core's `ucma_init_conn_qp`,
//! `ucma_modify_qp_rtr`/`_rts`).

use core::ffi::c_int;
use std::mem::offset_of;

use softrnic_emu_core::QpCap;
use softrnic_verbs_abi::abi::*;
use softrnic_verbs_abi::convert;

use crate::abi::*;
use crate::channel::client;
use crate::id::private;
use crate::verbs::*;
use crate::{errno_of, fail, seterrno};

/// The attributes that move the id's QP to `state`, as `rdma_init_qp_attr` gives them.
pub(crate) unsafe fn init_attr(
    id: *mut rdma_cm_id,
    state: ibv_qp_state,
) -> Result<(ibv_qp_attr, c_int), c_int> {
    let state = match state {
        IBV_QPS_INIT => softrnic_emu_core::QpState::Init,
        IBV_QPS_RTR => softrnic_emu_core::QpState::Rtr,
        IBV_QPS_RTS => softrnic_emu_core::QpState::Rts,
        _ => return Err(libc::EINVAL),
    };
    let p = private(id);
    let (attr, mask) = client((*id).channel)
        .cm_init_qp_attr(p.handle, state)
        .map_err(|e| errno_of("rdma_init_qp_attr", &e))?;
    Ok((
        convert::ibv_qp_attr_of(&attr, &QpCap::new(0, 0, 0)),
        mask.bits() as c_int,
    ))
}

/// Moves the id's QP to `state` with rdma_cm's attributes, `adjust`ed first.
unsafe fn modify(
    id: *mut rdma_cm_id,
    qp: *mut ibv_qp,
    state: ibv_qp_state,
    adjust: impl FnOnce(&mut ibv_qp_attr),
) -> Result<(), c_int> {
    let (mut attr, mask) = init_attr(id, state)?;
    adjust(&mut attr);
    match ibv_modify_qp(qp, &mut attr, mask) {
        0 => Ok(()),
        e => Err(e.abs()),
    }
}

/// INIT (again, now with the connection's access flags), then RTR; `resp_res` overrides the
/// READ/atomic depth unless it is 0xff.
pub(crate) unsafe fn modify_rtr(id: *mut rdma_cm_id, resp_res: u8) -> Result<(), c_int> {
    let qp = (*id).qp;
    if qp.is_null() {
        return Ok(());
    }
    modify(id, qp, IBV_QPS_INIT, |_| {})?;
    modify(id, qp, IBV_QPS_RTR, |a| {
        if resp_res != RDMA_MAX_RESP_RES {
            a.max_dest_rd_atomic = resp_res;
        }
    })
}

/// RTS; `init_depth` overrides the READ/atomic depth unless it is 0xff.
pub(crate) unsafe fn modify_rts(id: *mut rdma_cm_id, init_depth: u8) -> Result<(), c_int> {
    let qp = (*id).qp;
    if qp.is_null() {
        return Ok(());
    }
    modify(id, qp, IBV_QPS_RTS, |a| {
        if init_depth != RDMA_MAX_INIT_DEPTH {
            a.max_rd_atomic = init_depth;
        }
    })
}

/// The error state (a disconnect or a refusal ends the QP's work).
pub(crate) unsafe fn modify_err(id: *mut rdma_cm_id) -> Result<(), c_int> {
    let qp = (*id).qp;
    if qp.is_null() {
        return Ok(());
    }
    let mut attr: ibv_qp_attr = std::mem::zeroed();
    attr.qp_state = IBV_QPS_ERR;
    match ibv_modify_qp(qp, &mut attr, IBV_QP_STATE as c_int) {
        0 => Ok(()),
        e => Err(e.abs()),
    }
}

/// A new QP's first states: INIT for a connected one; INIT, RTR and RTS (from PSN 0) for a UD
/// one, which needs no peer (rdma-core's `ucma_init_conn_qp` and `ucma_init_ud_qp`).
unsafe fn init_qp(id: *mut rdma_cm_id, qp: *mut ibv_qp) -> Result<(), c_int> {
    modify(id, qp, IBV_QPS_INIT, |_| {})?;
    if (*id).qp_type != IBV_QPT_UD {
        return Ok(());
    }
    let mut attr: ibv_qp_attr = std::mem::zeroed();
    attr.qp_state = IBV_QPS_RTR;
    match ibv_modify_qp(qp, &mut attr, IBV_QP_STATE as c_int) {
        0 => {}
        e => return Err(e.abs()),
    }
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = 0;
    match ibv_modify_qp(qp, &mut attr, (IBV_QP_STATE | IBV_QP_SQ_PSN) as c_int) {
        0 => Ok(()),
        e => Err(e.abs()),
    }
}

/// The CQs (each with a completion channel) the id makes when the program gives none.
unsafe fn create_cqs(id: *mut rdma_cm_id, send: u32, recv: u32) -> Result<(), c_int> {
    let i = &mut *id;
    let make = |size: u32, ch: &mut *mut ibv_comp_channel, cq: &mut *mut ibv_cq| {
        if size == 0 {
            return Ok(());
        }
        *ch = ibv_create_comp_channel(i.verbs);
        if ch.is_null() {
            return Err(libc::ENOMEM);
        }
        *cq = ibv_create_cq(i.verbs, size as c_int, id.cast(), *ch, 0);
        if cq.is_null() {
            return Err(libc::ENOMEM);
        }
        Ok(())
    };
    let (mut rch, mut rcq) = (i.recv_cq_channel, i.recv_cq);
    let (mut sch, mut scq) = (i.send_cq_channel, i.send_cq);
    let made = make(recv, &mut rch, &mut rcq).and_then(|()| make(send, &mut sch, &mut scq));
    (i.recv_cq_channel, i.recv_cq, i.send_cq_channel, i.send_cq) = (rch, rcq, sch, scq);
    if made.is_err() {
        destroy_cqs(id);
    }
    made
}

unsafe fn destroy_cqs(id: *mut rdma_cm_id) {
    let i = &mut *id;
    if !i.recv_cq.is_null() {
        ibv_destroy_cq(i.recv_cq);
        if !i.send_cq.is_null() && i.send_cq != i.recv_cq {
            ibv_destroy_cq(i.send_cq);
        }
        i.send_cq = std::ptr::null_mut();
        i.recv_cq = std::ptr::null_mut();
    }
    if !i.recv_cq_channel.is_null() {
        ibv_destroy_comp_channel(i.recv_cq_channel);
        if !i.send_cq_channel.is_null() && i.send_cq_channel != i.recv_cq_channel {
            ibv_destroy_comp_channel(i.send_cq_channel);
        }
        i.send_cq_channel = std::ptr::null_mut();
        i.recv_cq_channel = std::ptr::null_mut();
    }
}

/// `ibv_create_qp_ex` as `<infiniband/verbs.h>` inlines it: plain `ibv_create_qp` when only
/// the PD is given, else the context's extended operation.
unsafe fn create_qp_ex(context: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    if (*attr).comp_mask == IBV_QP_INIT_ATTR_PD {
        return ibv_create_qp((*attr).pd, attr.cast());
    }
    if (*context).abi_compat as usize != VERBS_ABI_IS_EXTENDED {
        fail(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    }
    let vctx = context
        .cast::<u8>()
        .sub(offset_of!(verbs_context, context))
        .cast::<verbs_context>();
    match (*vctx).create_qp_ex {
        Some(f) => f(context, attr),
        None => {
            fail(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    }
}

exported! {
    /// `rdma_create_qp_ex`: the QP on the id's device (the id's PD unless the program names
    /// one of that device), CQs made if none are given, and the QP taken to its first states.
    fn rdma_create_qp_ex(id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> c_int {
        if id.is_null() || attr.is_null() || !(*id).qp.is_null() {
            return fail(libc::EINVAL);
        }
        let i = &mut *id;
        let a = &mut *attr;
        if i.verbs.is_null() {
            return fail(libc::EINVAL);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
            a.comp_mask |= IBV_QP_INIT_ATTR_PD;
            a.pd = i.pd;
        } else if (*a.pd).context != i.verbs {
            return fail(libc::EINVAL);
        }
        if (!i.recv_cq.is_null() && !a.recv_cq.is_null() && i.recv_cq != a.recv_cq)
            || (!i.send_cq.is_null() && !a.send_cq.is_null() && i.send_cq != a.send_cq)
        {
            return fail(libc::EINVAL);
        }
        let send = if a.send_cq.is_null() && i.send_cq.is_null() { a.cap.max_send_wr } else { 0 };
        let recv = if a.recv_cq.is_null() && i.recv_cq.is_null() { a.cap.max_recv_wr } else { 0 };
        if let Err(e) = create_cqs(id, send, recv) {
            return fail(e);
        }
        if a.send_cq.is_null() {
            a.send_cq = i.send_cq;
        }
        if a.recv_cq.is_null() {
            a.recv_cq = i.recv_cq;
        }
        if !i.srq.is_null() && a.srq.is_null() {
            a.srq = i.srq;
        }
        let qp = create_qp_ex(i.verbs, attr);
        if qp.is_null() {
            let errno = *libc::__errno_location();
            destroy_cqs(id);
            return fail(errno);
        }
        if let Err(e) = init_qp(id, qp) {
            ibv_destroy_qp(qp);
            destroy_cqs(id);
            return fail(e);
        }
        i.pd = (*qp).pd;
        i.qp = qp;
        0
    }

    /// `rdma_create_qp`.
    fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> c_int {
        if id.is_null() || qp_init_attr.is_null() {
            return fail(libc::EINVAL);
        }
        let mut ex: ibv_qp_init_attr_ex = std::mem::zeroed();
        std::ptr::copy_nonoverlapping(
            qp_init_attr.cast::<u8>(),
            (&raw mut ex).cast::<u8>(),
            size_of::<ibv_qp_init_attr>(),
        );
        ex.comp_mask = IBV_QP_INIT_ATTR_PD;
        ex.pd = if pd.is_null() { (*id).pd } else { pd };
        let ret = rdma_create_qp_ex(id, &mut ex);
        std::ptr::copy_nonoverlapping(
            (&raw const ex).cast::<u8>(),
            qp_init_attr.cast::<u8>(),
            size_of::<ibv_qp_init_attr>(),
        );
        ret
    }

    /// `rdma_destroy_qp`: the QP and the CQs the id made for it.
    fn rdma_destroy_qp(id: *mut rdma_cm_id) {
        if id.is_null() {
            return;
        }
        if !(*id).qp.is_null() {
            ibv_destroy_qp((*id).qp);
        }
        (*id).qp = std::ptr::null_mut();
        destroy_cqs(id);
    }

    /// `rdma_create_srq_ex`: a basic SRQ (XRC needs XRC domains, which softrnic lacks).
    fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> c_int {
        if id.is_null() || attr.is_null() {
            return fail(libc::EINVAL);
        }
        let a = &mut *attr;
        if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type != IBV_SRQT_BASIC {
            return fail(libc::EOPNOTSUPP);
        }
        let pd = if a.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0 && !a.pd.is_null() {
            a.pd
        } else {
            (*id).pd
        };
        let mut basic = ibv_srq_init_attr {
            srq_context: a.srq_context,
            attr: a.attr,
        };
        let srq = ibv_create_srq(pd, &mut basic);
        if srq.is_null() {
            return -1;
        }
        a.attr = basic.attr;
        (*id).srq = srq;
        0
    }

    /// `rdma_create_srq`.
    fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> c_int {
        if attr.is_null() {
            return fail(libc::EINVAL);
        }
        let mut ex: ibv_srq_init_attr_ex = std::mem::zeroed();
        ex.srq_context = (*attr).srq_context;
        ex.attr = (*attr).attr;
        ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
        ex.srq_type = IBV_SRQT_BASIC;
        ex.pd = pd;
        let ret = rdma_create_srq_ex(id, &mut ex);
        (*attr).attr = ex.attr;
        ret
    }

    /// `rdma_destroy_srq`.
    fn rdma_destroy_srq(id: *mut rdma_cm_id) {
        if id.is_null() || (*id).srq.is_null() {
            return;
        }
        seterrno(ibv_destroy_srq((*id).srq));
        (*id).srq = std::ptr::null_mut();
    }
}
