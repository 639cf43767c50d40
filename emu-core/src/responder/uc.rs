//! UC requests: as RC's, but UC has no responses, so a message with a gap or a refused check
//! is dropped, and the next FIRST or ONLY packet starts afresh.

use softrnic_wire::ParsedFrame;

use super::Refuse;
use super::checks::in_sequence;
use super::execute::execute;
use crate::memory::Memory;
use crate::psn;
use crate::qp::{InProgress, Qp, Shared};

/// UC (IBA 9.8.3): no ACKs. A PSN gap or a broken opcode sequence drops the message in
/// progress, and the receiver waits for the next FIRST or ONLY packet.
pub(super) fn handle<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, pkt: &ParsedFrame) {
    let bth = &pkt.repr.bth;
    let info = bth.opcode.info();
    let p = bth.psn;
    if p != qp.resp.epsn || !in_sequence(qp.resp.cur, info.operation, info.position) {
        if matches!(
            qp.resp.cur,
            Some(InProgress::Send | InProgress::Write { .. })
        ) {
            sh.counters.uc_seq_drop += 1;
        }
        uc_abort(qp, sh);
        if !info.position.is_first() {
            sh.counters.uc_seq_drop += 1;
            qp.resp.cur = Some(InProgress::Dropping);
            qp.resp.epsn = psn::add(p, 1);
            return;
        }
    }
    qp.resp.epsn = psn::add(p, 1);
    if qp.resp.cur == Some(InProgress::Dropping) {
        // In sequence after a dropped message means a FIRST or ONLY packet: a new message.
        qp.resp.cur = None;
    }
    if let Err(refuse) = execute(qp, sh, pkt) {
        match refuse {
            Refuse::Rnr => sh.counters.rcv_no_wqe_drop += 1,
            _ => sh.counters.uc_seq_drop += 1,
        }
        uc_abort(qp, sh);
        if !info.position.is_last() {
            qp.resp.cur = Some(InProgress::Dropping);
        }
    }
}

/// Drops the UC message in progress; a receive WQE it held is reused for the next one.
fn uc_abort<M>(qp: &mut Qp, sh: &mut Shared<M>) {
    qp.resp.cur = None;
    if let Some((wr, _)) = qp.release_held(sh) {
        match qp.init.srq.and_then(|id| sh.srqs.get_mut(id)) {
            Some(srq) => srq.queue.push_front(wr),
            None => qp.rq.push_front(wr),
        }
    }
}
