//! `rdma_getaddrinfo` (getaddrinfo(3) with RDMA's QP types and port spaces, as rdma-core's
//! `addrinfo.c` maps them) and the endpoints `rdma_create_ep` makes from its answers.

use core::ffi::{c_char, c_int};

use softrnic_verbs_abi::abi::{IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, ibv_pd, ibv_qp_init_attr};

use crate::abi::*;
use crate::{fail, id, qp};

/// A `malloc`ed copy of `len` bytes of address at `addr`, as rdma-core's `ucma_copy_addr`.
unsafe fn copy_addr(addr: *const libc::sockaddr, len: libc::socklen_t) -> *mut libc::sockaddr {
    let copy = libc::malloc(len as usize).cast::<libc::sockaddr>();
    if !copy.is_null() {
        std::ptr::copy_nonoverlapping(addr.cast::<u8>(), copy.cast::<u8>(), len as usize);
    }
    copy
}

/// getaddrinfo(3)'s hints for `rai` (rdma-core's `ucma_convert_to_ai`).
fn to_ai(rai: &rdma_addrinfo) -> libc::addrinfo {
    // SAFETY: plain data.
    let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
    if rai.ai_flags & RAI_PASSIVE != 0 {
        ai.ai_flags = libc::AI_PASSIVE;
    }
    if rai.ai_flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    ai.ai_family = rai.ai_family;
    ai.ai_socktype = match rai.ai_qp_type as u32 {
        IBV_QPT_RC | IBV_QPT_UC => libc::SOCK_STREAM,
        IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match rai.ai_port_space as u32 {
        RDMA_PS_TCP => libc::IPPROTO_TCP,
        RDMA_PS_UDP | RDMA_PS_IPOIB => libc::IPPROTO_UDP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
        _ => 0,
    };
    ai
}

/// Fills `rai` from getaddrinfo's first answer (rdma-core's `ucma_convert_to_rai`).
unsafe fn from_ai(rai: &mut rdma_addrinfo, hints: &rdma_addrinfo, ai: &libc::addrinfo) -> c_int {
    rai.ai_qp_type = if hints.ai_qp_type != 0 {
        hints.ai_qp_type
    } else {
        match ai.ai_socktype {
            libc::SOCK_STREAM => IBV_QPT_RC as c_int,
            libc::SOCK_DGRAM => IBV_QPT_UD as c_int,
            _ => 0,
        }
    };
    rai.ai_port_space = if hints.ai_port_space != 0 {
        hints.ai_port_space
    } else {
        match ai.ai_protocol {
            libc::IPPROTO_TCP => RDMA_PS_TCP as c_int,
            libc::IPPROTO_UDP => RDMA_PS_UDP as c_int,
            _ => 0,
        }
    };
    rai.ai_family = ai.ai_family;
    let canon = if ai.ai_canonname.is_null() {
        std::ptr::null_mut()
    } else {
        libc::strdup(ai.ai_canonname)
    };
    let addr = copy_addr(ai.ai_addr, ai.ai_addrlen);
    if addr.is_null() {
        return libc::EAI_MEMORY;
    }
    if ai.ai_flags & libc::AI_PASSIVE != 0 {
        rai.ai_flags = RAI_PASSIVE;
        rai.ai_src_canonname = canon;
        (rai.ai_src_addr, rai.ai_src_len) = (addr, ai.ai_addrlen);
    } else {
        rai.ai_dst_canonname = canon;
        (rai.ai_dst_addr, rai.ai_dst_len) = (addr, ai.ai_addrlen);
    }
    0
}

exported! {
    /// `rdma_getaddrinfo`: getaddrinfo's error code (EAI_*) on failure, as rdma-core returns
    /// it.
    fn rdma_getaddrinfo(
        node: *const c_char,
        service: *const c_char,
        hints: *const rdma_addrinfo,
        res: *mut *mut rdma_addrinfo,
    ) -> c_int {
        if (node.is_null() && service.is_null() && hints.is_null()) || res.is_null() {
            return fail(libc::EINVAL);
        }
        let nohints: rdma_addrinfo = std::mem::zeroed();
        let hints = hints.as_ref().unwrap_or(&nohints);
        let rai = libc::calloc(1, size_of::<rdma_addrinfo>()).cast::<rdma_addrinfo>();
        if rai.is_null() {
            return fail(libc::ENOMEM);
        }
        let r = &mut *rai;
        let ret = if !node.is_null() || !service.is_null() {
            let ai_hints = to_ai(hints);
            // Without hints, getaddrinfo gets none either (rdma-core's `nohints`).
            let with = if std::ptr::eq(hints, &nohints) {
                std::ptr::null()
            } else {
                &raw const ai_hints
            };
            let mut ai: *mut libc::addrinfo = std::ptr::null_mut();
            match libc::getaddrinfo(node, service, with, &mut ai) {
                0 => {
                    let ret = from_ai(r, hints, &*ai);
                    libc::freeaddrinfo(ai);
                    ret
                }
                e => e,
            }
        } else {
            r.ai_flags = hints.ai_flags;
            r.ai_family = hints.ai_family;
            r.ai_qp_type = hints.ai_qp_type;
            r.ai_port_space = hints.ai_port_space;
            if hints.ai_dst_len != 0 {
                r.ai_dst_addr = copy_addr(hints.ai_dst_addr, hints.ai_dst_len);
                r.ai_dst_len = hints.ai_dst_len;
            }
            0
        };
        if ret == 0 && r.ai_src_len == 0 && hints.ai_src_len != 0 {
            r.ai_src_addr = copy_addr(hints.ai_src_addr, hints.ai_src_len);
            r.ai_src_len = hints.ai_src_len;
        }
        if ret != 0 {
            rdma_freeaddrinfo(rai);
            return ret;
        }
        *res = rai;
        0
    }

    /// `rdma_freeaddrinfo`.
    fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
        let mut next = res;
        while let Some(r) = next.as_mut() {
            next = r.ai_next;
            for p in [
                r.ai_connect,
                r.ai_route,
                r.ai_src_canonname.cast(),
                r.ai_dst_canonname.cast(),
                r.ai_src_addr.cast(),
                r.ai_dst_addr.cast(),
            ] {
                libc::free(p);
            }
            libc::free((r as *mut rdma_addrinfo).cast());
        }
    }

    /// `rdma_create_ep`: a synchronous id, bound (passive: its QP attributes kept for
    /// `rdma_get_request`) or resolved with a QP (active).
    fn rdma_create_ep(
        id: *mut *mut rdma_cm_id,
        res: *mut rdma_addrinfo,
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        if id.is_null() || res.is_null() {
            return fail(libc::EINVAL);
        }
        let r = &*res;
        let cm_id = match id::create(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            r.ai_port_space as u32,
            r.ai_qp_type as u32,
        ) {
            Ok(i) => i,
            Err(e) => return fail(e),
        };
        let ret = if r.ai_flags & RAI_PASSIVE != 0 {
            let mut ret = crate::id::rdma_bind_addr(cm_id, r.ai_src_addr);
            if ret == 0 {
                let p = id::private(cm_id);
                if !pd.is_null() {
                    p.id.pd = pd;
                }
                if let Some(attr) = qp_init_attr.as_ref() {
                    let mut attr = *attr;
                    attr.qp_type = r.ai_qp_type as u32;
                    p.qp_init_attr = Some(Box::new(attr));
                }
                ret = 0;
            }
            ret
        } else {
            let mut ret = crate::id::rdma_resolve_addr(cm_id, r.ai_src_addr, r.ai_dst_addr, 2000);
            if ret == 0 {
                ret = crate::id::rdma_resolve_route(cm_id, 2000);
            }
            if ret == 0 && !qp_init_attr.is_null() {
                (*qp_init_attr).qp_type = r.ai_qp_type as u32;
                ret = qp::rdma_create_qp(cm_id, pd, qp_init_attr);
            }
            ret
        };
        if ret != 0 {
            let errno = *libc::__errno_location();
            rdma_destroy_ep(cm_id);
            return fail(errno);
        }
        *id = cm_id;
        0
    }

    /// `rdma_destroy_ep`: its QP, SRQ and id.
    fn rdma_destroy_ep(id: *mut rdma_cm_id) {
        if id.is_null() {
            return;
        }
        if !(*id).qp.is_null() {
            qp::rdma_destroy_qp(id);
        }
        if !(*id).srq.is_null() {
            qp::rdma_destroy_srq(id);
        }
        id::destroy(id);
    }

    /// `rdma_resolve_addrinfo` (rdma-core 65): `rdma_getaddrinfo` for the id, its result told
    /// by an ADDRINFO_RESOLVED event and taken with `rdma_query_addrinfo`. EBUSY while one is
    /// under way; a subnet administrator query (RAI_SA) is not supported on RoCE (ENOTSUP, as
    /// rdma-core for the combinations it refuses); a failed lookup is ENOENT.
    fn rdma_resolve_addrinfo(
        id: *mut rdma_cm_id,
        node: *const c_char,
        service: *const c_char,
        hints: *const rdma_addrinfo,
    ) -> c_int {
        if id.is_null() {
            return fail(libc::EINVAL);
        }
        if hints.as_ref().is_some_and(|h| h.ai_flags & RAI_SA != 0) {
            return fail(libc::ENOTSUP);
        }
        let p = id::private(id);
        {
            let mut r = p.addrinfo.lock().unwrap_or_else(|x| x.into_inner());
            if r.busy {
                return fail(libc::EBUSY);
            }
            r.busy = true;
        }
        let mut ai = std::ptr::null_mut();
        let found = match rdma_getaddrinfo(node, service, hints, &mut ai) {
            0 => Ok(()),
            libc::EAI_SYSTEM => Err(*libc::__errno_location()),
            _ => Err(libc::ENOENT),
        };
        let done = found.and_then(|()| {
            p.addrinfo.lock().unwrap_or_else(|x| x.into_inner()).ai = std::ptr::NonNull::new(ai);
            id::write_event(id, RDMA_CM_EVENT_ADDRINFO_RESOLVED, 0, 0)
        });
        match done.and_then(|()| id::complete(id)) {
            Ok(()) => 0,
            Err(e) => {
                let mut r = p.addrinfo.lock().unwrap_or_else(|x| x.into_inner());
                if let Some(ai) = r.ai.take() {
                    rdma_freeaddrinfo(ai.as_ptr());
                }
                r.busy = false;
                fail(e)
            }
        }
    }

    /// `rdma_query_addrinfo` (rdma-core 65): hands over what `rdma_resolve_addrinfo` found
    /// (ENOENT if nothing is resolved); the program frees it with `rdma_freeaddrinfo`.
    fn rdma_query_addrinfo(id: *mut rdma_cm_id, info: *mut *mut rdma_addrinfo) -> c_int {
        if id.is_null() || info.is_null() {
            return fail(libc::EINVAL);
        }
        let mut r = id::private(id).addrinfo.lock().unwrap_or_else(|x| x.into_inner());
        match r.ai.take() {
            Some(ai) if r.busy => {
                *info = ai.as_ptr();
                r.busy = false;
                0
            }
            _ => fail(libc::ENOENT),
        }
    }
}
