//! Links the shared object as rdma-core's librdmacm.so.1: its SONAME, its symbol versions, and
//! a dependency on libibverbs.so.1, which the dynamic linker then loads (softrnic's, under
//! `softrnic exec`) to resolve the verbs librdmacm calls.
//!
//! The link needs a libibverbs.so.1 to name, and its references must carry libibverbs'
//! versions: an unversioned reference binds to the oldest version, which for
//! `ibv_get_device_list` and friends is the IBVERBS_1.0 compatibility ABI. So a stub is built
//! here with the functions `src/verbs.rs` declares, under the versions the provider's
//! `libibverbs.map` gives them; nothing outside the tree is needed.

use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
    let out = std::env::var("OUT_DIR").expect("set by cargo");
    let map = format!("{dir}/librdmacm.map");
    let verbs_rs = format!("{dir}/src/verbs.rs");
    let verbs_map = format!("{dir}/../ibverbs-provider/libibverbs.map");
    for f in [&map, &verbs_rs, &verbs_map] {
        println!("cargo:rerun-if-changed={f}");
    }
    let calls: Vec<String> = std::fs::read_to_string(&verbs_rs)
        .expect("src/verbs.rs")
        .split("pub fn ")
        .skip(1)
        .filter_map(|s| s.split('(').next().map(str::to_owned))
        .collect();
    // Each call under the version block of libibverbs.map that lists it.
    let text = std::fs::read_to_string(&verbs_map).expect("libibverbs.map");
    let mut script = String::new();
    let mut previous: Option<String> = None;
    for block in text.split("};").filter(|b| b.contains('{')) {
        let (head, body) = block.split_once('{').expect("a block");
        let version = head
            .split_whitespace()
            .last()
            .expect("a version name")
            .to_owned();
        let names: Vec<&String> = calls
            .iter()
            .filter(|c| {
                body.split(|ch: char| ch == ';' || ch.is_whitespace())
                    .any(|w| w == c.as_str())
            })
            .collect();
        script.push_str(&format!("{version} {{\n"));
        if !names.is_empty() {
            script.push_str("global:\n");
            names
                .iter()
                .for_each(|n| script.push_str(&format!("{n};\n")));
        }
        script.push('}');
        if let Some(p) = &previous {
            script.push_str(&format!(" {p}"));
        }
        script.push_str(";\n");
        previous = Some(version);
    }
    let source: String = calls
        .iter()
        .map(|c| format!("void {c}(void) {{}}\n"))
        .collect();
    std::fs::write(format!("{out}/stub.c"), source).expect("write the stub");
    std::fs::write(format!("{out}/stub.map"), script).expect("write the stub's versions");
    let stub = format!("{out}/libibverbs.so.1");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-nostdlib", "-Wl,-soname,libibverbs.so.1"])
        .arg(format!("-Wl,--version-script={out}/stub.map"))
        .args(["-o", &stub, &format!("{out}/stub.c")])
        .status()
        .unwrap_or_else(|e| panic!("{cc} (the C compiler that links Rust on Linux): {e}"));
    assert!(status.success(), "building the libibverbs.so.1 stub failed");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={map}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    // The stub by its path (not `-l:`, which zig's linker, used to build for an older glibc,
    // does not take): DT_NEEDED gets its SONAME.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-cdylib-link-arg={stub}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--as-needed");
}
