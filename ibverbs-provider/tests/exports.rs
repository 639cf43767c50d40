//! The built `libibverbs.so.1` exports what Debian's rdma-core 44 libibverbs does, version for
//! version, and everything Debian's other RDMA libraries import from it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const SYSTEM_LIB: &str = "/usr/lib/x86_64-linux-gnu";

/// The shared object cargo built beside this test.
fn built() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let so = exe.with_file_name("libsoftrnic_ibverbs_provider.so");
    assert!(so.is_file(), "{} not built", so.display());
    so
}

/// `objdump -T`: (version as objdump shows it, name) of each dynamic symbol, defined or
/// imported.
fn symbols(lib: &Path, imported: bool) -> BTreeSet<(String, String)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("objdump (binutils)");
    assert!(out.status.success(), "objdump {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("*UND*") == imported && l.contains("IBVERBS"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (v, n) = (f.get(f.len().checked_sub(2)?)?, f.last()?);
            (v.contains("IBVERBS") && !n.starts_with("IBVERBS"))
                .then(|| (v.to_string(), n.to_string()))
        })
        .collect()
}

#[test]
fn every_versioned_symbol_of_rdma_core_44_is_exported_with_its_version() {
    let system = Path::new(SYSTEM_LIB).join("libibverbs.so.1");
    assert!(
        system.exists(),
        "install libibverbs1 (Debian's rdma-core) to compare with"
    );
    let theirs: BTreeSet<_> = symbols(&system, false)
        .into_iter()
        .filter(|(v, _)| !v.contains("PRIVATE"))
        .collect();
    let ours = symbols(&built(), false);
    let missing: Vec<_> = theirs.difference(&ours).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    // Hidden compatibility versions too, e.g. `(IBVERBS_1.0) ibv_get_device_list`.
    assert!(ours.contains(&("(IBVERBS_1.0)".into(), "ibv_get_device_list".into())));
    let out = Command::new("readelf")
        .arg("-d")
        .arg(built())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("[libibverbs.so.1]"),
        "SONAME"
    );
}

#[test]
fn what_debians_rdma_libraries_import_is_there() {
    let ours = symbols(&built(), false);
    let mut checked = 0;
    for lib in ["libmlx5.so.1", "libefa.so.1", "librdmacm.so.1"] {
        let path = Path::new(SYSTEM_LIB).join(lib);
        assert!(
            path.exists(),
            "install ibverbs-providers and librdmacm1 ({lib})"
        );
        for (v, n) in symbols(&path, true) {
            let v = v.trim_matches(|c| c == '(' || c == ')').to_string();
            let exported = ours.contains(&(v.clone(), n.clone()))
                || ours.contains(&(format!("({v})"), n.clone()));
            assert!(exported, "{lib} imports {n}@{v}");
            checked += 1;
        }
    }
    assert!(checked > 60, "only {checked} imports checked");
}
