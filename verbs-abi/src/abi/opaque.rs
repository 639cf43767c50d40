//! Opaque types: only pointers to these appear in the mirrored structs.

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
