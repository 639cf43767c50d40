//! RC requests: in sequence through the checks and execution, duplicates answered again
//! (IBA 9.7.5.2).

use softrnic_wire::{NakCode, Operation, ParsedFrame, RnrTimer, Syndrome};

use super::checks::read_key;
use super::execute::execute;
use super::{MAX_QUEUED_EXTRA, Refuse, ack_syndrome};
use crate::cq::WcOpcode;
use crate::memory::Memory;
use crate::psn;
use crate::qp::{Qp, Resource, ResourceKind, Response, Shared};

pub(super) fn handle<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, pkt: &ParsedFrame) {
    let p = pkt.repr.bth.psn;
    let d = psn::diff(p, qp.resp.epsn);
    if d > 0 {
        sh.counters.out_of_sequence += 1;
        if !qp.resp.nak_sent {
            qp.resp.nak_sent = true;
            let epsn = qp.resp.epsn;
            qp.resp
                .queue_ack(epsn, Syndrome::Nak(NakCode::PsnSequenceError));
        }
        return;
    }
    if d < 0 {
        sh.counters.duplicate_request += 1;
        return duplicate(qp, sh, pkt);
    }
    match execute(qp, sh, pkt) {
        Ok(()) => qp.resp.nak_sent = false,
        Err(Refuse::Rnr) => {
            sh.counters.rnr_nak_sent += 1;
            qp.resp.nak_sent = true;
            let timer = RnrTimer::from_code(qp.attr.min_rnr_timer);
            qp.resp.queue_ack(p, Syndrome::RnrNak(timer));
        }
        Err(Refuse::Nak(code, status)) => {
            match code {
                NakCode::RemoteAccessError => sh.counters.resp_remote_access_errors += 1,
                _ => sh.counters.resp_invalid_request += 1,
            }
            if let Some((wr, _)) = qp.release_held(sh) {
                let wc = qp.recv_wc(wr.wr_id, status, WcOpcode::Recv);
                sh.complete(qp.init.recv_cq, wc);
            }
            qp.resp.queue_ack(p, Syndrome::Nak(code));
            qp.enter_error(sh);
        }
    }
}

/// A request the responder has seen before (IBA 9.7.5.2.5): SEND and WRITE are acknowledged
/// again without executing; a READ is answered again from the requested PSN; an atomic gets
/// its saved result, and an ATOMIC WRITE or FLUSH its empty response, never a second
/// execution.
fn duplicate<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, pkt: &ParsedFrame) {
    let bth = &pkt.repr.bth;
    let p = bth.psn;
    if qp.resp.out.len() >= qp.attr.max_dest_rd_atomic as usize + MAX_QUEUED_EXTRA {
        return;
    }
    let msn = qp.resp.msn;
    let found = |r: &&Resource| psn::diff(p, r.first_psn) >= 0 && psn::diff(p, r.last_psn) <= 0;
    match bth.opcode.info().operation {
        Operation::Send | Operation::RdmaWrite => {
            let last = psn::add(qp.resp.epsn, psn::MASK);
            qp.resp.queue_ack(last, ack_syndrome());
        }
        Operation::RdmaReadRequest => {
            let Some(reth) = pkt.repr.ext.reth else {
                return;
            };
            let Some(
                &res @ Resource {
                    kind: ResourceKind::Read { rkey, va, len },
                    ..
                },
            ) = qp.resp.resources.iter().rev().find(found)
            else {
                return;
            };
            // The re-request may ask for a tail of the original (a resumed READ).
            let end = va + len as u64;
            let inside = reth.rkey == rkey
                && reth.va >= va
                && reth
                    .va
                    .checked_add(reth.dma_len as u64)
                    .is_some_and(|e| e <= end);
            if !inside {
                return;
            }
            if read_key(qp, sh, rkey, reth.va, reth.dma_len).is_err() {
                return;
            }
            replay_read(qp, res, |replay| Response::Read {
                psn: p,
                rkey,
                va: reth.va,
                left: reth.dma_len,
                first: true,
                msn,
                replay,
            });
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            if let Some(&Resource {
                kind: ResourceKind::Atomic { orig },
                first_psn,
                ..
            }) = qp.resp.resources.iter().rev().find(found)
                && first_psn == p
            {
                qp.resp.out.push_back(Response::Atomic {
                    psn: p,
                    orig,
                    msn,
                    replay: true,
                });
            }
        }
        Operation::AtomicWrite | Operation::Flush => {
            if let Some(&Resource {
                kind: ResourceKind::Done,
                first_psn,
                ..
            }) = qp.resp.resources.iter().rev().find(found)
                && first_psn == p
            {
                qp.resp.out.push_back(Response::empty_read(p, msn, true));
            }
        }
        _ => {}
    }
}

/// Answers a duplicate READ from the PSN it asks for. What is still queued of that READ's
/// answer (the original stream, earlier replays) is dropped and the replay takes its place, as
/// rxe's `duplicate_request` makes the duplicate its current resource: the requester discards
/// everything past its gap, and a replay behind the rest of a long stream would come only after
/// the requester's timer, every time (IBA 9.7.5.2.1: the responder resends from the duplicate's
/// PSN). Responses to later requests keep their places. The replay counts against
/// max_dest_rd_atomic only if it replaces a first answer that did.
fn replay_read(qp: &mut Qp, res: Resource, response: impl Fn(bool) -> Response) {
    let out = &mut qp.resp.out;
    let of_res = |r: &Response| {
        matches!(*r, Response::Read { psn, .. }
            if psn::diff(psn, res.first_psn) >= 0 && psn::diff(psn, res.last_psn) <= 0)
    };
    let at = out.iter().position(of_res);
    let mut replay = true;
    out.retain(|r| {
        let drop = of_res(r);
        if drop && matches!(r, Response::Read { replay: false, .. }) {
            replay = false;
        }
        !drop
    });
    let r = response(replay);
    match at {
        Some(i) => out.insert(i, r),
        None => out.push_back(r),
    }
}
