//! GIDs.

use super::*;

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
