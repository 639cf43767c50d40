//! Protection domains, memory regions and windows.

use super::*;

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
/// rdma-core 45 and later (IBA 1.5 FLUSH).
pub const IBV_ACCESS_FLUSH_GLOBAL: ibv_access_flags = 1 << 8;
/// rdma-core 45 and later (IBA 1.5 FLUSH).
pub const IBV_ACCESS_FLUSH_PERSISTENT: ibv_access_flags = 1 << 9;
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

/// `ibv_dmah` (rdma-core 65): a DMA handle (TLP processing hints), which no software NIC has.
#[repr(C)]
pub struct ibv_dmah {
    pub context: *mut ibv_context,
}

/// `ibv_buf` (rdma-core 65): memory from `ibv_alloc_buf`. Its layout is libibverbs' own
/// (`driver.h`), never a program's, so this one is the drop-in's.
pub struct ibv_buf {
    pub addr: *mut c_void,
    pub size: usize,
    pub pd: *mut ibv_pd,
}

/// `ibv_mr_init_attr::comp_mask` bits (`enum ibv_mr_init_attr_mask`, rdma-core 65).
pub const IBV_REG_MR_MASK_IOVA: u64 = 1 << 0;
pub const IBV_REG_MR_MASK_ADDR: u64 = 1 << 1;
pub const IBV_REG_MR_MASK_FD: u64 = 1 << 2;
pub const IBV_REG_MR_MASK_FD_OFFSET: u64 = 1 << 3;
pub const IBV_REG_MR_MASK_DMAH: u64 = 1 << 4;
pub const IBV_REG_MR_MASK_BUF: u64 = 1 << 5;

/// What `ibv_reg_mr_ex` (rdma-core 65) registers; `comp_mask` says which members are set.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mr_init_attr {
    pub length: usize,
    pub access: c_int,
    pub comp_mask: u64,
    pub iova: u64,
    pub addr: *mut c_void,
    pub fd: c_int,
    pub fd_offset: u64,
    pub dmah: *mut ibv_dmah,
    pub buf: *mut ibv_buf,
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
