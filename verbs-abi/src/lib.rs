//! The C ABI that softrnic's drop-in libraries share: the layouts of `<infiniband/verbs.h>`
//! ([`abi`]), conversions between them and the engine's types for the control path
//! ([`convert`]), and [`exported!`], which exports C entry points under versioned names.
//! The drop-in `libibverbs.so.1` and `librdmacm.so.1` are separate shared objects (librdmacm
//! calls libibverbs through the dynamic linker, as rdma-core's does), so what they share is
//! here rather than in either.

// `exported!` expands to `unsafe extern "C"` entry points in the crates that use it.
#![allow(unsafe_code)]

pub mod abi;
pub mod convert;

/// Defines C entry points exported under rdma-core's names with the versions the linker's
/// version script (`libibverbs.map`, `librdmacm.map`) gives them. rustc lists every exported Rust symbol in a
/// version script of its own, which wins over ours; so each function is exported as
/// `softrnic_NAME` and `NAME` is an assembler alias that only our script names.
#[macro_export]
macro_rules! exported {
    ($(
        $(#[$attr:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    )*) => {$(
        $(#[$attr])*
        #[unsafe(export_name = concat!("softrnic_", stringify!($name)))]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? $body
        std::arch::global_asm!(concat!(
            ".globl ", stringify!($name), "\n",
            ".set ", stringify!($name), ", softrnic_", stringify!($name)
        ));
    )*};
}

/// Sets the calling thread's errno.
pub fn set_errno(e: i32) {
    // SAFETY: glibc's per-thread errno location is always valid.
    unsafe { *libc::__errno_location() = e };
}
