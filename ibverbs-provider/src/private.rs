//! rdma-core's private ABI: what Debian's provider libraries (libmlx5 and libefa, which perftest
//! and pyverbs load, and every other one `ibverbs-providers` ships) import from libibverbs.
//! Each release names it after itself (`IBVERBS_PRIVATE_33` in rdma-core 33, `_34` from 34 to
//! 64, `_65` since), so the drop-in has all three nodes, each with every private symbol.
//!
//! Those providers register themselves from their constructors and then wait to be offered a
//! kernel device, which softrnic never does, so none of these runs in practice; each fails
//! cleanly if called: EOPNOTSUPP, or -1 or a null object with errno set, or nothing for the
//! registration calls.

use crate::set_errno;

/// Binds each named entry point, exported as `softrnic_NAME` and given `IBVERBS_PRIVATE_34` by
/// `libibverbs.map`, to the other releases' private nodes too. It must be used in the module
/// that defines the entry point (the assembler binds versions to a symbol it defines).
macro_rules! other_private_versions {
    ($($name:ident),* $(,)?) => {$(
        std::arch::global_asm!(concat!(
            ".symver softrnic_", stringify!($name), ", ", stringify!($name), "@IBVERBS_PRIVATE_33\n",
            ".symver softrnic_", stringify!($name), ", ", stringify!($name), "@IBVERBS_PRIVATE_65"
        ));
    )*};
}
pub(crate) use other_private_versions;

/// `NAME -> KIND;`: a stub entry point in every private node. KIND is what it does.
macro_rules! private {
    ($($name:ident -> $kind:ident;)*) => {$(
        exported! {
            /// A private entry point (see the module's documentation).
            fn $name() -> usize {
                private!(@ $kind)
            }
        }
        other_private_versions!($name);
    )*};
    // A kernel command for a hardware provider: not supported (the error as the result).
    (@ unsupported) => {
        libc::EOPNOTSUPP as usize
    };
    // Likewise for a call that returns -1 and sets errno (a count or a file descriptor).
    (@ failed) => {{
        set_errno(libc::EOPNOTSUPP);
        usize::MAX // -1 as C's int
    }};
    // A provider's object (context, device, memory): none here.
    (@ null) => {{
        set_errno(libc::EOPNOTSUPP);
        0 // NULL
    }};
    // Registration and bookkeeping for hardware providers: nothing to do.
    (@ nothing) => {
        0
    };
}

private! {
    __verbs_log -> nothing;
    _verbs_init_and_alloc_context -> null;
    execute_ioctl -> unsupported;
    ibv_cmd_advise_mr -> unsupported;
    ibv_cmd_alloc_dm -> unsupported;
    ibv_cmd_alloc_dmah -> unsupported;
    ibv_cmd_alloc_mw -> unsupported;
    ibv_cmd_alloc_pd -> unsupported;
    ibv_cmd_attach_mcast -> unsupported;
    ibv_cmd_close_xrcd -> unsupported;
    ibv_cmd_create_ah -> unsupported;
    ibv_cmd_create_comp_cntr -> unsupported;
    ibv_cmd_create_counters -> unsupported;
    ibv_cmd_create_cq -> unsupported;
    ibv_cmd_create_cq_ex -> unsupported;
    ibv_cmd_create_cq_ex2 -> unsupported;
    ibv_cmd_create_flow -> unsupported;
    ibv_cmd_create_flow_action_esp -> unsupported;
    ibv_cmd_create_qp -> unsupported;
    ibv_cmd_create_qp_ex -> unsupported;
    ibv_cmd_create_qp_ex2 -> unsupported;
    ibv_cmd_create_rwq_ind_table -> unsupported;
    ibv_cmd_create_srq -> unsupported;
    ibv_cmd_create_srq_ex -> unsupported;
    ibv_cmd_create_wq -> unsupported;
    ibv_cmd_dealloc_mw -> unsupported;
    ibv_cmd_dealloc_pd -> unsupported;
    ibv_cmd_dereg_mr -> unsupported;
    ibv_cmd_destroy_ah -> unsupported;
    ibv_cmd_destroy_comp_cntr -> unsupported;
    ibv_cmd_destroy_counters -> unsupported;
    ibv_cmd_destroy_cq -> unsupported;
    ibv_cmd_destroy_flow -> unsupported;
    ibv_cmd_destroy_flow_action -> unsupported;
    ibv_cmd_destroy_qp -> unsupported;
    ibv_cmd_destroy_rwq_ind_table -> unsupported;
    ibv_cmd_destroy_srq -> unsupported;
    ibv_cmd_destroy_wq -> unsupported;
    ibv_cmd_detach_mcast -> unsupported;
    ibv_cmd_export_dmabuf_fd -> failed;
    ibv_cmd_free_dm -> unsupported;
    ibv_cmd_free_dmah -> unsupported;
    ibv_cmd_get_context -> unsupported;
    ibv_cmd_inc_comp_cntr -> unsupported;
    ibv_cmd_inc_err_comp_cntr -> unsupported;
    ibv_cmd_modify_cq -> unsupported;
    ibv_cmd_modify_flow_action_esp -> unsupported;
    ibv_cmd_modify_qp -> unsupported;
    ibv_cmd_modify_qp_ex -> unsupported;
    ibv_cmd_modify_srq -> unsupported;
    ibv_cmd_modify_wq -> unsupported;
    ibv_cmd_open_qp -> unsupported;
    ibv_cmd_open_xrcd -> unsupported;
    // A positive result would read as completions.
    ibv_cmd_poll_cq -> failed;
    ibv_cmd_post_recv -> unsupported;
    ibv_cmd_post_send -> unsupported;
    ibv_cmd_post_srq_recv -> unsupported;
    ibv_cmd_qp_attach_comp_cntr -> unsupported;
    ibv_cmd_query_comp_cntr_caps -> unsupported;
    ibv_cmd_query_context -> unsupported;
    ibv_cmd_query_device_any -> unsupported;
    ibv_cmd_query_mr -> unsupported;
    ibv_cmd_query_port -> unsupported;
    ibv_cmd_query_port_speed -> unsupported;
    ibv_cmd_query_qp -> unsupported;
    ibv_cmd_query_srq -> unsupported;
    ibv_cmd_read_comp_cntr -> unsupported;
    ibv_cmd_read_counters -> unsupported;
    ibv_cmd_read_err_comp_cntr -> unsupported;
    ibv_cmd_reg_dm_mr -> unsupported;
    ibv_cmd_reg_dmabuf_mr -> unsupported;
    ibv_cmd_reg_mr -> unsupported;
    ibv_cmd_reg_mr_ex -> unsupported;
    ibv_cmd_req_notify_cq -> unsupported;
    ibv_cmd_rereg_mr -> unsupported;
    ibv_cmd_resize_cq -> unsupported;
    ibv_cmd_set_comp_cntr -> unsupported;
    ibv_cmd_set_err_comp_cntr -> unsupported;
    ibv_dmabuf_heap_alloc -> null;
    ibv_dmabuf_heap_cc_shared_init -> null;
    ibv_dmabuf_heap_destroy -> nothing;
    ibv_dmabuf_heap_free -> nothing;
    verbs_allow_disassociate_destroy -> nothing;
    verbs_init_cq -> nothing;
    verbs_open_device -> null;
    verbs_register_driver_33 -> nothing;
    verbs_register_driver_34 -> nothing;
    verbs_register_driver_65 -> nothing;
    verbs_set_ops -> nothing;
    verbs_uninit_context -> nothing;
}

exported! {
    /// The attribute count of a kernel command being built: no command is ever built, and the
    /// count asked for is the answer (its first argument, passed through).
    fn __ioctl_final_num_attrs(num_attrs: u32) -> u32 {
        num_attrs
    }
}
other_private_versions!(__ioctl_final_num_attrs);
