//! Links the shared object as rdma-core's libibverbs.so.1: its SONAME and its symbol versions.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
    let map = format!("{dir}/libibverbs.map");
    println!("cargo:rerun-if-changed={map}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={map}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}
