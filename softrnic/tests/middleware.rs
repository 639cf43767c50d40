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

/// Runs `argv` on `host`, which must succeed and print each of `wants`.
fn says(host: &Host, argv: &[&str], wants: &[&str]) {
    let out = host.program(&strings(argv)).output().unwrap();
    let said = text(&out.stdout);
    assert!(
        out.status.success(),
        "{argv:?}: {said}{}",
        text(&out.stderr)
    );
    for want in wants {
        assert!(said.contains(want), "{argv:?}: no {want:?} in:\n{said}");
    }
}

/// Runs `server` on the server host with `env`, and once it listens on TCP `port`, `client`
/// on the client host with `env`; both must succeed. The client's output.
fn served(
    s: &Setup,
    env: &[(&str, &str)],
    port: &str,
    server: &[String],
    client: &[String],
) -> String {
    let mut srv = start(s.server(), env, server);
    srv.wait_until("listened", || listening(s.server().ns.as_deref(), port));
    let what = format!("{env:?} {client:?}");
    let out = start(s.client(), env, client).finish(&[&what]);
    srv.finish(&[&what]);
    out
}

/// Starts `argv` on `host` with `env`, its output piped.
fn start(host: &Host, env: &[(&str, &str)], argv: &[String]) -> Running {
    let mut c = host.program(argv);
    c.envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Running(c.spawn().unwrap())
}

#[test]
fn ucx_lists_softrnic_devices_with_rc_and_ud_verbs() {
    let _serial = serial();
    let s = Setup::new(Topology::OneHost, "ucxinfo");
    let wants = [
        "# Memory domain: srnic0",
        "#      Transport: rc_verbs",
        "#      Transport: ud_verbs",
        "#         Device: srnic0:1",
    ];
    says(s.client(), &["ucx_info", "-d"], &wants);
}

/// Runs `ucx_perftest ARGS` as server and client with `UCX_TLS=tls`; the client's final row
/// (iterations; latency percentile, average and overall; bandwidth and message rate, average
/// and overall).
fn ucx_perftest(s: &Setup, tls: &str, args: &[&str]) -> Vec<f64> {
    let port = next_port();
    let mut argv = strings(&["ucx_perftest", "-p", &port]);
    argv.extend(strings(args));
    let mut client = argv.clone();
    client.insert(1, s.server_addr.into());
    let out = served(s, &[("UCX_TLS", tls)], &port, &argv, &client);
    let what = format!("UCX_TLS={tls} {client:?}");
    let row = out
        .lines()
        .find_map(|l| l.strip_prefix("Final:"))
        .unwrap_or_else(|| panic!("{what}: no final row in\n{out}"));
    let row: Vec<f64> = row
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(row.len(), 8, "{what}: {out}");
    // Every iteration ran (`-n`), at some rate: a latency run's bandwidth may print as 0.00.
    let n = args.iter().skip_while(|&&a| a != "-n").nth(1);
    let iterations: f64 = n.and_then(|n| n.parse().ok()).expect("-n in the arguments");
    assert!(row[0] == iterations && row[7] > 0.0, "{what}: {out}");
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

/// `mpirun` of two ranks of `exe` with Open MPI's UCX layers (`pml ucx` for messages, `osc ucx`
/// for windows) on UCX transports `tls`, and the options Open MPI needs to start as root on a
/// small machine.
fn mpirun(tls: &str, exe: &std::path::Path) -> Vec<String> {
    let mut v = strings(&[
        "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "2",
        "--mca",
        "pml",
        "ucx",
        "--mca",
        "osc",
        "ucx",
        "-x",
        &format!("UCX_TLS={tls}"),
    ]);
    v.push(exe.display().to_string());
    v
}

/// Open MPI over UCX on softrnic: a ping-pong of every size from 1 byte to 1 MiB, an allreduce
/// and a one-sided window, each checked byte for byte, over RC and over UD.
#[test]
fn open_mpi_over_ucx_checks_its_data() {
    let _serial = serial();
    let exe = c_program_with("mpicc", "mpi_check", &[]);
    let s = Setup::new(Topology::OneHost, "mpi");
    let sent = || {
        let mut c = softrnic_client::Client::connect(&s.client().socket).unwrap();
        c.counters("srnic0").unwrap().sent_pkts
    };
    for tls in ["rc_v", "ud_v"] {
        let before = sent();
        let out = s.client().program(&mpirun(tls, &exe)).output().unwrap();
        let said = text(&out.stdout);
        assert!(out.status.success(), "{tls}: {said}{}", text(&out.stderr));
        assert!(said.contains("mpi_check: ok"), "{tls}: {said}");
        // The bytes went through softrnic, not another path: the 1 MiB round trips alone are
        // 200 MiB, at least 51,200 frames of 4 KiB.
        let frames = sent() - before;
        assert!(frames > 51_200, "{tls}: only {frames} frames");
    }
}

/// libfabric's verbs provider (Debian's 1.17) on softrnic: `fi_info` lists each device for
/// connected (MSG, through RDMA CM) and datagram endpoints, and `fi_pingpong` runs over each
/// endpoint type, every size from 0 bytes to 6 MiB checked (`-c`): datagrams, connected
/// endpoints, and reliable datagrams over RxM (which asks for a CQ of 262,144 entries); on one
/// host through the device on `lo`.
#[test]
fn libfabric_pingpongs_over_every_verbs_endpoint_type() {
    let _serial = serial();
    for (i, t) in TOPOLOGIES.into_iter().enumerate() {
        let s = Setup::new(t, &format!("fi{i}"));
        let wants = [
            "domain: srnic0\n",
            "type: FI_EP_MSG",
            "domain: srnic0-dgram",
            "type: FI_EP_DGRAM",
        ];
        says(s.client(), &["fi_info", "-p", "verbs"], &wants);
        // Given no address, libfabric's verbs provider has fi_pingpong's MSG and RxM servers
        // listen at "localhost" (it binds 127.0.0.1) and hand that name to the client: on
        // another host the client cannot reach it. fi_pingpong has no option to name another,
        // so across hosts the next test runs MSG and RxM with a program that does.
        let endpoints: &[(&str, &str)] = match t {
            Topology::Veth => &[("verbs", "dgram")],
            _ => &[
                ("verbs", "dgram"),
                ("verbs", "msg"),
                ("verbs;ofi_rxm", "rdm"),
            ],
        };
        for &(provider, ep) in endpoints {
            let port = next_port();
            let args = [
                "fi_pingpong",
                "-p",
                provider,
                "-e",
                ep,
                "-I",
                "20",
                "-S",
                "all",
                "-c",
            ];
            let mut server = strings(&args);
            server.extend(strings(&["-B", &port]));
            let mut client = strings(&args);
            client.extend(strings(&["-P", &port, s.server_addr]));
            let out = served(&s, &[], &port, &server, &client);
            let what = format!("{t:?} {args:?}");
            // Up to the path MTU (at least 1 KiB) for datagrams, else up to fi_pingpong's
            // largest size, 6 MiB, every size went both ways.
            let last = if ep == "dgram" { "1k " } else { "6m " };
            assert!(
                out.lines()
                    .any(|l| l.starts_with(last) && l.contains("=20 ")),
                "{what}:\n{out}"
            );
        }
    }
}

/// libfabric's connected endpoints (MSG, through RDMA CM) and reliable datagrams over RxM
/// across the veth, with `tests/c/fi_check.c`: a ping-pong of every size from 1 byte to 64 KiB,
/// each message checked, whose server binds the address it is given (fi_pingpong's binds
/// "localhost", which the other host cannot reach).
#[test]
fn libfabric_msg_and_rdm_endpoints_work_across_hosts() {
    let _serial = serial();
    let exe = c_program("fi_check", &["-lfabric"]).display().to_string();
    let s = Setup::new(Topology::Veth, "fichk");
    for ep in ["msg", "rdm"] {
        let port = next_port();
        let argv =
            |last: &[&str]| strings(&[&[exe.as_str(), "-e", ep, "-p", &port], last].concat());
        let mut srv = start(s.server(), &[], &argv(&["-b", s.server_addr]));
        srv.wait_until("listened", || cm_listening(s.server(), &port));
        let client = start(s.client(), &[], &argv(&[s.server_addr])).finish(&[ep]);
        let server = srv.finish(&[ep]);
        for out in [client, server] {
            assert_eq!(out, "fi_check: 340 messages checked\n", "{ep}");
        }
    }
}

/// On a host whose kernel has RDMA devices, the view shows softrnic's in their place (and only
/// softrnic's: a program must not open a device softrnic's library does not have); with
/// `--no-view`, the program sees the host's. Played in a mount namespace of the test's own
/// whose `/sys/class/infiniband` holds a kernel device, `mlx5_0`.
#[test]
fn the_device_view_replaces_the_hosts_devices() {
    let _serial = serial();
    let host = Host::start("hostview", None, None);
    let kernel_devices = r#"
set -e
orig=$(mktemp -d)
mount --bind /sys/class "$orig"
mount -t tmpfs host-sysfs /sys/class
for d in "$orig"/*; do
    n=$(basename "$d"); mkdir "/sys/class/$n"; mount --bind "$d" "/sys/class/$n"
done
mkdir -p /sys/class/infiniband/mlx5_0 /sys/class/infiniband_verbs/uverbs7
"$@" sh -c 'ls /sys/class/infiniband /sys/class/infiniband_verbs | tr "\n" " "'
"#;
    let run = |exec: &[&str]| {
        let out = std::process::Command::new("unshare")
            .args([
                "-m",
                "--propagation",
                "private",
                "bash",
                "-c",
                kernel_devices,
                "bash",
            ])
            .arg(env!("CARGO_BIN_EXE_softrnic"))
            .args(exec)
            .env("SOFTRNIC_SOCKET", &host.socket)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(
        run(&["exec", "--"]),
        "/sys/class/infiniband: srnic0  /sys/class/infiniband_verbs: abi_version uverbs0 "
    );
    assert_eq!(
        run(&["exec", "--no-view", "--"]),
        "/sys/class/infiniband: mlx5_0  /sys/class/infiniband_verbs: uverbs7 "
    );
}
