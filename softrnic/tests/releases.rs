//! The drop-in libraries under another Debian release's userland: a root file system made with
//! `debootstrap` from Debian's packages (kept in target/rdma-core/ROOTFS between runs), with that
//! release's own rdma-core, perftest and rdmacm-utils, runs its programs against a softrnic
//! daemon of this host: Debian 11 (bullseye, rdma-core 33), 12 (bookworm, 44: this host's own
//! userland, which the other tests use directly), 13 (trixie, 56) and unstable (sid, 65). Each
//! release's own rdma-core test suite runs there too. `scripts/rdma-core-gap` lists what a release's
//! libraries need (docs/compatibility.md).
//!
//! A failure to build the root file system is the harness's, and says so; a program that fails
//! inside it is softrnic's.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::*;

const MIRROR: &str = "http://deb.debian.org/debian";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What a root file system has beyond a minimal base: the release's RDMA programs, and its
/// rdma-core test suite (python3-pyverbs) with what that runs (iproute2's `ip -j`).
const PACKAGES: &str = "perftest,ibverbs-utils,rdmacm-utils,libgcc-s1,python3-pyverbs,iproute2";

/// The suite's root file system, made once (again if [`PACKAGES`] changed).
fn rootfs(suite: &str) -> PathBuf {
    let dir = root()
        .join("target/rdma-core")
        .join(format!("rootfs-{suite}"));
    let made = std::fs::read_to_string(dir.join(".complete")).unwrap_or_default();
    if made == format!("{suite} {PACKAGES}") {
        return dir;
    }
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    let out = Command::new("debootstrap")
        .args(["--variant=minbase", &format!("--include={PACKAGES}"), suite])
        .arg(&partial)
        .arg(MIRROR)
        .output()
        .expect("harness: debootstrap (Debian's debootstrap package)");
    assert!(
        out.status.success(),
        "harness: debootstrap {suite} failed:\n{}",
        text(&out.stderr)
    );
    // A chroot needs what a real system has: names for localhost.
    std::fs::copy("/etc/hosts", partial.join("etc/hosts")).unwrap();
    std::fs::write(partial.join(".complete"), format!("{suite} {PACKAGES}")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&partial, &dir).unwrap();
    dir
}

/// The drop-ins, as `libibverbs.so.1` and `librdmacm.so.1`, in the root file system: this
/// build's, or for a userland whose glibc is older than this machine's, a build for that glibc
/// (`scripts/build-for-glibc`).
fn install_dropins(rootfs: &Path, glibc: Option<&str>) {
    let dir = rootfs.join("opt/softrnic");
    std::fs::create_dir_all(&dir).unwrap();
    let built = glibc.map(|v| PathBuf::from(script("build-for-glibc", &[v])));
    for (from, to) in [
        ("libsoftrnic_ibverbs_provider.so", "libibverbs.so.1"),
        ("libsoftrnic_rdmacm.so", "librdmacm.so.1"),
    ] {
        let lib = built
            .as_ref()
            .map_or_else(|| dropin(from), |d| d.join(from));
        std::fs::copy(lib, dir.join(to)).unwrap();
    }
    // softrnic's `rdma` (rdma-core 56's tests run `rdma link show -j`), where this machine's
    // build of the command runs: a userland whose glibc is not older.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let _ = std::fs::remove_file(bin.join("rdma"));
    if glibc.is_none() {
        std::fs::copy(env!("CARGO_BIN_EXE_softrnic"), bin.join("rdma")).unwrap();
    }
}

/// The command line that runs a program of the root file system in a mount namespace of its
/// own where /proc, /sys, /dev (with what is mounted under them) and the daemon's socket
/// directory are bound into it, with the drop-ins on `LD_LIBRARY_PATH` and softrnic's `rdma`
/// first on PATH.
fn in_rootfs_args(rootfs: &Path, socket: &Path, args: &[&str]) -> Vec<String> {
    let sockdir = socket.parent().unwrap();
    let inside = Path::new("/run/softrnic").join(socket.file_name().unwrap());
    let r = rootfs.display();
    let script = format!(
        "set -e; for d in proc sys dev; do mount --rbind /$d {r}/$d; done; \
         mkdir -p {r}/run/softrnic; mount --bind {} {r}/run/softrnic; \
         exec chroot {r} env LD_LIBRARY_PATH=/opt/softrnic SOFTRNIC_SOCKET={} \
         PATH=/opt/softrnic/bin:/usr/sbin:/usr/bin:/sbin:/bin \"$@\"",
        sockdir.display(),
        inside.display()
    );
    [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
    ]
    .into_iter()
    .chain(args.iter().copied())
    .map(str::to_owned)
    .collect()
}

/// A program of the root file system (see [`in_rootfs_args`]).
fn in_rootfs(rootfs: &Path, socket: &Path, args: &[&str]) -> Command {
    let all = in_rootfs_args(rootfs, socket, args);
    let mut c = Command::new(&all[0]);
    c.args(&all[1..]);
    c
}

/// A server program of the root file system, started, its output kept for `finish`.
fn started(rootfs: &Path, socket: &Path, args: &[&str]) -> Running {
    let child = in_rootfs(rootfs, socket, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Running(child)
}

fn finished(out: Output, what: &str) -> String {
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{what}: {:?}\n{all}", out.status);
    all
}

/// Debian 11's glibc is 2.31, older than this machine's: the drop-ins are built for it.
#[test]
fn debian_11_programs_run_on_the_drop_ins() {
    programs_run("bullseye", 33, Some("2.31"));
}

/// Debian 12 is this machine's userland too; its root file system runs the same harness.
#[test]
fn debian_12_programs_run_on_the_drop_ins() {
    programs_run("bookworm", 44, None);
}

#[test]
fn debian_13_programs_run_on_the_drop_ins() {
    programs_run("trixie", 56, None);
}

#[test]
fn debian_unstable_programs_run_on_the_drop_ins() {
    programs_run("sid", 65, None);
}

/// Debian `suite`'s own programs (rdma-core `rdma_core`'s ibverbs-utils, perftest and
/// rdmacm-utils) between two processes of its root file system, on one softrnic device.
fn programs_run(suite: &str, rdma_core: u32, glibc: Option<&str>) {
    let _serial = serial();
    let rootfs = rootfs(suite);
    install_dropins(&rootfs, glibc);
    let host = Host::start(suite, None, None);
    let gid = host.gid.to_string();
    let dump = in_rootfs(&rootfs, &host.socket, &["dpkg-query", "-W", "libibverbs1*"])
        .output()
        .unwrap();
    let versions = finished(dump, "dpkg-query");
    assert!(
        versions.contains(&format!("\t{rdma_core}.")),
        "rdma-core {rdma_core} in {suite}: {versions}"
    );
    let info = in_rootfs(&rootfs, &host.socket, &["ibv_devinfo"])
        .output()
        .unwrap();
    assert!(finished(info, "ibv_devinfo").contains("hca_id:\tsrnic0"));

    let pairs: [(&[&str], &str); 6] = [
        (
            &["ibv_rc_pingpong", "-c", "-n", "50", "-g", &gid],
            "50 iters in",
        ),
        (&["ib_write_bw", "-n", "200", "-x", &gid], "65536"),
        (&["ib_read_lat", "-n", "200", "-x", &gid], "#bytes"),
        (
            &["ib_send_bw", "-c", "UD", "-n", "200", "-x", &gid],
            "#bytes",
        ),
        (&["ib_atomic_bw", "-n", "200", "-x", &gid], "#bytes"),
        (&["ib_write_bw", "-R", "-n", "200", "-x", &gid], "65536"),
    ];
    // With -R, perftest's client may send its second REQ before its server listens again
    // (see `perftest_pair` in rdma_cm.rs): refused with reason 8, as by the kernel, and run
    // again, at most five times.
    let mut lost_races = 0;
    let mut pairs = pairs.into_iter().peekable();
    while let Some(&(args, want)) = pairs.peek() {
        let port = next_port();
        let mut server_args = args.to_vec();
        server_args.extend(["-p", &port]);
        let mut server = started(&rootfs, &host.socket, &server_args);
        // With -R perftest connects through RDMA CM, which listens on the port instead of TCP.
        let cm = args.contains(&"-R");
        server.wait_until("listened", || {
            if cm {
                cm_listening(&host, &port)
            } else {
                listening(None, &port)
            }
        });
        let mut client_args = server_args.clone();
        client_args.push("127.0.0.1");
        let client = in_rootfs(&rootfs, &host.socket, &client_args)
            .output()
            .unwrap();
        let said = text(&client.stdout) + &text(&client.stderr);
        if cm && !client.status.success() && said.contains("REJECTED; error: 8") && lost_races < 5 {
            lost_races += 1;
            continue;
        }
        pairs.next();
        let out = finished(client, args[0]);
        assert!(out.contains(want), "{args:?}: {out}");
        // The server succeeded too (latency tests print their figures on the client only).
        server.finish(&server_args);
    }
    // RDMA CM, through the drop-in librdmacm: rping, ucmatose (connections) and udaddy (UD,
    // with SIDR; it serves port 7174, its -p being the port space).
    let (p1, p2) = (next_port(), next_port());
    let ip = "127.0.0.1";
    let cm: [(&[&str], &[&str], &str, &str); 3] = [
        (
            &["rping", "-s", "-C", "5", "-a", ip, "-p", &p1],
            &["rping", "-c", "-v", "-C", "5", "-a", ip, "-p", &p1],
            &p1,
            "ping data: rdma-ping-4",
        ),
        (
            &["ucmatose", "-b", ip, "-c", "2", "-C", "10", "-p", &p2],
            &["ucmatose", "-s", ip, "-c", "2", "-C", "10", "-p", &p2],
            &p2,
            "return status 0",
        ),
        (
            &["udaddy", "-b", ip, "-c", "2", "-C", "10"],
            &["udaddy", "-s", ip, "-c", "2", "-C", "10"],
            "7174",
            "return status 0",
        ),
    ];
    for (server_args, client_args, port, want) in cm {
        let mut server = started(&rootfs, &host.socket, server_args);
        server.wait_until("listened", || cm_listening(&host, port));
        let client = in_rootfs(&rootfs, &host.socket, client_args)
            .output()
            .unwrap();
        let out = finished(client, client_args[0]);
        assert!(out.contains(want), "{client_args:?}: {out}");
        server.finish(server_args);
    }
}

/// Runs the release's own rdma-core test suite (python3-pyverbs ships it) in its root file
/// system on a softrnic device, under `softrnic exec` for the device's `/sys` view; returns
/// (ran, failed, skipped) and the log.
fn own_suite(suite: &str, glibc: Option<&str>) -> ((u32, u32, u32), String) {
    let _serial = serial();
    let rootfs = rootfs(suite);
    install_dropins(&rootfs, glibc);
    // Debian compresses the larger modules: an unpacked copy in /root/tests.
    let tests = rootfs.join("root/tests");
    let _ = std::fs::remove_dir_all(&tests);
    let copied = Command::new("cp")
        .arg("-r")
        .arg(rootfs.join("usr/share/doc/rdma-core/tests"))
        .arg(&tests)
        .status()
        .unwrap();
    assert!(
        copied.success(),
        "harness: no rdma-core tests in {suite}'s python3-pyverbs"
    );
    let unpacked = Command::new("sh")
        .arg("-c")
        .arg(format!("gzip -df {}/*.gz", tests.display()))
        .status()
        .unwrap();
    assert!(unpacked.success(), "harness: gzip");
    let host = Host::start(&format!("{suite}-suite"), None, None);
    let gid = host.gid.to_string();
    let mut run = vec![
        "python3",
        "/root/tests/run_tests.py",
        "--dev",
        "srnic0",
        "-v",
    ];
    // rdma-core 33's suite has no --gid (it finds a GID itself).
    let options = std::fs::read_to_string(tests.join("args_parser.py")).unwrap_or_default();
    if options.contains("'--gid'") {
        run.extend(["--gid", &gid]);
    }
    let log = std::env::temp_dir().join(format!("srn-suite-{suite}-{}", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    let mut child = Running(
        host.program(&in_rootfs_args(&rootfs, &host.socket, &run))
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap(),
    );
    let status = child.wait_at_most(SUITE_LIMIT);
    let out = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        status.is_some(),
        "{suite}'s rdma-core suite still ran after {SUITE_LIMIT:?}:\n{out}"
    );
    let counts = unittest_summary(&out);
    let (ran, failed, skipped) = counts;
    eprintln!(
        "{suite}: rdma-core tests: {ran} ran, {} passed, {failed} failed, {skipped} skipped",
        ran - failed - skipped
    );
    (counts, out)
}

/// How long a release's suite may run (about a minute here; the rest is for a loaded machine).
const SUITE_LIMIT: std::time::Duration = std::time::Duration::from_secs(900);

/// A release's suite passes where it runs: nothing fails, and at least as many pass as on this
/// commit (docs/compatibility.md has the counts; the skips are features softrnic has not, such
/// as ODP and device memory, or tests for mlx5 and EFA hardware).
fn own_suite_passes(suite: &str, glibc: Option<&str>, at_least: u32) {
    let ((ran, failed, skipped), log) = own_suite(suite, glibc);
    assert_eq!(failed, 0, "{log}");
    assert!(
        ran - skipped >= at_least,
        "only {} passed:\n{log}",
        ran - skipped
    );
}

#[test]
fn debian_11s_rdma_core_suite_passes_where_it_runs() {
    own_suite_passes("bullseye", Some("2.31"), 80);
}

#[test]
fn debian_12s_rdma_core_suite_passes_where_it_runs() {
    own_suite_passes("bookworm", None, 107);
}

#[test]
fn debian_13s_rdma_core_suite_passes_where_it_runs() {
    own_suite_passes("trixie", None, 113);
}

#[test]
fn debian_unstables_rdma_core_suite_passes_where_it_runs() {
    own_suite_passes("sid", None, 132);
}

/// `softrnic exec` inside a chroot, as sbuild and pbuilder run a package's tests: the command
/// and its libraries side by side in Debian 13's root file system, /proc, /sys and /dev bound
/// into it (its root is no mount's root). The command finds its libraries beside itself as
/// the chroot sees it, and shows softrnic's devices in the chroot's /sys and /dev only.
#[test]
fn softrnic_exec_runs_a_chroots_own_programs() {
    let _serial = serial();
    let rootfs = rootfs("trixie");
    let dir = rootfs.join("opt/softrnic-exec");
    std::fs::create_dir_all(&dir).unwrap();
    let _ = std::fs::remove_file(dir.join("softrnic"));
    std::fs::copy(env!("CARGO_BIN_EXE_softrnic"), dir.join("softrnic")).unwrap();
    for lib in ["libsoftrnic_ibverbs_provider.so", "libsoftrnic_rdmacm.so"] {
        std::fs::copy(dropin(lib), dir.join(lib)).unwrap();
    }
    let host = Host::start("chroot", None, None);
    let exec = |program: &[&str]| {
        let mut args = vec![
            "env",
            "-u",
            "LD_LIBRARY_PATH",
            "/opt/softrnic-exec/softrnic",
        ];
        args.extend(["exec", "--"]);
        args.extend(program);
        finished(
            in_rootfs(&rootfs, &host.socket, &args).output().unwrap(),
            program[0],
        )
    };
    let info = exec(&["ibv_devinfo"]);
    assert!(info.contains("hca_id:\tsrnic0"), "{info}");
    let view = exec(&["ls", "/sys/class/infiniband", "/dev/infiniband"]);
    assert!(
        view.contains("srnic0") && view.contains("uverbs0") && !view.contains("softrnic:"),
        "{view}"
    );
    assert!(!Path::new("/sys/class/infiniband").exists());
}
