//! The requester: turns send work requests into packets (IBA 9.7.4.1; rxe_req.c).
//!
//! It walks the send queue from `next`, segments each message by the path MTU, numbers the
//! packets, and keeps within the PSN window and the max_rd_atomic credits. The completer
//! rewinds it (go-back-N) when a packet must be sent again.

use softrnic_wire::{
    AtomicEthRepr, DethRepr, ExtRepr, FethRepr, FlushLevel, FlushPlacement, Opcode, Position,
    RethRepr, With, bth::BthRepr,
};

use crate::cq::WcStatus;
use crate::dma;
use crate::memory::Memory;
use crate::psn;
use crate::qp::{Directive, Qp, Shared};
use crate::qp_attr::QpState;
use crate::qp_attr::QpType;
use crate::reaction;
use crate::time::Instant;
use crate::timers::Timer;
use crate::wr::{SendFlags, SendOp};

/// At most this many PSNs are unacknowledged (rxe's RXE_MAX_UNACKED_PSNS), which bounds the
/// retransmission work and the responder's duplicate window.
pub const MAX_UNACKED_PSNS: i32 = 128;
/// Ask for an ACK at least every this many packets within a long message (rxe's
/// RXE_MAX_PKT_PER_ACK), so the completer can retire WQEs and keep the window open.
pub const MAX_PKTS_PER_ACK: u32 = 64;

/// Does what the completer asks after a response or a timeout: go back (or on) to a PSN,
/// wait out an RNR NAK.
pub(crate) fn follow<M>(qp: &mut Qp, sh: &mut Shared<M>, d: Directive) {
    let mut resend_from = d.resend_from;
    if let Some(acked) = d.acknowledged {
        qp.req.acked = acked;
        // A resend in progress may be overtaken by ACKs for what it was about to send again
        // (the first transmission got through after all): it skips what is acknowledged.
        if psn::diff(acked, resend_from.unwrap_or(qp.req.psn)) > 0 {
            resend_from = Some(acked);
        }
    }
    if let Some(psn) = resend_from {
        let mtu = qp.mtu(sh);
        let front = qp.sq.front().filter(|w| w.sent);
        qp.req.rewind(front, psn, mtu);
    }
    if let Some(until) = d.wait_until
        && qp.state != QpState::Err
    {
        sh.timers.arm(qp.qpn, Timer::RnrWait, until);
    }
}

/// The opcode for a packet of `op` at `pos`: the opcode table read the other way. Posting
/// admits only operations the QP's transport carries (`SendWr::check`), and only the last
/// packet of a message carries an immediate or an invalidate.
fn opcode(t: QpType, op: &SendOp, pos: Position) -> Opcode {
    let (operation, with) = op.wire().expect("local operations send no packets");
    let with = if pos.is_last() { with } else { With::Nothing };
    Opcode::build(t.transport(), operation, pos, with)
        .expect("posting admits only operations the transport carries")
}

/// Executes a local WR (invalidate, bind) and returns its status.
fn execute_local<M>(qp: &Qp, sh: &mut Shared<M>, op: &SendOp) -> WcStatus {
    match *op {
        SendOp::LocalInv(key) => match sh.keys.invalidate(key, qp.pd) {
            Ok(()) => WcStatus::Success,
            Err(_) => WcStatus::LocQpOpErr,
        },
        SendOp::BindMw(b) => match sh.keys.bind(qp.pd, qp.qpn, &b) {
            Ok(_) => WcStatus::Success,
            Err(_) => WcStatus::MwBindErr,
        },
        _ => WcStatus::Success,
    }
}

/// Outstanding READ/atomic requests: those before `next` not yet completed.
fn rd_atomic_outstanding(qp: &Qp) -> u32 {
    qp.sq
        .iter()
        .take(qp.req.next)
        .filter(|w| w.status.is_none() && w.wr.op.is_read_or_atomic())
        .count() as u32
}

/// Writes the next packet into `buf` and returns its length, or `None` if there is nothing
/// to send now.
pub(crate) fn poll<M: Memory>(
    qp: &mut Qp,
    sh: &mut Shared<M>,
    now: Instant,
    buf: &mut [u8],
) -> Option<usize> {
    if !qp.sends() {
        return None;
    }
    if let Some(t) = sh.timers.deadline(qp.qpn, Timer::RnrWait) {
        if now < t {
            return None;
        }
        sh.timers.stop(qp.qpn, Timer::RnrWait);
    }
    // DCQCN: a QP held to a rate sends its next packet when the last has had its time.
    if reaction::held(qp, sh, now) {
        return None;
    }
    loop {
        let index = qp.req.next;
        let w = qp.sq.get(index)?;
        match w.status {
            Some(WcStatus::Success) => {
                qp.req.next += 1;
                continue;
            }
            // A failed WQE waits for the ones before it to complete; its retirement moves the
            // QP to error.
            Some(_) => return None,
            None => {}
        }
        if w.wr.op.is_local() {
            // Local operations wait for every earlier WQE (rxe fences LOCAL_INV this way).
            if index != 0 {
                return None;
            }
            let op = w.wr.op;
            let status = execute_local(qp, sh, &op);
            qp.sq[0].status = Some(status);
            qp.req.next += 1;
            qp.retire(sh);
            if !qp.sends() {
                return None;
            }
            continue;
        }
        if qp.init.qp_type.is_reliable() {
            let fenced = w.wr.flags.contains(SendFlags::FENCE);
            let rd_atomic = w.wr.op.is_read_or_atomic();
            if qp.req.offset == 0 && (fenced || rd_atomic) {
                // IBA 10.8.3.3: a fenced WR waits for prior READs and atomics; 9.5.1: at most
                // max_rd_atomic of them are outstanding.
                let outstanding = rd_atomic_outstanding(qp);
                let limit = qp.attr.max_rd_atomic.max(1) as u32;
                if (fenced && outstanding > 0) || (rd_atomic && outstanding >= limit) {
                    return None;
                }
            }
            if psn::diff(qp.req.psn, qp.req.acked) >= MAX_UNACKED_PSNS {
                return None;
            }
        }
        return match build(qp, sh, now, buf) {
            Ok(n) => {
                reaction::sent(qp, sh, now, n);
                Some(n)
            }
            Err(status) => {
                // The requester stops at the failed WQE: nothing behind it may reach the wire
                // (it is flushed when this one is retired, IBA 10.8.3.1).
                qp.sq[index].status = Some(status);
                qp.req.offset = 0;
                qp.retire(sh);
                None
            }
        };
    }
}

/// Builds the packet for the WQE at `req.next` and advances.
fn build<M: Memory>(
    qp: &mut Qp,
    sh: &mut Shared<M>,
    now: Instant,
    buf: &mut [u8],
) -> Result<usize, WcStatus> {
    let mtu = qp.mtu(sh);
    let index = qp.req.next;
    let offset = qp.req.offset;
    let psn = qp.req.psn;
    let w = &mut qp.sq[index];
    if offset == 0 {
        // The first packet of this message (or a resend of it) fixes its PSN range.
        w.first_psn = psn;
        w.last_psn = psn::add(psn, w.npkts(mtu) - 1);
        w.sent = true;
    }
    let w = &qp.sq[index];
    let remaining = w.len - offset;
    let (pos, payload_len) = if w.wr.op.sends_data() {
        (
            Position::of(offset == 0, remaining <= mtu),
            remaining.min(mtu),
        )
    } else if let SendOp::AtomicWrite { .. } = w.wr.op {
        (Position::Only, w.len)
    } else {
        (Position::Only, 0)
    };
    let ends_message = pos.is_last();

    let mut ext = ExtRepr::default();
    let (path, dest_qp) = match (qp.init.qp_type, w.wr.ud) {
        (QpType::Ud, Some(ud)) => {
            if w.len > mtu {
                return Err(WcStatus::LocLenErr);
            }
            // IBA 10.2.5: a Q_Key with its high bit set means the QP's own (a controlled
            // Q_Key).
            let qkey = if ud.remote_qkey & 0x8000_0000 != 0 {
                qp.attr.qkey
            } else {
                ud.remote_qkey
            };
            ext.deth = Some(DethRepr {
                qkey,
                src_qp: qp.qpn,
            });
            let path = sh
                .path(&ud.ah, qp.udp_src_port)
                .ok_or(WcStatus::LocQpOpErr)?;
            (path, ud.remote_qpn)
        }
        (QpType::Ud, None) => return Err(WcStatus::LocQpOpErr),
        _ => (qp.path.ok_or(WcStatus::LocQpOpErr)?, qp.attr.dest_qp_num),
    };
    // IBA A14: every XRC request packet names the target's SRQ.
    if qp.init.qp_type == QpType::XrcSend {
        ext.xrceth = w.wr.xrc_srqn;
    }
    let first = pos.is_first();
    match w.wr.op {
        SendOp::Write(r) | SendOp::WriteWithImm(r, _) if first => {
            ext.reth = Some(RethRepr {
                va: r.addr,
                rkey: r.rkey,
                dma_len: w.len,
            });
        }
        SendOp::Read(r) => {
            // A resent READ asks only for the bytes still missing (IBA 9.7.4.1.5).
            ext.reth = Some(RethRepr {
                va: r.addr.wrapping_add(offset as u64),
                rkey: r.rkey,
                dma_len: remaining,
            });
        }
        SendOp::CompareSwap {
            remote,
            compare,
            swap,
        } => {
            ext.atomic_eth = Some(AtomicEthRepr {
                va: remote.addr,
                rkey: remote.rkey,
                swap_add: swap,
                compare,
            });
        }
        SendOp::FetchAdd { remote, add } => {
            ext.atomic_eth = Some(AtomicEthRepr {
                va: remote.addr,
                rkey: remote.rkey,
                swap_add: add,
                compare: 0,
            });
        }
        SendOp::AtomicWrite { remote, .. } => {
            ext.reth = Some(RethRepr {
                va: remote.addr,
                rkey: remote.rkey,
                dma_len: w.len,
            });
        }
        SendOp::Flush {
            remote,
            len,
            placement,
            level,
        } => {
            // IBA 1.5 9.3.8: the FETH says what to flush, the RETH where.
            ext.feth = Some(FethRepr {
                placement: FlushPlacement::from_bits_retain(placement),
                level: FlushLevel::from_bits(level),
            });
            ext.reth = Some(RethRepr {
                va: remote.addr,
                rkey: remote.rkey,
                dma_len: len,
            });
        }
        _ => {}
    }
    if ends_message {
        match w.wr.op {
            SendOp::SendWithImm(imm) | SendOp::WriteWithImm(_, imm) => ext.immdt = Some(imm),
            SendOp::SendWithInv(rkey) => ext.ieth = Some(rkey),
            _ => {}
        }
    }
    // After the UD length check: a datagram has one packet.
    let op = opcode(qp.init.qp_type, &w.wr.op, pos);
    let rc = qp.init.qp_type.is_reliable();
    let ack_req = rc && (ends_message || qp.req.noack >= MAX_PKTS_PER_ACK);
    let bth = BthRepr {
        solicited: ends_message && w.wr.flags.contains(SendFlags::SOLICITED),
        ack_req,
        ..BthRepr::new(op, dest_qp, psn)
    };
    let repr = path.frame(bth, ext);
    let at = repr.payload_offset();
    let payload = buf
        .get_mut(at..at + payload_len as usize)
        .ok_or(WcStatus::LocLenErr)?;
    match (&w.inline, &w.wr.op) {
        (_, SendOp::AtomicWrite { value, .. }) => payload.copy_from_slice(value),
        (Some(data), _) => {
            payload.copy_from_slice(&data[offset as usize..][..payload_len as usize])
        }
        (None, _) => dma::gather(&sh.mem, &sh.keys, qp.pd, &w.wr.sgl, offset, payload)?,
    }
    let n = repr
        .emit_in_place_with(payload_len as usize, buf, sh.icrc)
        .map_err(|_| WcStatus::LocLenErr)?;

    // Advance.
    let npsn = match w.wr.op {
        SendOp::Read(_) => psn::npkts(remaining, mtu),
        _ => 1,
    };
    if psn::diff(psn, qp.req.max_sent) < 0 {
        sh.counters.retransmitted_pkts += 1;
    }
    qp.req.psn = psn::add(psn, npsn);
    if psn::diff(qp.req.psn, qp.req.max_sent) > 0 {
        qp.req.max_sent = qp.req.psn;
    }
    qp.req.noack = if ack_req { 0 } else { qp.req.noack + 1 };
    if w.wr.op.sends_data() && !ends_message {
        qp.req.offset += payload_len;
    } else {
        qp.req.next += 1;
        qp.req.offset = 0;
        if !rc {
            // UC and UD complete when the last packet is sent (no ACKs).
            qp.sq[index].status = Some(WcStatus::Success);
            qp.retire(sh);
        }
    }
    if rc {
        qp.arm_ack_timer(&mut sh.timers, now);
    }
    sh.counters.sent_pkts += 1;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use softrnic_wire::Opcode as O;

    use super::{MAX_PKTS_PER_ACK, MAX_UNACKED_PSNS};
    use crate::testing::{ACK, Bench, MTU, REMOTE, SQ_PSN};
    use crate::wr::SendOp;

    /// What the requester sent: (opcode, PSN, AckReq, payload length).
    fn sent(b: &mut Bench) -> Vec<(O, u32, bool, usize)> {
        b.sent()
            .into_iter()
            .map(|s| (s.opcode, s.psn, s.ack_req, s.payload.len()))
            .collect()
    }

    #[test]
    fn a_message_is_cut_at_the_path_mtu_and_asks_for_an_ack_at_its_end() {
        let mut b = Bench::rc();
        b.post(1, SendOp::Send, 2500);
        assert_eq!(
            sent(&mut b),
            [
                (O::RcSendFirst, SQ_PSN, false, 1024),
                (O::RcSendMiddle, SQ_PSN + 1, false, 1024),
                (O::RcSendLast, SQ_PSN + 2, true, 452),
            ]
        );
    }

    #[test]
    fn a_read_request_takes_the_psns_of_its_responses() {
        let mut b = Bench::rc();
        b.post(1, SendOp::Read(REMOTE), 3 * MTU);
        b.post(2, SendOp::Send, 8);
        let frames = b.sent();
        assert_eq!(frames.len(), 2);
        let reth = frames[0].ext.reth.expect("a READ request carries a RETH");
        assert_eq!(
            (frames[0].opcode, frames[0].psn),
            (O::RcReadRequest, SQ_PSN)
        );
        assert_eq!(
            (reth.va, reth.rkey, reth.dma_len),
            (0x10_0000, 0x1234, 3 * MTU)
        );
        assert_eq!(
            (frames[1].opcode, frames[1].psn),
            (O::RcSendOnly, SQ_PSN + 3)
        );
    }

    #[test]
    fn at_most_max_unacked_psns_are_outstanding_and_an_ack_opens_the_window() {
        let mut b = Bench::rc();
        b.post(1, SendOp::Write(REMOTE), 200 * MTU);
        let first = sent(&mut b);
        assert_eq!(first.len(), MAX_UNACKED_PSNS as usize);
        // Within a long message, the packet after MAX_PKTS_PER_ACK without one asks for an ACK.
        let asks: Vec<usize> = (0..first.len()).filter(|&i| first[i].2).collect();
        assert_eq!(asks, [MAX_PKTS_PER_ACK as usize]);
        b.ack(SQ_PSN + 63, ACK);
        let more = sent(&mut b);
        assert_eq!(more.len(), 64);
        assert_eq!(more[0].1, SQ_PSN + 128);
    }

    #[test]
    fn an_atomic_write_carries_its_value_and_a_flush_its_feth_before_its_reth() {
        let mut b = Bench::rc();
        let value = [8, 7, 6, 5, 4, 3, 2, 1];
        b.post(
            1,
            SendOp::AtomicWrite {
                remote: REMOTE,
                value,
            },
            0,
        );
        let flush = SendOp::Flush {
            remote: REMOTE,
            len: 4096,
            placement: 3,
            level: 1,
        };
        b.post(2, flush, 0);
        let frames = b.sent();
        assert_eq!(
            (frames[0].opcode, frames[0].psn, frames[0].ack_req),
            (O::RcAtomicWrite, SQ_PSN, true)
        );
        assert_eq!(frames[0].payload, value);
        let reth = frames[0].ext.reth.expect("an ATOMIC WRITE carries a RETH");
        assert_eq!(
            (reth.va, reth.rkey, reth.dma_len),
            (REMOTE.addr, REMOTE.rkey, 8)
        );
        assert_eq!((frames[1].opcode, frames[1].psn), (O::RcFlush, SQ_PSN + 1));
        assert!(frames[1].payload.is_empty());
        let feth = frames[1].ext.feth.expect("a FLUSH carries a FETH");
        assert_eq!((feth.placement.bits(), feth.level.bits()), (3, 1));
        assert_eq!(frames[1].ext.reth.map(|r| r.dma_len), Some(4096));
    }

    #[test]
    fn atomic_writes_and_flushes_take_max_rd_atomic_credits() {
        let mut b = Bench::rc();
        b.post(
            1,
            SendOp::AtomicWrite {
                remote: REMOTE,
                value: [0; 8],
            },
            0,
        );
        b.post(
            2,
            SendOp::Flush {
                remote: REMOTE,
                len: 8,
                placement: 1,
                level: 0,
            },
            0,
        );
        b.post(3, SendOp::Read(REMOTE), 8);
        // max_rd_atomic is 2: the READ waits for a response.
        let psns: Vec<u32> = sent(&mut b).iter().map(|s| s.1).collect();
        assert_eq!(psns, [SQ_PSN, SQ_PSN + 1]);
    }

    #[test]
    fn reads_wait_for_max_rd_atomic_credits() {
        let mut b = Bench::rc();
        for i in 0..3 {
            b.post(i, SendOp::Read(REMOTE), 8);
        }
        // max_rd_atomic is 2: the third READ waits for a response.
        let psns: Vec<u32> = sent(&mut b).iter().map(|s| s.1).collect();
        assert_eq!(psns, [SQ_PSN, SQ_PSN + 1]);
    }
}
