//! Queue pairs: creation and attributes.

use super::*;

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
/// rdma-core 45 and later.
pub const IBV_QP_EX_WITH_FLUSH: ibv_qp_create_send_ops_flags = 1 << 11;
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
