//! Work queues and RSS indirection tables.

use super::*;

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
