//! The softrnic daemon: it is the NIC. It owns the backends, one engine per device (so the QPN
//! space, GID table and timers), and serves programs over a Unix socket: each connection is a
//! device context whose objects belong to it and are freed when it closes, however the program
//! ends.
//!
//! The control thread serves the programs' sockets: verbs calls, rdma_cm, administration and
//! captures. The data path runs on [`worker`] threads, each with its share of the devices;
//! both sides hold a device's lock while they use it.
//!
//! Its frames move over [`softrnic_link`]'s links; programs reach it through
//! [`softrnic_client`]'s protocol and rings.

mod context;
mod device;
#[cfg(feature = "fuzz")]
pub mod fuzz;
mod memory;
mod rdma_cm;
mod requests;
mod rings;
mod switch;
mod worker;
mod xrc;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Read};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};
use std::time::Instant as StdInstant;

use crossbeam_channel::Receiver;
use softrnic_emu_core::{Config, DeviceAttr, Engine, Gid, Instant, Lane};
use softrnic_wire::EthernetAddress;

pub use memory::ProcessMemory;
use softrnic_client::proto::{self, BackendKind, DeviceInfo, UpRequest};
use softrnic_link::{AfPacket, AfXdp, XdpMode, gid};
use softrnic_sys as sys;

use context::Context;
use device::{Device, Shard, Wire};
use switch::Frames;
use worker::{Locked, MAX_SLEEP_MS, Pass, SPIN, Shared};

/// The daemon's state: the control thread's, and (in `shared`) what it shares with the
/// workers.
pub struct Daemon {
    listener: UnixListener,
    path: PathBuf,
    /// Every device, by index (the workers find theirs in `shared`).
    devices: Vec<Option<Arc<Locked>>>,
    contexts: Vec<Option<Context>>,
    next_space: u32,
    uid: u32,
    sharing: Sharing,
    shared: Arc<Shared>,
    /// The workers' inboxes, until `run` starts them.
    inboxes: Vec<Receiver<Frames>>,
    /// The scratch space of the passes a verbs call runs on its device.
    pass: Pass,
    /// How many shards (engines) a device has (an AF_XDP one at most one per queue, an
    /// AF_PACKET one one).
    shards: usize,
    /// The rdma_cm ids of every event channel.
    cm: rdma_cm::RdmaCm,
}

/// How one daemon serves several users, as a host gives RDMA devices to a group through
/// /dev/infiniband/uverbs*.
#[derive(Debug, Clone, Default)]
pub struct Sharing {
    /// The group whose members may connect: the socket is made 0660 and this group's.
    pub group: Option<u32>,
    /// The group whose members administer the daemon as root and its own user do: devices up
    /// and down, DCQCN settings, and captures (which show every program's traffic).
    pub admin_group: Option<u32>,
    /// What each user other than root may hold at once, over all their programs.
    pub limits: Limits,
}

/// Per-user limits (none when `None`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// Queue pairs.
    pub qps: Option<u64>,
    /// Memory regions.
    pub mrs: Option<u64>,
    /// Bytes of memory registered, as RLIMIT_MEMLOCK bounds what a kernel provider pins.
    pub registered: Option<u64>,
}

/// Device `d` of `devices`, locked.
fn device_at(devices: &[Option<Arc<Locked>>], d: usize) -> Option<MutexGuard<'_, Device>> {
    devices.get(d)?.as_deref().map(Locked::lock_ahead)
}

/// How many data-path threads a daemon runs unless told: `SOFTRNIC_WORKERS`, or one per two
/// CPUs (the programs it serves poll their CQs on the others).
pub fn default_workers() -> usize {
    std::env::var("SOFTRNIC_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            (cpus / 2).max(1)
        })
}

/// How many shards a daemon gives each device unless told: `SOFTRNIC_SHARDS`,
/// or one. More spread the programs of one device over the workers; an XRC domain cannot be
/// shared by programs on different shards.
pub fn default_shards() -> usize {
    std::env::var("SOFTRNIC_SHARDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

/// Runs `f` in a thread that has entered network namespace `netns` (if any): sockets opened
/// there belong to that namespace.
fn in_netns<T: Send + 'static>(
    netns: Option<&str>,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let Some(ns) = netns.map(str::to_owned) else {
        return f();
    };
    std::thread::spawn(move || {
        sys::enter_netns(&ns).map_err(|e| io::Error::new(e.kind(), format!("{ns}: {e}")))?;
        f()
    })
    .join()
    .map_err(|_| io::Error::other("a namespace thread panicked"))?
}

impl Daemon {
    /// Listens at `path` (replacing a stale socket, refusing a live one), to serve with
    /// `workers` data-path threads.
    pub fn bind(path: &Path, workers: usize) -> io::Result<Daemon> {
        match UnixStream::connect(path) {
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("a daemon already serves {}", path.display()),
                ));
            }
            // Nothing, or a stale socket: this daemon takes the path.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ECONNREFUSED)) => {
                let _ = std::fs::remove_file(path);
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let listener = UnixListener::bind(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        listener.set_nonblocking(true)?;
        let (shared, inboxes) = Shared::new(workers)?;
        let pass = Pass::new(&shared);
        Ok(Daemon {
            listener,
            path: path.to_owned(),
            devices: Vec::new(),
            contexts: Vec::new(),
            next_space: 1,
            uid: sys::uid(),
            sharing: Sharing::default(),
            shared: Arc::new(shared),
            inboxes,
            pass,
            shards: 1,
            cm: rdma_cm::RdmaCm::seeded(sys::random_u64()),
        })
    }

    /// Gives each device brought up from now on `shards` engines (at least one; on AF_XDP
    /// at most one per queue, on AF_PACKET one), so that its programs' QPs run on as many
    /// workers (see [`device::Shard`]).
    pub fn set_shards(&mut self, shards: usize) {
        self.shards = shards.max(1);
    }

    /// Serves users as `sharing` says: a group of them on the socket, an admin group, limits.
    pub fn share(&mut self, sharing: Sharing) -> io::Result<()> {
        if let Some(gid) = sharing.group {
            sys::share_socket(&self.path, gid)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))?;
        }
        self.sharing = sharing;
        Ok(())
    }

    fn now(&self) -> Instant {
        self.shared.now()
    }

    /// Serves until `stop` is set: the workers on their threads, the control path on this one.
    pub fn run(&mut self, stop: &AtomicBool) -> io::Result<()> {
        let inboxes = std::mem::take(&mut self.inboxes);
        let shared = Arc::clone(&self.shared);
        std::thread::scope(|s| {
            for (id, inbox) in inboxes.into_iter().enumerate() {
                let shared = &*shared;
                std::thread::Builder::new()
                    .name(format!("softrnic-worker-{id}"))
                    .spawn_scoped(s, move || worker::work(id, shared, inbox))?;
            }
            let served = self.control(stop);
            shared.halted.store(true, Ordering::SeqCst);
            shared.ring_workers();
            served
        })
    }

    /// The control thread's loop: programs connect and call, rdma_cm's events are turned
    /// into the programs', captured frames go to their captures. It sleeps in poll(2) until
    /// a socket is readable or a worker rings.
    fn control(&mut self, stop: &AtomicBool) -> io::Result<()> {
        let bell = &Arc::clone(&self.shared).control;
        let mut fds = Vec::new();
        let mut last_work = StdInstant::now();
        while !stop.load(Ordering::Relaxed) && !self.shared.halted.load(Ordering::Relaxed) {
            // What the workers rang for (rdma_cm events, captured frames, a moved MAC) is
            // looked at only then: each look locks every device.
            if bell.open() {
                self.route_cm();
                self.deliver_taps();
            }
            let busy = self.accept() | self.serve();
            // Replies and captured frames the socket did not take at once.
            let unsent = self.flush_outbufs();
            if busy {
                last_work = StdInstant::now();
                continue;
            }
            // A program's calls come in bursts (a connection's setup, a QP's creation): the
            // next one is served without waking from poll(2) if it comes soon.
            if last_work.elapsed() < SPIN {
                std::thread::yield_now();
                continue;
            }
            if !bell.may_sleep() {
                continue;
            }
            fds.clear();
            fds.push(self.listener.as_raw_fd());
            fds.push(bell.fd());
            fds.extend(self.contexts.iter().flatten().map(|c| c.stream.as_raw_fd()));
            // poll(2) here waits only for input: with output still to write, look again soon.
            sys::poll_readable(&fds, if unsent { 1 } else { MAX_SLEEP_MS })?;
            bell.woken();
        }
        Ok(())
    }

    /// Passes on every device, run here (see [`Pass::run`]), while they find work: a CM
    /// exchange between two ids of this daemon (a DREQ and its DREP, a REQ, REP and RTU)
    /// takes a pass per message, and a program's next step may depend on its outcome (rping
    /// destroys its id right after its disconnect, and an event not yet read then is lost, as
    /// with the kernel).
    fn pass_all(&mut self) {
        const ROUNDS: usize = 4;
        for _ in 0..ROUNDS {
            let mut any = false;
            for d in 0..self.devices.len() {
                if let Some(dev) = device_at(&self.devices, d) {
                    any |= self.pass.run(&self.shared, &mut [(d, dev)], None);
                }
            }
            if !any {
                return;
            }
        }
    }

    /// Turns each device's rdma_cm events into the programs', and tells the ids on a device
    /// whose MAC changed.
    fn route_cm(&mut self) {
        for d in 0..self.devices.len() {
            self.cm_events(d);
            let moved =
                device_at(&self.devices, d).is_some_and(|mut dev| std::mem::take(&mut dev.moved));
            if moved {
                self.cm_addr_changed(d);
            }
        }
    }

    fn accept(&mut self) -> bool {
        let mut any = false;
        while let Ok((stream, _)) = self.listener.accept() {
            any = true;
            let Ok((pid, uid)) = sys::peer_cred(stream.as_raw_fd()) else {
                continue;
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let space = self.next_space;
            self.next_space += 1;
            tracing::debug!(pid, uid, space, "client connected");
            let ctx = Context::new(stream, pid, uid, space);
            match self.contexts.iter().position(Option::is_none) {
                Some(i) => self.contexts[i] = Some(ctx),
                None => self.contexts.push(Some(ctx)),
            }
        }
        any
    }

    /// Reads and answers every complete request; closes contexts whose program has gone.
    fn serve(&mut self) -> bool {
        let mut any = false;
        for i in 0..self.contexts.len() {
            let Some(ctx) = self.contexts[i].as_mut() else {
                continue;
            };
            let mut chunk = [0u8; 64 * 1024];
            let mut closed = false;
            loop {
                match ctx.stream.read(&mut chunk) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(n) => ctx.inbuf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            }
            while let Some(body) = self.contexts[i].as_mut().and_then(Context::next_message) {
                any = true;
                let reply = match body {
                    Ok(req) => self.handle(i, req),
                    Err(e) => proto::Reply::Error {
                        errno: libc::EINVAL,
                        message: format!("bad request: {e}"),
                    },
                };
                self.contexts[i].as_mut().expect("still open").queue(&reply);
            }
            let ctx = self.contexts[i].as_mut().expect("still open");
            if ctx.flush().is_err() || ctx.broken {
                closed = true;
            }
            if closed {
                any = true;
                self.close(i);
            }
        }
        let capturing = self.contexts.iter().flatten().any(|c| c.capture.is_some());
        self.shared.capturing.store(capturing, Ordering::Relaxed);
        any
    }

    /// Frees everything a context owns: its program exited, crashed or closed the device.
    fn close(&mut self, i: usize) {
        let Some(ctx) = self.contexts[i].take() else {
            return;
        };
        if ctx.cm.is_some() {
            self.close_channel(i);
        }
        let Some(mut dev) = ctx.device.and_then(|d| device_at(&self.devices, d)) else {
            tracing::debug!(pid = ctx.pid, "context closed");
            return;
        };
        if let Some(port) = dev.ports.remove(&i) {
            tracing::debug!(
                pid = ctx.pid,
                objects = ?port.counts(),
                undecodable_slots = port.rings.garbage,
                "context closed, its objects freed"
            );
            port.release(&mut dev.engine);
            xrc::forget(&mut dev, port.owned.xrcds.keys().copied());
        }
        dev.engine.memory_mut().detach(ctx.space);
        dev.info.contexts = dev.info.contexts.saturating_sub(1);
        dev.sync_multicast();
    }

    /// Writes what each context's socket takes of its pending output; whether any is left.
    fn flush_outbufs(&mut self) -> bool {
        let mut left = false;
        for ctx in self.contexts.iter_mut().flatten() {
            if !ctx.outbuf.is_empty() {
                let _ = ctx.flush();
                left |= !ctx.outbuf.is_empty();
            }
        }
        left
    }

    /// Hands captured frames to the captures that want them. A capture that reads too slowly
    /// loses frames (counted, and told with the next frame) rather than stalling the NIC.
    fn deliver_taps(&mut self) {
        const BACKLOG: usize = 16 << 20;
        let taps = std::mem::take(&mut *self.shared.taps.lock().unwrap_or_else(|e| e.into_inner()));
        if taps.is_empty() {
            return;
        }
        let mut names = BTreeMap::new();
        for tap in taps {
            let d = tap.device;
            // A capture of a device takes the frames of all its shards.
            let named = names.entry(d).or_insert_with(|| {
                device_at(&self.devices, d).map(|x| (x.info.name.clone(), x.shard.head))
            });
            let Some((name, d)) = named.clone() else {
                continue;
            };
            for ctx in self.contexts.iter_mut().flatten() {
                let Some(filter) = ctx.capture else { continue };
                if filter.is_some_and(|f| f != d) {
                    continue;
                }
                if ctx.outbuf.len() > BACKLOG {
                    ctx.dropped += 1;
                    continue;
                }
                let frame = proto::Reply::Frame {
                    device: name.clone(),
                    outbound: tap.outbound,
                    unix_nanos: tap.unix_nanos,
                    dropped: std::mem::take(&mut ctx.dropped),
                    data: tap.data.clone(),
                };
                ctx.queue(&frame);
                let _ = ctx.flush();
            }
        }
    }

    /// Whether a device stands on `lo` already (only one may have the loopback addresses).
    fn has_lo(&self) -> bool {
        (0..self.devices.len()).any(|d| {
            device_at(&self.devices, d).is_some_and(|dev| dev.info.netdev.as_deref() == Some("lo"))
        })
    }

    /// The index of device `name` (of its first shard).
    fn device_index(&self, name: &str) -> Option<usize> {
        (0..self.devices.len()).find(|&d| {
            device_at(&self.devices, d)
                .is_some_and(|dev| dev.info.name == name && dev.shard.is_head())
        })
    }

    /// The index of every device (of its first shard: where its name, CM and counters are).
    fn heads(&self) -> Vec<usize> {
        (0..self.devices.len())
            .filter(|&d| device_at(&self.devices, d).is_some_and(|dev| dev.shard.is_head()))
            .collect()
    }

    /// The indexes of the shards of the device at `d`.
    fn shards(&self, d: usize) -> std::ops::Range<usize> {
        device_at(&self.devices, d).map_or(d..d, |dev| dev.shard.all())
    }

    /// Adds a device (`softrnic up`), its engines seeded with `seeds` (their first PSNs and
    /// QPNs, and the secret their keys derive from). Its name is the first `srnicN` free.
    fn up(&mut self, req: &UpRequest, seeds: [u64; 2]) -> io::Result<String> {
        let number = (0..)
            .find(|m| self.device_index(&format!("srnic{m}")).is_none())
            .expect("a free name");
        let name = format!("srnic{number}");
        // A local device stands on `lo` with its addresses, as rxe attached to it, unless
        // another does already.
        let lo = req.netdev.is_none() && !self.has_lo();
        let (wires, backend, reason, mac, mtu, gids) = match &req.netdev {
            None => {
                if req.backend.is_some_and(|b| b != BackendKind::Local) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "a wire backend needs --netdev",
                    ));
                }
                let mac = local_mac(number);
                let why = match lo {
                    true => format!("{LOCAL}; on lo with its addresses, as rxe attached to lo"),
                    false => LOCAL.to_owned(),
                };
                let gids = local_gids(number, lo);
                let wires = (0..self.shards).map(|_| (Wire::Local, None)).collect();
                (wires, BackendKind::Local, why, mac, 9000, gids)
            }
            Some(ifname) => self.open_wire(number, ifname, req)?,
        };
        // A wire is sharded as far as its receive queues go (see `device::Shard`).
        let shards = wires.len();
        let n = (0..=self.devices.len())
            .find(|&n| (n..n + shards).all(|d| self.devices.get(d).is_none_or(Option::is_none)))
            .expect("room past the end");
        if self.devices.len() < n + shards {
            self.devices.resize(n + shards, None);
        }
        let netdev = match lo {
            true => Some("lo".to_owned()),
            false => req.netdev.clone(),
        };
        let info = DeviceInfo {
            name: name.clone(),
            netdev,
            netns: req.netns.clone(),
            backend,
            backend_reason: reason,
            mac,
            gids: gids.clone(),
            objects: [0; 4],
            contexts: 0,
        };
        tracing::info!(
            device = %name,
            netdev = ?req.netdev,
            backend = ?backend,
            reason = %info.backend_reason,
            shards,
            "device up"
        );
        self.shared.switch.set(n, shards, &info);
        let filter = Arc::new(device::Filter::default());
        for (k, (wire, watch)) in wires.into_iter().enumerate() {
            let lane = Lane::new(k as u32, shards as u32).expect("k < shards");
            let config = Config {
                // Each shard its own PSNs and CM ids; one key secret.
                seed: seeds[0].wrapping_add(k as u64),
                key_secret: seeds[1],
                mac: EthernetAddress(mac),
                gids: gids.clone(),
                eth_mtu: mtu,
                device: DeviceAttr::default(),
                lane,
            };
            let dev = Device {
                info: info.clone(),
                shard: Shard { head: n, lane },
                engine: Engine::new(config, ProcessMemory::default()),
                wire,
                watch,
                neighbours: HashMap::new(),
                multicast: BTreeSet::new(),
                filter: Arc::clone(&filter),
                ports: BTreeMap::new(),
                xrcd_files: BTreeMap::new(),
                moved: false,
                posted: Vec::new(),
                unfilled: Vec::new(),
                spare_sgls: Vec::new(),
            };
            let dev = Arc::new(Locked::new(dev));
            self.devices[n + k] = Some(Arc::clone(&dev));
            self.shared.set_device(n + k, Some(dev));
        }
        self.listen_on_new_device(n);
        Ok(name)
    }

    /// Opens the backend on `ifname` for device `n`: the one asked for, or the best that
    /// works, saying why. AF_XDP's queues are dealt out to as many wires as the device has
    /// shards (fewer if the interface has fewer queues), each with its own address watch;
    /// AF_PACKET is one wire.
    fn open_wire(&self, n: usize, ifname: &str, req: &UpRequest) -> io::Result<Opened> {
        let order: &[BackendKind] = match req.backend {
            Some(b) => &[b][..],
            None => &[
                BackendKind::XdpDrv,
                BackendKind::XdpSkb,
                BackendKind::Packet,
            ],
        };
        let name = ifname.to_owned();
        in_netns(req.netns.as_deref(), move || sys::if_index(&name))
            .map_err(|e| io::Error::new(e.kind(), format!("no interface {ifname}: {e}")))?;
        let shards = self.shards;
        let mut failures = Vec::new();
        for &kind in order {
            let name = ifname.to_owned();
            let opened = in_netns(req.netns.as_deref(), move || {
                let xdp = |mode| -> io::Result<Vec<Wire>> {
                    let parts = AfXdp::open_split(&name, mode, shards)?;
                    Ok(parts.into_iter().map(|p| Wire::Link(Box::new(p))).collect())
                };
                let wires = match kind {
                    BackendKind::XdpDrv => xdp(XdpMode::Drv)?,
                    BackendKind::XdpSkb => xdp(XdpMode::Skb)?,
                    BackendKind::Packet => vec![Wire::Link(Box::new(AfPacket::open(&name)?))],
                    BackendKind::Local => (0..shards).map(|_| Wire::Local).collect(),
                };
                let wires = (wires.into_iter())
                    .map(|w| Ok((w, Some(gid::Watch::open(&name)?))))
                    .collect::<io::Result<Vec<_>>>()?;
                let gids = gid::table(&name)?;
                Ok((wires, gids))
            });
            match opened {
                Ok((wires, gids)) => {
                    let (mac, mtu) = match &wires[0].0 {
                        Wire::Link(l) => (l.mac(), l.mtu()),
                        Wire::Local => (local_mac(n), 9000),
                    };
                    let mut reason = match req.backend {
                        Some(_) => format!("{kind:?} as asked"),
                        None if failures.is_empty() => {
                            format!("{kind:?}, the best of {order:?}")
                        }
                        None => format!("{kind:?}, after {}", failures.join("; ")),
                    };
                    let queues: usize = (wires.iter())
                        .map(|(w, _)| match w {
                            Wire::Link(l) => l.queues(),
                            Wire::Local => 0,
                        })
                        .sum();
                    if queues > 1 {
                        reason += &format!(", on {queues} receive queues");
                    }
                    if wires.len() > 1 {
                        reason += &format!(" in {} shards", wires.len());
                    }
                    if gids.is_empty() {
                        tracing::warn!(%ifname, "no IP address yet, so no GID until one is added");
                    }
                    return Ok((wires, kind, reason, mac, mtu, gids));
                }
                Err(e) => failures.push(format!("{kind:?} failed: {e}")),
            }
        }
        Err(io::Error::other(failures.join("; ")))
    }
}

/// What `open_wire` opened: each shard's wire and address watch, the backend, why it is the
/// one, and the interface's MAC, MTU and GIDs.
type Opened = (
    Vec<(Wire, Option<gid::Watch>)>,
    BackendKind,
    String,
    [u8; 6],
    u32,
    Vec<Gid>,
);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Starts a daemon on its own thread (for tests and `softrnic exec`); it stops when the handle
/// is dropped.
pub struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<io::Result<()>>>,
    path: PathBuf,
}

impl Running {
    /// Binds `path` and serves it on a new thread.
    pub fn start(path: &Path) -> io::Result<Running> {
        let mut daemon = Daemon::bind(path, default_workers())?;
        daemon.set_shards(default_shards());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || daemon.run(&flag));
        Ok(Running {
            stop,
            thread: Some(thread),
            path: path.to_owned(),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Why a device without an interface is local.
const LOCAL: &str = "no interface: only devices of this daemon are reachable";

/// The GID table of local device `n`, in rxe's order so that scripts naming GID indexes work
/// unchanged: the IPv6 link-local address first, then IPv4, then other IPv6. With `lo`, it has
/// the loopback addresses as rxe attached to `lo` has them (programs that reach their peer at
/// 127.0.0.1 or ::1 find it there), before its own address in 198.19.255.0/24 (the
/// benchmarking range), which each local device has.
fn local_gids(n: usize, lo: bool) -> Vec<Gid> {
    let own = Gid::from(Ipv4Addr::new(198, 19, 255, n as u8 + 1));
    let mut gids = vec![Gid::link_local(local_mac(n))];
    if lo {
        gids.extend([
            Gid::from(Ipv4Addr::LOCALHOST),
            own,
            Gid::from(Ipv6Addr::LOCALHOST),
        ]);
    } else {
        gids.push(own);
    }
    gids
}

/// The MAC of device `n` when it has no wire of its own: locally administered, and unique
/// in this daemon, which delivers same-host frames by MAC.
fn local_mac(n: usize) -> [u8; 6] {
    [0x02, 0x53, 0x52, 0x4e, 0x00, n as u8]
}
