//! The engine: one RNIC's worth of state, driven by verbs calls, packets and time.

mod verbs;

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use smoltcp::wire::EthernetAddress;
use softrnic_wire::mad::{GSI_QKEY, GSI_QPN};
use softrnic_wire::{
    BthRepr, DethRepr, Error as WireError, ExtRepr, Icrc, IpRepr, MULTICAST_QPN, Opcode,
    ParsedFrame, Transport, frame,
};

use crate::ah::AddressHandle;
use crate::attr::{DeviceAttr, PortAttr};
use crate::cm::{Cm, Peer};
use crate::completer;
use crate::counters::Counters;
use crate::event::Event;
use crate::gid::Gid;
use crate::keys::KeyTable;
use crate::lane::Lane;
use crate::memory::{Memory, Space};
use crate::multicast::Groups;
use crate::notification;
use crate::psn;
use crate::qp::{Qp, Shared};
use crate::qp_attr::{QpState, QpType};
use crate::reaction::{Dcqcn, Limiter};
use crate::requester;
use crate::responder;
use crate::rng::Rng;
use crate::slab::Slab;
use crate::time::Instant;
use crate::timers::{Timer, Timers};

/// The largest frame the engine writes: a 4096-byte payload with every header (Ethernet with a
/// VLAN tag, IPv6, UDP, BTH, the largest extension headers) and the ICRC.
pub const MAX_FRAME: usize = 4096 + 18 + 40 + 8 + 12 + 28 + 4;

/// How an engine is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// Seeds every random choice but keys (initial QPNs, CM ids, UDP source ports).
    pub seed: u64,
    /// Makes the L_Keys and R_Keys (a secret: real randomness wherever programs or peers
    /// must not guess each other's keys).
    pub key_secret: u64,
    /// This device's MAC.
    pub mac: EthernetAddress,
    /// The GID table (the device keeps it in sync with the interface's addresses).
    pub gids: Vec<Gid>,
    /// The Ethernet MTU, which sets the port's active MTU.
    pub eth_mtu: u32,
    /// The limits reported and enforced.
    pub device: DeviceAttr,
    /// The QP numbers it gives: all, or one lane's when its device has several engines.
    pub lane: Lane,
}

/// For maps keyed by numbers handed out in sequence (QPNs, the daemon's context indexes): a
/// multiplicative hash spreads them well and costs far less than SipHash on the per-packet
/// lookup. Lookups of numbers from the wire cannot crowd a bucket, since the numbers stored
/// are the map owner's own.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type QpMap = HashMap<u32, Qp, BuildHasherDefault<IdHasher>>;

#[derive(Debug)]
#[cfg_attr(feature = "fuzz", derive(Clone))]
struct Pd {
    space: Space,
}

/// The sans-IO RoCEv2 engine: the verbs objects of one device and its RC, UC and UD transports.
///
/// It never opens a socket or reads a clock. The caller drives it:
///
/// 1. Verbs calls (`create_qp`, `post_send`, ...) at any time.
/// 2. Each received frame goes to [`handle_packet`](Self::handle_packet).
/// 3. When [`poll_timeout`](Self::poll_timeout)'s instant has passed, call
///    [`handle_timeout`](Self::handle_timeout).
/// 4. After any of the above, call [`poll_transmit`](Self::poll_transmit) until it returns
///    `None`, and send each frame it writes.
/// 5. Then read completions with [`poll_cq`](Self::poll_cq) and events with
///    [`poll_event`](Self::poll_event), and sleep until the next frame or `poll_timeout`.
///
/// `now` must not go backwards.
#[cfg_attr(feature = "fuzz", derive(Clone))]
pub struct Engine<M> {
    sh: Shared<M>,
    pds: Slab<Pd>,
    /// XRC domains (IBA A14): which SRQs an XRC target QP may deliver to.
    xrcds: Slab<()>,
    qps: QpMap,
    ready: VecDeque<u32>,
    next_qpn: u32,
    lane: Lane,
    device: DeviceAttr,
    port: PortAttr,
    /// The Communication Manager, on QP1.
    cm: Cm,
    /// The PSN of the next MAD QP1 sends.
    gsi_psn: u32,
    /// Multicast groups and their QPs.
    groups: Groups,
}

impl<M: Memory> Engine<M> {
    /// An engine with no objects yet.
    pub fn new(config: Config, mem: M) -> Engine<M> {
        let mut rng = Rng::new(config.seed);
        let port = PortAttr::active(config.eth_mtu);
        // QPNs 0 and 1 are the special QPs; start at a seeded point so QPNs differ per run.
        let next_qpn = config.lane.at_or_after(0x11 + (rng.next_u32() & 0xffff));
        // The CA GUID, as rxe makes the node GUID: the EUI-64 of the MAC.
        let guid = Gid::link_local(config.mac.0).0[8..]
            .try_into()
            .expect("8 bytes");
        let cm = Cm::new(u64::from_be_bytes(guid), rng.next_u64());
        Engine {
            sh: Shared {
                mem,
                keys: KeyTable::new(config.key_secret),
                cqs: Slab::default(),
                srqs: Slab::default(),
                events: VecDeque::new(),
                counters: Counters::default(),
                rng,
                mac: config.mac,
                gids: config.gids,
                port_mtu: port.active_mtu,
                timers: Timers::default(),
                filled: Vec::new(),
                spare_sgls: Vec::new(),
                icrc: Icrc::Compute,
                dcqcn: Dcqcn::default(),
            },
            pds: Slab::default(),
            xrcds: Slab::default(),
            qps: QpMap::default(),
            ready: VecDeque::new(),
            next_qpn,
            lane: config.lane,
            device: config.device,
            port,
            cm,
            gsi_psn: 0,
            groups: Groups::default(),
        }
    }

    /// The Communication Manager: its consumer listens, connects, accepts and disconnects
    /// through it, and reads its events. Its MADs go out through
    /// [`poll_transmit`](Self::poll_transmit) and its timers run with the engine's.
    pub fn cm(&mut self) -> &mut Cm {
        &mut self.cm
    }

    /// The application memory.
    pub fn memory(&self) -> &M {
        &self.sh.mem
    }

    /// The application memory, writable.
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.sh.mem
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> &DeviceAttr {
        &self.device
    }

    /// `ibv_query_port`.
    pub fn query_port(&self) -> &PortAttr {
        &self.port
    }

    /// The GID table.
    pub fn gids(&self) -> &[Gid] {
        &self.sh.gids
    }

    /// Replaces the GID table (the device calls this as addresses change). Each QP's path
    /// names a source address by GID index, so it is worked out again; a QP whose index no
    /// longer resolves sends nothing until it is given a new address handle.
    pub fn set_gids(&mut self, gids: Vec<Gid>) {
        self.sh.gids = gids;
        self.rebuild_paths();
    }

    /// Whether the frames this engine builds carry a computed ICRC. A device whose frames reach
    /// no wire and no capture (they go to engines of the same process, which take them with
    /// [`handle_trusted_packet`](Self::handle_trusted_packet)) may skip the work.
    pub fn set_icrc(&mut self, icrc: Icrc) {
        self.sh.icrc = icrc;
    }

    /// DCQCN's parameters for the device's QPs (mlx5's defaults until set).
    pub fn set_dcqcn(&mut self, dcqcn: Dcqcn) {
        self.sh.dcqcn = dcqcn;
        self.rebuild_paths();
    }

    /// The device's DCQCN parameters.
    pub fn dcqcn(&self) -> &Dcqcn {
        &self.sh.dcqcn
    }

    /// The rate QP `qpn` is held to since a CNP, in Mb/s; `None` while it is not limited.
    pub fn qp_rate(&self, qpn: u32) -> Option<f64> {
        self.qps.get(&qpn)?.rp.as_ref().map(|l| l.current)
    }

    /// Changes the device's MAC (its interface's changed, as in a bond's failover): frames
    /// leave from the new one.
    pub fn set_mac(&mut self, mac: EthernetAddress) {
        self.sh.mac = mac;
        self.rebuild_paths();
    }

    fn rebuild_paths(&mut self) {
        for qp in self.qps.values_mut() {
            if let Some(ah) = qp.attr.ah {
                qp.path = self.sh.qp_path(&ah, qp.udp_src_port);
            }
        }
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.sh.counters
    }

    /// Work held inside the engine over every QP: send and receive WQEs, queued responses and
    /// saved READ/atomic results. Each part is bounded by the QP's limits; tests check that.
    pub fn backlog(&self) -> usize {
        self.qps.values().map(Qp::backlog).sum()
    }

    /// The most [`backlog`](Self::backlog) the QPs' limits allow.
    pub fn backlog_limit(&self) -> usize {
        self.qps.values().map(Qp::backlog_limit).sum()
    }

    /// Checks what must hold between calls, whatever the inputs were: the roles' positions lie
    /// inside their queues, PSNs are 24 bits and ordered, nothing grows past its limit, and a
    /// QP in error holds no work. The fuzz targets and the simulation call it after every step.
    pub fn check_invariants(&self) -> core::result::Result<(), String> {
        use crate::psn;
        // One pass over the QPs (the fuzz targets call this after every step).
        let (mut backlog, mut limit) = (0, 0);
        for (qpn, q) in &self.qps {
            backlog += q.backlog();
            limit += q.backlog_limit();
            let fail = |what: &str| Err(format!("QP {qpn:#x} ({:?}): {what}", q.state));
            if q.req.next > q.sq.len() {
                return fail("requester beyond the send queue");
            }
            if let Some(w) = q.sq.get(q.req.next)
                && q.req.offset > w.len
            {
                return fail("requester offset beyond its message");
            }
            if [
                q.req.psn,
                q.req.max_sent,
                q.comp.psn,
                q.resp.epsn,
                q.resp.msn,
            ]
            .iter()
            .any(|&p| p > psn::MASK)
            {
                return fail("a PSN or MSN wider than 24 bits");
            }
            if psn::diff(q.req.max_sent, q.req.psn) < 0 {
                return fail("next PSN beyond the highest sent");
            }
            if q.init.qp_type.is_reliable() && psn::diff(q.req.psn, q.comp.psn) < 0 {
                return fail("completer ahead of the requester");
            }
            let held = usize::from(q.init.srq.is_none() && q.resp.held.is_some());
            if q.sq.len() > q.init.cap.max_send_wr as usize
                || q.rq.len() + held > q.init.cap.max_recv_wr as usize
            {
                return fail("a queue beyond its capacity");
            }
            if q.state == QpState::Err && (!q.sq.is_empty() || !q.rq.is_empty()) {
                return fail("work left in the error state");
            }
        }
        if let Some((id, _)) = self
            .sh
            .srqs
            .iter()
            .find(|(_, s)| s.queue.len() + s.lent as usize > s.max_wr as usize)
        {
            return Err(format!("SRQ {id} beyond its capacity"));
        }
        if backlog > limit {
            return Err(format!("backlog {backlog} above its limit {limit}"));
        }
        Ok(())
    }

    /// The next asynchronous event or completion notification.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.sh.events.pop_front()
    }

    /// Queues the QP for the next `poll_transmit`.
    fn mark_ready(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn)
            && !qp.queued
        {
            qp.queued = true;
            self.ready.push_back(qpn);
        }
    }

    // --- I/O ---------------------------------------------------------------------------------

    /// Handles one received frame. Anything malformed, misaddressed or unexpected is dropped
    /// and counted; nothing from the wire can make the engine panic.
    pub fn handle_packet(&mut self, now: Instant, frame: &[u8]) {
        self.receive(now, frame::parse(frame));
    }

    /// Handles a frame another engine of this process built (same-host delivery): as
    /// [`handle_packet`](Self::handle_packet), but its ICRC, which it may lack, is not checked.
    pub fn handle_trusted_packet(&mut self, now: Instant, frame: &[u8]) {
        self.receive(now, frame::parse_unverified(frame));
    }

    fn receive(&mut self, now: Instant, parsed: Result<ParsedFrame, WireError>) {
        let pkt = match parsed {
            Ok(p) => p,
            Err(WireError::BadIcrc { .. }) => {
                self.sh.counters.rcvd_icrc_err += 1;
                return;
            }
            Err(_) => {
                self.sh.counters.rcvd_malformed += 1;
                return;
            }
        };
        self.sh.counters.rcvd_pkts += 1;
        let (src, dst) = match pkt.repr.ip {
            IpRepr::V4 { src, dst, .. } => (Gid::from(src), Gid::from(dst)),
            IpRepr::V6 { src, dst, .. } => (Gid::from(src), Gid::from(dst)),
        };
        if dst.is_multicast() {
            return self.multicast_receive(&pkt, src);
        }
        if !self.sh.gids.contains(&dst) {
            self.sh.counters.rcvd_unknown_qp += 1;
            return;
        }
        let info = pkt.repr.bth.opcode.info();
        if info.transport == Transport::Cnp {
            // A CNP from the peer of a QP that sends cuts that QP's rate (DCQCN).
            let qp = self.qps.get_mut(&pkt.repr.bth.dest_qp).filter(|qp| {
                qp.attr.ah.is_some_and(|ah| ah.dgid == src)
                    && !matches!(qp.init.qp_type, QpType::Ud | QpType::XrcRecv)
            });
            match qp {
                Some(qp) if self.sh.dcqcn.rp_enabled => {
                    let p = &self.sh.dcqcn;
                    qp.rp
                        .get_or_insert_with(|| Box::new(Limiter::new(p, now)))
                        .cnp(p, now);
                    self.sh.counters.rp_cnp_handled += 1;
                }
                _ => self.sh.counters.rp_cnp_ignored += 1,
            }
            return;
        }
        let qpn = pkt.repr.bth.dest_qp;
        if qpn == GSI_QPN {
            return self.gsi_receive(now, &pkt, src, dst);
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.sh.counters.rcvd_unknown_qp += 1;
            return;
        };
        let from_peer = qp.attr.ah.is_some_and(|ah| ah.dgid == src);
        let matches = match (qp.init.qp_type, info.transport) {
            (QpType::Rc, Transport::Rc) | (QpType::Uc, Transport::Uc) => from_peer,
            (QpType::Ud, Transport::Ud) => true,
            // IBA A14: an XRC initiator only sends requests, a target only answers them.
            (QpType::XrcSend, Transport::Xrc) => from_peer && info.operation.is_response(),
            (QpType::XrcRecv, Transport::Xrc) => from_peer && !info.operation.is_response(),
            _ => false,
        };
        if !matches || !qp.receives() {
            self.sh.counters.rcvd_bad_context += 1;
            return;
        }
        // Annex A17.9.3: a connected QP tells its peer it was congested.
        if notification::congestion_experienced(pkt.repr.ip.ecn())
            && !matches!(qp.init.qp_type, QpType::Ud)
        {
            notification::marked(qp, &mut self.sh, now);
        }
        if info.operation.is_response() {
            if qp.init.qp_type.is_reliable() {
                let directive = completer::handle(qp, &mut self.sh, now, &pkt);
                requester::follow(qp, &mut self.sh, directive);
            }
        } else {
            responder::handle(qp, &mut self.sh, &pkt);
        }
        self.mark_ready(qpn);
    }

    /// A packet to a multicast group (IBA 10.5): a UD datagram whose DestQP is the multicast
    /// QPN 0xFFFFFF, delivered to every QP attached to the group, each checking its own Q_Key
    /// as for unicast (rxe's `rxe_rcv_mcast_pkt`). Anything else is dropped and counted.
    fn multicast_receive(&mut self, pkt: &frame::ParsedFrame, src: Gid) {
        let dst = match pkt.repr.ip {
            IpRepr::V4 { dst, .. } => Gid::from(dst),
            IpRepr::V6 { dst, .. } => Gid::from(dst),
        };
        let ud = pkt.repr.bth.opcode.info().transport == Transport::Ud;
        if !ud || pkt.repr.bth.dest_qp != MULTICAST_QPN {
            self.sh.counters.rcvd_bad_context += 1;
            return;
        }
        let count = self.groups.members(&dst).len();
        if count == 0 {
            self.sh.counters.rcvd_unknown_qp += 1;
            return;
        }
        let from_self = self.sh.gids.contains(&src);
        let sender = pkt.repr.ext.deth.map(|d| d.src_qp);
        for i in 0..count {
            let qpn = self.groups.members(&dst)[i];
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if qp.init.block_self_mcast_lb && from_self && sender == Some(qpn) {
                continue;
            }
            if !qp.receives() {
                self.sh.counters.rcvd_bad_context += 1;
                continue;
            }
            responder::handle(qp, &mut self.sh, pkt);
            self.mark_ready(qpn);
        }
    }

    /// QP1, the General Services Interface (IBA 13.5): UD SEND_ONLY packets with the GSI's
    /// Q_Key carry MADs, which go to the CM. Anything else for QP1 is dropped and counted.
    fn gsi_receive(&mut self, now: Instant, pkt: &frame::ParsedFrame, src: Gid, dst: Gid) {
        let deth = pkt.repr.ext.deth;
        if pkt.repr.bth.opcode != Opcode::UdSendOnly {
            self.sh.counters.rcvd_bad_context += 1;
            return;
        }
        if deth.is_none_or(|d| d.qkey != GSI_QKEY) {
            self.sh.counters.qkey_violation += 1;
            return;
        }
        let from = Peer {
            gid: src,
            local: dst,
            mac: pkt.repr.eth.src.0,
        };
        let dropped = self.cm.dropped;
        self.cm.handle_mad(now, from, pkt.payload());
        self.sh.counters.cm_mad_dropped += self.cm.dropped - dropped;
    }

    /// The next MAD the CM sends, as a UD SEND_ONLY frame from QP1 to the peer's QP1.
    fn gsi_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        while let Some(o) = self.cm.poll_transmit() {
            let ah = AddressHandle {
                dgid: o.to.gid,
                sgid_index: self.sh.gids.iter().position(|g| *g == o.to.local)? as u8,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
                dmac: EthernetAddress(o.to.mac),
            };
            let Some(path) = self.sh.path(&ah, 0xc000 | (GSI_QPN as u16)) else {
                continue;
            };
            let psn = self.gsi_psn;
            self.gsi_psn = psn::add(psn, 1);
            let ext = ExtRepr {
                deth: Some(DethRepr {
                    qkey: GSI_QKEY,
                    src_qp: GSI_QPN,
                }),
                ..ExtRepr::default()
            };
            let repr = path.frame(BthRepr::new(Opcode::UdSendOnly, GSI_QPN, psn), ext);
            if let Ok(n) = repr.emit(&o.mad, buf) {
                self.sh.counters.sent_pkts += 1;
                return Some(n);
            }
        }
        None
    }

    /// Writes the next frame to send into `buf` (at least [`MAX_FRAME`] bytes) and returns its
    /// length, or `None` when nothing is ready. Management datagrams go first, then responses,
    /// then new requests.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let Some(n) = self.gsi_transmit(buf) {
            return Some(n);
        }
        while let Some(qpn) = self.ready.pop_front() {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            qp.queued = false;
            let n = notification::poll(qp, &mut self.sh, now, buf)
                .or_else(|| responder::poll(qp, &mut self.sh, now, buf))
                .or_else(|| requester::poll(qp, &mut self.sh, now, buf));
            if let Some(n) = n {
                qp.queued = true;
                self.ready.push_back(qpn);
                return Some(n);
            }
        }
        None
    }

    /// Like [`poll_transmit`](Self::poll_transmit), but only responses (ACKs, NAKs, READ
    /// responses, atomic ACKs): what a caller that delivers frames to another engine in the
    /// same pass sends before completions reach the program, so a responder's ACK leaves no
    /// later than the completion it acknowledges is seen (a program may exit at once, taking
    /// its QP with it). Requests wait for the next `poll_transmit`.
    pub fn poll_response(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        for &qpn in &self.ready {
            if let Some(qp) = self.qps.get_mut(&qpn)
                && let Some(n) = responder::poll(qp, &mut self.sh, now, buf)
            {
                return Some(n);
            }
        }
        None
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.sh
            .timers
            .next()
            .into_iter()
            .chain(self.cm.poll_timeout())
            .min()
    }

    /// Runs the timers that are due at `now`: ACK timeouts (go-back-N or retry exhaustion) and
    /// the ends of RNR waits.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.cm.handle_timeout(now);
        while let Some((qpn, timer)) = self.sh.timers.pop_due(now) {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if timer == Timer::Ack {
                let directive = completer::timeout(qp, &mut self.sh, now);
                requester::follow(qp, &mut self.sh, directive);
            }
            // Either way the requester may send again.
            self.mark_ready(qpn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::ConnectParams;
    use crate::memory::HeapMemory;
    use crate::{QpCap, QpInit, QpType};

    #[test]
    fn a_qp_number_whose_connection_is_not_over_is_not_given_again() {
        let config = Config {
            seed: 7,
            key_secret: 7,
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            gids: vec![Gid::from(core::net::Ipv4Addr::new(198, 18, 0, 1))],
            eth_mtu: 1500,
            device: DeviceAttr::default(),
            lane: Lane::ONLY,
        };
        let mut e = Engine::new(config, HeapMemory::default());
        let pd = e.alloc_pd(0).unwrap();
        let cq = e.create_cq(4).unwrap();
        let init = QpInit::new(QpType::Rc, cq, QpCap::new(1, 1, 0));
        let qpn = e.create_qp(pd, init).unwrap();
        let peer = Peer {
            gid: Gid::from(core::net::Ipv4Addr::new(198, 18, 0, 2)),
            local: e.gids()[0],
            mac: [2, 0, 0, 0, 0, 2],
        };
        e.cm()
            .connect(Instant::ZERO, ConnectParams::rc(peer, 1, qpn, 0))
            .unwrap();
        e.destroy_qp(qpn).unwrap();
        // The allocator comes round to the number again: it is skipped while the CM holds it.
        e.next_qpn = qpn;
        let next = e.create_qp(pd, init).unwrap();
        assert_ne!(next, qpn);
        assert_eq!(next, qpn + 1);
    }
}
