//! Work completions.

use super::*;

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
/// rdma-core 45 and later.
pub const IBV_WC_FLUSH: ibv_wc_opcode = 8;
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
