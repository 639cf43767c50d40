//! Work requests.

use super::*;

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
/// rdma-core 45 and later.
pub const IBV_WR_FLUSH: ibv_wr_opcode = 14;
pub const IBV_WR_ATOMIC_WRITE: ibv_wr_opcode = 15;

/// `enum ibv_placement_type` (rdma-core 45 and later), as `ibv_wr_flush` takes it.
pub const IBV_FLUSH_GLOBAL: u8 = 1 << 0;
pub const IBV_FLUSH_PERSISTENT: u8 = 1 << 1;
/// `enum ibv_selectivity_level` (rdma-core 45 and later), as `ibv_wr_flush` takes it.
pub const IBV_FLUSH_RANGE: u8 = 0;
pub const IBV_FLUSH_MR: u8 = 1;

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
