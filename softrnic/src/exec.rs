//! `softrnic exec -- PROGRAM ARGS`: runs an unmodified RDMA program on softrnic. The program
//! loads softrnic's `libibverbs.so.1` and `librdmacm.so.1` instead of rdma-core's, through
//! `LD_LIBRARY_PATH`; the daemon is started (with a local device) if none is running. The
//! program sees softrnic's devices in `/sys/class/infiniband` and `/dev/infiniband` too
//! ([`view`](crate::view)).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use softrnic_client::Client;

use crate::{admin, view};

/// A drop-in library: the name programs load it by, the file cargo builds, and the variable
/// that names another file.
struct Library {
    soname: &'static str,
    file: &'static str,
    env: &'static str,
    package: &'static str,
}

/// The drop-in libibverbs and librdmacm.
const LIBRARIES: [Library; 2] = [
    Library {
        soname: "libibverbs.so.1",
        file: "libsoftrnic_ibverbs_provider.so",
        env: "SOFTRNIC_PROVIDER",
        package: "softrnic-ibverbs-provider",
    },
    Library {
        soname: "librdmacm.so.1",
        file: "libsoftrnic_rdmacm.so",
        env: "SOFTRNIC_RDMACM",
        package: "softrnic-rdmacm",
    },
];

/// Where `lib` is: its variable, else beside this executable or in its `deps/` (where cargo
/// leaves it when it is built as a dependency of the command), else in `../lib/softrnic/` of
/// an installed tree.
fn find(lib: &Library) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(lib.env) {
        return Ok(p.into());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [
        dir.join(lib.file),
        dir.join("deps").join(lib.file),
        dir.join("../lib/softrnic").join(lib.file),
    ];
    // cargo leaves both a top-level copy and the one in deps/ when both were built; the
    // newer is the current one.
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    candidates
        .iter()
        .filter(|p| p.is_file())
        .max_by_key(|p| modified(p))
        .cloned()
        .ok_or_else(|| {
            format!(
                "softrnic's {} is not built (looked for {}); build it with `cargo build \
             --release -p {}`, or name it with {}",
                lib.soname,
                candidates[0].display(),
                lib.package,
                lib.env
            )
        })
}

/// A directory holding `libibverbs.so.1` and `librdmacm.so.1` (links to softrnic's), for
/// `LD_LIBRARY_PATH`, and `bin/rdma` (this command) for PATH. Each link is replaced atomically, so programs started at the same time
/// all see one.
fn library_dir() -> Result<PathBuf, String> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("softrnic-lib-{}", softrnic_sys::uid()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for lib in &LIBRARIES {
        link(&find(lib)?, &dir.join(lib.soname))?;
    }
    // And `rdma` (this command by that name) for PATH.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    link(
        &std::env::current_exe().map_err(|e| e.to_string())?,
        &bin.join("rdma"),
    )?;
    Ok(dir)
}

/// Makes `link` point at `file`, replacing an older link atomically.
fn link(file: &Path, link: &Path) -> Result<(), String> {
    let target = file
        .canonicalize()
        .map_err(|e| format!("{}: {e}", file.display()))?;
    if std::fs::read_link(link).ok().as_deref() != Some(target.as_path()) {
        let name = link.file_name().unwrap_or_default().to_string_lossy();
        let tmp = link.with_file_name(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, link).map_err(|e| format!("{}: {e}", link.display()))?;
    }
    Ok(())
}

/// Each device with its port, as the view shows them.
fn devices(client: &mut Client) -> Result<Vec<view::Device>, String> {
    let infos = client.devices().map_err(|e| e.to_string())?;
    infos
        .into_iter()
        .map(|info| {
            let mut c = Client::connect(&admin::socket()).map_err(|e| e.to_string())?;
            c.open(&info.name).map_err(|e| e.to_string())?;
            let port = c.query_port().map_err(|e| e.to_string())?;
            Ok(view::Device { info, port })
        })
        .collect()
}

/// `rdma ARGS` (see [`crate::rdma`]) about the daemon's devices, printed.
pub fn rdma(args: &[String]) -> Result<(), String> {
    let out = crate::rdma::answer(args, || {
        let mut client = Client::connect(&admin::socket()).map_err(|e| e.to_string())?;
        devices(&mut client)
    })?;
    print!("{out}");
    Ok(())
}

/// Runs `program` (replacing this process) against softrnic; with `view`, in a mount
/// namespace where `/sys/class/infiniband` and `/dev/infiniband` show softrnic's devices.
pub fn exec(program: &[OsString], view: bool) -> Result<(), String> {
    let (name, args) = program.split_first().ok_or("no program to run")?;
    // Before the view's mount namespace: from there this command's own path may read as the
    // host sees it (a chroot's directory outside it).
    let dir = library_dir()?;
    let mut client = admin::connect_with_a_device()?;
    if view && let Err(why) = devices(&mut client).and_then(|d| view::enter(&d)) {
        eprintln!(
            "softrnic: {why}; the program runs without softrnic's devices in \
             /sys/class/infiniband and /dev/infiniband, where UCX looks for them"
        );
    }
    drop(client);
    let mut path = OsString::from(&dir);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let mut bin = dir.join("bin").into_os_string();
    if let Some(old) = std::env::var_os("PATH") {
        bin.push(":");
        bin.push(old);
    }
    let err = Command::new(name)
        .args(args)
        .env("LD_LIBRARY_PATH", path)
        .env("PATH", bin)
        .env("SOFTRNIC_SOCKET", admin::socket())
        .exec();
    Err(format!("{}: {err}", name.to_string_lossy()))
}
