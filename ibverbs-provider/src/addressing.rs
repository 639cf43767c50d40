//! Addressing: the GID types, and address handles made from a received completion
//! (`ibv_init_ah_from_wc`, `ibv_create_ah_from_wc`).

use std::ffi::c_int;
use std::ptr;

use crate::abi::*;
use crate::context::Context;
use crate::set_errno;

/// The GID index holding `gid` (ENOENT if none), as `ibv_find_gid_index`.
fn gid_index(ctx: &Context, gid: [u8; 16]) -> Result<u8, c_int> {
    let gids = ctx.gids()?;
    gids.iter()
        .position(|g| g.0 == gid)
        .map(|i| i as u8)
        .ok_or(libc::ENOENT)
}

/// The address vector answering a received completion: rdma-core's `ibv_init_ah_from_wc` for
/// RoCE v2, reading the IPv4 header at byte 20 of the GRH buffer or the IPv6 header at 0.
unsafe fn ah_from_wc(
    ctx: &Context,
    port: u8,
    wc: &ibv_wc,
    grh: *const u8,
) -> Result<ibv_ah_attr, c_int> {
    // SAFETY: plain data.
    let mut a: ibv_ah_attr = std::mem::zeroed();
    a.dlid = wc.slid;
    a.sl = wc.sl;
    a.src_path_bits = wc.dlid_path_bits;
    a.port_num = port;
    if wc.wc_flags & IBV_WC_GRH == 0 {
        return Ok(a);
    }
    if grh.is_null() {
        return Err(libc::EINVAL);
    }
    let g = std::slice::from_raw_parts(grh, 40);
    a.is_global = 1;
    let (src, dst, hop_limit, tclass) = if g[0] >> 4 != 6 && g[20] >> 4 == 4 {
        let v4 = |at: usize| std::net::Ipv4Addr::new(g[at], g[at + 1], g[at + 2], g[at + 3]);
        let (s, d) = (v4(32), v4(36));
        if d.is_multicast() {
            return Err(libc::EINVAL);
        }
        (
            s.to_ipv6_mapped().octets(),
            d.to_ipv6_mapped().octets(),
            g[28],
            g[21],
        )
    } else if g[0] >> 4 == 6 {
        let addr = |at: usize| <[u8; 16]>::try_from(&g[at..at + 16]).expect("16 bytes");
        if g[24] == 0xff {
            return Err(libc::EINVAL);
        }
        let tclass = (u32::from_be_bytes([g[0], g[1], g[2], g[3]]) >> 20) as u8;
        (addr(8), addr(24), g[7], tclass)
    } else {
        return Err(libc::EPROTONOSUPPORT);
    };
    a.grh.dgid.raw = src;
    a.grh.sgid_index = gid_index(ctx, dst)?;
    a.grh.hop_limit = hop_limit;
    a.grh.traffic_class = tclass;
    Ok(a)
}

exported! {
    /// `ibv_init_ah_from_wc`.
    fn ibv_init_ah_from_wc(context: *mut ibv_context, port_num: u8, wc: *mut ibv_wc, grh: *mut ibv_grh, ah_attr: *mut ibv_ah_attr) -> c_int {
        if context.is_null() || wc.is_null() || ah_attr.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        match ah_from_wc(Context::from_ibv(context), port_num, &*wc, grh.cast()) {
            Ok(a) => {
                *ah_attr = a;
                0
            }
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    }

    /// `ibv_create_ah_from_wc`.
    fn ibv_create_ah_from_wc(pd: *mut ibv_pd, wc: *mut ibv_wc, grh: *mut ibv_grh, port_num: u8) -> *mut ibv_ah {
        if pd.is_null() {
            set_errno(libc::EINVAL);
            return ptr::null_mut();
        }
        // SAFETY: plain data.
        let mut a: ibv_ah_attr = std::mem::zeroed();
        if ibv_init_ah_from_wc((*pd).context, port_num, wc, grh, &mut a) != 0 {
            return ptr::null_mut();
        }
        crate::memory::ibv_create_ah(pd, &mut a)
    }

    /// `ibv_query_gid_type`: every GID is RoCE v2 (`IBV_GID_TYPE_SYSFS_ROCE_V2`).
    fn ibv_query_gid_type(context: *mut ibv_context, port_num: u8, index: u32, gid_type: *mut u32) -> c_int {
        if context.is_null() || gid_type.is_null() || port_num != 1 {
            return libc::EINVAL;
        }
        match Context::from_ibv(context).gids() {
            Ok(g) if (index as usize) < g.len() => {
                *gid_type = 1;
                0
            }
            Ok(_) => libc::EINVAL,
            Err(e) => e,
        }
    }

    /// `ibv_resolve_eth_l2_from_gid`: only hardware providers ask; the daemon resolves MACs.
    fn ibv_resolve_eth_l2_from_gid(context: *mut ibv_context, attr: *mut ibv_ah_attr, eth_mac: *mut u8, vid: *mut u16) -> c_int {
        let _ = (context, attr, eth_mac, vid);
        libc::EOPNOTSUPP
    }
}

crate::private::other_private_versions!(ibv_query_gid_type);
