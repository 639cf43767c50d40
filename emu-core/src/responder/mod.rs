//! The responder: checks and executes incoming requests and queues their responses (IBA
//! 9.7.5.2; rxe_resp.c).
//!
//! Each RC request passes, in order: the PSN check (duplicates and gaps, per transport in
//! `rc.rs`, `uc.rs`, `ud.rs`), then the steps of `checks.rs` (opcode sequence, operation
//! allowed, resources, length, key), then `execute.rs` (the operation, then the ACK). A check
//! that fails says which NAK it maps to (IBA 9.7.5.2.8, table 9.9.3 classes B and C) and what
//! the receive WQE, if one is held, completes with. UC and UD drop what RC would NAK.

use std::collections::VecDeque;

use softrnic_wire::{
    AethRepr, AtomicAckEthRepr, CreditCount, ExtRepr, FrameRepr, NakCode, Opcode, Operation,
    ParsedFrame, Position, Syndrome, Transport, With, bth::BthRepr,
};

use crate::cq::WcStatus;
use crate::event::Event;
use crate::keys::{Access, Target};
use crate::memory::Memory;
use crate::psn;
use crate::qp::{Qp, Shared};
use crate::qp_attr::{QpState, QpType};
use crate::wr::RecvWr;

mod checks;
mod execute;
mod rc;
#[cfg(test)]
mod tests;
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

const INVALID: Refuse = Refuse::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr);

const ACCESS: Refuse = Refuse::Nak(NakCode::RemoteAccessError, WcStatus::RemAccessErr);

const OPERATIONAL: Refuse = Refuse::Nak(NakCode::RemoteOperationalError, WcStatus::LocQpOpErr);

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
