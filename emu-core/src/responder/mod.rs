//! The responder: checks and executes incoming requests and queues their responses (IBA
//! 9.7.5.2; rxe_resp.c).
//!
//! Each RC request passes, in order: the PSN check (duplicates and gaps, per transport in
//! `rc.rs`, `uc.rs`, `ud.rs`), then the steps of `checks.rs` (opcode sequence, operation
//! allowed, resources, length, key), then `execute.rs` (the operation, then the ACK). A check
//! that fails says which NAK it maps to (IBA 9.7.5.2.8, table 9.9.3 classes B and C) and what
//! the receive WQE, if one is held, completes with. UC and UD drop what RC would NAK.

use softrnic_wire::{
    AethRepr, AtomicAckEthRepr, CreditCount, ExtRepr, NakCode, Opcode, Operation, ParsedFrame,
    Position, Syndrome, With, bth::BthRepr,
};

use crate::cq::WcStatus;
use crate::event::Event;
use crate::keys::Access;
use crate::memory::Memory;
use crate::psn;
use crate::qp::{Qp, Response, Shared};
use crate::qp_attr::{QpState, QpType};
use crate::reaction;
use crate::time::Instant;

mod checks;
mod execute;
mod rc;
#[cfg(test)]
mod tests;
mod uc;
mod ud;
mod xrc;

/// Responses a responder queues beyond its READ/atomic resources before it drops duplicate
/// requests, which bounds its memory against a peer that floods them.
pub const MAX_QUEUED_EXTRA: usize = 16;

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

/// Handles a request packet for this QP.
pub(crate) fn handle<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, pkt: &ParsedFrame) {
    if !qp.established {
        qp.established = true;
        if qp.state == QpState::Rtr {
            sh.events.push_back(Event::CommEstablished { qpn: qp.qpn });
        }
    }
    match qp.init.qp_type {
        QpType::Rc => rc::handle(qp, sh, pkt),
        QpType::XrcRecv => {
            xrc::target(qp, sh, pkt);
            rc::handle(qp, sh, pkt)
        }
        QpType::Uc => uc::handle(qp, sh, pkt),
        QpType::Ud => ud::handle(qp, sh, pkt),
        // An initiator receives only responses (the engine's dispatch).
        QpType::XrcSend => {}
    }
}

const INVALID: Refuse = Refuse::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr);

const ACCESS: Refuse = Refuse::Nak(NakCode::RemoteAccessError, WcStatus::RemAccessErr);

const OPERATIONAL: Refuse = Refuse::Nak(NakCode::RemoteOperationalError, WcStatus::LocQpOpErr);

/// Writes the next response packet into `buf`. READ responses are data: a QP held to a rate
/// (DCQCN) paces them as it paces its requests.
pub(crate) fn poll<M: Memory>(
    qp: &mut Qp,
    sh: &mut Shared<M>,
    now: Instant,
    buf: &mut [u8],
) -> Option<usize> {
    let path = qp.path?;
    let mtu = qp.mtu(sh);
    let read = matches!(qp.resp.out.front()?, Response::Read { .. });
    if read && reaction::held(qp, sh, now) {
        return None;
    }
    let front = qp.resp.out.front_mut()?;
    let mut ext = ExtRepr::default();
    let transport = qp.init.qp_type.transport();
    let only = |op| Opcode::build(transport, op, Position::Only, With::Nothing);
    let (opcode, psn, payload_len, done) = match *front {
        Response::Ack { psn, syndrome, msn } => {
            ext.aeth = Some(AethRepr { syndrome, msn });
            (only(Operation::Acknowledge)?, psn, 0, true)
        }
        Response::Atomic { psn, orig, msn, .. } => {
            ext.aeth = Some(AethRepr {
                syndrome: ack_syndrome(),
                msn,
            });
            ext.atomic_ack_eth = Some(AtomicAckEthRepr { orig });
            (only(Operation::AtomicAcknowledge)?, psn, 0, true)
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
            let opcode = Opcode::build(transport, Operation::RdmaReadResponse, pos, With::Nothing)
                .expect("RC and XRC READ responses have every position");
            if first || last {
                ext.aeth = Some(AethRepr {
                    syndrome: ack_syndrome(),
                    msn,
                });
            }
            (opcode, psn, n, last)
        }
    };
    let repr = path.frame(BthRepr::new(opcode, qp.attr.dest_qp_num, psn), ext);
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
            return poll(qp, sh, now, buf);
        }
    }
    let n = repr
        .emit_in_place_with(payload_len as usize, buf, sh.icrc)
        .ok()?;
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
    if read {
        reaction::sent(qp, sh, now, n);
    }
    sh.counters.sent_pkts += 1;
    Some(n)
}
