//! The rest of the public API: names for enums, rate conversions, address handles from
//! received completions, fork support, and what softrnic does not offer (imports,
//! ECE, the kernel ABI helpers), each refused with the errno rdma-core gives for an
//! unsupported call.

use std::ffi::{c_char, c_int, c_void};
use std::ptr;

use crate::abi::*;
use crate::context::Context;
use crate::{or_null, set_errno};

/// A NUL-terminated string literal as a C string.
macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr().cast::<c_char>()
    };
}

/// (multiplier, Mb/s) for each `ibv_rate`, as rdma-core's verbs.c tabulates them.
const RATES: &[(u32, c_int, c_int)] = &[
    (IBV_RATE_2_5_GBPS, 1, 2500),
    (IBV_RATE_5_GBPS, 2, 5000),
    (IBV_RATE_10_GBPS, 4, 10000),
    (IBV_RATE_20_GBPS, 8, 20000),
    (IBV_RATE_30_GBPS, 12, 30000),
    (IBV_RATE_40_GBPS, 16, 40000),
    (IBV_RATE_60_GBPS, 24, 60000),
    (IBV_RATE_80_GBPS, 32, 80000),
    (IBV_RATE_120_GBPS, 48, 120000),
    (IBV_RATE_14_GBPS, -1, 14062),
    (IBV_RATE_56_GBPS, -1, 56250),
    (IBV_RATE_112_GBPS, -1, 112500),
    (IBV_RATE_168_GBPS, -1, 168750),
    (IBV_RATE_25_GBPS, -1, 25781),
    (IBV_RATE_100_GBPS, -1, 103125),
    (IBV_RATE_200_GBPS, -1, 206250),
    (IBV_RATE_300_GBPS, -1, 309375),
    (IBV_RATE_28_GBPS, 11, 28125),
    (IBV_RATE_50_GBPS, 20, 53125),
    (IBV_RATE_400_GBPS, 160, 425000),
    (IBV_RATE_600_GBPS, 240, 637500),
    (IBV_RATE_800_GBPS, 320, 850000),
    (IBV_RATE_1200_GBPS, 480, 1275000),
];

fn rate_by<T: PartialEq>(pick: impl Fn(&(u32, c_int, c_int)) -> T, v: T) -> u32 {
    RATES
        .iter()
        .find(|r| pick(r) == v)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

fn rate_of(rate: u32, pick: impl Fn(&(u32, c_int, c_int)) -> c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, pick)
}

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
    /// `ibv_node_type_str`.
    fn ibv_node_type_str(node_type: c_int) -> *const c_char {
        match node_type {
            1 => cstr!("InfiniBand channel adapter"),
            2 => cstr!("InfiniBand switch"),
            3 => cstr!("InfiniBand router"),
            4 => cstr!("iWARP NIC"),
            5 => cstr!("usNIC"),
            6 => cstr!("usNIC UDP"),
            7 => cstr!("unspecified"),
            _ => cstr!("unknown"),
        }
    }

    /// `ibv_port_state_str`.
    fn ibv_port_state_str(port_state: u32) -> *const c_char {
        match port_state {
            0 => cstr!("no state change (NOP)"),
            1 => cstr!("down"),
            2 => cstr!("init"),
            3 => cstr!("armed"),
            4 => cstr!("active"),
            5 => cstr!("active defer"),
            _ => cstr!("unknown"),
        }
    }

    /// `ibv_event_type_str`.
    fn ibv_event_type_str(event: u32) -> *const c_char {
        match event {
            0 => cstr!("CQ error"),
            1 => cstr!("local work queue catastrophic error"),
            2 => cstr!("invalid request local work queue error"),
            3 => cstr!("local access violation work queue error"),
            4 => cstr!("communication established"),
            5 => cstr!("send queue drained"),
            6 => cstr!("path migrated"),
            7 => cstr!("path migration request error"),
            8 => cstr!("local catastrophic error"),
            9 => cstr!("port active"),
            10 => cstr!("port error"),
            11 => cstr!("LID change"),
            12 => cstr!("P_Key change"),
            13 => cstr!("SM change"),
            14 => cstr!("SRQ catastrophic error"),
            15 => cstr!("SRQ limit reached"),
            16 => cstr!("last WQE reached"),
            17 => cstr!("client reregistration"),
            18 => cstr!("GID table change"),
            19 => cstr!("WQ fatal"),
            _ => cstr!("unknown"),
        }
    }

    /// `ibv_wc_status_str`.
    fn ibv_wc_status_str(status: u32) -> *const c_char {
        match status {
            0 => cstr!("success"),
            1 => cstr!("local length error"),
            2 => cstr!("local QP operation error"),
            3 => cstr!("local EE context operation error"),
            4 => cstr!("local protection error"),
            5 => cstr!("Work Request Flushed Error"),
            6 => cstr!("memory management operation error"),
            7 => cstr!("bad response error"),
            8 => cstr!("local access error"),
            9 => cstr!("remote invalid request error"),
            10 => cstr!("remote access error"),
            11 => cstr!("remote operation error"),
            12 => cstr!("transport retry counter exceeded"),
            13 => cstr!("RNR retry counter exceeded"),
            14 => cstr!("local RDD violation error"),
            15 => cstr!("remote invalid RD request"),
            16 => cstr!("aborted error"),
            17 => cstr!("invalid EE context number"),
            18 => cstr!("invalid EE context state"),
            19 => cstr!("fatal error"),
            20 => cstr!("response timeout error"),
            21 => cstr!("general error"),
            22 => cstr!("TM error"),
            23 => cstr!("TM software rendezvous"),
            _ => cstr!("unknown"),
        }
    }

    /// `ibv_rate_to_mult`.
    fn ibv_rate_to_mult(rate: u32) -> c_int {
        rate_of(rate, |r| r.1)
    }

    /// `mult_to_ibv_rate`.
    fn mult_to_ibv_rate(mult: c_int) -> u32 {
        if mult < 0 { IBV_RATE_MAX } else { rate_by(|r| r.1, mult) }
    }

    /// `ibv_rate_to_mbps`.
    fn ibv_rate_to_mbps(rate: u32) -> c_int {
        rate_of(rate, |r| r.2)
    }

    /// `mbps_to_ibv_rate`.
    fn mbps_to_ibv_rate(mbps: c_int) -> u32 {
        rate_by(|r| r.2, mbps)
    }

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

    /// `ibv_fork_init`: nothing to prepare; the daemon reads memory by address, and pages
    /// copied on write after a fork stay this process's.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_round_trip_as_rdma_core() {
        // SAFETY: pure functions.
        unsafe {
            assert_eq!(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
            assert_eq!(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
            assert_eq!(ibv_rate_to_mult(IBV_RATE_14_GBPS), -1);
            assert_eq!(mult_to_ibv_rate(3), IBV_RATE_MAX);
            assert_eq!(ibv_rate_to_mbps(IBV_RATE_100_GBPS), 103125);
            assert_eq!(mbps_to_ibv_rate(25781), IBV_RATE_25_GBPS);
            assert_eq!(mbps_to_ibv_rate(1), IBV_RATE_MAX);
        }
    }
}
