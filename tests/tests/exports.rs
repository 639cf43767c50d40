//! The drop-in `libibverbs.so.1` and `librdmacm.so.1` export what Debian's rdma-core 44 ones
//! do, version for version; each has its SONAME; what Debian's other RDMA libraries import
//! from libibverbs is there; and librdmacm's own calls into libibverbs carry libibverbs'
//! versions (an unversioned reference would bind to the IBVERBS_1.0 compatibility ABI).
//! `scripts/rdma-core-gap` makes the same checks against the libraries of rdma-core 33, 56
//! and 65 (Debian 11, 13 and unstable), fetched from Debian.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const SYSTEM_LIB: &str = "/usr/lib/x86_64-linux-gnu";

/// A shared object cargo built beside this test.
fn built(file: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let so = exe.with_file_name(file);
    assert!(so.is_file(), "{} not built", so.display());
    so
}

fn provider() -> PathBuf {
    built("libsoftrnic_ibverbs_provider.so")
}

fn rdmacm() -> PathBuf {
    built("libsoftrnic_rdmacm.so")
}

/// `objdump -T`: (version as objdump shows it, name) of each dynamic symbol whose version
/// starts with `prefix`, defined or imported.
fn symbols(lib: &Path, imported: bool, prefix: &str) -> BTreeSet<(String, String)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("objdump (binutils)");
    assert!(out.status.success(), "objdump {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("*UND*") == imported)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (v, n) = (f.get(f.len().checked_sub(2)?)?, f.last()?);
            (v.trim_start_matches('(').starts_with(prefix) && !n.starts_with(prefix))
                .then(|| (v.to_string(), n.to_string()))
        })
        .collect()
}

fn system(lib: &str) -> PathBuf {
    let path = Path::new(SYSTEM_LIB).join(lib);
    assert!(
        path.exists(),
        "install Debian's rdma-core ({lib}) to compare with"
    );
    path
}

fn soname(lib: &Path) -> String {
    let out = Command::new("readelf").arg("-d").arg(lib).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn libibverbs_exports_every_versioned_symbol_of_rdma_core_44() {
    // The private version too: what rdma-core's own provider libraries import from it.
    let theirs = symbols(&system("libibverbs.so.1"), false, "IBVERBS");
    let ours = symbols(&provider(), false, "IBVERBS");
    let missing: Vec<_> = theirs.difference(&ours).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    // Hidden compatibility versions too, e.g. `(IBVERBS_1.0) ibv_get_device_list`.
    assert!(ours.contains(&("(IBVERBS_1.0)".into(), "ibv_get_device_list".into())));
    assert!(soname(&provider()).contains("Library soname: [libibverbs.so.1]"));
}

#[test]
fn librdmacm_exports_every_versioned_symbol_of_rdma_core_44() {
    let theirs = symbols(&system("librdmacm.so.1"), false, "RDMACM");
    let ours = symbols(&rdmacm(), false, "RDMACM");
    assert!(theirs.len() > 60, "{theirs:?}");
    let missing: Vec<_> = theirs.difference(&ours).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    // Beyond rdma-core 44's: only the versions later releases added (checked against them
    // below).
    let later = ["RDMACM_1.4", "RDMACM_1.5"];
    let extra: Vec<_> = ours
        .difference(&theirs)
        .filter(|(v, _)| !later.contains(&v.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "exported beyond rdma-core 44 and later: {extra:?}"
    );
    let dynamic = soname(&rdmacm());
    assert!(
        dynamic.contains("Library soname: [librdmacm.so.1]"),
        "{dynamic}"
    );
    assert!(
        dynamic.contains("Shared library: [libibverbs.so.1]"),
        "{dynamic}"
    );
}

/// Every shared library Debian's `ibverbs-providers` installs: libmlx5, libefa, libmlx4 and
/// the rest, and the verbs providers under `libibverbs/`.
fn debian_providers() -> Vec<PathBuf> {
    let out = Command::new("dpkg")
        .args(["-L", "ibverbs-providers"])
        .output()
        .expect("dpkg");
    let libs: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .filter(|p| {
            p.extension().is_some_and(|e| e == "so") || p.to_string_lossy().contains(".so.")
        })
        .filter(|p| p.is_file() && !p.is_symlink())
        .collect();
    assert!(
        libs.len() >= 10,
        "install Debian's ibverbs-providers: {libs:?}"
    );
    libs
}

#[test]
fn what_debians_rdma_libraries_and_ours_import_from_libibverbs_is_there() {
    let ours = symbols(&provider(), false, "IBVERBS");
    let importers = debian_providers()
        .into_iter()
        .chain([system("librdmacm.so.1"), rdmacm()]);
    let mut checked = 0;
    for lib in importers {
        for (v, n) in symbols(&lib, true, "IBVERBS") {
            let v = v.trim_matches(|c| c == '(' || c == ')').to_string();
            let exported = ours.contains(&(v.clone(), n.clone()))
                || ours.contains(&(format!("({v})"), n.clone()));
            assert!(exported, "{} imports {n}@{v}", lib.display());
            checked += 1;
        }
    }
    assert!(checked > 300, "only {checked} imports checked");
    // Every libibverbs call of softrnic's librdmacm names its version.
    let out = Command::new("objdump")
        .arg("-T")
        .arg(rdmacm())
        .output()
        .unwrap();
    let unversioned: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("*UND*") && l.contains(" ibv_") && !l.contains("IBVERBS_"))
        .map(str::to_owned)
        .collect();
    assert!(unversioned.is_empty(), "{unversioned:#?}");
}

/// What `scripts/rdma-core-gap` finds missing for Debian `suite`: nothing.
fn no_gap(suite: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/rdma-core-gap");
    let out = Command::new(script)
        .arg(suite)
        .output()
        .expect("scripts/rdma-core-gap");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the drop-ins lack what {suite}'s rdma-core has:\n{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every provider library was looked at (the script prints a line for each).
    let providers = said
        .lines()
        .filter(|l| l.contains(" imports missing"))
        .count();
    assert!(providers >= 10, "{said}");
}

#[test]
fn rdma_core_33s_libraries_find_what_they_need() {
    no_gap("bullseye");
}

#[test]
fn rdma_core_56s_libraries_find_what_they_need() {
    no_gap("trixie");
}

#[test]
fn rdma_core_65s_libraries_find_what_they_need() {
    no_gap("sid");
}
