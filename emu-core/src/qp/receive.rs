//! The responder's state: where the receive side of a QP stands (the expected PSN, the
//! message in progress, saved READ/atomic results, responses to send), as rxe keeps it in the
//! QP. The responder's logic is `crate::responder`'s.

use std::collections::VecDeque;

use softrnic_wire::{NakCode, Syndrome};

use crate::keys::Target;
use crate::psn;
use crate::wr::RecvWr;

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
pub(crate) struct Resource {
    pub first_psn: u32,
    pub last_psn: u32,
    pub kind: ResourceKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResourceKind {
    Read {
        rkey: u32,
        va: u64,
        len: u32,
    },
    Atomic {
        orig: u64,
    },
    /// An ATOMIC WRITE or FLUSH, done: a duplicate gets the empty READ response again.
    Done,
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
    /// region deregistered meanwhile is never read. Empty (`left` 0) for an ATOMIC WRITE or
    /// FLUSH (IBA 1.5: a READ RESPONSE ONLY without data).
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

impl Response {
    /// The empty READ RESPONSE ONLY that answers an ATOMIC WRITE or FLUSH (IBA 1.5).
    pub fn empty_read(psn: u32, msn: u32, replay: bool) -> Response {
        Response::Read {
            psn,
            rkey: 0,
            va: 0,
            left: 0,
            first: true,
            msn,
            replay,
        }
    }
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
    /// Saved READs and atomics, oldest first (IBA 9.7.5.2.5).
    pub resources: VecDeque<Resource>,
    /// Responses to send.
    pub out: VecDeque<Response>,
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
    pub fn queue_ack(&mut self, psn: u32, syndrome: Syndrome) {
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
    pub fn start_rd_atomic(
        &mut self,
        max: u8,
        res: Resource,
        response: impl FnOnce(u32) -> Response,
    ) {
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
    pub fn pending_rd_atomic(&self) -> usize {
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
