//! A deterministic network of softrnic engines (in the spirit of quinn's test `Pair` and
//! TigerBeetle's simulator): virtual time that jumps to the next event, and a link model with
//! latency, bandwidth, loss, duplication, reordering, corruption and partitions, all drawn
//! from one seed; with a [`Switch`] between the hosts, queues that fill, mark and pause.

mod switch;
pub use switch::{Egress, Pfc, PortStats, Red, Switch, SwitchSpec};

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::library::Endpoint;
use softrnic_emu_core::{
    Access, AddressHandle, Config, Counters, DeviceAttr, Engine, Gid, HeapMemory, Instant, Lane,
    MAX_FRAME, Mtu, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr, SendFlags, SendOp, SendWr, Sge,
    Wc, WcOpcode, WcStatus, bring_up,
};
use softrnic_wire::{
    EthRepr, EthernetAddress, ExtRepr, FrameRepr, IpRepr, Opcode, Syndrome, UdpRepr, bth::BthRepr,
    frame,
};

pub use crate::faults::{Fate, Faults};
use crate::{Link, drive};
use softrnic_emu_core::Rng;

/// The link between every pair of hosts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSpec {
    /// One-way latency in nanoseconds.
    pub latency_ns: u64,
    /// Bandwidth of each host's port, in bytes per microsecond (1250 is 10 Gbit/s).
    pub bytes_per_us: u64,
    /// Random faults.
    pub faults: Faults,
}

impl Default for LinkSpec {
    fn default() -> LinkSpec {
        LinkSpec {
            latency_ns: 2_000,
            bytes_per_us: 1250,
            faults: Faults::default(),
        }
    }
}

/// One frame sent, for scenario assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// Virtual time, in nanoseconds.
    pub at: u64,
    /// Sending host.
    pub from: usize,
    /// Receiving host.
    pub to: usize,
    /// BTH opcode.
    pub opcode: Opcode,
    /// BTH PSN.
    pub psn: u32,
    /// The AETH syndrome, if any.
    pub syndrome: Option<Syndrome>,
    /// Payload bytes.
    pub len: usize,
    /// What the link did with it.
    pub fate: Fate,
}

impl Sent {
    /// A compact description, e.g. `0>1 RC_SEND_ONLY 5` or `1>0 RC_ACKNOWLEDGE 5 ACK`; with
    /// the fate when it was not simply delivered.
    pub fn line(&self) -> String {
        let mut s = format!("{}>{} {} {}", self.from, self.to, self.opcode, self.psn);
        match self.syndrome {
            Some(Syndrome::Ack(_)) => s.push_str(" ACK"),
            Some(Syndrome::RnrNak(_)) => s.push_str(" RNR"),
            Some(Syndrome::Nak(code)) => s.push_str(&format!(" NAK{}", code.code())),
            Some(Syndrome::Reserved(b)) => s.push_str(&format!(" SYN{b:#x}")),
            None => {}
        }
        if self.fate != Fate::Delivered {
            s.push_str(&format!(" [{:?}]", self.fate));
        }
        s
    }
}

/// A host: an engine, its memory, and its addresses.
pub struct Host {
    /// The engine.
    pub engine: Engine<HeapMemory>,
    /// Its MAC.
    pub mac: EthernetAddress,
    /// Its GID.
    pub gid: Gid,
}

/// Where a frame on the wire is going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Hop {
    /// To a host's port.
    Host(usize),
    /// To the switch, from a host for a host.
    Switch { from: usize, to: usize },
    /// The frame leaving a switch port has left (it carries no bytes).
    Left(usize),
}

/// A frame on the wire: (arrival time, sequence number for ties, where it goes, bytes).
type InFlight = (u64, u64, Hop, Vec<u8>);

/// A frame as a capture on a host's port sees it: leaving one host, or arriving at one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Virtual time, in nanoseconds.
    pub at: u64,
    /// The host whose port it passed.
    pub host: usize,
    /// Whether it was leaving that host (else arriving).
    pub outbound: bool,
    /// The frame's bytes (a corrupted frame arrives corrupted).
    pub frame: Vec<u8>,
}

/// A scenario's choice of frames (for a congested switch to mark).
pub type Pick = Box<dyn FnMut(&Sent) -> bool>;

/// A scenario hook: decides the fate of a frame instead of the random faults.
pub type Hook = Box<dyn FnMut(&Sent) -> Option<Fate>>;

/// The simulated network.
pub struct Sim {
    /// The hosts, by index.
    pub hosts: Vec<Host>,
    /// Virtual time in nanoseconds.
    pub now: u64,
    /// The link model.
    pub link: LinkSpec,
    /// Frames sent in `[start, end)` are lost.
    pub partition: Option<(u64, u64)>,
    /// Every frame sent, when `record` is set.
    pub trace: Vec<Sent>,
    /// Whether to fill `trace`.
    pub record: bool,
    /// Every frame leaving and arriving at each host's port, when `capture` is set: what a
    /// capture on every port would hold.
    pub seen: Vec<Seen>,
    /// Whether to fill `seen`.
    pub capture: bool,
    /// Overrides the random faults, for scenarios that lose one particular frame.
    pub hook: Option<Hook>,
    /// A congested switch: the frames it picks that are ECN-capable arrive marked CE.
    pub congested: Option<Pick>,
    /// A switch between the hosts, with queues: each way is half the link's latency; else the
    /// hosts are wired to each other.
    pub switch: Option<Switch>,
    rng: Rng,
    in_flight: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    port_free_at: Vec<u64>,
    buf: Vec<u8>,
    macs: Vec<EthernetAddress>,
    /// The most frames ever in flight at once.
    pub max_in_flight: usize,
    /// A time the caller wants to act at: [`step`](Self::step) stops there.
    pub alarm: Option<u64>,
}

impl Sim {
    /// `n` hosts at 198.18.0.1, .2, ... with a 4096-byte path MTU available; everything random
    /// comes from `seed`.
    pub fn new(seed: u64, n: usize, link: LinkSpec) -> Sim {
        let hosts = (0..n)
            .map(|i| {
                let mac = EthernetAddress([0x02, 0, 0, 0, 0, i as u8 + 1]);
                let gid = Gid::from(core::net::Ipv4Addr::new(198, 18, 0, i as u8 + 1));
                let config = Config {
                    seed: seed.wrapping_mul(31).wrapping_add(i as u64),
                    key_secret: !seed.wrapping_add(i as u64),
                    mac,
                    gids: vec![gid],
                    eth_mtu: 9000,
                    device: DeviceAttr::default(),
                    lane: Lane::ONLY,
                };
                Host {
                    engine: Engine::new(config, HeapMemory::new()),
                    mac,
                    gid,
                }
            })
            .collect::<Vec<Host>>();
        Sim {
            macs: hosts.iter().map(|h| h.mac).collect(),
            hosts,
            now: 0,
            link,
            partition: None,
            trace: Vec::new(),
            record: false,
            seen: Vec::new(),
            capture: false,
            hook: None,
            congested: None,
            switch: None,
            rng: Rng::new(seed ^ 0x5eed),
            in_flight: BinaryHeap::new(),
            seq: 0,
            port_free_at: vec![0; n],
            buf: vec![0; MAX_FRAME],
            max_in_flight: 0,
            alarm: None,
        }
    }

    /// Puts a switch set up as `spec` between the hosts.
    pub fn add_switch(&mut self, spec: SwitchSpec) {
        self.switch = Some(Switch::new(spec, self.hosts.len()));
    }

    /// Sends every frame every host has ready.
    pub fn pump(&mut self) {
        self.drive(vec![VecDeque::new(); self.hosts.len()], usize::MAX);
    }

    /// Runs every host's [`drive::pass`] at the current time, with the frames that arrived for
    /// it in `arrived`, sending at most `burst` frames a pass.
    fn drive(&mut self, mut arrived: Vec<VecDeque<Vec<u8>>>, burst: usize) {
        let now = Instant::from_nanos(self.now);
        let mut hosts = std::mem::take(&mut self.hosts);
        for (from, host) in hosts.iter_mut().enumerate() {
            let mut port = Port {
                sim: self,
                from,
                arrived: &mut arrived[from],
            };
            while drive::pass(&mut host.engine, now, &mut port, burst) {}
        }
        self.hosts = hosts;
    }

    /// Switches a frame: to the host with its destination MAC, or for a multicast MAC
    /// flooded to every other host, as a switch without IGMP snooping does.
    fn transmit(&mut self, from: usize, frame: Vec<u8>) {
        let dst_mac = EthernetAddress::from_bytes(&frame[..6]);
        if dst_mac.is_multicast() {
            for to in (0..self.macs.len()).filter(|&to| to != from) {
                self.transmit_to(from, to, frame.clone());
            }
        } else if let Some(to) = self.macs.iter().position(|&m| m == dst_mac) {
            self.transmit_to(from, to, frame);
        }
    }

    fn transmit_to(&mut self, from: usize, to: usize, mut frame: Vec<u8>) {
        // Each port sends one frame at a time at the link's bandwidth.
        let start = self.now.max(self.port_free_at[from]);
        let wire_ns = frame.len() as u64 * 1000 / self.link.bytes_per_us.max(1);
        self.port_free_at[from] = start + wire_ns;
        let (hop, latency) = match self.switch {
            Some(_) => (Hop::Switch { from, to }, self.link.latency_ns / 2),
            None => (Hop::Host(to), self.link.latency_ns),
        };
        let mut at = start + wire_ns + latency;

        let parsed = frame::parse(&frame).ok();
        let mut sent = Sent {
            at: self.now,
            from,
            to,
            opcode: parsed.map_or(Opcode::Cnp, |p| p.repr.bth.opcode),
            psn: parsed.map_or(0, |p| p.repr.bth.psn),
            syndrome: parsed.and_then(|p| p.repr.ext.aeth.map(|a| a.syndrome)),
            len: parsed.map_or(0, |p| p.payload().len()),
            fate: Fate::Delivered,
        };
        self.see(from, true, &frame);
        let f = self.link.faults;
        let partitioned = self
            .partition
            .is_some_and(|(s, e)| self.now >= s && self.now < e);
        let hooked = self.hook.as_mut().and_then(|h| h(&sent));
        if self.congested.as_mut().is_some_and(|c| c(&sent)) {
            mark_ce(&mut frame);
        }
        sent.fate = if partitioned {
            Fate::Dropped
        } else if let Some(fate) = hooked {
            fate
        } else {
            f.fate(&mut self.rng)
        };
        match sent.fate {
            Fate::Dropped => {}
            Fate::Duplicated => {
                let later = at + latency / 2 + 1;
                self.schedule(later, hop, frame.clone());
                self.schedule(at, hop, frame);
            }
            Fate::Reordered => {
                at += 1 + self.rng.below(4 * latency + 1);
                self.schedule(at, hop, frame);
            }
            Fate::Corrupted => {
                crate::faults::corrupt(&mut frame, &mut self.rng);
                self.schedule(at, hop, frame);
            }
            Fate::Delivered => self.schedule(at, hop, frame),
        }
        if self.record {
            self.trace.push(sent);
        }
    }

    /// Records `frame` passing `host`'s port now, when the ports are captured.
    fn see(&mut self, host: usize, outbound: bool, frame: &[u8]) {
        if self.capture {
            self.seen.push(Seen {
                at: self.now,
                host,
                outbound,
                frame: frame.to_vec(),
            });
        }
    }

    /// Delivers a hand-made frame to host `to` after the link latency.
    pub fn inject(&mut self, to: usize, frame: Vec<u8>) {
        let at = self.now + self.link.latency_ns;
        self.schedule(at, Hop::Host(to), frame);
    }

    /// A frame from host `from` to host `to` with these transport headers.
    pub fn frame(
        &self,
        from: usize,
        to: usize,
        bth: BthRepr,
        ext: ExtRepr,
        payload: &[u8],
    ) -> Vec<u8> {
        let ip = |h: usize| match self.hosts[h].gid.to_ip() {
            core::net::IpAddr::V4(v4) => v4,
            core::net::IpAddr::V6(_) => unreachable!("simulated hosts use IPv4"),
        };
        let repr = FrameRepr {
            eth: EthRepr::untagged(self.hosts[to].mac, self.hosts[from].mac),
            ip: IpRepr::v4(ip(from), ip(to)),
            udp: UdpRepr::unchecked(0xc000),
            bth,
            ext,
        };
        let mut buf = vec![0; MAX_FRAME];
        let n = repr.emit(payload, &mut buf).expect("valid frame");
        buf.truncate(n);
        buf
    }

    fn schedule(&mut self, at: u64, hop: Hop, frame: Vec<u8>) {
        self.seq += 1;
        self.in_flight.push(Reverse((at, self.seq, hop, frame)));
        self.max_in_flight = self.max_in_flight.max(self.in_flight.len());
    }

    /// The frame at the head of switch port `to`'s queue starts to leave now, marked CE if RED
    /// says so: it reaches its host after its time on the wire and half the latency.
    fn egress(&mut self, to: usize) {
        let switch = self.switch.as_mut().expect("a switch");
        let Some((frame, mark)) = switch.head(to, self.now, &mut self.rng) else {
            return;
        };
        let mut frame = frame.clone();
        if mark && mark_ce(&mut frame) {
            switch.count_mark(to);
        }
        let wire_ns = frame.len() as u64 * 1000 / self.link.bytes_per_us.max(1);
        let left = self.now + wire_ns;
        self.schedule(left, Hop::Left(to), Vec::new());
        self.schedule(left + self.link.latency_ns / 2, Hop::Host(to), frame);
    }

    /// Advances to the next event (a frame arriving or a timer) and handles everything due
    /// then. Returns false when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.pump();
        let next_frame = self.in_flight.peek().map(|Reverse((t, ..))| *t);
        let next_timer = self
            .hosts
            .iter()
            .filter_map(|h| h.engine.poll_timeout())
            .map(Instant::as_nanos)
            .min();
        let alarm = self.alarm.filter(|&t| t > self.now);
        // A port that is sending wakes its host when it is free again.
        let next_free = self
            .port_free_at
            .iter()
            .copied()
            .filter(|&t| t > self.now)
            .min();
        let Some(t) = [next_frame, next_timer, alarm, next_free]
            .into_iter()
            .flatten()
            .min()
        else {
            return false;
        };
        self.now = self.now.max(t);
        let mut arrived = vec![VecDeque::new(); self.hosts.len()];
        while self
            .in_flight
            .peek()
            .is_some_and(|Reverse((t, ..))| *t <= self.now)
        {
            let Reverse((_, _, hop, frame)) = self.in_flight.pop().expect("peeked");
            match hop {
                Hop::Host(to) => {
                    self.see(to, false, &frame);
                    arrived[to].push_back(frame);
                }
                Hop::Switch { from, to } => {
                    let switch = self.switch.as_mut().expect("frames reach a switch");
                    if switch.enqueue(from, to, frame) {
                        self.egress(to);
                    }
                }
                Hop::Left(to) => {
                    if self.switch.as_mut().is_some_and(|s| s.sent(to)) {
                        self.egress(to);
                    }
                }
            }
        }
        // What the hosts send in answer waits for the next step's pump, so that a scenario
        // can act in between.
        self.drive(arrived, 0);
        true
    }

    /// Steps until `done` holds or nothing is left to happen; fails after `max_steps` (a
    /// livelock) or when the network goes idle first (a hang).
    pub fn run_until(
        &mut self,
        max_steps: usize,
        mut done: impl FnMut(&mut Sim) -> bool,
    ) -> Result<(), String> {
        for _ in 0..max_steps {
            if done(self) {
                return Ok(());
            }
            if !self.step() {
                return if done(self) {
                    Ok(())
                } else {
                    Err(format!("idle at {} ns before the run was done", self.now))
                };
            }
        }
        Err(format!("no end after {max_steps} steps (livelock?)"))
    }

    /// Runs until nothing is left to happen.
    pub fn run_idle(&mut self, max_steps: usize) -> Result<(), String> {
        for _ in 0..max_steps {
            if !self.step() {
                return Ok(());
            }
        }
        Err(format!("still busy after {max_steps} steps"))
    }

    /// The endpoint of QP `qpn` on host `h`, starting at `psn`.
    pub fn endpoint(&self, h: usize, qpn: u32, psn: u32) -> Endpoint {
        Endpoint {
            gid: self.hosts[h].gid,
            mac: self.hosts[h].mac,
            qpn,
            psn,
        }
    }

    /// Takes QP `qpn` on host `h` to RTS towards `peer`, with `own_psn` as its first PSN and
    /// the given transport settings.
    pub fn connect(
        &mut self,
        h: usize,
        qpn: u32,
        own_psn: u32,
        peer: &Endpoint,
        settings: &Settings,
    ) {
        let engine = &mut self.hosts[h].engine;
        let qp_type = engine.qp_type(qpn).expect("QP exists");
        let ah = AddressHandle {
            traffic_class: settings.traffic_class,
            ..AddressHandle::to(peer.gid, 0).via(peer.mac)
        };
        let attr = QpAttr {
            qp_access_flags: settings.access,
            qkey: 0x1111_1111,
            ah: Some(ah),
            path_mtu: settings.mtu,
            timeout: settings.timeout,
            retry_cnt: settings.retry_cnt,
            rnr_retry: settings.rnr_retry,
            rq_psn: peer.psn,
            sq_psn: own_psn,
            max_rd_atomic: settings.max_rd_atomic,
            max_dest_rd_atomic: settings.max_rd_atomic,
            min_rnr_timer: settings.min_rnr_timer,
            dest_qp_num: peer.qpn,
            ..QpAttr::default()
        };
        for (state, mask) in bring_up(qp_type) {
            let a = QpAttr {
                qp_state: state,
                ..attr
            };
            engine.modify_qp(qpn, &a, mask).expect("modify_qp");
        }
    }
}

/// Marks an ECN-capable frame Congestion Experienced (RFC 3168), as a switch whose queue is
/// over its threshold does: ECT(0) or ECT(1) becomes CE, and an IPv4 header its checksum again.
/// The ICRC leaves these bits out, so it stays right. A frame that is not ECN-capable is left.
/// Returns whether it was marked.
pub fn mark_ce(frame: &mut [u8]) -> bool {
    let ip = match frame.get(12..14) {
        Some([0x81, 0x00]) => 18,
        _ => 14,
    };
    match frame.get(ip).map(|b| b >> 4) {
        Some(4) if frame.len() >= ip + 20 && frame[ip + 1] & 3 != 0 => {
            frame[ip + 1] |= 3;
            let h = &mut frame[ip..ip + 20];
            h[10..12].fill(0);
            let sum: u32 = h
                .chunks(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum();
            let folded = (sum & 0xffff) + (sum >> 16);
            let folded = (folded & 0xffff) + (folded >> 16);
            h[10..12].copy_from_slice(&(!(folded as u16)).to_be_bytes());
            true
        }
        // IPv6: the ECN bits are the low two of the traffic class, bits 4-5 of byte 1.
        Some(6) if frame.len() >= ip + 40 && frame[ip + 1] & 0x30 != 0 => {
            frame[ip + 1] |= 0x30;
            true
        }
        _ => false,
    }
}

/// A host's port on the simulated network, as the [`Link`] its engine is driven over: it
/// receives what arrived for the host, and sends onto the network.
struct Port<'a> {
    sim: &'a mut Sim,
    from: usize,
    arrived: &'a mut VecDeque<Vec<u8>>,
}

impl Link for Port<'_> {
    fn transmit(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool {
        // A NIC takes its next frame from its queues when the wire is free: a QP paced to a
        // rate, or a newer response, goes ahead of frames not yet built.
        let paused = self
            .sim
            .switch
            .as_ref()
            .is_some_and(|s| s.paused(self.from));
        if paused || self.sim.port_free_at[self.from] > self.sim.now {
            return false;
        }
        let Some(n) = fill(&mut self.sim.buf) else {
            return false;
        };
        let frame = self.sim.buf[..n].to_vec();
        self.sim.transmit(self.from, frame);
        true
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool {
        let Some(frame) = self.arrived.pop_front() else {
            return false;
        };
        deliver(&frame);
        true
    }
}

/// Transport settings for [`Sim::connect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Path MTU.
    pub mtu: Mtu,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 is infinite).
    pub rnr_retry: u8,
    /// RNR timer code the responder sends.
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic each way.
    pub max_rd_atomic: u8,
    /// Remote access the QP allows.
    pub access: Access,
    /// The address handle's traffic class: DSCP, and in its low 2 bits the ECN field sent
    /// (2, ECT(0), lets a congested switch mark CE instead of dropping).
    pub traffic_class: u8,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            mtu: Mtu::M1024,
            timeout: 8, // 1.05 ms
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1, // 0.01 ms
            max_rd_atomic: 4,
            access: Access::LOCAL_WRITE
                .union(Access::REMOTE_WRITE)
                .union(Access::REMOTE_READ)
                .union(Access::REMOTE_ATOMIC),
            traffic_class: 0,
        }
    }
}

/// Two hosts with one QP each, connected: host 0's QP is the requester (first PSN 0), host 1's
/// the responder (first PSN 0x500 for its own requests). The scenarios and the lessons use it.
pub struct Pair {
    /// The network.
    pub sim: Sim,
    /// Each host's PD.
    pub pd: [u32; 2],
    /// Each host's CQ (send and receive).
    pub cq: [u32; 2],
    /// Each host's QP.
    pub qp: [u32; 2],
}

impl Pair {
    /// Seed 1 over the default link, first PSNs 0 and 0x500.
    pub fn new(qp_type: QpType, settings: Settings) -> Pair {
        Pair::with(qp_type, settings, 1, LinkSpec::default(), [0, 0x500])
    }

    /// Two hosts on `link`, everything random drawn from `seed`, each QP's first PSN from
    /// `psns`.
    pub fn with(
        qp_type: QpType,
        settings: Settings,
        seed: u64,
        link: LinkSpec,
        psns: [u32; 2],
    ) -> Pair {
        let mut sim = Sim::new(seed, 2, link);
        sim.record = true;
        let mut pd = [0; 2];
        let mut cq = [0; 2];
        let mut qp = [0; 2];
        for h in 0..2 {
            let e = &mut sim.hosts[h].engine;
            pd[h] = e.alloc_pd(0).unwrap();
            cq[h] = e.create_cq(64).unwrap();
            let cap = QpCap::new(32, 4, 64);
            let init = QpInit::new(qp_type, cq[h], cap);
            qp[h] = e.create_qp(pd[h], init).unwrap();
        }
        let (e0, e1) = (
            sim.endpoint(0, qp[0], psns[0]),
            sim.endpoint(1, qp[1], psns[1]),
        );
        sim.connect(0, qp[0], psns[0], &e1, &settings);
        sim.connect(1, qp[1], psns[1], &e0, &settings);
        Pair { sim, pd, cq, qp }
    }

    /// An RC pair with the default settings.
    pub fn rc() -> Pair {
        Pair::new(QpType::Rc, Settings::default())
    }

    /// A buffer of `len` bytes filled with `fill`, registered with `access`: (address, key).
    pub fn buf(&mut self, h: usize, len: usize, fill: u8, access: Access) -> (u64, u32) {
        let e = &mut self.sim.hosts[h].engine;
        let addr = e.memory_mut().alloc(len);
        e.memory_mut().slice_mut(addr, len).unwrap().fill(fill);
        let key = e.reg_mr(self.pd[h], addr, len as u64, access).unwrap();
        (addr, key)
    }

    /// The `len` bytes at `addr` of host `h`'s memory.
    pub fn bytes(&self, h: usize, addr: u64, len: usize) -> Vec<u8> {
        self.sim.hosts[h]
            .engine
            .memory()
            .slice(addr, len)
            .unwrap()
            .to_vec()
    }

    /// Posts a signaled send WR on host 0's QP.
    pub fn send(&mut self, wr_id: u64, op: SendOp, sgl: Vec<Sge>) {
        let wr = SendWr {
            wr_id,
            op,
            sgl,
            flags: SendFlags::SIGNALED,
            ud: None,
            xrc_srqn: None,
        };
        self.sim.hosts[0].engine.post_send(self.qp[0], wr).unwrap();
    }

    /// Posts a receive WR on host 1's QP.
    pub fn recv(&mut self, wr_id: u64, sgl: Vec<Sge>) {
        let wr = RecvWr { wr_id, sgl };
        self.sim.hosts[1].engine.post_recv(self.qp[1], wr).unwrap();
    }

    /// Runs until nothing is left to happen; panics on a livelock.
    pub fn run(&mut self) {
        self.sim.run_idle(100_000).unwrap();
    }

    /// The completions waiting at host `h`, whole.
    pub fn poll(&mut self, h: usize) -> Vec<Wc> {
        let mut out = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 64];
        let n = self.sim.hosts[h]
            .engine
            .poll_cq(self.cq[h], &mut out)
            .unwrap();
        out[..n].to_vec()
    }

    /// The completions waiting at host `h`: (wr_id, status, opcode, byte_len).
    pub fn wcs(&mut self, h: usize) -> Vec<(u64, WcStatus, WcOpcode, u32)> {
        let wcs = self.poll(h).into_iter();
        wcs.map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
            .collect()
    }

    /// The trace, one [`Sent::line`] per frame.
    pub fn lines(&self) -> Vec<String> {
        self.sim.trace.iter().map(Sent::line).collect()
    }

    /// Host `h`'s counters.
    pub fn counters(&self, h: usize) -> Counters {
        self.sim.hosts[h].engine.counters().clone()
    }

    /// The state of host `h`'s QP.
    pub fn state(&self, h: usize) -> Option<QpState> {
        self.sim.hosts[h].engine.qp_state(self.qp[h])
    }

    /// Loses the `n`th (from 0) frame matching `pick`.
    pub fn lose(&mut self, n: usize, pick: impl Fn(&Sent) -> bool + 'static) {
        let mut seen = 0;
        self.sim.hook = Some(Box::new(move |s| {
            if pick(s) {
                seen += 1;
                if seen == n + 1 {
                    return Some(Fate::Dropped);
                }
            }
            None
        }));
    }
}
