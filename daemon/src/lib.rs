//! The softrnic daemon: it is the NIC. It owns the backends, one engine per device (so the QPN
//! space, GID table and timers), and serves programs over a Unix socket: each connection is a
//! device context whose objects belong to it and are freed when it closes, however the program
//! ends.
//!
//! One thread runs everything: client requests, frames in and out, timers. It polls while
//! there is work, spins briefly after it, then sleeps in poll(2) until a socket is readable or
//! the next engine timer is due, so it does not starve the programs it serves on a small
//! machine.
//!
//! Its frames move over [`softrnic_link`]'s links; programs reach it through
//! [`softrnic_client`]'s protocol and rings.

mod context;
mod memory;
mod rdma_cm;
mod requests;
mod rings;

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as StdInstant};

use softrnic_emu_core::{Config, DeviceAttr, Engine, Gid, Instant, MAX_FRAME};
use softrnic_link::Link;
use softrnic_wire::{EthernetAddress, Icrc};

pub use memory::ProcessMemory;
use softrnic_client::proto::{self, BackendKind, DeviceInfo, UpRequest};
use softrnic_link::{AfPacket, AfXdp, Backend, XdpMode, gid, neigh};
use softrnic_sys as sys;

use context::Context;

/// How long the loop keeps polling after the last work before it sleeps.
const SPIN: Duration = Duration::from_micros(200);
/// How often a busy loop looks at the control sockets (new programs, verbs calls).
const CONTROL_EVERY: Duration = Duration::from_micros(50);
/// The longest sleep, so a stop request is seen.
const MAX_SLEEP_MS: i32 = 50;

/// How a device reaches the wire.
enum Wire {
    /// A frame backend on an interface (AF_XDP or AF_PACKET).
    Link(Box<dyn Backend + Send>),
    /// No wire: only other devices of this daemon.
    Local,
}

impl Wire {
    fn link(&mut self) -> Option<&mut dyn Link> {
        match self {
            Wire::Link(l) => Some(l.as_mut() as &mut dyn Link),
            Wire::Local => None,
        }
    }

    fn fd(&self) -> Option<i32> {
        match self {
            Wire::Link(l) => Some(l.fd().as_raw_fd()),
            Wire::Local => None,
        }
    }
}

/// A device: an engine on a wire.
struct Device {
    info: DeviceInfo,
    engine: Engine<ProcessMemory>,
    wire: Wire,
    /// Keeps the GID table in sync with the interface's addresses.
    watch: Option<gid::Watch>,
    /// Next hops already resolved, by destination GID.
    neighbours: HashMap<Gid, [u8; 6]>,
    /// The multicast MACs added to the interface's receive filter for the engine's groups.
    multicast: BTreeSet<[u8; 6]>,
}

/// The daemon's state.
pub struct Daemon {
    listener: UnixListener,
    path: PathBuf,
    devices: Vec<Option<Device>>,
    contexts: Vec<Option<Context>>,
    next_space: u32,
    uid: u32,
    epoch: StdInstant,
    frame: Vec<u8>,
    /// Same-host frames of a pass, and each device's MAC (kept to reuse their allocations).
    local: Local,
    macs: Vec<Option<[u8; 6]>>,
    /// Frames seen while a capture runs: (device, outbound, bytes).
    taps: Vec<(usize, bool, Vec<u8>)>,
    /// The rdma_cm ids of every event channel.
    cm: rdma_cm::RdmaCm,
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
    /// Listens at `path` (replacing a stale socket, refusing a live one).
    pub fn bind(path: &Path) -> io::Result<Daemon> {
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("a daemon already serves {}", path.display()),
            ));
        }
        let _ = std::fs::remove_file(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let listener = UnixListener::bind(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        listener.set_nonblocking(true)?;
        Ok(Daemon {
            listener,
            path: path.to_owned(),
            devices: Vec::new(),
            contexts: Vec::new(),
            next_space: 1,
            uid: sys::uid(),
            epoch: StdInstant::now(),
            frame: vec![0; MAX_FRAME],
            local: Local::default(),
            macs: Vec::new(),
            taps: Vec::new(),
            cm: rdma_cm::RdmaCm::seeded(u64::from(std::process::id())),
        })
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Serves until `stop` is set.
    pub fn run(&mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut last_work = StdInstant::now();
        // The control sockets cost a syscall each to look at: while the data path keeps the
        // loop busy they are looked at every CONTROL_EVERY, and at once after a sleep.
        let mut last_control: Option<StdInstant> = None;
        while !stop.load(Ordering::Relaxed) {
            let mut busy = false;
            if last_control.is_none_or(|t| t.elapsed() >= CONTROL_EVERY) {
                last_control = Some(StdInstant::now());
                busy |= self.accept();
                busy |= self.serve();
            }
            busy |= self.take_posted();
            busy |= self.pump();
            self.route_events();
            busy |= self.fill_cqs();
            self.deliver_taps();
            // Replies and captured frames the socket did not take at once.
            let unsent = self.flush_outbufs();
            if busy {
                last_work = StdInstant::now();
                continue;
            }
            if last_work.elapsed() < SPIN {
                std::thread::yield_now();
                continue;
            }
            // Going to sleep: say so in every region, then look once more, so work posted in
            // between is not left waiting (its program saw the flag and wrote the wake-up
            // socket, or we see its doorbell now).
            let contexts = self.contexts.iter().flatten();
            contexts.clone().for_each(|c| c.rings.set_sleeping(true));
            if contexts.clone().any(|c| c.rings.rung()) {
                contexts.for_each(|c| c.rings.set_sleeping(false));
                continue;
            }
            let mut fds = vec![self.listener.as_raw_fd()];
            for c in self.contexts.iter().flatten() {
                fds.push(c.stream.as_raw_fd());
                fds.extend(c.rings.wake_fd());
            }
            for d in self.devices.iter().flatten() {
                fds.extend(d.wire.fd());
                fds.extend(d.watch.as_ref().map(gid::Watch::fd));
            }
            let now = self.now();
            let next = self
                .devices
                .iter()
                .flatten()
                .filter_map(|d| d.engine.poll_timeout())
                .min();
            // poll(2) here waits only for input: with output still to write, look again soon.
            let longest = if unsent { 1 } else { MAX_SLEEP_MS };
            let wait = next.map_or(longest, |t| {
                let ms = t.saturating_since(now).as_micros().div_ceil(1000);
                (ms as i32).min(longest)
            });
            sys::poll_readable(&fds, wait)?;
            last_control = None;
            self.contexts
                .iter()
                .flatten()
                .for_each(|c| c.rings.set_sleeping(false));
        }
        Ok(())
    }

    /// Takes the work requests programs posted into their rings and gives them to the engine.
    /// An address handle's MAC is resolved first, as for a modify_qp.
    fn take_posted(&mut self) -> bool {
        let mut any = false;
        for i in 0..self.contexts.len() {
            let Some(ctx) = self.contexts[i].as_mut() else {
                continue;
            };
            let Some(d) = ctx.device else { continue };
            let engine = &self.devices[d].as_ref().expect("open").engine;
            let posted = ctx.rings.take_posted(|q| engine.room(q));
            any |= !posted.is_empty();
            for p in posted {
                let result = match p {
                    rings::Posted::Send(qpn, mut wr, inline) => {
                        if let Some(ud) = wr.ud.as_mut() {
                            match self.resolve(d, ud.ah.dgid) {
                                Ok(mac) => ud.ah.dmac = EthernetAddress(mac),
                                Err(err) => {
                                    tracing::warn!(%err, "a UD work request to an unreachable GID");
                                }
                            }
                        }
                        // A context has rings only for its own QPs and SRQs.
                        let engine = &mut self.devices[d].as_mut().expect("open").engine;
                        engine.post_send_with(qpn, wr, inline)
                    }
                    rings::Posted::Recv(qpn, wr) => self.devices[d]
                        .as_mut()
                        .expect("open")
                        .engine
                        .post_recv(qpn, wr),
                    rings::Posted::SrqRecv(srq, wr) => self.devices[d]
                        .as_mut()
                        .expect("open")
                        .engine
                        .post_srq_recv(srq, wr),
                };
                if let Err(e) = result {
                    // The program checked the WR against the QP when it posted, and only what
                    // the queue has room for is taken: this is a program that skipped those
                    // checks (not libibverbs through our provider).
                    tracing::warn!(error = %e, "a posted work request was refused");
                }
            }
        }
        any
    }

    /// Moves new completions into the programs' CQ rings.
    fn fill_cqs(&mut self) -> bool {
        let mut any = false;
        for ctx in self.contexts.iter_mut().flatten() {
            if let Some(dev) = ctx.device.and_then(|d| self.devices[d].as_mut()) {
                any |= ctx.rings.fill_cqs(&mut dev.engine);
            }
        }
        any
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
        any
    }

    /// Frees everything a context owns: its program exited, crashed or closed the device.
    fn close(&mut self, i: usize) {
        let Some(ctx) = self.contexts[i].take() else {
            return;
        };
        tracing::debug!(
            pid = ctx.pid,
            objects = ?ctx.counts(),
            undecodable_slots = ctx.rings.garbage,
            "context closed, its objects freed"
        );
        if ctx.cm.is_some() {
            self.close_channel(i);
        }
        if let Some(dev) = ctx.device.and_then(|d| self.devices[d].as_mut()) {
            ctx.release(&mut dev.engine);
            dev.engine.memory_mut().detach(ctx.space);
            dev.info.contexts = dev.info.contexts.saturating_sub(1);
        }
        if let Some(d) = ctx.device {
            self.sync_multicast(d);
        }
    }

    /// Keeps device `d`'s interface receiving its engine's multicast groups: their MACs are
    /// added to its filter, and removed once no QP is attached.
    fn sync_multicast(&mut self, d: usize) {
        let Some(dev) = self.devices[d].as_mut() else {
            return;
        };
        let wanted: BTreeSet<[u8; 6]> = dev
            .engine
            .multicast_groups()
            .filter_map(Gid::multicast_mac)
            .collect();
        if wanted == dev.multicast {
            return;
        }
        let changes: Vec<([u8; 6], bool)> = (wanted.difference(&dev.multicast).map(|m| (*m, true)))
            .chain(dev.multicast.difference(&wanted).map(|m| (*m, false)))
            .collect();
        dev.multicast = wanted;
        let (Some(name), false) = (dev.info.netdev.clone(), matches!(dev.wire, Wire::Local)) else {
            return;
        };
        let done = in_netns(dev.info.netns.as_deref(), move || {
            let fd = sys::packet_socket()?;
            for (mac, add) in changes {
                sys::if_multicast(&fd, &name, mac, add)?;
            }
            Ok(())
        });
        if let Err(err) = done {
            tracing::warn!(device = %dev.info.name, %err, "the interface's multicast filter");
        }
    }

    /// Moves frames: from each wire into its engine, through the timers, and from each engine
    /// to the wire or, for another device of this daemon, to its engine. Engines write program
    /// memory lazily ([`ProcessMemory`]): a device's collected writes are made before it sends
    /// anything (an ACK must not overtake the data it acknowledges), and every device's at the
    /// end, before completions reach the rings. Same-host frames are handed over after every
    /// device has sent, so their writes are collected too; then the responses to them go out
    /// in the same pass, so that, as on a hardware RNIC, an ACK leaves no later than the
    /// completion it acknowledges reaches the program (which may exit at once and take its QP
    /// with it).
    fn pump(&mut self) -> bool {
        let now = self.now();
        let mut any = false;
        let capturing = self.capturing();
        let mut local = std::mem::take(&mut self.local);
        let mut macs = std::mem::take(&mut self.macs);
        macs.clear();
        macs.extend(self.devices.iter().map(|o| o.as_ref().map(|o| o.info.mac)));
        let mut moved = Vec::new();
        for d in 0..self.devices.len() {
            let Some(dev) = self.devices[d].as_mut() else {
                continue;
            };
            if let Some(port) = dev.watch.as_ref().and_then(gid::Watch::changed) {
                if port.gids != dev.info.gids {
                    tracing::info!(device = %dev.info.name, gids = ?port.gids, "addresses changed: new GID table");
                    dev.engine.set_gids(port.gids.clone());
                    dev.info.gids = port.gids;
                    dev.neighbours.clear();
                }
                if port.mac != dev.info.mac {
                    tracing::info!(device = %dev.info.name, mac = ?port.mac, "the interface's MAC changed");
                    dev.engine.set_mac(EthernetAddress(port.mac));
                    dev.info.mac = port.mac;
                    macs[d] = Some(port.mac);
                    moved.push(d);
                }
                any = true;
            }
            // A frame of a device with no wire reaches only engines of this daemon (which take
            // it as trusted): its ICRC is computed only while a capture can show it.
            let local_only = matches!(dev.wire, Wire::Local) && !capturing;
            dev.engine.set_icrc(if local_only {
                Icrc::Skip
            } else {
                Icrc::Compute
            });
            let engine = &mut dev.engine;
            let taps = &mut self.taps;
            if let Some(link) = dev.wire.link() {
                while link.receive(&mut |f| {
                    if capturing {
                        taps.push((d, false, f.to_vec()));
                    }
                    // A device of this daemon sent it, and it was delivered on this host
                    // already.
                    if is_group(f) && macs.iter().flatten().any(|m| f.get(6..12) == Some(m)) {
                        return;
                    }
                    engine.handle_packet(now, f)
                }) {
                    any = true;
                }
            }
            if engine.poll_timeout().is_some_and(|t| t <= now) {
                engine.handle_timeout(now);
                any = true;
            }
        }
        let out = Out {
            now,
            capturing,
            macs: &macs,
        };
        for d in 0..self.devices.len() {
            any |= self.transmit(d, Outgoing::All, &out, &mut local);
        }
        // Responses do not call for responses: the second round of deliveries is the last.
        while self.deliver_local(&out, &mut local) {
            any = true;
            for d in 0..self.devices.len() {
                self.transmit(d, Outgoing::Responses, &out, &mut local);
            }
        }
        self.local = local;
        self.macs = macs;
        for d in moved {
            self.cm_addr_changed(d);
        }
        for dev in self.devices.iter_mut().flatten() {
            if let Some(link) = dev.wire.link() {
                link.flush();
            }
            dev.engine.memory_mut().end_pass();
        }
        any
    }

    /// Sends what device `d`'s engine has (everything, or only its responses): onto its wire,
    /// or for another device of this daemon (found by MAC) into `local`. Whether it sent any.
    fn transmit(&mut self, d: usize, which: Outgoing, out: &Out, local: &mut Local) -> bool {
        let Some(dev) = self.devices[d].as_mut() else {
            return false;
        };
        dev.engine.memory_mut().flush();
        let mut any = false;
        loop {
            let n = match which {
                Outgoing::All => dev.engine.poll_transmit(out.now, &mut self.frame),
                Outgoing::Responses => dev.engine.poll_response(&mut self.frame),
            };
            let Some(n) = n else { break };
            any = true;
            let frame = &self.frame[..n];
            if out.capturing {
                self.taps.push((d, true, frame.to_vec()));
            }
            let dst = &frame[..6];
            if is_group(frame) {
                // Multicast goes to the wire and, as the kernel loops it back to local
                // members, to every device of this daemon, this one included.
                for to in (0..out.macs.len()).filter(|&to| out.macs[to].is_some()) {
                    local.push(to, frame);
                }
                if let Some(link) = dev.wire.link() {
                    send_on(link, frame);
                }
                continue;
            }
            match out.macs.iter().position(|m| m.is_some_and(|m| m == dst)) {
                // Same-host traffic never touches the wire.
                Some(to) => local.push(to, frame),
                None => {
                    if let Some(link) = dev.wire.link() {
                        send_on(link, frame);
                    }
                }
            }
        }
        any
    }

    /// Hands the same-host frames in `local` to their devices' engines. Whether there were any.
    fn deliver_local(&mut self, out: &Out, local: &mut Local) -> bool {
        if local.frames.is_empty() {
            return false;
        }
        for &(to, start, len) in &local.frames {
            let frame = &local.bytes[start..start + len];
            if out.capturing {
                self.taps.push((to, false, frame.to_vec()));
            }
            if let Some(target) = self.devices[to].as_mut() {
                target.engine.handle_trusted_packet(out.now, frame);
            }
        }
        local.bytes.clear();
        local.frames.clear();
        true
    }

    /// Hands each engine's async events to the context that owns their object. This runs
    /// after every engine has taken its frames (same-host delivery included) and before
    /// completions reach the rings, so a program that sees a completion finds the events that
    /// came with it.
    fn route_events(&mut self) {
        for d in 0..self.devices.len() {
            self.cm_events(d);
        }
        for (d, dev) in self.devices.iter_mut().enumerate() {
            let Some(dev) = dev.as_mut() else { continue };
            while let Some(event) = dev.engine.poll_event() {
                let owner = self
                    .contexts
                    .iter_mut()
                    .flatten()
                    .find(|c| c.device == Some(d) && c.owns(&event));
                if let Some(ctx) = owner {
                    ctx.notify(event);
                }
            }
        }
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

    fn capturing(&self) -> bool {
        self.contexts.iter().flatten().any(|c| c.capture.is_some())
    }

    /// Hands captured frames to the captures that want them. A capture that reads too slowly
    /// loses frames (counted, and told with the next frame) rather than stalling the NIC.
    fn deliver_taps(&mut self) {
        const BACKLOG: usize = 16 << 20;
        if self.taps.is_empty() {
            return;
        }
        let unix_nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        for (d, outbound, data) in std::mem::take(&mut self.taps) {
            let Some(name) = self.devices[d].as_ref().map(|x| x.info.name.clone()) else {
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
                    outbound,
                    unix_nanos,
                    dropped: std::mem::take(&mut ctx.dropped),
                    data: data.clone(),
                };
                ctx.queue(&frame);
                let _ = ctx.flush();
            }
        }
    }

    fn device_index(&self, name: &str) -> Option<usize> {
        self.devices
            .iter()
            .position(|d| d.as_ref().is_some_and(|d| d.info.name == name))
    }

    /// Adds a device (`softrnic up`).
    fn up(&mut self, req: &UpRequest) -> io::Result<String> {
        let n = self
            .devices
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.devices.len());
        let name = format!("srnic{n}");
        let (wire, watch, backend, reason, mac, mtu, gids) = match &req.netdev {
            None => {
                if req.backend.is_some_and(|b| b != BackendKind::Local) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "a wire backend needs --netdev",
                    ));
                }
                let mac = local_mac(n);
                // rxe's order, so scripts naming GID indexes work unchanged: the IPv6
                // link-local address first, then the IPv4 one (198.19.255.0/24, in the
                // benchmarking range).
                let gids = vec![
                    Gid::link_local(mac),
                    Gid::from(std::net::Ipv4Addr::new(198, 19, 255, n as u8 + 1)),
                ];
                let why = "no interface: only devices of this daemon are reachable".to_owned();
                (Wire::Local, None, BackendKind::Local, why, mac, 9000, gids)
            }
            Some(ifname) => self.open_wire(n, ifname, req)?,
        };
        let config = Config {
            seed: u64::from(std::process::id()) << 16 | n as u64,
            mac: EthernetAddress(mac),
            gids: gids.clone(),
            eth_mtu: mtu,
            device: DeviceAttr::default(),
        };
        let dev = Device {
            info: DeviceInfo {
                name: name.clone(),
                netdev: req.netdev.clone(),
                netns: req.netns.clone(),
                backend,
                backend_reason: reason,
                mac,
                gids,
                objects: [0; 4],
                contexts: 0,
            },
            engine: Engine::new(config, ProcessMemory::default()),
            wire,
            watch,
            neighbours: HashMap::new(),
            multicast: BTreeSet::new(),
        };
        tracing::info!(
            device = %name,
            netdev = ?req.netdev,
            backend = ?backend,
            reason = %dev.info.backend_reason,
            "device up"
        );
        if n == self.devices.len() {
            self.devices.push(Some(dev));
        } else {
            self.devices[n] = Some(dev);
        }
        self.listen_on_new_device(n);
        Ok(name)
    }

    /// Opens the backend on `ifname` for device `n`: the one asked for, or the best that
    /// works, saying why.
    #[allow(clippy::type_complexity)]
    fn open_wire(
        &self,
        n: usize,
        ifname: &str,
        req: &UpRequest,
    ) -> io::Result<(
        Wire,
        Option<gid::Watch>,
        BackendKind,
        String,
        [u8; 6],
        u32,
        Vec<Gid>,
    )> {
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
        let mut failures = Vec::new();
        for &kind in order {
            let name = ifname.to_owned();
            let opened = in_netns(req.netns.as_deref(), move || {
                let watch = gid::Watch::open(&name)?;
                let gids = watch.table()?;
                let wire = match kind {
                    BackendKind::XdpDrv => Wire::Link(Box::new(AfXdp::open(&name, XdpMode::Drv)?)),
                    BackendKind::XdpSkb => Wire::Link(Box::new(AfXdp::open(&name, XdpMode::Skb)?)),
                    BackendKind::Packet => Wire::Link(Box::new(AfPacket::open(&name)?)),
                    BackendKind::Local => Wire::Local,
                };
                Ok((wire, watch, gids))
            });
            match opened {
                Ok((wire, watch, gids)) => {
                    let (mac, mtu) = match &wire {
                        Wire::Link(l) => (l.mac(), l.mtu()),
                        Wire::Local => (local_mac(n), 9000),
                    };
                    let reason = match req.backend {
                        Some(_) => format!("{kind:?} as asked"),
                        None if failures.is_empty() => {
                            format!("{kind:?}, the best of {order:?}")
                        }
                        None => format!("{kind:?}, after {}", failures.join("; ")),
                    };
                    if gids.is_empty() {
                        tracing::warn!(%ifname, "no IP address yet, so no GID until one is added");
                    }
                    return Ok((wire, Some(watch), kind, reason, mac, mtu, gids));
                }
                Err(e) => failures.push(format!("{kind:?} failed: {e}")),
            }
        }
        Err(io::Error::other(failures.join("; ")))
    }

    /// The MAC to reach `gid` from device `d`: a multicast group's, another device of this
    /// daemon, a cached neighbour, or the kernel's answer (in the device's namespace).
    fn resolve(&mut self, d: usize, gid: Gid) -> io::Result<[u8; 6]> {
        if let Some(mac) = gid.multicast_mac() {
            return Ok(mac);
        }
        if let Some(dev) = self
            .devices
            .iter()
            .flatten()
            .find(|o| o.info.gids.contains(&gid))
        {
            return Ok(dev.info.mac);
        }
        let dev = self.devices[d].as_mut().ok_or(io::ErrorKind::NotFound)?;
        if let Some(mac) = dev.neighbours.get(&gid) {
            return Ok(*mac);
        }
        if matches!(dev.wire, Wire::Local) {
            return Err(io::Error::new(
                io::ErrorKind::HostUnreachable,
                format!(
                    "{gid} is not a device of this daemon, and {} has no wire",
                    dev.info.name
                ),
            ));
        }
        let ip = gid.to_ip();
        let mac = in_netns(dev.info.netns.as_deref(), move || {
            neigh::resolve(ip, Duration::from_secs(1))
        })?;
        dev.neighbours.insert(gid, mac);
        Ok(mac)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What a pass's sending needs to know, worked out once per pass: the time, whether a capture
/// runs, and each device's MAC (same-host delivery is by MAC).
struct Out<'a> {
    now: Instant,
    capturing: bool,
    macs: &'a [Option<[u8; 6]>],
}

/// What [`Daemon::transmit`] takes from an engine.
#[derive(Clone, Copy)]
enum Outgoing {
    All,
    Responses,
}

/// Same-host frames of a pass: their bytes back to back, and (device, start, length) of each.
/// Kept between passes to reuse the allocations.
#[derive(Default)]
struct Local {
    bytes: Vec<u8>,
    frames: Vec<(usize, usize, usize)>,
}

impl Local {
    fn push(&mut self, to: usize, frame: &[u8]) {
        self.frames.push((to, self.bytes.len(), frame.len()));
        self.bytes.extend_from_slice(frame);
    }
}

/// Whether a frame goes to an Ethernet group (multicast) address: the I/G bit of its
/// destination.
fn is_group(frame: &[u8]) -> bool {
    frame.first().is_some_and(|b| b & 1 != 0)
}

/// How many times a frame is offered to a link whose transmit ring is full (each try lets the
/// kernel drain it) before it is dropped, as a congested wire would.
const TX_TRIES: usize = 64;

/// Puts `frame` on `link`, waiting briefly while its ring is full.
fn send_on(link: &mut dyn Link, frame: &[u8]) {
    for _ in 0..TX_TRIES {
        let sent = link.transmit(&mut |buf: &mut [u8]| {
            buf[..frame.len()].copy_from_slice(frame);
            Some(frame.len())
        });
        if sent {
            return;
        }
        std::thread::yield_now();
    }
    tracing::debug!(len = frame.len(), "transmit ring full: a frame dropped");
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
        let mut daemon = Daemon::bind(path)?;
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

/// The MAC of device `n` when it has no wire of its own: locally administered, and unique
/// in this daemon, which delivers same-host frames by MAC.
fn local_mac(n: usize) -> [u8; 6] {
    [0x02, 0x53, 0x52, 0x4e, 0x00, n as u8]
}
