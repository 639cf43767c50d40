//! `softrnic daemon | up | down | status | stat`: running the daemon and managing its devices,
//! with the conventions of `rdma link`, `ibv_devinfo` and `ethtool -S`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use softrnic_client::client::Client;
use softrnic_client::proto::{BackendKind, DeviceInfo, UpRequest};
use softrnic_daemon::Daemon;

/// The backends `up --backend` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// AF_XDP, native (DRV) mode if the driver has it, else generic (SKB).
    Xdp,
    /// AF_XDP in native mode only.
    XdpDrv,
    /// AF_XDP in generic mode only.
    XdpSkb,
    /// AF_PACKET.
    Packet,
    /// No wire: only devices of this daemon (needs no privileges).
    Local,
}

/// The daemon's socket path.
pub fn socket() -> PathBuf {
    softrnic_client::proto::default_socket()
}

/// How a system daemon is shared among users (see docs/device.md, "One daemon for many users").
#[derive(Debug, Clone, clap::Args)]
pub struct SharingArgs {
    /// Let this group's members use the daemon (its socket becomes 0660 and the group's).
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
    /// Let this group's members administer it as root does: devices, DCQCN, captures.
    #[arg(long, value_name = "GROUP")]
    admin_group: Option<String>,
    /// The most queue pairs each user but root may hold at once.
    #[arg(long, value_name = "N")]
    max_qps_per_user: Option<u64>,
    /// The most memory regions each user but root may hold at once.
    #[arg(long, value_name = "N")]
    max_mrs_per_user: Option<u64>,
    /// The most bytes each user but root may have registered at once (like RLIMIT_MEMLOCK;
    /// K, M and G suffixes count in 1024s).
    #[arg(long, value_name = "BYTES", value_parser = bytes)]
    max_registered_per_user: Option<u64>,
}

impl SharingArgs {
    fn sharing(&self) -> Result<softrnic_daemon::Sharing, String> {
        let gid = |g: &Option<String>| {
            g.as_deref()
                .map(softrnic_sys::group_id)
                .transpose()
                .map_err(|e| e.to_string())
        };
        Ok(softrnic_daemon::Sharing {
            group: gid(&self.group)?,
            admin_group: gid(&self.admin_group)?,
            limits: softrnic_daemon::Limits {
                qps: self.max_qps_per_user,
                mrs: self.max_mrs_per_user,
                registered: self.max_registered_per_user,
            },
        })
    }
}

/// A byte count: a number, optionally with K, M or G (powers of 1024).
fn bytes(s: &str) -> Result<u64, String> {
    let (n, shift) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 10),
        Some((i, 'M' | 'm')) => (&s[..i], 20),
        Some((i, 'G' | 'g')) => (&s[..i], 30),
        _ => (s, 0),
    };
    n.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("{s}: not a byte count (a number, with K, M or G)"))
}

/// Runs the daemon in the foreground until SIGINT or SIGTERM.
pub fn run_daemon(
    workers: Option<std::num::NonZeroUsize>,
    shards: Option<std::num::NonZeroUsize>,
    sharing: &SharingArgs,
) -> Result<(), String> {
    let path = socket();
    let workers = workers.map_or_else(softrnic_daemon::default_workers, |n| n.get());
    let shards = shards.map_or_else(softrnic_daemon::default_shards, |n| n.get());
    let sharing = sharing.sharing()?;
    let mut d = Daemon::bind(&path, workers).map_err(|e| e.to_string())?;
    d.share(sharing).map_err(|e| e.to_string())?;
    d.set_shards(shards);
    tracing::info!(socket = %path.display(), workers, shards, "softrnic daemon serving");
    static STOP: AtomicBool = AtomicBool::new(false);
    softrnic_sys::on_termination(&STOP);
    d.run(&STOP).map_err(|e| e.to_string())?;
    tracing::info!("softrnic daemon stopped");
    Ok(())
}

/// Connects to the daemon, starting one in the background first if none answers.
pub fn connect_or_start() -> Result<Client, String> {
    let path = socket();
    match Client::connect(&path) {
        Ok(c) => return Ok(c),
        // A daemon serves there, but not this user: starting another would not help.
        Err(e) if e.errno == libc::EACCES => return Err(e.message),
        Err(_) => {}
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let log = path.with_extension("log");
    let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    Command::new(exe)
        .arg("daemon")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("starting the daemon: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match Client::connect(&path) {
            Ok(c) => {
                eprintln!(
                    "softrnic: started the daemon at {} (log: {})",
                    path.display(),
                    log.display()
                );
                return Ok(c);
            }
            Err(e) if Instant::now() > deadline => {
                return Err(format!(
                    "the daemon did not start: {e}; see {}",
                    log.display()
                ));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Connects to the daemon, starting one and adding a local device first if none is there (what
/// `exec` and `capture` need before a program runs).
pub fn connect_with_a_device() -> Result<Client, String> {
    let mut client = connect_or_start()?;
    if client.devices().map_err(|e| e.to_string())?.is_empty() {
        let info = client
            .up(UpRequest {
                netdev: None,
                backend: Some(BackendKind::Local),
                netns: None,
            })
            .map_err(|e| e.to_string())?;
        eprintln!("softrnic: added {} (local, same host only)", info.name);
    }
    Ok(client)
}

fn connect() -> Result<Client, String> {
    Client::connect(&socket()).map_err(|e| e.to_string())
}

/// `softrnic up`.
pub fn up(
    netdev: Option<String>,
    backend: Option<Backend>,
    netns: Option<String>,
) -> Result<(), String> {
    let mut c = connect_or_start()?;
    let netns = netns.map(|n| {
        if n.contains('/') {
            n
        } else {
            format!("/var/run/netns/{n}")
        }
    });
    let kinds: &[Option<BackendKind>] = match backend {
        None => &[None],
        Some(Backend::Xdp) => &[Some(BackendKind::XdpDrv), Some(BackendKind::XdpSkb)],
        Some(Backend::XdpDrv) => &[Some(BackendKind::XdpDrv)],
        Some(Backend::XdpSkb) => &[Some(BackendKind::XdpSkb)],
        Some(Backend::Packet) => &[Some(BackendKind::Packet)],
        Some(Backend::Local) => &[Some(BackendKind::Local)],
    };
    let mut errors = Vec::new();
    for &kind in kinds {
        let req = UpRequest {
            netdev: netdev.clone(),
            backend: kind,
            netns: netns.clone(),
        };
        match c.up(req) {
            Ok(info) => {
                print_device(&info);
                return Ok(());
            }
            Err(e) => errors.push(e.message),
        }
    }
    Err(errors.join("; "))
}

/// `softrnic down`.
pub fn down(name: &str) -> Result<(), String> {
    connect()?.down(name).map_err(|e| e.to_string())
}

fn backend_name(b: BackendKind) -> &'static str {
    match b {
        BackendKind::XdpDrv => "AF_XDP (native)",
        BackendKind::XdpSkb => "AF_XDP (generic)",
        BackendKind::Packet => "AF_PACKET",
        BackendKind::Local => "local (same host only)",
    }
}

fn print_device(d: &DeviceInfo) {
    let mac = d.mac.map(|b| format!("{b:02x}")).join(":");
    let on = match (&d.netdev, &d.netns) {
        (Some(n), Some(ns)) => format!(" on {n} in {ns}"),
        (Some(n), None) => format!(" on {n}"),
        _ => String::new(),
    };
    println!(
        "{}: state ACTIVE backend {}{on} mac {mac}",
        d.name,
        backend_name(d.backend)
    );
    println!("    backend choice: {}", d.backend_reason);
    for (i, g) in d.gids.iter().enumerate() {
        println!("    gid[{i}] {g} (RoCE v2)");
    }
    let [pds, mrs, cqs, qps] = d.objects;
    println!(
        "    contexts {} pds {pds} mrs {mrs} cqs {cqs} qps {qps}",
        d.contexts
    );
}

/// `softrnic status`.
pub fn status() -> Result<(), String> {
    let path = socket();
    let mut c = match Client::connect(&path) {
        Ok(c) => c,
        Err(e) if e.errno == libc::EACCES => return Err(e.message),
        Err(_) => {
            println!("no daemon at {}", path.display());
            return Ok(());
        }
    };
    let devices = c.devices().map_err(|e| e.to_string())?;
    println!("daemon pid {} at {}", c.daemon_pid(), path.display());
    if devices.is_empty() {
        println!("no devices; add one with `softrnic up`");
    }
    for d in &devices {
        print_device(d);
    }
    for l in c.cm_listeners().map_err(|e| e.to_string())? {
        use softrnic_wire::cm::port_space;
        let space = match l.ps {
            port_space::TCP => "TCP".to_owned(),
            port_space::UDP => "UDP".to_owned(),
            port_space::IB => "IB".to_owned(),
            port_space::IPOIB => "IPoIB".to_owned(),
            other => format!("{other:#x}"),
        };
        println!("rdma_cm listening: {space} {} (pid {})", l.addr, l.pid);
    }
    Ok(())
}

/// `softrnic stat`.
pub fn stat(device: Option<String>) -> Result<(), String> {
    let mut c = connect()?;
    let names: Vec<String> = match device {
        Some(d) => vec![d],
        None => c
            .devices()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|d| d.name)
            .collect(),
    };
    for name in names {
        let counters = c.counters(&name).map_err(|e| e.to_string())?;
        println!("{name}:");
        for (k, v) in counters.iter() {
            println!("    {k}: {v}");
        }
    }
    Ok(())
}

/// `softrnic dcqcn`: sets the parameters given as `NAME=VALUE` (all checked before any is
/// sent), then prints them all.
pub fn dcqcn(device: &str, set: &[String]) -> Result<(), String> {
    let mut c = connect()?;
    let mut p = c.dcqcn(device, None).map_err(|e| e.to_string())?;
    if !set.is_empty() {
        for s in set {
            let (name, value) = s
                .split_once('=')
                .ok_or_else(|| format!("{s:?}: give NAME=VALUE"))?;
            p.set(name, value)?;
        }
        p = c.dcqcn(device, Some(p)).map_err(|e| e.to_string())?;
    }
    println!("{device}:");
    for name in softrnic_emu_core::Dcqcn::NAMES {
        println!("    {name}: {}", p.get(name).expect("a name it lists"));
    }
    Ok(())
}

/// `softrnic capture`. The daemon is started (with a local device) if none runs, so a capture
/// started before a CI job's programs sees all their frames. The file is readable at any
/// moment: it holds whole blocks, flushed when the daemon has nothing more to hand over and at
/// least once a second, so a job killed mid-capture leaves a file that tools read.
pub fn capture(
    path: &std::path::Path,
    device: Option<&str>,
    count: Option<u64>,
) -> Result<(), String> {
    /// The longest a captured frame waits in memory before it is in the file.
    const FLUSH_EVERY: Duration = Duration::from_secs(1);
    let mut c = connect_with_a_device()?;
    c.capture(device).map_err(|e| e.to_string())?;
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = softrnic::capture::LiveWriter::new(std::io::BufWriter::new(file))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    out.flush().map_err(|e| e.to_string())?;
    eprintln!("softrnic: capturing to {} (Ctrl-C to stop)", path.display());
    static STOP: AtomicBool = AtomicBool::new(false);
    softrnic_sys::on_termination(&STOP);
    let (mut n, mut lost) = (0, 0);
    let mut flushed = Instant::now();
    while count.is_none_or(|c| n < c) {
        // Wake up now and then to notice Ctrl-C; after it, write what the daemon had already
        // captured (until it has been quiet for a moment), then stop.
        let stopping = STOP.load(std::sync::atomic::Ordering::Relaxed);
        if !c.readable(if stopping { 100 } else { 200 }) {
            if stopping {
                break;
            }
            out.flush().map_err(|e| e.to_string())?;
            flushed = Instant::now();
            continue;
        }
        let Some(f) = c.next_frame().map_err(|e| e.to_string())? else {
            eprintln!("softrnic: the daemon stopped");
            break;
        };
        lost += f.dropped;
        out.write(&f.device, f.outbound, f.unix_nanos, f.dropped, &f.data)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        n += 1;
        if flushed.elapsed() >= FLUSH_EVERY || !c.readable(0) {
            out.flush().map_err(|e| e.to_string())?;
            flushed = Instant::now();
        }
    }
    out.flush().map_err(|e| e.to_string())?;
    if lost > 0 {
        eprintln!("softrnic: {n} frames; {lost} lost (the capture read too slowly)");
    } else {
        eprintln!("softrnic: {n} frames");
    }
    Ok(())
}
