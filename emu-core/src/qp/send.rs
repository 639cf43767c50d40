//! The send side's state: where the requester is in the send queue, and what the completer
//! waits for, as rxe keeps them in the QP; and the directive the completer gives the
//! requester. The logic is `crate::requester`'s and `crate::completer`'s.

use crate::psn;
use crate::qp::SendWqe;
use crate::time::Instant;
use crate::wr::SendOp;

/// The requester's progress through the send queue.
#[derive(Debug, Clone, Default)]
pub(crate) struct Requester {
    /// Index in the send queue of the WQE being sent.
    pub next: usize,
    /// Bytes of that WQE already sent.
    pub offset: u32,
    /// The next PSN to send.
    pub psn: u32,
    /// One past the highest PSN ever sent: responses beyond it are ghosts.
    pub max_sent: u32,
    /// The oldest PSN not yet acknowledged, as the completer last said: the window's start.
    pub acked: u32,
    /// Packets sent since the last AckReq.
    pub noack: u32,
}

impl Requester {
    /// A requester that starts at `psn`.
    pub fn new(psn: u32) -> Requester {
        Requester {
            psn,
            max_sent: psn,
            acked: psn,
            ..Requester::default()
        }
    }

    /// The completer popped the WQE at the front.
    pub fn retired(&mut self) {
        if self.next > 0 {
            self.next -= 1;
        } else {
            self.offset = 0;
        }
    }

    /// Forgets progress (the QP is in error).
    pub fn reset_progress(&mut self) {
        self.next = 0;
        self.offset = 0;
    }

    /// Go-back-N: send again from `psn`, which lies in the WQE at the front (IBA 9.7.4.1.4).
    /// A partly answered READ is re-requested for the bytes still missing (9.7.4.1.5).
    pub fn rewind(&mut self, front: Option<&SendWqe>, psn: u32, mtu: u32) {
        self.next = 0;
        self.noack = 0;
        self.psn = psn;
        self.offset = match front {
            Some(w) if w.wr.op.sends_data() => {
                (psn::diff(psn, w.first_psn).max(0) as u32).saturating_mul(mtu)
            }
            Some(w) if matches!(w.wr.op, SendOp::Read(_)) => w.read_done,
            _ => 0,
        };
    }
}

/// The completer's state.
#[derive(Debug, Clone, Default)]
pub(crate) struct Completer {
    /// The oldest PSN not yet acknowledged: the next response expected.
    pub psn: u32,
    /// Transport retries left (IBA 9.7.6.1.3: 7 is seven retries, not infinite).
    pub retry_left: u8,
    /// RNR retries left (7 is infinite, IBA 9.7.5.2.8).
    pub rnr_left: u8,
    /// The PSN a NAK-triggered resend started from: further NAKs for it are the same loss.
    pub retrying_from: Option<u32>,
    /// What the requester is to do, gathered while a response or timeout is handled.
    pub directive: Directive,
}

/// What the completer asks of the requester after a response or a timeout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Directive {
    /// Send again from this PSN: go back after a NAK or a timeout (IBA 9.7.4.1.4).
    pub resend_from: Option<u32>,
    /// Everything before this PSN is acknowledged: the send window moves on.
    pub acknowledged: Option<u32>,
    /// Send nothing before this instant: an RNR NAK's timer (IBA 9.7.5.2.8).
    pub wait_until: Option<Instant>,
}

impl Completer {
    /// A completer expecting `psn` first.
    pub fn new(psn: u32, retry_cnt: u8, rnr_retry: u8) -> Completer {
        Completer {
            psn,
            retry_left: retry_cnt,
            rnr_left: rnr_retry,
            ..Completer::default()
        }
    }
}
