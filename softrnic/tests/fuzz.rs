//! `softrnic fuzz` against a live peer: softrnic's own daemon in a namespace across a veth,
//! serving rdma-core's unmodified `ibv_rc_pingpong` server in a loop. softrnic as the peer
//! must pass every oracle; a failing `--check` must give a reproducer that replays.

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;

use common::*;
use softrnic_link::netns::VethPair;

/// The peer: a daemon on the pair's first interface, and a pingpong server restarted after
/// each connection (two exchanges, and at most 20 s each, as docs/fuzzing.md says to run it).
struct Peer {
    pair: VethPair,
    _host: Host,
    _server: Running,
    port: String,
}

fn peer(tag: &str) -> Peer {
    let pair = VethPair::new(tag, 1500).expect("a veth pair (needs root)");
    for i in 0..2 {
        let _ = pair.exec(i, &["ethtool", "-K", &pair.ifs[i], "tx", "off"]);
    }
    let host = Host::start(tag, Some(&pair.ns[0]), Some(&pair.ifs[0]));
    let port = next_port();
    let server = format!(
        "while true; do timeout 20 '{}' exec -- ibv_rc_pingpong -g {} -n 2 -s 64 -p {port} >/dev/null 2>&1; done",
        env!("CARGO_BIN_EXE_softrnic"),
        host.gid
    );
    let server = in_ns(Some(&pair.ns[0]), "sh")
        .args(["-c", &server])
        .env("SOFTRNIC_SOCKET", &host.socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("the pingpong loop");
    let mut server = Running(server);
    let ns = Some(pair.ns[0].clone());
    server.wait_until("the pingpong server listened", || {
        listening(ns.as_deref(), &port)
    });
    Peer {
        pair,
        _host: host,
        _server: server,
        port,
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // The loop's shell and its pingpong: the whole process group.
        let group = format!("-{}", self._server.0.id());
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &group])
            .status();
    }
}

/// Runs `softrnic fuzz` from the pair's second namespace; its output, after checking it
/// succeeded.
fn fuzz(p: &Peer, out: &Path, args: &[&str]) -> String {
    let peer = format!("198.18.1.1:{}", p.port);
    let o = in_ns(Some(&p.pair.ns[1]), env!("CARGO_BIN_EXE_softrnic"))
        .args(["fuzz", "--interface", &p.pair.ifs[1], "--peer", &peer])
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .expect("softrnic fuzz");
    let said = text(&o.stdout) + &text(&o.stderr);
    assert!(o.status.success(), "softrnic fuzz: {said}");
    said
}

/// Four rounds of 20 mutations of 64-byte exchanges from `seed`.
fn seeded(p: &Peer, out: &Path, seed: u64) -> String {
    let seed = seed.to_string();
    let args = [
        "--seed",
        &seed,
        "--rounds",
        "4",
        "--mutations",
        "20",
        "--size",
        "64",
    ];
    fuzz(p, out, &args)
}

/// The classes of the mutations a run printed, in order.
fn classes(log: &str) -> Vec<&str> {
    log.lines()
        .filter_map(|l| l.strip_prefix("  ")?.split_once(": ").map(|(c, _)| c))
        .filter(|c| softrnic_wire::mutate::Class::from_name(c).is_some())
        .collect()
}

#[test]
fn softrnic_passes_every_oracle_and_runs_repeat_from_their_seed() {
    let _serial = serial();
    let p = peer("fz");
    let out = tempdir("fz");
    let log = seeded(&p, &out, 7);
    eprintln!("{log}");
    // Every round connected (the control oracle) and no oracle fired. Whether a round's last
    // exchange works depends on what the peer took: pingpong's server ends after 2 messages.
    assert!(log.contains("4 rounds, "), "{log}");
    assert!(log.contains("; 0 findings"), "{log}");
    let first = classes(&log);
    assert_eq!(first.len(), 4 * 20, "{log}");
    // Every class is drawn in a run this long, and each was sent.
    for c in softrnic_wire::mutate::Class::ALL {
        assert!(first.contains(&c.name()), "no {c} in {log}");
    }
    // The mutations reached the peer's checks: some were acknowledged, some refused.
    assert!(log.contains("ACK, credits not reported"), "{log}");
    assert!(log.contains(" NAK, "), "{log}");
    // Variants for which IBA requires a NAK were checked, and got it (no finding above).
    assert!(log.contains(" [IBA: NAK, "), "{log}");
    let again = seeded(&p, &out, 7);
    assert_eq!(classes(&again), first, "the same seed, other mutations");
    let other = seeded(&p, &out, 8);
    assert_ne!(classes(&other), first);
}

#[test]
fn a_finding_is_saved_as_a_capture_and_a_command_that_replays_it() {
    let _serial = serial();
    let p = peer("fy");
    let out = tempdir("fy");
    let log = fuzz(
        &p,
        &out,
        &[
            "--seed",
            "3",
            "--rounds",
            "2",
            "--first-round",
            "5",
            "--size",
            "64",
            "--check",
            "echo oops; false",
        ],
    );
    assert!(log.contains("2 findings"), "{log}");
    let txt = std::fs::read_to_string(out.join("finding-1-round-5.txt")).expect("the finding");
    assert!(txt.starts_with("the check failed"), "{txt}");
    assert!(txt.contains("oops"), "{txt}");
    let replay = txt
        .lines()
        .find_map(|l| l.strip_prefix("replay: "))
        .expect("a replay command");
    assert!(
        replay.contains("--seed 3 --first-round 5 --rounds 1"),
        "{replay}"
    );
    // The capture holds the round: our requests, the peer's answers and the mutations.
    let bytes = std::fs::read(out.join("finding-1-round-5.pcapng")).expect("the capture");
    let frames = softrnic::capture::read(&bytes).expect("a readable capture");
    let injected = frames
        .iter()
        .filter(|f| f.interface.as_deref() == Some("injected"))
        .count();
    assert!(injected >= 8, "{injected} injected frames");
    assert!(
        frames
            .iter()
            .any(|f| f.direction == Some(softrnic::capture::Direction::In))
    );
    // Replaying it runs the same mutations as round 5 did.
    let args: Vec<&str> = replay.split(' ').skip(2).collect();
    let interface = args.iter().position(|&a| a == "--interface").unwrap();
    let again = fuzz(&p, &tempdir("fy2"), &args[interface + 4..]);
    let round5: Vec<&str> = classes(log.split("round 6:").next().unwrap());
    assert_eq!(classes(&again), round5);
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("srn-fuzz-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}
