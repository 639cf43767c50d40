//! Device and port attributes, as `ibv_query_device` and `ibv_query_port` report them.

/// A path MTU, numbered as `enum ibv_mtu` numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Mtu {
    /// 256 bytes.
    M256 = 1,
    /// 512 bytes.
    M512 = 2,
    /// 1024 bytes.
    M1024 = 3,
    /// 2048 bytes.
    M2048 = 4,
    /// 4096 bytes.
    M4096 = 5,
}

impl Mtu {
    /// The MTU in bytes: the largest payload of one packet.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The MTU of `bytes` (256, 512, 1024, 2048 or 4096).
    pub const fn from_bytes(bytes: u32) -> Option<Mtu> {
        Some(match bytes {
            256 => Mtu::M256,
            512 => Mtu::M512,
            1024 => Mtu::M1024,
            2048 => Mtu::M2048,
            4096 => Mtu::M4096,
            _ => return None,
        })
    }

    /// The MTU for an `ibv_mtu` value.
    pub const fn from_ibv(value: u8) -> Option<Mtu> {
        match value {
            1 => Some(Mtu::M256),
            2 => Some(Mtu::M512),
            3 => Some(Mtu::M1024),
            4 => Some(Mtu::M2048),
            5 => Some(Mtu::M4096),
            _ => None,
        }
    }

    /// The largest IB MTU whose packets fit in an Ethernet MTU of `eth_mtu` bytes, after the
    /// IPv4 (20), UDP (8), BTH (12), largest extension headers (28) and ICRC (4): what rxe
    /// reports as the active MTU.
    pub fn for_ethernet(eth_mtu: u32) -> Mtu {
        const OVERHEAD: u32 = 20 + 8 + 12 + 28 + 4;
        [Mtu::M4096, Mtu::M2048, Mtu::M1024, Mtu::M512]
            .into_iter()
            .find(|m| m.bytes() + OVERHEAD <= eth_mtu)
            .unwrap_or(Mtu::M256)
    }
}

/// What `ibv_query_device` reports (the fields softrnic sets; the rest are zero).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DeviceAttr {
    /// Largest memory region, in bytes.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor ID (softrnic uses rxe's 0xffffff).
    pub vendor_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Maximum QPs.
    pub max_qp: u32,
    /// Maximum outstanding WRs per queue.
    pub max_qp_wr: u32,
    /// Maximum scatter/gather entries per WR.
    pub max_sge: u32,
    /// Maximum scatter/gather entries per receive WR on an SRQ.
    pub max_srq_sge: u32,
    /// Maximum inline data per send WR, in bytes.
    pub max_inline_data: u32,
    /// Maximum CQs.
    pub max_cq: u32,
    /// Maximum entries per CQ.
    pub max_cqe: u32,
    /// Maximum memory regions.
    pub max_mr: u32,
    /// Maximum protection domains.
    pub max_pd: u32,
    /// Maximum outstanding RDMA READ/atomic requests a QP may receive (max_dest_rd_atomic).
    pub max_qp_rd_atom: u32,
    /// Maximum outstanding RDMA READ/atomic requests a QP may send (max_rd_atomic).
    pub max_qp_init_rd_atom: u32,
    /// Atomic capability: 1 is IBV_ATOMIC_HCA (atomic with respect to this device's own atomics).
    pub atomic_cap: u32,
    /// Maximum memory windows.
    pub max_mw: u32,
    /// Maximum SRQs.
    pub max_srq: u32,
    /// Maximum WRs per SRQ.
    pub max_srq_wr: u32,
    /// Maximum multicast groups.
    pub max_mcast_grp: u32,
    /// Maximum QPs attached to one multicast group.
    pub max_mcast_qp_attach: u32,
    /// Maximum attachments over all multicast groups.
    pub max_total_mcast_qp_attach: u32,
    /// Maximum partition keys.
    pub max_pkeys: u16,
    /// Physical ports.
    pub phys_port_cnt: u8,
}

impl Default for DeviceAttr {
    /// The limits rxe reports (drivers/infiniband/sw/rxe/rxe_param.h), so programs sized for rxe
    /// fit.
    fn default() -> DeviceAttr {
        DeviceAttr {
            max_mr_size: u64::MAX,
            page_size_cap: 0xffff_f000,
            vendor_id: 0x00ff_ffff,
            hw_ver: 0,
            // Twice rxe's 0x10000: a device carries 100,000 connections (issue 13).
            max_qp: 0x2_0000,
            max_qp_wr: 0x4000,
            max_sge: 32,
            max_srq_sge: 27,
            max_inline_data: 256,
            max_cq: 0x1_0000,
            // ConnectX's, not rxe's 32767: middleware sizes CQs for many peers (libfabric's RxM
            // asks for (128 + 128) × 1024 entries, which rxe refuses), and a CQ's slots cost
            // memory only once used.
            max_cqe: (1 << 22) - 1,
            max_mr: 0x0004_0000,
            max_pd: 0x1_0000,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            atomic_cap: 1,
            max_mw: 0x1_0000,
            max_srq: 0x1_0000,
            max_srq_wr: 0x4000,
            max_mcast_grp: 8192,
            max_mcast_qp_attach: 56,
            max_total_mcast_qp_attach: 0x7_0000,
            max_pkeys: 1,
            phys_port_cnt: 1,
        }
    }
}

/// A port's state, numbered as `enum ibv_port_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PortState {
    /// The link is down.
    Down = 1,
    /// The link is up and usable.
    Active = 4,
}

/// What `ibv_query_port` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PortAttr {
    /// The port's state.
    pub state: PortState,
    /// The largest MTU the port supports.
    pub max_mtu: Mtu,
    /// The MTU the link's Ethernet MTU allows.
    pub active_mtu: Mtu,
    /// Entries in the GID table.
    pub gid_tbl_len: u32,
    /// Maximum message size, in bytes.
    pub max_msg_sz: u32,
    /// Entries in the P_Key table.
    pub pkey_tbl_len: u16,
}

impl PortAttr {
    /// An active port over an Ethernet link of `eth_mtu` bytes.
    pub fn active(eth_mtu: u32) -> PortAttr {
        PortAttr {
            state: PortState::Active,
            max_mtu: Mtu::M4096,
            active_mtu: Mtu::for_ethernet(eth_mtu),
            gid_tbl_len: 1024,
            max_msg_sz: 1 << 31,
            pkey_tbl_len: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_bytes_and_ethernet() {
        assert_eq!(Mtu::M256.bytes(), 256);
        assert_eq!(Mtu::M4096.bytes(), 4096);
        assert_eq!(Mtu::from_ibv(3), Some(Mtu::M1024));
        assert_eq!(Mtu::from_ibv(0), None);
        assert_eq!(Mtu::from_ibv(6), None);
        // rxe on a 1500-byte Ethernet reports 1024; on 9000, 4096.
        assert_eq!(Mtu::for_ethernet(1500), Mtu::M1024);
        assert_eq!(Mtu::for_ethernet(9000), Mtu::M4096);
        assert_eq!(Mtu::for_ethernet(4096 + 72), Mtu::M4096);
        assert_eq!(Mtu::for_ethernet(4096 + 71), Mtu::M2048);
    }
}
