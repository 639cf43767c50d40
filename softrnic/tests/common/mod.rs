//! What the program tests (`programs.rs`) and the rxe interop tests (`interop.rs`) share:
//! softrnic daemons in or out of network namespaces, programs run through `softrnic exec`, and
//! captures checked frame by frame.
// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use softrnic_client::client::Client;
use softrnic_link::netns::VethPair;

/// The programs get the machine to themselves: two of them and a daemon (or two) already fill
/// two cores.
static SERIAL: Mutex<()> = Mutex::new(());
/// TCP ports for the programs' own connection setup, one per run.
static PORT: AtomicU16 = AtomicU16::new(21000);
/// How long one program may run.
pub const LIMIT: Duration = Duration::from_secs(120);

/// A TCP port for one run's own connection setup.
pub fn next_port() -> String {
    PORT.fetch_add(1, Ordering::Relaxed).to_string()
}

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A command, inside network namespace `ns` if given.
pub fn in_ns(ns: Option<&str>, program: &str) -> Command {
    match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => Command::new(program),
    }
}

/// A host: a softrnic daemon (in a namespace, or not) with one device.
pub struct Host {
    pub ns: Option<String>,
    pub socket: PathBuf,
    pub daemon: Child,
    /// The GID index of the device's IPv4 address (what `-g`/`-x` name).
    pub gid: usize,
    /// The daemon's log (rdma_cm's steps too), shown when a test fails.
    log: PathBuf,
}

impl Host {
    /// Starts a daemon and adds a device: on `netdev`, or local.
    pub fn start(tag: &str, ns: Option<&str>, netdev: Option<&str>) -> Host {
        Host::start_with(tag, ns, netdev, &[])
    }

    /// As [`start`](Self::start), the daemon started with `args` (`softrnic daemon ARGS`).
    pub fn start_with(tag: &str, ns: Option<&str>, netdev: Option<&str>, args: &[&str]) -> Host {
        let mut host = Host::daemon(tag, ns, args);
        let mut up = vec!["up"];
        if let Some(n) = netdev {
            up.extend(["--netdev", n]);
        }
        host.up(&up);
        host
    }

    /// Starts a daemon with `workers` data-path threads and as many local devices: device `d`
    /// runs on worker `d`.
    pub fn with_workers(tag: &str, workers: usize) -> Host {
        let mut host = Host::daemon(tag, None, &["--workers", &workers.to_string()]);
        for _ in 0..workers {
            host.up(&["up"]);
        }
        host
    }

    /// Starts a daemon (`softrnic daemon ARGS`) with one local device.
    pub fn with_args(tag: &str, args: &[&str]) -> Host {
        let mut host = Host::daemon(tag, None, args);
        host.up(&["up"]);
        host
    }

    /// Starts a daemon (`softrnic daemon ARGS`) with no device yet.
    fn daemon(tag: &str, ns: Option<&str>, args: &[&str]) -> Host {
        let path = |ext: &str| {
            std::env::temp_dir().join(format!("srn-prog-{}-{tag}.{ext}", std::process::id()))
        };
        let (socket, log) = (path("sock"), path("log"));
        let _ = std::fs::remove_file(&socket);
        let daemon = in_ns(ns, env!("CARGO_BIN_EXE_softrnic"))
            .arg("daemon")
            .args(args)
            .env("SOFTRNIC_SOCKET", &socket)
            .env("SOFTRNIC_LOG", "info,softrnic_daemon::rdma_cm=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the daemon's log"))
            .spawn()
            .expect("start the daemon");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Client::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "the daemon did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Host {
            ns: ns.map(str::to_owned),
            socket,
            daemon,
            gid: 0,
            log,
        }
    }

    /// Adds a device (`softrnic up ...`); the GID index of the first device's IPv4 address.
    fn up(&mut self, up: &[&str]) {
        let out = self.softrnic(up).output().expect("softrnic up");
        assert!(out.status.success(), "up: {}", text(&out.stderr));
        let devices = Client::connect(&self.socket).unwrap().devices().unwrap();
        self.gid = devices[0]
            .gids
            .iter()
            .position(|g| g.to_ip().is_ipv4())
            .expect("an IPv4 GID");
    }

    /// `softrnic ARGS` against this host's daemon.
    pub fn softrnic(&self, args: &[&str]) -> Command {
        let mut c = in_ns(self.ns.as_deref(), env!("CARGO_BIN_EXE_softrnic"));
        c.args(args).env("SOFTRNIC_SOCKET", &self.socket);
        c
    }

    /// `softrnic exec -- PROGRAM ARGS` on this host.
    pub fn program(&self, args: &[String]) -> Command {
        let mut c = self.softrnic(&["exec", "--"]);
        c.args(args);
        c
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        let _ = std::fs::remove_file(&self.socket);
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(LOG_LINES)..].join("\n");
            eprintln!("the last lines of {}:\n{tail}", self.log.display());
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// How much of a daemon's log a failed test shows.
const LOG_LINES: usize = 60;

/// Starts `program` (a pingpong) as a server on `host`, and waits until it has its CQ: it has
/// opened the device and waits for a client. The running server, and its arguments (to which
/// a client adds the server's address).
pub fn waiting_server(host: &Host, program: &str) -> (Running, Vec<String>) {
    let (gid, port) = (host.gid.to_string(), next_port());
    let args = [program, "-g", &gid, "-p", &port]
        .map(String::from)
        .to_vec();
    let mut server = Running(
        host.program(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    server.wait_until("made its CQ", || {
        let status = text(&host.softrnic(&["status"]).output().unwrap().stdout);
        !status.contains("cqs 0 ")
    });
    (server, args)
}

/// A child that is killed if the test fails first.
pub struct Running(pub Child);

impl Running {
    /// Waits for the program at most `limit`; its status, or `None` (and killed) if it still
    /// ran.
    pub fn wait_at_most(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.0.try_wait().expect("wait") {
                return Some(s);
            }
            if Instant::now() > deadline {
                let _ = self.0.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the program wrote (stdout, then stderr), once it has ended.
    pub fn output(&mut self) -> String {
        let mut out = String::new();
        self.0.stdout.take().map(|mut s| s.read_to_string(&mut out));
        self.0.stderr.take().map(|mut s| s.read_to_string(&mut out));
        out
    }

    /// Waits until the program is `ready` (a server listens): panics with its output if it
    /// ends first. The wait follows the program, not the clock: [`LIMIT`] only bounds a
    /// program that hangs, since a busy machine can take long to start one.
    pub fn wait_until(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + LIMIT;
        while !ready() {
            let ended = self.0.try_wait().expect("wait");
            if ended.is_some() || Instant::now() > deadline {
                let _ = self.0.kill();
                let status = self.0.wait();
                panic!("never {what} ({status:?}):\n{}", self.output());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the program (at most [`LIMIT`]) and returns its stdout; panics with its
    /// output if it failed.
    pub fn finish(&mut self, what: &[&str]) -> String {
        let status = self.wait_at_most(LIMIT);
        let mut out = String::new();
        let mut err = String::new();
        self.0.stdout.take().map(|mut s| s.read_to_string(&mut out));
        self.0.stderr.take().map(|mut s| s.read_to_string(&mut err));
        match status {
            Some(s) if s.success() => out,
            s => panic!("{what:?} ended with {s:?}\nstdout:\n{out}\nstderr:\n{err}"),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where cargo left drop-in library `lib` (`libsoftrnic_rdmacm.so`, ...): beside the command or
/// in deps/ (the newer is current).
pub fn dropin(lib: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_softrnic"));
    [
        bin.with_file_name(lib),
        bin.with_file_name("deps").join(lib),
    ]
    .into_iter()
    .filter(|p| p.is_file())
    .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
    .unwrap_or_else(|| panic!("{lib} not built"))
}

/// Runs the repository's `scripts/NAME ARGS` for the harness: its output, trimmed (the
/// scripts print the path they made).
pub fn script(name: &str, args: &[&str]) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name);
    let out = Command::new(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("harness: {}: {e}", path.display()));
    assert!(
        out.status.success(),
        "harness: scripts/{name} {}: {}",
        args.join(" "),
        text(&out.stderr)
    );
    text(&out.stdout).trim().to_owned()
}

/// The include directory of Debian `suite`'s rdma-core headers (fetched by
/// `scripts/rdma-core-gap --fetch`), for programs built as that release builds them.
pub fn rdma_core_headers(suite: &str) -> PathBuf {
    PathBuf::from(script("rdma-core-gap", &["--fetch", suite])).join("usr/include")
}

/// Compiles `tests/c/NAME.c` as a program of rdma-core 65: with Debian unstable's headers,
/// linked with libibverbs and librdmacm (the drop-ins, which have rdma-core 65's symbols).
pub fn c_program_for_rdma_core_65(name: &str) -> PathBuf {
    let include = rdma_core_headers("sid");
    let libdir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rdma-core-65-libs");
    std::fs::create_dir_all(&libdir).unwrap();
    for (lib, link) in [
        ("libsoftrnic_ibverbs_provider.so", "libibverbs.so"),
        ("libsoftrnic_rdmacm.so", "librdmacm.so"),
    ] {
        let _ = std::fs::remove_file(libdir.join(link));
        std::os::unix::fs::symlink(dropin(lib), libdir.join(link)).unwrap();
    }
    c_program(
        name,
        &[
            &format!("-I{}", include.display()),
            &format!("-L{}", libdir.display()),
            "-lrdmacm",
            "-libverbs",
        ],
    )
}

/// A directory every user can read and write (`tag` names it), holding a copy of softrnic with
/// the drop-in libraries beside it (where `exec` finds them) and of each of `files`: what
/// other users run, whatever the permissions of the directories the tests are built in.
pub fn for_everyone(tag: &str, files: &[&Path]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("srn-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_softrnic"));
    let libs = ["libsoftrnic_ibverbs_provider.so", "libsoftrnic_rdmacm.so"].map(dropin);
    for f in [bin.as_path()]
        .into_iter()
        .chain(libs.iter().map(PathBuf::as_path))
        .chain(files.iter().copied())
    {
        std::fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
    }
    let chmod = Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(chmod.success());
    dir
}

/// Compiles `tests/c/NAME.c` against Debian's rdma-core headers, linked with `libs`.
pub fn c_program(name: &str, libs: &[&str]) -> PathBuf {
    c_program_with("cc", name, libs)
}

/// Compiles `tests/c/NAME.c` with compiler `cc` (`mpicc` for an MPI program).
pub fn c_program_with(cc: &str, name: &str, libs: &[&str]) -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let cc = Command::new(cc)
        .args(["-O1", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(&exe)
        .arg(src)
        .args(libs)
        .output()
        .expect("a C compiler");
    assert!(
        cc.status.success(),
        "compiling needs gcc, libibverbs-dev, librdmacm-dev and libopenmpi-dev: {}",
        text(&cc.stderr)
    );
    exe
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether something listens on TCP `port` in namespace `ns`.
pub fn listening(ns: Option<&str>, port: &str) -> bool {
    let out: Output = in_ns(ns, "ss")
        .args(["-ltnH", &format!("sport = :{port}")])
        .output()
        .expect("ss (iproute2)");
    !out.stdout.is_empty()
}

/// The last result row of a perftest run: its numbers.
pub fn perftest_row(out: &str) -> Vec<f64> {
    out.lines()
        .rev()
        .filter_map(|l| {
            let nums: Vec<f64> = l.split_whitespace().map_while(|w| w.parse().ok()).collect();
            (nums.len() >= 4 && l.trim_start().starts_with(char::is_numeric)).then_some(nums)
        })
        .next()
        .unwrap_or_else(|| panic!("no result row in:\n{out}"))
}

/// A capture of everything a host's daemon saw while `f` ran.
pub fn captured(host: &Host, f: impl FnOnce()) -> Vec<Vec<u8>> {
    captured_on(host, None, f)
}

/// A capture of what a host's daemon saw while `f` ran: on `device`, or on every one.
pub fn captured_on(host: &Host, device: Option<&str>, f: impl FnOnce()) -> Vec<Vec<u8>> {
    let file = std::env::temp_dir().join(format!("srn-prog-{}.pcapng", std::process::id()));
    let mut args = vec!["capture", "-w", file.to_str().unwrap()];
    args.extend(device.map(|d| ["--device", d]).into_iter().flatten());
    let mut capture = host.softrnic(&args).stderr(Stdio::piped()).spawn().unwrap();
    // The capture is registered once it says so.
    let mut said = [0u8; 8];
    capture
        .stderr
        .as_mut()
        .unwrap()
        .read_exact(&mut said)
        .unwrap();
    f();
    let stop = Command::new("kill")
        .args(["-INT", &capture.id().to_string()])
        .status()
        .unwrap();
    assert!(stop.success());
    let mut err = String::new();
    capture
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(capture.wait().unwrap().success(), "capture: {err}");
    assert!(!err.contains("lost"), "the capture lost frames: {err}");
    // Wireshark agrees every frame is well formed. Its RPC-over-RDMA heuristic takes some
    // SEND payloads (a 1-byte ping, from rxe as from softrnic) for a truncated RPC header and
    // calls the frame malformed: it is not asked.
    let tshark = Command::new("tshark")
        .args([
            "-r",
            &file.display().to_string(),
            "--disable-protocol",
            "rpcordma",
        ])
        .args(["-Y", "_ws.malformed || _ws.expert.severity == error"])
        .output()
        .expect("tshark");
    assert!(tshark.status.success(), "{}", text(&tshark.stderr));
    assert_eq!(text(&tshark.stdout), "", "tshark finds malformed frames");
    let bytes = std::fs::read(&file).unwrap();
    let _ = std::fs::remove_file(&file);
    softrnic::capture::read(&bytes)
        .unwrap()
        .into_iter()
        .map(|f| f.data)
        .collect()
}

/// Per operation, the messages and payload bytes of distinct packets (a same-host frame is
/// captured leaving and arriving; a retransmission repeats its PSN).
pub fn tally(
    frames: &[Vec<u8>],
) -> std::collections::HashMap<softrnic_wire::opcode::Operation, (u64, u64)> {
    let mut seen = std::collections::HashSet::new();
    let mut out = std::collections::HashMap::new();
    for f in frames {
        // Every frame parses, with a good ICRC and a known opcode.
        let p = softrnic_wire::frame::parse(f).unwrap_or_else(|e| panic!("bad frame: {e}"));
        let bth = &p.repr.bth;
        let info = bth.opcode.info();
        if !seen.insert((bth.dest_qp, bth.psn, bth.opcode)) {
            continue;
        }
        let e = out.entry(info.operation).or_insert((0, 0));
        if info.position.is_last() {
            e.0 += 1;
        }
        e.1 += p.payload().len() as u64;
    }
    out
}

/// Where the programs run.
#[derive(Debug, Clone, Copy)]
pub enum Topology {
    /// Two processes on one host.
    OneHost,
    /// Two hosts in namespaces joined by a veth pair, with two queues a side.
    Veth,
    /// Two processes on one host, on two local devices of one daemon that runs each on its own
    /// worker thread: same-host frames cross between threads.
    TwoWorkers,
    /// Two processes on one local device of a daemon with two workers, whose engine is in
    /// two shards: each process on its own shard and worker, same-host frames crossing
    /// between them by QPN.
    Shards,
    /// As `Veth`, each daemon with two workers and its device in two shards, each shard on
    /// one of the interface's two queues: a frame that arrives on the other shard's queue
    /// crosses to its QP's shard.
    VethShards,
}

pub const TOPOLOGIES: [Topology; 2] = [Topology::OneHost, Topology::Veth];

/// A server host and a client host (the same one on one host), and the server's address.
pub struct Setup {
    pub hosts: Vec<Host>,
    pub server_addr: &'static str,
    pub pair: Option<VethPair>,
    /// The devices the server and the client open, when not the first.
    pub devices: Option<[&'static str; 2]>,
}

impl Setup {
    pub fn new(topology: Topology, tag: &str) -> Setup {
        match topology {
            Topology::OneHost => Setup {
                hosts: vec![Host::start(tag, None, None)],
                server_addr: "127.0.0.1",
                pair: None,
                devices: None,
            },
            Topology::TwoWorkers => Setup {
                hosts: vec![Host::with_workers(tag, 2)],
                server_addr: "127.0.0.1",
                pair: None,
                devices: Some(["srnic1", "srnic0"]),
            },
            Topology::Shards => Setup {
                hosts: vec![Host::with_args(tag, &["--workers", "2", "--shards", "2"])],
                server_addr: "127.0.0.1",
                pair: None,
                devices: None,
            },
            Topology::Veth | Topology::VethShards => {
                let args: &[&str] = match topology {
                    Topology::Veth => &[],
                    _ => &["--workers", "2", "--shards", "2"],
                };
                // Two queues a side: AF_XDP serves every receive queue, and a QP's frames
                // leave on the queue its UDP source port picks.
                let pair = VethPair::with_queues(tag, 1500, 2).expect("a veth pair (needs root)");
                // AF_XDP sees the peer's offloaded (incomplete) UDP checksums otherwise.
                for i in 0..2 {
                    let _ = pair.exec(i, &["ethtool", "-K", &pair.ifs[i], "tx", "off"]);
                }
                let hosts = (0..2)
                    .map(|i| {
                        let (tag, ns) = (format!("{tag}{i}"), Some(pair.ns[i].as_str()));
                        Host::start_with(&tag, ns, Some(&pair.ifs[i]), args)
                    })
                    .collect();
                Setup {
                    hosts,
                    server_addr: "198.18.1.1",
                    pair: Some(pair),
                    devices: None,
                }
            }
        }
    }

    pub fn server(&self) -> &Host {
        &self.hosts[0]
    }

    pub fn client(&self) -> &Host {
        self.hosts.last().expect("a host")
    }

    /// Runs a program as server and as client (`args` plus the GID index flag `gid_flag`,
    /// the port, and for the client the server's address); returns both outputs, after
    /// checking both succeeded.
    pub fn run(&self, gid_flag: &str, args: &[&str]) -> (String, String) {
        let (server, mut clients) = self.serve(gid_flag, args, args, 1);
        (server, clients.remove(0))
    }

    /// [`run`](Self::run) with `n` clients at once, the server with its own arguments.
    pub fn serve(
        &self,
        gid_flag: &str,
        server_args: &[&str],
        client_args: &[&str],
        n: usize,
    ) -> (String, Vec<String>) {
        let port = next_port();
        let argv = |h: &Host, side: usize, args: &[&str]| -> Vec<String> {
            let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            v.extend([
                gid_flag.into(),
                h.gid.to_string(),
                "-p".into(),
                port.clone(),
            ]);
            if let Some(devices) = self.devices {
                v.extend(["-d".into(), devices[side].into()]);
            }
            v
        };
        let server = self
            .server()
            .program(&argv(self.server(), 0, server_args))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server");
        let mut server = Running(server);
        let ns = self.server().ns.as_deref();
        server.wait_until("listened", || listening(ns, &port));
        let mut args = argv(self.client(), 1, client_args);
        args.push(self.server_addr.into());
        let clients: Vec<Running> = (0..n)
            .map(|_| {
                let child = self
                    .client()
                    .program(&args)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("start the client");
                Running(child)
            })
            .collect();
        let clients = clients
            .into_iter()
            .map(|mut c| c.finish(client_args))
            .collect();
        (server.finish(server_args), clients)
    }
}

/// A copy of rdma-core's test suite (python3-pyverbs ships it, with its larger modules
/// compressed): the copy's directory, to remove, and its `tests` directory.
pub fn rdma_core_tests() -> (PathBuf, PathBuf) {
    let shipped = std::path::Path::new("/usr/share/doc/rdma-core/tests");
    assert!(
        shipped.is_dir(),
        "install python3-pyverbs (rdma-core's test suite)"
    );
    // Debian compresses the larger modules: unpack a copy.
    let dir = std::env::temp_dir().join(format!("srn-rdma-core-tests-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let status = Command::new("cp")
        .arg("-r")
        .arg(shipped)
        .arg(&dir)
        .status()
        .unwrap();
    assert!(status.success());
    let tests = dir.join("tests");
    for entry in std::fs::read_dir(&tests).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "gz") {
            assert!(
                Command::new("gzip")
                    .arg("-df")
                    .arg(&path)
                    .status()
                    .unwrap()
                    .success()
            );
        }
    }
    (dir, tests)
}

/// Counts of a unittest run: (ran, failures + errors, skipped).
pub fn unittest_summary(out: &str) -> (u32, u32, u32) {
    let ran = out
        .lines()
        .find_map(|l| {
            l.strip_prefix("Ran ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no summary in:\n{out}"));
    let count = |what: &str| -> u32 {
        out.rsplit_once(&format!("{what}="))
            .and_then(|(_, rest)| {
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    (ran, count("failures") + count("errors"), count("skipped"))
}

/// Whether an rdma_cm id of `host` listens on `port` (as `softrnic status` shows).
pub fn cm_listening(host: &Host, port: &str) -> bool {
    let port: u16 = port.parse().unwrap();
    Client::connect(&host.socket)
        .and_then(|mut c| c.cm_listeners())
        .unwrap()
        .iter()
        .any(|l| l.addr.port() == port)
}
