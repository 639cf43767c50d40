//! The responder: checks and executes incoming requests and queues their responses (IBA
//! 9.7.5.2; rxe_resp.c).
//!
//! Each RC request passes, in order: the PSN check (duplicates and gaps), the opcode sequence
//! check, the receive WQE check (RNR), the length check, the key check, and execution. A check
//! that fails says which NAK it maps to (IBA 9.7.5.2.8, table 9.9.3 classes B and C) and what
//! the receive WQE, if one is held, completes with. UC and UD drop what RC would NAK.

use std::collections::VecDeque;

use softrnic_wire::{
    AethRepr, AtomicAckEthRepr, CreditCount, ExtRepr, FrameRepr, NakCode, Opcode, Operation,
    ParsedFrame, Position, Syndrome, Transport, With, bth::BthRepr,
};

use crate::cq::{WC_WITH_IMM, WC_WITH_INV, Wc, WcOpcode, WcStatus};
use crate::dma;
use crate::event::Event;
use crate::keys::{Access, Target};
use crate::memory::Memory;
use crate::psn;
use crate::qp::{Qp, Shared};
use crate::qp_attr::{QpState, QpType};
use crate::wr::RecvWr;

mod rc;
mod uc;
mod ud;

/// Responses a responder queues beyond its READ/atomic resources before it drops duplicate
/// requests, which bounds its memory against a peer that floods them.
pub const MAX_QUEUED_EXTRA: usize = 16;

/// The message being received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InProgress {
    /// A multi-packet SEND.
    Send,
    /// A multi-packet RDMA WRITE: where the next byte goes and how many are left.
    Write { target: Target, left: u32, len: u32 },
    /// UC: the rest of a dropped message.
    Dropping,
}

/// A saved READ or atomic, for answering duplicates (IBA 9.7.5.2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resource {
    first_psn: u32,
    last_psn: u32,
    kind: ResourceKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResourceKind {
    Read { rkey: u32, va: u64, len: u32 },
    Atomic { orig: u64 },
}

/// A response waiting to be sent, in PSN order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Response {
    /// ACK, NAK or RNR NAK.
    Ack {
        psn: u32,
        syndrome: Syndrome,
        msn: u32,
    },
    /// READ response packets still to send: the key is checked again for each packet, so a
    /// region deregistered meanwhile is never read.
    Read {
        psn: u32,
        rkey: u32,
        va: u64,
        left: u32,
        first: bool,
        msn: u32,
        /// Answers a duplicate request: does not count against max_dest_rd_atomic.
        replay: bool,
    },
    /// An atomic's original value.
    Atomic {
        psn: u32,
        orig: u64,
        msn: u32,
        replay: bool,
    },
}

/// The responder's state.
#[derive(Debug, Clone, Default)]
pub(crate) struct Responder {
    /// The PSN expected next.
    pub epsn: u32,
    /// Messages completed (IBA 9.7.5.2.4: the MSN in every AETH).
    pub msn: u32,
    /// The message being received, if it spans packets.
    pub cur: Option<InProgress>,
    /// The receive WQE being filled, and the bytes placed so far.
    pub held: Option<(RecvWr, u32)>,
    /// A PSN sequence NAK was sent for the current gap (one per gap, IBA 9.7.5.2.1).
    pub nak_sent: bool,
    resources: VecDeque<Resource>,
    /// Responses to send.
    pub out: VecDeque<Response>,
}

/// Why a request is refused.
enum Refuse {
    /// NAK with this code; a held receive WQE completes with this status; the QP goes to error
    /// (IBA 9.9.3: classes B and C).
    Nak(NakCode, WcStatus),
    /// No receive WQE: RNR NAK (IBA 9.7.5.2.8).
    Rnr,
}

fn ack_syndrome() -> Syndrome {
    // softrnic does no end-to-end credit flow control: the count is "invalid" (unlimited).
    Syndrome::Ack(CreditCount::INVALID)
}

impl Responder {
    /// A responder that expects `psn` first.
    pub fn new(psn: u32) -> Responder {
        Responder {
            epsn: psn,
            ..Responder::default()
        }
    }

    /// Stops. Responses to requests accepted before a fatal NAK, and the NAK itself, must still
    /// reach the requester (an atomic has already run); anything after it is dropped.
    pub fn abort(&mut self) {
        self.cur = None;
        let fatal = self.out.iter().position(|r| {
            matches!(r, Response::Ack { syndrome: Syndrome::Nak(c), .. }
                if *c != NakCode::PsnSequenceError)
        });
        self.out.truncate(fatal.map_or(0, |i| i + 1));
    }

    /// Queues an ACK, merged with a positive ACK or sequence NAK still waiting (coalescing:
    /// the later one acknowledges everything the earlier did).
    fn queue_ack(&mut self, psn: u32, syndrome: Syndrome) {
        let mergeable = |s: Syndrome| {
            matches!(
                s,
                Syndrome::Ack(_) | Syndrome::Nak(NakCode::PsnSequenceError)
            )
        };
        let item = Response::Ack {
            psn,
            syndrome,
            msn: self.msn,
        };
        match self.out.back_mut() {
            Some(last @ Response::Ack { .. }) if mergeable(syndrome) => {
                if let Response::Ack { syndrome: s, .. } = *last
                    && mergeable(s)
                {
                    *last = item;
                } else {
                    self.out.push_back(item);
                }
            }
            _ => self.out.push_back(item),
        }
    }

    /// Takes a new READ or atomic request: it is a whole message (the MSN counts it), its
    /// result is kept for a duplicate to be answered from (IBA 9.7.5.2.5; the oldest of
    /// `max` goes), its response is queued, and the next request follows its last PSN.
    fn start_rd_atomic(&mut self, max: u8, res: Resource, response: impl FnOnce(u32) -> Response) {
        self.msn = self.msn.wrapping_add(1) & psn::MASK;
        self.epsn = psn::add(res.last_psn, 1);
        if self.resources.len() >= max.max(1) as usize {
            self.resources.pop_front();
        }
        self.resources.push_back(res);
        self.out.push_back(response(self.msn));
    }

    /// Responses and saved results held.
    pub fn backlog(&self) -> usize {
        self.out.len() + self.resources.len()
    }

    /// READs and atomics accepted and not yet answered, for max_dest_rd_atomic (IBA 9.5.1).
    /// Replays for duplicates are not new requests and do not count: the requester has
    /// already seen their first answer and may have sent the next request.
    fn pending_rd_atomic(&self) -> usize {
        self.out
            .iter()
            .filter(|r| {
                matches!(
                    r,
                    Response::Read { replay: false, .. } | Response::Atomic { replay: false, .. }
                )
            })
            .count()
    }
}

/// Handles a request packet for this QP.
pub(crate) fn handle<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, pkt: &ParsedFrame) {
    if !qp.established {
        qp.established = true;
        if qp.state == QpState::Rtr {
            sh.events.push_back(Event::CommEstablished { qpn: qp.qpn });
        }
    }
    match qp.qp_type {
        QpType::Rc => rc::handle(qp, sh, pkt),
        QpType::Uc => uc::handle(qp, sh, pkt),
        QpType::Ud => ud::handle(qp, sh, pkt),
    }
}

/// The operation must be in sequence with the message in progress (IBA 9.7.5.2.2 / C9-95).
fn in_sequence(cur: Option<InProgress>, op: Operation, pos: Position) -> bool {
    match cur {
        Some(InProgress::Send) => op == Operation::Send && !pos.is_first(),
        Some(InProgress::Write { .. }) => op == Operation::RdmaWrite && !pos.is_first(),
        Some(InProgress::Dropping) | None => pos.is_first(),
    }
}

/// Payload lengths IBA 9.7.5.2.3 allows: FIRST and MIDDLE packets carry exactly the path MTU,
/// LAST at least one byte and at most the MTU, ONLY at most the MTU.
fn length_ok(pos: Position, len: u32, mtu: u32) -> bool {
    match pos {
        Position::First | Position::Middle => len == mtu,
        Position::Last => len > 0 && len <= mtu,
        Position::Only => len <= mtu,
    }
}

const INVALID: Refuse = Refuse::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr);

const ACCESS: Refuse = Refuse::Nak(NakCode::RemoteAccessError, WcStatus::RemAccessErr);

const OPERATIONAL: Refuse = Refuse::Nak(NakCode::RemoteOperationalError, WcStatus::LocQpOpErr);

/// Checks and executes an RC request whose PSN is the expected one.
fn execute<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, pkt: &ParsedFrame) -> Result<(), Refuse> {
    let bth = &pkt.repr.bth;
    let info = bth.opcode.info();
    let (op, pos) = (info.operation, info.position);
    let ext = &pkt.repr.ext;
    let payload = pkt.payload();
    let n = payload.len() as u32;
    let mtu = qp.mtu(sh);
    let p = bth.psn;

    if !in_sequence(qp.resp.cur, op, pos) {
        return Err(INVALID);
    }
    let ends = pos.is_last();
    // A receive WQE is needed by a SEND's first packet and by WRITE with immediate's last.
    let needs_recv = match op {
        Operation::Send => pos.is_first(),
        Operation::RdmaWrite => ends && ext.immdt.is_some(),
        _ => false,
    };
    if needs_recv && qp.resp.held.is_none() && !qp.has_recv(sh) {
        return Err(Refuse::Rnr);
    }
    match op {
        Operation::Send => {
            if !length_ok(pos, n, mtu) {
                return Err(INVALID);
            }
            if qp.resp.held.is_none() {
                let wr = qp.take_recv(sh).ok_or(Refuse::Rnr)?;
                qp.resp.held = Some((wr, 0));
            }
            let (wr, offset) = qp.resp.held.as_ref().expect("held");
            if let Err(status) =
                dma::scatter(&mut sh.mem, &sh.keys, qp.pd, &wr.sgl, *offset, payload)
            {
                return Err(match status {
                    WcStatus::LocLenErr => {
                        sh.counters.resp_local_length_error += 1;
                        Refuse::Nak(NakCode::InvalidRequest, WcStatus::LocLenErr)
                    }
                    s => Refuse::Nak(NakCode::RemoteOperationalError, s),
                });
            }
            if let Some((_, offset)) = qp.resp.held.as_mut() {
                *offset += n;
            }
            qp.resp.cur = Some(InProgress::Send);
            if ends {
                if let Some(rkey) = ext.ieth {
                    // IBA 9.4.7 / 10.6.6: SEND with Invalidate; a key it may not invalidate is
                    // an invalid request.
                    sh.keys.invalidate(rkey, qp.pd).map_err(|_| INVALID)?;
                }
                let (wr, len) = qp.resp.held.take().expect("held");
                let mut wc = Wc::new(wr.wr_id, WcStatus::Success, WcOpcode::Recv, qp.qpn);
                wc.byte_len = len;
                wc.solicited = bth.solicited;
                if let Some(imm) = ext.immdt {
                    wc.imm_data = imm;
                    wc.wc_flags |= WC_WITH_IMM;
                }
                if let Some(rkey) = ext.ieth {
                    wc.imm_data = rkey;
                    wc.wc_flags |= WC_WITH_INV;
                }
                sh.complete(qp.recv_cq, wc);
                qp.resp.cur = None;
            }
        }
        Operation::RdmaWrite => {
            if let Some(reth) = ext.reth {
                if !qp.attr.qp_access_flags.contains(Access::REMOTE_WRITE) {
                    return Err(ACCESS);
                }
                if reth.dma_len > 1 << 31 {
                    return Err(INVALID);
                }
                let target = if reth.dma_len == 0 {
                    // IBA 9.7.5.2.3: a zero-length RDMA WRITE does not check the R_Key.
                    Target {
                        space: 0,
                        addr: reth.va,
                    }
                } else {
                    sh.keys
                        .check_remote(
                            reth.rkey,
                            qp.pd,
                            qp.qpn,
                            Access::REMOTE_WRITE,
                            reth.va,
                            reth.dma_len as u64,
                        )
                        .map_err(|_| ACCESS)?
                };
                qp.resp.cur = Some(InProgress::Write {
                    target,
                    left: reth.dma_len,
                    len: reth.dma_len,
                });
            }
            let Some(InProgress::Write { target, left, len }) = qp.resp.cur else {
                return Err(INVALID);
            };
            let fits = if ends { n == left } else { n < left };
            if !length_ok(pos, n, mtu) || !fits {
                return Err(INVALID);
            }
            if n > 0 {
                sh.mem
                    .write(target.space, target.addr, payload)
                    .map_err(|_| OPERATIONAL)?;
            }
            qp.resp.cur = Some(InProgress::Write {
                target: Target {
                    space: target.space,
                    addr: target.addr + n as u64,
                },
                left: left - n,
                len,
            });
            if ends {
                qp.resp.cur = None;
                if let Some(imm) = ext.immdt {
                    let wr = qp.take_recv(sh).ok_or(Refuse::Rnr)?;
                    let mut wc = Wc::new(
                        wr.wr_id,
                        WcStatus::Success,
                        WcOpcode::RecvRdmaWithImm,
                        qp.qpn,
                    );
                    wc.byte_len = len;
                    wc.imm_data = imm;
                    wc.wc_flags = WC_WITH_IMM;
                    wc.solicited = bth.solicited;
                    sh.complete(qp.recv_cq, wc);
                }
            }
        }
        Operation::RdmaReadRequest => {
            let reth = ext.reth.ok_or(INVALID)?;
            if !qp.attr.qp_access_flags.contains(Access::REMOTE_READ) {
                return Err(ACCESS);
            }
            if qp.attr.max_dest_rd_atomic == 0
                || qp.resp.pending_rd_atomic() >= qp.attr.max_dest_rd_atomic as usize
                || reth.dma_len > 1 << 31
            {
                return Err(INVALID);
            }
            read_target(qp, sh, reth.rkey, reth.va, reth.dma_len)?;
            let npkts = psn::npkts(reth.dma_len, mtu);
            let res = Resource {
                first_psn: p,
                last_psn: psn::add(p, npkts - 1),
                kind: ResourceKind::Read {
                    rkey: reth.rkey,
                    va: reth.va,
                    len: reth.dma_len,
                },
            };
            qp.resp
                .start_rd_atomic(qp.attr.max_dest_rd_atomic, res, |msn| Response::Read {
                    psn: p,
                    rkey: reth.rkey,
                    va: reth.va,
                    left: reth.dma_len,
                    first: true,
                    msn,
                    replay: false,
                });
            return Ok(());
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            let a = ext.atomic_eth.ok_or(INVALID)?;
            if !qp.attr.qp_access_flags.contains(Access::REMOTE_ATOMIC) {
                return Err(ACCESS);
            }
            // IBA 9.4.5: the address must be 8-byte aligned.
            if a.va % 8 != 0
                || qp.attr.max_dest_rd_atomic == 0
                || qp.resp.pending_rd_atomic() >= qp.attr.max_dest_rd_atomic as usize
            {
                return Err(INVALID);
            }
            let t = sh
                .keys
                .check_remote(a.rkey, qp.pd, qp.qpn, Access::REMOTE_ATOMIC, a.va, 8)
                .map_err(|_| ACCESS)?;
            let orig = if op == Operation::CompareSwap {
                let (cmp, swap) = (a.compare, a.swap_add);
                sh.mem
                    .atomic(t.space, t.addr, &|v| if v == cmp { swap } else { v })
            } else {
                let add = a.swap_add;
                sh.mem.atomic(t.space, t.addr, &|v| v.wrapping_add(add))
            }
            .map_err(|_| OPERATIONAL)?;
            let res = Resource {
                first_psn: p,
                last_psn: p,
                kind: ResourceKind::Atomic { orig },
            };
            qp.resp
                .start_rd_atomic(qp.attr.max_dest_rd_atomic, res, |msn| Response::Atomic {
                    psn: p,
                    orig,
                    msn,
                    replay: false,
                });
            return Ok(());
        }
        _ => return Err(INVALID),
    }
    qp.resp.epsn = psn::add(p, 1);
    if ends {
        qp.resp.msn = qp.resp.msn.wrapping_add(1) & psn::MASK;
    }
    // UC has no acknowledgements (IBA 9.8.3), whatever AckReq says.
    if bth.ack_req && qp.qp_type == QpType::Rc {
        qp.resp.queue_ack(p, ack_syndrome());
    }
    Ok(())
}

/// Checks the key of a READ of `len` bytes at `va` (none for a zero-length READ, IBA
/// 9.7.5.2.3).
fn read_target<M>(qp: &Qp, sh: &Shared<M>, rkey: u32, va: u64, len: u32) -> Result<(), Refuse> {
    if len == 0 {
        return Ok(());
    }
    sh.keys
        .check_remote(rkey, qp.pd, qp.qpn, Access::REMOTE_READ, va, len as u64)
        .map(|_| ())
        .map_err(|_| ACCESS)
}

/// Writes the next response packet into `buf`.
pub(crate) fn poll<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, buf: &mut [u8]) -> Option<usize> {
    let path = qp.path?;
    let mtu = qp.mtu(sh);
    let front = qp.resp.out.front_mut()?;
    let mut ext = ExtRepr::default();
    let (opcode, psn, payload_len, done) = match *front {
        Response::Ack { psn, syndrome, msn } => {
            ext.aeth = Some(AethRepr { syndrome, msn });
            (Opcode::RcAcknowledge, psn, 0, true)
        }
        Response::Atomic { psn, orig, msn, .. } => {
            ext.aeth = Some(AethRepr {
                syndrome: ack_syndrome(),
                msn,
            });
            ext.atomic_ack_eth = Some(AtomicAckEthRepr { orig });
            (Opcode::RcAtomicAcknowledge, psn, 0, true)
        }
        Response::Read {
            psn,
            left,
            first,
            msn,
            ..
        } => {
            let n = left.min(mtu);
            let last = n == left;
            let pos = Position::of(first, last);
            let opcode = Opcode::build(
                Transport::Rc,
                Operation::RdmaReadResponse,
                pos,
                With::Nothing,
            )
            .expect("READ responses have every position");
            if first || last {
                ext.aeth = Some(AethRepr {
                    syndrome: ack_syndrome(),
                    msn,
                });
            }
            (opcode, psn, n, last)
        }
    };
    let repr = FrameRepr {
        eth: path.eth,
        ip: path.ip,
        udp: path.udp,
        bth: BthRepr::new(opcode, qp.attr.dest_qp_num, psn),
        ext,
    };
    if let Response::Read { rkey, va, .. } = *front
        && payload_len > 0
    {
        let at = repr.payload_offset();
        let dst = buf.get_mut(at..at + payload_len as usize)?;
        let read = sh
            .keys
            .check_remote(
                rkey,
                qp.pd,
                qp.qpn,
                Access::REMOTE_READ,
                va,
                payload_len as u64,
            )
            .map_err(|_| NakCode::RemoteAccessError)
            .and_then(|t| {
                sh.mem
                    .read(t.space, t.addr, dst)
                    .map_err(|_| NakCode::RemoteOperationalError)
            });
        if let Err(code) = read {
            // The region was deregistered or invalidated under the READ, or its memory went
            // away (IBA 9.7.5.2.8): the NAK replaces the rest of the response, and goes now.
            if code == NakCode::RemoteAccessError {
                sh.counters.resp_remote_access_errors += 1;
            }
            qp.resp.out.clear();
            qp.resp.queue_ack(psn, Syndrome::Nak(code));
            qp.enter_error(sh);
            return poll(qp, sh, buf);
        }
    }
    let n = repr.emit_in_place(payload_len as usize, buf).ok()?;
    if done {
        qp.resp.out.pop_front();
    } else if let Response::Read {
        psn,
        va,
        left,
        first,
        ..
    } = front
    {
        *psn = psn::add(*psn, 1);
        *va += payload_len as u64;
        *left -= payload_len;
        *first = false;
    }
    sh.counters.sent_pkts += 1;
    Some(n)
}
