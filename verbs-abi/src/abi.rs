//! `#[repr(C)]` mirror of the public structs, unions and enum values of rdma-core 44's
//! `<infiniband/verbs.h>` (libibverbs-dev 44.0, Debian 12, x86_64): the ABI that programs linked
//! against `libibverbs.so.1` were compiled with.
//!
//! Type and field names are exactly the C ones, so code can be written against the C
//! documentation and man pages. Every struct's size and alignment, every field's offset and size,
//! every enum's size and signedness and every constant's value is compared with the real C header
//! by `tests/tests/layout.rs` (it compiles a C program with `cc`).
//!
//! Conventions:
//! - C `enum ibv_xxx` types are `pub type ibv_xxx = u32;` (GCC gives an enum without negative
//!   values the type `unsigned int`), or `i32` for the few enums that have negative values
//!   (`ibv_node_type`, `ibv_transport_type`, `ibv_rereg_mr_err_code`), which GCC makes `int`.
//!   Their values are plain `pub const`s of that type.
//! - Values of anonymous C enums get the type of the field they are meant for where there is one
//!   (`IBV_LINK_LAYER_*` are `u8` like `ibv_port_attr::link_layer`, `IBV_SYSFS_*_MAX` are
//!   `usize`), `u32` otherwise. `#define`d 64-bit flags are `u64`.
//! - `__be16`/`__be32`/`__be64` are aliases of `u16`/`u32`/`u64` holding big-endian values.
//! - Function pointers are `Option<unsafe extern "C" fn(..)>` with the C parameter types; `None`
//!   is the C `NULL`.
//! - Named nested (non-typedef'd) C structs/unions, such as `ibv_send_wr`'s `wr` union, get a
//!   Rust type named `<outer>_<member>` (`ibv_send_wr_wr`, `ibv_send_wr_rdma`, ...).
//! - Anonymous C unions (whose members C code reaches directly, `wc.imm_data`) become one Rust
//!   field of a union type holding the C members under their C names:
//!   - `ibv_wc::imm: ibv_wc_imm { imm_data, invalidated_rkey }`
//!   - `ibv_send_wr::imm: ibv_send_wr_imm { imm_data, invalidate_rkey }`
//!   - `ibv_send_wr::bind_mw_tso: ibv_send_wr_bind_mw_tso { bind_mw, tso }`
//!
//!   so C's `wc.imm_data` is Rust's `wc.imm.imm_data` and `wr.bind_mw.rkey` is
//!   `wr.bind_mw_tso.bind_mw.rkey`.
//! - C fields named with a Rust keyword use a raw identifier: `ibv_mw::r#type`,
//!   `ibv_flow_attr::r#type`, `ibv_wc_tm_info::r#priv`, `verbs_context::r#priv`.
//! - Structs only ever handled through pointers here (`verbs_ex_private`,
//!   `ibv_flow_action_esp_attr`, ...) are opaque.
//! - `pthread_mutex_t`/`pthread_cond_t`/`timespec` are libc's.
#![allow(non_camel_case_types, non_snake_case, missing_docs)]

use core::ffi::{c_char, c_int, c_uint, c_void};

pub use libc::{pthread_cond_t, pthread_mutex_t, timespec};

/// Big-endian (network byte order) 16-bit value, C `__be16`.
pub type __be16 = u16;
/// Big-endian (network byte order) 32-bit value, C `__be32`.
pub type __be32 = u32;
/// Big-endian (network byte order) 64-bit value, C `__be64`.
pub type __be64 = u64;

// ---------------------------------------------------------------------------------------------
// Opaque types: only pointers to these appear in the mirrored structs.
// ---------------------------------------------------------------------------------------------

/// Opaque: the old (pre-`port_cap_flags2`) `struct ibv_port_attr` of `_compat_query_port`.
#[repr(C)]
pub struct _compat_ibv_port_attr {
    _private: [u8; 0],
}

/// Opaque: libibverbs-private part of `verbs_context`.
#[repr(C)]
pub struct verbs_ex_private {
    _private: [u8; 0],
}

/// Opaque: attributes of `create_flow_action_esp`/`modify_flow_action_esp`.
#[repr(C)]
pub struct ibv_flow_action_esp_attr {
    _private: [u8; 0],
}

// ---------------------------------------------------------------------------------------------
// GIDs
// ---------------------------------------------------------------------------------------------

/// The `global` member of `union ibv_gid`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_global {
    pub subnet_prefix: __be64,
    pub interface_id: __be64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    pub raw: [u8; 16],
    pub global: ibv_gid_global,
}

pub type ibv_gid_type = u32;
pub const IBV_GID_TYPE_IB: ibv_gid_type = 0;
pub const IBV_GID_TYPE_ROCE_V1: ibv_gid_type = 1;
pub const IBV_GID_TYPE_ROCE_V2: ibv_gid_type = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type`
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `__VERBS_ABI_IS_EXTENDED`, `((void *)UINTPTR_MAX)`: the value of `ibv_context::abi_compat`
/// that marks the context as embedded in a `verbs_context`.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

// ---------------------------------------------------------------------------------------------
// Device
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Ports
// ---------------------------------------------------------------------------------------------

pub type ibv_mtu = u32;
pub const IBV_MTU_256: ibv_mtu = 1;
pub const IBV_MTU_512: ibv_mtu = 2;
pub const IBV_MTU_1024: ibv_mtu = 3;
pub const IBV_MTU_2048: ibv_mtu = 4;
pub const IBV_MTU_4096: ibv_mtu = 5;

pub type ibv_port_state = u32;
pub const IBV_PORT_NOP: ibv_port_state = 0;
pub const IBV_PORT_DOWN: ibv_port_state = 1;
pub const IBV_PORT_INIT: ibv_port_state = 2;
pub const IBV_PORT_ARMED: ibv_port_state = 3;
pub const IBV_PORT_ACTIVE: ibv_port_state = 4;
pub const IBV_PORT_ACTIVE_DEFER: ibv_port_state = 5;

/// Anonymous enum in C; typed like `ibv_port_attr::link_layer`.
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

pub type ibv_port_cap_flags = u32;
pub const IBV_PORT_SM: ibv_port_cap_flags = 1 << 1;
pub const IBV_PORT_NOTICE_SUP: ibv_port_cap_flags = 1 << 2;
pub const IBV_PORT_TRAP_SUP: ibv_port_cap_flags = 1 << 3;
pub const IBV_PORT_OPT_IPD_SUP: ibv_port_cap_flags = 1 << 4;
pub const IBV_PORT_AUTO_MIGR_SUP: ibv_port_cap_flags = 1 << 5;
pub const IBV_PORT_SL_MAP_SUP: ibv_port_cap_flags = 1 << 6;
pub const IBV_PORT_MKEY_NVRAM: ibv_port_cap_flags = 1 << 7;
pub const IBV_PORT_PKEY_NVRAM: ibv_port_cap_flags = 1 << 8;
pub const IBV_PORT_LED_INFO_SUP: ibv_port_cap_flags = 1 << 9;
pub const IBV_PORT_SYS_IMAGE_GUID_SUP: ibv_port_cap_flags = 1 << 11;
pub const IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP: ibv_port_cap_flags = 1 << 12;
pub const IBV_PORT_EXTENDED_SPEEDS_SUP: ibv_port_cap_flags = 1 << 14;
pub const IBV_PORT_CAP_MASK2_SUP: ibv_port_cap_flags = 1 << 15;
pub const IBV_PORT_CM_SUP: ibv_port_cap_flags = 1 << 16;
pub const IBV_PORT_SNMP_TUNNEL_SUP: ibv_port_cap_flags = 1 << 17;
pub const IBV_PORT_REINIT_SUP: ibv_port_cap_flags = 1 << 18;
pub const IBV_PORT_DEVICE_MGMT_SUP: ibv_port_cap_flags = 1 << 19;
pub const IBV_PORT_VENDOR_CLASS_SUP: ibv_port_cap_flags = 1 << 20;
pub const IBV_PORT_DR_NOTICE_SUP: ibv_port_cap_flags = 1 << 21;
pub const IBV_PORT_CAP_MASK_NOTICE_SUP: ibv_port_cap_flags = 1 << 22;
pub const IBV_PORT_BOOT_MGMT_SUP: ibv_port_cap_flags = 1 << 23;
pub const IBV_PORT_LINK_LATENCY_SUP: ibv_port_cap_flags = 1 << 24;
pub const IBV_PORT_CLIENT_REG_SUP: ibv_port_cap_flags = 1 << 25;
pub const IBV_PORT_IP_BASED_GIDS: ibv_port_cap_flags = 1 << 26;

pub type ibv_port_cap_flags2 = u32;
pub const IBV_PORT_SET_NODE_DESC_SUP: ibv_port_cap_flags2 = 1 << 0;
pub const IBV_PORT_INFO_EXT_SUP: ibv_port_cap_flags2 = 1 << 1;
pub const IBV_PORT_VIRT_SUP: ibv_port_cap_flags2 = 1 << 2;
pub const IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP: ibv_port_cap_flags2 = 1 << 3;
pub const IBV_PORT_LINK_WIDTH_2X_SUP: ibv_port_cap_flags2 = 1 << 4;
pub const IBV_PORT_LINK_SPEED_HDR_SUP: ibv_port_cap_flags2 = 1 << 5;
pub const IBV_PORT_LINK_SPEED_NDR_SUP: ibv_port_cap_flags2 = 1 << 10;

/// `IBV_QPF_GRH_REQUIRED` (`IB_UVERBS_QPF_GRH_REQUIRED`), for `ibv_port_attr::flags`.
pub const IBV_QPF_GRH_REQUIRED: u32 = 1 << 0;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    pub state: ibv_port_state,
    pub max_mtu: ibv_mtu,
    pub active_mtu: ibv_mtu,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

// ---------------------------------------------------------------------------------------------
// Async events
// ---------------------------------------------------------------------------------------------

pub type ibv_event_type = u32;
pub const IBV_EVENT_CQ_ERR: ibv_event_type = 0;
pub const IBV_EVENT_QP_FATAL: ibv_event_type = 1;
pub const IBV_EVENT_QP_REQ_ERR: ibv_event_type = 2;
pub const IBV_EVENT_QP_ACCESS_ERR: ibv_event_type = 3;
pub const IBV_EVENT_COMM_EST: ibv_event_type = 4;
pub const IBV_EVENT_SQ_DRAINED: ibv_event_type = 5;
pub const IBV_EVENT_PATH_MIG: ibv_event_type = 6;
pub const IBV_EVENT_PATH_MIG_ERR: ibv_event_type = 7;
pub const IBV_EVENT_DEVICE_FATAL: ibv_event_type = 8;
pub const IBV_EVENT_PORT_ACTIVE: ibv_event_type = 9;
pub const IBV_EVENT_PORT_ERR: ibv_event_type = 10;
pub const IBV_EVENT_LID_CHANGE: ibv_event_type = 11;
pub const IBV_EVENT_PKEY_CHANGE: ibv_event_type = 12;
pub const IBV_EVENT_SM_CHANGE: ibv_event_type = 13;
pub const IBV_EVENT_SRQ_ERR: ibv_event_type = 14;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: ibv_event_type = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: ibv_event_type = 16;
pub const IBV_EVENT_CLIENT_REREGISTER: ibv_event_type = 17;
pub const IBV_EVENT_GID_CHANGE: ibv_event_type = 18;
pub const IBV_EVENT_WQ_FATAL: ibv_event_type = 19;

/// The `element` member of `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut ibv_wq,
    pub port_num: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    pub event_type: ibv_event_type,
}

// ---------------------------------------------------------------------------------------------
// Work completions
// ---------------------------------------------------------------------------------------------

pub type ibv_wc_status = u32;
pub const IBV_WC_SUCCESS: ibv_wc_status = 0;
pub const IBV_WC_LOC_LEN_ERR: ibv_wc_status = 1;
pub const IBV_WC_LOC_QP_OP_ERR: ibv_wc_status = 2;
pub const IBV_WC_LOC_EEC_OP_ERR: ibv_wc_status = 3;
pub const IBV_WC_LOC_PROT_ERR: ibv_wc_status = 4;
pub const IBV_WC_WR_FLUSH_ERR: ibv_wc_status = 5;
pub const IBV_WC_MW_BIND_ERR: ibv_wc_status = 6;
pub const IBV_WC_BAD_RESP_ERR: ibv_wc_status = 7;
pub const IBV_WC_LOC_ACCESS_ERR: ibv_wc_status = 8;
pub const IBV_WC_REM_INV_REQ_ERR: ibv_wc_status = 9;
pub const IBV_WC_REM_ACCESS_ERR: ibv_wc_status = 10;
pub const IBV_WC_REM_OP_ERR: ibv_wc_status = 11;
pub const IBV_WC_RETRY_EXC_ERR: ibv_wc_status = 12;
pub const IBV_WC_RNR_RETRY_EXC_ERR: ibv_wc_status = 13;
pub const IBV_WC_LOC_RDD_VIOL_ERR: ibv_wc_status = 14;
pub const IBV_WC_REM_INV_RD_REQ_ERR: ibv_wc_status = 15;
pub const IBV_WC_REM_ABORT_ERR: ibv_wc_status = 16;
pub const IBV_WC_INV_EECN_ERR: ibv_wc_status = 17;
pub const IBV_WC_INV_EEC_STATE_ERR: ibv_wc_status = 18;
pub const IBV_WC_FATAL_ERR: ibv_wc_status = 19;
pub const IBV_WC_RESP_TIMEOUT_ERR: ibv_wc_status = 20;
pub const IBV_WC_GENERAL_ERR: ibv_wc_status = 21;
pub const IBV_WC_TM_ERR: ibv_wc_status = 22;
pub const IBV_WC_TM_RNDV_INCOMPLETE: ibv_wc_status = 23;

pub type ibv_wc_opcode = u32;
pub const IBV_WC_SEND: ibv_wc_opcode = 0;
pub const IBV_WC_RDMA_WRITE: ibv_wc_opcode = 1;
pub const IBV_WC_RDMA_READ: ibv_wc_opcode = 2;
pub const IBV_WC_COMP_SWAP: ibv_wc_opcode = 3;
pub const IBV_WC_FETCH_ADD: ibv_wc_opcode = 4;
pub const IBV_WC_BIND_MW: ibv_wc_opcode = 5;
pub const IBV_WC_LOCAL_INV: ibv_wc_opcode = 6;
pub const IBV_WC_TSO: ibv_wc_opcode = 7;
pub const IBV_WC_ATOMIC_WRITE: ibv_wc_opcode = 9;
/// Receive completions are `opcode & IBV_WC_RECV != 0`.
pub const IBV_WC_RECV: ibv_wc_opcode = 1 << 7;
pub const IBV_WC_RECV_RDMA_WITH_IMM: ibv_wc_opcode = 129;
pub const IBV_WC_TM_ADD: ibv_wc_opcode = 130;
pub const IBV_WC_TM_DEL: ibv_wc_opcode = 131;
pub const IBV_WC_TM_SYNC: ibv_wc_opcode = 132;
pub const IBV_WC_TM_RECV: ibv_wc_opcode = 133;
pub const IBV_WC_TM_NO_TAG: ibv_wc_opcode = 134;
pub const IBV_WC_DRIVER1: ibv_wc_opcode = 135;
pub const IBV_WC_DRIVER2: ibv_wc_opcode = 136;
pub const IBV_WC_DRIVER3: ibv_wc_opcode = 137;

/// Anonymous enum in C.
pub const IBV_WC_IP_CSUM_OK_SHIFT: u32 = 2;

pub type ibv_create_cq_wc_flags = u32;
pub const IBV_WC_EX_WITH_BYTE_LEN: ibv_create_cq_wc_flags = 1 << 0;
pub const IBV_WC_EX_WITH_IMM: ibv_create_cq_wc_flags = 1 << 1;
pub const IBV_WC_EX_WITH_QP_NUM: ibv_create_cq_wc_flags = 1 << 2;
pub const IBV_WC_EX_WITH_SRC_QP: ibv_create_cq_wc_flags = 1 << 3;
pub const IBV_WC_EX_WITH_SLID: ibv_create_cq_wc_flags = 1 << 4;
pub const IBV_WC_EX_WITH_SL: ibv_create_cq_wc_flags = 1 << 5;
pub const IBV_WC_EX_WITH_DLID_PATH_BITS: ibv_create_cq_wc_flags = 1 << 6;
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: ibv_create_cq_wc_flags = 1 << 7;
pub const IBV_WC_EX_WITH_CVLAN: ibv_create_cq_wc_flags = 1 << 8;
pub const IBV_WC_EX_WITH_FLOW_TAG: ibv_create_cq_wc_flags = 1 << 9;
pub const IBV_WC_EX_WITH_TM_INFO: ibv_create_cq_wc_flags = 1 << 10;
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: ibv_create_cq_wc_flags = 1 << 11;

/// Anonymous enum in C.
pub const IBV_WC_STANDARD_FLAGS: u32 = IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS;

/// Anonymous enum in C.
pub const IBV_CREATE_CQ_SUP_WC_FLAGS: u32 = IBV_WC_STANDARD_FLAGS
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    | IBV_WC_EX_WITH_CVLAN
    | IBV_WC_EX_WITH_FLOW_TAG
    | IBV_WC_EX_WITH_TM_INFO
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

pub type ibv_wc_flags = u32;
pub const IBV_WC_GRH: ibv_wc_flags = 1 << 0;
pub const IBV_WC_WITH_IMM: ibv_wc_flags = 1 << 1;
pub const IBV_WC_IP_CSUM_OK: ibv_wc_flags = 1 << IBV_WC_IP_CSUM_OK_SHIFT;
pub const IBV_WC_WITH_INV: ibv_wc_flags = 1 << 3;
pub const IBV_WC_TM_SYNC_REQ: ibv_wc_flags = 1 << 4;
pub const IBV_WC_TM_MATCH: ibv_wc_flags = 1 << 5;
pub const IBV_WC_TM_DATA_VALID: ibv_wc_flags = 1 << 6;

/// The anonymous union of `struct ibv_wc` (C: `wc.imm_data` / `wc.invalidated_rkey`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_wc_imm {
    /// When `wc_flags & IBV_WC_WITH_IMM`: immediate data, network byte order.
    pub imm_data: __be32,
    /// When `wc_flags & IBV_WC_WITH_INV`: the invalidated rkey.
    pub invalidated_rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: ibv_wc_status,
    pub opcode: ibv_wc_opcode,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// C's anonymous union `{ imm_data; invalidated_rkey; }`.
    pub imm: ibv_wc_imm,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

// ---------------------------------------------------------------------------------------------
// Protection domains, memory regions and windows
// ---------------------------------------------------------------------------------------------

/// `IBV_ACCESS_OPTIONAL_FIRST` (`IB_UVERBS_ACCESS_OPTIONAL_FIRST`).
pub const IBV_ACCESS_OPTIONAL_FIRST: u32 = 1 << 20;
/// `IBV_ACCESS_OPTIONAL_RANGE` (`IB_UVERBS_ACCESS_OPTIONAL_RANGE`): bits 20..=29.
pub const IBV_ACCESS_OPTIONAL_RANGE: u32 =
    (((1 << 29) << 1) - 1) & !(IBV_ACCESS_OPTIONAL_FIRST - 1);

pub type ibv_access_flags = u32;
pub const IBV_ACCESS_LOCAL_WRITE: ibv_access_flags = 1;
pub const IBV_ACCESS_REMOTE_WRITE: ibv_access_flags = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: ibv_access_flags = 1 << 2;
pub const IBV_ACCESS_REMOTE_ATOMIC: ibv_access_flags = 1 << 3;
pub const IBV_ACCESS_MW_BIND: ibv_access_flags = 1 << 4;
pub const IBV_ACCESS_ZERO_BASED: ibv_access_flags = 1 << 5;
pub const IBV_ACCESS_ON_DEMAND: ibv_access_flags = 1 << 6;
pub const IBV_ACCESS_HUGETLB: ibv_access_flags = 1 << 7;
pub const IBV_ACCESS_RELAXED_ORDERING: ibv_access_flags = IBV_ACCESS_OPTIONAL_FIRST;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    /// `enum ibv_access_flags`
    pub mw_access_flags: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_td_init_attr {
    pub comp_mask: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_td {
    pub context: *mut ibv_context,
}

pub type ibv_xrcd_init_attr_mask = u32;
pub const IBV_XRCD_INIT_ATTR_FD: ibv_xrcd_init_attr_mask = 1 << 0;
pub const IBV_XRCD_INIT_ATTR_OFLAGS: ibv_xrcd_init_attr_mask = 1 << 1;
pub const IBV_XRCD_INIT_ATTR_RESERVED: ibv_xrcd_init_attr_mask = 1 << 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_xrcd_init_attr {
    pub comp_mask: u32,
    pub fd: c_int,
    pub oflags: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_xrcd {
    pub context: *mut ibv_context,
}

pub type ibv_rereg_mr_flags = u32;
pub const IBV_REREG_MR_CHANGE_TRANSLATION: ibv_rereg_mr_flags = 1 << 0;
pub const IBV_REREG_MR_CHANGE_PD: ibv_rereg_mr_flags = 1 << 1;
pub const IBV_REREG_MR_CHANGE_ACCESS: ibv_rereg_mr_flags = 1 << 2;
pub const IBV_REREG_MR_FLAGS_SUPPORTED: ibv_rereg_mr_flags = (IBV_REREG_MR_CHANGE_ACCESS << 1) - 1;

pub type ibv_rereg_mr_err_code = i32;
pub const IBV_REREG_MR_ERR_INPUT: ibv_rereg_mr_err_code = -1;
pub const IBV_REREG_MR_ERR_DONT_FORK_NEW: ibv_rereg_mr_err_code = -2;
pub const IBV_REREG_MR_ERR_DO_FORK_OLD: ibv_rereg_mr_err_code = -3;
pub const IBV_REREG_MR_ERR_CMD: ibv_rereg_mr_err_code = -4;
pub const IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW: ibv_rereg_mr_err_code = -5;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

pub type ibv_mw_type = u32;
pub const IBV_MW_TYPE_1: ibv_mw_type = 1;
pub const IBV_MW_TYPE_2: ibv_mw_type = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    /// C `type`.
    pub r#type: ibv_mw_type,
}

// ---------------------------------------------------------------------------------------------
// Address handles
// ---------------------------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_grh {
    pub version_tclass_flow: __be32,
    pub paylen: __be16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

pub type ibv_rate = u32;
pub const IBV_RATE_MAX: ibv_rate = 0;
pub const IBV_RATE_2_5_GBPS: ibv_rate = 2;
pub const IBV_RATE_5_GBPS: ibv_rate = 5;
pub const IBV_RATE_10_GBPS: ibv_rate = 3;
pub const IBV_RATE_20_GBPS: ibv_rate = 6;
pub const IBV_RATE_30_GBPS: ibv_rate = 4;
pub const IBV_RATE_40_GBPS: ibv_rate = 7;
pub const IBV_RATE_60_GBPS: ibv_rate = 8;
pub const IBV_RATE_80_GBPS: ibv_rate = 9;
pub const IBV_RATE_120_GBPS: ibv_rate = 10;
pub const IBV_RATE_14_GBPS: ibv_rate = 11;
pub const IBV_RATE_56_GBPS: ibv_rate = 12;
pub const IBV_RATE_112_GBPS: ibv_rate = 13;
pub const IBV_RATE_168_GBPS: ibv_rate = 14;
pub const IBV_RATE_25_GBPS: ibv_rate = 15;
pub const IBV_RATE_100_GBPS: ibv_rate = 16;
pub const IBV_RATE_200_GBPS: ibv_rate = 17;
pub const IBV_RATE_300_GBPS: ibv_rate = 18;
pub const IBV_RATE_28_GBPS: ibv_rate = 19;
pub const IBV_RATE_50_GBPS: ibv_rate = 20;
pub const IBV_RATE_400_GBPS: ibv_rate = 21;
pub const IBV_RATE_600_GBPS: ibv_rate = 22;
pub const IBV_RATE_800_GBPS: ibv_rate = 23;
pub const IBV_RATE_1200_GBPS: ibv_rate = 24;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

// ---------------------------------------------------------------------------------------------
// Shared receive queues
// ---------------------------------------------------------------------------------------------

pub type ibv_srq_attr_mask = u32;
pub const IBV_SRQ_MAX_WR: ibv_srq_attr_mask = 1 << 0;
pub const IBV_SRQ_LIMIT: ibv_srq_attr_mask = 1 << 1;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

pub type ibv_srq_type = u32;
pub const IBV_SRQT_BASIC: ibv_srq_type = 0;
pub const IBV_SRQT_XRC: ibv_srq_type = 1;
pub const IBV_SRQT_TM: ibv_srq_type = 2;

pub type ibv_srq_init_attr_mask = u32;
pub const IBV_SRQ_INIT_ATTR_TYPE: ibv_srq_init_attr_mask = 1 << 0;
pub const IBV_SRQ_INIT_ATTR_PD: ibv_srq_init_attr_mask = 1 << 1;
pub const IBV_SRQ_INIT_ATTR_XRCD: ibv_srq_init_attr_mask = 1 << 2;
pub const IBV_SRQ_INIT_ATTR_CQ: ibv_srq_init_attr_mask = 1 << 3;
pub const IBV_SRQ_INIT_ATTR_TM: ibv_srq_init_attr_mask = 1 << 4;
pub const IBV_SRQ_INIT_ATTR_RESERVED: ibv_srq_init_attr_mask = 1 << 5;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: ibv_srq_type,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

// ---------------------------------------------------------------------------------------------
// Work queues and RSS indirection tables
// ---------------------------------------------------------------------------------------------

pub type ibv_wq_type = u32;
pub const IBV_WQT_RQ: ibv_wq_type = 0;

pub type ibv_wq_init_attr_mask = u32;
pub const IBV_WQ_INIT_ATTR_FLAGS: ibv_wq_init_attr_mask = 1 << 0;
pub const IBV_WQ_INIT_ATTR_RESERVED: ibv_wq_init_attr_mask = 1 << 1;

pub type ibv_wq_flags = u32;
pub const IBV_WQ_FLAGS_CVLAN_STRIPPING: ibv_wq_flags = 1 << 0;
pub const IBV_WQ_FLAGS_SCATTER_FCS: ibv_wq_flags = 1 << 1;
pub const IBV_WQ_FLAGS_DELAY_DROP: ibv_wq_flags = 1 << 2;
pub const IBV_WQ_FLAGS_PCI_WRITE_END_PADDING: ibv_wq_flags = 1 << 3;
pub const IBV_WQ_FLAGS_RESERVED: ibv_wq_flags = 1 << 4;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wq_init_attr {
    pub wq_context: *mut c_void,
    pub wq_type: ibv_wq_type,
    pub max_wr: u32,
    pub max_sge: u32,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    /// `enum ibv_wq_init_attr_mask`
    pub comp_mask: u32,
    /// `enum ibv_wq_flags`
    pub create_flags: u32,
}

pub type ibv_wq_state = u32;
pub const IBV_WQS_RESET: ibv_wq_state = 0;
pub const IBV_WQS_RDY: ibv_wq_state = 1;
pub const IBV_WQS_ERR: ibv_wq_state = 2;
pub const IBV_WQS_UNKNOWN: ibv_wq_state = 3;

pub type ibv_wq_attr_mask = u32;
pub const IBV_WQ_ATTR_STATE: ibv_wq_attr_mask = 1 << 0;
pub const IBV_WQ_ATTR_CURR_STATE: ibv_wq_attr_mask = 1 << 1;
pub const IBV_WQ_ATTR_FLAGS: ibv_wq_attr_mask = 1 << 2;
pub const IBV_WQ_ATTR_RESERVED: ibv_wq_attr_mask = 1 << 3;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wq_attr {
    /// `enum ibv_wq_attr_mask`
    pub attr_mask: u32,
    pub wq_state: ibv_wq_state,
    pub curr_wq_state: ibv_wq_state,
    /// `enum ibv_wq_flags`
    pub flags: u32,
    /// `enum ibv_wq_flags`
    pub flags_mask: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rwq_ind_table {
    pub context: *mut ibv_context,
    pub ind_tbl_handle: c_int,
    pub ind_tbl_num: c_int,
    pub comp_mask: u32,
}

pub type ibv_ind_table_init_attr_mask = u32;
pub const IBV_CREATE_IND_TABLE_RESERVED: ibv_ind_table_init_attr_mask = 1 << 0;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rwq_ind_table_init_attr {
    pub log_ind_tbl_size: u32,
    pub ind_tbl: *mut *mut ibv_wq,
    pub comp_mask: u32,
}

// ---------------------------------------------------------------------------------------------
// Queue pairs: creation and attributes
// ---------------------------------------------------------------------------------------------

pub type ibv_qp_type = u32;
pub const IBV_QPT_RC: ibv_qp_type = 2;
pub const IBV_QPT_UC: ibv_qp_type = 3;
pub const IBV_QPT_UD: ibv_qp_type = 4;
pub const IBV_QPT_RAW_PACKET: ibv_qp_type = 8;
pub const IBV_QPT_XRC_SEND: ibv_qp_type = 9;
pub const IBV_QPT_XRC_RECV: ibv_qp_type = 10;
pub const IBV_QPT_DRIVER: ibv_qp_type = 0xff;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: ibv_qp_type,
    pub sq_sig_all: c_int,
}

pub type ibv_qp_init_attr_mask = u32;
pub const IBV_QP_INIT_ATTR_PD: ibv_qp_init_attr_mask = 1 << 0;
pub const IBV_QP_INIT_ATTR_XRCD: ibv_qp_init_attr_mask = 1 << 1;
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: ibv_qp_init_attr_mask = 1 << 2;
pub const IBV_QP_INIT_ATTR_MAX_TSO_HEADER: ibv_qp_init_attr_mask = 1 << 3;
pub const IBV_QP_INIT_ATTR_IND_TABLE: ibv_qp_init_attr_mask = 1 << 4;
pub const IBV_QP_INIT_ATTR_RX_HASH: ibv_qp_init_attr_mask = 1 << 5;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: ibv_qp_init_attr_mask = 1 << 6;

pub type ibv_qp_create_flags = u32;
pub const IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: ibv_qp_create_flags = 1 << 1;
pub const IBV_QP_CREATE_SCATTER_FCS: ibv_qp_create_flags = 1 << 8;
pub const IBV_QP_CREATE_CVLAN_STRIPPING: ibv_qp_create_flags = 1 << 9;
pub const IBV_QP_CREATE_SOURCE_QPN: ibv_qp_create_flags = 1 << 10;
pub const IBV_QP_CREATE_PCI_WRITE_END_PADDING: ibv_qp_create_flags = 1 << 11;

pub type ibv_qp_create_send_ops_flags = u32;
pub const IBV_QP_EX_WITH_RDMA_WRITE: ibv_qp_create_send_ops_flags = 1 << 0;
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: ibv_qp_create_send_ops_flags = 1 << 1;
pub const IBV_QP_EX_WITH_SEND: ibv_qp_create_send_ops_flags = 1 << 2;
pub const IBV_QP_EX_WITH_SEND_WITH_IMM: ibv_qp_create_send_ops_flags = 1 << 3;
pub const IBV_QP_EX_WITH_RDMA_READ: ibv_qp_create_send_ops_flags = 1 << 4;
pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: ibv_qp_create_send_ops_flags = 1 << 5;
pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: ibv_qp_create_send_ops_flags = 1 << 6;
pub const IBV_QP_EX_WITH_LOCAL_INV: ibv_qp_create_send_ops_flags = 1 << 7;
pub const IBV_QP_EX_WITH_BIND_MW: ibv_qp_create_send_ops_flags = 1 << 8;
pub const IBV_QP_EX_WITH_SEND_WITH_INV: ibv_qp_create_send_ops_flags = 1 << 9;
pub const IBV_QP_EX_WITH_TSO: ibv_qp_create_send_ops_flags = 1 << 10;
pub const IBV_QP_EX_WITH_ATOMIC_WRITE: ibv_qp_create_send_ops_flags = 1 << 12;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rx_hash_conf {
    /// `enum ibv_rx_hash_function_flags`
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    /// `enum ibv_rx_hash_fields`
    pub rx_hash_fields_mask: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: ibv_qp_type,
    pub sq_sig_all: c_int,
    /// `enum ibv_qp_init_attr_mask`
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    /// `enum ibv_qp_create_flags`
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut ibv_rwq_ind_table,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    /// `enum ibv_qp_create_send_ops_flags`
    pub send_ops_flags: u64,
}

pub type ibv_qp_open_attr_mask = u32;
pub const IBV_QP_OPEN_ATTR_NUM: ibv_qp_open_attr_mask = 1 << 0;
pub const IBV_QP_OPEN_ATTR_XRCD: ibv_qp_open_attr_mask = 1 << 1;
pub const IBV_QP_OPEN_ATTR_CONTEXT: ibv_qp_open_attr_mask = 1 << 2;
pub const IBV_QP_OPEN_ATTR_TYPE: ibv_qp_open_attr_mask = 1 << 3;
pub const IBV_QP_OPEN_ATTR_RESERVED: ibv_qp_open_attr_mask = 1 << 4;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_open_attr {
    pub comp_mask: u32,
    pub qp_num: u32,
    pub xrcd: *mut ibv_xrcd,
    pub qp_context: *mut c_void,
    pub qp_type: ibv_qp_type,
}

pub type ibv_qp_attr_mask = u32;
pub const IBV_QP_STATE: ibv_qp_attr_mask = 1 << 0;
pub const IBV_QP_CUR_STATE: ibv_qp_attr_mask = 1 << 1;
pub const IBV_QP_EN_SQD_ASYNC_NOTIFY: ibv_qp_attr_mask = 1 << 2;
pub const IBV_QP_ACCESS_FLAGS: ibv_qp_attr_mask = 1 << 3;
pub const IBV_QP_PKEY_INDEX: ibv_qp_attr_mask = 1 << 4;
pub const IBV_QP_PORT: ibv_qp_attr_mask = 1 << 5;
pub const IBV_QP_QKEY: ibv_qp_attr_mask = 1 << 6;
pub const IBV_QP_AV: ibv_qp_attr_mask = 1 << 7;
pub const IBV_QP_PATH_MTU: ibv_qp_attr_mask = 1 << 8;
pub const IBV_QP_TIMEOUT: ibv_qp_attr_mask = 1 << 9;
pub const IBV_QP_RETRY_CNT: ibv_qp_attr_mask = 1 << 10;
pub const IBV_QP_RNR_RETRY: ibv_qp_attr_mask = 1 << 11;
pub const IBV_QP_RQ_PSN: ibv_qp_attr_mask = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: ibv_qp_attr_mask = 1 << 13;
pub const IBV_QP_ALT_PATH: ibv_qp_attr_mask = 1 << 14;
pub const IBV_QP_MIN_RNR_TIMER: ibv_qp_attr_mask = 1 << 15;
pub const IBV_QP_SQ_PSN: ibv_qp_attr_mask = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: ibv_qp_attr_mask = 1 << 17;
pub const IBV_QP_PATH_MIG_STATE: ibv_qp_attr_mask = 1 << 18;
pub const IBV_QP_CAP: ibv_qp_attr_mask = 1 << 19;
pub const IBV_QP_DEST_QPN: ibv_qp_attr_mask = 1 << 20;
pub const IBV_QP_RATE_LIMIT: ibv_qp_attr_mask = 1 << 25;

pub type ibv_qp_state = u32;
pub const IBV_QPS_RESET: ibv_qp_state = 0;
pub const IBV_QPS_INIT: ibv_qp_state = 1;
pub const IBV_QPS_RTR: ibv_qp_state = 2;
pub const IBV_QPS_RTS: ibv_qp_state = 3;
pub const IBV_QPS_SQD: ibv_qp_state = 4;
pub const IBV_QPS_SQE: ibv_qp_state = 5;
pub const IBV_QPS_ERR: ibv_qp_state = 6;
pub const IBV_QPS_UNKNOWN: ibv_qp_state = 7;

pub type ibv_mig_state = u32;
pub const IBV_MIG_MIGRATED: ibv_mig_state = 0;
pub const IBV_MIG_REARM: ibv_mig_state = 1;
pub const IBV_MIG_ARMED: ibv_mig_state = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_attr {
    pub qp_state: ibv_qp_state,
    pub cur_qp_state: ibv_qp_state,
    pub path_mtu: ibv_mtu,
    pub path_mig_state: ibv_mig_state,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_rate_limit_attr {
    /// In kbps.
    pub rate_limit: u32,
    /// Total burst size in bytes.
    pub max_burst_sz: u32,
    /// Typical send packet size in bytes.
    pub typical_pkt_sz: u16,
    pub comp_mask: u32,
}

// ---------------------------------------------------------------------------------------------
// Work requests
// ---------------------------------------------------------------------------------------------

pub type ibv_wr_opcode = u32;
pub const IBV_WR_RDMA_WRITE: ibv_wr_opcode = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: ibv_wr_opcode = 1;
pub const IBV_WR_SEND: ibv_wr_opcode = 2;
pub const IBV_WR_SEND_WITH_IMM: ibv_wr_opcode = 3;
pub const IBV_WR_RDMA_READ: ibv_wr_opcode = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: ibv_wr_opcode = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: ibv_wr_opcode = 6;
pub const IBV_WR_LOCAL_INV: ibv_wr_opcode = 7;
pub const IBV_WR_BIND_MW: ibv_wr_opcode = 8;
pub const IBV_WR_SEND_WITH_INV: ibv_wr_opcode = 9;
pub const IBV_WR_TSO: ibv_wr_opcode = 10;
pub const IBV_WR_DRIVER1: ibv_wr_opcode = 11;
pub const IBV_WR_ATOMIC_WRITE: ibv_wr_opcode = 15;

pub type ibv_send_flags = u32;
pub const IBV_SEND_FENCE: ibv_send_flags = 1 << 0;
pub const IBV_SEND_SIGNALED: ibv_send_flags = 1 << 1;
pub const IBV_SEND_SOLICITED: ibv_send_flags = 1 << 2;
pub const IBV_SEND_INLINE: ibv_send_flags = 1 << 3;
pub const IBV_SEND_IP_CSUM: ibv_send_flags = 1 << 4;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The first anonymous union of `struct ibv_send_wr` (C: `wr.imm_data` / `wr.invalidate_rkey`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_imm {
    /// For `*_WITH_IMM` opcodes: immediate data, network byte order.
    pub imm_data: __be32,
    /// For `*_INV` opcodes: the rkey to invalidate.
    pub invalidate_rkey: u32,
}

/// The `wr.rdma` member of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// The `wr.atomic` member of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// The `wr.ud` member of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

/// The `qp_type.xrc` member of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_xrc {
    pub remote_srqn: u32,
}

/// The `qp_type` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_qp_type {
    pub xrc: ibv_send_wr_xrc,
}

/// The `bind_mw` member of `struct ibv_send_wr`'s last (anonymous) union.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// The `tso` member of `struct ibv_send_wr`'s last (anonymous) union.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The last (anonymous) union of `struct ibv_send_wr` (C: `wr.bind_mw` / `wr.tso`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_bind_mw_tso {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: ibv_wr_opcode,
    /// `enum ibv_send_flags`
    pub send_flags: c_uint,
    /// C's anonymous union `{ imm_data; invalidate_rkey; }`.
    pub imm: ibv_send_wr_imm,
    pub wr: ibv_send_wr_wr,
    pub qp_type: ibv_send_wr_qp_type,
    /// C's anonymous union `{ bind_mw; tso; }`.
    pub bind_mw_tso: ibv_send_wr_bind_mw_tso,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

pub type ibv_ops_wr_opcode = u32;
pub const IBV_WR_TAG_ADD: ibv_ops_wr_opcode = 0;
pub const IBV_WR_TAG_DEL: ibv_ops_wr_opcode = 1;
pub const IBV_WR_TAG_SYNC: ibv_ops_wr_opcode = 2;

pub type ibv_ops_flags = u32;
pub const IBV_OPS_SIGNALED: ibv_ops_flags = 1 << 0;
pub const IBV_OPS_TM_SYNC: ibv_ops_flags = 1 << 1;

/// The `tm.add` member of `struct ibv_ops_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ops_wr_tm_add {
    pub recv_wr_id: u64,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub tag: u64,
    pub mask: u64,
}

/// The `tm` member of `struct ibv_ops_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ops_wr_tm {
    pub unexpected_cnt: u32,
    pub handle: u32,
    pub add: ibv_ops_wr_tm_add,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ops_wr {
    pub wr_id: u64,
    pub next: *mut ibv_ops_wr,
    pub opcode: ibv_ops_wr_opcode,
    pub flags: c_int,
    pub tm: ibv_ops_wr_tm,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

// ---------------------------------------------------------------------------------------------
// SRQ, WQ and QP objects
// ---------------------------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wq {
    pub context: *mut ibv_context,
    pub wq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    pub wq_num: u32,
    pub handle: u32,
    pub state: ibv_wq_state,
    pub wq_type: ibv_wq_type,
    pub post_recv: Option<
        unsafe extern "C" fn(
            current: *mut ibv_wq,
            recv_wr: *mut ibv_recv_wr,
            bad_recv_wr: *mut *mut ibv_recv_wr,
        ) -> c_int,
    >,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
    pub comp_mask: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: ibv_qp_state,
    pub qp_type: ibv_qp_type,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    /// `enum ibv_send_flags`
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            rkey: u32,
            remote_addr: u64,
            compare: u64,
            swap: u64,
        ),
    >,
    pub wr_atomic_fetch_add:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64)>,
    pub wr_bind_mw: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            mw: *mut ibv_mw,
            rkey: u32,
            bind_info: *const ibv_mw_bind_info,
        ),
    >,
    pub wr_local_inv: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, invalidate_rkey: u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64)>,
    pub wr_rdma_write:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64)>,
    pub wr_rdma_write_imm: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm_data: __be32),
    >,
    pub wr_send: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, imm_data: __be32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, invalidate_rkey: u32)>,
    pub wr_send_tso:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, hdr: *mut c_void, hdr_sz: u16, mss: u16)>,
    pub wr_set_ud_addr: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            ah: *mut ibv_ah,
            remote_qpn: u32,
            remote_qkey: u32,
        ),
    >,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, remote_srqn: u32)>,
    pub wr_set_inline_data:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize)>,
    pub wr_set_inline_data_list: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp_ex, num_buf: usize, buf_list: *const ibv_data_buf),
    >,
    pub wr_set_sge:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32)>,
    pub wr_set_sge_list:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    pub wr_complete: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    pub wr_atomic_write: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            rkey: u32,
            remote_addr: u64,
            atomic_wr: *const c_void,
        ),
    >,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ece {
    /// IEEE OUI of the provider vendor.
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

// ---------------------------------------------------------------------------------------------
// Completion channels and queues
// ---------------------------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc_tm_info {
    /// Tag from the TMH.
    pub tag: u64,
    /// C `priv`: opaque user data from the TMH.
    pub r#priv: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_ex {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub comp_mask: u32,
    pub status: ibv_wc_status,
    pub wr_id: u64,
    pub start_poll:
        Option<unsafe extern "C" fn(current: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex)>,
    pub read_opcode: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> ibv_wc_opcode>,
    pub read_vendor_err: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    pub read_imm_data: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> __be32>,
    pub read_qp_num: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> c_uint>,
    pub read_slid: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u8>,
    pub read_completion_ts: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u64>,
    pub read_cvlan: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u16>,
    pub read_flow_tag: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    pub read_tm_info:
        Option<unsafe extern "C" fn(current: *mut ibv_cq_ex, tm_info: *mut ibv_wc_tm_info)>,
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u64>,
}

pub type ibv_cq_attr_mask = u32;
pub const IBV_CQ_ATTR_MODERATE: ibv_cq_attr_mask = 1 << 0;
pub const IBV_CQ_ATTR_RESERVED: ibv_cq_attr_mask = 1 << 1;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_moderate_cq {
    pub cq_count: u16,
    /// In microseconds.
    pub cq_period: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_modify_cq_attr {
    /// `enum ibv_cq_attr_mask`
    pub attr_mask: u32,
    pub moderate: ibv_moderate_cq,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

// ---------------------------------------------------------------------------------------------
// Flow steering (only the fixed header; the flow specs that follow it are not mirrored)
// ---------------------------------------------------------------------------------------------

pub type ibv_flow_flags = u32;
pub const IBV_FLOW_ATTR_FLAGS_DONT_TRAP: ibv_flow_flags = 1 << 1;
pub const IBV_FLOW_ATTR_FLAGS_EGRESS: ibv_flow_flags = 1 << 2;

pub type ibv_flow_attr_type = u32;
pub const IBV_FLOW_ATTR_NORMAL: ibv_flow_attr_type = 0x0;
pub const IBV_FLOW_ATTR_ALL_DEFAULT: ibv_flow_attr_type = 0x1;
pub const IBV_FLOW_ATTR_MC_DEFAULT: ibv_flow_attr_type = 0x2;
pub const IBV_FLOW_ATTR_SNIFFER: ibv_flow_attr_type = 0x3;

pub type ibv_flow_spec_type = u32;
pub const IBV_FLOW_SPEC_ETH: ibv_flow_spec_type = 0x20;
pub const IBV_FLOW_SPEC_IPV4: ibv_flow_spec_type = 0x30;
pub const IBV_FLOW_SPEC_IPV6: ibv_flow_spec_type = 0x31;
pub const IBV_FLOW_SPEC_IPV4_EXT: ibv_flow_spec_type = 0x32;
pub const IBV_FLOW_SPEC_ESP: ibv_flow_spec_type = 0x34;
pub const IBV_FLOW_SPEC_TCP: ibv_flow_spec_type = 0x40;
pub const IBV_FLOW_SPEC_UDP: ibv_flow_spec_type = 0x41;
pub const IBV_FLOW_SPEC_VXLAN_TUNNEL: ibv_flow_spec_type = 0x50;
pub const IBV_FLOW_SPEC_GRE: ibv_flow_spec_type = 0x51;
pub const IBV_FLOW_SPEC_MPLS: ibv_flow_spec_type = 0x60;
pub const IBV_FLOW_SPEC_INNER: ibv_flow_spec_type = 0x100;
pub const IBV_FLOW_SPEC_ACTION_TAG: ibv_flow_spec_type = 0x1000;
pub const IBV_FLOW_SPEC_ACTION_DROP: ibv_flow_spec_type = 0x1001;
pub const IBV_FLOW_SPEC_ACTION_HANDLE: ibv_flow_spec_type = 0x1002;
pub const IBV_FLOW_SPEC_ACTION_COUNT: ibv_flow_spec_type = 0x1003;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_flow_attr {
    pub comp_mask: u32,
    /// C `type`.
    pub r#type: ibv_flow_attr_type,
    pub size: u16,
    pub priority: u16,
    pub num_of_specs: u8,
    pub port: u8,
    pub flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_flow {
    pub comp_mask: u32,
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_flow_action {
    pub context: *mut ibv_context,
}

pub type ibv_flow_action_esp_mask = u32;
pub const IBV_FLOW_ACTION_ESP_MASK_ESN: ibv_flow_action_esp_mask = 1 << 0;

// ---------------------------------------------------------------------------------------------
// Device and context
// ---------------------------------------------------------------------------------------------

/// Obsolete, never used (but still occupies the start of `struct ibv_device`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct _ibv_device_ops {
    pub _dummy1:
        Option<unsafe extern "C" fn(device: *mut ibv_device, cmd_fd: c_int) -> *mut ibv_context>,
    pub _dummy2: Option<unsafe extern "C" fn(context: *mut ibv_context)>,
}

pub const IBV_SYSFS_NAME_MAX: usize = 64;
pub const IBV_SYSFS_PATH_MAX: usize = 256;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: ibv_node_type,
    pub transport_type: ibv_transport_type,
    /// Name of the underlying kernel IB device, e.g. "mthca0".
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    /// Name of the uverbs device, e.g. "uverbs0".
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// Path to the infiniband_verbs class device in sysfs.
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    /// Path to the infiniband class device in sysfs.
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// The legacy ops table inside `struct ibv_context`. The `_compat_*` entries are unused
/// placeholders with C type `void *(*)(void)`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_context_ops {
    pub _compat_query_device: Option<
        unsafe extern "C" fn(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int,
    >,
    pub _compat_query_port: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut _compat_ibv_port_attr,
        ) -> c_int,
    >,
    pub _compat_alloc_pd: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_dealloc_pd: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_reg_mr: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_rereg_mr: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_dereg_mr: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub alloc_mw: Option<unsafe extern "C" fn(pd: *mut ibv_pd, r#type: ibv_mw_type) -> *mut ibv_mw>,
    pub bind_mw: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int,
    >,
    pub dealloc_mw: Option<unsafe extern "C" fn(mw: *mut ibv_mw) -> c_int>,
    pub _compat_create_cq: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub poll_cq:
        Option<unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int>,
    pub req_notify_cq:
        Option<unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int>,
    pub _compat_cq_event: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_resize_cq: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_destroy_cq: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_create_srq: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_modify_srq: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_query_srq: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_destroy_srq: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub post_srq_recv: Option<
        unsafe extern "C" fn(
            srq: *mut ibv_srq,
            recv_wr: *mut ibv_recv_wr,
            bad_recv_wr: *mut *mut ibv_recv_wr,
        ) -> c_int,
    >,
    pub _compat_create_qp: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_query_qp: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_modify_qp: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_destroy_qp: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub post_send: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp,
            wr: *mut ibv_send_wr,
            bad_wr: *mut *mut ibv_send_wr,
        ) -> c_int,
    >,
    pub post_recv: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp,
            wr: *mut ibv_recv_wr,
            bad_wr: *mut *mut ibv_recv_wr,
        ) -> c_int,
    >,
    pub _compat_create_ah: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_destroy_ah: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_attach_mcast: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_detach_mcast: Option<unsafe extern "C" fn() -> *mut c_void>,
    pub _compat_async_event: Option<unsafe extern "C" fn() -> *mut c_void>,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    /// `VERBS_ABI_IS_EXTENDED` when this context is the last member of a `verbs_context`.
    pub abi_compat: *mut c_void,
}

pub type ibv_cq_init_attr_mask = u32;
pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: ibv_cq_init_attr_mask = 1 << 0;
pub const IBV_CQ_INIT_ATTR_MASK_PD: ibv_cq_init_attr_mask = 1 << 1;

pub type ibv_create_cq_attr_flags = u32;
pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: ibv_create_cq_attr_flags = 1 << 0;
pub const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: ibv_create_cq_attr_flags = 1 << 1;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    /// Minimum number of entries required for the CQ.
    pub cqe: u32,
    pub cq_context: *mut c_void,
    /// May be null if completion events are not used.
    pub channel: *mut ibv_comp_channel,
    /// Must be < `context->num_comp_vectors`.
    pub comp_vector: u32,
    /// `enum ibv_create_cq_wc_flags`
    pub wc_flags: u64,
    /// `enum ibv_cq_init_attr_mask`
    pub comp_mask: u32,
    /// `enum ibv_create_cq_attr_flags`
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

pub type ibv_parent_domain_init_attr_mask = u32;
pub const IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: ibv_parent_domain_init_attr_mask = 1 << 0;
pub const IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT: ibv_parent_domain_init_attr_mask = 1 << 1;

/// `IBV_ALLOCATOR_USE_DEFAULT`, `((void *)-1)`: what a parent domain's `alloc` returns to ask
/// for the provider's default allocation.
pub const IBV_ALLOCATOR_USE_DEFAULT: usize = usize::MAX;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_parent_domain_init_attr {
    pub pd: *mut ibv_pd,
    pub td: *mut ibv_td,
    pub comp_mask: u32,
    pub alloc: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            pd_context: *mut c_void,
            size: usize,
            alignment: usize,
            resource_type: u64,
        ) -> *mut c_void,
    >,
    pub free: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            pd_context: *mut c_void,
            ptr: *mut c_void,
            resource_type: u64,
        ),
    >,
    pub pd_context: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_counters_init_attr {
    pub comp_mask: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_counters {
    pub context: *mut ibv_context,
}

pub type ibv_counter_description = u32;
pub const IBV_COUNTER_PACKETS: ibv_counter_description = 0;
pub const IBV_COUNTER_BYTES: ibv_counter_description = 1;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_counter_attach_attr {
    pub counter_desc: ibv_counter_description,
    pub index: u32,
    pub comp_mask: u32,
}

pub type ibv_read_counters_flags = u32;
pub const IBV_READ_COUNTERS_ATTR_PREFER_CACHED: ibv_read_counters_flags = 1 << 0;

pub type ibv_values_mask = u32;
pub const IBV_VALUES_MASK_RAW_CLOCK: ibv_values_mask = 1 << 0;
pub const IBV_VALUES_MASK_RESERVED: ibv_values_mask = 1 << 1;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_values_ex {
    pub comp_mask: u32,
    pub raw_clock: timespec,
}

/// `enum ibv_advise_mr_advice` (`enum ib_uverbs_advise_mr_advice`).
pub type ibv_advise_mr_advice = u32;
pub const IBV_ADVISE_MR_ADVICE_PREFETCH: ibv_advise_mr_advice = 0;
pub const IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE: ibv_advise_mr_advice = 1;
pub const IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: ibv_advise_mr_advice = 2;
/// `IBV_ADVISE_MR_FLAG_FLUSH` (`IB_UVERBS_ADVISE_MR_FLAG_FLUSH`).
pub const IBV_ADVISE_MR_FLAG_FLUSH: u32 = 1 << 0;

/// The extended context. libibverbs reaches it from an `ibv_context *` (its last member) when
/// `context.abi_compat == VERBS_ABI_IS_EXTENDED`; new members are added at the front ("grows
/// up"), and `sz` tells how many bytes before `context` are valid.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct verbs_context {
    pub query_port: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut ibv_port_attr,
            port_attr_len: usize,
        ) -> c_int,
    >,
    pub advise_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            advice: ibv_advise_mr_advice,
            flags: u32,
            sg_list: *mut ibv_sge,
            num_sges: u32,
        ) -> c_int,
    >,
    pub alloc_null_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd) -> *mut ibv_mr>,
    pub read_counters: Option<
        unsafe extern "C" fn(
            counters: *mut ibv_counters,
            counters_value: *mut u64,
            ncounters: u32,
            flags: u32,
        ) -> c_int,
    >,
    pub attach_counters_point_flow: Option<
        unsafe extern "C" fn(
            counters: *mut ibv_counters,
            attr: *mut ibv_counter_attach_attr,
            flow: *mut ibv_flow,
        ) -> c_int,
    >,
    pub create_counters: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_counters_init_attr,
        ) -> *mut ibv_counters,
    >,
    pub destroy_counters: Option<unsafe extern "C" fn(counters: *mut ibv_counters) -> c_int>,
    pub reg_dm_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            dm: *mut ibv_dm,
            dm_offset: u64,
            length: usize,
            access: c_uint,
        ) -> *mut ibv_mr,
    >,
    pub alloc_dm: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_alloc_dm_attr,
        ) -> *mut ibv_dm,
    >,
    pub free_dm: Option<unsafe extern "C" fn(dm: *mut ibv_dm) -> c_int>,
    pub modify_flow_action_esp: Option<
        unsafe extern "C" fn(
            action: *mut ibv_flow_action,
            attr: *mut ibv_flow_action_esp_attr,
        ) -> c_int,
    >,
    pub destroy_flow_action: Option<unsafe extern "C" fn(action: *mut ibv_flow_action) -> c_int>,
    pub create_flow_action_esp: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_flow_action_esp_attr,
        ) -> *mut ibv_flow_action,
    >,
    pub modify_qp_rate_limit:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_rate_limit_attr) -> c_int>,
    pub alloc_parent_domain: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_parent_domain_init_attr,
        ) -> *mut ibv_pd,
    >,
    pub dealloc_td: Option<unsafe extern "C" fn(td: *mut ibv_td) -> c_int>,
    pub alloc_td: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_td_init_attr,
        ) -> *mut ibv_td,
    >,
    pub modify_cq:
        Option<unsafe extern "C" fn(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int>,
    pub post_srq_ops: Option<
        unsafe extern "C" fn(
            srq: *mut ibv_srq,
            op: *mut ibv_ops_wr,
            bad_op: *mut *mut ibv_ops_wr,
        ) -> c_int,
    >,
    pub destroy_rwq_ind_table:
        Option<unsafe extern "C" fn(rwq_ind_table: *mut ibv_rwq_ind_table) -> c_int>,
    pub create_rwq_ind_table: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_rwq_ind_table_init_attr,
        ) -> *mut ibv_rwq_ind_table,
    >,
    pub destroy_wq: Option<unsafe extern "C" fn(wq: *mut ibv_wq) -> c_int>,
    pub modify_wq:
        Option<unsafe extern "C" fn(wq: *mut ibv_wq, wq_attr: *mut ibv_wq_attr) -> c_int>,
    pub create_wq: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            wq_init_attr: *mut ibv_wq_init_attr,
        ) -> *mut ibv_wq,
    >,
    pub query_rt_values: Option<
        unsafe extern "C" fn(context: *mut ibv_context, values: *mut ibv_values_ex) -> c_int,
    >,
    pub create_cq_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_cq_init_attr_ex,
        ) -> *mut ibv_cq_ex,
    >,
    /// C `priv`.
    pub r#priv: *mut verbs_ex_private,
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            input: *const ibv_query_device_ex_input,
            attr: *mut ibv_device_attr_ex,
            attr_size: usize,
        ) -> c_int,
    >,
    pub ibv_destroy_flow: Option<unsafe extern "C" fn(flow: *mut ibv_flow) -> c_int>,
    /// "DO NOT COPY THIS GARBAGE"
    pub ABI_placeholder2: Option<unsafe extern "C" fn()>,
    pub ibv_create_flow: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, flow_attr: *mut ibv_flow_attr) -> *mut ibv_flow,
    >,
    /// "DO NOT COPY THIS GARBAGE"
    pub ABI_placeholder1: Option<unsafe extern "C" fn()>,
    pub open_qp: Option<
        unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_qp_open_attr) -> *mut ibv_qp,
    >,
    pub create_qp_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            qp_init_attr_ex: *mut ibv_qp_init_attr_ex,
        ) -> *mut ibv_qp,
    >,
    pub get_srq_num: Option<unsafe extern "C" fn(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int>,
    pub create_srq_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            srq_init_attr_ex: *mut ibv_srq_init_attr_ex,
        ) -> *mut ibv_srq,
    >,
    pub open_xrcd: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            xrcd_init_attr: *mut ibv_xrcd_init_attr,
        ) -> *mut ibv_xrcd,
    >,
    pub close_xrcd: Option<unsafe extern "C" fn(xrcd: *mut ibv_xrcd) -> c_int>,
    pub _ABI_placeholder3: u64,
    /// Must be immediately before `context`.
    pub sz: usize,
    /// Must be the last member.
    pub context: ibv_context,
}
