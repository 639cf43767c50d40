//! Flow steering (only the fixed header; the flow specs that follow it are not mirrored).

use super::*;

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
