//! A queue pair's state, shared by its three roles, and what the roles share with the engine.

use std::collections::VecDeque;

use smoltcp::wire::EthernetAddress;
use softrnic_wire::{BthRepr, EthRepr, ExtRepr, FrameRepr, Icrc, IpRepr, UdpChecksum, UdpRepr};

use crate::ah::AddressHandle;
use crate::attr::Mtu;
use crate::counters::Counters;
use crate::cq::{Cq, Pushed, Wc, WcOpcode, WcStatus};
use crate::event::Event;
use crate::gid::Gid;
use crate::keys::KeyTable;
use crate::memory::Space;
use crate::psn;
use crate::qp_attr::{QpAttr, QpState, QpType};
use crate::rng::Rng;
use crate::slab::Slab;
use crate::time::{Instant, ack_timeout};
use crate::timers::{Timer, Timers};
use crate::wr::{QpCap, RecvWr, SendFlags, SendOp, SendWr, Sge};

mod receive;
mod send;

pub(crate) use receive::{InProgress, Resource, ResourceKind, Responder, Response};
pub(crate) use send::{Completer, Directive, Requester};

/// Everything a QP's roles reach besides the QP itself.
#[cfg_attr(feature = "fuzz", derive(Clone))]
pub(crate) struct Shared<M> {
    pub mem: M,
    pub keys: KeyTable,
    pub cqs: Slab<Cq>,
    pub srqs: Slab<Srq>,
    pub events: VecDeque<Event>,
    pub counters: Counters,
    pub rng: Rng,
    pub mac: EthernetAddress,
    pub gids: Vec<Gid>,
    pub port_mtu: Mtu,
    pub timers: Timers,
    /// The CQs given completions since the user last took them, each once
    /// ([`crate::Engine::take_filled_cqs`]).
    pub filled: Vec<u32>,
    /// SGE lists of WRs done with, for the user to decode new WRs into
    /// ([`crate::Engine::take_spare_sgls`]).
    pub spare_sgls: Vec<Vec<Sge>>,
    /// Whether built frames get their ICRC.
    pub icrc: Icrc,
    /// The reaction point's parameters.
    pub dcqcn: crate::reaction::Dcqcn,
}

/// The most SGE lists kept for reuse, and the longest.
const SPARE_SGLS: usize = 1024;
const SPARE_SGL_CAPACITY: usize = 32;

impl<M> Shared<M> {
    /// Keeps the SGE list of a WR done with, for reuse.
    pub fn recycle(&mut self, mut sgl: Vec<Sge>) {
        if self.spare_sgls.len() < SPARE_SGLS && sgl.capacity() <= SPARE_SGL_CAPACITY {
            sgl.clear();
            self.spare_sgls.push(sgl);
        }
    }

    /// Delivers a completion, with its notification or the CQ's overflow event.
    pub fn complete(&mut self, cq: u32, wc: Wc) {
        let Some(q) = self.cqs.get_mut(cq) else {
            return;
        };
        if q.list() {
            self.filled.push(cq);
        }
        match q.push(wc) {
            Pushed::Queued => {}
            Pushed::Notify => self.events.push_back(Event::Completion { cq }),
            Pushed::Overflow => {
                self.counters.cq_overflow += 1;
                self.events.push_back(Event::CqError { cq });
            }
        }
    }

    /// The outer headers of a connected QP's packets along `ah`: ECN-capable (ECT(0)) while
    /// the QP reacts to CNPs, unless the address handle's traffic class sets the ECN bits
    /// itself (RFC 3168: ECN-capable only where the sender answers congestion).
    pub fn qp_path(&self, ah: &AddressHandle, udp_src_port: u16) -> Option<Path> {
        let mut path = self.path(ah, udp_src_port)?;
        if self.dcqcn.rp_enabled && path.ip.ecn() == 0 {
            let ect = crate::notification::ECT0;
            path.ip = path.ip.with_traffic_class(path.ip.dscp(), ect);
        }
        Some(path)
    }

    /// The Ethernet, IP and UDP headers of packets along `ah`.
    pub fn path(&self, ah: &AddressHandle, udp_src_port: u16) -> Option<Path> {
        let sgid = *self.gids.get(ah.sgid_index as usize)?;
        let (dscp, ecn) = (ah.traffic_class >> 2, ah.traffic_class & 3);
        let (ip, checksum) = match (sgid.to_ip(), ah.dgid.to_ip()) {
            (core::net::IpAddr::V4(src), core::net::IpAddr::V4(dst)) => (
                IpRepr::V4 {
                    src,
                    dst,
                    dscp,
                    ecn,
                    ttl: ah.hop_limit,
                },
                UdpChecksum::Zero,
            ),
            (core::net::IpAddr::V6(src), core::net::IpAddr::V6(dst)) => (
                IpRepr::V6 {
                    src,
                    dst,
                    dscp,
                    ecn,
                    flow_label: ah.flow_label,
                    hop_limit: ah.hop_limit,
                },
                UdpChecksum::Computed,
            ),
            _ => return None,
        };
        Some(Path {
            eth: EthRepr::untagged(ah.dmac, self.mac),
            ip,
            udp: UdpRepr {
                src_port: udp_src_port,
                checksum,
            },
        })
    }
}

/// The outer headers of a QP's packets, built once when the path is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Path {
    pub eth: EthRepr,
    pub ip: IpRepr,
    pub udp: UdpRepr,
}

impl Path {
    /// A frame on this path with these transport headers.
    pub fn frame(&self, bth: BthRepr, ext: ExtRepr) -> FrameRepr {
        FrameRepr {
            eth: self.eth,
            ip: self.ip,
            udp: self.udp,
            bth,
            ext,
        }
    }
}

/// The PD and CQs of an XRC target QP, which has none of its own: each request it takes
/// lends it those of the SRQ it names.
pub(crate) const NO_OBJECT: u32 = u32::MAX;

/// A shared receive queue.
#[derive(Debug)]
#[cfg_attr(feature = "fuzz", derive(Clone))]
pub(crate) struct Srq {
    pub pd: u32,
    pub queue: VecDeque<RecvWr>,
    pub max_wr: u32,
    pub max_sge: u32,
    /// The armed limit (0: not armed).
    pub limit: u32,
    /// WQEs that QPs hold for SEND messages in progress: until the message ends they keep
    /// their places (a dropped UC message gives its WQE back, IBA 9.8.3), so posting counts
    /// them.
    pub lent: u32,
    /// An XRC SRQ's domain and CQ (IBA A14: its completions go to its own CQ, whichever
    /// target QP received the message).
    pub xrc: Option<XrcSrq>,
}

/// What an XRC SRQ belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XrcSrq {
    pub xrcd: u32,
    pub cq: u32,
}

impl Srq {
    /// Takes the next WQE, firing the limit event when the queue falls below the armed limit
    /// (IBA 10.2.9.2: the limit disarms when it fires).
    pub fn take(&mut self, srq: u32, events: &mut VecDeque<Event>) -> Option<RecvWr> {
        let wr = self.queue.pop_front()?;
        if self.limit > 0 && (self.queue.len() as u32) < self.limit {
            self.limit = 0;
            events.push_back(Event::SrqLimitReached { srq });
        }
        Some(wr)
    }

    /// How many more WRs a post may add.
    pub fn room(&self) -> usize {
        (self.max_wr as usize).saturating_sub(self.queue.len() + self.lent as usize)
    }
}

/// A send WQE: the WR and its progress.
#[derive(Debug)]
#[cfg_attr(feature = "fuzz", derive(Clone))]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    /// The SGEs' bytes, copied at post time for inline sends.
    pub inline: Option<Box<[u8]>>,
    /// The message length.
    pub len: u32,
    /// The PSNs the message uses (for a READ, its response packets).
    pub first_psn: u32,
    pub last_psn: u32,
    /// READ: response bytes placed so far.
    pub read_done: u32,
    /// Set when the WQE is finished; the completer retires WQEs in order.
    pub status: Option<WcStatus>,
    /// Whether a packet of it was ever sent: its PSN range is then fixed.
    pub sent: bool,
}

impl SendWqe {
    /// The completion opcode.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self.wr.op {
            SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_) => WcOpcode::Send,
            SendOp::Write(_) | SendOp::WriteWithImm(..) => WcOpcode::RdmaWrite,
            SendOp::Read(_) => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::AtomicWrite { .. } => WcOpcode::AtomicWrite,
            SendOp::Flush { .. } => WcOpcode::Flush,
            SendOp::LocalInv(_) => WcOpcode::LocalInv,
            SendOp::BindMw(_) => WcOpcode::BindMw,
        }
    }

    /// The number of PSNs the message takes at `mtu`: one packet each way, except for data
    /// sent or read.
    pub fn npkts(&self, mtu: u32) -> u32 {
        if self.wr.op.sends_data() || matches!(self.wr.op, SendOp::Read(_)) {
            psn::npkts(self.len, mtu)
        } else {
            1
        }
    }
}

/// What `create_qp` needs, as `ibv_qp_init_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QpInit {
    /// The transport.
    pub qp_type: QpType,
    /// Where send completions go.
    pub send_cq: u32,
    /// Where receive completions go.
    pub recv_cq: u32,
    /// A shared receive queue instead of the QP's own.
    pub srq: Option<u32>,
    /// Queue sizes.
    pub cap: QpCap,
    /// Every send WR completes, signaled or not.
    pub sq_sig_all: bool,
    /// The QP does not receive the multicast packets it sends itself
    /// (`IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`).
    pub block_self_mcast_lb: bool,
}

impl QpInit {
    /// A QP of `qp_type` with both queues on `cq`, its own receive queue, and only signaled
    /// send WRs completing: what most programs ask for.
    pub fn new(qp_type: QpType, cq: u32, cap: QpCap) -> QpInit {
        QpInit {
            qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            sq_sig_all: false,
            block_self_mcast_lb: false,
        }
    }
}

/// A queue pair.
#[cfg_attr(feature = "fuzz", derive(Clone))]
pub(crate) struct Qp {
    pub qpn: u32,
    /// An XRC target's domain: the SRQs its requests may name.
    pub xrcd: Option<u32>,
    /// What it was created with: its transport, CQs, SRQ and queue sizes.
    pub init: QpInit,
    pub state: QpState,
    pub pd: u32,
    pub space: Space,
    pub attr: QpAttr,
    pub sq: VecDeque<SendWqe>,
    pub rq: VecDeque<RecvWr>,
    pub req: Requester,
    pub comp: Completer,
    pub resp: Responder,
    /// Its notification point, from its first CE-marked packet: a CNP owed to the peer
    /// (boxed: most QPs never have one).
    pub np: Option<Box<crate::notification::Notification>>,
    /// Its reaction point: the rate it is held to since a CNP, until it is back at the line
    /// rate (boxed: most QPs never have one).
    pub rp: Option<Box<crate::reaction::Limiter>>,
    pub path: Option<Path>,
    pub udp_src_port: u16,
    /// Whether the QP is in the engine's ready list.
    pub queued: bool,
    /// Whether COMM_EST was reported.
    pub established: bool,
    /// Whether SQ_DRAINED was reported since the QP entered SQD.
    pub drained: bool,
}

impl Qp {
    /// Work it holds: send and receive WQEs, queued responses and saved READ/atomic results.
    pub(crate) fn backlog(&self) -> usize {
        self.sq.len() + self.rq.len() + self.resp.backlog()
    }

    /// The most [`backlog`](Self::backlog) its limits allow.
    pub(crate) fn backlog_limit(&self) -> usize {
        (self.init.cap.max_send_wr + self.init.cap.max_recv_wr) as usize
            + crate::responder::MAX_QUEUED_EXTRA
            + 3 * self.attr.max_dest_rd_atomic.max(1) as usize
            + 1
    }

    /// The MTU packets use, in bytes: the path MTU, but never above the port's active MTU,
    /// which the link allows (UD uses the port's).
    pub fn mtu<M>(&self, sh: &Shared<M>) -> u32 {
        match self.init.qp_type {
            QpType::Ud => sh.port_mtu.bytes(),
            _ => self.attr.path_mtu.min(sh.port_mtu).bytes(),
        }
    }

    /// Retires finished WQEs from the front of the send queue, in order: a completion for each
    /// that is signaled or failed (IBA 10.7.2.1: errors always complete). A failure moves the
    /// QP to the error state, which flushes the rest.
    pub fn retire<M>(&mut self, sh: &mut Shared<M>) {
        while let Some(status) = self.sq.front().and_then(|w| w.status) {
            let mut w = self.sq.pop_front().expect("front exists");
            self.req.retired();
            let signaled = self.init.sq_sig_all || w.wr.flags.contains(SendFlags::SIGNALED);
            if signaled || status != WcStatus::Success {
                let mut wc = Wc::new(w.wr.wr_id, status, w.wc_opcode(), self.qpn);
                wc.byte_len = match w.wr.op {
                    SendOp::Read(_) => w.len,
                    SendOp::CompareSwap { .. }
                    | SendOp::FetchAdd { .. }
                    | SendOp::AtomicWrite { .. } => 8,
                    _ => 0,
                };
                sh.complete(self.init.send_cq, wc);
            }
            sh.recycle(std::mem::take(&mut w.wr.sgl));
            if status != WcStatus::Success && status != WcStatus::WrFlushErr {
                self.enter_error(sh);
            }
        }
        self.check_drained(sh);
    }

    /// In SQD, reports SQ_DRAINED once nothing sent is outstanding (IBA 10.3.1.3), if the
    /// transition to SQD asked for it.
    pub fn check_drained<M>(&mut self, sh: &mut Shared<M>) {
        if self.state == QpState::Sqd && !self.drained && !self.started(0) {
            self.drained = true;
            if self.attr.en_sqd_async_notify {
                sh.events.push_back(Event::SqDrained { qpn: self.qpn });
            }
        }
    }

    /// Finishes the WQE at the front with `status` and retires it.
    pub fn fail_front<M>(&mut self, sh: &mut Shared<M>, status: WcStatus) {
        if let Some(w) = self.sq.front_mut() {
            w.status = Some(status);
        }
        self.retire(sh);
    }

    /// Moves to the error state: every outstanding WR completes with IBV_WC_WR_FLUSH_ERR (IBA
    /// 10.3.1: the error state flushes both queues), and the roles stop.
    pub fn enter_error<M>(&mut self, sh: &mut Shared<M>) {
        let first = self.state != QpState::Err;
        self.state = QpState::Err;
        sh.timers.stop_all(self.qpn);
        self.req.reset_progress();
        self.resp.abort();
        for w in self.sq.iter_mut() {
            w.status.get_or_insert(WcStatus::WrFlushErr);
        }
        self.retire(sh);
        if let Some((wr, _)) = self.release_held(sh) {
            self.flush_recv(sh, wr);
        }
        while let Some(wr) = self.rq.pop_front() {
            self.flush_recv(sh, wr);
        }
        if first && self.init.srq.is_some() {
            sh.events.push_back(Event::LastWqeReached { qpn: self.qpn });
        }
    }

    fn flush_recv<M>(&self, sh: &mut Shared<M>, wr: RecvWr) {
        let wc = self.recv_wc(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv);
        sh.complete(self.init.recv_cq, wc);
    }

    /// A receive completion of this QP, naming the SRQ its work request came from.
    pub fn recv_wc(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode) -> Wc {
        Wc {
            srq: self.init.srq,
            ..Wc::new(wr_id, status, opcode, self.qpn)
        }
    }

    /// Holds the next receive WQE for a SEND message that begins; false when there is none.
    pub fn hold_recv<M>(&mut self, sh: &mut Shared<M>) -> bool {
        let Some(wr) = self.take_recv(sh) else {
            return false;
        };
        if let Some(s) = self.init.srq.and_then(|id| sh.srqs.get_mut(id)) {
            s.lent += 1;
        }
        self.resp.held = Some((wr, 0));
        true
    }

    /// Lets go of the receive WQE a message held (it completed, failed or is given back).
    pub fn release_held<M>(&mut self, sh: &mut Shared<M>) -> Option<(RecvWr, u32)> {
        let held = self.resp.held.take()?;
        if let Some(s) = self.init.srq.and_then(|id| sh.srqs.get_mut(id)) {
            s.lent = s.lent.saturating_sub(1);
        }
        Some(held)
    }

    /// How many more receive WRs a post may add to the QP's own receive queue: a WQE a
    /// message in progress holds keeps its place.
    pub fn recv_room(&self) -> usize {
        let used = self.rq.len() + usize::from(self.init.srq.is_none() && self.resp.held.is_some());
        (self.init.cap.max_recv_wr as usize).saturating_sub(used)
    }

    /// Takes a receive WQE from the QP's receive queue or its SRQ.
    pub fn take_recv<M>(&mut self, sh: &mut Shared<M>) -> Option<RecvWr> {
        match self.init.srq {
            None => self.rq.pop_front(),
            Some(id) => sh.srqs.get_mut(id)?.take(id, &mut sh.events),
        }
    }

    /// Whether a receive WQE is available.
    pub fn has_recv<M>(&self, sh: &Shared<M>) -> bool {
        match self.init.srq {
            None => !self.rq.is_empty(),
            Some(id) => sh.srqs.get(id).is_some_and(|s| !s.queue.is_empty()),
        }
    }

    /// Starts the local ACK timer (IBA 9.7.6.1.3) unless it is running.
    pub fn arm_ack_timer(&self, timers: &mut Timers, now: Instant) {
        if let Some(d) = ack_timeout(self.attr.timeout) {
            timers.arm_if_idle(self.qpn, Timer::Ack, now + d);
        }
    }

    /// Whether the WQE at `index` has had a packet sent, so responses may refer to it.
    pub fn started(&self, index: usize) -> bool {
        self.sq.get(index).is_some_and(|w| w.sent)
    }

    /// Whether the QP processes incoming packets (IBA 10.3.1: RTR and later, until error).
    pub fn receives(&self) -> bool {
        matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    }

    /// Whether the requester may send: in RTS; in SQD only to finish a message it started or
    /// to resend what was lost (IBA 10.3.1.3: SQD completes the WQEs in progress).
    pub fn sends(&self) -> bool {
        match self.state {
            QpState::Rts => true,
            QpState::Sqd => {
                self.req.offset > 0 || crate::psn::diff(self.req.psn, self.req.max_sent) < 0
            }
            _ => false,
        }
    }
}
