//! Checks the drop-in libraries' C layouts against the real headers: `softrnic_verbs_abi::abi`
//! against `<infiniband/verbs.h>`, and `softrnic_rdmacm::abi` against `<rdma/rdma_cma.h>` and
//! `<rdma/rsocket.h>`.
//!
//! The test generates one C program that includes the header and prints, for every mirrored
//! struct/union, its `sizeof` and `_Alignof` and every field's `offsetof` and `sizeof`; for every
//! mirrored enum type its `sizeof` and signedness; and the value of every constant. It compiles
//! that program with `cc`, runs it and compares each line with the value computed on the Rust
//! side, reporting all mismatches at once. Needs `gcc`, `libibverbs-dev` and `librdmacm-dev`
//! installed.
//!
//! The mirror follows rdma-core 44 (Debian 12, this machine's headers); [`RELEASES`] says how the
//! headers of rdma-core 33, 56 and 65 (Debian 11, 13 and unstable, fetched by
//! `scripts/rdma-core-gap --fetch`) differ from it, and every release is checked against that.

// Field sizes are taken through a raw pointer into a `MaybeUninit`, which needs `unsafe`.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::mem::{MaybeUninit, align_of, offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use softrnic_rdmacm::abi::*;
use softrnic_verbs_abi::abi::*;

/// One value to compare: its display name, the Rust value, and a C expression computing it.
struct Check {
    name: String,
    rust: i64,
    c_expr: String,
}

/// How a mirrored Rust type is reached in C: a named type, or a member path inside one (for
/// nested struct/union members that have no C type name of their own).
struct CBase {
    c_type: &'static str,
    path: &'static str,
}

impl CBase {
    fn size(&self) -> String {
        if self.path.is_empty() {
            format!("sizeof({})", self.c_type)
        } else {
            format!("sizeof((({} *)0)->{})", self.c_type, self.path)
        }
    }

    fn align(&self) -> String {
        if self.path.is_empty() {
            format!("_Alignof({})", self.c_type)
        } else {
            format!(
                "_Alignof(__typeof__((({} *)0)->{}))",
                self.c_type, self.path
            )
        }
    }

    fn member(&self, field: &str) -> String {
        if self.path.is_empty() {
            field.to_string()
        } else {
            format!("{}.{}", self.path, field)
        }
    }

    fn offset(&self, field: &str) -> String {
        if self.path.is_empty() {
            format!("offsetof({}, {})", self.c_type, field)
        } else {
            format!(
                "(offsetof({t}, {m}) - offsetof({t}, {p}))",
                t = self.c_type,
                m = self.member(field),
                p = self.path
            )
        }
    }

    fn field_size(&self, field: &str) -> String {
        format!("sizeof((({} *)0)->{})", self.c_type, self.member(field))
    }
}

/// C spelling of a Rust field name (`r#type` is C's `type`).
fn c_ident(rust: &'static str) -> &'static str {
    rust.trim_start_matches("r#")
}

fn pointee_size<F>(_: *const F) -> usize {
    size_of::<F>()
}

fn to_i64(v: usize) -> i64 {
    i64::try_from(v).expect("layout value fits in i64")
}

#[derive(Default)]
struct Table {
    checks: Vec<Check>,
    types: usize,
    fields: usize,
    enums: usize,
    consts: usize,
}

impl Table {
    fn push(&mut self, name: String, rust: i64, c_expr: String) {
        self.checks.push(Check { name, rust, c_expr });
    }

    fn record(&mut self, ty: &str, size: usize, align: usize, base: &CBase) {
        self.types += 1;
        self.push(format!("sizeof {ty}"), to_i64(size), base.size());
        self.push(format!("alignof {ty}"), to_i64(align), base.align());
    }

    /// A field of a mirrored type. `c_field` differs from the Rust name only for a Rust field
    /// standing for an anonymous C union: then it is one of the union's C members, and the
    /// field's size is not compared here (the union type itself is checked by `anon_union!`).
    fn field(
        &mut self,
        ty: &str,
        field: &'static str,
        c_field: &'static str,
        offset: usize,
        size: Option<usize>,
        base: &CBase,
    ) {
        self.fields += 1;
        let c_field = c_ident(c_field);
        let label = if c_ident(field) == c_field {
            format!("{ty}.{c_field}")
        } else {
            format!("{ty}.{} (C {c_field})", c_ident(field))
        };
        self.push(
            format!("offsetof {label}"),
            to_i64(offset),
            base.offset(c_field),
        );
        if let Some(size) = size {
            self.push(
                format!("sizeof {label}"),
                to_i64(size),
                base.field_size(c_field),
            );
        }
    }

    /// A Rust union standing for an anonymous C union whose members are `members` of `c_type`.
    fn anon_union(&mut self, ty: &str, size: usize, align: usize, c_type: &str, members: &[&str]) {
        self.types += 1;
        let max = |exprs: Vec<String>| {
            exprs
                .into_iter()
                .reduce(|a, b| format!("LAYOUT_MAX({a}, {b})"))
                .expect("an anonymous union has members")
        };
        let align_expr = max(members
            .iter()
            .map(|m| format!("_Alignof(__typeof__((({c_type} *)0)->{m}))"))
            .collect());
        let size_expr = max(members
            .iter()
            .map(|m| format!("sizeof((({c_type} *)0)->{m})"))
            .collect());
        self.push(
            format!("sizeof {ty} (anonymous union in {c_type})"),
            to_i64(size),
            format!("LAYOUT_ROUND_UP({size_expr}, {align_expr})"),
        );
        self.push(
            format!("alignof {ty} (anonymous union in {c_type})"),
            to_i64(align),
            align_expr,
        );
    }

    /// A member of an anonymous C union: all members must share the offset of the first.
    fn anon_member(
        &mut self,
        ty: &str,
        member: &str,
        offset: usize,
        size: usize,
        c_type: &str,
        first: &str,
    ) {
        self.fields += 1;
        self.push(
            format!("offsetof {ty}.{member}"),
            to_i64(offset),
            format!("(offsetof({c_type}, {member}) - offsetof({c_type}, {first}))"),
        );
        self.push(
            format!("sizeof {ty}.{member}"),
            to_i64(size),
            format!("sizeof((({c_type} *)0)->{member})"),
        );
    }

    fn enum_type(&mut self, name: &str, size: usize, signed: bool) {
        self.enums += 1;
        self.push(
            format!("sizeof enum {name}"),
            to_i64(size),
            format!("sizeof(enum {name})"),
        );
        self.push(
            format!("signed enum {name}"),
            i64::from(signed),
            format!("((enum {name})-1 < 0)"),
        );
    }

    fn constant(&mut self, name: &str, rust: i64, c_expr: &str) {
        self.consts += 1;
        self.push(name.to_string(), rust, c_expr.to_string());
    }

    fn c_program(&self) -> String {
        let mut c = String::from(
            "#include <infiniband/verbs.h>\n\
             #include <rdma/rdma_cma.h>\n\
             #include <rdma/rsocket.h>\n\
             #include <stddef.h>\n\
             #include <stdint.h>\n\
             #include <stdio.h>\n\
             #define LAYOUT_MAX(a, b) ((a) > (b) ? (a) : (b))\n\
             #define LAYOUT_ROUND_UP(n, a) (((n) + (a) - 1) / (a) * (a))\n\
             int main(void)\n{\n",
        );
        for (i, check) in self.checks.iter().enumerate() {
            writeln!(
                c,
                "\tprintf(\"%d %lld\\n\", {i}, (long long)({}));",
                check.c_expr
            )
            .unwrap();
        }
        c.push_str("\treturn 0;\n}\n");
        c
    }
}

/// `layout!(t, struct ibv_foo { a, b, anon = c_member })` checks a named C type;
/// `layout!(t, ibv_foo_bar = struct ibv_foo . "bar" { x, y })` checks the Rust type mirroring
/// the C member `bar` of `struct ibv_foo` (a nested struct/union without a C type name).
/// `rust_field = c_member` is for a Rust field standing for an anonymous C union: its offset is
/// compared with that of the C member.
macro_rules! layout {
    (@go $t:ident, $ty:ident, $c_type:expr, $path:expr, $($f:ident $(= $cf:ident)?),* $(,)?) => {{
        let base = CBase { c_type: $c_type, path: $path };
        $t.record(stringify!($ty), size_of::<$ty>(), align_of::<$ty>(), &base);
        $(layout!(@field $t, $ty, base, $f $(= $cf)?);)*
    }};
    (@field $t:ident, $ty:ident, $base:ident, $f:ident) => {{
        let v = MaybeUninit::<$ty>::uninit();
        let p = v.as_ptr();
        // SAFETY: only the field's address is computed, nothing is read.
        let size = pointee_size(unsafe { &raw const (*p).$f });
        let offset = offset_of!($ty, $f);
        $t.field(stringify!($ty), stringify!($f), stringify!($f), offset, Some(size), &$base);
    }};
    (@field $t:ident, $ty:ident, $base:ident, $f:ident = $cf:ident) => {{
        let offset = offset_of!($ty, $f);
        $t.field(stringify!($ty), stringify!($f), stringify!($cf), offset, None, &$base);
    }};
    ($t:ident, $kw:ident $ty:ident { $($body:tt)* }) => {
        layout!(@go $t, $ty, concat!(stringify!($kw), " ", stringify!($ty)), "", $($body)*)
    };
    ($t:ident, $ty:ident = $kw:ident $outer:ident . $path:literal { $($body:tt)* }) => {
        layout!(@go $t, $ty, concat!(stringify!($kw), " ", stringify!($outer)), $path, $($body)*)
    };
}

/// `anon_union!(t, ibv_foo_u = struct ibv_foo { m1, m2 })`: the Rust union mirrors the anonymous
/// union of `struct ibv_foo` whose members are `m1` and `m2`.
macro_rules! anon_union {
    ($t:ident, $ty:ident = $kw:ident $outer:ident { $($f:ident),+ $(,)? }) => {{
        let c_type = concat!(stringify!($kw), " ", stringify!($outer));
        let members = [$(stringify!($f)),+];
        $t.anon_union(stringify!($ty), size_of::<$ty>(), align_of::<$ty>(), c_type, &members);
        $({
            let v = MaybeUninit::<$ty>::uninit();
            let p = v.as_ptr();
            // SAFETY: only the field's address is computed, nothing is read.
            let size = pointee_size(unsafe { &raw const (*p).$f });
            let offset = offset_of!($ty, $f);
            $t.anon_member(stringify!($ty), stringify!($f), offset, size, c_type, members[0]);
        })+
    }};
}

/// `enums!(t, ibv_foo, ...)`: `pub type ibv_foo = u32/i32` has the size and signedness of C's
/// `enum ibv_foo`.
macro_rules! enums {
    ($t:ident, $($e:ident),* $(,)?) => {
        $($t.enum_type(stringify!($e), size_of::<$e>(), <$e>::MIN != 0);)*
    };
}

/// `context_ops!(t, op, ...)`: how far each member of `verbs_context` lies before its `context`.
/// A program finds `verbs_context` from an `ibv_context *` by its own header's offsets
/// (`verbs_get_ctx_op`), and newer headers add members at the front, so these distances, not
/// the offsets, are what every release must share; `sz` tells a program which members exist.
macro_rules! context_ops {
    ($t:ident, $($f:ident),* $(,)?) => {$({
        let f = c_ident(stringify!($f));
        $t.constant(
            &format!("verbs_context.context - verbs_context.{f}"),
            (offset_of!(verbs_context, context) - offset_of!(verbs_context, $f)) as i64,
            &format!("offsetof(struct verbs_context, context) - offsetof(struct verbs_context, {f})"),
        );
    })*};
}

/// `consts!(t, IBV_FOO, BAR = "c expression", ...)`: the Rust constant equals the C one.
macro_rules! consts {
    (@c $c:ident) => { stringify!($c) };
    (@c $c:ident = $e:literal) => { $e };
    ($t:ident, $($c:ident $(= $e:literal)?),* $(,)?) => {
        $($t.constant(stringify!($c), $c as i64, consts!(@c $c $(= $e)?));)*
    };
}

fn verbs_h(t: &mut Table) {
    layout!(t, ibv_gid_global = union ibv_gid . "global" { subnet_prefix, interface_id });
    layout!(t, union ibv_gid { raw, global });
    layout!(t, struct ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex });
    layout!(t, struct ibv_alloc_dm_attr { length, log_align_req, comp_mask });
    layout!(t, struct ibv_dm { context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle });
    layout!(t, struct ibv_device_attr {
        fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id, vendor_part_id,
        hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd, max_cq, max_cqe, max_mr,
        max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom,
        max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp,
        max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr,
        max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay,
        phys_port_cnt,
    });
    layout!(t, struct ibv_query_device_ex_input { comp_mask });
    layout!(t, ibv_odp_caps_per_transport_caps = struct ibv_odp_caps . "per_transport_caps" {
        rc_odp_caps, uc_odp_caps, ud_odp_caps,
    });
    layout!(t, struct ibv_odp_caps { general_caps, per_transport_caps });
    layout!(t, struct ibv_tso_caps { max_tso, supported_qpts });
    layout!(t, struct ibv_rss_caps {
        supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size,
        rx_hash_fields_mask, rx_hash_function,
    });
    layout!(t, struct ibv_packet_pacing_caps {
        qp_rate_limit_min, qp_rate_limit_max, supported_qpts,
    });
    layout!(t, struct ibv_tm_caps { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge });
    layout!(t, struct ibv_cq_moderation_caps { max_cq_count, max_cq_period });
    layout!(t, struct ibv_pci_atomic_caps { fetch_add, swap, compare_swap });
    layout!(t, struct ibv_device_attr_ex {
        orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock,
        device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps,
        raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps,
        phys_port_cnt_ex,
    });
    layout!(t, struct ibv_port_attr {
        state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
        qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
        init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
        port_cap_flags2,
    });
    layout!(t, ibv_async_event_element = struct ibv_async_event . "element" {
        cq, qp, srq, wq, port_num,
    });
    layout!(t, struct ibv_async_event { element, event_type });
    anon_union!(t, ibv_wc_imm = struct ibv_wc { imm_data, invalidated_rkey });
    layout!(t, struct ibv_wc {
        wr_id, status, opcode, vendor_err, byte_len, imm = imm_data, qp_num, src_qp, wc_flags,
        pkey_index, slid, sl, dlid_path_bits,
    });
    layout!(t, struct ibv_mw_bind_info { mr, addr, length, mw_access_flags });
    layout!(t, struct ibv_pd { context, handle });
    layout!(t, struct ibv_td_init_attr { comp_mask });
    layout!(t, struct ibv_td { context });
    layout!(t, struct ibv_xrcd_init_attr { comp_mask, fd, oflags });
    layout!(t, struct ibv_xrcd { context });
    layout!(t, struct ibv_mr { context, pd, addr, length, handle, lkey, rkey });
    layout!(t, struct ibv_mw { context, pd, rkey, handle, r#type });
    layout!(t, struct ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class });
    layout!(t, struct ibv_grh { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid });
    layout!(t, struct ibv_ah_attr {
        grh, dlid, sl, src_path_bits, static_rate, is_global, port_num,
    });
    layout!(t, struct ibv_srq_attr { max_wr, max_sge, srq_limit });
    layout!(t, struct ibv_srq_init_attr { srq_context, attr });
    layout!(t, struct ibv_tm_cap { max_num_tags, max_ops });
    layout!(t, struct ibv_srq_init_attr_ex {
        srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap,
    });
    layout!(t, struct ibv_wq_init_attr {
        wq_context, wq_type, max_wr, max_sge, pd, cq, comp_mask, create_flags,
    });
    layout!(t, struct ibv_wq_attr { attr_mask, wq_state, curr_wq_state, flags, flags_mask });
    layout!(t, struct ibv_rwq_ind_table { context, ind_tbl_handle, ind_tbl_num, comp_mask });
    layout!(t, struct ibv_rwq_ind_table_init_attr { log_ind_tbl_size, ind_tbl, comp_mask });
    layout!(t, struct ibv_qp_cap {
        max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
    });
    layout!(t, struct ibv_qp_init_attr {
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all,
    });
    layout!(t, struct ibv_rx_hash_conf {
        rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask,
    });
    layout!(t, struct ibv_qp_init_attr_ex {
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd,
        create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags,
    });
    layout!(t, struct ibv_qp_open_attr { comp_mask, qp_num, xrcd, qp_context, qp_type });
    layout!(t, struct ibv_qp_attr {
        qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
        qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
        en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
        port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit,
    });
    layout!(t, struct ibv_qp_rate_limit_attr {
        rate_limit, max_burst_sz, typical_pkt_sz, comp_mask,
    });
    layout!(t, struct ibv_data_buf { addr, length });
    layout!(t, struct ibv_sge { addr, length, lkey });
    anon_union!(t, ibv_send_wr_imm = struct ibv_send_wr { imm_data, invalidate_rkey });
    layout!(t, ibv_send_wr_rdma = struct ibv_send_wr . "wr.rdma" { remote_addr, rkey });
    layout!(t, ibv_send_wr_atomic = struct ibv_send_wr . "wr.atomic" {
        remote_addr, compare_add, swap, rkey,
    });
    layout!(t, ibv_send_wr_ud = struct ibv_send_wr . "wr.ud" { ah, remote_qpn, remote_qkey });
    layout!(t, ibv_send_wr_wr = struct ibv_send_wr . "wr" { rdma, atomic, ud });
    layout!(t, ibv_send_wr_xrc = struct ibv_send_wr . "qp_type.xrc" { remote_srqn });
    layout!(t, ibv_send_wr_qp_type = struct ibv_send_wr . "qp_type" { xrc });
    layout!(t, ibv_send_wr_bind_mw = struct ibv_send_wr . "bind_mw" { mw, rkey, bind_info });
    layout!(t, ibv_send_wr_tso = struct ibv_send_wr . "tso" { hdr, hdr_sz, mss });
    anon_union!(t, ibv_send_wr_bind_mw_tso = struct ibv_send_wr { bind_mw, tso });
    layout!(t, struct ibv_send_wr {
        wr_id, next, sg_list, num_sge, opcode, send_flags, imm = imm_data, wr, qp_type,
        bind_mw_tso = bind_mw,
    });
    layout!(t, struct ibv_recv_wr { wr_id, next, sg_list, num_sge });
    layout!(t, ibv_ops_wr_tm_add = struct ibv_ops_wr . "tm.add" {
        recv_wr_id, sg_list, num_sge, tag, mask,
    });
    layout!(t, ibv_ops_wr_tm = struct ibv_ops_wr . "tm" { unexpected_cnt, handle, add });
    layout!(t, struct ibv_ops_wr { wr_id, next, opcode, flags, tm });
    layout!(t, struct ibv_mw_bind { wr_id, send_flags, bind_info });
    layout!(t, struct ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed });
    layout!(t, struct ibv_wq {
        context, wq_context, pd, cq, wq_num, handle, state, wq_type, post_recv, mutex, cond,
        events_completed, comp_mask,
    });
    layout!(t, struct ibv_qp {
        context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex,
        cond, events_completed,
    });
    layout!(t, struct ibv_qp_ex {
        qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add, wr_bind_mw,
        wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send, wr_send_imm,
        wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn, wr_set_inline_data,
        wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start, wr_complete, wr_abort,
        wr_atomic_write,
    });
    context_ops!(
        t,
        query_port,
        advise_mr,
        alloc_null_mr,
        read_counters,
        attach_counters_point_flow,
        create_counters,
        destroy_counters,
        reg_dm_mr,
        alloc_dm,
        free_dm,
        modify_flow_action_esp,
        destroy_flow_action,
        create_flow_action_esp,
        modify_qp_rate_limit,
        alloc_parent_domain,
        dealloc_td,
        alloc_td,
        modify_cq,
        post_srq_ops,
        destroy_rwq_ind_table,
        create_rwq_ind_table,
        destroy_wq,
        modify_wq,
        create_wq,
        query_rt_values,
        create_cq_ex,
        r#priv,
        query_device_ex,
        ibv_destroy_flow,
        ibv_create_flow,
        open_qp,
        create_qp_ex,
        get_srq_num,
        create_srq_ex,
        open_xrcd,
        close_xrcd,
        sz,
    );
    // Members newer headers append.
    let qp_ex = CBase {
        c_type: "struct ibv_qp_ex",
        path: "",
    };
    let flush = size_of::<ibv_wr_flush_fn>();
    t.field(
        "ibv_qp_ex",
        "wr_flush",
        "wr_flush",
        size_of::<ibv_qp_ex>(),
        Some(flush),
        &qp_ex,
    );
    let port = CBase {
        c_type: "struct ibv_port_attr",
        path: "",
    };
    let speed = offset_of!(ibv_port_attr_newer, active_speed_ex);
    t.field(
        "ibv_port_attr",
        "active_speed_ex",
        "active_speed_ex",
        speed,
        Some(4),
        &port,
    );
    layout!(t, struct ibv_ece { vendor_id, options, comp_mask });
    layout!(t, struct ibv_comp_channel { context, fd, refcnt });
    layout!(t, struct ibv_cq {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed,
    });
    layout!(t, struct ibv_poll_cq_attr { comp_mask });
    layout!(t, struct ibv_wc_tm_info { tag, r#priv });
    layout!(t, struct ibv_cq_ex {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed, comp_mask, status, wr_id, start_poll, next_poll, end_poll,
        read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp,
        read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts, read_cvlan,
        read_flow_tag, read_tm_info, read_completion_wallclock_ns,
    });
    layout!(t, struct ibv_moderate_cq { cq_count, cq_period });
    layout!(t, struct ibv_modify_cq_attr { attr_mask, moderate });
    layout!(t, struct ibv_ah { context, pd, handle });
    layout!(t, struct ibv_flow_attr {
        comp_mask, r#type, size, priority, num_of_specs, port, flags,
    });
    layout!(t, struct ibv_flow { comp_mask, context, handle });
    layout!(t, struct ibv_flow_action { context });
    layout!(t, struct _ibv_device_ops { _dummy1, _dummy2 });
    layout!(t, struct ibv_device {
        _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path,
    });
    layout!(t, struct ibv_context_ops {
        _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
        _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
        _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
        _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
        _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp, _compat_modify_qp,
        _compat_destroy_qp, post_send, post_recv, _compat_create_ah, _compat_destroy_ah,
        _compat_attach_mcast, _compat_detach_mcast, _compat_async_event,
    });
    layout!(t, struct ibv_context {
        device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat,
    });
    layout!(t, struct ibv_cq_init_attr_ex {
        cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain,
    });
    layout!(t, struct ibv_parent_domain_init_attr { pd, td, comp_mask, alloc, free, pd_context });
    layout!(t, struct ibv_counters_init_attr { comp_mask });
    layout!(t, struct ibv_counters { context });
    layout!(t, struct ibv_counter_attach_attr { counter_desc, index, comp_mask });
    layout!(t, struct ibv_values_ex { comp_mask, raw_clock });
    enums!(
        t,
        ibv_gid_type,
        ibv_node_type,
        ibv_transport_type,
        ibv_device_cap_flags,
        ibv_fork_status,
        ibv_atomic_cap,
        ibv_dm_mask,
        ibv_odp_transport_cap_bits,
        ibv_odp_general_caps,
        ibv_rx_hash_function_flags,
        ibv_rx_hash_fields,
        ibv_raw_packet_caps,
        ibv_tm_cap_flags,
        ibv_pci_atomic_op_size,
        ibv_mtu,
        ibv_port_state,
        ibv_port_cap_flags,
        ibv_port_cap_flags2,
        ibv_event_type,
        ibv_wc_status,
        ibv_wc_opcode,
        ibv_create_cq_wc_flags,
        ibv_wc_flags,
        ibv_access_flags,
        ibv_xrcd_init_attr_mask,
        ibv_rereg_mr_flags,
        ibv_rereg_mr_err_code,
        ibv_mw_type,
        ibv_rate,
        ibv_srq_attr_mask,
        ibv_srq_type,
        ibv_srq_init_attr_mask,
        ibv_wq_type,
        ibv_wq_init_attr_mask,
        ibv_wq_flags,
        ibv_wq_state,
        ibv_wq_attr_mask,
        ibv_ind_table_init_attr_mask,
        ibv_qp_type,
        ibv_qp_init_attr_mask,
        ibv_qp_create_flags,
        ibv_qp_create_send_ops_flags,
        ibv_qp_open_attr_mask,
        ibv_qp_attr_mask,
        ibv_qp_state,
        ibv_mig_state,
        ibv_wr_opcode,
        ibv_send_flags,
        ibv_ops_wr_opcode,
        ibv_ops_flags,
        ibv_cq_attr_mask,
        ibv_flow_flags,
        ibv_flow_attr_type,
        ibv_flow_spec_type,
        ibv_flow_action_esp_mask,
        ibv_cq_init_attr_mask,
        ibv_create_cq_attr_flags,
        ibv_parent_domain_init_attr_mask,
        ibv_counter_description,
        ibv_read_counters_flags,
        ibv_values_mask,
        ibv_advise_mr_advice
    );
    consts!(
        t,
        IBV_GID_TYPE_IB,
        IBV_GID_TYPE_ROCE_V1,
        IBV_GID_TYPE_ROCE_V2,
        VERBS_ABI_IS_EXTENDED = "(uintptr_t)__VERBS_ABI_IS_EXTENDED",
        IBV_NODE_UNKNOWN,
        IBV_NODE_CA,
        IBV_NODE_SWITCH,
        IBV_NODE_ROUTER,
        IBV_NODE_RNIC,
        IBV_NODE_USNIC,
        IBV_NODE_USNIC_UDP,
        IBV_NODE_UNSPECIFIED,
        IBV_TRANSPORT_UNKNOWN,
        IBV_TRANSPORT_IB,
        IBV_TRANSPORT_IWARP,
        IBV_TRANSPORT_USNIC,
        IBV_TRANSPORT_USNIC_UDP,
        IBV_TRANSPORT_UNSPECIFIED,
        IBV_DEVICE_RESIZE_MAX_WR,
        IBV_DEVICE_BAD_PKEY_CNTR,
        IBV_DEVICE_BAD_QKEY_CNTR,
        IBV_DEVICE_RAW_MULTI,
        IBV_DEVICE_AUTO_PATH_MIG,
        IBV_DEVICE_CHANGE_PHY_PORT,
        IBV_DEVICE_UD_AV_PORT_ENFORCE,
        IBV_DEVICE_CURR_QP_STATE_MOD,
        IBV_DEVICE_SHUTDOWN_PORT,
        IBV_DEVICE_INIT_TYPE,
        IBV_DEVICE_PORT_ACTIVE_EVENT,
        IBV_DEVICE_SYS_IMAGE_GUID,
        IBV_DEVICE_RC_RNR_NAK_GEN,
        IBV_DEVICE_SRQ_RESIZE,
        IBV_DEVICE_N_NOTIFY_CQ,
        IBV_DEVICE_MEM_WINDOW,
        IBV_DEVICE_UD_IP_CSUM,
        IBV_DEVICE_XRC,
        IBV_DEVICE_MEM_MGT_EXTENSIONS,
        IBV_DEVICE_MEM_WINDOW_TYPE_2A,
        IBV_DEVICE_MEM_WINDOW_TYPE_2B,
        IBV_DEVICE_RC_IP_CSUM,
        IBV_DEVICE_RAW_IP_CSUM,
        IBV_DEVICE_MANAGED_FLOW_STEERING,
        IBV_DEVICE_RAW_SCATTER_FCS,
        IBV_DEVICE_PCI_WRITE_END_PADDING,
        IBV_FORK_DISABLED,
        IBV_FORK_ENABLED,
        IBV_FORK_UNNEEDED,
        IBV_ATOMIC_NONE,
        IBV_ATOMIC_HCA,
        IBV_ATOMIC_GLOB,
        IBV_DM_MASK_HANDLE,
        IBV_ODP_SUPPORT_SEND,
        IBV_ODP_SUPPORT_RECV,
        IBV_ODP_SUPPORT_WRITE,
        IBV_ODP_SUPPORT_READ,
        IBV_ODP_SUPPORT_ATOMIC,
        IBV_ODP_SUPPORT_SRQ_RECV,
        IBV_ODP_SUPPORT,
        IBV_ODP_SUPPORT_IMPLICIT,
        IBV_RX_HASH_FUNC_TOEPLITZ,
        IBV_RX_HASH_SRC_IPV4,
        IBV_RX_HASH_DST_IPV4,
        IBV_RX_HASH_SRC_IPV6,
        IBV_RX_HASH_DST_IPV6,
        IBV_RX_HASH_SRC_PORT_TCP,
        IBV_RX_HASH_DST_PORT_TCP,
        IBV_RX_HASH_SRC_PORT_UDP,
        IBV_RX_HASH_DST_PORT_UDP,
        IBV_RX_HASH_IPSEC_SPI,
        IBV_RX_HASH_INNER,
        IBV_RAW_PACKET_CAP_CVLAN_STRIPPING,
        IBV_RAW_PACKET_CAP_SCATTER_FCS,
        IBV_RAW_PACKET_CAP_IP_CSUM,
        IBV_RAW_PACKET_CAP_DELAY_DROP,
        IBV_TM_CAP_RC,
        IBV_PCI_ATOMIC_OPERATION_4_BYTE_SIZE_SUP,
        IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP,
        IBV_PCI_ATOMIC_OPERATION_16_BYTE_SIZE_SUP,
        IBV_MTU_256,
        IBV_MTU_512,
        IBV_MTU_1024,
        IBV_MTU_2048,
        IBV_MTU_4096,
        IBV_PORT_NOP,
        IBV_PORT_DOWN,
        IBV_PORT_INIT,
        IBV_PORT_ARMED,
        IBV_PORT_ACTIVE,
        IBV_PORT_ACTIVE_DEFER,
        IBV_LINK_LAYER_UNSPECIFIED,
        IBV_LINK_LAYER_INFINIBAND,
        IBV_LINK_LAYER_ETHERNET,
        IBV_PORT_SM,
        IBV_PORT_NOTICE_SUP,
        IBV_PORT_TRAP_SUP,
        IBV_PORT_OPT_IPD_SUP,
        IBV_PORT_AUTO_MIGR_SUP,
        IBV_PORT_SL_MAP_SUP,
        IBV_PORT_MKEY_NVRAM,
        IBV_PORT_PKEY_NVRAM,
        IBV_PORT_LED_INFO_SUP,
        IBV_PORT_SYS_IMAGE_GUID_SUP,
        IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP,
        IBV_PORT_EXTENDED_SPEEDS_SUP,
        IBV_PORT_CAP_MASK2_SUP,
        IBV_PORT_CM_SUP,
        IBV_PORT_SNMP_TUNNEL_SUP,
        IBV_PORT_REINIT_SUP,
        IBV_PORT_DEVICE_MGMT_SUP,
        IBV_PORT_VENDOR_CLASS_SUP,
        IBV_PORT_DR_NOTICE_SUP,
        IBV_PORT_CAP_MASK_NOTICE_SUP,
        IBV_PORT_BOOT_MGMT_SUP,
        IBV_PORT_LINK_LATENCY_SUP,
        IBV_PORT_CLIENT_REG_SUP,
        IBV_PORT_IP_BASED_GIDS,
        IBV_PORT_SET_NODE_DESC_SUP,
        IBV_PORT_INFO_EXT_SUP,
        IBV_PORT_VIRT_SUP,
        IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP,
        IBV_PORT_LINK_WIDTH_2X_SUP,
        IBV_PORT_LINK_SPEED_HDR_SUP,
        IBV_PORT_LINK_SPEED_NDR_SUP,
        IBV_QPF_GRH_REQUIRED,
        IBV_EVENT_CQ_ERR,
        IBV_EVENT_QP_FATAL,
        IBV_EVENT_QP_REQ_ERR,
        IBV_EVENT_QP_ACCESS_ERR,
        IBV_EVENT_COMM_EST,
        IBV_EVENT_SQ_DRAINED,
        IBV_EVENT_PATH_MIG,
        IBV_EVENT_PATH_MIG_ERR,
        IBV_EVENT_DEVICE_FATAL,
        IBV_EVENT_PORT_ACTIVE,
        IBV_EVENT_PORT_ERR,
        IBV_EVENT_LID_CHANGE,
        IBV_EVENT_PKEY_CHANGE,
        IBV_EVENT_SM_CHANGE,
        IBV_EVENT_SRQ_ERR,
        IBV_EVENT_SRQ_LIMIT_REACHED,
        IBV_EVENT_QP_LAST_WQE_REACHED,
        IBV_EVENT_CLIENT_REREGISTER,
        IBV_EVENT_GID_CHANGE,
        IBV_EVENT_WQ_FATAL,
        IBV_WC_SUCCESS,
        IBV_WC_LOC_LEN_ERR,
        IBV_WC_LOC_QP_OP_ERR,
        IBV_WC_LOC_EEC_OP_ERR,
        IBV_WC_LOC_PROT_ERR,
        IBV_WC_WR_FLUSH_ERR,
        IBV_WC_MW_BIND_ERR,
        IBV_WC_BAD_RESP_ERR,
        IBV_WC_LOC_ACCESS_ERR,
        IBV_WC_REM_INV_REQ_ERR,
        IBV_WC_REM_ACCESS_ERR,
        IBV_WC_REM_OP_ERR,
        IBV_WC_RETRY_EXC_ERR,
        IBV_WC_RNR_RETRY_EXC_ERR,
        IBV_WC_LOC_RDD_VIOL_ERR,
        IBV_WC_REM_INV_RD_REQ_ERR,
        IBV_WC_REM_ABORT_ERR,
        IBV_WC_INV_EECN_ERR,
        IBV_WC_INV_EEC_STATE_ERR,
        IBV_WC_FATAL_ERR,
        IBV_WC_RESP_TIMEOUT_ERR,
        IBV_WC_GENERAL_ERR,
        IBV_WC_TM_ERR,
        IBV_WC_TM_RNDV_INCOMPLETE,
        IBV_WC_SEND,
        IBV_WC_RDMA_WRITE,
        IBV_WC_RDMA_READ,
        IBV_WC_COMP_SWAP,
        IBV_WC_FETCH_ADD,
        IBV_WC_BIND_MW,
        IBV_WC_LOCAL_INV,
        IBV_WC_TSO,
        IBV_WC_ATOMIC_WRITE,
        IBV_WC_RECV,
        IBV_WC_RECV_RDMA_WITH_IMM,
        IBV_WC_TM_ADD,
        IBV_WC_TM_DEL,
        IBV_WC_TM_SYNC,
        IBV_WC_TM_RECV,
        IBV_WC_TM_NO_TAG,
        IBV_WC_DRIVER1,
        IBV_WC_DRIVER2,
        IBV_WC_DRIVER3,
        IBV_WC_IP_CSUM_OK_SHIFT,
        IBV_WC_EX_WITH_BYTE_LEN,
        IBV_WC_EX_WITH_IMM,
        IBV_WC_EX_WITH_QP_NUM,
        IBV_WC_EX_WITH_SRC_QP,
        IBV_WC_EX_WITH_SLID,
        IBV_WC_EX_WITH_SL,
        IBV_WC_EX_WITH_DLID_PATH_BITS,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
        IBV_WC_EX_WITH_CVLAN,
        IBV_WC_EX_WITH_FLOW_TAG,
        IBV_WC_EX_WITH_TM_INFO,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
        IBV_WC_STANDARD_FLAGS,
        IBV_CREATE_CQ_SUP_WC_FLAGS,
        IBV_WC_GRH,
        IBV_WC_WITH_IMM,
        IBV_WC_IP_CSUM_OK,
        IBV_WC_WITH_INV,
        IBV_WC_TM_SYNC_REQ,
        IBV_WC_TM_MATCH,
        IBV_WC_TM_DATA_VALID,
        IBV_ACCESS_OPTIONAL_FIRST,
        IBV_ACCESS_OPTIONAL_RANGE,
        IBV_ACCESS_LOCAL_WRITE,
        IBV_ACCESS_REMOTE_WRITE,
        IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_ATOMIC,
        IBV_ACCESS_MW_BIND,
        IBV_ACCESS_ZERO_BASED,
        IBV_ACCESS_ON_DEMAND,
        IBV_ACCESS_HUGETLB,
        IBV_ACCESS_RELAXED_ORDERING,
        IBV_XRCD_INIT_ATTR_FD,
        IBV_XRCD_INIT_ATTR_OFLAGS,
        IBV_XRCD_INIT_ATTR_RESERVED,
        IBV_REREG_MR_CHANGE_TRANSLATION,
        IBV_REREG_MR_CHANGE_PD,
        IBV_REREG_MR_CHANGE_ACCESS,
        IBV_REREG_MR_FLAGS_SUPPORTED,
        IBV_REREG_MR_ERR_INPUT,
        IBV_REREG_MR_ERR_DONT_FORK_NEW,
        IBV_REREG_MR_ERR_DO_FORK_OLD,
        IBV_REREG_MR_ERR_CMD,
        IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW,
        IBV_MW_TYPE_1,
        IBV_MW_TYPE_2,
        IBV_RATE_MAX,
        IBV_RATE_2_5_GBPS,
        IBV_RATE_5_GBPS,
        IBV_RATE_10_GBPS,
        IBV_RATE_20_GBPS,
        IBV_RATE_30_GBPS,
        IBV_RATE_40_GBPS,
        IBV_RATE_60_GBPS,
        IBV_RATE_80_GBPS,
        IBV_RATE_120_GBPS,
        IBV_RATE_14_GBPS,
        IBV_RATE_56_GBPS,
        IBV_RATE_112_GBPS,
        IBV_RATE_168_GBPS,
        IBV_RATE_25_GBPS,
        IBV_RATE_100_GBPS,
        IBV_RATE_200_GBPS,
        IBV_RATE_300_GBPS,
        IBV_RATE_28_GBPS,
        IBV_RATE_50_GBPS,
        IBV_RATE_400_GBPS,
        IBV_RATE_600_GBPS,
        IBV_RATE_800_GBPS,
        IBV_RATE_1200_GBPS,
        IBV_SRQ_MAX_WR,
        IBV_SRQ_LIMIT,
        IBV_SRQT_BASIC,
        IBV_SRQT_XRC,
        IBV_SRQT_TM,
        IBV_SRQ_INIT_ATTR_TYPE,
        IBV_SRQ_INIT_ATTR_PD,
        IBV_SRQ_INIT_ATTR_XRCD,
        IBV_SRQ_INIT_ATTR_CQ,
        IBV_SRQ_INIT_ATTR_TM,
        IBV_SRQ_INIT_ATTR_RESERVED,
        IBV_WQT_RQ,
        IBV_WQ_INIT_ATTR_FLAGS,
        IBV_WQ_INIT_ATTR_RESERVED,
        IBV_WQ_FLAGS_CVLAN_STRIPPING,
        IBV_WQ_FLAGS_SCATTER_FCS,
        IBV_WQ_FLAGS_DELAY_DROP,
        IBV_WQ_FLAGS_PCI_WRITE_END_PADDING,
        IBV_WQ_FLAGS_RESERVED,
        IBV_WQS_RESET,
        IBV_WQS_RDY,
        IBV_WQS_ERR,
        IBV_WQS_UNKNOWN,
        IBV_WQ_ATTR_STATE,
        IBV_WQ_ATTR_CURR_STATE,
        IBV_WQ_ATTR_FLAGS,
        IBV_WQ_ATTR_RESERVED,
        IBV_CREATE_IND_TABLE_RESERVED,
        IBV_QPT_RC,
        IBV_QPT_UC,
        IBV_QPT_UD,
        IBV_QPT_RAW_PACKET,
        IBV_QPT_XRC_SEND,
        IBV_QPT_XRC_RECV,
        IBV_QPT_DRIVER,
        IBV_QP_INIT_ATTR_PD,
        IBV_QP_INIT_ATTR_XRCD,
        IBV_QP_INIT_ATTR_CREATE_FLAGS,
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER,
        IBV_QP_INIT_ATTR_IND_TABLE,
        IBV_QP_INIT_ATTR_RX_HASH,
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        IBV_QP_CREATE_BLOCK_SELF_MCAST_LB,
        IBV_QP_CREATE_SCATTER_FCS,
        IBV_QP_CREATE_CVLAN_STRIPPING,
        IBV_QP_CREATE_SOURCE_QPN,
        IBV_QP_CREATE_PCI_WRITE_END_PADDING,
        IBV_QP_EX_WITH_RDMA_WRITE,
        IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
        IBV_QP_EX_WITH_SEND,
        IBV_QP_EX_WITH_SEND_WITH_IMM,
        IBV_QP_EX_WITH_RDMA_READ,
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        IBV_QP_EX_WITH_LOCAL_INV,
        IBV_QP_EX_WITH_BIND_MW,
        IBV_QP_EX_WITH_SEND_WITH_INV,
        IBV_QP_EX_WITH_TSO,
        IBV_QP_EX_WITH_ATOMIC_WRITE,
        IBV_QP_OPEN_ATTR_NUM,
        IBV_QP_OPEN_ATTR_XRCD,
        IBV_QP_OPEN_ATTR_CONTEXT,
        IBV_QP_OPEN_ATTR_TYPE,
        IBV_QP_OPEN_ATTR_RESERVED,
        IBV_QP_STATE,
        IBV_QP_CUR_STATE,
        IBV_QP_EN_SQD_ASYNC_NOTIFY,
        IBV_QP_ACCESS_FLAGS,
        IBV_QP_PKEY_INDEX,
        IBV_QP_PORT,
        IBV_QP_QKEY,
        IBV_QP_AV,
        IBV_QP_PATH_MTU,
        IBV_QP_TIMEOUT,
        IBV_QP_RETRY_CNT,
        IBV_QP_RNR_RETRY,
        IBV_QP_RQ_PSN,
        IBV_QP_MAX_QP_RD_ATOMIC,
        IBV_QP_ALT_PATH,
        IBV_QP_MIN_RNR_TIMER,
        IBV_QP_SQ_PSN,
        IBV_QP_MAX_DEST_RD_ATOMIC,
        IBV_QP_PATH_MIG_STATE,
        IBV_QP_CAP,
        IBV_QP_DEST_QPN,
        IBV_QP_RATE_LIMIT,
        IBV_QPS_RESET,
        IBV_QPS_INIT,
        IBV_QPS_RTR,
        IBV_QPS_RTS,
        IBV_QPS_SQD,
        IBV_QPS_SQE,
        IBV_QPS_ERR,
        IBV_QPS_UNKNOWN,
        IBV_MIG_MIGRATED,
        IBV_MIG_REARM,
        IBV_MIG_ARMED,
        IBV_WR_RDMA_WRITE,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        IBV_WR_SEND,
        IBV_WR_SEND_WITH_IMM,
        IBV_WR_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV,
        IBV_WR_BIND_MW,
        IBV_WR_SEND_WITH_INV,
        IBV_WR_TSO,
        IBV_WR_DRIVER1,
        IBV_WR_ATOMIC_WRITE,
        IBV_SEND_FENCE,
        IBV_SEND_SIGNALED,
        IBV_SEND_SOLICITED,
        IBV_SEND_INLINE,
        IBV_SEND_IP_CSUM,
        IBV_WR_TAG_ADD,
        IBV_WR_TAG_DEL,
        IBV_WR_TAG_SYNC,
        IBV_OPS_SIGNALED,
        IBV_OPS_TM_SYNC,
        IBV_CQ_ATTR_MODERATE,
        IBV_CQ_ATTR_RESERVED,
        IBV_FLOW_ATTR_FLAGS_DONT_TRAP,
        IBV_FLOW_ATTR_FLAGS_EGRESS,
        IBV_FLOW_ATTR_NORMAL,
        IBV_FLOW_ATTR_ALL_DEFAULT,
        IBV_FLOW_ATTR_MC_DEFAULT,
        IBV_FLOW_ATTR_SNIFFER,
        IBV_FLOW_SPEC_ETH,
        IBV_FLOW_SPEC_IPV4,
        IBV_FLOW_SPEC_IPV6,
        IBV_FLOW_SPEC_IPV4_EXT,
        IBV_FLOW_SPEC_ESP,
        IBV_FLOW_SPEC_TCP,
        IBV_FLOW_SPEC_UDP,
        IBV_FLOW_SPEC_VXLAN_TUNNEL,
        IBV_FLOW_SPEC_GRE,
        IBV_FLOW_SPEC_MPLS,
        IBV_FLOW_SPEC_INNER,
        IBV_FLOW_SPEC_ACTION_TAG,
        IBV_FLOW_SPEC_ACTION_DROP,
        IBV_FLOW_SPEC_ACTION_HANDLE,
        IBV_FLOW_SPEC_ACTION_COUNT,
        IBV_FLOW_ACTION_ESP_MASK_ESN,
        IBV_SYSFS_NAME_MAX,
        IBV_SYSFS_PATH_MAX,
        IBV_CQ_INIT_ATTR_MASK_FLAGS,
        IBV_CQ_INIT_ATTR_MASK_PD,
        IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
        IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS,
        IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
        IBV_ALLOCATOR_USE_DEFAULT = "(uintptr_t)IBV_ALLOCATOR_USE_DEFAULT",
        IBV_COUNTER_PACKETS,
        IBV_COUNTER_BYTES,
        IBV_READ_COUNTERS_ATTR_PREFER_CACHED,
        IBV_VALUES_MASK_RAW_CLOCK,
        IBV_VALUES_MASK_RESERVED,
        IBV_ADVISE_MR_ADVICE_PREFETCH,
        IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
        IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
        IBV_ADVISE_MR_FLAG_FLUSH
    );
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "softrnic-abi-layout-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `cc` with `args`, panicking with the package to install if there is no `cc`.
fn cc(args: &[&std::ffi::OsStr]) -> std::process::Output {
    match Command::new("cc").args(args).output() {
        Ok(out) => out,
        Err(e) => panic!(
            "cannot run the C compiler `cc` ({e}); install it (Debian: `apt-get install gcc`). \
             This test compares the Rust ABI mirror with the real C header."
        ),
    }
}

/// Compiles and runs `program` against the headers in `include` (this machine's if `None`),
/// returning its stdout.
fn run_c(program: &str, include: Option<&std::path::Path>) -> String {
    let include: Vec<&std::ffi::OsStr> = match include {
        Some(dir) => vec!["-I".as_ref(), dir.as_os_str()],
        None => Vec::new(),
    };
    let dir = TempDir::new();

    // First make sure the header itself is there, so that a missing package is not reported as
    // an ABI mismatch.
    let probe = dir.0.join("probe.c");
    std::fs::write(&probe, "#include <infiniband/verbs.h>\n").expect("write C source");
    let out = cc(&[
        &include[..],
        &[
            "-E".as_ref(),
            "-o".as_ref(),
            "/dev/null".as_ref(),
            probe.as_os_str(),
        ],
    ]
    .concat());
    if !out.status.success() {
        panic!(
            "cannot include <infiniband/verbs.h>; install the rdma-core 44 development headers \
             (Debian: `apt-get install libibverbs-dev`).\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let src = dir.0.join("layout.c");
    let exe = dir.0.join("layout");
    std::fs::write(&src, program).expect("write C source");
    let out = cc(&[
        &include[..],
        &[
            "-std=gnu11".as_ref(),
            "-o".as_ref(),
            exe.as_os_str(),
            src.as_os_str(),
        ],
    ]
    .concat());
    if !out.status.success() {
        panic!(
            "compiling the generated C program failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let run = Command::new(&exe)
        .output()
        .expect("run the compiled C program");
    assert!(
        run.status.success(),
        "the generated C program failed: {run:?}"
    );
    String::from_utf8(run.stdout).expect("C program output is UTF-8")
}

fn rdma_cma_h(t: &mut Table) {
    layout!(t, struct rdma_ib_addr { sgid, dgid, pkey });
    anon_union!(t, rdma_addr_src = struct rdma_addr { src_addr, src_sin, src_sin6, src_storage });
    anon_union!(t, rdma_addr_dst = struct rdma_addr { dst_addr, dst_sin, dst_sin6, dst_storage });
    layout!(t, rdma_addr_addr = struct rdma_addr . "addr" { ibaddr });
    layout!(t, struct rdma_addr { src = src_addr, dst = dst_addr, addr });
    layout!(t, struct ibv_sa_path_rec {
        dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class, reversible,
        numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate, packet_life_time_selector,
        packet_life_time, preference,
    });
    layout!(t, struct rdma_route { addr, path_rec, num_paths });
    layout!(t, struct rdma_event_channel { fd });
    layout!(t, struct rdma_cm_id {
        verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq,
        recv_cq_channel, recv_cq, srq, pd, qp_type,
    });
    layout!(t, struct rdma_conn_param {
        private_data, private_data_len, responder_resources, initiator_depth, flow_control,
        retry_count, rnr_retry_count, srq, qp_num,
    });
    layout!(t, struct rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey });
    layout!(t, rdma_cm_event_param = struct rdma_cm_event . "param" { conn, ud, arg });
    layout!(t, struct rdma_cm_event { id, listen_id, event, status, param });
    layout!(t, struct rdma_addrinfo {
        ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr,
        ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route, ai_connect_len,
        ai_connect, ai_next,
    });
    layout!(t, struct rdma_cm_join_mc_attr_ex { comp_mask, join_flags, addr });
    enums!(t, rdma_cm_event_type, rdma_port_space);
    consts!(
        t,
        RDMA_CM_EVENT_ADDR_RESOLVED,
        RDMA_CM_EVENT_ADDR_ERROR,
        RDMA_CM_EVENT_ROUTE_RESOLVED,
        RDMA_CM_EVENT_ROUTE_ERROR,
        RDMA_CM_EVENT_CONNECT_REQUEST,
        RDMA_CM_EVENT_CONNECT_RESPONSE,
        RDMA_CM_EVENT_CONNECT_ERROR,
        RDMA_CM_EVENT_UNREACHABLE,
        RDMA_CM_EVENT_REJECTED,
        RDMA_CM_EVENT_ESTABLISHED,
        RDMA_CM_EVENT_DISCONNECTED,
        RDMA_CM_EVENT_DEVICE_REMOVAL,
        RDMA_CM_EVENT_MULTICAST_JOIN,
        RDMA_CM_EVENT_MULTICAST_ERROR,
        RDMA_CM_EVENT_ADDR_CHANGE,
        RDMA_CM_EVENT_TIMEWAIT_EXIT,
        RDMA_CM_EVENT_ADDRINFO_RESOLVED,
        RDMA_CM_EVENT_ADDRINFO_ERROR,
        RDMA_CM_EVENT_USER,
        RDMA_PS_IPOIB,
        RDMA_PS_TCP,
        RDMA_PS_UDP,
        RDMA_PS_IB,
        RDMA_UDP_QKEY,
        RDMA_MAX_RESP_RES,
        RDMA_MAX_INIT_DEPTH,
        RAI_PASSIVE,
        RAI_NUMERICHOST,
        RAI_NOROUTE,
        RAI_FAMILY,
        RAI_SA,
        RAI_DNS,
        RDMA_OPTION_ID,
        RDMA_OPTION_IB,
        RDMA_OPTION_ID_TOS,
        RDMA_OPTION_ID_REUSEADDR,
        RDMA_OPTION_ID_AFONLY,
        RDMA_OPTION_ID_ACK_TIMEOUT,
        RDMA_OPTION_IB_PATH,
        RDMA_CM_JOIN_MC_ATTR_ADDRESS,
        RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
        RDMA_CM_JOIN_MC_ATTR_RESERVED,
        RDMA_MC_JOIN_FLAG_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_RESERVED,
    );
}

/// An rdma-core release whose headers the mirror is compared with.
struct Release {
    rdma_core: u32,
    /// Debian's suite with this release; `None`: this machine's headers.
    suite: Option<&'static str>,
    /// Members, enum types and constants the release's headers do not have (they came later):
    /// checks whose name ends in one of these are not made.
    absent: &'static [&'static [&'static str]],
    /// Checks with another value in this release, and that value.
    differs: &'static [(&'static str, i64)],
}

/// rdma-core 44 and what makes the others differ from it. Structures grow at their end: a
/// program built with an older header passes or reads a shorter one, with a newer header a
/// longer one, and the provider copes with both (noted where).
const RELEASES: [Release; 4] = [
    Release {
        rdma_core: 33,
        suite: Some("bullseye"),
        absent: &[
            &[
                "ibv_dm.handle",
                "ibv_device_attr_ex.phys_port_cnt_ex",
                "ibv_qp_ex.wr_atomic_write",
                "ibv_fork_status",
                "ibv_dm_mask",
                "IBV_FORK_DISABLED",
                "IBV_FORK_ENABLED",
                "IBV_FORK_UNNEEDED",
                "IBV_DM_MASK_HANDLE",
                "IBV_PORT_LINK_SPEED_NDR_SUP",
                "IBV_WC_ATOMIC_WRITE",
                "IBV_WC_DRIVER2",
                "IBV_WC_DRIVER3",
                "IBV_RATE_800_GBPS",
                "IBV_RATE_1200_GBPS",
                "IBV_QP_EX_WITH_ATOMIC_WRITE",
                "IBV_WR_ATOMIC_WRITE",
            ],
            AFTER_44,
            AFTER_56,
        ],
        // `ibv_qp_ex` ends before `wr_atomic_write`; `ibv_dm` and `ibv_device_attr_ex` kept
        // their sizes (their new members took the room of padding and a reserved field).
        differs: &[("sizeof ibv_qp_ex", 344)],
    },
    Release {
        rdma_core: 44,
        suite: None,
        absent: &[AFTER_44, AFTER_56],
        differs: &[],
    },
    Release {
        rdma_core: 56,
        suite: Some("trixie"),
        absent: &[AFTER_56],
        differs: NEWER,
    },
    Release {
        rdma_core: 65,
        suite: Some("sid"),
        absent: &[],
        differs: NEWER,
    },
];

/// What rdma-core 56 (at the latest) added.
const AFTER_44: &[&str] = &["ibv_qp_ex.wr_flush", "ibv_port_attr.active_speed_ex"];

/// What rdma-core 65 added (`rdma_write_cm_event`, `rdma_resolve_addrinfo`).
const AFTER_56: &[&str] = &[
    "rdma_cm_event_param.arg",
    "RDMA_CM_EVENT_ADDRINFO_RESOLVED",
    "RDMA_CM_EVENT_ADDRINFO_ERROR",
    "RDMA_CM_EVENT_USER",
    "RAI_SA",
    "RAI_DNS",
];

/// Since rdma-core 56 (at the latest): `ibv_port_attr` ends in `active_speed_ex`, which
/// `query_port` fills when the program's structure has it, and `ibv_qp_ex` in `wr_flush`, which
/// the provider places right after rdma-core 44's structure.
const NEWER: &[(&str, i64)] = &[("sizeof ibv_port_attr", 56), ("sizeof ibv_qp_ex", 360)];

impl Release {
    fn name(&self) -> String {
        format!("rdma-core {}", self.rdma_core)
    }

    /// The release's include directory, fetched from Debian if need be.
    fn include(&self) -> Option<PathBuf> {
        let suite = self.suite?;
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = Command::new(root.join("scripts/rdma-core-gap"))
            .args(["--fetch", suite])
            .output()
            .expect("run scripts/rdma-core-gap");
        assert!(
            out.status.success(),
            "fetching Debian {suite}'s rdma-core headers failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = String::from_utf8(out.stdout).expect("a path");
        Some(PathBuf::from(dir.trim()).join("usr/include"))
    }
}

/// Builds `header`'s checks, runs the C side against `release`'s headers and compares.
fn check(header: &str, build: fn(&mut Table), release: &Release) {
    let mut t = Table::default();
    build(&mut t);
    let last_word = |name: &str| name.rsplit(' ').next().unwrap_or_default().to_string();
    t.checks.retain(|c| {
        !release
            .absent
            .concat()
            .contains(&last_word(&c.name).as_str())
    });
    for check in &mut t.checks {
        if let Some(&(_, v)) = release.differs.iter().find(|(n, _)| *n == check.name) {
            check.rust = v;
        }
    }
    let output = run_c(&t.c_program(), release.include().as_deref());

    let mut c_values = BTreeMap::new();
    for line in output.lines() {
        let (index, value) = line.split_once(' ').expect("`index value` line");
        let index: usize = index.parse().expect("index");
        let value: i64 = value.parse().expect("value");
        c_values.insert(index, value);
    }

    let mut mismatches = Vec::new();
    for (i, check) in t.checks.iter().enumerate() {
        match c_values.get(&i) {
            Some(&c) if c == check.rust => {}
            Some(&c) => mismatches.push(format!(
                "{}: rust {} vs c {c}   [{}]",
                check.name, check.rust, check.c_expr
            )),
            None => mismatches.push(format!("{}: no value from the C program", check.name)),
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} ABI checks differ from {}'s {header}:\n{}",
        mismatches.len(),
        t.checks.len(),
        release.name(),
        mismatches.join("\n")
    );
    println!(
        "{}'s {header}: {} checks passed",
        release.name(),
        t.checks.len(),
    );
}

fn rsocket_h(t: &mut Table) {
    consts!(
        t,
        SOL_RDMA,
        RDMA_SQSIZE,
        RDMA_RQSIZE,
        RDMA_INLINE,
        RDMA_IOMAPSIZE,
        RDMA_ROUTE
    );
}

/// The three headers the mirror covers, as `release` has them.
fn headers(release: &Release) {
    check("<infiniband/verbs.h>", verbs_h, release);
    check("<rdma/rdma_cma.h>", rdma_cma_h, release);
    check("<rdma/rsocket.h>", rsocket_h, release);
}

fn release(rdma_core: u32) -> &'static Release {
    RELEASES
        .iter()
        .find(|r| r.rdma_core == rdma_core)
        .expect("a listed release")
}

#[test]
fn abi_matches_rdma_core_44_headers() {
    headers(release(44));
}

#[test]
fn abi_matches_rdma_core_33_headers() {
    headers(release(33));
}

#[test]
fn abi_matches_rdma_core_56_headers() {
    headers(release(56));
}

#[test]
fn abi_matches_rdma_core_65_headers() {
    headers(release(65));
}
