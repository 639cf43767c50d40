//! Real, unmodified Debian RDMA programs (rdma-core's examples and perftest) run through
//! `softrnic exec` over two topologies: two processes on one host (one daemon with a local
//! device), and two hosts in network namespaces joined by a veth pair (a daemon in each, on
//! its end of the pair). Needs root (namespaces) and the Debian packages `ibverbs-utils`,
//! `perftest` and `iproute2`, which `scripts/test` installs.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use softrnic_client::client::Client;
use softrnic_link::netns::VethPair;

#[test]
fn ibv_devices_and_ibv_devinfo_show_the_device() {
    let _serial = serial();
    for (i, t) in TOPOLOGIES.into_iter().enumerate() {
        let s = Setup::new(t, &format!("dv{i}"));
        let h = s.client();
        let out = h.program(&["ibv_devices".into()]).output().unwrap();
        assert!(out.status.success());
        assert!(
            text(&out.stdout).contains("srnic0"),
            "{t:?}: {}",
            text(&out.stdout)
        );
        let out = h
            .program(&["ibv_devinfo".into(), "-v".into()])
            .output()
            .unwrap();
        let info = text(&out.stdout);
        assert!(out.status.success(), "{t:?}: {}", text(&out.stderr));
        for want in [
            "hca_id:\tsrnic0",
            "PORT_ACTIVE (4)",
            "link_layer:\t\tEthernet",
            "RoCE v2",
            "ATOMIC_HCA",
            "MEM_WINDOW_TYPE_2B",
        ] {
            assert!(info.contains(want), "{t:?}: no {want:?} in\n{info}");
        }
    }
}

#[test]
fn ibv_rc_pingpong_from_1_byte_to_1_mib_polling_and_with_events() {
    let _serial = serial();
    for (i, t) in TOPOLOGIES.into_iter().enumerate() {
        let s = Setup::new(t, &format!("rc{i}"));
        for (size, iters) in [
            (1, 200),
            (1024, 200),
            (4096, 200),
            (65536, 50),
            (1 << 20, 10),
        ] {
            let (size, iters) = (size.to_string(), iters.to_string());
            for events in [false, true] {
                let mut args = vec!["ibv_rc_pingpong", "-c", "-s", &size, "-n", &iters];
                if events {
                    args.push("-e");
                }
                let (server, client) = s.run("-g", &args);
                let want = format!("{iters} iters in");
                assert!(
                    client.contains(&want) && server.contains(&want),
                    "{t:?} {args:?}"
                );
            }
        }
        // The extended post-send API (ibv_wr_*), across a path MTU boundary.
        let (_, client) = s.run(
            "-g",
            &["ibv_rc_pingpong", "-c", "-N", "-s", "5000", "-n", "50"],
        );
        assert!(client.contains("50 iters in"), "{t:?}");
    }
}

/// A capture must not change what happens on the wire: with one running, a receiver that
/// exits right after its last completion still acknowledged everything (the sender's last
/// SEND used to run out of retries 4 times in 10).
#[test]
fn a_capture_changes_nothing_for_a_program_that_exits_at_once() {
    let _serial = serial();
    let s = Setup::new(Topology::OneHost, "capt");
    let frames = captured(s.server(), || {
        for _ in 0..10 {
            let args = ["ibv_rc_pingpong", "-n", "50", "-s", "5000"];
            let (server, client) = s.run("-g", &args);
            assert!(server.contains("50 iters in") && client.contains("50 iters in"));
        }
    });
    assert!(!frames.is_empty());
    let counters = s.server().softrnic(&["stat"]).output().unwrap();
    let stat = text(&counters.stdout);
    for zero in ["retransmitted_pkts", "local_ack_timeout_err"] {
        assert!(
            stat.lines().any(|l| l.trim() == format!("{zero}: 0")),
            "{zero} in\n{stat}"
        );
    }
}

#[test]
fn ibv_uc_ud_and_srq_pingpong() {
    let _serial = serial();
    for (i, t) in TOPOLOGIES.into_iter().enumerate() {
        let s = Setup::new(t, &format!("ud{i}"));
        for args in [
            &["ibv_uc_pingpong", "-c", "-s", "65536", "-n", "50"][..],
            &["ibv_uc_pingpong", "-c", "-e", "-n", "200"],
            &["ibv_ud_pingpong", "-c", "-s", "1024", "-n", "200"],
            &["ibv_ud_pingpong", "-c", "-e", "-s", "512", "-n", "200"],
            &["ibv_srq_pingpong", "-c", "-n", "200"],
            &["ibv_srq_pingpong", "-c", "-e", "-q", "4", "-n", "100"],
        ] {
            let (server, client) = s.run("-g", args);
            let n = args[args.len() - 1];
            let want = format!("{n} iters in");
            assert!(
                client.contains(&want) && server.contains(&want),
                "{t:?} {args:?}"
            );
        }
    }
}

/// XRC (IBA Annex A14; kernel rxe has none): `ibv_xsrq_pingpong` on one host and across the
/// veth, its server serving two clients at once through two XRC SRQs of one domain, each
/// client's messages reaching the server's SRQ through a target QP of the domain.
#[test]
fn ibv_xsrq_pingpong_runs_over_xrc() {
    let _serial = serial();
    for (i, t) in TOPOLOGIES.into_iter().enumerate() {
        let s = Setup::new(t, &format!("xrc{i}"));
        let n = ["-n", "100"];
        let (server, clients) = s.serve(
            "-g",
            &["ibv_xsrq_pingpong", "-c", "2", n[0], n[1]],
            &["ibv_xsrq_pingpong", n[0], n[1]],
            2,
        );
        for out in clients.iter().chain([&server]) {
            assert!(out.contains("success"), "{t:?}: {out}");
        }
    }
}

/// XRC domains shared by file between two contexts, as between two programs (the kernel's
/// `O_CREAT`/`O_EXCL` rules), `ibv_open_qp` of the other's target QP, and EBUSY for a domain
/// still in use.
#[test]
fn xrc_domains_are_shared_by_file_and_target_qps_opened_by_number() {
    let _serial = serial();
    c_program_prints("xrc_domain", &["-libverbs"], "xrcd", "xrc_domain: ok\n");
}

/// Two devices of one daemon, each on its own worker thread: everything between them crosses
/// threads (RC with its ACKs, UD, an SRQ, READs, atomics, several QPs at once), and the data
/// the pingpongs check arrives whole.
#[test]
fn programs_on_devices_of_two_workers() {
    let _serial = serial();
    across_threads(&Setup::new(Topology::TwoWorkers, "wk"));
}

/// What the tests of programs on several workers run: pingpongs that check their data (RC with
/// its ACKs, UD, an SRQ), then perftest (READs, atomics, several QPs at once). Each pingpong's
/// server and client output.
fn across_threads(s: &Setup) -> Vec<(String, String)> {
    let mut said = Vec::new();
    for args in [
        &["ibv_rc_pingpong", "-c", "-s", "65536", "-n", "100"][..],
        &["ibv_rc_pingpong", "-c", "-e", "-n", "200"],
        &["ibv_ud_pingpong", "-c", "-s", "1024", "-n", "200"],
        &["ibv_srq_pingpong", "-c", "-q", "4", "-n", "100"],
    ] {
        let (server, client) = s.run("-g", args);
        let want = format!("{} iters in", args[args.len() - 1]);
        assert!(client.contains(&want) && server.contains(&want), "{args:?}");
        said.push((server, client));
    }
    // Two workers and two perftest processes that spin on their CQs share this machine's
    // two cores: beside CPU hogs, a worker may wait past perftest's ACK timeout (-u 14, 67
    // ms) eight times running, and the transport's retries run out (READs, whose responses
    // take longest, first). The QPs get a timeout (-u 18, 1.07 s) that such waits fit in.
    for args in [
        &["ib_write_bw", "-q", "8", "-n", "200"][..],
        &["ib_read_bw", "-q", "4", "-n", "100"],
        &["ib_atomic_bw", "-A", "FETCH_AND_ADD", "-n", "200"],
        &["ib_send_lat", "-n", "200"],
    ] {
        perftest(s, &[args, &["-F", "-u", "18"]].concat());
    }
    said
}

/// One local device in two shards on two workers: the server's and the client's programs
/// each get a shard (their QPNs are in different lanes), and everything between them crosses
/// from shard to shard by destination QPN: RC with its ACKs, UD, an SRQ, READs, atomics,
/// several QPs at once. It is still one device: one in the status, its counters those of both
/// shards (every frame one sent the other received), a capture of it shows both shards'
/// frames. Programs on different shards cannot share an XRC domain: the second
/// `ibv_xsrq_pingpong` is refused with EOPNOTSUPP.
#[test]
fn programs_on_the_shards_of_one_device() {
    let _serial = serial();
    let s = Setup::new(Topology::Shards, "shard");
    across_threads(&s);
    // Each program's QPs are its shard's: all of one lane, the other's all of the other (one
    // engine would number 8 QPs of a program in both).
    let (server, client) = s.run(
        "-x",
        &["ib_write_bw", "-q", "8", "-n", "50", "-F", "-u", "18"],
    );
    let lanes = |out: &str| -> std::collections::BTreeSet<u32> {
        local_qpns(out).iter().map(|q| q % 2).collect()
    };
    assert_eq!(lanes(&server).len(), 1, "{server}");
    assert_eq!(lanes(&client).len(), 1, "{client}");
    assert_ne!(lanes(&server), lanes(&client), "{server}\n{client}");
    // A capture of the device shows both shards' frames: each same-host frame twice, leaving
    // its sender's shard and reaching its receiver's.
    let frames = captured_on(s.server(), Some("srnic0"), || {
        let (server, _) = s.run("-g", &["ibv_rc_pingpong", "-n", "20"]);
        assert!(server.contains("20 iters in"), "{server}");
    });
    let mut seen = std::collections::BTreeMap::<&[u8], usize>::new();
    for f in &frames {
        *seen.entry(f).or_default() += 1;
    }
    assert!(
        !seen.is_empty() && seen.values().all(|n| n % 2 == 0),
        "{} frames",
        frames.len()
    );

    let status = text(&s.server().softrnic(&["status"]).output().unwrap().stdout);
    assert!(
        status.contains("srnic0:") && !status.contains("srnic1"),
        "{status}"
    );
    let stat = text(&s.server().softrnic(&["stat"]).output().unwrap().stdout);
    let counter = |name: &str| -> u64 {
        stat.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{stat}"))
    };
    assert!(counter("sent_pkts") > 0, "{stat}");
    assert_eq!(counter("sent_pkts"), counter("rcvd_pkts"), "{stat}");

    // The first program's domain is on its shard (its CQs come right after it); the second
    // program goes to the other.
    let host = s.server();
    let (_server, mut client) = waiting_server(host, "ibv_xsrq_pingpong");
    client.push("127.0.0.1".into());
    let client = host.program(&client).output().unwrap();
    let said = text(&client.stderr);
    assert!(said.contains("Couldn't Open the XRC Domain 95"), "{said}");
}

/// A wired (AF_XDP) device in two shards on two workers, each shard with one of the
/// interface's two queues: it sends on its own, and a frame that arrives on the other's
/// crosses to its QP's shard. Everything `across_threads` runs passes between two such hosts.
/// Then, with a program holding the server's first shard, `ib_write_bw -q 8` runs on the
/// server's second shard (all its QPNs in lane 1) and the client's first (lane 0): the
/// server's frames leave on its queue 1 and arrive on the client's queue 1, its second
/// shard's, which hands them to the first.
#[test]
fn programs_on_the_shards_of_a_wired_device() {
    let _serial = serial();
    let s = Setup::new(Topology::VethShards, "wsh");
    let status = text(&s.server().softrnic(&["status"]).output().unwrap().stdout);
    assert!(
        status.contains("on 2 receive queues in 2 shards"),
        "{status}"
    );
    across_threads(&s);

    let _first = waiting_server(s.server(), "ibv_rc_pingpong");
    let pair = s.pair.as_ref().expect("veth");
    let before = xdp_redirected(pair, 1, 1);
    let (server, client) = s.run(
        "-x",
        &["ib_write_bw", "-q", "8", "-n", "200", "-F", "-u", "18"],
    );
    let lanes = |out: &str| -> std::collections::BTreeSet<u32> {
        local_qpns(out).iter().map(|q| q % 2).collect()
    };
    assert_eq!(lanes(&server), [1].into(), "{server}");
    assert_eq!(lanes(&client), [0].into(), "{client}");
    let after = xdp_redirected(pair, 1, 1);
    assert!(after > before, "no frame reached the client's queue 1");
}

/// The frames receive queue `q` of veth end `i` has redirected to its AF_XDP socket.
fn xdp_redirected(pair: &VethPair, i: usize, q: usize) -> u64 {
    let stats = in_ns(Some(&pair.ns[i]), "ethtool")
        .args(["-S", &pair.ifs[i]])
        .output()
        .expect("ethtool");
    let (stats, key) = (text(&stats.stdout), format!("rx_queue_{q}_xdp_redirect:"));
    (stats.lines())
        .find_map(|l| l.trim().strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in\n{stats}"))
}

/// The QPNs a perftest or pingpong program says its QPs have (`local address: ... QPN 0x...`).
fn local_qpns(out: &str) -> Vec<u32> {
    let qpns: Vec<u32> = out
        .lines()
        .filter(|l| l.contains("local address:"))
        .filter_map(|l| {
            let rest = l.split("QPN 0x").nth(1)?;
            let hex: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
            u32::from_str_radix(&hex, 16).ok()
        })
        .collect();
    assert!(!qpns.is_empty(), "no local QPN in\n{out}");
    qpns
}

/// AF_XDP serves every receive queue of its interface: the QPs of `ib_write_bw -q 16` leave
/// on the queue their UDP source port picks (random per QP: all 16 on one of two queues is a
/// chance of 2 in 65,536), so both of the server's queues receive, and the data goes through.
#[test]
fn af_xdp_receives_on_every_queue() {
    let _serial = serial();
    let s = Setup::new(Topology::Veth, "mq");
    let status = s.server().softrnic(&["status"]).output().unwrap();
    assert!(
        text(&status.stdout).contains("on 2 receive queues"),
        "{}",
        text(&status.stdout)
    );
    perftest(&s, &["ib_write_bw", "-q", "16", "-n", "100", "-F"]);
    let pair = s.pair.as_ref().expect("veth");
    assert!(xdp_redirected(pair, 0, 0) > 0 && xdp_redirected(pair, 0, 1) > 0);
}

/// Runs a perftest pair and checks the client printed a result row.
fn perftest(s: &Setup, args: &[&str]) -> Vec<f64> {
    let (_, client) = s.run("-x", args);
    perftest_row(&client)
}

#[test]
fn perftest_write_and_read() {
    let _serial = serial();
    for (i, t) in TOPOLOGIES.into_iter().enumerate() {
        let s = Setup::new(t, &format!("wr{i}"));
        let row = perftest(&s, &["ib_write_bw", "-a", "-n", "10", "-F"]);
        assert_eq!(row[0], (1u32 << 23) as f64, "{t:?}: -a ends at 8 MiB");
        perftest(&s, &["ib_write_bw", "-q", "4", "-n", "200", "-F"]);
        perftest(&s, &["ib_write_lat", "-n", "200", "-F"]);
        perftest(&s, &["ib_read_bw", "-n", "200", "-F"]);
        perftest(&s, &["ib_read_bw", "-q", "4", "-n", "100", "-F"]);
        perftest(&s, &["ib_read_lat", "-a", "-n", "10", "-F"]);
    }
}

#[test]
fn perftest_send_over_rc_uc_and_ud() {
    let _serial = serial();
    for (i, t) in TOPOLOGIES.into_iter().enumerate() {
        let s = Setup::new(t, &format!("sd{i}"));
        for c in ["RC", "UC", "UD"] {
            // UC and UD have no retransmission: under load, a burst that finds the receiving
            // daemon off the CPU overflows its receive ring, the message is lost (as on a
            // congested wire), and perftest would wait forever for a fixed count. So their
            // bandwidth runs for a time instead; RC recovers what is lost and runs a count.
            let bw: &[&str] = if c == "RC" {
                &["-n", "200"]
            } else {
                &["-D", "2"]
            };
            let args = [&["ib_send_bw", "-c", c, "-F"][..], bw].concat();
            perftest(&s, &args);
            // One message in flight never overflows a ring.
            perftest(&s, &["ib_send_lat", "-c", c, "-n", "200", "-F"]);
        }
        perftest(&s, &["ib_send_bw", "-c", "UD", "-a", "-n", "20", "-F"]);
        perftest(&s, &["ib_send_bw", "-q", "4", "-n", "100", "-F"]);
    }
}

#[test]
fn perftest_atomics_compare_and_swap_and_fetch_and_add() {
    let _serial = serial();
    for (i, t) in TOPOLOGIES.into_iter().enumerate() {
        let s = Setup::new(t, &format!("at{i}"));
        for op in ["CMP_AND_SWAP", "FETCH_AND_ADD"] {
            perftest(&s, &["ib_atomic_bw", "-A", op, "-n", "200", "-F"]);
            perftest(&s, &["ib_atomic_lat", "-A", op, "-n", "200", "-F"]);
        }
    }
}

#[test]
fn rdma_cores_own_test_suite_passes_where_it_runs() {
    let _serial = serial();
    let (dir, tests) = rdma_core_tests();
    let host = Host::start("pyverbs", None, None);
    let out = host
        .program(&[
            "/usr/bin/python3".into(),
            tests.join("run_tests.py").display().to_string(),
            "--dev".into(),
            "srnic0".into(),
            "--gid".into(),
            host.gid.to_string(),
            "-v".into(),
        ])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let log = text(&out.stderr);
    let (ran, failed, skipped) = unittest_summary(&log);
    eprintln!(
        "rdma-core tests: {ran} ran, {} passed, {failed} failed, {skipped} skipped",
        ran - failed - skipped
    );
    assert_eq!(failed, 0, "{log}");
    assert!(out.status.success(), "{log}");
    // What runs on softrnic (everything but hardware features and what docs/compatibility.md
    // lists) keeps running: 101 since the device on lo, its sysfs view (the RDMA CM tests find
    // its interface there), ibv_rereg_mr, ATOMIC WRITE and XRC.
    assert!(
        ran - skipped >= 107,
        "only {} passed:\n{log}",
        ran - skipped
    );
}

#[test]
fn perftest_frames_are_valid_and_their_bytes_add_up() {
    use softrnic_wire::opcode::Operation;
    let _serial = serial();
    let (n, size) = (100u64, 65536u64);
    for (i, t) in TOPOLOGIES.into_iter().enumerate() {
        let s = Setup::new(t, &format!("cap{i}"));
        let (ns, sz) = (n.to_string(), size.to_string());
        let cases: [(&str, &[&str], Operation, u64); 5] = [
            ("ib_write_bw", &[], Operation::RdmaWrite, size),
            ("ib_read_bw", &[], Operation::RdmaReadResponse, size),
            ("ib_send_bw", &[], Operation::Send, size),
            (
                "ib_send_bw",
                &["-c", "UD", "-s", "1024"],
                Operation::Send,
                1024,
            ),
            ("ib_atomic_bw", &[], Operation::FetchAdd, 8),
        ];
        for (program, extra, op, bytes) in cases {
            let mut args = vec![program, "-n", &ns, "-F"];
            if !extra.contains(&"-s") && op != Operation::FetchAdd {
                args.extend(["-s", &sz]);
            }
            args.extend(extra);
            // The client's host sees every frame of the exchange.
            let frames = captured(s.client(), || {
                perftest(&s, &args);
            });
            let counts = tally(&frames);
            let (messages, payload) = counts.get(&op).copied().unwrap_or_default();
            assert_eq!(messages, n, "{t:?} {args:?}: {op:?} messages in {counts:?}");
            // Atomics carry their operands in the AtomicETH, not as payload.
            let want = if op == Operation::FetchAdd {
                0
            } else {
                n * bytes
            };
            assert_eq!(payload, want, "{t:?} {args:?}: {op:?} bytes");
        }
    }
}

#[test]
fn the_rust_ibverbs_crates_loopback_example_runs_unchanged() {
    let _serial = serial();
    let pin = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/ibverbs-crate/Cargo.toml"
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let meta = Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--manifest-path",
            pin,
        ])
        .output()
        .expect("cargo metadata");
    assert!(meta.status.success(), "{}", text(&meta.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&meta.stdout).unwrap();
    let crate_dir = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "ibverbs")
        .and_then(|p| p["manifest_path"].as_str())
        .map(|m| std::path::Path::new(m).parent().unwrap().to_path_buf())
        .expect("the ibverbs crate");
    // Build its example as published, from a copy outside this workspace (cargo writes a lock
    // file beside it); the copy and its build stay for the next run.
    let name = crate_dir.file_name().unwrap().to_string_lossy();
    let work = std::env::temp_dir().join(format!("softrnic-{name}"));
    if !work.join("Cargo.toml").exists() {
        let copy = Command::new("cp")
            .arg("-r")
            .arg(&crate_dir)
            .arg(&work)
            .status()
            .unwrap();
        assert!(copy.success());
    }
    let build = Command::new(&cargo)
        .args(["build", "--example", "loopback", "--manifest-path"])
        .arg(work.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(work.join("target"))
        .output()
        .expect("cargo build");
    assert!(
        build.status.success(),
        "building the ibverbs crate needs cmake, libclang-dev, libnl-3-dev, \
         libnl-route-3-dev and pkg-config:\n{}",
        text(&build.stderr)
    );
    let example = work.join("target/debug/examples/loopback");
    // On a local device: its GID 1 (what the example asks for) is the IPv4 address, as on rxe.
    let host = Host::start("crate", None, None);
    let out = host
        .program(&[example.display().to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("sent") && said.contains("received"), "{said}");
}

#[test]
fn exec_starts_a_daemon_with_a_local_device_when_none_runs() {
    let _serial = serial();
    let socket = std::env::temp_dir().join(format!("srn-prog-{}-auto.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    let softrnic = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_softrnic"));
        c.env("SOFTRNIC_SOCKET", &socket);
        c
    };
    let out = softrnic()
        .args(["exec", "--", "ibv_devices"])
        .output()
        .unwrap();
    let said = text(&out.stderr);
    // Stop the daemon it started, whatever happens next.
    let pid = Client::connect(&socket).map(|c| c.daemon_pid());
    if let Ok(pid) = pid {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("started the daemon") && said.contains("added srnic0"),
        "{said}"
    );
    assert!(text(&out.stdout).contains("srnic0"));
    // The program's exit status is exec's.
    let out = softrnic()
        .args(["exec", "--", "sh", "-c", "exit 7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    if let Ok(pid) = Client::connect(&socket).map(|c| c.daemon_pid()) {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(socket.with_extension("log"));
}

#[test]
fn a_c_program_gets_async_events_and_completion_notifications_through_poll_and_epoll() {
    let _serial = serial();
    c_program_prints("events", &["-libverbs"], "events", "ok\n");
}

#[test]
fn closing_a_device_ends_a_wait_for_its_async_events() {
    let _serial = serial();
    c_program_prints(
        "async_close",
        &["-libverbs", "-lpthread"],
        "asclose",
        "ok\n",
    );
}

#[test]
fn a_signal_ends_a_wait_for_an_event_unless_its_handler_restarts() {
    let _serial = serial();
    c_program_prints(
        "signals",
        &["-libverbs", "-lrdmacm", "-lpthread"],
        "signals",
        "ok\n",
    );
}

#[test]
fn a_program_and_its_daemon_need_no_privileges_on_one_host() {
    let _serial = serial();
    // An unprivileged user (nobody) runs softrnic from a directory it can read: the command
    // and, beside it, the libraries `exec` links.
    // Writable for the daemon's socket and log and exec's link too.
    let dir = for_everyone("nobody", &[]);
    let socket = dir.join("daemon.sock");
    let as_nobody = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(dir.join("softrnic"))
            .args(args)
            .env("SOFTRNIC_SOCKET", &socket)
            .env("XDG_RUNTIME_DIR", &dir);
        c
    };
    let port = next_port();
    let pingpong = |peer: Option<&str>| {
        let mut args = vec![
            "exec",
            "--",
            "ibv_rc_pingpong",
            "-g",
            "1",
            "-c",
            "-n",
            "100",
            "-p",
        ];
        args.push(&port);
        args.extend(peer);
        let mut c = as_nobody(&args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    };
    // Everything from scratch as nobody: exec starts the daemon and adds a local device.
    let devices = as_nobody(&["exec", "--", "ibv_devices"])
        .output()
        .expect("setpriv (util-linux)");
    let said = text(&devices.stderr);
    let stop = || {
        if let Ok(c) = Client::connect(&socket) {
            let _ = Command::new("kill")
                .arg(c.daemon_pid().to_string())
                .status();
        }
    };
    if !devices.status.success() {
        stop();
        panic!("as nobody: {said}");
    }
    let mut server = Running(pingpong(None).spawn().unwrap());
    server.wait_until("listened", || listening(None, &port));
    let client = Running(pingpong(Some("localhost")).spawn().unwrap()).finish(&["client"]);
    let served = server.finish(&["server"]);
    let daemon = Client::connect(&socket).unwrap().daemon_pid();
    let status = std::fs::read_to_string(format!("/proc/{daemon}/status")).unwrap();
    stop();
    assert!(
        status.lines().any(|l| l.starts_with("Uid:\t65534\t")),
        "the daemon runs as nobody:\n{status}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(said.contains("started the daemon"), "{said}");
    assert!(client.contains("100 iters in") && served.contains("100 iters in"));
}

/// The daemon is the device: when it dies, a program learns it at once, as from a device
/// that failed or was removed under rdma-core (DEVICE_FATAL, then EIO), and no verb hangs.
#[test]
fn a_c_program_is_told_when_the_daemon_dies() {
    let _serial = serial();
    let exe = c_program("fatal", &["-libverbs"]);
    let mut host = Host::start("fatal", None, None);
    let mut program = host
        .program(&[exe.display().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(program.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    // Killed while it sleeps in poll(2), so the program's next post has to wake it.
    let wchan = format!("/proc/{}/wchan", host.daemon.id());
    let deadline = Instant::now() + LIMIT;
    while !std::fs::read_to_string(&wchan).unwrap().contains("poll") {
        assert!(Instant::now() < deadline, "the daemon never went to sleep");
        std::thread::sleep(Duration::from_millis(10));
    }
    host.daemon.kill().unwrap();
    host.daemon.wait().unwrap();
    writeln!(program.stdin.take().unwrap(), "go").unwrap();
    let mut program = Running(program);
    let status = program.wait_at_most(LIMIT).expect("a verb hung");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    program
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{rest}{err}");
    assert_eq!(rest, "ok\n");
}

/// Two perftest programs moving data when the daemon is killed stop with an error at once
/// (they spun with no completion and no error until their 30 seconds were up).
#[test]
fn perftest_stops_when_the_daemon_dies() {
    let _serial = serial();
    let mut s = Setup::new(Topology::OneHost, "died");
    let port = next_port();
    let gid = s.server().gid.to_string();
    let args = |peer: Option<&str>| {
        let mut v: Vec<String> = ["ib_write_bw", "-D", "30", "-x", &gid, "-p", &port]
            .map(String::from)
            .into();
        v.extend(peer.map(String::from));
        v
    };
    let spawn = |argv: Vec<String>| {
        let mut child = s.server().program(&argv);
        child.stdout(Stdio::piped()).stderr(Stdio::piped());
        Running(child.spawn().unwrap())
    };
    let mut server = spawn(args(None));
    server.wait_until("listened", || listening(None, &port));
    let mut client = spawn(args(Some("127.0.0.1")));
    // Both are in the measurement once the server has counters to show in its statistics.
    std::thread::sleep(Duration::from_secs(3));
    assert!(server.0.try_wait().unwrap().is_none() && client.0.try_wait().unwrap().is_none());
    let died = Instant::now();
    let daemon = &mut s.hosts[0].daemon;
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    for (name, p) in [("server", &mut server), ("client", &mut client)] {
        let status = p.wait_at_most(Duration::from_secs(20));
        let status = status.unwrap_or_else(|| panic!("the {name} still runs"));
        assert!(!status.success(), "the {name} succeeded");
    }
    eprintln!("both stopped {:?} after the daemon died", died.elapsed());
}

/// `softrnic capture -w FILE &` before a CI job's programs, as docs/ci.md shows: it starts the
/// daemon when none runs yet, and its file is readable at any moment, also after the job is
/// killed (no Ctrl-C, no chance to finish the file).
#[test]
fn a_capture_starts_the_daemon_and_its_file_is_readable_at_any_moment() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("srn-livecap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("softrnic.sock");
    let file = dir.join("rdma.pcapng");
    let softrnic = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_softrnic"));
        c.args(args).env("SOFTRNIC_SOCKET", &socket);
        c
    };
    let mut capture = softrnic(&["capture", "-w", &file.display().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = BufReader::new(capture.stderr.take().unwrap());
    let mut lines = Vec::new();
    while !lines
        .last()
        .is_some_and(|l: &String| l.contains("capturing to"))
    {
        let mut line = String::new();
        assert!(said.read_line(&mut line).unwrap() > 0, "capture: {lines:?}");
        lines.push(line);
    }
    let all = lines.concat();
    assert!(
        all.contains("started the daemon") && all.contains("added srnic0"),
        "{all}"
    );
    let daemon = Client::connect(&socket).unwrap().daemon_pid();
    let capture = Running(capture);

    let port = next_port();
    let pingpong = |peer: Option<&str>| {
        let mut args = vec![
            "exec",
            "--",
            "ibv_rc_pingpong",
            "-g",
            "1",
            "-n",
            "20",
            "-p",
            &port,
        ];
        args.extend(peer);
        let mut c = softrnic(&args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        Running(c.spawn().unwrap())
    };
    let mut server = pingpong(None);
    server.wait_until("listened", || listening(None, &port));
    pingpong(Some("127.0.0.1")).finish(&["ibv_rc_pingpong client"]);
    server.finish(&["ibv_rc_pingpong server"]);

    // While it runs, the file holds whole blocks: every frame so far, once the daemon has
    // nothing more to hand over.
    let frames = |bytes: &[u8]| softrnic::capture::read(bytes).map(|f| f.len());
    let deadline = Instant::now() + LIMIT;
    let seen = loop {
        let bytes = std::fs::read(&file).unwrap();
        match frames(&bytes) {
            // 20 round trips of SEND and ACK each way, each seen leaving and arriving.
            Ok(n) if n >= 160 => break bytes,
            r => assert!(Instant::now() < deadline, "the live file: {r:?}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let copy = dir.join("copy.pcapng");
    std::fs::write(&copy, &seen).unwrap();
    let tshark = Command::new("tshark")
        .arg("-r")
        .arg(&copy)
        .output()
        .unwrap();
    assert!(tshark.status.success(), "{}", text(&tshark.stderr));
    assert!(!text(&tshark.stderr).contains("cut short"));

    // Killed without warning: the file is still whole.
    drop(capture);
    let after = frames(&std::fs::read(&file).unwrap()).expect("readable after a kill");
    assert!(after >= frames(&seen).unwrap());
    let _ = Command::new("kill").arg(daemon.to_string()).status();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The local device stands on `lo` with its addresses, as kernel rxe attached to `lo`: each
/// GID names `lo` as its interface (what the sideway crate's `show_gids` looks up), in
/// `ibv_query_gid_ex` and in sysfs.
#[test]
fn the_local_device_stands_on_lo_as_rxe() {
    let _serial = serial();
    let host = Host::start("lo", None, None);
    let script = "import pyverbs.device as d, socket
ctx = d.Context(name='srnic0')
for i in range(4):
    e = ctx.query_gid_ex(1, i)
    print(e.gid_str(), e.gid_type, socket.if_indextoname(e.ndev_ifindex))
print(open('/sys/class/infiniband/srnic0/ports/1/gid_attrs/ndevs/1').read(), end='')";
    let out = host
        .program(&["/usr/bin/python3".into(), "-c".into(), script.into()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // RoCE v2 is IBV_GID_TYPE_ROCE_V2 (2).
    assert_eq!(
        text(&out.stdout),
        "fe80:0000:0000:0000:0053:52ff:fe4e:0000 2 lo\n\
         0000:0000:0000:0000:0000:ffff:7f00:0001 2 lo\n\
         0000:0000:0000:0000:0000:ffff:c613:ff01 2 lo\n\
         0000:0000:0000:0000:0000:0000:0000:0001 2 lo\n\
         lo\n"
    );
    // A second local device keeps its own address only: one device has the loopback ones.
    let out = host.softrnic(&["up"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let devices = Client::connect(&host.socket).unwrap().devices().unwrap();
    let second: Vec<String> = devices[1].gids.iter().map(|g| g.to_string()).collect();
    assert_eq!(second, ["fe80::53:52ff:fe4e:1", "::ffff:198.19.255.2"]);
    assert_eq!(devices[1].netdev, None);
}

/// ATOMIC WRITE and FLUSH (IBA 1.5) through `ibv_wr_atomic_write` and rdma-core 45's
/// `ibv_wr_flush`: the device reports both, the 8 bytes land, range and region flushes
/// complete, and a persistent flush, a persistent-flush region and a misaligned ATOMIC WRITE
/// fail as IBA and rxe say.
#[test]
fn atomic_writes_and_flushes_run_through_the_extended_send_api() {
    let _serial = serial();
    c_program_prints(
        "atomic_write_flush",
        &["-libverbs"],
        "awflush",
        "atomic_write_flush: ok\n",
    );
}

/// A program built with rdma-core 65's headers: its new verbs, and its longer `ibv_port_attr`.
#[test]
fn rdma_core_65s_new_verbs_behave_as_libibverbs_documents() {
    let _serial = serial();
    let exe = c_program_for_rdma_core_65("verbs_65");
    let host = Host::start("verbs65", None, None);
    let out = host.program(&[exe.display().to_string()]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "verbs 65: ok\n");
}

/// Regions registered with an IOVA other than their address (`ibv_reg_mr_iova`): a WRITE and a
/// READ whose work requests name both regions by their IOVAs move the right bytes, and the
/// buffer's own address is no name of the region (remote access error).
#[test]
fn regions_are_named_by_the_iova_they_were_registered_with() {
    let _serial = serial();
    c_program_prints("iova", &["-libverbs"], "iova", "iova: ok\n");
}

/// Registered memory shared with the daemon, by default, with `SOFTRNIC_SHARED_MR=1` (also
/// while another thread runs) and not at all with `=0`: WRITE, READ and FETCH_ADD across the
/// pages the daemon maps and the edges it reaches by system calls, a region inside another,
/// regions over pages moved before and on the stack, a child after fork.
#[test]
fn registered_memory_shared_with_the_daemon_moves_the_same_bytes() {
    let _serial = serial();
    let exe = c_program("shared_mr", &["-libverbs", "-lpthread"]);
    let host = Host::start("sharedmr", None, None);
    for mode in [None, Some("1"), Some("0")] {
        let mut program = host.program(&[exe.display().to_string()]);
        match mode {
            Some(m) => program.env("SOFTRNIC_SHARED_MR", m),
            None => program.env_remove("SOFTRNIC_SHARED_MR"),
        };
        let out = program.output().unwrap();
        assert!(out.status.success(), "{mode:?}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "shared_mr: ok\n");
    }
}

/// Builds C test program `name` with `libs`, runs it on a host of its own (`host`) and checks
/// that it succeeds, printing `expected`.
fn c_program_prints(name: &str, libs: &[&str], host: &str, expected: &str) {
    let exe = c_program(name, libs);
    let host = Host::start(host, None, None);
    let out = host.program(&[exe.display().to_string()]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), expected);
}
