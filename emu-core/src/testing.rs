//! A bench for the roles' unit tests: one RC QP in RTS on a real engine, facing a peer that
//! exists only as the frames a test writes by hand, and everything the engine sends, parsed.

use softrnic_wire::{
    AethRepr, CreditCount, EthRepr, EthernetAddress, ExtRepr, FrameRepr, IpRepr, Opcode, RethRepr,
    Syndrome, UdpRepr, bth::BthRepr, frame,
};

use crate::ah::AddressHandle;
use crate::attr::{DeviceAttr, Mtu};
use crate::cq::{Wc, WcOpcode, WcStatus};
use crate::engine::{Config, Engine, MAX_FRAME};
use crate::gid::Gid;
use crate::keys::Access;
use crate::lane::Lane;
use crate::memory::HeapMemory;
use crate::qp::QpInit;
use crate::qp_attr::{QpAttr, QpType};
use crate::time::Instant;
use crate::wr::{QpCap, RecvWr, Remote, SendOp, SendWr, Sge};

const LOCAL: [u8; 4] = [198, 18, 0, 1];
const PEER: [u8; 4] = [198, 18, 0, 2];
const LOCAL_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
/// The peer's QP number.
pub const PEER_QPN: u32 = 0x99;
/// The first PSN the QP sends.
pub const SQ_PSN: u32 = 100;
/// The first PSN the QP expects.
pub const RQ_PSN: u32 = 500;
/// The path MTU.
pub const MTU: u32 = 1024;
/// A positive ACK, as softrnic and rxe send it (no credit count).
pub const ACK: Syndrome = Syndrome::Ack(CreditCount::INVALID);
/// A peer's buffer, for READs and WRITEs the QP sends.
pub const REMOTE: Remote = Remote {
    addr: 0x10_0000,
    rkey: 0x1234,
};
/// The registered buffer's length.
pub const BUF_LEN: usize = 256 * 1024;

/// A frame the engine sent, as a test asserts on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    pub opcode: Opcode,
    pub psn: u32,
    pub ack_req: bool,
    pub syndrome: Option<Syndrome>,
    pub payload: Vec<u8>,
    pub ext: ExtRepr,
}

/// The engine, its QP and a registered buffer (key valid as lkey and rkey, every access).
pub struct Bench {
    pub engine: Engine<HeapMemory>,
    pub qpn: u32,
    pub cq: u32,
    pub buf: u64,
    pub key: u32,
    pub now: Instant,
}

impl Bench {
    /// An RC QP in RTS towards [`PEER_QPN`]: path MTU 1024, ACK timeout 10 (4 ms), 2
    /// retries, 2 RNR retries, 2 READs/atomics outstanding each way.
    pub fn rc() -> Bench {
        Bench::new(QpType::Rc)
    }

    /// As [`rc`](Self::rc), a UC QP (which allows RDMA WRITEs only).
    pub fn uc() -> Bench {
        Bench::new(QpType::Uc)
    }

    fn new(qp_type: QpType) -> Bench {
        let config = Config {
            seed: 3,
            key_secret: 3,
            mac: LOCAL_MAC,
            gids: vec![Gid::from(core::net::Ipv4Addr::from(LOCAL))],
            eth_mtu: 9000,
            device: DeviceAttr::default(),
            lane: Lane::ONLY,
        };
        let mut engine = Engine::new(config, HeapMemory::new());
        let pd = engine.alloc_pd(0).unwrap();
        let cq = engine.create_cq(64).unwrap();
        let qpn = engine
            .create_qp(pd, QpInit::new(qp_type, cq, QpCap::new(32, 2, 64)))
            .unwrap();
        let buf = engine.memory_mut().alloc(BUF_LEN);
        let key = engine
            .reg_mr(
                pd,
                buf,
                BUF_LEN as u64,
                Access::all().difference(Access::ZERO_BASED | Access::FLUSH_PERSISTENT),
            )
            .unwrap();
        let qp_access_flags = match qp_type {
            QpType::Rc => {
                Access::REMOTE_WRITE
                    | Access::REMOTE_READ
                    | Access::REMOTE_ATOMIC
                    | Access::FLUSH_GLOBAL
                    | Access::FLUSH_PERSISTENT
            }
            _ => Access::REMOTE_WRITE,
        };
        let attr = QpAttr {
            qp_access_flags,
            ah: Some(
                AddressHandle::to(Gid::from(core::net::Ipv4Addr::from(PEER)), 0).via(PEER_MAC),
            ),
            path_mtu: Mtu::M1024,
            timeout: 10,
            retry_cnt: 2,
            rnr_retry: 2,
            rq_psn: RQ_PSN,
            sq_psn: SQ_PSN,
            max_rd_atomic: 2,
            max_dest_rd_atomic: 2,
            min_rnr_timer: 1,
            dest_qp_num: PEER_QPN,
            ..QpAttr::default()
        };
        for (state, mask) in crate::bring_up(qp_type) {
            let attr = QpAttr {
                qp_state: state,
                ..attr
            };
            engine.modify_qp(qpn, &attr, mask).unwrap();
        }
        Bench {
            engine,
            qpn,
            cq,
            buf,
            key,
            now: Instant::from_nanos(0),
        }
    }

    /// A frame from the peer to the QP.
    pub fn frame(&self, opcode: Opcode, psn: u32, ext: ExtRepr, payload: &[u8]) -> Vec<u8> {
        let repr = FrameRepr {
            eth: EthRepr::untagged(LOCAL_MAC, PEER_MAC),
            ip: IpRepr::v4(PEER.into(), LOCAL.into()),
            udp: UdpRepr::unchecked(0xc000),
            bth: BthRepr {
                ack_req: true,
                ..BthRepr::new(opcode, self.qpn, psn)
            },
            ext,
        };
        let mut frame = vec![0; MAX_FRAME];
        let n = repr.emit(payload, &mut frame).unwrap();
        frame.truncate(n);
        frame
    }

    /// Delivers a frame from the peer.
    pub fn receive(&mut self, opcode: Opcode, psn: u32, ext: ExtRepr, payload: &[u8]) {
        let frame = self.frame(opcode, psn, ext, payload);
        self.engine.handle_packet(self.now, &frame);
    }

    /// An ACK (or NAK) from the peer for `psn`.
    pub fn ack(&mut self, psn: u32, syndrome: Syndrome) {
        let ext = ExtRepr {
            aeth: Some(AethRepr { syndrome, msn: 0 }),
            ..ExtRepr::default()
        };
        self.receive(Opcode::RcAcknowledge, psn, ext, &[]);
    }

    /// Everything the engine sends now.
    pub fn sent(&mut self) -> Vec<Sent> {
        self.sent_at_most(usize::MAX)
    }

    /// The first `n` frames the engine sends now; the rest stay queued.
    pub fn sent_at_most(&mut self, n: usize) -> Vec<Sent> {
        let mut out = Vec::new();
        let mut buf = vec![0; MAX_FRAME];
        while out.len() < n
            && let Some(n) = self.engine.poll_transmit(self.now, &mut buf)
        {
            let p = frame::parse(&buf[..n]).expect("the engine sends valid frames");
            out.push(Sent {
                opcode: p.repr.bth.opcode,
                psn: p.repr.bth.psn,
                ack_req: p.repr.bth.ack_req,
                syndrome: p.repr.ext.aeth.map(|a| a.syndrome),
                payload: p.payload().to_vec(),
                ext: p.repr.ext,
            });
        }
        out
    }

    /// Advances time to the next timeout and runs it.
    pub fn fire_timer(&mut self) {
        self.now = self.engine.poll_timeout().expect("a timer is armed");
        self.engine.handle_timeout(self.now);
    }

    /// Posts a signaled send WR of `len` bytes from the start of the buffer.
    pub fn post(&mut self, wr_id: u64, op: SendOp, len: u32) {
        let sgl = vec![Sge {
            addr: self.buf,
            length: len,
            lkey: self.key,
        }];
        let wr = SendWr {
            wr_id,
            op,
            sgl,
            flags: crate::wr::SendFlags::SIGNALED,
            ud: None,
            xrc_srqn: None,
        };
        self.engine.post_send(self.qpn, wr).unwrap();
    }

    /// Posts a receive WR for `len` bytes at `offset` in the buffer.
    pub fn post_recv(&mut self, wr_id: u64, offset: u64, len: u32) {
        let sgl = vec![Sge {
            addr: self.buf + offset,
            length: len,
            lkey: self.key,
        }];
        self.engine
            .post_recv(self.qpn, RecvWr { wr_id, sgl })
            .unwrap();
    }

    /// The completions waiting: (wr_id, status, opcode).
    pub fn completions(&mut self) -> Vec<(u64, WcStatus, WcOpcode)> {
        let mut wcs = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 16];
        let n = self.engine.poll_cq(self.cq, &mut wcs).unwrap();
        wcs[..n]
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect()
    }

    /// A RETH at `offset` in the buffer.
    pub fn reth(&self, offset: u64, len: u32) -> RethRepr {
        RethRepr {
            va: self.buf + offset,
            rkey: self.key,
            dma_len: len,
        }
    }

    /// Bytes of the buffer.
    pub fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        self.engine
            .memory()
            .slice(self.buf + offset, len)
            .unwrap()
            .to_vec()
    }
}
