//! The drop-in `libibverbs.so.1` that lets unmodified RDMA programs run on softrnic.
//!
//! Not written yet: this crate reserves its place in the workspace. See issue 5.
