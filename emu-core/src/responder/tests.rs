//! The responder against hand-made request frames: what it answers, what it executes, and
//! what it refuses (IBA 9.7.5.2).

use softrnic_wire::{
    AtomicEthRepr, ExtRepr, FethRepr, FlushLevel, FlushPlacement, NakCode, Opcode as O, RnrTimer,
    Syndrome,
};

use crate::cq::{WcOpcode, WcStatus};
use crate::qp_attr::QpState;
use crate::testing::{ACK, BUF_LEN, Bench, RQ_PSN};

/// What the responder sent: (opcode, PSN, syndrome, payload length).
fn answers(b: &mut Bench) -> Vec<(O, u32, Option<Syndrome>, usize)> {
    b.sent()
        .into_iter()
        .map(|s| (s.opcode, s.psn, s.syndrome, s.payload.len()))
        .collect()
}

fn with_reth(b: &Bench, offset: u64, len: u32) -> ExtRepr {
    ExtRepr {
        reth: Some(b.reth(offset, len)),
        ..ExtRepr::default()
    }
}

#[test]
fn a_send_lands_in_its_receive_wqe_and_one_ack_covers_both_packets() {
    let mut b = Bench::rc();
    b.post_recv(7, 0, 4096);
    b.receive(O::RcSendFirst, RQ_PSN, ExtRepr::default(), &[1; 1024]);
    b.receive(O::RcSendLast, RQ_PSN + 1, ExtRepr::default(), &[2; 10]);
    // Both asked for an ACK; the second, still queued, replaces the first (coalescing).
    assert_eq!(
        answers(&mut b),
        [(O::RcAcknowledge, RQ_PSN + 1, Some(ACK), 0)]
    );
    assert_eq!(b.completions(), [(7, WcStatus::Success, WcOpcode::Recv)]);
    assert_eq!(b.read(1023, 3), [1, 2, 2]);
}

#[test]
fn a_gap_gets_one_sequence_nak_carrying_the_expected_psn() {
    let mut b = Bench::rc();
    b.post_recv(1, 0, 64);
    b.receive(O::RcSendOnly, RQ_PSN + 2, ExtRepr::default(), &[0; 8]);
    b.receive(O::RcSendOnly, RQ_PSN + 3, ExtRepr::default(), &[0; 8]);
    let nak = Syndrome::Nak(NakCode::PsnSequenceError);
    assert_eq!(answers(&mut b), [(O::RcAcknowledge, RQ_PSN, Some(nak), 0)]);
    assert_eq!(b.engine.counters().out_of_sequence, 2);
    // The expected packet ends the gap: it is executed and acknowledged.
    b.receive(O::RcSendOnly, RQ_PSN, ExtRepr::default(), &[0; 8]);
    assert_eq!(answers(&mut b), [(O::RcAcknowledge, RQ_PSN, Some(ACK), 0)]);
}

#[test]
fn a_send_without_a_receive_wqe_gets_an_rnr_nak_and_succeeds_when_resent() {
    let mut b = Bench::rc();
    b.receive(O::RcSendOnly, RQ_PSN, ExtRepr::default(), &[0; 8]);
    let rnr = Syndrome::RnrNak(RnrTimer::from_code(1));
    assert_eq!(answers(&mut b), [(O::RcAcknowledge, RQ_PSN, Some(rnr), 0)]);
    b.post_recv(3, 0, 64);
    b.receive(O::RcSendOnly, RQ_PSN, ExtRepr::default(), &[0; 8]);
    assert_eq!(answers(&mut b), [(O::RcAcknowledge, RQ_PSN, Some(ACK), 0)]);
    assert_eq!(b.completions(), [(3, WcStatus::Success, WcOpcode::Recv)]);
}

/// The receive WQE a SEND in progress holds keeps its place in the queue: a post that would
/// overfill the queue fails (ENOMEM) until the message ends, and a UC message dropped halfway
/// gives its WQE back (IBA 9.8.3) into a queue that has room for it.
#[test]
fn a_receive_wqe_held_by_a_message_in_progress_keeps_its_place() {
    use crate::wr::{RecvWr, WorkQueue};
    for mut b in [Bench::rc(), Bench::uc()] {
        let rc = b.engine.qp_type(b.qpn) == Some(crate::QpType::Rc);
        let (first, last) = if rc {
            (O::RcSendFirst, O::RcSendLast)
        } else {
            (O::UcSendFirst, O::UcSendLast)
        };
        // The bench's QPs take 32 receive WRs.
        for wr_id in 1..=32 {
            b.post_recv(wr_id, 0, 4096);
        }
        b.receive(first, RQ_PSN, ExtRepr::default(), &[1; 1024]);
        let wr = RecvWr {
            wr_id: 3,
            sgl: vec![],
        };
        assert!(b.engine.post_recv(b.qpn, wr.clone()).is_err(), "full");
        assert_eq!(b.engine.room(WorkQueue::Recv(b.qpn)), 0);
        if rc {
            b.receive(last, RQ_PSN + 1, ExtRepr::default(), &[2; 8]);
            assert_eq!(b.completions(), [(1, WcStatus::Success, WcOpcode::Recv)]);
        } else {
            // A gap drops the message: WQE 1 goes back to the front, and is used next.
            b.receive(last, RQ_PSN + 2, ExtRepr::default(), &[2; 8]);
            assert_eq!(b.engine.room(WorkQueue::Recv(b.qpn)), 0);
            b.receive(O::UcSendOnly, RQ_PSN + 3, ExtRepr::default(), &[3; 8]);
            assert_eq!(b.completions(), [(1, WcStatus::Success, WcOpcode::Recv)]);
        }
        assert_eq!(b.engine.room(WorkQueue::Recv(b.qpn)), 1);
        b.engine.post_recv(b.qpn, wr).unwrap();
        b.engine.check_invariants().unwrap();
    }
}

#[test]
fn a_write_beyond_its_region_is_a_remote_access_error_and_the_qp_fails() {
    let mut b = Bench::rc();
    let ext = with_reth(&b, BUF_LEN as u64 - 8, 16);
    b.receive(O::RcWriteOnly, RQ_PSN, ext, &[0; 16]);
    let nak = Syndrome::Nak(NakCode::RemoteAccessError);
    assert_eq!(answers(&mut b), [(O::RcAcknowledge, RQ_PSN, Some(nak), 0)]);
    let (attr, _) = b.engine.query_qp(b.qpn).unwrap();
    assert_eq!(attr.qp_state, QpState::Err);
}

#[test]
fn an_operation_the_qp_does_not_enable_is_an_invalid_request() {
    // The QP's access flags, not a region's: "not supported by this receive queue" is class C
    // invalid request (IBA 9.9.3), and the QP fails.
    use crate::{Access, AttrMask, QpAttr};
    for (op, ext, payload) in [
        (O::RcWriteOnly, ExtRepr::default(), 8),
        (O::RcReadRequest, ExtRepr::default(), 0),
        (O::RcFetchAdd, ExtRepr::default(), 0),
    ] {
        let mut b = Bench::rc();
        let attr = QpAttr {
            qp_access_flags: Access::empty(),
            ..QpAttr::default()
        };
        b.engine
            .modify_qp(b.qpn, &attr, AttrMask::ACCESS_FLAGS)
            .unwrap();
        let ext = match op {
            O::RcFetchAdd => ExtRepr {
                atomic_eth: Some(AtomicEthRepr {
                    va: b.buf,
                    rkey: b.key,
                    swap_add: 1,
                    compare: 0,
                }),
                ..ext
            },
            _ => with_reth(&b, 0, 8),
        };
        b.receive(op, RQ_PSN, ext, &vec![0; payload]);
        let nak = Syndrome::Nak(NakCode::InvalidRequest);
        assert_eq!(
            answers(&mut b),
            [(O::RcAcknowledge, RQ_PSN, Some(nak), 0)],
            "{op}"
        );
        assert_eq!(b.read(0, 8), [0; 8], "{op}");
        let (attr, _) = b.engine.query_qp(b.qpn).unwrap();
        assert_eq!(attr.qp_state, QpState::Err, "{op}");
    }
}

#[test]
fn the_opcode_sequence_is_checked_before_access() {
    // A WRITE_MIDDLE with no WRITE in progress is out of sequence, whatever its target.
    let mut b = Bench::rc();
    b.receive(O::RcWriteMiddle, RQ_PSN, ExtRepr::default(), &[0; 1024]);
    let nak = Syndrome::Nak(NakCode::InvalidRequest);
    assert_eq!(answers(&mut b), [(O::RcAcknowledge, RQ_PSN, Some(nak), 0)]);
}

#[test]
fn a_write_longer_than_its_reth_said_is_an_invalid_request() {
    let mut b = Bench::rc();
    let ext = with_reth(&b, 0, 8);
    b.receive(O::RcWriteOnly, RQ_PSN, ext, &[0; 16]);
    let nak = Syndrome::Nak(NakCode::InvalidRequest);
    assert_eq!(answers(&mut b), [(O::RcAcknowledge, RQ_PSN, Some(nak), 0)]);
    assert_eq!(b.read(0, 16), [0; 16]);
}

#[test]
fn a_duplicate_write_is_acknowledged_again_and_not_executed_again() {
    let mut b = Bench::rc();
    b.receive(O::RcWriteOnly, RQ_PSN, with_reth(&b, 0, 8), &[5; 8]);
    assert_eq!(answers(&mut b), [(O::RcAcknowledge, RQ_PSN, Some(ACK), 0)]);
    b.receive(O::RcWriteOnly, RQ_PSN, with_reth(&b, 0, 8), &[6; 8]);
    assert_eq!(answers(&mut b), [(O::RcAcknowledge, RQ_PSN, Some(ACK), 0)]);
    assert_eq!(b.read(0, 8), [5; 8]);
    assert_eq!(b.engine.counters().duplicate_request, 1);
}

#[test]
fn a_read_is_answered_in_path_mtu_pieces_that_take_its_psns() {
    let mut b = Bench::rc();
    let data: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
    b.engine
        .memory_mut()
        .slice_mut(b.buf, data.len())
        .unwrap()
        .copy_from_slice(&data);
    b.receive(O::RcReadRequest, RQ_PSN, with_reth(&b, 0, 2500), &[]);
    let sent = b.sent();
    let got: Vec<_> = sent
        .iter()
        .map(|s| (s.opcode, s.psn, s.payload.len()))
        .collect();
    assert_eq!(
        got,
        [
            (O::RcReadResponseFirst, RQ_PSN, 1024),
            (O::RcReadResponseMiddle, RQ_PSN + 1, 1024),
            (O::RcReadResponseLast, RQ_PSN + 2, 452),
        ]
    );
    assert_eq!(
        sent.iter()
            .flat_map(|s| s.payload.clone())
            .collect::<Vec<_>>(),
        data
    );
    // The next request follows the READ's last PSN.
    b.post_recv(1, 4096, 64);
    b.receive(O::RcSendOnly, RQ_PSN + 3, ExtRepr::default(), &[0; 8]);
    assert_eq!(
        answers(&mut b),
        [(O::RcAcknowledge, RQ_PSN + 3, Some(ACK), 0)]
    );
}

#[test]
fn a_duplicate_read_mid_stream_restarts_the_answer_from_its_psn_and_stops_the_old_one() {
    let mut b = Bench::rc();
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
    b.engine
        .memory_mut()
        .slice_mut(b.buf, data.len())
        .unwrap()
        .copy_from_slice(&data);
    b.receive(O::RcReadRequest, RQ_PSN, with_reth(&b, 0, 8192), &[]);
    b.post_recv(1, 16384, 64);
    b.receive(O::RcSendOnly, RQ_PSN + 8, ExtRepr::default(), &[0; 8]);
    assert_eq!(b.sent_at_most(3).len(), 3);
    // The requester lost the second response and asks again from there (a resumed READ).
    b.receive(O::RcReadRequest, RQ_PSN + 1, with_reth(&b, 1024, 7168), &[]);
    // The replay takes the first answer's place, so it still counts against
    // max_dest_rd_atomic (2 here): one READ more is taken, the next refused.
    b.receive(O::RcReadRequest, RQ_PSN + 9, with_reth(&b, 0, 8), &[]);
    b.receive(O::RcReadRequest, RQ_PSN + 10, with_reth(&b, 0, 8), &[]);
    let sent = b.sent();
    let got: Vec<_> = sent.iter().map(|s| (s.opcode, s.psn, s.syndrome)).collect();
    let mut want = vec![(O::RcReadResponseFirst, RQ_PSN + 1, Some(ACK))];
    want.extend((2..7).map(|i| (O::RcReadResponseMiddle, RQ_PSN + i, None)));
    want.push((O::RcReadResponseLast, RQ_PSN + 7, Some(ACK)));
    // Later requests' answers keep their places after the READ.
    want.push((O::RcAcknowledge, RQ_PSN + 8, Some(ACK)));
    want.push((O::RcReadResponseOnly, RQ_PSN + 9, Some(ACK)));
    let nak = Syndrome::Nak(NakCode::InvalidRequest);
    want.push((O::RcAcknowledge, RQ_PSN + 10, Some(nak)));
    assert_eq!(got, want);
    let replayed: Vec<u8> = sent[..7].iter().flat_map(|s| s.payload.clone()).collect();
    assert_eq!(replayed, data[1024..]);
    assert_eq!(b.engine.counters().duplicate_request, 1);
}

#[test]
fn an_atomic_runs_once_and_its_duplicate_gets_the_saved_original() {
    let mut b = Bench::rc();
    let target = b.buf;
    b.engine
        .memory_mut()
        .slice_mut(target, 8)
        .unwrap()
        .copy_from_slice(&10u64.to_ne_bytes());
    let ext = ExtRepr {
        atomic_eth: Some(AtomicEthRepr {
            va: target,
            rkey: b.key,
            swap_add: 5,
            compare: 0,
        }),
        ..ExtRepr::default()
    };
    for _ in 0..2 {
        b.receive(O::RcFetchAdd, RQ_PSN, ext, &[]);
        let sent = b.sent();
        assert_eq!(sent.len(), 1);
        assert_eq!(
            (sent[0].opcode, sent[0].psn),
            (O::RcAtomicAcknowledge, RQ_PSN)
        );
        assert_eq!(sent[0].ext.atomic_ack_eth.map(|a| a.orig), Some(10));
        assert_eq!(b.read(0, 8), 15u64.to_ne_bytes());
    }
}

#[test]
fn an_atomic_write_stores_its_eight_bytes_once_and_answers_with_an_empty_read_response() {
    let mut b = Bench::rc();
    let ext = with_reth(&b, 16, 8);
    b.receive(O::RcAtomicWrite, RQ_PSN, ext, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let empty = (O::RcReadResponseOnly, RQ_PSN, Some(ACK), 0);
    assert_eq!(answers(&mut b), [empty]);
    assert_eq!(b.read(16, 8), [1, 2, 3, 4, 5, 6, 7, 8]);
    // The duplicate (its response was lost) is answered again, not executed again.
    b.engine
        .memory_mut()
        .slice_mut(b.buf + 16, 8)
        .unwrap()
        .fill(0xee);
    b.receive(O::RcAtomicWrite, RQ_PSN, ext, &[9; 8]);
    assert_eq!(answers(&mut b), [empty]);
    assert_eq!(b.read(16, 8), [0xee; 8]);
    assert_eq!(b.engine.counters().duplicate_request, 1);
}

#[test]
fn an_atomic_write_must_be_eight_aligned_bytes() {
    let invalid = Syndrome::Nak(NakCode::InvalidRequest);
    for (offset, len, payload) in [(4u64, 8u32, 8usize), (0, 4, 4), (0, 8, 4), (0, 16, 8)] {
        let mut b = Bench::rc();
        let ext = with_reth(&b, offset, len);
        b.receive(O::RcAtomicWrite, RQ_PSN, ext, &vec![7; payload]);
        assert_eq!(
            answers(&mut b),
            [(O::RcAcknowledge, RQ_PSN, Some(invalid), 0)],
            "offset {offset} len {len} payload {payload}"
        );
        assert_eq!(b.read(0, 24), [0; 24]);
    }
}

fn flush(
    b: &Bench,
    placement: FlushPlacement,
    level: FlushLevel,
    offset: u64,
    len: u32,
) -> ExtRepr {
    ExtRepr {
        feth: Some(FethRepr { placement, level }),
        ..with_reth(b, offset, len)
    }
}

#[test]
fn a_flush_checks_its_range_or_region_and_answers_with_an_empty_read_response() {
    let mut b = Bench::rc();
    let global = FlushPlacement::GLOBAL;
    b.receive(
        O::RcFlush,
        RQ_PSN,
        flush(&b, global, FlushLevel::Range, 0, 4096),
        &[],
    );
    // A whole-region flush ignores the RETH's range, even one beyond the region.
    let ext = flush(&b, global, FlushLevel::Region, BUF_LEN as u64, 1 << 30);
    b.receive(O::RcFlush, RQ_PSN + 1, ext, &[]);
    let empty = |psn| (O::RcReadResponseOnly, psn, Some(ACK), 0);
    assert_eq!(answers(&mut b), [empty(RQ_PSN), empty(RQ_PSN + 1)]);
    // A range beyond the region is a remote access error.
    let ext = flush(&b, global, FlushLevel::Range, BUF_LEN as u64 - 8, 16);
    b.receive(O::RcFlush, RQ_PSN + 2, ext, &[]);
    let nak = Syndrome::Nak(NakCode::RemoteAccessError);
    assert_eq!(
        answers(&mut b),
        [(O::RcAcknowledge, RQ_PSN + 2, Some(nak), 0)]
    );
}

#[test]
fn a_flush_needs_the_access_of_every_placement_it_asks_for() {
    // The region has FLUSH_GLOBAL only (ordinary memory is never persistent): a persistent
    // flush is a remote access error, as rdma-core's test_qp_ex_rc_flush_type_violate expects.
    let access = Syndrome::Nak(NakCode::RemoteAccessError);
    let invalid = Syndrome::Nak(NakCode::InvalidRequest);
    for (placement, level, nak) in [
        (FlushPlacement::PERSISTENT, FlushLevel::Range, access),
        (
            FlushPlacement::GLOBAL | FlushPlacement::PERSISTENT,
            FlushLevel::Region,
            access,
        ),
        (
            FlushPlacement::from_bits_retain(4),
            FlushLevel::Range,
            invalid,
        ),
        (FlushPlacement::GLOBAL, FlushLevel::Reserved(2), invalid),
    ] {
        let mut b = Bench::rc();
        b.receive(O::RcFlush, RQ_PSN, flush(&b, placement, level, 0, 64), &[]);
        assert_eq!(
            answers(&mut b),
            [(O::RcAcknowledge, RQ_PSN, Some(nak), 0)],
            "{placement:?} {level:?}"
        );
    }
}

#[test]
fn a_read_beyond_max_dest_rd_atomic_is_an_invalid_request() {
    let mut b = Bench::rc();
    for i in 0..3 {
        b.receive(O::RcReadRequest, RQ_PSN + i, with_reth(&b, 0, 8), &[]);
    }
    let nak = Syndrome::Nak(NakCode::InvalidRequest);
    let got = answers(&mut b);
    assert_eq!(got.len(), 3);
    assert_eq!(got[2], (O::RcAcknowledge, RQ_PSN + 2, Some(nak), 0));
}

#[test]
fn a_frame_without_its_icrc_is_taken_only_from_a_trusted_builder() {
    let mut b = Bench::rc();
    b.post_recv(7, 0, 64);
    let mut frame = b.frame(O::RcSendOnly, RQ_PSN, ExtRepr::default(), &[3; 8]);
    let n = frame.len();
    frame[n - 4..].fill(0);
    b.engine.handle_packet(b.now, &frame);
    assert_eq!(
        b.engine.counters().rcvd_icrc_err,
        1,
        "from the wire: dropped"
    );
    assert!(b.completions().is_empty());
    b.engine.handle_trusted_packet(b.now, &frame);
    assert_eq!(b.completions(), [(7, WcStatus::Success, WcOpcode::Recv)]);
    // An engine told to skip its ICRCs sends them zero.
    b.engine.set_icrc(softrnic_wire::Icrc::Skip);
    let mut buf = vec![0; crate::MAX_FRAME];
    let n = b.engine.poll_transmit(b.now, &mut buf).expect("the ACK");
    assert_eq!(buf[n - 4..n], [0; 4]);
}
