//! RDMA middleware on softrnic: Debian's UCX (`ucx-utils`), unmodified, through `softrnic
//! exec`, on one host and across a veth pair. UCX takes a device only where the kernel would
//! show it (`/dev/infiniband`, `/sys/class/infiniband`): `softrnic exec` gives the program that
//! view. Needs root (namespaces) and the packages `scripts/test` installs.

mod common;

use std::process::Stdio;

use common::*;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn ucx_lists_softrnic_devices_with_rc_and_ud_verbs() {
    let _serial = serial();
    let s = Setup::new(Topology::OneHost, "ucxinfo");
    let out = s
        .client()
        .program(&strings(&["ucx_info", "-d"]))
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    for want in [
        "# Memory domain: srnic0",
        "#      Transport: rc_verbs",
        "#      Transport: ud_verbs",
        "#         Device: srnic0:1",
    ] {
        assert!(said.contains(want), "no {want:?} in:\n{said}");
    }
}

/// Runs `ucx_perftest ARGS` as server and client with `UCX_TLS=tls`; the client's final row
/// (iterations; latency percentile, average and overall; bandwidth and message rate, average
/// and overall).
fn ucx_perftest(s: &Setup, tls: &str, args: &[&str]) -> Vec<f64> {
    let port = next_port();
    let mut argv = strings(&["ucx_perftest", "-p", &port]);
    argv.extend(strings(args));
    let server = s
        .server()
        .program(&argv)
        .env("UCX_TLS", tls)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = Running(server);
    server.wait_until("listened", || listening(s.server().ns.as_deref(), &port));
    argv.insert(1, s.server_addr.into());
    let client = s
        .client()
        .program(&argv)
        .env("UCX_TLS", tls)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let what = format!("UCX_TLS={tls} {argv:?}");
    let out = Running(client).finish(&[&what]);
    server.finish(&[&what]);
    let row = out
        .lines()
        .find_map(|l| l.strip_prefix("Final:"))
        .unwrap_or_else(|| panic!("{what}: no final row in\n{out}"));
    let row: Vec<f64> = row
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(row.len(), 8, "{what}: {out}");
    assert!(row[0] > 0.0 && row[5] > 0.0, "{what}: {out}");
    row
}

/// UCX over each verbs transport: UCP's tag matching, put, get and active messages
/// (`rc_v` is rc_verbs with ud_verbs for its wire-up, as UCX names the pair; a lone
/// `UCX_TLS=rc_verbs` has no transport to connect it with, on any device), and UCT's
/// operations on each transport alone. Large tag messages go by rendezvous: RDMA READ on RC.
#[test]
fn ucx_perftest_runs_over_rc_and_ud_verbs() {
    let _serial = serial();
    let n = ["-n", "1000", "-w", "100"];
    for (i, t) in TOPOLOGIES.into_iter().enumerate() {
        let s = Setup::new(t, &format!("ucx{i}"));
        for tls in ["rc_v", "ud_v"] {
            for test in [
                &["-t", "tag_lat"][..],
                &["-t", "tag_bw"],
                &["-t", "tag_bw", "-s", "1048576"],
                &["-t", "ucp_put_bw", "-s", "65536"],
                &["-t", "ucp_get", "-s", "65536"],
                &["-t", "ucp_am_lat"],
                &["-t", "ucp_am_bw"],
            ] {
                let iters = if test.contains(&"1048576") {
                    &["-n", "50"][..]
                } else {
                    &n
                };
                ucx_perftest(&s, tls, &[test, iters].concat());
            }
        }
        let uct = |tl, test: &[&str]| {
            let dev = ["-d", "srnic0:1", "-x", tl];
            ucx_perftest(&s, tl, &[&dev[..], test, &n].concat())
        };
        for tl in ["rc_verbs", "ud_verbs"] {
            uct(tl, &["-t", "am_lat"]);
            uct(tl, &["-t", "am_bw", "-D", "bcopy", "-s", "1000"]);
        }
        uct("rc_verbs", &["-t", "put_bw", "-D", "zcopy", "-s", "65536"]);
        uct("rc_verbs", &["-t", "put_lat"]);
        uct("rc_verbs", &["-t", "get", "-D", "zcopy", "-s", "65536"]);
        uct("rc_verbs", &["-t", "fadd"]);
        uct("rc_verbs", &["-t", "cswap"]);
    }
}

/// `softrnic exec` as a user without privileges, as `nobody`: the view comes from a user
/// namespace of its own (Debian allows unprivileged ones); where it cannot be made, the
/// program runs anyway, told why.
#[test]
fn the_device_view_needs_no_root() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("srn-nobody-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let socket = dir.join("softrnic.sock");
    let as_nobody = |tmp: &std::path::Path, script: &str| {
        std::process::Command::new("runuser")
            .args([
                "-u",
                "nobody",
                "--",
                env!("CARGO_BIN_EXE_softrnic"),
                "exec",
                "--",
            ])
            .args(["sh", "-c", script])
            .env("SOFTRNIC_SOCKET", &socket)
            .env("TMPDIR", tmp)
            .env("XDG_RUNTIME_DIR", &dir)
            .output()
            .unwrap()
    };
    let port = "/sys/class/infiniband/srnic0/ports/1";
    let out = as_nobody(
        &dir,
        &format!("id -u; cat {port}/gid_attrs/types/1 {port}/state"),
    );
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert_eq!(said, "65534\nRoCE v2\n4: ACTIVE\n", "{}", text(&out.stderr));
    // No directory to build the view in: the program runs without it, and says so.
    let out = as_nobody(
        std::path::Path::new("/proc"),
        "ls /sys/class/infiniband; echo ran",
    );
    assert!(
        text(&out.stdout).ends_with("ran\n"),
        "{}",
        text(&out.stdout)
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("the program runs without softrnic's devices in /sys/class/infiniband"),
        "{err}"
    );
    let daemon = softrnic_client::Client::connect(&socket)
        .unwrap()
        .daemon_pid();
    let _ = std::process::Command::new("kill")
        .arg(daemon.to_string())
        .status();
    let _ = std::fs::remove_dir_all(&dir);
}
