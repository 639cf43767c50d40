//! The hidden compatibility versions of rdma-core's libibverbs: `IBVERBS_1.0` entry points for
//! programs linked against libibverbs 1.0 (before 2006), whose structures had other layouts,
//! and the old `ibv_register_driver`. Such a program fails cleanly here (ENOSYS, a null
//! object, or nothing for the calls that return nothing) instead of corrupting memory.

/// Defines a stub and binds it to `NAME@VERSION` (a non-default version: only binaries linked
/// against it reach it).
macro_rules! compat {
    ($($version:literal $name:ident -> $kind:ident;)*) => {$(
        #[allow(non_snake_case)]
        mod $name {
            #[unsafe(export_name = concat!("softrnic_compat_", stringify!($name)))]
            unsafe extern "C" fn stub() -> usize {
                compat!(@ $kind)
            }

            std::arch::global_asm!(concat!(
                ".symver softrnic_compat_", stringify!($name), ", ",
                stringify!($name), "@", $version
            ));
        }
    )*};
    (@ null) => {{
        crate::set_errno(libc::ENOSYS);
        0 // NULL
    }};
    (@ errno) => {{
        crate::set_errno(libc::ENOSYS);
        libc::ENOSYS as usize
    }};
    (@ nothing) => {
        0
    };
}

compat! {
    "IBVERBS_1.0" ibv_ack_async_event -> nothing;
    "IBVERBS_1.0" ibv_ack_cq_events -> nothing;
    "IBVERBS_1.0" ibv_alloc_pd -> null;
    "IBVERBS_1.0" ibv_attach_mcast -> errno;
    "IBVERBS_1.0" ibv_close_device -> errno;
    "IBVERBS_1.0" ibv_create_ah -> null;
    "IBVERBS_1.0" ibv_create_cq -> null;
    "IBVERBS_1.0" ibv_create_qp -> null;
    "IBVERBS_1.0" ibv_create_srq -> null;
    "IBVERBS_1.0" ibv_dealloc_pd -> errno;
    "IBVERBS_1.0" ibv_dereg_mr -> errno;
    "IBVERBS_1.0" ibv_destroy_ah -> errno;
    "IBVERBS_1.0" ibv_destroy_cq -> errno;
    "IBVERBS_1.0" ibv_destroy_qp -> errno;
    "IBVERBS_1.0" ibv_destroy_srq -> errno;
    "IBVERBS_1.0" ibv_detach_mcast -> errno;
    "IBVERBS_1.0" ibv_free_device_list -> nothing;
    "IBVERBS_1.0" ibv_get_async_event -> errno;
    "IBVERBS_1.0" ibv_get_cq_event -> errno;
    "IBVERBS_1.0" ibv_get_device_guid -> errno;
    "IBVERBS_1.0" ibv_get_device_list -> null;
    "IBVERBS_1.0" ibv_get_device_name -> null;
    "IBVERBS_1.0" ibv_modify_qp -> errno;
    "IBVERBS_1.0" ibv_modify_srq -> errno;
    "IBVERBS_1.0" ibv_open_device -> null;
    "IBVERBS_1.0" ibv_query_device -> errno;
    "IBVERBS_1.0" ibv_query_gid -> errno;
    "IBVERBS_1.0" ibv_query_pkey -> errno;
    "IBVERBS_1.0" ibv_query_port -> errno;
    "IBVERBS_1.0" ibv_query_qp -> errno;
    "IBVERBS_1.0" ibv_query_srq -> errno;
    "IBVERBS_1.0" ibv_reg_mr -> null;
    "IBVERBS_1.0" ibv_resize_cq -> errno;
    "IBVERBS_1.1" ibv_register_driver -> nothing;
}
