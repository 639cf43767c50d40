//! `rsetsockopt` and `rgetsockopt`.

use core::ffi::{c_int, c_void};

use libc::socklen_t;

use super::{Inner, QP_MAX_SIZE, errno, proto, state};
use crate::abi::*;

/// Reads an `int` option value.
unsafe fn int_opt(val: *const c_void, len: socklen_t) -> Result<c_int, c_int> {
    if val.is_null() || (len as usize) < size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    Ok(*val.cast::<c_int>())
}

pub(super) unsafe fn setsockopt(
    g: &mut Inner,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> Result<(), c_int> {
    let v = int_opt(val, len);
    let (bits, on): (Option<&mut u64>, bool) = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
            // rdma_cm refuses it once bound; rdma-core then keeps the socket's own flag.
            let _ = crate::id::rdma_set_option(
                g.s.id,
                RDMA_OPTION_ID,
                RDMA_OPTION_ID_REUSEADDR,
                val.cast_mut(),
                len as usize,
            );
            (Some(&mut g.so_opts), v? != 0)
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            if !g.s.has_buffers() {
                g.s.rbuf_size = (v? as u32) << 1;
            }
            (None, false)
        }
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            if !g.s.has_buffers() {
                g.s.sbuf_size = ((v? as u32) << 1).max(2048 << 1);
            }
            (None, false)
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if val.is_null() || (len as usize) < size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            // Inverted, so that the default (0) is on.
            (
                Some(&mut g.so_opts),
                (*val.cast::<libc::linger>()).l_onoff == 0,
            )
        }
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
            if v? != 0 && g.keepalive_time == 0 {
                g.keepalive_time = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time")
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                    .unwrap_or(7200);
            }
            (Some(&mut g.so_opts), v? != 0)
        }
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => (Some(&mut g.so_opts), v? != 0),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG) => {
            (None, false)
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            if v? <= 0 {
                return Err(libc::EINVAL);
            }
            g.keepalive_time = v? as u32;
            (None, false)
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => (Some(&mut g.tcp_opts), v? != 0),
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
            if crate::id::rdma_set_option(
                g.s.id,
                RDMA_OPTION_ID,
                RDMA_OPTION_ID_AFONLY,
                val.cast_mut(),
                len as usize,
            ) != 0
            {
                return Err(errno());
            }
            (Some(&mut g.ipv6_opts), v? != 0)
        }
        (SOL_RDMA, _) if g.s.state >= state::OPENING => return Err(libc::EINVAL),
        (SOL_RDMA, RDMA_SQSIZE) => {
            g.s.sq_size = (v? as u32).min(QP_MAX_SIZE) as u16;
            (None, false)
        }
        (SOL_RDMA, RDMA_RQSIZE) => {
            g.s.rq_size = (v? as u32).min(QP_MAX_SIZE) as u16;
            (None, false)
        }
        (SOL_RDMA, RDMA_INLINE) => {
            g.s.sq_inline = (v? as u32).min(QP_MAX_SIZE) as u16;
            (None, false)
        }
        (SOL_RDMA, RDMA_IOMAPSIZE) => {
            let scaled = proto::value_to_scale(v? as u32, 8) as u8;
            g.s.target_iomap_size = proto::scale_to_value(u32::from(scaled), 8) as u16;
            (None, false)
        }
        (SOL_RDMA, RDMA_ROUTE) => {
            if val.is_null() {
                return Err(libc::EINVAL);
            }
            g.route = Some(std::slice::from_raw_parts(val.cast::<u8>(), len as usize).to_vec());
            (None, false)
        }
        _ => return Err(libc::EOPNOTSUPP),
    };
    if let Some(bits) = bits {
        if on {
            *bits |= 1 << name;
        } else {
            *bits &= !(1 << name);
        }
    }
    Ok(())
}

pub(super) unsafe fn getsockopt(
    g: &mut Inner,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> Result<(), c_int> {
    if val.is_null() || len.is_null() {
        return Err(libc::EINVAL);
    }
    let bit = |bits: u64| c_int::from(bits & (1 << name) != 0);
    let v = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            bit(g.so_opts)
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => g.s.rbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => g.s.sbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if (*len as usize) < size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            *val.cast::<libc::linger>() = libc::linger {
                l_onoff: 1 - bit(g.so_opts),
                l_linger: 0,
            };
            *len = size_of::<libc::linger>() as socklen_t;
            return Ok(());
        }
        (libc::SOL_SOCKET, libc::SO_ERROR) => std::mem::take(&mut g.s.err),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => 1,
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => g.keepalive_time as c_int,
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => bit(g.tcp_opts),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
            let route = &(*g.s.id).route;
            if route.num_paths > 0 && !route.path_rec.is_null() {
                1 << (7 + c_int::from((*route.path_rec).mtu))
            } else {
                2048
            }
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => bit(g.ipv6_opts),
        (SOL_RDMA, RDMA_SQSIZE) => c_int::from(g.s.sq_size),
        (SOL_RDMA, RDMA_RQSIZE) => c_int::from(g.s.rq_size),
        (SOL_RDMA, RDMA_INLINE) => c_int::from(g.s.sq_inline),
        (SOL_RDMA, RDMA_IOMAPSIZE) => c_int::from(g.s.target_iomap_size),
        _ => return Err(libc::EOPNOTSUPP),
    };
    if (*len as usize) < size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    *val.cast::<c_int>() = v;
    *len = size_of::<c_int>() as socklen_t;
    Ok(())
}
