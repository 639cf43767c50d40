//! Multicast joins (`rdma_join_multicast(_ex)`, `rdma_leave_multicast`): the daemon answers a
//! join with the group's address handle, and the library attaches the id's QP to the group
//! when the program reads MULTICAST_JOIN, and detaches it on leave, as rdma-core's librdmacm
//! does (`ucma_process_join`).

use core::ffi::{c_int, c_void};
use std::net::SocketAddr;

use softrnic_verbs_abi::abi::ibv_gid;

use crate::abi::*;
use crate::channel::client;
use crate::id::{complete, private, wait_acked_join};
use crate::{errno_of, fail, sockaddr, verbs};

/// One join of an id.
pub(crate) struct Mc {
    handle: u32,
    addr: SocketAddr,
    send_only: bool,
    /// The program's context for the join (handed back as the events' private data).
    context: usize,
    /// The group's GID and LID, from MULTICAST_JOIN.
    mgid: Option<ibv_gid>,
    mlid: u16,
}

/// The group address of a join: IPv4 or IPv6 (rdma-core's `ucma_addrlen`: EINVAL for other
/// families; AF_IB groups need an InfiniBand subnet).
unsafe fn group(addr: *const libc::sockaddr) -> Result<SocketAddr, c_int> {
    match sockaddr::read(addr) {
        Ok(a) => Ok(a),
        Err(_) if !addr.is_null() && c_int::from((*addr).sa_family) == libc::AF_IB => {
            Err(libc::EAFNOSUPPORT)
        }
        Err(_) => Err(libc::EINVAL),
    }
}

unsafe fn join(
    id: *mut rdma_cm_id,
    addr: *const libc::sockaddr,
    send_only: bool,
    context: *mut c_void,
) -> Result<(), c_int> {
    let a = group(addr)?;
    let p = private(id);
    {
        // Held across the request, so that the join's event, read by another thread, finds
        // the join.
        let mut mcs = p.mcs.lock().unwrap_or_else(|e| e.into_inner());
        let handle = client(p.id.channel)
            .cm_join(p.handle, a)
            .map_err(|e| errno_of("rdma_join_multicast", &e))?;
        mcs.push(Mc {
            handle,
            addr: a,
            send_only,
            context: context as usize,
            mgid: None,
            mlid: 0,
        });
    }
    complete(id)
}

/// The library's share of MULTICAST_JOIN and MULTICAST_ERROR: the join's context as private
/// data and, for a join, the QP attached (a failure turns the event into MULTICAST_ERROR with
/// status -1, as rdma-core's `rdma_seterrno` gives). Whether the event is skipped (its join
/// was left).
pub(crate) unsafe fn process(
    id: *mut rdma_cm_id,
    out: &mut rdma_cm_event,
    mc: Option<u32>,
) -> bool {
    let p = private(id);
    let mut mcs = p.mcs.lock().unwrap_or_else(|e| e.into_inner());
    let Some(m) = mc.and_then(|h| mcs.iter_mut().find(|m| m.handle == h)) else {
        return true;
    };
    out.param.ud.private_data = m.context as *const c_void;
    if out.event != RDMA_CM_EVENT_MULTICAST_JOIN {
        return false;
    }
    let ah = &out.param.ud.ah_attr;
    m.mgid = Some(ah.grh.dgid);
    m.mlid = ah.dlid;
    if !p.id.qp.is_null() && !m.send_only {
        let r = verbs::ibv_attach_mcast(p.id.qp, &ah.grh.dgid, ah.dlid);
        if r != 0 {
            out.event = RDMA_CM_EVENT_MULTICAST_ERROR;
            out.status = crate::seterrno(r);
        }
    }
    false
}

unsafe fn leave(id: *mut rdma_cm_id, addr: *const libc::sockaddr) -> Result<(), c_int> {
    let a = group(addr)?;
    let p = private(id);
    let m = {
        let mut mcs = p.mcs.lock().unwrap_or_else(|e| e.into_inner());
        let at = mcs
            .iter()
            .position(|m| m.addr == a)
            .ok_or(libc::EADDRNOTAVAIL)?;
        mcs.remove(at)
    };
    if !p.id.qp.is_null()
        && !m.send_only
        && let Some(mgid) = m.mgid
    {
        verbs::ibv_detach_mcast(p.id.qp, &mgid, m.mlid);
    }
    let reported = client(p.id.channel)
        .cm_leave(m.handle)
        .map_err(|e| errno_of("rdma_leave_multicast", &e))?;
    wait_acked_join(p, m.handle, reported);
    Ok(())
}

fn result(r: Result<(), c_int>) -> c_int {
    r.map_or_else(fail, |()| 0)
}

exported! {
    /// `rdma_join_multicast`: as a full member.
    fn rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut libc::sockaddr, context: *mut c_void) -> c_int {
        if id.is_null() {
            return fail(libc::EINVAL);
        }
        result(join(id, addr, false, context))
    }

    /// `rdma_join_multicast_ex`: with join flags (full member, or send-only full member,
    /// whose QP is not attached).
    fn rdma_join_multicast_ex(id: *mut rdma_cm_id, attr: *mut rdma_cm_join_mc_attr_ex, context: *mut c_void) -> c_int {
        if id.is_null() || attr.is_null() {
            return fail(libc::EINVAL);
        }
        let a = &*attr;
        if a.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
            return fail(libc::EOPNOTSUPP);
        }
        if a.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0
            || a.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0
            || a.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED
        {
            return fail(libc::EINVAL);
        }
        let send_only = a.join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
        result(join(id, a.addr, send_only, context))
    }

    /// `rdma_leave_multicast`: EADDRNOTAVAIL for a group the id has not joined. It returns
    /// once the join's events the program read are acknowledged.
    fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
        if id.is_null() {
            return fail(libc::EINVAL);
        }
        result(leave(id, addr))
    }
}
