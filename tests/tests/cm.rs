//! The Communication Manager between two engines over the simulated network, as rdma_cm uses
//! it: REQ, REP and RTU (MADs to QP1) connect two RC QPs, which then carry a SEND; DREQ and DREP
//! disconnect them and TIMEWAIT ends. Lost MADs are resent; a REQ nobody listens for is
//! rejected; a peer that never answers ends in UNREACHABLE after the retries.

use softrnic_emu_core::cm::{AcceptParams, CmEvent, ConnId, ConnectParams, Peer};
use softrnic_emu_core::{
    Instant, QpCap, QpInit, QpType, RecvWr, SendFlags, SendOp, SendWr, Sge, Wc, WcOpcode, WcStatus,
};
use softrnic_tests::sim::{Fate, LinkSpec, Settings, Sim};
use softrnic_wire::cm::{ip_service_id, port_space, rej_reason};
use softrnic_wire::{Opcode, mad};

const PORT: u16 = 7174;

struct Hosts {
    sim: Sim,
    qp: [u32; 2],
    cq: [u32; 2],
    pd: [u32; 2],
    /// CM events seen and not yet looked at, per host.
    seen: [Vec<CmEvent>; 2],
}

impl Hosts {
    fn new() -> Hosts {
        let mut sim = Sim::new(7, 2, LinkSpec::default());
        sim.record = true;
        let (mut qp, mut cq, mut pd) = ([0; 2], [0; 2], [0; 2]);
        for h in 0..2 {
            let e = &mut sim.hosts[h].engine;
            pd[h] = e.alloc_pd(0).unwrap();
            cq[h] = e.create_cq(16).unwrap();
            let init = QpInit::new(QpType::Rc, cq[h], QpCap::new(8, 1, 0));
            qp[h] = e.create_qp(pd[h], init).unwrap();
        }
        Hosts {
            sim,
            qp,
            cq,
            pd,
            seen: [Vec::new(), Vec::new()],
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.sim.now)
    }

    /// Host `of` as host `from` reaches it.
    fn peer(&self, of: usize, from: usize) -> Peer {
        Peer {
            gid: self.sim.hosts[of].gid,
            local: self.sim.hosts[from].gid,
            mac: self.sim.hosts[of].mac.0,
        }
    }

    fn events(&mut self, h: usize) -> Vec<CmEvent> {
        std::mem::take(&mut self.seen[h])
    }

    /// Runs until host `h` has a CM event (its consumer acts on it at once: one that sat on a
    /// REQ would see its peer give up) or nothing is left to happen.
    fn wait(&mut self, h: usize) {
        for _ in 0..100_000 {
            for (host, seen) in self.seen.iter_mut().enumerate() {
                let cm = self.sim.hosts[host].engine.cm();
                seen.extend(std::iter::from_fn(|| cm.poll_event()));
            }
            if !self.seen[h].is_empty() || !self.sim.step() {
                return;
            }
        }
        panic!("no end (livelock?)");
    }

    /// Runs until nothing is left to happen (timers included), keeping the events.
    fn run_idle(&mut self) {
        self.sim.run_idle(100_000).unwrap();
        for (host, seen) in self.seen.iter_mut().enumerate() {
            let cm = self.sim.hosts[host].engine.cm();
            seen.extend(std::iter::from_fn(|| cm.poll_event()));
        }
    }

    fn connect(&mut self, port: u16) -> ConnId {
        let service = ip_service_id(port_space::TCP, port);
        let params = ConnectParams::rc(self.peer(1, 0), service, self.qp[0], 100);
        let now = self.now();
        self.sim.hosts[0].engine.cm().connect(now, params).unwrap()
    }

    /// Connects host 0's QP to host 1's through the CM, as rdma_connect and rdma_accept do:
    /// each side moves its QP to RTS with what the other's message said.
    fn established(&mut self) -> (ConnId, ConnId) {
        let service = ip_service_id(port_space::TCP, PORT);
        self.sim.hosts[1].engine.cm().listen(service).unwrap();
        let a = self.connect(PORT);
        self.wait(1);
        let (b, req) = match self.events(1).as_slice() {
            [CmEvent::ReqReceived { id, req }] => {
                assert_eq!(req.peer.gid, self.sim.hosts[0].gid);
                (*id, req.clone())
            }
            e => panic!("{e:?}"),
        };
        assert_eq!((req.qpn, req.starting_psn), (self.qp[0], 100));
        // A REQ's or REP's starting PSN is the one its sender receives from first: the other
        // side sends from it (as the kernel's ib_cm uses it). Host 1 receives from 200.
        let peer0 = self.sim.endpoint(0, req.qpn, 200);
        self.sim.connect(
            1,
            self.qp[1],
            req.starting_psn,
            &peer0,
            &Settings::default(),
        );
        let accept = AcceptParams {
            qpn: self.qp[1],
            starting_psn: 200,
            responder_resources: 4,
            initiator_depth: 4,
            rnr_retry_count: 7,
            srq: false,
            private_data: Vec::new(),
        };
        let now = self.now();
        self.sim.hosts[1]
            .engine
            .cm()
            .accept(now, b, accept)
            .unwrap();
        self.wait(0);
        let (qpn, psn) = match self.events(0).as_slice() {
            [
                CmEvent::RepReceived {
                    id,
                    qpn,
                    starting_psn,
                    ..
                },
            ] if *id == a => (*qpn, *starting_psn),
            e => panic!("{e:?}"),
        };
        let peer1 = self.sim.endpoint(1, qpn, 100);
        self.sim
            .connect(0, self.qp[0], psn, &peer1, &Settings::default());
        self.sim.hosts[0].engine.cm().ready_to_use(a, &[]).unwrap();
        self.wait(1);
        assert_eq!(self.events(0), [CmEvent::Established { id: a }]);
        assert_eq!(self.events(1), [CmEvent::Established { id: b }]);
        (a, b)
    }

    /// A SEND from host 0 to host 1 over the connected QPs.
    fn send(&mut self) -> Vec<Wc> {
        let buf = self.sim.hosts[1].engine.memory_mut().alloc(64);
        let access = softrnic_emu_core::Access::LOCAL_WRITE;
        let key = self.sim.hosts[1]
            .engine
            .reg_mr(self.pd[1], buf, 64, access)
            .unwrap();
        let sgl = vec![Sge {
            addr: buf,
            length: 64,
            lkey: key,
        }];
        let e = &mut self.sim.hosts[1].engine;
        e.post_recv(self.qp[1], RecvWr { wr_id: 9, sgl }).unwrap();
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sgl: Vec::new(),
            flags: SendFlags::SIGNALED,
            ud: None,
            xrc_srqn: None,
        };
        self.sim.hosts[0].engine.post_send(self.qp[0], wr).unwrap();
        self.run_idle();
        let mut out = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 4];
        let mut got = Vec::new();
        for h in 0..2 {
            let n = self.sim.hosts[h]
                .engine
                .poll_cq(self.cq[h], &mut out)
                .unwrap();
            got.extend_from_slice(&out[..n]);
        }
        got
    }

    /// The CM's MADs on the wire so far, by sender.
    fn mads(&self) -> Vec<(usize, Opcode)> {
        self.sim
            .trace
            .iter()
            .filter(|s| s.opcode == Opcode::UdSendOnly && s.len == mad::MAD_LEN)
            .map(|s| (s.from, s.opcode))
            .collect()
    }
}

#[test]
fn rdma_cm_style_connect_send_and_disconnect_over_the_wire() {
    let mut h = Hosts::new();
    let (a, b) = h.established();
    // REQ, REP, RTU: three MADs, UD SEND_ONLY to QP1.
    assert_eq!(h.mads().iter().map(|m| m.0).collect::<Vec<_>>(), [0, 1, 0]);
    let wcs = h.send();
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    let now = h.now();
    h.sim.hosts[0].engine.cm().disconnect(now, a).unwrap();
    h.wait(1);
    // The passive side hears it, and answers when its consumer disconnects too.
    assert_eq!(h.events(1), [CmEvent::Disconnected { id: b }]);
    let now = h.now();
    h.sim.hosts[1].engine.cm().disconnect(now, b).unwrap();
    h.run_idle();
    // Both saw the end of the connection, then of TIMEWAIT (run_idle waited it out).
    assert_eq!(
        h.events(0),
        [
            CmEvent::Disconnected { id: a },
            CmEvent::TimewaitExit { id: a }
        ]
    );
    assert_eq!(h.events(1), [CmEvent::TimewaitExit { id: b }]);
    assert_eq!(h.mads().len(), 5, "REQ, REP, RTU, DREQ, DREP");
}

#[test]
fn a_lost_req_and_a_lost_rep_are_sent_again() {
    let mut h = Hosts::new();
    // The first REQ and the first REP are lost.
    let mut lost = [false; 2];
    h.sim.hook = Some(Box::new(move |s| {
        let is_mad = s.opcode == Opcode::UdSendOnly && s.len == mad::MAD_LEN;
        if is_mad && !lost[s.from] {
            lost[s.from] = true;
            return Some(Fate::Dropped);
        }
        None
    }));
    h.established();
    assert_eq!(h.send().len(), 2);
    // REQ (lost), REQ, REP (lost), then B's REP again and A's answer.
    assert!(h.mads().len() >= 5, "{:?}", h.mads());
}

#[test]
fn a_req_nobody_listens_for_is_rejected() {
    let mut h = Hosts::new();
    let a = h.connect(PORT + 1);
    h.wait(0);
    match h.events(0).as_slice() {
        [CmEvent::Rejected { id, reason, .. }] => {
            assert_eq!((*id, *reason), (a, rej_reason::INVALID_SERVICE_ID));
        }
        e => panic!("{e:?}"),
    }
    assert!(h.events(1).is_empty());
}

#[test]
fn a_peer_that_never_answers_is_unreachable_within_the_retries() {
    let mut h = Hosts::new();
    h.sim.partition = Some((0, u64::MAX));
    let a = h.connect(PORT);
    h.run_idle();
    assert_eq!(h.events(0), [CmEvent::Unreachable { id: a }]);
    // The REQ and its 15 retries (rdma_cm's count), each after the 4.3 s response timeout.
    let reqs = h.mads().iter().filter(|m| m.0 == 0).count();
    assert_eq!(reqs, 16 + 1, "16 REQs and the REJ that gives up");
    let waited = std::time::Duration::from_nanos(h.sim.now);
    assert!(
        waited.as_secs() >= 16 * 4 && waited.as_secs() <= 16 * 5,
        "{waited:?}"
    );
}

#[test]
fn malformed_mads_are_dropped_and_counted() {
    use softrnic_wire::bth::BthRepr;
    use softrnic_wire::deth::DethRepr;
    use softrnic_wire::frame::ExtRepr;
    let mut h = Hosts::new();
    let service = ip_service_id(port_space::TCP, PORT);
    h.sim.hosts[1].engine.cm().listen(service).unwrap();
    // A REQ of the right length, then the same bytes truncated, of another management class,
    // and with an unknown attribute.
    let mut req = [0u8; mad::MAD_LEN];
    let params = ConnectParams::rc(h.peer(1, 0), service, h.qp[0], 100);
    let mut cm = softrnic_emu_core::cm::Cm::new(1, 1);
    cm.connect(Instant::ZERO, params).unwrap();
    req.copy_from_slice(&cm.poll_transmit().unwrap().mad);
    let mut other_class = req;
    other_class[1] = 0x04; // the performance management class
    let mut unknown = req;
    unknown[16..18].copy_from_slice(&0x7777u16.to_be_bytes());
    let bad: [&[u8]; 3] = [&req[..100], &other_class, &unknown];
    for payload in bad {
        let ext = ExtRepr {
            deth: Some(DethRepr {
                qkey: mad::GSI_QKEY,
                src_qp: mad::GSI_QPN,
            }),
            ..ExtRepr::default()
        };
        let bth = BthRepr::new(Opcode::UdSendOnly, mad::GSI_QPN, 0);
        let frame = h.sim.frame(0, 1, bth, ext, payload);
        h.sim.inject(1, frame);
    }
    h.run_idle();
    assert_eq!(h.sim.hosts[1].engine.counters().cm_mad_dropped, 3);
    assert!(h.events(1).is_empty(), "nothing reached the consumer");
    assert!(h.mads().is_empty(), "nothing was answered");
    // The CM goes on: a real connection is made after them.
    h.sim.hosts[1].engine.cm().unlisten(service);
    h.established();
}
