//! Queue pairs and shared receive queues: creation, state changes, and posting work requests
//! into their rings.

use std::ffi::{c_int, c_void};
use std::ptr;

use softrnic_client::client::{Client, Object};
use softrnic_emu_core::{Gid, QpInit, QpType};

use crate::abi::*;
use crate::context::{Context, State};
use crate::{convert, or_null, qp_ex};

/// A QP. `ibv_qp_ex` comes first and begins with `ibv_qp`, so both of the program's pointers
/// lead here.
#[repr(C)]
pub struct Qp {
    /// What the program reads.
    pub ex: ibv_qp_ex,
    /// Where programs built against rdma-core 45 or later find `ibv_qp_ex::wr_flush`.
    wr_flush: ibv_wr_flush_fn,
    qp_type: QpType,
    sq_sig_all: bool,
    /// Work requests being built with the `ibv_wr_*` API.
    pub(crate) batch: qp_ex::Batch,
}

impl Qp {
    /// The QP's context.
    pub fn ctx(&self) -> &Context {
        // SAFETY: a QP lives within its context.
        unsafe { Context::from_ibv(self.ex.qp_base.context) }
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.ex.qp_base.qp_num
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// What the program reads of QP `qpn`, in RESET, without PD, CQs or SRQ.
    pub(crate) fn base(
        context: *mut ibv_context,
        qpn: u32,
        qp_type: u32,
        qp_context: *mut c_void,
    ) -> ibv_qp {
        // SAFETY: ibv_qp is plain data; a zeroed pthread mutex/cond is their initializer.
        let mut q: ibv_qp = unsafe { std::mem::zeroed() };
        q.context = context;
        q.qp_context = qp_context;
        q.handle = qpn;
        q.qp_num = qpn;
        q.state = IBV_QPS_RESET;
        q.qp_type = qp_type;
        q
    }

    /// The program's QP object for `base`, listed in its context.
    ///
    /// # Safety
    /// `base.context` must be one of ours.
    pub(crate) unsafe fn boxed(base: ibv_qp, qp_type: QpType, sq_sig_all: bool) -> *mut Qp {
        // SAFETY: plain data, as above.
        let mut ex: ibv_qp_ex = unsafe { std::mem::zeroed() };
        ex.qp_base = base;
        qp_ex::install(&mut ex);
        let p = Box::into_raw(Box::new(Qp {
            ex,
            wr_flush: Some(qp_ex::wr_flush),
            qp_type,
            sq_sig_all,
            batch: qp_ex::Batch::default(),
        }));
        // SAFETY: the caller's.
        let ctx = unsafe { Context::from_ibv(base.context) };
        ctx.lock()
            .client
            .set_owner(Object::Qp(base.qp_num), p as usize);
        p
    }
}

/// An SRQ: its C structure and what `ibv_query_srq` reports.
#[repr(C)]
pub struct Srq {
    /// What the program reads.
    pub srq: ibv_srq,
    id: u32,
    max_wr: u32,
    max_sge: u32,
    /// The armed limit; 0 once it fired (IBA 10.2.9.4: the limit disarms when reached).
    pub(crate) limit: u32,
}

/// The send operations the extended API can build.
const SEND_OPS_SUPPORTED: u64 = (IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_FLUSH
    | IBV_QP_EX_WITH_ATOMIC_WRITE) as u64;

/// Makes a QP from extended attributes (the classic call passes the same leading fields).
unsafe fn create(context: *mut ibv_context, a: &mut ibv_qp_init_attr_ex) -> Result<*mut Qp, c_int> {
    let qp_type = convert::qp_type(a.qp_type)?;
    // An XRC initiator receives nothing: it needs no receive CQ.
    let receives = qp_type != QpType::XrcSend;
    if a.pd.is_null() || a.send_cq.is_null() || (receives && a.recv_cq.is_null() && a.srq.is_null())
    {
        return Err(libc::EINVAL);
    }
    let recv_cq = if a.recv_cq.is_null() {
        a.send_cq
    } else {
        a.recv_cq
    };
    let init = QpInit {
        qp_type,
        send_cq: (*a.send_cq).handle,
        recv_cq: (*recv_cq).handle,
        srq: (!a.srq.is_null()).then(|| (*a.srq).handle),
        cap: convert::cap(&a.cap),
        sq_sig_all: a.sq_sig_all != 0,
        block_self_mcast_lb: a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0
            && a.create_flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0,
    };
    let ctx = Context::from_ibv(context);
    let pd = (*a.pd).handle;
    let qpn = ctx.call("ibv_create_qp", |c| c.create_qp(pd, init))?;
    let mut base = Qp::base(context, qpn, a.qp_type, a.qp_context);
    base.pd = a.pd;
    base.send_cq = a.send_cq;
    base.recv_cq = if receives { recv_cq } else { ptr::null_mut() };
    base.srq = a.srq;
    Ok(Qp::boxed(base, qp_type, a.sq_sig_all != 0))
}

/// `verbs_context.create_qp_ex`: RSS, TSO and creation flags other than blocking multicast
/// self-loopback are EOPNOTSUPP.
pub unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    if context.is_null() || attr.is_null() {
        return or_null(Err(libc::EINVAL));
    }
    let a = &mut *attr;
    let known = IBV_QP_INIT_ATTR_PD
        | IBV_QP_INIT_ATTR_XRCD
        | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
        | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    let unsupported = a.comp_mask & !known != 0
        || (a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0
            && a.create_flags & !IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0)
        || (a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0
            && a.send_ops_flags & !SEND_OPS_SUPPORTED != 0);
    if unsupported {
        return or_null(Err(libc::EOPNOTSUPP));
    }
    if a.qp_type == IBV_QPT_XRC_RECV {
        return or_null(crate::xrc::create_recv_qp(context, a).map(|p| p.cast()));
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
        return or_null(Err(libc::EINVAL));
    }
    or_null(create(context, a).map(|p| p.cast()))
}

/// Attaches or detaches `qp` to or from group `gid` with `call`: 0 or the errno.
unsafe fn multicast(
    name: &str,
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    call: fn(&mut Client, u32, Gid) -> Result<(), softrnic_client::client::Error>,
) -> c_int {
    if qp.is_null() || gid.is_null() {
        return libc::EINVAL;
    }
    let q = &*qp.cast::<Qp>();
    let (qpn, gid) = (q.qpn(), Gid((*gid).raw));
    q.ctx().call(name, |c| call(c, qpn, gid)).err().unwrap_or(0)
}

/// Posts a chain of work requests: each converted and pushed into a ring, under one lock and
/// with one doorbell. The first refused one goes back in `bad` with its errno.
unsafe fn post_chain<W>(
    ctx: &Context,
    call: &str,
    first: *mut W,
    bad: *mut *mut W,
    next: impl Fn(&W) -> *mut W,
    mut push: impl FnMut(&mut State, &W) -> Result<(), c_int>,
) -> c_int {
    let mut state = ctx.lock();
    let mut wr = first;
    let mut result = 0;
    while !wr.is_null() {
        if let Err(e) = push(&mut state, &*wr) {
            if !bad.is_null() {
                *bad = wr;
            }
            result = e;
            break;
        }
        wr = next(&*wr);
    }
    if let Err(e) = state.client.doorbell()
        && result == 0
    {
        // The daemon is gone: nothing of the chain will be done.
        if !bad.is_null() {
            *bad = first;
        }
        result = errno(e);
    }
    if result != 0 && std::env::var_os("SOFTRNIC_DEBUG").is_some() {
        eprintln!("softrnic: {call}: errno {result}");
    }
    result
}

fn errno(e: softrnic_client::client::Error) -> c_int {
    crate::fail("post", &e)
}

/// `ops.post_send`.
pub unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    let q = &*qp.cast::<Qp>();
    let (qpn, t) = (q.qpn(), q.qp_type);
    post_chain(
        q.ctx(),
        "ibv_post_send",
        wr,
        bad,
        |w| w.next,
        |s, w| {
            let wr = convert::send_wr(w, t, std::mem::take(&mut s.sgl))?;
            let mut buf = [0u8; convert::MAX_INLINE];
            let inline = convert::inline_bytes(&wr, &mut buf);
            let pushed = s.client.push_send(qpn, &wr, inline).map_err(errno);
            s.sgl = wr.sgl;
            pushed
        },
    )
}

/// `ops.post_recv`.
pub unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let q = &*qp.cast::<Qp>();
    if !q.ex.qp_base.srq.is_null() {
        // Receives go to the SRQ (rxe: EINVAL).
        if !bad.is_null() {
            *bad = wr;
        }
        return libc::EINVAL;
    }
    let qpn = q.qpn();
    post_chain(
        q.ctx(),
        "ibv_post_recv",
        wr,
        bad,
        |w| w.next,
        |s, w| {
            let wr = convert::recv_wr(w, std::mem::take(&mut s.sgl))?;
            let pushed = s.client.push_recv(qpn, &wr).map_err(errno);
            s.sgl = wr.sgl;
            pushed
        },
    )
}

/// `ops.post_srq_recv`.
pub unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let s = &*srq.cast::<Srq>();
    let ctx = Context::from_ibv(s.srq.context);
    let id = s.id;
    post_chain(
        ctx,
        "ibv_post_srq_recv",
        wr,
        bad,
        |w| w.next,
        |s, w| {
            let wr = convert::recv_wr(w, std::mem::take(&mut s.sgl))?;
            let pushed = s.client.push_srq_recv(id, &wr).map_err(errno);
            s.sgl = wr.sgl;
            pushed
        },
    )
}

/// Makes an SRQ.
unsafe fn create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> Result<*mut Srq, c_int> {
    if pd.is_null() || attr.is_null() {
        return Err(libc::EINVAL);
    }
    let a = &(*attr).attr;
    let (max_wr, max_sge) = (a.max_wr, a.max_sge);
    let ctx = Context::from_ibv((*pd).context);
    let id = ctx.call("ibv_create_srq", |c| {
        c.create_srq((*pd).handle, max_wr, max_sge)
    })?;
    Ok(Srq::boxed(pd, (*attr).srq_context, id, &(*attr).attr))
}

impl Srq {
    /// The program's SRQ object for SRQ `id` of `pd`, listed in its context.
    ///
    /// # Safety
    /// `pd` must be one of ours.
    pub(crate) unsafe fn boxed(
        pd: *mut ibv_pd,
        srq_context: *mut c_void,
        id: u32,
        attr: &ibv_srq_attr,
    ) -> *mut Srq {
        // SAFETY: plain data; a zeroed pthread mutex/cond is their initializer.
        let mut srq: ibv_srq = unsafe { std::mem::zeroed() };
        // SAFETY: the caller's.
        let context = unsafe { (*pd).context };
        srq.context = context;
        srq.srq_context = srq_context;
        srq.pd = pd;
        srq.handle = id;
        let p = Box::into_raw(Box::new(Srq {
            srq,
            id,
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            limit: 0,
        }));
        // SAFETY: the caller's.
        unsafe { Context::from_ibv(context) }
            .lock()
            .client
            .set_owner(Object::Srq(id), p as usize);
        p
    }

    /// Its number (`ibv_get_srq_num`): the daemon's handle.
    pub(crate) fn num(&self) -> u32 {
        self.id
    }
}

exported! {
    /// `ibv_create_qp`.
    fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
        if pd.is_null() || attr.is_null() {
            return or_null(Err(libc::EINVAL));
        }
        let i = &*attr;
        // SAFETY: plain data.
        let mut a: ibv_qp_init_attr_ex = std::mem::zeroed();
        a.qp_context = i.qp_context;
        a.send_cq = i.send_cq;
        a.recv_cq = i.recv_cq;
        a.srq = i.srq;
        a.cap = i.cap;
        a.qp_type = i.qp_type;
        a.sq_sig_all = i.sq_sig_all;
        a.comp_mask = IBV_QP_INIT_ATTR_PD;
        a.pd = pd;
        or_null(create((*pd).context, &mut a).map(|p| p.cast()))
    }

    /// `ibv_modify_qp`.
    fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int {
        if qp.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        let q = &*qp.cast::<Qp>();
        let (a, mask) = match convert::qp_attr(&*attr, attr_mask) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let qpn = q.qpn();
        match q.ctx().call("ibv_modify_qp", |c| c.modify_qp(qpn, a, mask)) {
            Ok(()) => {
                if attr_mask as u32 & IBV_QP_STATE != 0 {
                    (*qp).state = (*attr).qp_state;
                }
                0
            }
            Err(e) => e,
        }
    }

    /// `ibv_query_qp`: every attribute, whatever the mask asks.
    fn ibv_query_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int, init_attr: *mut ibv_qp_init_attr) -> c_int {
        let _ = attr_mask;
        if qp.is_null() || attr.is_null() || init_attr.is_null() {
            return libc::EINVAL;
        }
        let q = &*qp.cast::<Qp>();
        let qpn = q.qpn();
        let (a, cap) = match q.ctx().call("ibv_query_qp", |c| c.query_qp(qpn)) {
            Ok(x) => x,
            Err(e) => return e,
        };
        *attr = convert::ibv_qp_attr_of(&a, &cap);
        (*qp).state = a.qp_state as u32;
        let i = &mut *init_attr;
        let b = &q.ex.qp_base;
        i.qp_context = b.qp_context;
        i.send_cq = b.send_cq;
        i.recv_cq = b.recv_cq;
        i.srq = b.srq;
        i.cap = convert::qp_cap(&cap);
        i.qp_type = b.qp_type;
        i.sq_sig_all = c_int::from(q.sq_sig_all);
        0
    }

    /// `ibv_destroy_qp`.
    fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
        if qp.is_null() {
            return libc::EINVAL;
        }
        let q = qp.cast::<Qp>();
        let qpn = (*q).qpn();
        (*q).ctx().destroy("ibv_destroy_qp", q, |s| {
            s.client.destroy_qp(qpn)
        })
    }

    /// `ibv_attach_mcast`: the UD QP receives what is sent to the group. On RoCE the LID is
    /// ignored (Annex A17).
    fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
        let _ = lid;
        multicast("ibv_attach_mcast", qp, gid, Client::attach_mcast)
    }

    /// `ibv_detach_mcast`.
    fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
        let _ = lid;
        multicast("ibv_detach_mcast", qp, gid, Client::detach_mcast)
    }

    /// `ibv_qp_to_qp_ex`.
    fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
        qp.cast()
    }

    /// `ibv_create_srq` (the limit is armed with `ibv_modify_srq`).
    fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
        or_null(create_srq(pd, attr).map(|p| p.cast()))
    }

    /// `ibv_modify_srq`: arms the limit (EINVAL beyond max_wr); resizing is EOPNOTSUPP.
    fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
        if srq.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        let s = &mut *srq.cast::<Srq>();
        let mask = mask as u32;
        if mask & IBV_SRQ_MAX_WR != 0 {
            return libc::EOPNOTSUPP;
        }
        if mask & IBV_SRQ_LIMIT != 0 {
            let limit = (*attr).srq_limit;
            if limit > s.max_wr {
                return libc::EINVAL;
            }
            let id = s.id;
            let ctx = Context::from_ibv(s.srq.context);
            if let Err(e) = ctx.call("ibv_modify_srq", |c| c.modify_srq(id, limit)) {
                return e;
            }
            s.limit = limit;
        }
        0
    }

    /// `ibv_query_srq`.
    fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
        if srq.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        let s = &*srq.cast::<Srq>();
        *attr = ibv_srq_attr { max_wr: s.max_wr, max_sge: s.max_sge, srq_limit: s.limit };
        0
    }

    /// `ibv_destroy_srq`: EBUSY while a QP uses it.
    fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
        if srq.is_null() {
            return libc::EINVAL;
        }
        let s = srq.cast::<Srq>();
        let id = (*s).id;
        Context::from_ibv((*srq).context).destroy("ibv_destroy_srq", s, |st| {
            st.client.destroy_srq(id)
        })
    }
}
