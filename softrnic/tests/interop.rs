//! softrnic against a real RoCEv2 peer: the Linux kernel's rxe, in a qemu guest (TCG) built
//! from Debian packages by `tests/interop/build-guest`, joined to a softrnic daemon by a tap
//! device inside a network namespace (198.18.2.1 softrnic, 198.18.2.2 rxe). The same unmodified
//! programs run on both sides, softrnic's through `softrnic exec`, each scenario in both
//! directions. Needs root, qemu-system-x86, busybox-static and the program packages;
//! `scripts/test` installs them.

mod common;
mod conformance;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use softrnic_link::Backend;
use softrnic_wire::frame::IpRepr;
use softrnic_wire::opcode::Operation;

const SOFTRNIC_ADDR: &str = "198.18.2.1";
const RXE_ADDR: &str = "198.18.2.2";
/// The guest's command server.
const GUEST_PORT: &str = "5000";

/// The guest, running rxe on its eth0, and the namespace holding its tap.
struct Guest {
    ns: String,
    tap: String,
    qemu: Child,
    /// The guest's serial console (a kernel panic is printed there).
    console: PathBuf,
    /// qemu's monitor (a Unix socket), to send SysRq keys to a hung guest.
    monitor: PathBuf,
}

impl Guest {
    /// Builds (or reuses) the guest image and boots it behind a tap in a new namespace.
    fn boot() -> Guest {
        let image = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("interop-guest");
        let build = Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/interop/build-guest"
        ))
        .arg(&image)
        .output()
        .expect("build-guest");
        assert!(
            build.status.success(),
            "building the guest: {}",
            text(&build.stderr)
        );
        let id = std::process::id() % 100_000;
        let (ns, tap) = (format!("srnrxe{id}"), format!("srnt{id}"));
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().unwrap();
            assert!(out.status.success(), "ip {args:?}: {}", text(&out.stderr));
        };
        ip(&["netns", "add", &ns]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&["-n", &ns, "tuntap", "add", "dev", &tap, "mode", "tap"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{SOFTRNIC_ADDR}/24"),
            "dev",
            &tap,
        ]);
        ip(&["-n", &ns, "link", "set", &tap, "up"]);
        // AF_XDP sees incomplete checksums from TX offload otherwise.
        let _ = in_ns(Some(&ns), "ethtool")
            .args(["-K", &tap, "tx", "off"])
            .output();
        let log = image.join(format!("console-{id}.log"));
        let console = std::fs::File::create(&log).unwrap();
        let monitor = image.join(format!("monitor-{id}.sock"));
        let _ = std::fs::remove_file(&monitor);
        let qemu = in_ns(Some(&ns), "qemu-system-x86_64")
            .args(["-accel", "tcg", "-cpu", "max", "-m", "1024", "-smp", "1"])
            .args(["-nographic", "-no-reboot", "-kernel"])
            .arg(image.join("vmlinuz"))
            .arg("-initrd")
            .arg(image.join("initrd.gz"))
            .arg("-append")
            .arg(format!(
                "console=ttyS0 quiet panic=-1 softrnic.addr={RXE_ADDR}/24"
            ))
            .args([
                "-netdev",
                &format!("tap,id=n0,ifname={tap},script=no,downscript=no"),
            ])
            .args(["-device", "virtio-net-pci,netdev=n0"])
            .arg("-monitor")
            .arg(format!("unix:{},server,nowait", monitor.display()))
            .stdin(Stdio::null())
            .stdout(console.try_clone().unwrap())
            .stderr(console)
            .spawn()
            .expect("qemu-system-x86_64 (qemu-system-x86)");
        // An emulated CPU is ten times slower than the host's: on a busy machine, the guest
        // first in line keeps rxe's timers (and the kernel CM's) close to what its peer sees.
        let _ = Command::new("renice")
            .args(["-n", "-5", "-p", &qemu.id().to_string()])
            .stdout(Stdio::null())
            .status();
        let guest = Guest {
            ns,
            tap,
            qemu,
            console: log.clone(),
            monitor,
        };
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let seen = std::fs::read_to_string(&log).unwrap_or_default();
            if seen.contains("softrnic-guest: ready 1 rxe") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the guest did not come up:\n{seen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        guest
    }

    /// Runs a shell command in the guest and returns what it printed. A command the guest
    /// did not see through (refused, or still running after 5 minutes) is followed by a probe:
    /// a guest that no longer answers (a kernel panic ends qemu) fails the test, showing its
    /// console, with the stacks the kernel was asked for.
    fn sh(&self, cmd: &str) -> String {
        let out = self.nc(cmd, 300);
        if !out.status.success() {
            let probe = self.nc("echo alive", 60);
            if !text(&probe.stdout).contains("alive") {
                let sysrq = self.sysrq();
                panic!(
                    "the guest no longer answers (nc: {}, {}); {sysrq}{}its console:\n{}",
                    out.status,
                    text(&out.stderr),
                    self.state(),
                    std::fs::read_to_string(&self.console).unwrap_or_default()
                );
            }
        }
        text(&out.stdout)
    }

    /// Has the guest's kernel print, on its console, the stack of what its CPU runs (SysRq
    /// l) and of its blocked tasks (w), every message shown (9): a guest spinning in the
    /// kernel shows where, one waiting shows on what. The guest's init enables SysRq; the
    /// keys go through qemu's monitor to its keyboard. What went wrong sending them, if
    /// anything.
    fn sysrq(&self) -> String {
        use std::io::Write;
        let sent = std::os::unix::net::UnixStream::connect(&self.monitor).and_then(|mut m| {
            for key in ["9", "l", "w"] {
                writeln!(m, "sendkey alt-sysrq-{key}")?;
                std::thread::sleep(Duration::from_secs(1));
            }
            Ok(())
        });
        match sent {
            Ok(()) => String::new(),
            Err(e) => format!("SysRq through qemu's monitor: {e}; "),
        }
    }

    /// What the host sees of the guest, twice, 5 s apart: qemu's state and CPU time (a hung
    /// guest spins or sleeps), and the tap's counters (traffic still flowing, or none).
    fn state(&self) -> String {
        let mut seen = String::new();
        for sample in 0..2 {
            if sample > 0 {
                std::thread::sleep(Duration::from_secs(5));
            }
            let ps = Command::new("ps")
                .args([
                    "-o",
                    "stat=,etime=,time=",
                    "-p",
                    &self.qemu.id().to_string(),
                ])
                .output()
                .unwrap();
            let link = Command::new("ip")
                .args(["-n", &self.ns, "-s", "link", "show", &self.tap])
                .output()
                .unwrap();
            let _ = writeln!(
                seen,
                "qemu (state, elapsed, CPU): {}tap:\n{}",
                text(&ps.stdout),
                text(&link.stdout)
            );
        }
        seen
    }

    /// `cmd` through the guest's command server, for at most `secs` seconds.
    fn nc(&self, cmd: &str, secs: u32) -> std::process::Output {
        let mut nc = in_ns(Some(&self.ns), "timeout")
            .arg(secs.to_string())
            .args(["busybox", "nc", RXE_ADDR, GUEST_PORT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        writeln!(nc.stdin.take().unwrap(), "{cmd}\nexit").unwrap();
        nc.wait_with_output().unwrap()
    }

    /// Starts `cmd` (one command) in the guest in the background, as job `name`. The job file
    /// appears whole (written aside, then renamed): the runner must not take half of it.
    fn start(&self, name: &str, cmd: &str) {
        let job = format!("/run/jobs/{name}");
        self.sh(&format!(
            "rm -f {job}.*; cat > {job}.tmp <<'EOF'\necho $$ > {job}.pid\nexec {cmd}\nEOF\nmv {job}.tmp {job}.sh"
        ));
    }

    /// Kills job `name`.
    fn stop(&self, name: &str) {
        self.sh(&format!("kill -9 $(cat /run/jobs/{name}.pid)"));
    }

    /// Waits for job `name` (at most [`LIMIT`], then it is killed); its exit status and output.
    fn finish(&self, name: &str) -> (i32, String) {
        let deadline = Instant::now() + LIMIT;
        let mut killed = false;
        loop {
            let rc = self.sh(&format!("cat /run/jobs/{name}.rc 2>/dev/null"));
            if let Ok(rc) = rc.trim().parse() {
                return (rc, self.sh(&format!("cat /run/jobs/{name}.out")));
            }
            if Instant::now() > deadline && !killed {
                self.stop(name);
                killed = true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until job `name` is ready for its client (`ready`). The wait follows the job: it
    /// fails at once when the job ends without getting ready, and otherwise lasts as long as a
    /// job may run ([`LIMIT`]), since a starved TCG guest can take long to start a program.
    fn wait_ready(&self, name: &str, ready: Ready) -> Result<(), String> {
        let (probe, port) = match ready {
            // `rdma resource show cm_id` lists a listening id as `... LISTEN ... src-addr A:PORT`.
            Ready::Cm(port) => ("rdma resource show cm_id | grep LISTEN", port),
            Ready::Tcp(port) => ("netstat -ltn", port),
        };
        let deadline = Instant::now() + LIMIT;
        loop {
            let seen = self.sh(&format!(
                "{probe}; cat /run/jobs/{name}.rc 2>/dev/null | sed 's/^/job-ended=/'"
            ));
            if seen.lines().any(|l| l.contains(&format!(":{port} "))) {
                return Ok(());
            }
            if seen.contains("job-ended=") || Instant::now() > deadline {
                self.stop(name);
                let (rc, out) = self.finish(name);
                return Err(format!(
                    "the guest's {name} never got ready on {port} (rc {rc}):\n{out}"
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Replaces eth0's queueing with `qdiscs` (each a `tc qdisc add dev eth0` argument line).
    /// The full path: busybox's shell prefers its own (smaller) tc applet to a command name.
    fn netem(&self, qdiscs: &[&str]) {
        let mut cmd = String::from("/bin/tc qdisc del dev eth0 root 2>/dev/null; ok=0");
        for q in qdiscs {
            cmd += &format!("; /bin/tc qdisc add dev eth0 {q} 2>&1 || ok=1");
        }
        let out = self.sh(&format!("{cmd}; echo rc=$ok"));
        assert!(out.trim_end().ends_with("rc=0"), "tc in the guest: {out}");
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.qemu.kill();
        let _ = self.qemu.wait();
        let _ = std::fs::remove_file(&self.monitor);
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// Which side serves.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Server {
    Rxe,
    Softrnic,
}

/// The two sides: softrnic's daemon on the tap, and the guest.
struct Peers {
    guest: Guest,
    host: Host,
}

impl Peers {
    /// Runs `program args` with `server` serving and the other side connecting; `gid` is the
    /// program's GID index flag (index 1, the IPv4 address, on both sides). Returns the outputs
    /// (softrnic's, rxe's), or why it failed.
    fn run(
        &self,
        server: Server,
        gid: &str,
        program: &str,
        args: &[&str],
    ) -> Result<(String, String), String> {
        let port = next_port();
        let mut line = vec![program.to_owned()];
        line.extend(args.iter().map(|s| s.to_string()));
        line.extend([gid.to_owned(), "1".into(), "-p".into(), port.clone()]);
        let rxe_line = |peer: Option<&str>| {
            let mut l = line.clone();
            l.insert(1, "-d".into());
            l.insert(2, "rxe0".into());
            l.extend(peer.map(str::to_owned));
            l.join(" ")
        };
        let peer = match server {
            Server::Rxe => RXE_ADDR,
            Server::Softrnic => SOFTRNIC_ADDR,
        };
        let mut client = line.clone();
        client.push(peer.into());
        let (rxe_server, rxe_client) = (rxe_line(None), rxe_line(Some(peer)));
        self.exchange(
            server,
            Ready::Tcp(&port),
            (rxe_server, line),
            (rxe_client, client),
        )
    }

    /// Runs a program that connects through rdma_cm: `server` and `client` are its command
    /// lines, with `{addr}` the server's address, `{port}` the port and `{dev}` the side's
    /// device. Returns the outputs (softrnic's, rxe's), or why it failed.
    fn run_cm(
        &self,
        server: Server,
        port: &str,
        server_line: &str,
        client_line: &str,
    ) -> Result<(String, String), String> {
        let addr = match server {
            Server::Rxe => RXE_ADDR,
            Server::Softrnic => SOFTRNIC_ADDR,
        };
        let fill = |line: &str, dev: &str| {
            line.replace("{addr}", addr)
                .replace("{port}", port)
                .replace("{dev}", dev)
        };
        let words =
            |line: String| -> Vec<String> { line.split_whitespace().map(str::to_owned).collect() };
        self.exchange(
            server,
            Ready::Cm(port),
            (
                fill(server_line, "rxe0"),
                words(fill(server_line, "srnic0")),
            ),
            (
                fill(client_line, "rxe0"),
                words(fill(client_line, "srnic0")),
            ),
        )
    }

    /// Runs a server and its client, each as (rxe's shell line, softrnic's arguments), with
    /// `server` serving; the client starts once the server is `ready`. Both must succeed.
    /// Returns the outputs (softrnic's, rxe's), or why it failed.
    fn exchange(
        &self,
        server: Server,
        ready: Ready,
        (rxe_server, softrnic_server): (String, Vec<String>),
        (rxe_client, softrnic_client): (String, Vec<String>),
    ) -> Result<(String, String), String> {
        match server {
            Server::Rxe => {
                self.guest.start("server", &rxe_server);
                self.guest.wait_ready("server", ready)?;
                let mut client = Running(
                    self.host
                        .program(&softrnic_client)
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap(),
                );
                let status = client.wait_at_most(LIMIT);
                if !status.is_some_and(|s| s.success()) {
                    // Its client is gone: the server would wait for it until killed.
                    self.guest.stop("server");
                }
                let (rc, rxe) = self.guest.finish("server");
                let softrnic = client.output();
                if !status.is_some_and(|s| s.success()) || rc != 0 {
                    return Err(format!(
                        "softrnic client:\n{softrnic}\nrxe server (rc {rc}):\n{rxe}"
                    ));
                }
                Ok((softrnic, rxe))
            }
            Server::Softrnic => {
                let mut server = Running(
                    self.host
                        .program(&softrnic_server)
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap(),
                );
                let ns = self.host.ns.as_deref();
                server.wait_until("got ready", || match ready {
                    Ready::Tcp(port) => listening(ns, port),
                    Ready::Cm(port) => cm_listening(&self.host, port),
                });
                let rxe = self.guest.sh(&format!("{rxe_client} 2>&1; echo rc=$?"));
                let softrnic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    server.finish(&[&softrnic_server[0]])
                }))
                .map_err(|_| format!("softrnic server failed; rxe client:\n{rxe}"))?;
                if !rxe.trim_end().ends_with("rc=0") {
                    return Err(format!("rxe client:\n{rxe}\nsoftrnic server:\n{softrnic}"));
                }
                Ok((softrnic, rxe))
            }
        }
    }
}

/// UD multicast between softrnic and rxe through rdma_cm's joins (mckey): the `receiver` side's
/// two ids join 239.1.2.3 (two QPs attached) and each must get 20 datagrams that the other side
/// sends to the group, joined send-only. Datagrams may be lost, so the sender sends 20 at a
/// time until the receiver has them all.
fn multicast(peers: &Peers, receiver: Server) -> Result<(), String> {
    const GROUP: &str = "239.1.2.3";
    let sender = |addr: &str| format!("mckey -m {GROUP} -b {addr} -s -o -C 20");
    match receiver {
        Server::Rxe => {
            let guest = &peers.guest;
            guest.start("mc", &format!("mckey -m {GROUP} -b {RXE_ADDR} -c 2 -C 20"));
            // The guest's kernel is in the group once its rdma_cm has joined (mckey then
            // attaches its QPs at once); /proc/net/igmp lists 239.1.2.3 as 030201EF.
            let deadline = Instant::now() + LIMIT;
            while !guest.sh("cat /proc/net/igmp").contains("030201EF") {
                if Instant::now() > deadline {
                    guest.stop("mc");
                    return Err(format!(
                        "rxe never joined:
{}",
                        guest.finish("mc").1
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let words: Vec<String> = sender(SOFTRNIC_ADDR)
                .split(' ')
                .map(str::to_owned)
                .collect();
            for _ in 0..10 {
                let sent = peers.host.program(&words).output().unwrap();
                if !sent.status.success() {
                    guest.stop("mc");
                    return Err(format!("softrnic's sender: {}", text(&sent.stdout)));
                }
                if !guest
                    .sh("cat /run/jobs/mc.rc 2>/dev/null")
                    .trim()
                    .is_empty()
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            let (rc, out) = guest.finish("mc");
            (rc == 0)
                .then_some(())
                .ok_or(format!("rxe's receiver (rc {rc}):\n{out}"))
        }
        Server::Softrnic => {
            let line = format!("stdbuf -oL mckey -m {GROUP} -b {SOFTRNIC_ADDR} -c 2 -C 20");
            let words: Vec<String> = line.split(' ').map(str::to_owned).collect();
            let mut receiver = Running(
                peers
                    .host
                    .program(&words)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
            );
            let mut lines =
                std::io::BufRead::lines(std::io::BufReader::new(receiver.0.stdout.take().unwrap()));
            let mut said = String::new();
            while !said.contains("receiving data transfers") {
                match lines.next() {
                    Some(Ok(l)) => said += &(l + "\n"),
                    _ => return Err(format!("softrnic's receiver never joined:\n{said}")),
                }
            }
            for _ in 0..10 {
                let sent = peers
                    .guest
                    .sh(&format!("{} 2>&1; echo rc=$?", sender(RXE_ADDR)));
                if !sent.trim_end().ends_with("rc=0") {
                    return Err(format!("rxe's sender:\n{sent}"));
                }
                if receiver.0.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            let status = receiver.wait_at_most(Duration::from_secs(10));
            said += &lines
                .map_while(Result::ok)
                .map(|l| l + "\n")
                .collect::<String>();
            status
                .is_some_and(|s| s.success())
                .then_some(())
                .ok_or(format!("softrnic's receiver ({status:?}):\n{said}"))
        }
    }
}

/// When a server is ready for its client: it listens on a TCP port, or an rdma_cm port.
#[derive(Clone, Copy)]
enum Ready<'a> {
    Tcp(&'a str),
    Cm(&'a str),
}

/// One scenario's outcome, for the report.
struct Outcome {
    scenario: String,
    server: Server,
    result: Result<(), String>,
}

/// Counters as `softrnic stat` prints them: name to value.
fn softrnic_counters(host: &Host) -> HashMap<String, u64> {
    let out = host.softrnic(&["stat"]).output().unwrap();
    text(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (name, value) = (w.next()?, w.next()?);
            Some((name.trim_end_matches(':').to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// rxe's counters (`rdma statistic`): name to value.
fn rxe_counters(guest: &Guest) -> HashMap<String, u64> {
    let out = guest.sh("rdma statistic show link rxe0/1");
    let words: Vec<&str> = out.split_whitespace().collect();
    words
        .windows(2)
        .filter_map(|w| Some((w[0].to_owned(), w[1].parse().ok()?)))
        .collect()
}

#[test]
fn softrnic_and_kernel_rxe_interoperate_both_ways() {
    let _serial = serial();
    let guest = Guest::boot();
    let host = Host::start("rxe", Some(&guest.ns.clone()), Some(&guest.tap.clone()));
    let peers = Peers { guest, host };
    let mut outcomes = Vec::new();
    let mut check = |scenario: String, server: Server, result: Result<(), String>| {
        if let Err(e) = &result {
            eprintln!("FAILED {scenario} ({server:?} serves):\n{e}");
        }
        outcomes.push(Outcome {
            scenario,
            server,
            result,
        });
    };
    let both = [Server::Rxe, Server::Softrnic];

    // Pingpongs, with data validated (-c), across the path MTU (1024 on both sides).
    let frames = captured(&peers.host, || {
        let sizes = [
            (
                "ibv_rc_pingpong",
                &["1", "1024", "4096", "10000", "65536"][..],
            ),
            ("ibv_ud_pingpong", &["64", "1000"]),
        ];
        for server in both {
            for (program, sizes) in sizes {
                for size in sizes {
                    let args = ["-c", "-s", size, "-n", "50"];
                    let r = peers.run(server, "-g", program, &args);
                    check(format!("{program} -c -s {size}"), server, r.map(drop));
                }
            }
        }
    });
    // Every frame both ways is valid RoCEv2 (the capture helper also had tshark read them).
    let tally = tally(&frames);
    let sends = tally.get(&Operation::Send).copied().unwrap_or_default();
    assert!(
        sends.0 > 0 && tally.contains_key(&Operation::Acknowledge),
        "{tally:?}"
    );
    let from = |addr: [u8; 4]| {
        let src = softrnic_wire::Ipv4Address::from(addr);
        frames
            .iter()
            .filter_map(|f| softrnic_wire::frame::parse(f).ok())
            .filter(|p| matches!(p.repr.ip, IpRepr::V4 { src: s, .. } if s == src))
            .count()
    };
    let (from_rxe, from_softrnic) = (from([198, 18, 2, 2]), from([198, 18, 2, 1]));
    check(
        format!(
            "capture: {from_softrnic} frames from softrnic and {from_rxe} from rxe, all with \
             good ICRCs, none malformed for tshark"
        ),
        Server::Rxe,
        (from_rxe > 0 && from_softrnic > 0)
            .then_some(())
            .ok_or("one side sent nothing".into()),
    );

    // perftest, bandwidth and latency, every operation.
    for server in both {
        for (program, extra) in [
            ("ib_write_bw", &[][..]),
            ("ib_read_bw", &[]),
            ("ib_send_bw", &[]),
            ("ib_atomic_bw", &["-A", "FETCH_AND_ADD"]),
            ("ib_atomic_bw", &["-A", "CMP_AND_SWAP"]),
            ("ib_write_lat", &[]),
            ("ib_read_lat", &[]),
            ("ib_send_lat", &[]),
            ("ib_atomic_lat", &[]),
        ] {
            let mut args = vec!["-n", "100", "-F"];
            args.extend(extra);
            // The client prints the results (for READ and atomic latency, only the client).
            let r = peers.run(server, "-x", program, &args).and_then(|(s, r)| {
                let client = if server == Server::Rxe { s } else { r };
                client
                    .lines()
                    .any(|l| {
                        l.trim_start().starts_with(|c: char| c.is_ascii_digit())
                            && l.split_whitespace().count() >= 4
                    })
                    .then_some(())
                    .ok_or(format!("no result row from the client:\n{client}"))
            });
            check(
                format!("{program} {}", extra.join(" ")).trim().to_owned(),
                server,
                r,
            );
        }
    }

    // Programs that connect through rdma_cm, softrnic's librdmacm against the kernel's: RC
    // with data checked both ways (rping -V), several connections (ucmatose), UD services
    // resolved with SIDR (udaddy), rsockets (rstream), and perftest's -R. Every frame, CM MADs
    // included, is valid.
    let frames = captured(&peers.host, || {
        let scenarios = [
            (
                "rping -V -C 20",
                None,
                "rping -s -a {addr} -p {port} -V -C 20",
                "rping -c -a {addr} -p {port} -V -C 20",
            ),
            (
                "ucmatose -c 2 -C 10",
                None,
                "ucmatose -b {addr} -p {port} -c 2 -C 10",
                "ucmatose -s {addr} -p {port} -c 2 -C 10",
            ),
            // udaddy serves port 7174 (its -p is the port space).
            (
                "udaddy -c 2 -C 10 (SIDR)",
                Some("7174"),
                "udaddy -b {addr} -c 2 -C 10",
                "udaddy -s {addr} -c 2 -C 10",
            ),
            // rsockets: softrnic's librdmacm against rdma-core's rsocket.c, data checked.
            (
                "rstream -S 65536 -C 50 -T v (rsockets)",
                None,
                "rstream -b {addr} -p {port} -S 65536 -C 50 -T v",
                "rstream -s {addr} -p {port} -S 65536 -C 50 -T v",
            ),
            (
                "ib_send_bw -R",
                None,
                "ib_send_bw -R -d {dev} -p {port} -n 100 -F",
                "ib_send_bw -R -d {dev} -p {port} -n 100 -F {addr}",
            ),
        ];
        for server in both {
            for (name, fixed, server_line, client_line) in scenarios {
                let port = fixed.map_or_else(next_port, str::to_owned);
                let mut r = peers.run_cm(server, &port, server_line, client_line);
                // perftest -R listens for its data connection only after a handshake on its
                // first one, and its client connects right after that handshake: a client
                // faster than the (emulated) server is rejected with "invalid service ID"
                // (REJ reason 8). perftest means to retry then, but its retry uses
                // the ids it has just freed (perftest 4.5-0.17), so retry the whole run.
                for _ in 0..5 {
                    match &r {
                        Err(e) if e.contains("RDMA_CM_EVENT_REJECTED; error: 8") => {
                            eprintln!("rdma_cm: {name}: connected before the listen; again");
                            let port = next_port();
                            r = peers.run_cm(server, &port, server_line, client_line);
                        }
                        _ => break,
                    }
                }
                check(format!("rdma_cm: {name}"), server, r.map(drop));
            }
        }
    });
    // UD multicast both ways, each side joining through its rdma_cm (the kernel joins the
    // group with IGMP; softrnic adds its MAC to the tap's filter).
    for receiver in both {
        let r = multicast(&peers, receiver);
        check(
            "multicast: mckey, the serving side's 2 QPs join and receive 20 datagrams each".into(),
            receiver,
            r,
        );
    }

    // common::tally parses every frame (good ICRCs); the MADs are the frames to QP1.
    let cm_tally = common::tally(&frames);
    let mads = frames
        .iter()
        .filter_map(|f| softrnic_wire::frame::parse(f).ok())
        .filter(|p| p.repr.bth.dest_qp == 1)
        .count();
    check(
        format!(
            "rdma_cm: {} frames, {mads} of them CM MADs, all valid",
            frames.len()
        ),
        Server::Rxe,
        (mads > 0 && cm_tally.contains_key(&Operation::Send))
            .then_some(())
            .ok_or(format!("{cm_tally:?}")),
    );

    // The differential check runs while softrnic's device is on the tap: with no device,
    // the drop-in library would add a local one (and name it srnic0).
    let r = differential(&peers);
    check(
        "differential: verbs and rdma_cm call sequences agree with rxe and kernel rdma_cm".into(),
        Server::Rxe,
        r,
    );

    // Path MTU: softrnic's port at 4096 (MTU 9000 tap), rxe's at 1024; perftest settles on the
    // smaller, and sizes straddle both. While the device is down, the tap is free for the CM
    // scenario, which drives an engine on it directly.
    let softrnic = |args: &[&str]| peers.host.softrnic(args).output().unwrap();
    assert!(softrnic(&["down", "srnic0"]).status.success());
    let r = cm_handshake_with_kernel_rdma_cm(&peers.guest);
    check(
        "CM: REQ, REP, RTU, DREQ, DREP with kernel rdma_cm (rping -s)".into(),
        Server::Rxe,
        r,
    );
    let r = fuzz_kernel_rxe(&peers.guest);
    check(
        "softrnic fuzz: rounds against rxe's ibv_rc_pingpong".into(),
        Server::Rxe,
        r,
    );
    let mtu = Command::new("ip")
        .args([
            "-n",
            &peers.guest.ns,
            "link",
            "set",
            &peers.guest.tap,
            "mtu",
            "9000",
        ])
        .status()
        .unwrap();
    assert!(mtu.success());
    let up = softrnic(&["up", "--netdev", &peers.guest.tap]);
    assert!(up.status.success(), "{}", text(&up.stderr));
    for server in both {
        let r = peers
            .run(server, "-x", "ib_send_bw", &["-a", "-n", "10", "-F"])
            .and_then(|(s, _)| {
                s.contains("Mtu             : 1024[B]")
                    .then_some(())
                    .ok_or(format!("not negotiated down to 1024:\n{s}"))
            });
        check("path MTU 4096 vs 1024: ib_send_bw -a".into(), server, r);
        let r = peers.run(
            server,
            "-g",
            "ibv_rc_pingpong",
            &["-c", "-m", "1024", "-s", "5000", "-n", "20"],
        );
        check(
            "path MTU 4096 vs 1024: ibv_rc_pingpong -m 1024 -s 5000".into(),
            server,
            r.map(drop),
        );
    }

    // Loss and reordering on the guest's side of the link (the host kernel has no netem).
    let (before_s, before_r) = (softrnic_counters(&peers.host), rxe_counters(&peers.guest));
    // ibv_rc_pingpong ends each side as soon as its own work completes, so a lost last ACK
    // leaves the other side resending to a QP that no longer exists until its retries run out
    // ("transport retry counter exceeded"). So its loss spares RC ACKs (BTH opcode 0x11, at
    // byte 28 of an IPv4 RoCEv2 packet); perftest, which closes only after a TCP handshake,
    // runs with ACKs lost too.
    peers.guest.netem(&[
        "root handle 1: prio bands 2 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0",
        "parent 1:1 netem delay 1ms reorder 90% 50% loss 1%",
        "parent 1:2 netem delay 1ms reorder 90% 50%",
    ]);
    let acks = "dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff \
        match ip dport 4791 0xffff match u8 0x11 0xff at 28 flowid 1:2";
    let filter = peers
        .guest
        .sh(&format!("/bin/tc filter add {acks} 2>&1; echo rc=$?"));
    assert!(filter.trim_end().ends_with("rc=0"), "tc filter: {filter}");
    for server in both {
        let r = peers.run(
            server,
            "-g",
            "ibv_rc_pingpong",
            &["-c", "-s", "16384", "-n", "100"],
        );
        check(
            "1% loss but not of ACKs, reordering: ibv_rc_pingpong -c -s 16384".into(),
            server,
            r.map(drop),
        );
    }
    // The filter took the ACKs past the loss, and data was lost.
    let stats = peers.guest.sh("/bin/tc -s qdisc show dev eth0");
    let band = |parent: &str| -> Option<(u64, u64)> {
        let mut lines = stats.lines().skip_while(|l| !l.contains(parent));
        let w: Vec<&str> = lines.nth(1)?.split([' ', ',']).collect();
        let after = |k: &str| {
            w.iter()
                .position(|x| *x == k)
                .and_then(|i| w[i + 1].parse().ok())
        };
        Some((after("bytes")?, after("(dropped")?))
    };
    check(
        "1% loss but not of ACKs: ACKs passed, data was dropped".into(),
        Server::Rxe,
        match (band("parent 1:2"), band("parent 1:1")) {
            (Some((acks, 0)), Some((_, lost))) if acks > 0 && lost > 0 => Ok(()),
            _ => Err(stats.clone()),
        },
    );
    peers
        .guest
        .netem(&["root netem delay 1ms reorder 90% 50% loss 1%"]);
    for server in both {
        let r = peers
            .run(server, "-x", "ib_write_bw", &["-n", "200", "-F"])
            .map(drop);
        check("1% loss, reordering: ib_write_bw".into(), server, r);
        let r = peers
            .run(server, "-x", "ib_read_bw", &["-n", "200", "-F"])
            .map(drop);
        check("1% loss, reordering: ib_read_bw".into(), server, r);
    }
    let (after_s, after_r) = (softrnic_counters(&peers.host), rxe_counters(&peers.guest));
    let grew = |a: &HashMap<String, u64>, b: &HashMap<String, u64>, names: &[&str]| {
        names
            .iter()
            .any(|n| a.get(*n).copied().unwrap_or(0) > b.get(*n).copied().unwrap_or(0))
    };
    let recovery = [
        "retransmitted_pkts",
        "out_of_sequence",
        "duplicate_request",
        "packet_seq_err",
        "local_ack_timeout_err",
        "implied_nak_seq_err",
    ];
    let delta = |a: &HashMap<String, u64>, b: &HashMap<String, u64>| {
        let mut d: Vec<String> = a
            .iter()
            .filter(|(k, v)| **v > b.get(*k).copied().unwrap_or(0) && !k.ends_with("pkts"))
            .map(|(k, v)| format!("{k} +{}", v - b.get(k).copied().unwrap_or(0)))
            .collect();
        d.sort();
        d.join(", ")
    };
    eprintln!(
        "softrnic's counters under loss: {}",
        delta(&after_s, &before_s)
    );
    eprintln!("rxe's counters under loss: {}", delta(&after_r, &before_r));
    let s_ok = grew(&after_s, &before_s, &recovery);
    let r_ok = grew(
        &after_r,
        &before_r,
        &[
            "duplicate_request",
            "out_of_sequence",
            "packet_seq_err",
            "local_ack_timeout_err",
            "implied_nak_seq_err",
            "retry_exceeded_err",
            "seq_naks_rcvd",
        ],
    );
    check(
        "1% loss: recovery shows in both sides' counters".into(),
        Server::Rxe,
        (s_ok && r_ok)
            .then_some(())
            .ok_or(format!("softrnic {after_s:?}\nrxe {after_r:?}")),
    );

    let mut report = String::new();
    for o in &outcomes {
        let _ = writeln!(
            report,
            "| {} | {} | {} |",
            o.scenario,
            match o.server {
                Server::Rxe => "rxe serves, softrnic connects",
                Server::Softrnic => "softrnic serves, rxe connects",
            },
            if o.result.is_ok() { "pass" } else { "FAIL" }
        );
    }
    eprintln!("{report}");
    let failed: Vec<_> = outcomes
        .iter()
        .filter(|o| o.result.is_err())
        .map(|o| &o.scenario)
        .collect();
    assert!(failed.is_empty(), "failed: {failed:?}");
}

/// `softrnic fuzz` on the tap against rxe, for a bounded run (`ROUNDS`; longer runs are the
/// same command with more `--rounds`): the guest serves `ibv_rc_pingpong` in a loop, and the
/// check after each round is the guest's kernel log (no WARN, BUG or oops). What it finds is
/// a result about rxe, printed for docs/fuzzing.md, not a failure; the run itself must work.
/// How many generated sequences the differential check runs (SOFTRNIC_CONFORMANCE_CASES; CI's
/// run is bounded), from which seed (SOFTRNIC_CONFORMANCE_SEED, to replay one).
fn conformance_plan() -> (u64, usize) {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    (
        var("SOFTRNIC_CONFORMANCE_SEED", 1),
        var("SOFTRNIC_CONFORMANCE_CASES", 24) as usize,
    )
}

/// The differential check: the corpus and the generated sequences on softrnic (through
/// `softrnic exec`) and on rxe with kernel rdma_cm (in the guest), compared call by call.
/// Prints the counts and every difference.
fn differential(peers: &Peers) -> Result<(), String> {
    let (seed, cases) = conformance_plan();
    let input = format!(
        "{}{}",
        conformance::CORPUS,
        conformance::generated(seed, cases)
    );
    let runner = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("interop-guest/softrnic-conform");
    let mut ours = peers
        .host
        .program(&[runner.display().to_string(), SOFTRNIC_ADDR.into()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("softrnic-conform: {e}"))?;
    let feed = {
        let mut stdin = ours.stdin.take().expect("piped");
        let input = input.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = stdin.write_all(input.as_bytes());
        })
    };
    let guest = &peers.guest;
    guest.sh(&format!(
        "cat > /tmp/sequences <<'SEQUENCES'\n{input}\nSEQUENCES"
    ));
    guest.start(
        "conform",
        &format!("softrnic-conform {RXE_ADDR} < /tmp/sequences"),
    );
    let softrnic = text(&ours.wait_with_output().map_err(|e| e.to_string())?.stdout);
    let _ = feed.join();
    // The guest's run waits out the same timeouts, ten times slower: no LIMIT here.
    let rc_path = "/run/jobs/conform.rc";
    let deadline = Instant::now() + Duration::from_secs(1800);
    while guest
        .sh(&format!("cat {rc_path} 2>/dev/null"))
        .trim()
        .is_empty()
    {
        if Instant::now() > deadline {
            guest.stop("conform");
            return Err("the guest's sequences did not end in 30 minutes".into());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let rxe = guest.sh("cat /run/jobs/conform.out");
    // The sequences and both sides' lines, whole, for a look at what follows a difference.
    for (side, lines) in [("in", &input), ("softrnic", &softrnic), ("rxe", &rxe)] {
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("conform-{side}.txt"));
        let _ = std::fs::write(path, lines);
    }
    let report = conformance::compare(&softrnic, &rxe);
    eprintln!(
        "differential (seed {seed}, {cases} generated): {} sequences, {} calls compared; {} \
         differ: {} as docs/compatibility.md lists, {} not",
        report.sequences,
        report.calls,
        report.known.len() + report.unknown.len(),
        report.known.len(),
        report.unknown.len()
    );
    for (name, call, a, b) in &report.known {
        eprintln!("  known: {name} (call {call}): softrnic [{a}], rxe [{b}]");
    }
    if report.sequences == 0 {
        return Err(format!("the guest ran no sequence:\n{rxe}"));
    }
    let unlisted: Vec<String> = (report.unknown.iter())
        .map(|(name, call, a, b)| format!("  {name} (call {call}): softrnic [{a}], rxe [{b}]"))
        .collect();
    if unlisted.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "differences docs/compatibility.md does not list (the whole lines are in \
             conform-*.txt under {}):\n{}",
            env!("CARGO_TARGET_TMPDIR"),
            unlisted.join("\n")
        ))
    }
}

fn fuzz_kernel_rxe(guest: &Guest) -> Result<(), String> {
    const ROUNDS: u32 = 6;
    const MUTATIONS: u32 = 8;
    guest.start(
        "fuzzpp",
        "sh -c 'while true; do timeout 60 ibv_rc_pingpong -g 1 -n 2 -s 64 -p 18600; done'",
    );
    let check = format!(
        "printf 'dmesg | grep -c -e WARNING -e BUG -e Oops\\nexit\\n' | \
         timeout 60 busybox nc {RXE_ADDR} {GUEST_PORT} | grep -qx 0"
    );
    let out = std::env::temp_dir().join(format!("srn-rxe-fuzz-{}", std::process::id()));
    let run = in_ns(Some(&guest.ns), env!("CARGO_BIN_EXE_softrnic"))
        .args(["fuzz", "--interface", &guest.tap, "--peer"])
        .arg(format!("{RXE_ADDR}:18600"))
        .args(["--size", "64", "--seed", "1", "--peer-timeout", "120"])
        .args(["--window-ms", "300", "--check", &check, "--out"])
        .arg(&out)
        .args(["--rounds", &ROUNDS.to_string()])
        .args(["--mutations", &MUTATIONS.to_string()])
        .output()
        .map_err(|e| format!("softrnic fuzz: {e}"))?;
    guest.stop("fuzzpp");
    guest.sh("killall ibv_rc_pingpong");
    let said = text(&run.stdout) + &text(&run.stderr);
    eprintln!("softrnic fuzz against rxe:\n{said}");
    if !run.status.success() {
        return Err(format!("softrnic fuzz failed:\n{said}"));
    }
    // Every round either ran its mutations or ended the run with a finding (rxe stopped
    // answering): both are results.
    let sent = said.lines().filter(|l| l.contains(" (at ")).count();
    let rounds = said.lines().filter(|l| l.starts_with("round ")).count();
    if sent == 0 || (sent as u32) < MUTATIONS * (rounds as u32).saturating_sub(1) {
        return Err(format!("{sent} mutations sent in {rounds} rounds:\n{said}"));
    }
    Ok(())
}

/// softrnic's Communication Manager against the kernel's rdma_cm, on the wire: rping serves in
/// the guest, and an engine on the tap (AF_PACKET, in library mode) connects an RC QP to it
/// with a REQ carrying rdma_cm's header, answers the kernel's REP with an RTU, then
/// disconnects with a DREQ the kernel answers with a DREP.
fn cm_handshake_with_kernel_rdma_cm(guest: &Guest) -> Result<(), String> {
    use softrnic_emu_core::cm::{CmEvent, ConnectParams, Peer};
    use softrnic_emu_core::{Config, DeviceAttr, Gid, Instant, Lane, QpType};
    use softrnic_link::library::{Device, Endpoint};
    use softrnic_wire::cm::{CmPath, CmaHeader, ip_service_id, port_space, rej_reason};

    guest.start("rping", "rping -s -a 198.18.2.2 -d -C 1");
    let (ns, tap) = (format!("/run/netns/{}", guest.ns), guest.tap.clone());
    let recorded = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let frames = recorded.clone();
    let client = std::thread::spawn(move || -> Result<Vec<String>, String> {
        softrnic_sys::enter_netns(&ns).map_err(|e| e.to_string())?;
        let packet = softrnic_link::AfPacket::open(&tap).map_err(|e| e.to_string())?;
        let (mac, mtu) = (packet.mac(), packet.mtu());
        let link = Recording {
            inner: packet,
            frames,
        };
        let (me, them) = ([198, 18, 2, 1], [198, 18, 2, 2]);
        let config = Config {
            seed: 11,
            key_secret: 11,
            mac: softrnic_wire::EthernetAddress(mac),
            gids: vec![Gid::from(std::net::Ipv4Addr::from(me))],
            eth_mtu: mtu,
            device: DeviceAttr::default(),
            lane: Lane::ONLY,
        };
        let mut dev = Device::new(link, config);
        let their_ip = std::net::IpAddr::from(them);
        let their_mac = softrnic_link::neigh::resolve(their_ip, Duration::from_secs(5))
            .map_err(|e| format!("the guest's MAC: {e}"))?;
        let pd = dev.engine().alloc_pd(0).map_err(|e| e.to_string())?;
        let cq = dev.engine().create_cq(16).map_err(|e| e.to_string())?;
        let qpn = dev
            .create_qp(pd, QpType::Rc, cq)
            .map_err(|e| e.to_string())?;
        let own = dev.endpoint(qpn);
        let peer = Peer {
            gid: Gid::from_ip(their_ip),
            local: own.gid,
            mac: their_mac,
        };
        let mut private = vec![0u8; CmaHeader::LEN];
        let header = CmaHeader {
            src_port: 40000,
            src: std::net::IpAddr::from(me),
            dst: their_ip,
        };
        header.emit(&mut private).map_err(|e| e.to_string())?;
        let path = CmPath {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: own.gid.0,
            remote_gid: peer.gid.0,
            hop_limit: 64,
            local_ack_timeout: 14,
            ..CmPath::default()
        };
        let service = ip_service_id(port_space::TCP, 7174);
        let params = ConnectParams {
            path,
            private_data: private,
            ..ConnectParams::rc(peer, service, qpn, own.psn)
        };
        let start = std::time::Instant::now();
        let now = || Instant::from_nanos(start.elapsed().as_nanos() as u64);
        let deadline = start + LIMIT;
        let mut seen = Vec::new();
        let mut id = dev
            .engine()
            .cm()
            .connect(now(), params.clone())
            .map_err(|e| format!("{e:?}"))?;
        let mut disconnecting = false;
        while std::time::Instant::now() < deadline {
            dev.progress();
            let Some(event) = dev.engine().cm().poll_event() else {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            };
            // Its name is enough for the report.
            let name = format!("{event:?}");
            seen.push(name.split([' ', '{']).next().unwrap_or_default().to_owned());
            match event {
                // rping has not started listening yet: ask again.
                CmEvent::Rejected { reason, .. } if reason == rej_reason::INVALID_SERVICE_ID => {
                    std::thread::sleep(Duration::from_millis(200));
                    let again = dev.engine().cm().connect(now(), params.clone());
                    id = again.map_err(|e| format!("{e:?}"))?;
                }
                CmEvent::RepReceived {
                    qpn: their_qpn,
                    starting_psn,
                    ..
                } => {
                    let them = Endpoint {
                        gid: peer.gid,
                        mac: softrnic_wire::EthernetAddress(their_mac),
                        qpn: their_qpn,
                        psn: starting_psn,
                    };
                    dev.connect(qpn, &them).map_err(|e| e.to_string())?;
                    dev.engine()
                        .cm()
                        .ready_to_use(id, &[])
                        .map_err(|e| format!("{e:?}"))?;
                }
                CmEvent::Established { .. } if !disconnecting => {
                    disconnecting = true;
                    dev.engine()
                        .cm()
                        .disconnect(now(), id)
                        .map_err(|e| format!("{e:?}"))?;
                }
                CmEvent::Disconnected { .. } => return Ok(seen),
                CmEvent::Unreachable { .. } | CmEvent::Rejected { .. } => {
                    return Err(format!("the handshake failed: {seen:?}"));
                }
                _ => {}
            }
        }
        Err(format!("no end to the handshake: {seen:?}"))
    });
    let seen = client
        .join()
        .map_err(|_| "the CM client panicked".to_string())??;
    let (_, rping) = guest.finish("rping");
    // The kernel's side saw the connection come and go.
    for want in ["ESTABLISHED", "DISCONNECT"] {
        if !rping.contains(want) {
            return Err(format!(
                "rping -s did not see {want}:\n{rping}\nsoftrnic: {seen:?}"
            ));
        }
    }
    eprintln!("CM with kernel rdma_cm: {seen:?}");
    // Both sides' MADs are valid RoCEv2 with good ICRCs, and every one a CM message: the
    // whole handshake is there.
    let frames = std::mem::take(&mut *recorded.lock().unwrap());
    let mut messages = std::collections::BTreeSet::new();
    for (_, f) in &frames {
        let p = softrnic_wire::frame::parse(f).map_err(|e| format!("a bad frame: {e}"))?;
        let m = softrnic_wire::cm::CmMad::parse(p.payload())
            .map_err(|e| format!("not a CM MAD: {e}"))?;
        messages.insert(m.message.name());
    }
    for want in ["REQ", "REJ", "REP", "RTU", "DREQ", "DREP"] {
        if !messages.contains(want) {
            return Err(format!("no {want} on the wire: {messages:?}"));
        }
    }
    // Wireshark decodes every MAD of the capture with nothing malformed. The capture stays in
    // the target directory (docs/samples/rdma-cm-rxe.pcap is one).
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rdma-cm-rxe.pcap");
    let captured: Vec<softrnic::capture::CapturedFrame> = frames
        .into_iter()
        .map(|(timestamp, data)| softrnic::capture::CapturedFrame::new(timestamp, data))
        .collect();
    let out = std::fs::File::create(&file).map_err(|e| e.to_string())?;
    softrnic::capture::write_pcap(&captured, out).map_err(|e| e.to_string())?;
    let tshark = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args([
            "-Y",
            "_ws.malformed || _ws.expert.severity == error || infiniband.mad.mgmtclass != 0x07",
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if !tshark.status.success() || !tshark.stdout.is_empty() {
        return Err(format!(
            "tshark finds frames malformed or not CM:\n{}{}",
            text(&tshark.stdout),
            text(&tshark.stderr)
        ));
    }
    Ok(())
}

/// Frames as they were seen: when (since the Unix epoch), and their bytes.
type Frames = std::sync::Arc<std::sync::Mutex<Vec<(Duration, Vec<u8>)>>>;

/// A link that keeps a copy of every frame it carries.
struct Recording<L> {
    inner: L,
    frames: Frames,
}

fn since_epoch() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

impl<L: softrnic_link::Link> softrnic_link::Link for Recording<L> {
    fn transmit(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool {
        let frames = &self.frames;
        self.inner.transmit(&mut |buf: &mut [u8]| {
            let n = fill(buf)?;
            frames
                .lock()
                .unwrap()
                .push((since_epoch(), buf[..n].to_vec()));
            Some(n)
        })
    }
    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool {
        let frames = &self.frames;
        self.inner.receive(&mut |f: &[u8]| {
            frames.lock().unwrap().push((since_epoch(), f.to_vec()));
            deliver(f)
        })
    }
    fn flush(&mut self) {
        self.inner.flush()
    }
}
