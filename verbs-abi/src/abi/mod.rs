//! `#[repr(C)]` mirror of the public structs, unions and enum values of rdma-core 44's
//! `<infiniband/verbs.h>` (libibverbs-dev 44.0, Debian 12, x86_64): the ABI that programs linked
//! against `libibverbs.so.1` were compiled with.
//!
//! Type and field names are exactly the C ones, so code can be written against the C
//! documentation and man pages. Every struct's size and alignment, every field's offset and size,
//! every enum's size and signedness and every constant's value is compared with the real C header
//! by `tests/tests/layout.rs` (it compiles a C program with `cc`).
//!
//! Conventions:
//! - C `enum ibv_xxx` types are `pub type ibv_xxx = u32;` (GCC gives an enum without negative
//!   values the type `unsigned int`), or `i32` for the few enums that have negative values
//!   (`ibv_node_type`, `ibv_transport_type`, `ibv_rereg_mr_err_code`), which GCC makes `int`.
//!   Their values are plain `pub const`s of that type.
//! - Values of anonymous C enums get the type of the field they are meant for where there is one
//!   (`IBV_LINK_LAYER_*` are `u8` like `ibv_port_attr::link_layer`, `IBV_SYSFS_*_MAX` are
//!   `usize`), `u32` otherwise. `#define`d 64-bit flags are `u64`.
//! - `__be16`/`__be32`/`__be64` are aliases of `u16`/`u32`/`u64` holding big-endian values.
//! - Function pointers are `Option<unsafe extern "C" fn(..)>` with the C parameter types; `None`
//!   is the C `NULL`.
//! - Named nested (non-typedef'd) C structs/unions, such as `ibv_send_wr`'s `wr` union, get a
//!   Rust type named `<outer>_<member>` (`ibv_send_wr_wr`, `ibv_send_wr_rdma`, ...).
//! - Anonymous C unions (whose members C code reaches directly, `wc.imm_data`) become one Rust
//!   field of a union type holding the C members under their C names:
//!   - `ibv_wc::imm: ibv_wc_imm { imm_data, invalidated_rkey }`
//!   - `ibv_send_wr::imm: ibv_send_wr_imm { imm_data, invalidate_rkey }`
//!   - `ibv_send_wr::bind_mw_tso: ibv_send_wr_bind_mw_tso { bind_mw, tso }`
//!
//!   so C's `wc.imm_data` is Rust's `wc.imm.imm_data` and `wr.bind_mw.rkey` is
//!   `wr.bind_mw_tso.bind_mw.rkey`.
//! - C fields named with a Rust keyword use a raw identifier: `ibv_mw::r#type`,
//!   `ibv_flow_attr::r#type`, `ibv_wc_tm_info::r#priv`, `verbs_context::r#priv`.
//! - Structs only ever handled through pointers here (`verbs_ex_private`,
//!   `ibv_flow_action_esp_attr`, ...) are opaque.
//! - `pthread_mutex_t`/`pthread_cond_t`/`timespec` are libc's.
#![allow(non_camel_case_types, non_snake_case, missing_docs)]

use core::ffi::{c_char, c_int, c_uint, c_void};

pub use libc::{pthread_cond_t, pthread_mutex_t, timespec};

/// Big-endian (network byte order) 16-bit value, C `__be16`.
pub type __be16 = u16;
/// Big-endian (network byte order) 32-bit value, C `__be32`.
pub type __be32 = u32;
/// Big-endian (network byte order) 64-bit value, C `__be64`.
pub type __be64 = u64;

mod ah;
mod context;
mod cq;
mod device;
mod event;
mod flow;
mod gid;
mod memory;
mod objects;
mod opaque;
mod port;
mod qp;
mod srq;
mod wc;
mod wq;
mod wr;

pub use ah::*;
pub use context::*;
pub use cq::*;
pub use device::*;
pub use event::*;
pub use flow::*;
pub use gid::*;
pub use memory::*;
pub use objects::*;
pub use opaque::*;
pub use port::*;
pub use qp::*;
pub use srq::*;
pub use wc::*;
pub use wq::*;
pub use wr::*;
