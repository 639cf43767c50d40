//! Shared receive queues.

use super::*;

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
