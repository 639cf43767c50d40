//! Device.

use super::*;

pub type ibv_node_type = i32;
pub const IBV_NODE_UNKNOWN: ibv_node_type = -1;
pub const IBV_NODE_CA: ibv_node_type = 1;
pub const IBV_NODE_SWITCH: ibv_node_type = 2;
pub const IBV_NODE_ROUTER: ibv_node_type = 3;
pub const IBV_NODE_RNIC: ibv_node_type = 4;
pub const IBV_NODE_USNIC: ibv_node_type = 5;
pub const IBV_NODE_USNIC_UDP: ibv_node_type = 6;
pub const IBV_NODE_UNSPECIFIED: ibv_node_type = 7;

pub type ibv_transport_type = i32;
pub const IBV_TRANSPORT_UNKNOWN: ibv_transport_type = -1;
pub const IBV_TRANSPORT_IB: ibv_transport_type = 0;
pub const IBV_TRANSPORT_IWARP: ibv_transport_type = 1;
pub const IBV_TRANSPORT_USNIC: ibv_transport_type = 2;
pub const IBV_TRANSPORT_USNIC_UDP: ibv_transport_type = 3;
pub const IBV_TRANSPORT_UNSPECIFIED: ibv_transport_type = 4;

pub type ibv_device_cap_flags = u32;
pub const IBV_DEVICE_RESIZE_MAX_WR: ibv_device_cap_flags = 1;
pub const IBV_DEVICE_BAD_PKEY_CNTR: ibv_device_cap_flags = 1 << 1;
pub const IBV_DEVICE_BAD_QKEY_CNTR: ibv_device_cap_flags = 1 << 2;
pub const IBV_DEVICE_RAW_MULTI: ibv_device_cap_flags = 1 << 3;
pub const IBV_DEVICE_AUTO_PATH_MIG: ibv_device_cap_flags = 1 << 4;
pub const IBV_DEVICE_CHANGE_PHY_PORT: ibv_device_cap_flags = 1 << 5;
pub const IBV_DEVICE_UD_AV_PORT_ENFORCE: ibv_device_cap_flags = 1 << 6;
pub const IBV_DEVICE_CURR_QP_STATE_MOD: ibv_device_cap_flags = 1 << 7;
pub const IBV_DEVICE_SHUTDOWN_PORT: ibv_device_cap_flags = 1 << 8;
pub const IBV_DEVICE_INIT_TYPE: ibv_device_cap_flags = 1 << 9;
pub const IBV_DEVICE_PORT_ACTIVE_EVENT: ibv_device_cap_flags = 1 << 10;
pub const IBV_DEVICE_SYS_IMAGE_GUID: ibv_device_cap_flags = 1 << 11;
pub const IBV_DEVICE_RC_RNR_NAK_GEN: ibv_device_cap_flags = 1 << 12;
pub const IBV_DEVICE_SRQ_RESIZE: ibv_device_cap_flags = 1 << 13;
pub const IBV_DEVICE_N_NOTIFY_CQ: ibv_device_cap_flags = 1 << 14;
pub const IBV_DEVICE_MEM_WINDOW: ibv_device_cap_flags = 1 << 17;
pub const IBV_DEVICE_UD_IP_CSUM: ibv_device_cap_flags = 1 << 18;
pub const IBV_DEVICE_XRC: ibv_device_cap_flags = 1 << 20;
pub const IBV_DEVICE_MEM_MGT_EXTENSIONS: ibv_device_cap_flags = 1 << 21;
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2A: ibv_device_cap_flags = 1 << 23;
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2B: ibv_device_cap_flags = 1 << 24;
pub const IBV_DEVICE_RC_IP_CSUM: ibv_device_cap_flags = 1 << 25;
pub const IBV_DEVICE_RAW_IP_CSUM: ibv_device_cap_flags = 1 << 26;
pub const IBV_DEVICE_MANAGED_FLOW_STEERING: ibv_device_cap_flags = 1 << 29;

/// `#define`d, for `ibv_device_attr_ex::device_cap_flags_ex`.
pub const IBV_DEVICE_RAW_SCATTER_FCS: u64 = 1 << 34;
/// `#define`d, for `ibv_device_attr_ex::device_cap_flags_ex`.
pub const IBV_DEVICE_PCI_WRITE_END_PADDING: u64 = 1 << 36;
/// The kernel's `IB_UVERBS_DEVICE_FLUSH_GLOBAL` (Linux 6.2), in `device_cap_flags_ex`.
pub const IB_UVERBS_DEVICE_FLUSH_GLOBAL: u64 = 1 << 38;
/// The kernel's `IB_UVERBS_DEVICE_FLUSH_PERSISTENT` (Linux 6.2), in `device_cap_flags_ex`.
pub const IB_UVERBS_DEVICE_FLUSH_PERSISTENT: u64 = 1 << 39;
/// The kernel's `IB_UVERBS_DEVICE_ATOMIC_WRITE` (Linux 6.2), in `device_cap_flags_ex`.
pub const IB_UVERBS_DEVICE_ATOMIC_WRITE: u64 = 1 << 40;

pub type ibv_fork_status = u32;
pub const IBV_FORK_DISABLED: ibv_fork_status = 0;
pub const IBV_FORK_ENABLED: ibv_fork_status = 1;
pub const IBV_FORK_UNNEEDED: ibv_fork_status = 2;

pub type ibv_atomic_cap = u32;
pub const IBV_ATOMIC_NONE: ibv_atomic_cap = 0;
pub const IBV_ATOMIC_HCA: ibv_atomic_cap = 1;
pub const IBV_ATOMIC_GLOB: ibv_atomic_cap = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_alloc_dm_attr {
    pub length: usize,
    pub log_align_req: u32,
    pub comp_mask: u32,
}

pub type ibv_dm_mask = u32;
pub const IBV_DM_MASK_HANDLE: ibv_dm_mask = 1 << 0;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_dm {
    pub context: *mut ibv_context,
    pub memcpy_to_dm: Option<
        unsafe extern "C" fn(
            dm: *mut ibv_dm,
            dm_offset: u64,
            host_addr: *const c_void,
            length: usize,
        ) -> c_int,
    >,
    pub memcpy_from_dm: Option<
        unsafe extern "C" fn(
            host_addr: *mut c_void,
            dm: *mut ibv_dm,
            dm_offset: u64,
            length: usize,
        ) -> c_int,
    >,
    pub comp_mask: u32,
    pub handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: __be64,
    pub sys_image_guid: __be64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: ibv_atomic_cap,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

pub type ibv_odp_transport_cap_bits = u32;
pub const IBV_ODP_SUPPORT_SEND: ibv_odp_transport_cap_bits = 1 << 0;
pub const IBV_ODP_SUPPORT_RECV: ibv_odp_transport_cap_bits = 1 << 1;
pub const IBV_ODP_SUPPORT_WRITE: ibv_odp_transport_cap_bits = 1 << 2;
pub const IBV_ODP_SUPPORT_READ: ibv_odp_transport_cap_bits = 1 << 3;
pub const IBV_ODP_SUPPORT_ATOMIC: ibv_odp_transport_cap_bits = 1 << 4;
pub const IBV_ODP_SUPPORT_SRQ_RECV: ibv_odp_transport_cap_bits = 1 << 5;

/// The `per_transport_caps` member of `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_odp_caps_per_transport_caps {
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    pub per_transport_caps: ibv_odp_caps_per_transport_caps,
}

pub type ibv_odp_general_caps = u32;
pub const IBV_ODP_SUPPORT: ibv_odp_general_caps = 1 << 0;
pub const IBV_ODP_SUPPORT_IMPLICIT: ibv_odp_general_caps = 1 << 1;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tso_caps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

pub type ibv_rx_hash_function_flags = u32;
pub const IBV_RX_HASH_FUNC_TOEPLITZ: ibv_rx_hash_function_flags = 1 << 0;

pub type ibv_rx_hash_fields = u32;
pub const IBV_RX_HASH_SRC_IPV4: ibv_rx_hash_fields = 1 << 0;
pub const IBV_RX_HASH_DST_IPV4: ibv_rx_hash_fields = 1 << 1;
pub const IBV_RX_HASH_SRC_IPV6: ibv_rx_hash_fields = 1 << 2;
pub const IBV_RX_HASH_DST_IPV6: ibv_rx_hash_fields = 1 << 3;
pub const IBV_RX_HASH_SRC_PORT_TCP: ibv_rx_hash_fields = 1 << 4;
pub const IBV_RX_HASH_DST_PORT_TCP: ibv_rx_hash_fields = 1 << 5;
pub const IBV_RX_HASH_SRC_PORT_UDP: ibv_rx_hash_fields = 1 << 6;
pub const IBV_RX_HASH_DST_PORT_UDP: ibv_rx_hash_fields = 1 << 7;
pub const IBV_RX_HASH_IPSEC_SPI: ibv_rx_hash_fields = 1 << 8;
pub const IBV_RX_HASH_INNER: ibv_rx_hash_fields = 1 << 31;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    /// `enum ibv_rx_hash_fields`
    pub rx_hash_fields_mask: u64,
    /// `enum ibv_rx_hash_function_flags`
    pub rx_hash_function: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_packet_pacing_caps {
    pub qp_rate_limit_min: u32,
    /// In kbps.
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

pub type ibv_raw_packet_caps = u32;
pub const IBV_RAW_PACKET_CAP_CVLAN_STRIPPING: ibv_raw_packet_caps = 1 << 0;
pub const IBV_RAW_PACKET_CAP_SCATTER_FCS: ibv_raw_packet_caps = 1 << 1;
pub const IBV_RAW_PACKET_CAP_IP_CSUM: ibv_raw_packet_caps = 1 << 2;
pub const IBV_RAW_PACKET_CAP_DELAY_DROP: ibv_raw_packet_caps = 1 << 3;

pub type ibv_tm_cap_flags = u32;
pub const IBV_TM_CAP_RC: ibv_tm_cap_flags = 1 << 0;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tm_caps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    /// `enum ibv_tm_cap_flags`
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_moderation_caps {
    pub max_cq_count: u16,
    /// In microseconds.
    pub max_cq_period: u16,
}

pub type ibv_pci_atomic_op_size = u32;
pub const IBV_PCI_ATOMIC_OPERATION_4_BYTE_SIZE_SUP: ibv_pci_atomic_op_size = 1 << 0;
pub const IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP: ibv_pci_atomic_op_size = 1 << 1;
pub const IBV_PCI_ATOMIC_OPERATION_16_BYTE_SIZE_SUP: ibv_pci_atomic_op_size = 1 << 2;

/// Bitmasks of `enum ibv_pci_atomic_op_size`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_pci_atomic_caps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: ibv_tso_caps,
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    /// `enum ibv_raw_packet_caps`
    pub raw_packet_caps: u32,
    pub tm_caps: ibv_tm_caps,
    pub cq_mod_caps: ibv_cq_moderation_caps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}
