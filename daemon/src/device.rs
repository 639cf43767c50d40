//! A device: an engine on a wire, and the ports of the contexts that opened it. Its data path
//! (work the programs posted, frames in and out, timers, events, completions) is a set of
//! steps its worker runs in every pass; the control thread runs the verbs on it. Both hold its
//! lock while they do.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use softrnic_client::proto::DeviceInfo;
use softrnic_emu_core::{Engine, Gid, Instant, Lane, Lanes, Sge};
use softrnic_link::{Backend, Link, gid, neigh};
use softrnic_sys as sys;
use softrnic_wire::{EthernetAddress, Icrc};

use crate::context::Port;
use crate::rings::Posted;
use crate::switch::{Frames, Origin, Station, Switch, Tap};
use crate::{ProcessMemory, in_netns};

/// How a device reaches the wire.
pub(crate) enum Wire {
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

    fn poll_fds(&self, fds: &mut Vec<i32>) {
        if let Wire::Link(l) = self {
            l.poll_fds(fds);
        }
    }
}

/// Which of its device's engines a [`Device`] is. A device may run several, its shards
/// (`softrnic daemon --shards N`), at consecutive device indexes from the first's (`head`),
/// so that they run on as many workers: each numbers its QPs in its own lane, so a frame
/// finds its shard by destination QPN, and serves the contexts given to it. The first also
/// has the device's CM (QP1), and is where the device's name is found. On AF_XDP each shard
/// has its share of the interface's queues: it sends on them, and hands a frame one of them
/// received for another shard's QP to that shard.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shard {
    pub head: usize,
    pub lane: Lane,
}

impl Shard {
    pub fn is_head(self) -> bool {
        self.lane.index() == 0
    }

    /// The device indexes of all the shards of its device.
    pub fn all(self) -> Range<usize> {
        self.head..self.head + self.lane.count() as usize
    }

    /// Which shards of its device take a frame from the wire: by destination QPN, or this
    /// one if it has none (its engine counts it as malformed).
    fn lanes_of(self, frame: &[u8]) -> Lanes {
        if self.lane.count() == 1 {
            return Lanes::One(0);
        }
        match softrnic_wire::frame::dest_qp(frame) {
            Ok(qpn) => Lane::of(qpn, self.lane.count()),
            Err(_) => Lanes::One(self.lane.index()),
        }
    }
}

/// A device, or one of its shards: an engine on a wire.
pub(crate) struct Device {
    pub info: DeviceInfo,
    pub shard: Shard,
    pub engine: Engine<ProcessMemory>,
    pub wire: Wire,
    /// Keeps the GID table in sync with the interface's addresses.
    pub watch: Option<gid::Watch>,
    /// Next hops already resolved, by destination GID.
    pub neighbours: HashMap<Gid, [u8; 6]>,
    /// The multicast MACs of the engine's groups, which it wants in the interface's receive
    /// filter.
    pub multicast: BTreeSet<[u8; 6]>,
    /// The filter, shared by the device's shards.
    pub filter: Arc<Filter>,
    /// The contexts that opened it, by context index.
    pub ports: BTreeMap<usize, Port>,
    /// The XRC domains opened with a file, by its device and inode: every program that names
    /// the file shares its domain.
    pub xrcd_files: BTreeMap<(u64, u64), u32>,
    /// The interface's MAC changed since the control thread last looked (rdma_cm tells the
    /// ids bound to it).
    pub moved: bool,
    /// The work `take_posted` moves from the rings to the engine (kept for its allocation).
    pub posted: Vec<Posted>,
    /// The CQs whose completions `fill_cqs` has yet to move: those the engine listed since,
    /// and those whose ring was full.
    pub unfilled: Vec<u32>,
    /// SGE lists of WRs the engine is done with, to decode posted WRs into.
    pub spare_sgls: Vec<Vec<Sge>>,
}

/// What [`Device::transmit`] takes from an engine.
#[derive(Clone, Copy)]
pub(crate) enum Outgoing {
    All,
    Responses,
}

/// What a pass's sending needs to know, worked out once per pass: the time, whether a capture
/// runs, and each device's station (same-host delivery is by MAC, then by QPN to a shard).
pub(crate) struct Out<'a> {
    pub now: Instant,
    pub capturing: bool,
    pub stations: &'a [Option<Station>],
}

impl Device {
    /// Takes the work requests its programs posted into their rings and gives them to the
    /// engine. An address handle's MAC is resolved first, as for a modify_qp.
    pub fn take_posted(&mut self, switch: &Switch) -> bool {
        let mut any = false;
        if self.spare_sgls.len() < SPARE_SGLS {
            self.engine.take_spare_sgls(&mut self.spare_sgls);
        }
        // By index, not by iterator: resolving a MAC needs the whole device.
        let mut next = self.ports.keys().next().copied();
        while let Some(i) = next {
            next = self.ports.range(i + 1..).next().map(|(&k, _)| k);
            let engine = &self.engine;
            let port = self.ports.get_mut(&i).expect("listed");
            let mut posted = std::mem::take(&mut self.posted);
            let spare = &mut self.spare_sgls;
            port.rings
                .take_posted(|q| engine.room(q), spare, &mut posted);
            any |= !posted.is_empty();
            for p in posted.drain(..) {
                let result = match p {
                    Posted::Send(qpn, mut wr, inline) => {
                        if let Some(ud) = wr.ud.as_mut() {
                            match self.resolve(switch, ud.ah.dgid) {
                                Ok(mac) => ud.ah.dmac = EthernetAddress(mac),
                                Err(err) => {
                                    tracing::warn!(%err, "a UD work request to an unreachable GID");
                                }
                            }
                        }
                        // A context has rings only for its own QPs and SRQs.
                        self.engine.post_send_with(qpn, wr, inline)
                    }
                    Posted::Recv(qpn, wr) => self.engine.post_recv(qpn, wr),
                    Posted::SrqRecv(srq, wr) => self.engine.post_srq_recv(srq, wr),
                };
                if let Err(e) = result {
                    // The program checked the WR against the QP when it posted, and only what
                    // the queue has room for is taken: this is a program that skipped those
                    // checks (not libibverbs through our provider).
                    tracing::warn!(error = %e, "a posted work request was refused");
                }
            }
            self.posted = posted;
        }
        any
    }

    /// Follows the interface's addresses, takes the frames its wire has (tapped while a
    /// capture runs; those for other shards of the device into `frames`) and runs the
    /// engine's due timers.
    pub fn receive(
        &mut self,
        d: usize,
        out: &Out,
        switch: &Switch,
        taps: &mut Vec<Tap>,
        frames: &mut Frames,
    ) -> bool {
        let mut any = false;
        if let Some(port) = self.watch.as_ref().and_then(gid::Watch::changed) {
            if port.gids != self.info.gids {
                tracing::info!(device = %self.info.name, gids = ?port.gids, "addresses changed: new GID table");
                self.engine.set_gids(port.gids.clone());
                self.info.gids = port.gids;
                self.neighbours.clear();
            }
            if port.mac != self.info.mac {
                tracing::info!(device = %self.info.name, mac = ?port.mac, "the interface's MAC changed");
                self.engine.set_mac(EthernetAddress(port.mac));
                self.info.mac = port.mac;
                self.moved = true;
            }
            switch.set(
                self.shard.head,
                self.shard.lane.count() as usize,
                &self.info,
            );
            any = true;
        }
        self.engine.set_icrc(if self.seals(out) {
            Icrc::Compute
        } else {
            Icrc::Skip
        });
        let (engine, shard) = (&mut self.engine, self.shard);
        let own = shard.lane.index();
        if let Some(link) = self.wire.link() {
            while link.receive(&mut |f| {
                if out.capturing {
                    taps.push(Tap::now(d, false, f));
                }
                // A device of this daemon sent it, and it was delivered on this host already.
                if is_group(f)
                    && (out.stations.iter().flatten()).any(|s| f.get(6..12) == Some(&s.mac))
                {
                    return;
                }
                let lanes = shard.lanes_of(f);
                // The frame is checked once, here: what fails is counted by this engine.
                if lanes == Lanes::One(own) || softrnic_wire::frame::parse(f).is_err() {
                    return engine.handle_packet(out.now, f);
                }
                for k in (0..shard.lane.count()).filter(|&k| lanes.includes(k)) {
                    match k == own {
                        true => engine.handle_trusted_packet(out.now, f),
                        false => frames.push(shard.head + k as usize, f, Origin::Wire),
                    }
                }
            }) {
                any = true;
            }
        }
        if engine.poll_timeout().is_some_and(|t| t <= out.now) {
            engine.handle_timeout(out.now);
            any = true;
        }
        any
    }

    /// Sends what the engine has (everything, or only its responses): onto the wire, or for a
    /// device of this daemon (found by MAC) into `frames`. A frame is built straight into the
    /// link's buffer, and only a same-host one is copied (into `frames`); a device with no
    /// wire builds its frames in `frames` itself. Whether it sent any.
    pub fn transmit(
        &mut self,
        d: usize,
        which: Outgoing,
        out: &Out,
        taps: &mut Vec<Tap>,
        frames: &mut Frames,
    ) -> bool {
        let sealed = self.seals(out);
        let engine = &mut self.engine;
        engine.memory_mut().flush();
        // The next frame, built into `buf` (and tapped while a capture runs): its length, or
        // `None` when the engine has nothing more.
        let mut produce = |buf: &mut [u8]| -> Option<usize> {
            let n = match which {
                Outgoing::All => engine.poll_transmit(out.now, buf),
                Outgoing::Responses => engine.poll_response(out.now, buf),
            }?;
            if out.capturing {
                taps.push(Tap::now(d, true, &buf[..n]));
            }
            Some(n)
        };
        let Some(link) = self.wire.link() else {
            let mut any = false;
            while let Some(n) = frames.build(&mut produce) {
                any = true;
                match route(frames.built(n), out.stations) {
                    Route::Group(to) => frames.keep_for(to, n, Origin::Built(sealed)),
                    Route::Host(to) => frames.keep(to, n, Origin::Built(sealed)),
                    // No wire: a frame for no device of this daemon goes nowhere.
                    Route::Wire => {}
                }
            }
            return any;
        };
        // The next frame, built into `buf`: its length and whether it goes on the wire.
        let mut next = |buf: &mut [u8]| -> Option<(usize, bool)> {
            let n = produce(buf)?;
            Some(match route(&buf[..n], out.stations) {
                Route::Group(to) => {
                    to.for_each(|to| frames.push(to, &buf[..n], Origin::Built(sealed)));
                    (n, true)
                }
                // Same-host traffic never touches the wire.
                Route::Host(to) => {
                    frames.push(to, &buf[..n], Origin::Built(sealed));
                    (n, false)
                }
                Route::Wire => (n, true),
            })
        };
        let mut any = false;
        let mut full = 0;
        loop {
            let (mut offered, mut built) = (false, false);
            link.transmit(&mut |room| {
                offered = true;
                let (n, wire) = next(room)?;
                built = true;
                wire.then_some(n)
            });
            if built {
                any = true;
                full = 0;
            } else if offered {
                return any;
            } else {
                // The link's ring is full (it asked the kernel to drain it). The frame is not
                // built yet, so waiting loses nothing: the next pass tries again.
                full += 1;
                if full == TX_TRIES {
                    tracing::debug!(device = %self.info.name, "transmit ring full");
                    return true;
                }
                std::thread::yield_now();
            }
        }
    }

    /// Whether the frames its engine builds in this pass carry their ICRC. Those of a device
    /// with no wire reach only engines of this daemon (which take them as trusted): their
    /// ICRC is computed only while a capture can show them.
    fn seals(&self, out: &Out) -> bool {
        !matches!(self.wire, Wire::Local) || out.capturing
    }

    /// The end of a pass: the wire's queued frames go, and the collected writes are made.
    pub fn finish(&mut self) {
        if let Some(link) = self.wire.link() {
            link.flush();
        }
        self.engine.memory_mut().end_pass();
    }

    /// Hands the engine's async events to the context that owns their object. This runs after
    /// the engine has taken its frames (same-host ones included) and before completions reach
    /// the rings, so a program that sees a completion finds the events that came with it.
    pub fn route_events(&mut self) {
        while let Some(event) = self.engine.poll_event() {
            if let Some(port) = self.ports.values_mut().find(|p| p.owns(&event)) {
                port.notify(event);
            }
        }
    }

    /// Moves new completions into the programs' CQ rings, once the writes they complete are
    /// made.
    pub fn fill_cqs(&mut self) -> bool {
        self.engine.memory_mut().flush();
        let mut cqs = std::mem::take(&mut self.unfilled);
        self.engine.take_filled_cqs(&mut cqs);
        if cqs.is_empty() {
            self.unfilled = cqs;
            return false;
        }
        cqs.sort_unstable();
        cqs.dedup();
        let mut any = false;
        for port in self.ports.values_mut() {
            any |= port
                .rings
                .fill_cqs(&mut self.engine, &cqs, &mut self.unfilled);
        }
        any
    }

    /// The MAC to reach `gid`: a multicast group's, a device of this daemon, a cached
    /// neighbour, or the kernel's answer (in the device's namespace).
    pub fn resolve(&mut self, switch: &Switch, gid: Gid) -> io::Result<[u8; 6]> {
        if let Some(mac) = gid.multicast_mac() {
            return Ok(mac);
        }
        if let Some(mac) = switch.mac_of(&gid) {
            return Ok(mac);
        }
        if let Some(mac) = self.neighbours.get(&gid) {
            return Ok(*mac);
        }
        if matches!(self.wire, Wire::Local) {
            return Err(io::Error::new(
                io::ErrorKind::HostUnreachable,
                format!(
                    "{gid} is not a device of this daemon, and {} has no wire",
                    self.info.name
                ),
            ));
        }
        let ip = gid.to_ip();
        let mac = in_netns(self.info.netns.as_deref(), move || {
            neigh::resolve(ip, Duration::from_secs(1))
        })?;
        self.neighbours.insert(gid, mac);
        Ok(mac)
    }

    /// Keeps the interface receiving the engine's multicast groups: their MACs are added to
    /// its filter, and removed once no QP is attached.
    pub fn sync_multicast(&mut self) {
        let wanted: BTreeSet<[u8; 6]> = self
            .engine
            .multicast_groups()
            .filter_map(Gid::multicast_mac)
            .collect();
        if wanted == self.multicast {
            return;
        }
        let changes: Vec<([u8; 6], bool)> =
            (wanted.difference(&self.multicast).map(|m| (*m, true)))
                .chain(self.multicast.difference(&wanted).map(|m| (*m, false)))
                .collect();
        self.multicast = wanted;
        let changes = self.filter.count(changes);
        let (Some(name), false) = (self.info.netdev.clone(), matches!(self.wire, Wire::Local))
        else {
            return;
        };
        let done = in_netns(self.info.netns.as_deref(), move || {
            let fd = sys::packet_socket()?;
            for (mac, add) in changes {
                sys::if_multicast(&fd, &name, mac, add)?;
            }
            Ok(())
        });
        if let Err(err) = done {
            tracing::warn!(device = %self.info.name, %err, "the interface's multicast filter");
        }
    }

    /// The descriptors its worker sleeps on: the wire, the address watch, and the programs'
    /// wake-up sockets.
    pub fn fds(&self, fds: &mut Vec<i32>) {
        self.wire.poll_fds(fds);
        fds.extend(self.watch.as_ref().map(gid::Watch::fd));
        fds.extend(self.ports.values().filter_map(|p| p.rings.wake_fd()));
    }
}

/// The multicast MACs in an interface's receive filter, with how many shards of its device
/// want each: a shard whose QPs leave a group keeps it there while another's are in it.
#[derive(Default)]
pub(crate) struct Filter(Mutex<BTreeMap<[u8; 6], usize>>);

impl Filter {
    /// Counts a shard's `changes` (a MAC wanted, or no longer); returns those the interface's
    /// filter must make: the first shard in adds, the last out removes.
    fn count(&self, changes: Vec<([u8; 6], bool)>) -> Vec<([u8; 6], bool)> {
        let mut wanted = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (changes.into_iter())
            .filter(|&(mac, add)| {
                let n = wanted.entry(mac).or_default();
                let before = *n;
                *n = if add {
                    before + 1
                } else {
                    before.saturating_sub(1)
                };
                if *n == 0 {
                    wanted.remove(&mac);
                }
                before == usize::from(!add)
            })
            .collect()
    }
}

/// Whether a frame goes to an Ethernet group (multicast) address: the I/G bit of its
/// destination.
fn is_group(frame: &[u8]) -> bool {
    frame.first().is_some_and(|b| b & 1 != 0)
}

/// Where a frame goes: a device of this daemon (found by its MAC in `stations`, then its shard
/// by destination QPN), the wire, or, for a multicast frame, the wire and every shard of every
/// device of this daemon (this one included), as the kernel loops multicast back to local
/// members.
enum Route<I> {
    Group(I),
    Host(usize),
    Wire,
}

fn route<'m>(
    frame: &[u8],
    stations: &'m [Option<Station>],
) -> Route<impl Iterator<Item = usize> + use<'m>> {
    if is_group(frame) {
        let shards = |(d, s): (usize, &Option<Station>)| Some(d..d + s.as_ref()?.shards);
        return Route::Group(stations.iter().enumerate().filter_map(shards).flatten());
    }
    let dst = &frame[..6];
    match stations
        .iter()
        .position(|s| s.is_some_and(|s| s.mac == dst))
    {
        Some(d) => Route::Host(d + shard_of(frame, stations[d].map_or(1, |s| s.shards))),
        None => Route::Wire,
    }
}

/// Which of `shards` shards takes a unicast frame: its destination QPN's lane. A frame an
/// engine built always has one; anything else goes to the first shard, which drops it.
fn shard_of(frame: &[u8], shards: usize) -> usize {
    if shards == 1 {
        return 0;
    }
    match softrnic_wire::frame::dest_qp(frame).map(|qpn| Lane::of(qpn, shards as u32)) {
        Ok(Lanes::One(k)) => k as usize,
        _ => 0,
    }
}

/// How many spare SGE lists a device keeps at most (as many as WRs it has in flight, usually).
const SPARE_SGLS: usize = 4096;

/// How many times the engine's next frame waits for room in a full transmit ring (each try
/// lets the kernel drain it) before the pass goes on without it.
const TX_TRIES: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_wire::{MULTICAST_QPN, Opcode, sample};

    fn frame(dst: [u8; 6], qpn: u32) -> Vec<u8> {
        let mut s = sample::example(Opcode::RcSendOnly, sample::Ip::V4, 1, 8);
        s.repr.eth.dst = EthernetAddress(dst);
        s.repr.bth.dest_qp = qpn;
        s.frame()
    }

    #[test]
    fn a_frame_goes_to_its_device_then_to_the_shard_of_its_qpn() {
        let (a, b) = ([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb]);
        // Device a at index 0, alone; device b in three shards, at 1, 2 and 3.
        let station = |mac, shards| Some(Station { mac, shards });
        let stations = [station(a, 1), station(b, 3), None, None];
        let host = |f: &[u8]| match route(f, &stations) {
            Route::Host(d) => Some(d),
            _ => None,
        };
        assert_eq!(host(&frame(a, 0x20)), Some(0));
        // Lanes 0x21 % 3 = 0, 0x22 % 3 = 1, 0x20 % 3 = 2.
        assert_eq!(host(&frame(b, 0x21)), Some(1));
        assert_eq!(host(&frame(b, 0x22)), Some(2));
        assert_eq!(host(&frame(b, 0x20)), Some(3));
        // QP1, the CM's, is the first shard's.
        assert_eq!(host(&frame(b, 1)), Some(1));
        assert!(matches!(
            route(&frame([2, 0, 0, 0, 0, 0xc], 0x20), &stations),
            Route::Wire
        ));
        // A multicast datagram reaches every shard of every device (and the wire).
        let group = frame([0x01, 0, 0x5e, 1, 2, 3], MULTICAST_QPN);
        let Route::Group(to) = route(&group, &stations) else {
            panic!("not a group's")
        };
        assert_eq!(to.collect::<Vec<_>>(), [0, 1, 2, 3]);
    }

    #[test]
    fn a_group_stays_in_the_filter_until_no_shard_wants_it() {
        let (a, b) = ([1, 0, 0x5e, 0, 0, 1], [1, 0, 0x5e, 0, 0, 2]);
        let filter = Filter::default();
        assert_eq!(filter.count(vec![(a, true)]), [(a, true)]);
        assert_eq!(filter.count(vec![(a, true), (b, true)]), [(b, true)]);
        assert_eq!(filter.count(vec![(a, false)]), []);
        assert_eq!(
            filter.count(vec![(a, false), (b, false)]),
            [(a, false), (b, false)]
        );
        // A removal nobody asked for changes nothing.
        assert_eq!(filter.count(vec![(a, false)]), []);
        assert_eq!(filter.count(vec![(a, true)]), [(a, true)]);
    }
}
