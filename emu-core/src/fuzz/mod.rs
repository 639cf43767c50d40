//! The bodies of the engine's fuzz targets (`fuzz/fuzz_targets/engine_*.rs`; the CM's in
//! [`cm`]). They also run as ordinary tests over the checked-in corpus, so stable CI exercises
//! them.
//!
//! Whatever the input, these must hold: no panic; no memory access outside a registered region
//! ([`Guarded`] panics on one); and [`Engine::check_invariants`] after every step.
//!
//! The inputs are structure-aware ([`FrameSpec`] builds well-formed frames aimed at the QPs'
//! expected PSNs and keys), with raw bytes alongside, so the fuzzer reaches deep into the
//! responder and completer instead of stopping at the parser.

use arbitrary::{Arbitrary, Unstructured};
use smoltcp::wire::EthernetAddress;
use softrnic_wire::opcode::TABLE;
use softrnic_wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, EthRepr, ExtRepr, FrameRepr, Headers,
    IpRepr, RethRepr, Syndrome, UdpRepr, bth::BthRepr,
};

mod cm;
pub use cm::cm;

use crate::memory::{Fault, HeapMemory, Memory, Space};
use crate::{
    Access, AddressHandle, AttrMask, Config, DeviceAttr, Engine, Gid, Instant, Lane, MAX_FRAME,
    Mtu, MwBind, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr, Remote, SendFlags, SendOp, SendWr,
    Sge, UdDest, Wc, WcOpcode, WcStatus,
};

/// Memory that panics on any access outside the ranges registered through it.
#[derive(Debug, Default, Clone)]
pub struct Guarded {
    heap: HeapMemory,
    live: Vec<(u64, u64, u32)>,
}

impl Guarded {
    fn check(&self, addr: u64, len: usize) {
        let end = addr + len as u64;
        assert!(
            len == 0 || self.live.iter().any(|&(a, l, _)| addr >= a && end <= a + l),
            "the engine accessed {addr:#x}..{end:#x}, outside every registered region"
        );
    }
}

impl Memory for Guarded {
    fn read(&self, space: Space, addr: u64, dst: &mut [u8]) -> Result<(), Fault> {
        self.check(addr, dst.len());
        self.heap.read(space, addr, dst)
    }
    fn write(&mut self, space: Space, addr: u64, src: &[u8]) -> Result<(), Fault> {
        self.check(addr, src.len());
        self.heap.write(space, addr, src)
    }
}

const LOCAL: [u8; 4] = [198, 18, 0, 1];
const PEER: [u8; 4] = [198, 18, 0, 2];
const LOCAL_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const BUF_LEN: usize = 8192;
const QKEY: u32 = 0x1111_1111;

#[derive(Debug, Clone, Copy)]
struct QpInfo {
    qpn: u32,
    /// The peer's QPN and the PSNs each way.
    peer: u32,
    rq_psn: u32,
    sq_psn: u32,
}

#[derive(Debug, Clone, Copy)]
struct Buf {
    addr: u64,
    key: Option<u32>,
}

/// A device with QPs of every type in every state, some with work outstanding.
#[derive(Clone)]
struct World {
    engine: Engine<Guarded>,
    pd: u32,
    cq: u32,
    srq: u32,
    /// The XRC SRQ behind the world's XRC target QP (the last of `qps`).
    xrc_srq: u32,
    qps: Vec<QpInfo>,
    bufs: Vec<Buf>,
    now: u64,
    /// Where the engine writes frames, and where the harness builds them.
    scratch: Vec<u8>,
    frame: Vec<u8>,
    /// The consumer of the engine's Communication Manager.
    cm: cm::CmSide,
}

/// Multicast group `g` of four, an IPv4 one (RoCEv2 maps it to an IPv4-mapped GID).
fn group(g: u8) -> [u8; 4] {
    [239, 1, 0, g % 4]
}

fn ah() -> AddressHandle {
    AddressHandle::to(Gid::from(core::net::Ipv4Addr::from(PEER)), 0).via(PEER_MAC)
}

impl World {
    fn new() -> World {
        let config = Config {
            seed: 7,
            key_secret: 7,
            mac: LOCAL_MAC,
            gids: vec![Gid::from(core::net::Ipv4Addr::from(LOCAL))],
            eth_mtu: 9000,
            device: DeviceAttr::default(),
            lane: Lane::ONLY,
        };
        let mut engine = Engine::new(config, Guarded::default());
        let pd = engine.alloc_pd(0).expect("pd");
        let cq = engine.create_cq(32).expect("cq");
        let srq = engine.create_srq(pd, 16, 2).expect("srq");
        let mut w = World {
            engine,
            pd,
            cq,
            srq,
            xrc_srq: 0,
            qps: Vec::new(),
            bufs: Vec::new(),
            now: 0,
            scratch: vec![0; MAX_FRAME],
            frame: vec![0; MAX_FRAME + 64],
            cm: cm::CmSide::new(),
        };
        let all = Access::from_bits_retain(15) | Access::MW_BIND | Access::FLUSH_GLOBAL;
        for access in [all, Access::LOCAL_WRITE, Access::REMOTE_READ] {
            let addr = w.engine.memory_mut().heap.alloc(BUF_LEN);
            w.bufs.push(Buf { addr, key: None });
            w.register(w.bufs.len() - 1, access);
        }
        let states = [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Err,
        ];
        for (t, qp_type) in [QpType::Rc, QpType::Uc, QpType::Ud].into_iter().enumerate() {
            for (s, &state) in states.iter().enumerate() {
                for srq in [false, true] {
                    if srq && state != QpState::Rts {
                        continue;
                    }
                    let i = (t * 8 + s) as u32 + u32::from(srq) * 64;
                    w.add_qp(qp_type, state, srq, i);
                }
            }
        }
        w.add_xrc_target();
        w.settle();
        w
    }

    fn register(&mut self, index: usize, access: Access) {
        let b = &mut self.bufs[index];
        if let Ok(key) = self.engine.reg_mr(self.pd, b.addr, BUF_LEN as u64, access) {
            b.key = Some(key);
            self.engine
                .memory_mut()
                .live
                .push((b.addr, BUF_LEN as u64, key));
        }
    }

    fn deregister(&mut self, index: usize) {
        let b = &mut self.bufs[index];
        if let Some(key) = b.key.take()
            && self.engine.dereg_mr(key).is_ok()
        {
            self.engine.memory_mut().live.retain(|r| r.2 != key);
        }
    }

    fn add_qp(&mut self, qp_type: QpType, state: QpState, srq: bool, i: u32) {
        let cap = QpCap::new(16, 2, 64);
        let init = QpInit {
            qp_type,
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: srq.then_some(self.srq),
            cap,
            sq_sig_all: true,
            block_self_mcast_lb: false,
        };
        let Ok(qpn) = self.engine.create_qp(self.pd, init) else {
            return;
        };
        let info = QpInfo {
            qpn,
            peer: 0x100 + i,
            rq_psn: (0x3_0000 * i) & crate::psn::MASK,
            sq_psn: (0x5_0000 * i + 0xff_fff0) & crate::psn::MASK,
        };
        self.qps.push(info);
        let target = match state {
            QpState::Sqd | QpState::Err => QpState::Rts,
            s => s,
        };
        let attr = self.bring_up(info, qp_type, target);
        if state >= QpState::Init && !srq {
            for r in 0..4u64 {
                let sgl = vec![self.sge(0, r as u16 * 2048, 2048)];
                let _ = self.engine.post_recv(qpn, RecvWr { wr_id: r, sgl });
            }
        }
        if srq {
            for r in 0..4u64 {
                let sgl = vec![self.sge(0, r as u16 * 2048, 2048)];
                let _ = self
                    .engine
                    .post_srq_recv(self.srq, RecvWr { wr_id: r, sgl });
            }
        }
        if state >= QpState::Rts {
            // Outstanding work, so responses have something to complete.
            let remote = Remote {
                addr: 0x10_0000,
                rkey: 0x1234,
            };
            let ops = [
                SendOp::Send,
                SendOp::Read(remote),
                SendOp::Write(remote),
                SendOp::FetchAdd { remote, add: 1 },
                SendOp::AtomicWrite {
                    remote,
                    value: [1; 8],
                },
                SendOp::Flush {
                    remote,
                    len: 3000,
                    placement: 1,
                    level: 0,
                },
            ];
            // A different kind of request at the front of each RTS/SQD QP of a type, so that
            // responses of every kind have a WQE to answer at once.
            let mut ops = ops;
            ops.rotate_left(match (srq, state) {
                (true, _) => 1,
                (_, QpState::Sqd) => 3,
                _ => 0,
            });
            for (n, op) in ops.into_iter().enumerate() {
                let len = if op.is_atomic() { 8 } else { 3000 };
                self.post_send(qpn, n as u64, op, self.sge(0, 0, len), SendFlags::empty());
            }
        }
        match state {
            QpState::Sqd => {
                let a = QpAttr {
                    qp_state: QpState::Sqd,
                    en_sqd_async_notify: true,
                    ..attr
                };
                let _ = self.engine.modify_qp(
                    qpn,
                    &a,
                    AttrMask::STATE.union(AttrMask::EN_SQD_ASYNC_NOTIFY),
                );
            }
            QpState::Err => {
                let a = QpAttr {
                    qp_state: QpState::Err,
                    ..attr
                };
                let _ = self.engine.modify_qp(qpn, &a, AttrMask::STATE);
            }
            _ => {}
        }
    }

    /// Takes the QP through the states up to `target`; the attributes it used.
    fn bring_up(&mut self, info: QpInfo, qp_type: QpType, target: QpState) -> QpAttr {
        let attr = QpAttr {
            qp_access_flags: Access::from_bits_retain(15) | Access::FLUSH_GLOBAL,
            qkey: QKEY,
            ah: Some(ah()),
            path_mtu: Mtu::M1024,
            timeout: 10,
            retry_cnt: 2,
            rnr_retry: 3,
            rq_psn: info.rq_psn,
            sq_psn: info.sq_psn,
            max_rd_atomic: 2,
            max_dest_rd_atomic: 2,
            min_rnr_timer: 1,
            dest_qp_num: info.peer,
            en_sqd_async_notify: true,
            ..QpAttr::default()
        };
        for (s, mask) in crate::bring_up(qp_type) {
            if s > target {
                break;
            }
            let _ = self.engine.modify_qp(
                info.qpn,
                &QpAttr {
                    qp_state: s,
                    ..attr
                },
                mask,
            );
        }
        attr
    }

    /// An XRC domain, its SRQ (with receives posted) and a target QP in RTR that takes XRC
    /// requests naming the SRQ (IBA A14).
    fn add_xrc_target(&mut self) {
        let Ok(xrcd) = self.engine.alloc_xrcd() else {
            return;
        };
        let Ok(srq) = self.engine.create_xrc_srq(self.pd, xrcd, self.cq, 16, 2) else {
            return;
        };
        let Ok(qpn) = self.engine.create_xrc_recv_qp(xrcd) else {
            return;
        };
        self.xrc_srq = srq;
        let info = QpInfo {
            qpn,
            peer: 0x1ff,
            rq_psn: 0x42_4242,
            sq_psn: 0,
        };
        self.qps.push(info);
        self.bring_up(info, QpType::XrcRecv, QpState::Rtr);
        for r in 0..4u64 {
            let sgl = vec![self.sge(0, r as u16 * 2048, 2048)];
            let _ = self.engine.post_srq_recv(srq, RecvWr { wr_id: r, sgl });
        }
    }

    fn sge(&self, buf: usize, off: u16, len: u32) -> Sge {
        let b = self.bufs[buf % self.bufs.len()];
        Sge {
            addr: b.addr + off as u64 % BUF_LEN as u64,
            length: len,
            lkey: b.key.unwrap_or(0),
        }
    }

    fn post_send(&mut self, qpn: u32, wr_id: u64, op: SendOp, sge: Sge, flags: SendFlags) {
        let ud = UdDest {
            ah: ah(),
            remote_qpn: 0x200,
            remote_qkey: QKEY,
        };
        let wr = SendWr {
            wr_id,
            op,
            sgl: vec![sge],
            flags,
            ud: Some(ud),
            xrc_srqn: None,
        };
        let _ = self.engine.post_send(qpn, wr);
    }

    /// Sends everything ready (the frames are dropped).
    fn settle(&mut self) {
        let now = Instant::from_nanos(self.now);
        for _ in 0..4096 {
            if self.engine.poll_transmit(now, &mut self.scratch).is_none() {
                break;
            }
        }
    }

    /// The invariants hold; completions and events are consumed.
    fn check(&mut self) {
        if let Err(e) = self.engine.check_invariants() {
            panic!("invariant broken: {e}");
        }
        let mut wcs = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 16];
        while self.engine.poll_cq(self.cq, &mut wcs).unwrap_or(0) > 0 {}
        while self.engine.poll_event().is_some() {}
    }

    /// A MAD from the peer's QP1 to ours (IBA 13.4.6: a UD SEND with the GSI's Q_Key), written
    /// into `out`; its length.
    fn gsi_frame(mad: &[u8], out: &mut [u8]) -> usize {
        use softrnic_wire::mad::{GSI_QKEY, GSI_QPN};
        let repr = FrameRepr {
            eth: EthRepr::untagged(LOCAL_MAC, PEER_MAC),
            ip: IpRepr::v4(PEER.into(), LOCAL.into()),
            udp: UdpRepr::unchecked(0xc000),
            bth: BthRepr::new(softrnic_wire::Opcode::UdSendOnly, GSI_QPN, 0),
            ext: ExtRepr {
                deth: Some(DethRepr {
                    qkey: GSI_QKEY,
                    src_qp: GSI_QPN,
                }),
                ..ExtRepr::default()
            },
        };
        repr.emit(mad, out).unwrap_or(0)
    }

    fn deliver(&mut self, frame: &[u8]) {
        self.engine
            .handle_packet(Instant::from_nanos(self.now), frame);
        self.settle();
    }

    fn advance(&mut self, micros: u32) {
        self.now += micros as u64 * 1000;
        let now = Instant::from_nanos(self.now);
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        self.settle();
    }
}

/// A well-formed frame aimed at one of the world's QPs, from its peer or a stranger.
#[derive(Debug, Clone, Arbitrary)]
pub struct FrameSpec {
    opcode: u8,
    qp: u8,
    psn_delta: i8,
    ack_req: bool,
    solicited: bool,
    buf: u8,
    offset: u16,
    key: u8,
    dma_len: u16,
    syndrome: u8,
    msn: u8,
    swap_add: u64,
    compare: u64,
    imm: u32,
    wrong_qkey: bool,
    payload_len: u16,
    stranger: bool,
    /// To one of the multicast groups (a UD SEND to QPN 0xffffff, IBA 10.5.2.1).
    multicast: Option<u8>,
    /// Marked Congestion Experienced, for the notification point.
    ce: bool,
}

/// The payload of built frames.
const PAYLOAD: [u8; 4096] = [0xa5; 4096];

impl FrameSpec {
    /// Writes the frame into `out`; its length.
    fn build(&self, w: &World, out: &mut [u8]) -> usize {
        let info = TABLE[self.opcode as usize % TABLE.len()];
        let qp = w.qps[self.qp as usize % w.qps.len()];
        let base = if info.operation.is_response() {
            qp.sq_psn
        } else {
            qp.rq_psn
        };
        let psn = crate::psn::add(base, self.psn_delta as i32 as u32);
        let buf = w.bufs[self.buf as usize % w.bufs.len()];
        let key = match self.key % 4 {
            0 | 1 => buf.key.unwrap_or(0),
            2 => buf.key.unwrap_or(0) ^ 1,
            _ => u32::from(self.key) << 8 | 0x5a,
        };
        let va = buf.addr + u64::from(self.offset);
        let mut ext = ExtRepr::default();
        let h = info.headers;
        if h.contains(Headers::DETH) {
            let qkey = if self.wrong_qkey { 7 } else { QKEY };
            ext.deth = Some(DethRepr {
                qkey,
                src_qp: qp.peer,
            });
        }
        if h.contains(Headers::RETH) {
            ext.reth = Some(RethRepr {
                va,
                rkey: key,
                dma_len: u32::from(self.dma_len),
            });
        }
        if h.contains(Headers::ATOMIC_ETH) {
            ext.atomic_eth = Some(AtomicEthRepr {
                va,
                rkey: key,
                swap_add: self.swap_add,
                compare: self.compare,
            });
        }
        if h.contains(Headers::AETH) {
            ext.aeth = Some(AethRepr {
                syndrome: Syndrome::from_byte(self.syndrome),
                msn: u32::from(self.msn),
            });
        }
        if h.contains(Headers::ATOMIC_ACK_ETH) {
            ext.atomic_ack_eth = Some(AtomicAckEthRepr {
                orig: self.swap_add,
            });
        }
        if h.contains(Headers::IMMDT) {
            ext.immdt = Some(self.imm);
        }
        if h.contains(Headers::IETH) {
            ext.ieth = Some(key);
        }
        if h.contains(Headers::XRCETH) {
            ext.xrceth = Some(w.xrc_srq);
        }
        let src = if self.stranger { [198, 18, 0, 9] } else { PEER };
        let (dst, dest_qp) = match self.multicast {
            Some(g) => (group(g), softrnic_wire::MULTICAST_QPN),
            None => (LOCAL, qp.qpn),
        };
        let ecn = if self.ce { 3 } else { 2 };
        let ip = IpRepr::v4(src.into(), dst.into()).with_traffic_class(0, ecn);
        let repr = FrameRepr {
            eth: EthRepr::untagged(LOCAL_MAC, PEER_MAC),
            ip,
            udp: UdpRepr::unchecked(0xc000),
            bth: BthRepr {
                solicited: self.solicited,
                ack_req: self.ack_req,
                ..BthRepr::new(info.opcode, dest_qp, psn)
            },
            ext,
        };
        let len = if info.allows_payload() {
            usize::from(self.payload_len) % (PAYLOAD.len() + 1)
        } else {
            0
        };
        repr.emit(&PAYLOAD[..len], out).unwrap_or(0)
    }
}

/// One step of the frames target.
#[derive(Debug, Clone, Arbitrary)]
enum Step {
    Frame(FrameSpec),
    Raw(Vec<u8>),
    /// A well-formed frame with one byte changed.
    Mutated(FrameSpec, u16, u8),
    Advance(u16),
}

fn step(w: &mut World, s: &Step) {
    let mut f = core::mem::take(&mut w.frame);
    match s {
        Step::Frame(spec) => {
            let n = spec.build(w, &mut f);
            w.deliver(&f[..n]);
        }
        Step::Raw(bytes) => w.deliver(bytes),
        Step::Mutated(spec, at, x) => {
            let n = spec.build(w, &mut f);
            if n > 0 {
                f[*at as usize % n] ^= x;
            }
            w.deliver(&f[..n]);
        }
        Step::Advance(us) => w.advance(u32::from(*us)),
    }
    w.frame = f;
}

/// Arbitrary frames into responders and requesters of every type, in every state.
pub fn frames(data: &[u8]) {
    run(data, step);
}

/// Applies up to 256 inputs decoded from `data` to a fresh world, checking after each.
fn run<'a, T: Arbitrary<'a>>(data: &'a [u8], apply: fn(&mut World, &T)) {
    // Built once; each input starts from a copy (cheaper than building it, and the same).
    thread_local!(static WORLD: World = World::new());
    let mut u = Unstructured::new(data);
    let mut w = WORLD.with(World::clone);
    for _ in 0..256 {
        let Ok(input) = T::arbitrary(&mut u) else {
            break;
        };
        apply(&mut w, &input);
        w.check();
    }
}

/// A verbs call, a frame, or time passing.
#[derive(Debug, Clone, Arbitrary)]
enum Action {
    Step(Step),
    PostSend {
        qp: u8,
        op: u8,
        buf: u8,
        offset: u16,
        len: u16,
        remote_buf: u8,
        key: u8,
        flags: u8,
        value: u64,
    },
    PostRecv {
        qp: u8,
        buf: u8,
        offset: u16,
        len: u16,
        srq: bool,
    },
    Modify {
        qp: u8,
        state: u8,
        mask: u32,
        value: u32,
    },
    Register {
        buf: u8,
        access: u8,
    },
    Deregister {
        buf: u8,
    },
    Window {
        buf: u8,
        type2: bool,
        offset: u16,
        len: u16,
        qp: u8,
    },
    NotifyCq(bool),
    SrqLimit(u8),
    DestroyQp(u8),
    /// A QP joins or leaves a multicast group.
    Multicast {
        qp: u8,
        group: u8,
        join: bool,
    },
    /// DCQCN's notification and reaction points on or off, and one parameter set by name as
    /// `softrnic dcqcn` sets it (the rest at their defaults).
    Dcqcn {
        np: bool,
        rp: bool,
        rate_gbps: u8,
        param: Option<(u8, String)>,
    },
    /// A step of a conversation with the engine's Communication Manager: the peer's MADs
    /// arrive in frames to QP1, and the CM's go out through `poll_transmit`.
    Cm(cm::CmStep),
}

fn act(w: &mut World, a: &Action) {
    match *a {
        Action::Step(ref s) => step(w, s),
        Action::PostSend {
            qp,
            op,
            buf,
            offset,
            len,
            remote_buf,
            key,
            flags,
            value,
        } => {
            let Some(info) = w.qps.get(qp as usize % w.qps.len().max(1)).copied() else {
                return;
            };
            let rb = w.bufs[remote_buf as usize % w.bufs.len()];
            let remote = Remote {
                addr: rb.addr + (offset as u64 & !7),
                rkey: rb.key.unwrap_or(0) ^ u32::from(key & 1),
            };
            let op = match op % 10 {
                0 => SendOp::Send,
                1 => SendOp::SendWithImm(value as u32),
                2 => SendOp::SendWithInv(remote.rkey),
                3 => SendOp::Write(remote),
                4 => SendOp::WriteWithImm(remote, value as u32),
                5 => SendOp::Read(remote),
                6 => SendOp::CompareSwap {
                    remote,
                    compare: value,
                    swap: !value,
                },
                7 => SendOp::FetchAdd { remote, add: value },
                8 => SendOp::LocalInv(remote.rkey),
                _ => SendOp::BindMw(MwBind {
                    mw_rkey: value as u32,
                    new_key: key,
                    mr_lkey: remote.rkey,
                    addr: remote.addr,
                    len: u64::from(len),
                    access: Access::from_bits_retain(u32::from(flags) & 15),
                }),
            };
            // Inline data is read at post time without a key check (IBA 10.8.2.2), so keep it
            // inside a registered buffer, as a correct program does.
            let inline = flags & 8 != 0 && w.bufs[buf as usize % w.bufs.len()].key.is_some();
            let flags = if inline { flags } else { flags & !8 };
            let len = if inline {
                u32::from(len % 64)
            } else {
                u32::from(len)
            };
            let offset = if inline { offset % 4096 } else { offset };
            let sge = w.sge(buf as usize, offset, len);
            let flags = SendFlags::from_bits_truncate(u32::from(flags));
            w.post_send(info.qpn, 0, op, sge, flags);
            w.settle();
        }
        Action::PostRecv {
            qp,
            buf,
            offset,
            len,
            srq,
        } => {
            let sgl = vec![w.sge(buf as usize, offset, u32::from(len))];
            let wr = RecvWr { wr_id: 9, sgl };
            let _ = if srq {
                w.engine.post_srq_recv(w.srq, wr)
            } else {
                let qpn = w.qps[qp as usize % w.qps.len()].qpn;
                w.engine.post_recv(qpn, wr)
            };
        }
        Action::Modify {
            qp,
            state,
            mask,
            value,
        } => {
            let qpn = w.qps[qp as usize % w.qps.len()].qpn;
            let states = [
                QpState::Reset,
                QpState::Init,
                QpState::Rtr,
                QpState::Rts,
                QpState::Sqd,
                QpState::Sqe,
                QpState::Err,
            ];
            let attr = QpAttr {
                qp_state: states[state as usize % states.len()],
                cur_qp_state: states[(state >> 4) as usize % states.len()],
                qp_access_flags: Access::from_bits_retain(value & 15),
                qkey: value,
                ah: Some(ah()),
                path_mtu: Mtu::from_ibv((value % 5) as u8 + 1).unwrap_or(Mtu::M1024),
                timeout: (value % 32) as u8,
                retry_cnt: (value % 8) as u8,
                rnr_retry: (value >> 3) as u8 % 8,
                rq_psn: value & crate::psn::MASK,
                sq_psn: value.rotate_left(8) & crate::psn::MASK,
                max_rd_atomic: (value % 17) as u8,
                max_dest_rd_atomic: (value % 19) as u8,
                min_rnr_timer: (value % 32) as u8,
                dest_qp_num: value & crate::psn::MASK,
                ..QpAttr::default()
            };
            let _ = w
                .engine
                .modify_qp(qpn, &attr, AttrMask::from_bits_retain(mask & 0x1f_ffff));
            w.settle();
        }
        Action::Register { buf, access } => {
            let i = buf as usize % w.bufs.len();
            w.deregister(i);
            w.register(i, Access::from_bits_retain(u32::from(access) & 63));
        }
        Action::Deregister { buf } => w.deregister(buf as usize % w.bufs.len()),
        Action::Window {
            buf,
            type2,
            offset,
            len,
            qp,
        } => {
            let t = if type2 {
                crate::MwType::Type2
            } else {
                crate::MwType::Type1
            };
            if let Ok(mw) = w.engine.alloc_mw(w.pd, t) {
                let b = w.bufs[buf as usize % w.bufs.len()];
                let bind = MwBind {
                    mw_rkey: mw,
                    new_key: 3,
                    mr_lkey: b.key.unwrap_or(0),
                    addr: b.addr + u64::from(offset),
                    len: u64::from(len),
                    access: Access::REMOTE_WRITE.union(Access::REMOTE_READ),
                };
                let qpn = w.qps[qp as usize % w.qps.len()].qpn;
                let sge = w.sge(0, 0, 0);
                w.post_send(qpn, 0, SendOp::BindMw(bind), sge, SendFlags::empty());
                w.settle();
            }
        }
        Action::NotifyCq(solicited) => {
            let _ = w.engine.req_notify_cq(w.cq, solicited);
        }
        Action::SrqLimit(limit) => {
            let _ = w.engine.modify_srq_limit(w.srq, u32::from(limit % 20));
        }
        Action::Multicast { qp, group: g, join } => {
            let qpn = w.qps[qp as usize % w.qps.len()].qpn;
            let gid = Gid::from(core::net::Ipv4Addr::from(group(g)));
            let _ = if join {
                w.engine.attach_mcast(qpn, gid)
            } else {
                w.engine.detach_mcast(qpn, gid)
            };
        }
        Action::Dcqcn {
            np,
            rp,
            rate_gbps,
            ref param,
        } => {
            let mut d = crate::Dcqcn {
                np_enabled: np,
                rp_enabled: rp,
                line_rate_mbps: f64::from(rate_gbps.max(1)) * 1000.0,
                ..crate::Dcqcn::default()
            };
            if let Some((n, value)) = param {
                let name = crate::Dcqcn::NAMES[usize::from(*n) % crate::Dcqcn::NAMES.len()];
                // A value it takes reads back as text that sets the same value again.
                if d.set(name, value).is_ok() {
                    let shown = d.get(name).expect("a known name");
                    let mut again = d;
                    again.set(name, &shown).expect("what get shows, set takes");
                    assert_eq!(again, d, "{name}: {value:?} read back as {shown:?}");
                }
            }
            w.engine.set_dcqcn(d);
            w.settle();
        }
        Action::Cm(ref s) => {
            match (s, w.cm.mad(s)) {
                (_, Some(mad)) => {
                    let mut f = core::mem::take(&mut w.frame);
                    let n = World::gsi_frame(&mad, &mut f);
                    w.deliver(&f[..n]);
                    w.frame = f;
                }
                (cm::CmStep::Advance(us), None) => w.advance(*us),
                (_, None) => {
                    let now = Instant::from_nanos(w.now);
                    w.cm.call(w.engine.cm(), now, s);
                    w.settle();
                }
            }
            w.cm.events(w.engine.cm());
        }
        Action::DestroyQp(qp) => {
            if w.qps.len() > 1 {
                let i = qp as usize % w.qps.len();
                let _ = w.engine.destroy_qp(w.qps[i].qpn);
                w.qps.remove(i);
            }
        }
    }
}

/// Arbitrary sequences of verbs calls, frames and time.
pub fn ops(data: &[u8]) {
    run(data, act);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_world_is_consistent_and_reachable() {
        let mut w = World::new();
        assert_eq!(w.qps.len(), 22);
        w.engine.check_invariants().unwrap();
        // The XRC target takes requests, and UD QPs can join the groups frames go to.
        let xrc = w.qps.last().unwrap().qpn;
        assert_eq!(w.engine.query_qp(xrc).unwrap().0.qp_state, QpState::Rtr);
        let ud = w
            .qps
            .iter()
            .find(|q| w.engine.qp_type(q.qpn) == Some(QpType::Ud))
            .unwrap();
        let gid = Gid::from(core::net::Ipv4Addr::from(group(1)));
        w.engine.attach_mcast(ud.qpn, gid).unwrap();
        // A REQ in a frame to QP1 reaches the engine's CM once it listens.
        act(&mut w, &Action::Cm(cm::CmStep::Listen(1)));
        let req = cm::CmStep::Message {
            kind: 0,
            ours: 0,
            theirs: 1,
            tid: 1,
            service: 1,
            value: 0,
            private: vec![],
        };
        act(&mut w, &Action::Cm(req));
        assert_eq!(w.cm.ids.len(), 1);
        // Every byte pattern runs without panicking.
        for seed in 0..200u32 {
            let data: Vec<u8> = (0..512u32)
                .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed * 97) >> 13) as u8)
                .collect();
            frames(&data);
            ops(&data);
            cm(&data);
        }
    }
}
