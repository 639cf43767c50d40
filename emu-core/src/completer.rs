//! The completer: turns ACKs, NAKs, READ responses and atomic ACKs into completions, and
//! decides when the requester goes back to resend (IBA 9.7.5.1; rxe_comp.c).
//!
//! Work requests complete strictly in order, from the front of the send queue. The requester's
//! position is its own: the completer returns a [`Directive`] (where to resend from, how long to
//! wait) that the requester follows. The local ACK timer is the engine's ([`Timers`]).

use softrnic_wire::{NakCode, Operation, ParsedFrame, Syndrome};

use crate::cq::WcStatus;
use crate::dma;
use crate::memory::Memory;
use crate::psn;
use crate::qp::{Directive, Qp, SendWqe, Shared};
use crate::time::Instant;
use crate::timers::{Timer, Timers};
use crate::wr::SendOp;

/// Why the requester goes back.
enum Retry {
    Timeout,
    Nak,
}

/// A response or ACK beyond the WQE at the front.
struct ImpliedNak;

/// Forward progress: the retry counters start over (IBA 9.7.6.1.3) and the timer restarts if
/// anything is still outstanding.
fn progressed(qp: &mut Qp, timers: &mut Timers, now: Instant) {
    qp.comp.retry_left = qp.attr.retry_cnt;
    qp.comp.rnr_left = qp.attr.rnr_retry;
    qp.comp.retrying_from = None;
    timers.stop(qp.qpn, Timer::Ack);
    if qp.started(0) {
        qp.arm_ack_timer(timers, now);
    }
}

/// Everything before `psn` is acknowledged.
fn acknowledge_to(qp: &mut Qp, psn: u32) {
    qp.comp.psn = psn;
    qp.comp.directive.acknowledged = Some(psn);
}

/// Completes the SEND/WRITE WQEs that end before `end`: a later response acknowledges them
/// (IBA 9.7.5.1.1: ACKs are cumulative). A READ or atomic among them whose response never
/// came is an implied NAK (9.7.5.1.5).
fn complete_before<M>(qp: &mut Qp, sh: &mut Shared<M>, end: u32) -> Result<bool, ImpliedNak> {
    let mut progress = false;
    while let Some(w) = qp.sq.front() {
        if !qp.started(0) || psn::diff(w.last_psn, end) >= 0 {
            break;
        }
        if w.wr.op.needs_response() {
            return Err(ImpliedNak);
        }
        let next = psn::add(w.last_psn, 1);
        qp.sq[0].status = Some(WcStatus::Success);
        qp.retire(sh);
        acknowledge_to(qp, next);
        progress = true;
    }
    Ok(progress)
}

/// Handles a response packet for this QP; returns what the requester must do.
pub(crate) fn handle<M: Memory>(
    qp: &mut Qp,
    sh: &mut Shared<M>,
    now: Instant,
    pkt: &ParsedFrame,
) -> Directive {
    respond(qp, sh, now, pkt);
    std::mem::take(&mut qp.comp.directive)
}

fn respond<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, now: Instant, pkt: &ParsedFrame) {
    let bth = &pkt.repr.bth;
    let p = bth.psn;
    // A response to a PSN never sent is a ghost (IBA 9.7.5.1.2); one before the oldest
    // outstanding PSN is a duplicate. Both are ignored.
    if psn::diff(p, qp.req.max_sent) >= 0 || !qp.started(0) {
        sh.counters.duplicate_response += 1;
        return;
    }
    let info = bth.opcode.info();
    match info.operation {
        Operation::Acknowledge => match pkt.repr.ext.aeth.map(|a| a.syndrome) {
            Some(Syndrome::Ack(_)) => ack(qp, sh, now, p),
            Some(Syndrome::RnrNak(timer)) => {
                if !nak_prologue(qp, sh, now, p) {
                    return;
                }
                sh.counters.rnr_nak_retry_err += 1;
                let waiting = sh.timers.deadline(qp.qpn, Timer::RnrWait).is_some();
                if waiting && qp.comp.retrying_from == Some(qp.comp.psn) {
                    return;
                }
                if qp.comp.rnr_left == 0 {
                    sh.counters.rnr_retry_exceeded_err += 1;
                    return qp.fail_front(sh, WcStatus::RnrRetryExcErr);
                }
                if qp.comp.rnr_left != 7 {
                    qp.comp.rnr_left -= 1;
                }
                rewind(qp, sh);
                let wait = core::time::Duration::from_micros(timer.micros() as u64);
                qp.comp.directive.wait_until = Some(now + wait);
            }
            Some(Syndrome::Nak(code)) => {
                if !nak_prologue(qp, sh, now, p) {
                    return;
                }
                let status = match code {
                    NakCode::PsnSequenceError => {
                        sh.counters.packet_seq_err += 1;
                        if qp.comp.retrying_from != Some(qp.comp.psn) {
                            retry(qp, sh, now, Retry::Nak);
                        }
                        return;
                    }
                    NakCode::InvalidRequest => {
                        sh.counters.req_remote_invalid_request += 1;
                        WcStatus::RemInvReqErr
                    }
                    NakCode::RemoteAccessError => {
                        sh.counters.req_remote_access_errors += 1;
                        WcStatus::RemAccessErr
                    }
                    _ => {
                        sh.counters.req_remote_operational_errors += 1;
                        WcStatus::RemOpErr
                    }
                };
                qp.fail_front(sh, status);
            }
            Some(Syndrome::Reserved(_)) | None => bad_response(qp, sh),
        },
        Operation::RdmaReadResponse => read_response(qp, sh, now, pkt),
        Operation::AtomicAcknowledge => atomic_ack(qp, sh, now, pkt),
        _ => {}
    }
}

/// A positive ACK for everything up to and including `p`.
fn ack<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, now: Instant, p: u32) {
    if psn::diff(p, qp.comp.psn) < 0 {
        sh.counters.duplicate_response += 1;
        return;
    }
    let mut progress = match complete_before(qp, sh, psn::add(p, 1)) {
        Ok(progress) => progress,
        Err(ImpliedNak) => return implied_nak(qp, sh, now),
    };
    if let Some(w) = qp.sq.front()
        && qp.started(0)
        && psn::diff(p, w.first_psn) >= 0
    {
        if w.wr.op.needs_response() {
            return implied_nak(qp, sh, now);
        }
        // Part of a multi-packet message is acknowledged.
        acknowledge_to(qp, psn::add(p, 1));
        progress = true;
    }
    if progress {
        progressed(qp, &mut sh.timers, now);
    }
}

/// What every NAK and RNR NAK at `p` starts with, as [`response_prologue`] for responses: a
/// stale one (before the oldest unacknowledged PSN: a duplicate, or one overtaken by a later
/// ACK) is dropped, and what lies before `p` is acknowledged. Returns whether to go on.
fn nak_prologue<M>(qp: &mut Qp, sh: &mut Shared<M>, now: Instant, p: u32) -> bool {
    if psn::diff(p, qp.comp.psn) < 0 {
        sh.counters.duplicate_response += 1;
        return false;
    }
    if nak_prefix(qp, sh, now, p).is_err() {
        implied_nak(qp, sh, now);
        return false;
    }
    true
}

/// A NAK for `p` acknowledges everything before it (IBA 9.7.5.1.2).
fn nak_prefix<M>(qp: &mut Qp, sh: &mut Shared<M>, now: Instant, p: u32) -> Result<(), ImpliedNak> {
    let mut progress = complete_before(qp, sh, p)?;
    if let Some(w) = qp.sq.front()
        && qp.started(0)
        && !w.wr.op.needs_response()
        && psn::diff(p, w.first_psn) > 0
        && psn::diff(p, qp.comp.psn) > 0
    {
        acknowledge_to(qp, p);
        progress = true;
    }
    if progress {
        progressed(qp, &mut sh.timers, now);
    }
    Ok(())
}

fn implied_nak<M>(qp: &mut Qp, sh: &mut Shared<M>, now: Instant) {
    if qp.comp.retrying_from == Some(qp.comp.psn) {
        return;
    }
    sh.counters.implied_nak_seq_err += 1;
    retry(qp, sh, now, Retry::Nak);
}

/// Goes back to the oldest unacknowledged PSN, or fails the WQE there when retries ran out.
fn retry<M>(qp: &mut Qp, sh: &mut Shared<M>, _now: Instant, why: Retry) {
    if qp.comp.retry_left == 0 {
        sh.counters.retry_exceeded_err += 1;
        return qp.fail_front(sh, WcStatus::RetryExcErr);
    }
    qp.comp.retry_left -= 1;
    rewind(qp, sh);
    if let Retry::Timeout = why {
        qp.comp.retrying_from = None;
    }
}

fn rewind<M>(qp: &mut Qp, sh: &mut Shared<M>) {
    let psn = qp.comp.psn;
    qp.comp.directive.resend_from = Some(psn);
    qp.comp.retrying_from = Some(psn);
    sh.timers.stop(qp.qpn, Timer::Ack);
}

/// The local ACK timer fired (IBA 9.7.6.1.3); returns what the requester must do.
pub(crate) fn timeout<M>(qp: &mut Qp, sh: &mut Shared<M>, now: Instant) -> Directive {
    if qp.started(0) {
        sh.counters.local_ack_timeout_err += 1;
        retry(qp, sh, now, Retry::Timeout);
    }
    std::mem::take(&mut qp.comp.directive)
}

/// What every READ response and atomic ACK at `p` starts with: a duplicate is dropped, and
/// the SEND/WRITE WQEs before `p` are acknowledged by it (a READ or atomic among them whose
/// response is missing is an implied NAK). Returns whether to go on with the response.
fn response_prologue<M>(qp: &mut Qp, sh: &mut Shared<M>, now: Instant, p: u32) -> bool {
    if psn::diff(p, qp.comp.psn) < 0 {
        sh.counters.duplicate_response += 1;
        return false;
    }
    match complete_before(qp, sh, p) {
        Ok(true) => progressed(qp, &mut sh.timers, now),
        Ok(false) => {}
        Err(ImpliedNak) => {
            implied_nak(qp, sh, now);
            return false;
        }
    }
    true
}

/// The sent WQE at the front when `p` falls within its PSNs: what a response at `p` answers.
/// Anything else is counted as a duplicate.
fn outstanding_at<'q, M>(qp: &'q Qp, sh: &mut Shared<M>, p: u32) -> Option<&'q SendWqe> {
    let w = qp.sq.front()?;
    if !qp.started(0) || psn::diff(p, w.first_psn) < 0 || psn::diff(p, w.last_psn) > 0 {
        sh.counters.duplicate_response += 1;
        return None;
    }
    Some(w)
}

/// A response of the wrong kind for the request it answers (a READ response for a SEND, an
/// atomic ACK for a READ), a READ response of the wrong length, a reserved AETH syndrome: IBA
/// 9.9.2 (requester side errors) calls these bad responses. The WQE completes with
/// IBV_WC_BAD_RESP_ERR and the QP goes to the error state, as rxe does.
fn bad_response<M>(qp: &mut Qp, sh: &mut Shared<M>) {
    sh.counters.bad_response += 1;
    qp.fail_front(sh, WcStatus::BadRespErr);
}

fn read_response<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, now: Instant, pkt: &ParsedFrame) {
    let p = pkt.repr.bth.psn;
    if !response_prologue(qp, sh, now, p) {
        return;
    }
    let mtu = qp.mtu(sh);
    let Some(w) = outstanding_at(qp, sh, p) else {
        return;
    };
    let last = pkt.repr.bth.opcode.info().position.is_last();
    match w.wr.op {
        SendOp::Read(_) => {}
        // IBA 1.5: ATOMIC WRITE and FLUSH are answered by an empty READ RESPONSE ONLY.
        SendOp::AtomicWrite { .. } | SendOp::Flush { .. } => {
            if !pkt.repr.bth.opcode.info().position.is_first() || !last || !pkt.payload().is_empty()
            {
                return bad_response(qp, sh);
            }
            acknowledge_to(qp, psn::add(p, 1));
            qp.sq[0].status = Some(WcStatus::Success);
            qp.retire(sh);
            return progressed(qp, &mut sh.timers, now);
        }
        _ => return bad_response(qp, sh),
    }
    if p != qp.comp.psn {
        // A READ response is missing before this one (IBA 9.7.5.1.5).
        return implied_nak(qp, sh, now);
    }
    let payload = pkt.payload();
    let n = payload.len() as u32;
    let left = w.len - w.read_done;
    let sane = if last {
        n == left
    } else {
        n == mtu && n < left
    };
    if !sane {
        return bad_response(qp, sh);
    }
    let (pd, offset) = (qp.pd, w.read_done);
    if let Err(status) = dma::scatter(&mut sh.mem, &sh.keys, pd, &w.wr.sgl, offset, payload) {
        return qp.fail_front(sh, status);
    }
    qp.sq[0].read_done += n;
    acknowledge_to(qp, psn::add(p, 1));
    if last {
        qp.sq[0].status = Some(WcStatus::Success);
        qp.retire(sh);
    }
    progressed(qp, &mut sh.timers, now);
}

fn atomic_ack<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, now: Instant, pkt: &ParsedFrame) {
    let p = pkt.repr.bth.psn;
    if !response_prologue(qp, sh, now, p) {
        return;
    }
    let Some(w) = outstanding_at(qp, sh, p) else {
        return;
    };
    if !w.wr.op.is_atomic() {
        return bad_response(qp, sh);
    }
    let orig = pkt.repr.ext.atomic_ack_eth.map_or(0, |a| a.orig);
    let pd = qp.pd;
    if let Err(status) = dma::scatter(&mut sh.mem, &sh.keys, pd, &w.wr.sgl, 0, &orig.to_ne_bytes())
    {
        return qp.fail_front(sh, status);
    }
    acknowledge_to(qp, psn::add(p, 1));
    qp.sq[0].status = Some(WcStatus::Success);
    qp.retire(sh);
    progressed(qp, &mut sh.timers, now);
}

#[cfg(test)]
mod tests {
    use softrnic_wire::{AethRepr, ExtRepr, NakCode, Opcode as O, RnrTimer, Syndrome};

    use crate::cq::{WcOpcode, WcStatus};
    use crate::testing::{ACK, Bench, MTU, REMOTE, SQ_PSN};
    use crate::wr::SendOp;

    fn psns(b: &mut Bench) -> Vec<u32> {
        b.sent().iter().map(|s| s.psn).collect()
    }

    /// Three one-packet SENDs, sent.
    fn three_sends() -> Bench {
        let mut b = Bench::rc();
        for i in 1..=3 {
            b.post(i, SendOp::Send, 8);
        }
        assert_eq!(psns(&mut b), [SQ_PSN, SQ_PSN + 1, SQ_PSN + 2]);
        b
    }

    fn read_response(b: &mut Bench, opcode: O, psn: u32, payload: &[u8]) {
        let aeth = opcode.info().headers.contains(softrnic_wire::Headers::AETH);
        let ext = ExtRepr {
            aeth: aeth.then_some(AethRepr {
                syndrome: ACK,
                msn: 0,
            }),
            ..ExtRepr::default()
        };
        b.receive(opcode, psn, ext, payload);
    }

    #[test]
    fn an_ack_completes_every_wqe_up_to_its_psn_in_order() {
        let mut b = three_sends();
        b.ack(SQ_PSN + 1, ACK);
        let done = [
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::Send),
        ];
        assert_eq!(b.completions(), done);
        b.ack(SQ_PSN + 2, ACK);
        assert_eq!(b.completions(), [(3, WcStatus::Success, WcOpcode::Send)]);
    }

    #[test]
    fn a_sequence_nak_acknowledges_what_precedes_it_and_resends_from_its_psn() {
        let mut b = three_sends();
        b.ack(SQ_PSN + 1, Syndrome::Nak(NakCode::PsnSequenceError));
        assert_eq!(b.completions(), [(1, WcStatus::Success, WcOpcode::Send)]);
        assert_eq!(psns(&mut b), [SQ_PSN + 1, SQ_PSN + 2]);
        // A second NAK for the same loss does not start another resend.
        b.ack(SQ_PSN + 1, Syndrome::Nak(NakCode::PsnSequenceError));
        assert_eq!(psns(&mut b), [] as [u32; 0]);
    }

    #[test]
    fn an_rnr_nak_holds_the_requester_until_its_timer_ends() {
        let mut b = three_sends();
        b.ack(SQ_PSN, Syndrome::RnrNak(RnrTimer::from_code(1)));
        assert_eq!(psns(&mut b), [] as [u32; 0]);
        b.fire_timer();
        assert_eq!(psns(&mut b), [SQ_PSN, SQ_PSN + 1, SQ_PSN + 2]);
        assert_eq!(b.engine.counters().rnr_nak_retry_err, 1);
    }

    #[test]
    fn a_lost_ack_times_out_resends_and_fails_when_the_retries_run_out() {
        let mut b = Bench::rc();
        b.post(1, SendOp::Send, 8);
        assert_eq!(psns(&mut b), [SQ_PSN]);
        // retry_cnt is 2: two resends, then the WQE fails.
        for _ in 0..2 {
            b.fire_timer();
            assert_eq!(psns(&mut b), [SQ_PSN]);
        }
        b.fire_timer();
        assert_eq!(psns(&mut b), [] as [u32; 0]);
        assert_eq!(
            b.completions(),
            [(1, WcStatus::RetryExcErr, WcOpcode::Send)]
        );
        assert_eq!(b.engine.counters().local_ack_timeout_err, 3);
    }

    #[test]
    fn read_responses_land_in_the_wqe_and_complete_it() {
        let mut b = Bench::rc();
        b.post(1, SendOp::Read(REMOTE), 2 * MTU);
        assert_eq!(psns(&mut b), [SQ_PSN]);
        read_response(&mut b, O::RcReadResponseFirst, SQ_PSN, &[3; 1024]);
        read_response(&mut b, O::RcReadResponseLast, SQ_PSN + 1, &[4; 1024]);
        assert_eq!(
            b.completions(),
            [(1, WcStatus::Success, WcOpcode::RdmaRead)]
        );
        assert_eq!(b.read(1022, 4), [3, 3, 4, 4]);
    }

    #[test]
    fn a_missing_read_response_is_an_implied_nak_that_asks_again() {
        let mut b = Bench::rc();
        b.post(1, SendOp::Read(REMOTE), 2 * MTU);
        b.sent();
        // The FIRST response was lost: the LAST one implies it (IBA 9.7.5.1.5).
        read_response(&mut b, O::RcReadResponseLast, SQ_PSN + 1, &[4; 1024]);
        let again = b.sent();
        assert_eq!(again.len(), 1);
        assert_eq!((again[0].opcode, again[0].psn), (O::RcReadRequest, SQ_PSN));
        assert_eq!(again[0].ext.reth.map(|r| r.dma_len), Some(2 * MTU));
        assert_eq!(b.engine.counters().implied_nak_seq_err, 1);
    }

    const VALUE: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

    /// An ATOMIC WRITE and a FLUSH, sent; returns their PSNs.
    fn atomic_write_and_flush(b: &mut Bench) -> Vec<u32> {
        b.post(
            1,
            SendOp::AtomicWrite {
                remote: REMOTE,
                value: VALUE,
            },
            0,
        );
        let flush = SendOp::Flush {
            remote: REMOTE,
            len: 64,
            placement: 1,
            level: 0,
        };
        b.post(2, flush, 0);
        psns(b)
    }

    #[test]
    fn an_empty_read_response_completes_an_atomic_write_or_flush() {
        let mut b = Bench::rc();
        assert_eq!(atomic_write_and_flush(&mut b), [SQ_PSN, SQ_PSN + 1]);
        read_response(&mut b, O::RcReadResponseOnly, SQ_PSN, &[]);
        read_response(&mut b, O::RcReadResponseOnly, SQ_PSN + 1, &[]);
        assert_eq!(
            b.completions(),
            [
                (1, WcStatus::Success, WcOpcode::AtomicWrite),
                (2, WcStatus::Success, WcOpcode::Flush)
            ]
        );
    }

    #[test]
    fn an_ack_covers_an_atomic_write_and_flush_as_rxe_allows() {
        let mut b = Bench::rc();
        atomic_write_and_flush(&mut b);
        b.ack(SQ_PSN + 1, ACK);
        let done: Vec<_> = b.completions().into_iter().map(|c| c.1).collect();
        assert_eq!(done, [WcStatus::Success; 2]);
        assert_eq!(b.engine.counters().implied_nak_seq_err, 0);
    }

    #[test]
    fn a_read_response_with_data_for_an_atomic_write_is_a_bad_response() {
        let mut b = Bench::rc();
        atomic_write_and_flush(&mut b);
        read_response(&mut b, O::RcReadResponseOnly, SQ_PSN, &[0; 8]);
        assert_eq!(
            b.completions()[0],
            (1, WcStatus::BadRespErr, WcOpcode::AtomicWrite)
        );
    }

    #[test]
    fn a_response_to_a_psn_never_sent_is_ignored() {
        let mut b = three_sends();
        b.ack(SQ_PSN + 7, ACK);
        assert_eq!(b.completions(), []);
        assert_eq!(b.engine.counters().duplicate_response, 1);
    }

    #[test]
    fn a_response_of_the_wrong_kind_is_a_bad_response() {
        let mut b = three_sends();
        read_response(&mut b, O::RcReadResponseOnly, SQ_PSN, &[0; 8]);
        assert_eq!(
            b.completions()[0],
            (1, WcStatus::BadRespErr, WcOpcode::Send)
        );
    }
}
