//! What Debian's provider libraries (libmlx5 and libefa, which perftest and pyverbs load, and
//! every other one `ibverbs-providers` ships) import from `IBVERBS_PRIVATE_34`. Those providers register themselves from their constructors and then
//! wait to be offered a kernel device, which softrnic never does, so none of these runs in
//! practice; each fails cleanly if called: EOPNOTSUPP, or a null object with errno set, or
//! nothing for the registration calls.

use std::ffi::{c_int, c_void};

use crate::set_errno;

exported! {
    /// Registration and bookkeeping for hardware providers: nothing to do.
    fn __verbs_log() -> c_int {
        0
    }

    /// A provider's context or device: none here.
    fn _verbs_init_and_alloc_context() -> *mut c_void {
        set_errno(libc::EOPNOTSUPP);
        std::ptr::null_mut()
    }

    /// A kernel command for a hardware provider: not supported.
    fn execute_ioctl() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_advise_mr() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_alloc_dm() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_alloc_mw() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_alloc_pd() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_attach_mcast() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_close_xrcd() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_ah() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_counters() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_cq() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_qp() -> c_int {
        libc::EOPNOTSUPP
    }

    /// The kernel's poll of a CQ for providers that have no mapped queue: -1, errno set (a
    /// positive return would read as completions).
    fn ibv_cmd_poll_cq() -> c_int {
        set_errno(libc::EOPNOTSUPP);
        -1
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_post_recv() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_post_send() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_post_srq_recv() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_req_notify_cq() -> c_int {
        libc::EOPNOTSUPP
    }

    /// The attribute count of a kernel command being built: no command is ever built, and the
    /// count asked for is the answer (its first argument, passed through).
    fn __ioctl_final_num_attrs(num_attrs: u32) -> u32 {
        num_attrs
    }

    /// A kernel command for a hardware provider (rdma-core 56's libmlx5 imports it): not
    /// supported.
    fn ibv_cmd_create_cq_ex2() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_cq_ex() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_flow() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_flow_action_esp() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_qp_ex() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_qp_ex2() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_rwq_ind_table() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_srq() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_srq_ex() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_create_wq() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_dealloc_mw() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_dealloc_pd() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_dereg_mr() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_destroy_ah() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_destroy_counters() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_destroy_cq() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_destroy_flow() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_destroy_flow_action() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_destroy_qp() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_destroy_rwq_ind_table() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_destroy_srq() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_destroy_wq() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_detach_mcast() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_free_dm() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_get_context() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_modify_cq() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_modify_flow_action_esp() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_modify_qp() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_modify_qp_ex() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_modify_srq() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_modify_wq() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_open_qp() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_open_xrcd() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_query_context() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_query_device_any() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_query_mr() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_query_port() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_query_qp() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_query_srq() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_read_counters() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_reg_dm_mr() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_reg_dmabuf_mr() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_reg_mr() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_rereg_mr() -> c_int {
        libc::EOPNOTSUPP
    }

    /// A kernel command for a hardware provider: not supported.
    fn ibv_cmd_resize_cq() -> c_int {
        libc::EOPNOTSUPP
    }

    /// Registration and bookkeeping for hardware providers: nothing to do.
    fn verbs_allow_disassociate_destroy() -> c_int {
        0
    }

    /// Registration and bookkeeping for hardware providers: nothing to do.
    fn verbs_init_cq() -> c_int {
        0
    }

    /// A provider's context or device: none here.
    fn verbs_open_device() -> *mut c_void {
        set_errno(libc::EOPNOTSUPP);
        std::ptr::null_mut()
    }

    /// Registration and bookkeeping for hardware providers: nothing to do.
    fn verbs_register_driver_34() -> c_int {
        0
    }

    /// Registration and bookkeeping for hardware providers: nothing to do.
    fn verbs_set_ops() -> c_int {
        0
    }

    /// Registration and bookkeeping for hardware providers: nothing to do.
    fn verbs_uninit_context() -> c_int {
        0
    }

}
