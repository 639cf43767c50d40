//! Named protocol scenarios over the simulated network, each asserting the exact packets,
//! completions and counters. Host 0's QP is the requester (first PSN 0); host 1's is the
//! responder (first PSN 0x500 for its own requests).

use softrnic_emu_core::{
    Access, AttrMask, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr, Remote, SL_ROCE_V2_IPV4,
    SendFlags, SendOp, SendWr, Sge, Wc, WcFlags, WcOpcode, WcStatus,
};
use softrnic_tests::sim::{LinkSpec, Pair, Settings, Sim};
use softrnic_wire::{AethRepr, CreditCount, ExtRepr, Opcode, RethRepr, Syndrome, bth::BthRepr};

const RW: Access = Access::from_bits_retain(1 | 2 | 4 | 8);

fn sge(addr: u64, length: usize, lkey: u32) -> Vec<Sge> {
    vec![Sge {
        addr,
        length: length as u32,
        lkey,
    }]
}

#[test]
fn send_of_three_packets_is_acked_once() {
    let mut p = Pair::rc();
    let (src, lkey) = p.buf(0, 2500, 0xab, RW);
    let (dst, rkey) = p.buf(1, 4096, 0, RW);
    p.recv(7, sge(dst, 4096, rkey));
    p.send(1, SendOp::Send, sge(src, 2500, lkey));
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_SEND_FIRST 0",
            "0>1 RC_SEND_MIDDLE 1",
            "0>1 RC_SEND_LAST 2",
            "1>0 RC_ACKNOWLEDGE 2 ACK",
        ]
    );
    assert_eq!(p.wcs(0), [(1, WcStatus::Success, WcOpcode::Send, 0)]);
    assert_eq!(p.wcs(1), [(7, WcStatus::Success, WcOpcode::Recv, 2500)]);
    assert_eq!(p.bytes(1, dst, 2500), vec![0xab; 2500]);
    assert_eq!(p.counters(0).sent_pkts, 3);
    assert_eq!(p.counters(1).sent_pkts, 1);
}

#[test]
fn rdma_read_of_three_packets() {
    let mut p = Pair::rc();
    let (dst, lkey) = p.buf(0, 2100, 0, RW);
    let (src, rkey) = p.buf(1, 2100, 0x5a, RW);
    p.send(
        1,
        SendOp::Read(Remote { addr: src, rkey }),
        sge(dst, 2100, lkey),
    );
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_RDMA_READ_REQUEST 0",
            "1>0 RC_RDMA_READ_RESPONSE_FIRST 0 ACK",
            "1>0 RC_RDMA_READ_RESPONSE_MIDDLE 1",
            "1>0 RC_RDMA_READ_RESPONSE_LAST 2 ACK",
        ]
    );
    assert_eq!(p.wcs(0), [(1, WcStatus::Success, WcOpcode::RdmaRead, 2100)]);
    assert_eq!(p.bytes(0, dst, 2100), vec![0x5a; 2100]);
}

fn bth(opcode: Opcode, dest_qp: u32, psn: u32) -> BthRepr {
    BthRepr {
        ack_req: true,
        ..BthRepr::new(opcode, dest_qp, psn)
    }
}

#[test]
fn every_opcode_succeeds() {
    let mut p = Pair::rc();
    let (src, lkey) = p.buf(0, 64, 0x11, RW);
    let (res, res_key) = p.buf(0, 16, 0, RW);
    let (win, rkey) = p.buf(1, 64, 0, RW);
    let (rbuf, rbuf_key) = p.buf(1, 64, 0, RW);
    let (ctr, ctr_key) = p.buf(1, 8, 0, RW);
    p.sim.hosts[1]
        .engine
        .memory_mut()
        .slice_mut(ctr, 8)
        .unwrap()
        .copy_from_slice(&5u64.to_ne_bytes());
    // An MR the SEND with Invalidate will invalidate.
    let (victim_addr, victim) = p.buf(1, 8, 0, RW);
    for i in 0..4 {
        p.recv(100 + i, sge(rbuf + 16 * i, 16, rbuf_key));
    }
    let remote = Remote { addr: win, rkey };
    p.send(1, SendOp::Send, sge(src, 4, lkey));
    p.send(2, SendOp::SendWithImm(0x1234), sge(src, 4, lkey));
    p.send(3, SendOp::Write(remote), sge(src, 8, lkey));
    p.send(
        4,
        SendOp::WriteWithImm(
            Remote {
                addr: win + 8,
                rkey,
            },
            0x99,
        ),
        sge(src, 8, lkey),
    );
    p.send(5, SendOp::Read(remote), sge(res, 8, res_key));
    let ctr_remote = Remote {
        addr: ctr,
        rkey: ctr_key,
    };
    p.send(
        6,
        SendOp::FetchAdd {
            remote: ctr_remote,
            add: 10,
        },
        sge(res + 8, 8, res_key),
    );
    let cas = SendOp::CompareSwap {
        remote: ctr_remote,
        compare: 15,
        swap: 77,
    };
    p.send(7, cas, sge(res, 8, res_key));
    p.send(8, SendOp::SendWithInv(victim), sge(src, 4, lkey));
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_SEND_ONLY 0",
            "0>1 RC_SEND_ONLY_WITH_IMMEDIATE 1",
            "0>1 RC_RDMA_WRITE_ONLY 2",
            "0>1 RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE 3",
            "0>1 RC_RDMA_READ_REQUEST 4",
            "0>1 RC_FETCH_ADD 5",
            "0>1 RC_COMPARE_SWAP 6",
            "0>1 RC_SEND_ONLY_WITH_INVALIDATE 7",
            // Each ACK is sent as its request arrives; the link keeps them in order.
            "1>0 RC_ACKNOWLEDGE 0 ACK",
            "1>0 RC_ACKNOWLEDGE 1 ACK",
            "1>0 RC_ACKNOWLEDGE 2 ACK",
            "1>0 RC_ACKNOWLEDGE 3 ACK",
            "1>0 RC_RDMA_READ_RESPONSE_ONLY 4 ACK",
            "1>0 RC_ATOMIC_ACKNOWLEDGE 5 ACK",
            "1>0 RC_ATOMIC_ACKNOWLEDGE 6 ACK",
            "1>0 RC_ACKNOWLEDGE 7 ACK",
        ]
    );
    use WcOpcode as O;
    use WcStatus::Success as S;
    assert_eq!(
        p.wcs(0),
        [
            (1, S, O::Send, 0),
            (2, S, O::Send, 0),
            (3, S, O::RdmaWrite, 0),
            (4, S, O::RdmaWrite, 0),
            (5, S, O::RdmaRead, 8),
            (6, S, O::FetchAdd, 8),
            (7, S, O::CompSwap, 8),
            (8, S, O::Send, 0),
        ]
    );
    let rx = p.poll(1);
    let rx: Vec<_> = rx
        .iter()
        .map(|w| {
            (
                w.wr_id, w.status, w.opcode, w.byte_len, w.wc_flags, w.imm_data,
            )
        })
        .collect();
    // The immediate data, and for SEND with Invalidate the key it invalidated.
    assert_eq!(
        rx,
        [
            (100, S, O::Recv, 4, WcFlags::empty(), 0),
            (101, S, O::Recv, 4, WcFlags::WITH_IMM, 0x1234),
            (102, S, O::RecvRdmaWithImm, 8, WcFlags::WITH_IMM, 0x99),
            (103, S, O::Recv, 4, WcFlags::WITH_INV, victim),
        ]
    );
    assert_eq!(p.bytes(1, win, 16), vec![0x11; 16]);
    assert_eq!(p.bytes(0, res, 8), 15u64.to_ne_bytes(), "CAS saw 5 + 10");
    assert_eq!(
        p.bytes(0, res + 8, 8),
        5u64.to_ne_bytes(),
        "FETCH_ADD saw 5"
    );
    assert_eq!(p.bytes(1, ctr, 8), 77u64.to_ne_bytes());
    // The invalidated key no longer works: a WRITE to it fails.
    let dead = Remote {
        addr: victim_addr,
        rkey: victim,
    };
    p.send(9, SendOp::Write(dead), sge(src, 4, lkey));
    p.run();
    assert_eq!(p.wcs(0), [(9, WcStatus::RemAccessErr, O::RdmaWrite, 0)]);
}

/// A WRITE that the responder refuses with NAK remote access error: the requester's WR fails
/// with REM_ACCESS_ERR, and both QPs end in error.
fn remote_access_refused(rkey_of: impl Fn(u32) -> u32, access: Access, offset: u64) {
    let mut p = Pair::rc();
    let (src, lkey) = p.buf(0, 16, 1, RW);
    let (dst, rkey) = p.buf(1, 16, 0, access);
    let remote = Remote {
        addr: dst + offset,
        rkey: rkey_of(rkey),
    };
    p.send(1, SendOp::Write(remote), sge(src, 16, lkey));
    p.send(2, SendOp::Send, sge(src, 16, lkey));
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_RDMA_WRITE_ONLY 0",
            "0>1 RC_SEND_ONLY 1",
            "1>0 RC_ACKNOWLEDGE 0 NAK2",
        ]
    );
    assert_eq!(
        p.wcs(0),
        [
            (1, WcStatus::RemAccessErr, WcOpcode::RdmaWrite, 0),
            (2, WcStatus::WrFlushErr, WcOpcode::Send, 0),
        ]
    );
    assert_eq!(p.bytes(1, dst, 16), vec![0; 16]);
    assert_eq!(p.counters(0).req_remote_access_errors, 1);
    assert_eq!(p.counters(1).resp_remote_access_errors, 1);
    assert_eq!(p.state(0), Some(QpState::Err));
    assert_eq!(p.state(1), Some(QpState::Err));
}

#[test]
fn rkey_violation() {
    remote_access_refused(|k| k ^ 0x80, RW, 0);
}

#[test]
fn access_flag_violation() {
    remote_access_refused(|k| k, Access::LOCAL_WRITE.union(Access::REMOTE_READ), 0);
}

#[test]
fn out_of_bounds_access() {
    remote_access_refused(|k| k, RW, 1);
}

#[test]
fn psn_sequence_error_recovered_by_retry() {
    let mut p = Pair::rc();
    let (src, lkey) = p.buf(0, 3000, 0x77, RW);
    let (dst, rkey) = p.buf(1, 3000, 0, RW);
    p.recv(7, sge(dst, 3000, rkey));
    p.lose(0, |s| s.opcode == Opcode::RcSendMiddle);
    p.send(1, SendOp::Send, sge(src, 3000, lkey));
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_SEND_FIRST 0",
            "0>1 RC_SEND_MIDDLE 1 [Dropped]",
            "0>1 RC_SEND_LAST 2",
            "1>0 RC_ACKNOWLEDGE 1 NAK0",
            "0>1 RC_SEND_MIDDLE 1",
            "0>1 RC_SEND_LAST 2",
            "1>0 RC_ACKNOWLEDGE 2 ACK",
        ]
    );
    assert_eq!(p.wcs(0), [(1, WcStatus::Success, WcOpcode::Send, 0)]);
    assert_eq!(p.wcs(1), [(7, WcStatus::Success, WcOpcode::Recv, 3000)]);
    assert_eq!(p.bytes(1, dst, 3000), vec![0x77; 3000]);
    let (c0, c1) = (p.counters(0), p.counters(1));
    assert_eq!((c1.out_of_sequence, c0.packet_seq_err), (1, 1));
    assert_eq!(c0.retransmitted_pkts, 2);
}

#[test]
fn local_ack_timeout_within_the_retry_limit() {
    let mut p = Pair::rc();
    let (src, lkey) = p.buf(0, 8, 3, RW);
    let (dst, rkey) = p.buf(1, 8, 0, RW);
    p.lose(0, |s| s.opcode == Opcode::RcAcknowledge);
    p.send(
        1,
        SendOp::Write(Remote { addr: dst, rkey }),
        sge(src, 8, lkey),
    );
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_RDMA_WRITE_ONLY 0",
            "1>0 RC_ACKNOWLEDGE 0 ACK [Dropped]",
            "0>1 RC_RDMA_WRITE_ONLY 0",
            // The responder has seen PSN 0: a duplicate, re-ACKed without writing again.
            "1>0 RC_ACKNOWLEDGE 0 ACK",
        ]
    );
    // The resend left 1.05 ms (4.096 µs × 2^8) after the first.
    let t = &p.sim.trace;
    assert!(t[2].at - t[0].at >= 4096 << 8);
    assert_eq!(p.wcs(0), [(1, WcStatus::Success, WcOpcode::RdmaWrite, 0)]);
    assert_eq!(p.counters(0).local_ack_timeout_err, 1);
    assert_eq!(p.counters(1).duplicate_request, 1);
}

#[test]
fn local_ack_timeout_beyond_the_retry_limit() {
    let settings = Settings {
        retry_cnt: 2,
        ..Settings::default()
    };
    let mut p = Pair::new(QpType::Rc, settings);
    let (src, lkey) = p.buf(0, 8, 3, RW);
    let (dst, rkey) = p.buf(1, 8, 0, RW);
    p.sim.partition = Some((0, u64::MAX));
    p.send(
        1,
        SendOp::Write(Remote { addr: dst, rkey }),
        sge(src, 8, lkey),
    );
    p.send(2, SendOp::Send, sge(src, 8, lkey));
    p.run();
    // The first try and two retries, each of both WRs (go-back-N).
    let want: Vec<_> = (0..3)
        .flat_map(|_| {
            [
                "0>1 RC_RDMA_WRITE_ONLY 0 [Dropped]",
                "0>1 RC_SEND_ONLY 1 [Dropped]",
            ]
        })
        .collect();
    assert_eq!(p.lines(), want);
    assert_eq!(
        p.wcs(0),
        [
            (1, WcStatus::RetryExcErr, WcOpcode::RdmaWrite, 0),
            (2, WcStatus::WrFlushErr, WcOpcode::Send, 0),
        ]
    );
    let c = p.counters(0);
    assert_eq!((c.local_ack_timeout_err, c.retry_exceeded_err), (3, 1));
}

#[test]
fn rnr_nak_within_the_retry_limit() {
    let settings = Settings {
        rnr_retry: 3,
        ..Settings::default()
    };
    let mut p = Pair::new(QpType::Rc, settings);
    let (src, lkey) = p.buf(0, 8, 9, RW);
    let (dst, rkey) = p.buf(1, 8, 0, RW);
    p.send(1, SendOp::Send, sge(src, 8, lkey));
    // Run until the first RNR NAK has arrived, then post the receive.
    p.sim
        .run_until(1000, |s| {
            s.hosts[0].engine.counters().rnr_nak_retry_err == 1
        })
        .unwrap();
    p.recv(7, sge(dst, 8, rkey));
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_SEND_ONLY 0",
            "1>0 RC_ACKNOWLEDGE 0 RNR",
            "0>1 RC_SEND_ONLY 0",
            "1>0 RC_ACKNOWLEDGE 0 ACK",
        ]
    );
    // The resend waited min_rnr_timer (code 1: 10 µs).
    let t = &p.sim.trace;
    assert!(t[2].at - t[1].at >= 10_000);
    assert_eq!(p.wcs(0), [(1, WcStatus::Success, WcOpcode::Send, 0)]);
    assert_eq!(p.wcs(1), [(7, WcStatus::Success, WcOpcode::Recv, 8)]);
    assert_eq!(p.counters(1).rnr_nak_sent, 1);
}

#[test]
fn rnr_nak_beyond_the_retry_limit() {
    let settings = Settings {
        rnr_retry: 2,
        ..Settings::default()
    };
    let mut p = Pair::new(QpType::Rc, settings);
    let (src, lkey) = p.buf(0, 8, 9, RW);
    p.send(1, SendOp::Send, sge(src, 8, lkey));
    p.run();
    let want: Vec<_> = (0..3)
        .flat_map(|_| ["0>1 RC_SEND_ONLY 0", "1>0 RC_ACKNOWLEDGE 0 RNR"])
        .collect();
    assert_eq!(p.lines(), want);
    assert_eq!(p.wcs(0), [(1, WcStatus::RnrRetryExcErr, WcOpcode::Send, 0)]);
    let c = p.counters(0);
    assert_eq!((c.rnr_nak_retry_err, c.rnr_retry_exceeded_err), (3, 1));
    // The responder is fine: RNR is not an error there.
    assert_eq!(p.state(1), Some(QpState::Rts));
}

#[test]
fn implied_nak_on_a_lost_read_response() {
    let mut p = Pair::rc();
    let (dst, lkey) = p.buf(0, 8, 0, RW);
    let (src, rkey) = p.buf(1, 8, 0x42, RW);
    let (rbuf, rbuf_key) = p.buf(1, 8, 0, RW);
    p.recv(7, sge(rbuf, 8, rbuf_key));
    p.lose(0, |s| s.opcode == Opcode::RcReadResponseOnly);
    p.send(
        1,
        SendOp::Read(Remote { addr: src, rkey }),
        sge(dst, 8, lkey),
    );
    p.send(2, SendOp::Send, sge(dst, 0, lkey));
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_RDMA_READ_REQUEST 0",
            "0>1 RC_SEND_ONLY 1",
            "1>0 RC_RDMA_READ_RESPONSE_ONLY 0 ACK [Dropped]",
            // The ACK of PSN 1 says the READ's response was lost: resend from the READ.
            "1>0 RC_ACKNOWLEDGE 1 ACK",
            "0>1 RC_RDMA_READ_REQUEST 0",
            "0>1 RC_SEND_ONLY 1",
            "1>0 RC_RDMA_READ_RESPONSE_ONLY 0 ACK",
            "1>0 RC_ACKNOWLEDGE 1 ACK",
        ]
    );
    assert_eq!(
        p.wcs(0),
        [
            (1, WcStatus::Success, WcOpcode::RdmaRead, 8),
            (2, WcStatus::Success, WcOpcode::Send, 0),
        ]
    );
    assert_eq!(p.bytes(0, dst, 8), vec![0x42; 8]);
    assert_eq!(p.counters(0).implied_nak_seq_err, 1);
    assert_eq!(p.counters(1).duplicate_request, 2);
    // The SEND was not delivered twice.
    assert_eq!(p.wcs(1), [(7, WcStatus::Success, WcOpcode::Recv, 0)]);
}

#[test]
fn ghost_ack_is_ignored() {
    let mut p = Pair::rc();
    let (src, lkey) = p.buf(0, 8, 1, RW);
    let (dst, rkey) = p.buf(1, 8, 0, RW);
    p.send(
        1,
        SendOp::Write(Remote { addr: dst, rkey }),
        sge(src, 8, lkey),
    );
    // An ACK for PSN 5, which was never sent, arrives before the real one.
    let ext = ExtRepr {
        aeth: Some(AethRepr {
            syndrome: Syndrome::Ack(CreditCount::INVALID),
            msn: 9,
        }),
        ..ExtRepr::default()
    };
    let ghost = p
        .sim
        .frame(1, 0, bth(Opcode::RcAcknowledge, p.qp[0], 5), ext, &[]);
    p.sim.inject(0, ghost);
    p.run();
    assert_eq!(
        p.lines(),
        ["0>1 RC_RDMA_WRITE_ONLY 0", "1>0 RC_ACKNOWLEDGE 0 ACK"]
    );
    assert_eq!(p.wcs(0), [(1, WcStatus::Success, WcOpcode::RdmaWrite, 0)]);
    assert_eq!(p.counters(0).duplicate_response, 1);
}

#[test]
fn duplicate_read_resumes_at_the_right_offset() {
    let mut p = Pair::rc();
    let (dst, lkey) = p.buf(0, 3000, 0, RW);
    let (src, rkey) = p.buf(1, 3000, 0, RW);
    let pattern: Vec<u8> = (0..3000).map(|i| (i % 251) as u8).collect();
    p.sim.hosts[1]
        .engine
        .memory_mut()
        .slice_mut(src, 3000)
        .unwrap()
        .copy_from_slice(&pattern);
    p.lose(0, |s| s.opcode == Opcode::RcReadResponseLast);
    p.send(
        1,
        SendOp::Read(Remote { addr: src, rkey }),
        sge(dst, 3000, lkey),
    );
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_RDMA_READ_REQUEST 0",
            "1>0 RC_RDMA_READ_RESPONSE_FIRST 0 ACK",
            "1>0 RC_RDMA_READ_RESPONSE_MIDDLE 1",
            "1>0 RC_RDMA_READ_RESPONSE_LAST 2 ACK [Dropped]",
            // After the timeout, only the missing last 952 bytes are asked for, at PSN 2.
            "0>1 RC_RDMA_READ_REQUEST 2",
            "1>0 RC_RDMA_READ_RESPONSE_ONLY 2 ACK",
        ]
    );
    assert_eq!(p.sim.trace[5].len, 3000 - 2048);
    assert_eq!(p.wcs(0), [(1, WcStatus::Success, WcOpcode::RdmaRead, 3000)]);
    assert_eq!(p.bytes(0, dst, 3000), pattern);
    assert_eq!(p.counters(1).duplicate_request, 1);
}

#[test]
fn a_read_resent_mid_stream_replaces_the_rest_of_the_old_answer() {
    // 2 MiB at 1 KiB a packet: the answer outlasts the requester's 1 ms ACK timer.
    const LEN: u32 = 2 << 20;
    let mut p = Pair::rc();
    let (dst, lkey) = p.buf(0, LEN as usize, 0, RW);
    let (src, rkey) = p.buf(1, LEN as usize, 0, RW);
    let pattern: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    p.sim.hosts[1]
        .engine
        .memory_mut()
        .slice_mut(src, LEN as usize)
        .unwrap()
        .copy_from_slice(&pattern);
    p.lose(10, |s| s.opcode == Opcode::RcReadResponseMiddle);
    p.send(
        1,
        SendOp::Read(Remote { addr: src, rkey }),
        sge(dst, LEN as usize, lkey),
    );
    p.run();
    assert_eq!(p.wcs(0), [(1, WcStatus::Success, WcOpcode::RdmaRead, LEN)]);
    assert_eq!(p.bytes(0, dst, LEN as usize), pattern);
    // The gap is an implied NAK that asks for the rest, once; the responder answers that
    // from the gap at once instead of after the rest of the old answer (IBA 9.7.5.2.1), so
    // no ACK timer runs out and the old answer stops.
    let c = p.counters(0);
    assert_eq!((c.implied_nak_seq_err, c.local_ack_timeout_err), (1, 0));
    assert_eq!(p.counters(1).duplicate_request, 1);
    let answers = p.sim.trace.iter().filter(|s| s.from == 1).count();
    let packets = (LEN / 1024) as usize;
    assert!(
        answers < packets + 64,
        "{answers} responses for {packets} packets"
    );
}

#[test]
fn duplicate_atomic_is_not_executed_twice() {
    let mut p = Pair::rc();
    let (res, lkey) = p.buf(0, 8, 0, RW);
    let (ctr, rkey) = p.buf(1, 8, 0, RW);
    p.lose(0, |s| s.opcode == Opcode::RcAtomicAcknowledge);
    let op = SendOp::FetchAdd {
        remote: Remote { addr: ctr, rkey },
        add: 3,
    };
    p.send(1, op, sge(res, 8, lkey));
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_FETCH_ADD 0",
            "1>0 RC_ATOMIC_ACKNOWLEDGE 0 ACK [Dropped]",
            "0>1 RC_FETCH_ADD 0",
            "1>0 RC_ATOMIC_ACKNOWLEDGE 0 ACK",
        ]
    );
    assert_eq!(p.wcs(0), [(1, WcStatus::Success, WcOpcode::FetchAdd, 8)]);
    assert_eq!(p.bytes(0, res, 8), 0u64.to_ne_bytes(), "the saved original");
    assert_eq!(p.bytes(1, ctr, 8), 3u64.to_ne_bytes(), "added once");
    assert_eq!(p.counters(1).duplicate_request, 1);
}

#[test]
fn unexpected_opcode_is_an_invalid_request() {
    let mut p = Pair::rc();
    // A SEND_MIDDLE with no SEND_FIRST before it, at the expected PSN.
    let frame = p.sim.frame(
        0,
        1,
        bth(Opcode::RcSendMiddle, p.qp[1], 0),
        ExtRepr::default(),
        &[0; 1024],
    );
    p.sim.inject(1, frame);
    p.run();
    assert_eq!(p.lines(), ["1>0 RC_ACKNOWLEDGE 0 NAK1"]);
    assert_eq!(p.counters(1).resp_invalid_request, 1);
    assert_eq!(p.state(1), Some(QpState::Err));
}

/// A response of the wrong kind at the PSN of an outstanding request is a bad response (IBA
/// 9.9.2): the WR fails with IBV_WC_BAD_RESP_ERR and the QP goes to the error state, flushing
/// what follows. It must not be taken for a duplicate, nor the request resent.
fn wrong_response(first: SendOp, response: Opcode, ext: ExtRepr, payload: &[u8]) {
    let mut p = Pair::rc();
    let (local, lkey) = p.buf(0, 8, 1, RW);
    let (remote, rkey) = p.buf(1, 8, 0, RW);
    p.recv(7, sge(remote, 8, rkey));
    p.send(1, first, sge(local, 8, lkey));
    let next = SendOp::Write(Remote { addr: remote, rkey });
    p.send(2, next, sge(local, 8, lkey));
    // The forged response reaches the requester before the responder's real answer.
    let forged = p.sim.frame(1, 0, bth(response, p.qp[0], 0), ext, payload);
    p.sim.inject(0, forged);
    p.run();
    let wcs = p.wcs(0);
    let kinds: Vec<_> = wcs.iter().map(|w| (w.0, w.1)).collect();
    assert_eq!(
        kinds,
        [(1, WcStatus::BadRespErr), (2, WcStatus::WrFlushErr)],
        "{:?}",
        p.lines()
    );
    assert_eq!(p.state(0), Some(QpState::Err));
    assert_eq!(p.counters(0).bad_response, 1);
    assert_eq!(p.counters(0).retransmitted_pkts, 0);
}

#[test]
fn a_read_response_to_a_send_is_a_bad_response() {
    let ext = ExtRepr {
        aeth: Some(AethRepr {
            syndrome: Syndrome::Ack(CreditCount::INVALID),
            msn: 1,
        }),
        ..ExtRepr::default()
    };
    wrong_response(SendOp::Send, Opcode::RcReadResponseOnly, ext, &[0; 8]);
}

#[test]
fn an_atomic_acknowledge_to_a_read_is_a_bad_response() {
    let ext = ExtRepr {
        aeth: Some(AethRepr {
            syndrome: Syndrome::Ack(CreditCount::INVALID),
            msn: 1,
        }),
        atomic_ack_eth: Some(softrnic_wire::AtomicAckEthRepr { orig: 5 }),
        ..ExtRepr::default()
    };
    let read = SendOp::Read(Remote { addr: 0, rkey: 0 });
    wrong_response(read, Opcode::RcAtomicAcknowledge, ext, &[]);
}

#[test]
fn a_read_response_middle_to_an_atomic_is_a_bad_response() {
    let atomic = SendOp::FetchAdd {
        remote: Remote { addr: 0, rkey: 0 },
        add: 1,
    };
    let payload = [0; 1024];
    wrong_response(
        atomic,
        Opcode::RcReadResponseMiddle,
        ExtRepr::default(),
        &payload,
    );
}

#[test]
fn remote_operational_error() {
    let mut p = Pair::rc();
    let (src, lkey) = p.buf(0, 8, 1, RW);
    // The receive buffer's region lacks local write: the responder cannot place the data.
    let (dst, rkey) = p.buf(1, 8, 0, Access::REMOTE_READ);
    p.recv(7, sge(dst, 8, rkey));
    p.send(1, SendOp::Send, sge(src, 8, lkey));
    p.run();
    assert_eq!(
        p.lines(),
        ["0>1 RC_SEND_ONLY 0", "1>0 RC_ACKNOWLEDGE 0 NAK3"]
    );
    assert_eq!(p.wcs(0), [(1, WcStatus::RemOpErr, WcOpcode::Send, 0)]);
    assert_eq!(p.wcs(1), [(7, WcStatus::LocProtErr, WcOpcode::Recv, 0)]);
    assert_eq!(p.counters(0).req_remote_operational_errors, 1);
}

#[test]
fn flush_on_error_completes_everything_in_order() {
    let mut p = Pair::rc();
    let (src, lkey) = p.buf(0, 8, 1, RW);
    // Nothing can reach the responder, so the WRs stay outstanding.
    p.sim.partition = Some((0, u64::MAX));
    for i in 0..3 {
        p.send(i, SendOp::Send, sge(src, 8, lkey));
    }
    let (rbuf, rkey) = p.buf(0, 8, 0, RW);
    p.sim.hosts[0]
        .engine
        .post_recv(
            p.qp[0],
            RecvWr {
                wr_id: 9,
                sgl: sge(rbuf, 8, rkey),
            },
        )
        .unwrap();
    p.sim.run_until(10, |s| s.trace.len() == 3).unwrap();
    let to_err = softrnic_emu_core::QpAttr {
        qp_state: QpState::Err,
        ..Default::default()
    };
    p.sim.hosts[0]
        .engine
        .modify_qp(p.qp[0], &to_err, softrnic_emu_core::AttrMask::STATE)
        .unwrap();
    assert_eq!(
        p.wcs(0),
        [
            (0, WcStatus::WrFlushErr, WcOpcode::Send, 0),
            (1, WcStatus::WrFlushErr, WcOpcode::Send, 0),
            (2, WcStatus::WrFlushErr, WcOpcode::Send, 0),
            (9, WcStatus::WrFlushErr, WcOpcode::Recv, 0),
        ]
    );
    // Posting in the error state completes at once, flushed.
    p.send(3, SendOp::Send, sge(src, 8, lkey));
    assert_eq!(p.wcs(0), [(3, WcStatus::WrFlushErr, WcOpcode::Send, 0)]);
    p.run();
    assert_eq!(p.sim.trace.len(), 3, "nothing sent after the flush");
}

#[test]
fn a_fenced_request_waits_for_the_read_before_it() {
    let mut p = Pair::rc();
    let (dst, lkey) = p.buf(0, 8, 0, RW);
    let (src, rkey) = p.buf(1, 8, 5, RW);
    p.send(
        1,
        SendOp::Read(Remote { addr: src, rkey }),
        sge(dst, 8, lkey),
    );
    let wr = SendWr {
        wr_id: 2,
        op: SendOp::Write(Remote { addr: src, rkey }),
        sgl: sge(dst, 8, lkey),
        flags: SendFlags::SIGNALED | softrnic_emu_core::SendFlags::FENCE,
        ud: None,
        xrc_srqn: None,
    };
    p.sim.hosts[0].engine.post_send(p.qp[0], wr).unwrap();
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_RDMA_READ_REQUEST 0",
            "1>0 RC_RDMA_READ_RESPONSE_ONLY 0 ACK",
            "0>1 RC_RDMA_WRITE_ONLY 1",
            "1>0 RC_ACKNOWLEDGE 1 ACK",
        ]
    );
    assert_eq!(p.bytes(1, src, 8), vec![5; 8]);
}

#[test]
fn max_rd_atomic_limits_outstanding_reads() {
    let settings = Settings {
        max_rd_atomic: 1,
        ..Settings::default()
    };
    let mut p = Pair::new(QpType::Rc, settings);
    let (dst, lkey) = p.buf(0, 16, 0, RW);
    let (src, rkey) = p.buf(1, 16, 5, RW);
    p.send(
        1,
        SendOp::Read(Remote { addr: src, rkey }),
        sge(dst, 8, lkey),
    );
    p.send(
        2,
        SendOp::Read(Remote {
            addr: src + 8,
            rkey,
        }),
        sge(dst + 8, 8, lkey),
    );
    p.send(
        3,
        SendOp::Write(Remote { addr: src, rkey }),
        sge(dst, 8, lkey),
    );
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_RDMA_READ_REQUEST 0",
            "1>0 RC_RDMA_READ_RESPONSE_ONLY 0 ACK",
            // The second READ waited for the first one's response; the WRITE did not wait.
            "0>1 RC_RDMA_READ_REQUEST 1",
            "0>1 RC_RDMA_WRITE_ONLY 2",
            "1>0 RC_RDMA_READ_RESPONSE_ONLY 1 ACK",
            "1>0 RC_ACKNOWLEDGE 2 ACK",
        ]
    );
}

#[test]
fn ud_datagrams_with_a_wrong_qkey_are_dropped_and_counted() {
    let mut p = Pair::new(QpType::Ud, Settings::default());
    let (src, lkey) = p.buf(0, 16, 4, RW);
    let (dst, rkey) = p.buf(1, 64, 0, RW);
    p.recv(7, sge(dst, 64, rkey));
    p.recv(8, sge(dst, 64, rkey));
    let h1 = &p.sim.hosts[1];
    let dest = |qkey| softrnic_emu_core::UdDest {
        ah: softrnic_emu_core::AddressHandle::to(h1.gid, 0).via(h1.mac),
        remote_qpn: p.qp[1],
        remote_qkey: qkey,
    };
    // The last asks for the sending QP's own Q_Key (high bit set), which is the same.
    let (bad, good, own) = (dest(0x2222), dest(0x1111_1111), dest(0x8000_0000));
    for (id, d) in [(1, bad), (2, good), (3, own)] {
        let wr = SendWr {
            wr_id: id,
            op: SendOp::Send,
            sgl: sge(src, 16, lkey),
            flags: SendFlags::SIGNALED,
            ud: Some(d),
            xrc_srqn: None,
        };
        p.sim.hosts[0].engine.post_send(p.qp[0], wr).unwrap();
    }
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 UD_SEND_ONLY 0",
            "0>1 UD_SEND_ONLY 1",
            "0>1 UD_SEND_ONLY 2"
        ]
    );
    assert_eq!(
        p.wcs(0),
        [
            (1, WcStatus::Success, WcOpcode::Send, 0),
            (2, WcStatus::Success, WcOpcode::Send, 0),
            (3, WcStatus::Success, WcOpcode::Send, 0)
        ]
    );
    // Two datagrams landed, each behind its 40-byte GRH; RoCE carries no SL, so `sl` holds the
    // packet type as ConnectX reports it (UCX reads it to find the address in the GRH).
    let got = p.poll(1);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.sl))
            .collect::<Vec<_>>(),
        [
            (7, WcStatus::Success, WcOpcode::Recv, 56, SL_ROCE_V2_IPV4),
            (8, WcStatus::Success, WcOpcode::Recv, 56, SL_ROCE_V2_IPV4)
        ]
    );
    assert_eq!(p.bytes(1, dst + 40, 16), vec![4; 16]);
    assert_eq!(p.counters(1).qkey_violation, 1);
}

/// Annex A17.9.3: the receiver of CE-marked packets sends its peer's QP a CNP, at most one per
/// QP every 4 µs (the notification point); the sender counts the CNPs it does not act on. The
/// marks change nothing else: the data lands and is acknowledged as usual.
#[test]
fn ce_marked_requests_are_answered_with_one_cnp_per_interval() {
    let mut p = Pair::rc();
    p.sim.capture = true;
    p.sim.congested = Some(Box::new(|s| s.from == 0));
    let (src, lkey) = p.buf(0, 3000, 0x5a, RW);
    let (dst, rkey) = p.buf(1, 6000, 0, RW);
    p.recv(7, sge(dst, 3000, rkey));
    p.recv(8, sge(dst + 3000, 3000, rkey));
    p.send(1, SendOp::Send, sge(src, 3000, lkey));
    p.run();
    // Three marked packets arrive within 4 µs: one CNP, from B to A's QP.
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_SEND_FIRST 0",
            "0>1 RC_SEND_MIDDLE 1",
            "0>1 RC_SEND_LAST 2",
            "1>0 CNP 0",
            "1>0 RC_ACKNOWLEDGE 2 ACK",
        ]
    );
    let cnp = p.sim.seen.iter().find(|s| {
        s.outbound
            && softrnic_wire::frame::parse(&s.frame)
                .unwrap()
                .repr
                .bth
                .opcode
                == Opcode::Cnp
    });
    let cnp = softrnic_wire::frame::parse(&cnp.unwrap().frame)
        .unwrap()
        .repr;
    assert_eq!((cnp.bth.dest_qp, cnp.bth.becn), (p.qp[0], true));
    assert_eq!(cnp.ip.addrs().1, p.sim.hosts[0].gid.to_ip().into());
    // Requests leave ECN-capable, ECT(0); the CNP with mlx5's CNP DSCP, 48, not ECN-capable.
    let first = softrnic_wire::frame::parse(&p.sim.seen[0].frame)
        .unwrap()
        .repr;
    assert_eq!((first.ip.dscp(), first.ip.ecn()), (0, 2));
    assert_eq!((cnp.ip.dscp(), cnp.ip.ecn()), (48, 0));
    let (c0, c1) = (p.counters(0), p.counters(1));
    assert_eq!((c1.np_ecn_marked_roce_packets, c1.np_cnp_sent), (3, 1));
    assert_eq!((c0.rp_cnp_handled, c0.rp_cnp_ignored), (1, 0));
    assert_eq!(p.wcs(1), [(7, WcStatus::Success, WcOpcode::Recv, 3000)]);
    // Later than the interval, a marked packet gets a CNP of its own.
    let later = p.sim.now + 10_000;
    p.sim.alarm = Some(later);
    p.sim.run_until(1000, |s| s.now >= later).unwrap();
    p.send(2, SendOp::Send, sge(src, 3000, lkey));
    p.run();
    assert_eq!(p.counters(1).np_cnp_sent, 2);
    assert_eq!(p.bytes(1, dst + 3000, 3000), vec![0x5a; 3000]);
    // A QP that does not react to CNPs sends Not-ECT packets, which a switch leaves alone.
    let mut q = Pair::rc();
    let off = softrnic_emu_core::Dcqcn {
        rp_enabled: false,
        ..softrnic_emu_core::Dcqcn::default()
    };
    q.sim.hosts[0].engine.set_dcqcn(off);
    q.sim.congested = Some(Box::new(|_| true));
    let (src, lkey) = q.buf(0, 8, 1, RW);
    let (dst, rkey) = q.buf(1, 8, 0, RW);
    q.recv(7, sge(dst, 8, rkey));
    q.send(1, SendOp::Send, sge(src, 8, lkey));
    q.run();
    assert_eq!(q.counters(1).np_ecn_marked_roce_packets, 0);
}

/// DCQCN's reaction point: a sender whose packets are marked CE cuts its rate when the CNPs
/// come and paces its packets to it, so the same transfer over the same 10 Gb/s link takes
/// longer than with DCQCN off; every byte still lands, and once the marks stop the rate
/// recovers to the line rate and the limiter goes.
#[test]
fn cnps_slow_the_sender_down_and_its_rate_recovers() {
    let run = |rp_enabled: bool, reset: bool| {
        let settings = Settings {
            traffic_class: 2,
            ..Settings::default()
        };
        let mut p = Pair::new(QpType::Rc, settings);
        let dcqcn = softrnic_emu_core::Dcqcn {
            rp_enabled,
            line_rate_mbps: 10_000.0, // the simulated link's
            ..softrnic_emu_core::Dcqcn::default()
        };
        p.sim.hosts[0].engine.set_dcqcn(dcqcn);
        // A congested switch marks A's first 600 packets.
        let mut marked = 0;
        p.sim.congested = Some(Box::new(move |s| {
            marked += usize::from(s.from == 0);
            s.from == 0 && marked <= 600
        }));
        let len = 1 << 20;
        let (src, lkey) = p.buf(0, len, 0x3c, RW);
        let (dst, rkey) = p.buf(1, len, 0, RW);
        p.send(
            1,
            SendOp::Write(Remote { addr: dst, rkey }),
            sge(src, len, lkey),
        );
        p.run();
        assert_eq!(p.wcs(0), [(1, WcStatus::Success, WcOpcode::RdmaWrite, 0)]);
        assert_eq!(p.bytes(1, dst, len), vec![0x3c; len]);
        let (now, rate) = (p.sim.now, p.sim.hosts[0].engine.qp_rate(p.qp[0]));
        assert_eq!(rate.is_some(), rp_enabled, "held to a rate: {rate:?}");
        if rp_enabled {
            assert!(rate < Some(10_000.0));
            if reset {
                let a = QpAttr {
                    qp_state: QpState::Reset,
                    ..QpAttr::default()
                };
                p.sim.hosts[0]
                    .engine
                    .modify_qp(p.qp[0], &a, AttrMask::STATE)
                    .unwrap();
                assert_eq!(
                    p.sim.hosts[0].engine.qp_rate(p.qp[0]),
                    None,
                    "a reset QP starts unlimited"
                );
                return (now, p.counters(0), p.counters(1));
            }
            // Unmarked, the next transfers bring the rate back up (the byte counter's hyper
            // increase), and the limiter goes.
            let mut rates = vec![rate.unwrap()];
            while let Some(r) = p.sim.hosts[0].engine.qp_rate(p.qp[0]) {
                assert!(rates.len() < 10, "still limited after 10 MiB: {rates:?}");
                p.send(
                    2,
                    SendOp::Write(Remote { addr: dst, rkey }),
                    sge(src, len, lkey),
                );
                p.run();
                rates.push(r);
            }
        }
        (now, p.counters(0), p.counters(1))
    };
    let (fast, c0, c1) = run(false, false);
    assert!(c1.np_cnp_sent > 1);
    assert_eq!((c0.rp_cnp_handled, c0.rp_cnp_ignored), (0, c1.np_cnp_sent));
    let (slow, c0, c1) = run(true, false);
    run(true, true);
    assert_eq!(c0.rp_cnp_handled, c1.np_cnp_sent);
    assert!(
        slow > fast * 11 / 10,
        "with DCQCN {slow} ns, without {fast} ns"
    );
}

/// For a READ the responder sends the data: the requester answers marked READ responses with
/// CNPs to the responder's QP, which paces its responses, so the READ takes longer than with
/// DCQCN off and still returns every byte.
#[test]
fn cnps_pace_a_responders_read_responses() {
    let run = |rp_enabled: bool| {
        let settings = Settings {
            traffic_class: 2, // marked either way
            ..Settings::default()
        };
        let mut p = Pair::new(QpType::Rc, settings);
        let dcqcn = softrnic_emu_core::Dcqcn {
            rp_enabled,
            line_rate_mbps: 10_000.0,
            ..softrnic_emu_core::Dcqcn::default()
        };
        for h in &mut p.sim.hosts {
            h.engine.set_dcqcn(dcqcn);
        }
        p.sim.congested = Some(Box::new(|s| s.from == 1));
        let len = 1 << 19;
        let (dst, lkey) = p.buf(0, len, 0, RW);
        let (src, rkey) = p.buf(1, len, 0x7e, RW);
        p.send(
            1,
            SendOp::Read(Remote { addr: src, rkey }),
            sge(dst, len, lkey),
        );
        p.run();
        assert_eq!(
            p.wcs(0),
            [(1, WcStatus::Success, WcOpcode::RdmaRead, len as u32)]
        );
        assert_eq!(p.bytes(0, dst, len), vec![0x7e; len]);
        let (c0, c1) = (p.counters(0), p.counters(1));
        assert!(c0.np_cnp_sent > 1);
        assert_eq!(c1.rp_cnp_handled + c1.rp_cnp_ignored, c0.np_cnp_sent);
        assert_eq!(c1.rp_cnp_handled > 0, rp_enabled);
        assert_eq!(p.sim.hosts[1].engine.qp_rate(p.qp[1]).is_some(), rp_enabled);
        // When the last response left.
        p.sim
            .trace
            .iter()
            .filter(|s| s.from == 1)
            .map(|s| s.at)
            .max()
            .unwrap()
    };
    let (fast, slow) = (run(false), run(true));
    assert!(
        slow > fast * 11 / 10,
        "with DCQCN {slow} ns, without {fast} ns"
    );
}

#[test]
fn uc_drops_a_message_with_a_gap_and_takes_the_next() {
    let mut p = Pair::new(QpType::Uc, Settings::default());
    let (src, lkey) = p.buf(0, 2048, 6, RW);
    let (dst, rkey) = p.buf(1, 4096, 0, RW);
    p.recv(7, sge(dst, 2048, rkey));
    p.recv(8, sge(dst + 2048, 2048, rkey));
    p.lose(0, |s| s.opcode == Opcode::UcSendFirst);
    p.send(1, SendOp::Send, sge(src, 2048, lkey));
    p.send(2, SendOp::Send, sge(src, 100, lkey));
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 UC_SEND_FIRST 0 [Dropped]",
            "0>1 UC_SEND_LAST 1",
            "0>1 UC_SEND_ONLY 2",
        ]
    );
    assert_eq!(
        p.wcs(0),
        [
            (1, WcStatus::Success, WcOpcode::Send, 0),
            (2, WcStatus::Success, WcOpcode::Send, 0)
        ]
    );
    // The first receive buffer took the second message; nothing else arrived.
    assert_eq!(p.wcs(1), [(7, WcStatus::Success, WcOpcode::Recv, 100)]);
    assert_eq!(p.counters(1).uc_seq_drop, 1);
}

#[test]
fn requests_arriving_together_share_one_ack() {
    let mut p = Pair::rc();
    // Three SENDs leave at once and arrive together: the responder answers with one ACK for
    // the last, which acknowledges all three (IBA 9.7.5.1.1: ACKs are cumulative).
    p.sim.link.bytes_per_us = u64::MAX / 1_000_000;
    let (src, lkey) = p.buf(0, 8, 1, RW);
    let (dst, rkey) = p.buf(1, 24, 0, RW);
    for i in 0..3 {
        p.recv(10 + i, sge(dst + 8 * i, 8, rkey));
        p.send(i, SendOp::Send, sge(src, 8, lkey));
    }
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_SEND_ONLY 0",
            "0>1 RC_SEND_ONLY 1",
            "0>1 RC_SEND_ONLY 2",
            "1>0 RC_ACKNOWLEDGE 2 ACK",
        ]
    );
    let statuses: Vec<_> = p.wcs(0).iter().map(|w| (w.0, w.1)).collect();
    assert_eq!(
        statuses,
        [
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::Success)
        ]
    );
    assert_eq!(p.wcs(1).len(), 3);
}

#[test]
fn nothing_after_a_local_error_reaches_the_wire() {
    let mut p = Pair::rc();
    let (src, lkey) = p.buf(0, 8, 1, RW);
    let (dst, rkey) = p.buf(1, 16, 0, RW);
    // A good WRITE, one whose lkey is wrong, and a good WRITE behind it.
    p.send(
        1,
        SendOp::Write(Remote { addr: dst, rkey }),
        sge(src, 8, lkey),
    );
    p.send(2, SendOp::Send, sge(src, 8, lkey ^ 0x80));
    // The first goes out and the second fails before the third is posted (which wakes the
    // requester while the first is still unacknowledged).
    p.sim.pump();
    let second = Remote {
        addr: dst + 8,
        rkey,
    };
    p.send(3, SendOp::Write(second), sge(src, 8, lkey));
    p.run();
    assert_eq!(
        p.lines(),
        ["0>1 RC_RDMA_WRITE_ONLY 0", "1>0 RC_ACKNOWLEDGE 0 ACK"]
    );
    assert_eq!(
        p.wcs(0),
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite, 0),
            (2, WcStatus::LocProtErr, WcOpcode::Send, 0),
            (3, WcStatus::WrFlushErr, WcOpcode::RdmaWrite, 0),
        ]
    );
    assert_eq!(p.bytes(1, dst, 16), [[1; 8], [0; 8]].concat());
}

#[test]
fn a_region_deregistered_under_a_read_is_nakked() {
    let mut p = Pair::rc();
    let (dst, lkey) = p.buf(0, 8, 0, RW);
    let (src, rkey) = p.buf(1, 8, 0x42, RW);
    p.send(
        1,
        SendOp::Read(Remote { addr: src, rkey }),
        sge(dst, 8, lkey),
    );
    // The request reaches the responder, which accepts it; then the region goes.
    p.sim.pump();
    p.sim.step();
    p.sim.hosts[1].engine.dereg_mr(rkey).unwrap();
    p.run();
    assert_eq!(
        p.lines(),
        ["0>1 RC_RDMA_READ_REQUEST 0", "1>0 RC_ACKNOWLEDGE 0 NAK2"]
    );
    // (byte_len is undefined in an error completion.)
    let wcs: Vec<_> = p.wcs(0).into_iter().map(|w| (w.0, w.1, w.2)).collect();
    assert_eq!(wcs, [(1, WcStatus::RemAccessErr, WcOpcode::RdmaRead)]);
    assert_eq!(p.bytes(0, dst, 8), [0; 8]);
    assert_eq!(p.counters(1).resp_remote_access_errors, 1);
}

#[test]
fn responses_accepted_before_a_fatal_nak_still_go_out() {
    let mut p = Pair::rc();
    // A link so fast that both requests arrive before the responder answers the first.
    p.sim.link.bytes_per_us = 1_000_000;
    let (res, lkey) = p.buf(0, 8, 0, RW);
    let (word, rkey) = p.buf(1, 8, 0, RW);
    let remote = Remote { addr: word, rkey };
    p.send(1, SendOp::FetchAdd { remote, add: 5 }, sge(res, 8, lkey));
    let bad = Remote {
        addr: word,
        rkey: rkey ^ 0x80,
    };
    p.send(2, SendOp::Write(bad), sge(res, 8, lkey));
    p.run();
    // The atomic ran before the WRITE was refused: its result must reach the requester.
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_FETCH_ADD 0",
            "0>1 RC_RDMA_WRITE_ONLY 1",
            "1>0 RC_ATOMIC_ACKNOWLEDGE 0 ACK",
            "1>0 RC_ACKNOWLEDGE 1 NAK2",
        ]
    );
    let wcs: Vec<_> = p.wcs(0).into_iter().map(|w| (w.0, w.1, w.2)).collect();
    assert_eq!(
        wcs,
        [
            (1, WcStatus::Success, WcOpcode::FetchAdd),
            (2, WcStatus::RemAccessErr, WcOpcode::RdmaWrite),
        ]
    );
    assert_eq!(p.bytes(1, word, 8), 5u64.to_le_bytes());
}

#[test]
fn a_stale_nak_is_ignored() {
    let mut p = Pair::rc();
    let (src, lkey) = p.buf(0, 8, 1, RW);
    let (dst, rkey) = p.buf(1, 8, 0, RW);
    let remote = Remote { addr: dst, rkey };
    p.send(1, SendOp::Write(remote), sge(src, 8, lkey));
    p.run();
    p.send(2, SendOp::Write(remote), sge(src, 8, lkey));
    p.sim.pump();
    // A sequence NAK for PSN 0, long acknowledged (a duplicate from the network), arrives
    // while PSN 1 is outstanding: it must not send PSN 1 again.
    let ext = ExtRepr {
        aeth: Some(AethRepr {
            syndrome: Syndrome::Nak(softrnic_wire::NakCode::PsnSequenceError),
            msn: 0,
        }),
        ..ExtRepr::default()
    };
    let stale = p
        .sim
        .frame(1, 0, bth(Opcode::RcAcknowledge, p.qp[0], 0), ext, &[]);
    p.sim.inject(0, stale);
    p.run();
    assert_eq!(
        p.lines(),
        [
            "0>1 RC_RDMA_WRITE_ONLY 0",
            "1>0 RC_ACKNOWLEDGE 0 ACK",
            "0>1 RC_RDMA_WRITE_ONLY 1",
            "1>0 RC_ACKNOWLEDGE 1 ACK",
        ]
    );
    assert_eq!(p.counters(0).duplicate_response, 1);
    assert_eq!(p.counters(0).packet_seq_err, 0);
    assert_eq!(p.wcs(0).len(), 2);
}

#[test]
fn a_replayed_read_does_not_use_up_the_responder_credit() {
    let settings = Settings {
        max_rd_atomic: 1,
        ..Settings::default()
    };
    let mut p = Pair::new(QpType::Rc, settings);
    let (dst, lkey) = p.buf(0, 16, 0, RW);
    let (src, rkey) = p.buf(1, 16, 0x42, RW);
    p.send(
        1,
        SendOp::Read(Remote { addr: src, rkey }),
        sge(dst, 8, lkey),
    );
    p.run();
    // A late copy of that READ reaches the responder just before the next READ (the only
    // one outstanding, as max_rd_atomic allows): answering the copy is not a new request.
    p.sim.link.latency_ns = 0;
    p.sim.link.bytes_per_us = 1_000_000;
    let next = Remote {
        addr: src + 8,
        rkey,
    };
    p.send(2, SendOp::Read(next), sge(dst + 8, 8, lkey));
    let ext = ExtRepr {
        reth: Some(RethRepr {
            va: src,
            rkey,
            dma_len: 8,
        }),
        ..ExtRepr::default()
    };
    let copy = p
        .sim
        .frame(0, 1, bth(Opcode::RcReadRequest, p.qp[1], 0), ext, &[]);
    p.sim.inject(1, copy);
    p.run();
    assert_eq!(
        p.wcs(0),
        [
            (1, WcStatus::Success, WcOpcode::RdmaRead, 8),
            (2, WcStatus::Success, WcOpcode::RdmaRead, 8),
        ]
    );
    assert_eq!(p.counters(1).duplicate_request, 1);
    assert_eq!(p.counters(1).resp_invalid_request, 0);
    assert_eq!(p.bytes(0, dst, 16), vec![0x42; 16]);
}

/// A UD QP on host `h` in RTS with Q_Key 0x11111111, and a registered 4 KiB buffer with
/// `posted` receives into it: (QPN, CQ, address, key).
fn ud_member(sim: &mut Sim, h: usize, posted: u64, block_self: bool) -> (u32, u32, u64, u32) {
    let e = &mut sim.hosts[h].engine;
    let pd = e.alloc_pd(0).unwrap();
    let cq = e.create_cq(64).unwrap();
    let init = QpInit {
        block_self_mcast_lb: block_self,
        ..QpInit::new(QpType::Ud, cq, QpCap::new(8, 1, 8))
    };
    let qpn = e.create_qp(pd, init).unwrap();
    let addr = e.memory_mut().alloc(4096);
    let key = e.reg_mr(pd, addr, 4096, RW).unwrap();
    let me = sim.endpoint(h, qpn, 0);
    sim.connect(h, qpn, 0, &me, &Settings::default());
    for i in 0..posted {
        let wr = RecvWr {
            wr_id: i,
            sgl: sge(addr, 4096, key),
        };
        sim.hosts[h].engine.post_recv(qpn, wr).unwrap();
    }
    (qpn, cq, addr, key)
}

/// A multicast SEND of 16 bytes of `fill` from `qpn` on host `h` to group `group`.
fn mcast_send(sim: &mut Sim, h: usize, qpn: u32, group: softrnic_emu_core::Gid, buf: (u64, u32)) {
    let mac = group.multicast_mac().unwrap();
    let wr = SendWr {
        wr_id: 99,
        op: SendOp::Send,
        sgl: sge(buf.0, 16, buf.1),
        flags: SendFlags::SIGNALED,
        ud: Some(softrnic_emu_core::UdDest {
            ah: softrnic_emu_core::AddressHandle::to(group, 0)
                .via(softrnic_wire::EthernetAddress(mac)),
            remote_qpn: softrnic_wire::MULTICAST_QPN,
            remote_qkey: 0x1111_1111,
        }),
        xrc_srqn: None,
    };
    sim.hosts[h].engine.post_send(qpn, wr).unwrap();
}

fn received(sim: &mut Sim, h: usize, cq: u32) -> Vec<(WcStatus, u32, u32)> {
    let mut out = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 16];
    let n = sim.hosts[h].engine.poll_cq(cq, &mut out).unwrap();
    out[..n]
        .iter()
        .filter(|w| w.opcode == WcOpcode::Recv)
        .map(|w| (w.status, w.byte_len, w.src_qp))
        .collect()
}

#[test]
fn multicast_datagrams_reach_every_attached_qp_with_its_qkey() {
    let mut sim = Sim::new(1, 3, LinkSpec::default());
    let group = softrnic_emu_core::Gid::from("239.1.2.3".parse::<std::net::Ipv4Addr>().unwrap());
    let (sender, _, src, lkey) = ud_member(&mut sim, 0, 0, false);
    sim.hosts[0]
        .engine
        .memory_mut()
        .slice_mut(src, 16)
        .unwrap()
        .fill(5);
    let (a, a_cq, a_buf, _) = ud_member(&mut sim, 1, 2, false);
    let (b, b_cq, _, _) = ud_member(&mut sim, 2, 2, false);
    let (c, c_cq, _, _) = ud_member(&mut sim, 2, 2, false);
    let (_, d_cq, _, _) = ud_member(&mut sim, 2, 2, false);
    for (h, qpn) in [(1, a), (2, b), (2, c)] {
        sim.hosts[h].engine.attach_mcast(qpn, group).unwrap();
    }
    // C's Q_Key differs: the group's datagrams are not for it.
    let qkey = softrnic_emu_core::QpAttr {
        qp_state: QpState::Rts,
        qkey: 0x2222,
        ..softrnic_emu_core::QpAttr::default()
    };
    let mask = softrnic_emu_core::AttrMask::from_bits_retain(
        softrnic_emu_core::AttrMask::STATE.bits() | softrnic_emu_core::AttrMask::QKEY.bits(),
    );
    sim.hosts[2].engine.modify_qp(c, &qkey, mask).unwrap();

    mcast_send(&mut sim, 0, sender, group, (src, lkey));
    sim.run_idle(10_000).unwrap();
    assert_eq!(
        received(&mut sim, 1, a_cq),
        [(WcStatus::Success, 56, sender)]
    );
    assert_eq!(
        sim.hosts[1].engine.memory().slice(a_buf + 40, 16).unwrap(),
        [5; 16]
    );
    assert_eq!(
        received(&mut sim, 2, b_cq),
        [(WcStatus::Success, 56, sender)]
    );
    assert_eq!(received(&mut sim, 2, c_cq), []);
    assert_eq!(received(&mut sim, 2, d_cq), [], "not attached");
    assert_eq!(sim.hosts[2].engine.counters().qkey_violation, 1);

    // Once A leaves, host 1 has no member: the next datagram is dropped and counted.
    sim.hosts[1].engine.detach_mcast(a, group).unwrap();
    assert!(sim.hosts[1].engine.detach_mcast(a, group).is_err());
    mcast_send(&mut sim, 0, sender, group, (src, lkey));
    sim.run_idle(10_000).unwrap();
    assert_eq!(received(&mut sim, 1, a_cq), []);
    assert_eq!(sim.hosts[1].engine.counters().rcvd_unknown_qp, 1);
    assert_eq!(
        received(&mut sim, 2, b_cq),
        [(WcStatus::Success, 56, sender)]
    );
}

#[test]
fn multicast_needs_a_ud_qp_a_group_gid_and_the_multicast_qpn() {
    let mut sim = Sim::new(1, 2, LinkSpec::default());
    let group = softrnic_emu_core::Gid::from("239.1.2.3".parse::<std::net::Ipv4Addr>().unwrap());
    let (ud, cq, _, _) = ud_member(&mut sim, 1, 2, false);
    let e = &mut sim.hosts[1].engine;
    let unicast = softrnic_emu_core::Gid::from("198.18.0.9".parse::<std::net::Ipv4Addr>().unwrap());
    assert_eq!(e.attach_mcast(ud, unicast).unwrap_err().errno(), 22);
    let pd = e.alloc_pd(0).unwrap();
    let rc = e
        .create_qp(pd, QpInit::new(QpType::Rc, cq, QpCap::new(1, 1, 1)))
        .unwrap();
    assert_eq!(e.attach_mcast(rc, group).unwrap_err().errno(), 22);
    e.attach_mcast(ud, group).unwrap();
    e.attach_mcast(ud, group).unwrap();

    // A datagram to the group whose DestQP is the QP's own number, not 0xFFFFFF.
    let (sender, _, src, lkey) = ud_member(&mut sim, 0, 0, false);
    mcast_send(&mut sim, 0, sender, group, (src, lkey));
    let now = softrnic_emu_core::Instant::from_nanos(0);
    let mut buf = vec![0; softrnic_emu_core::MAX_FRAME];
    let n = sim.hosts[0].engine.poll_transmit(now, &mut buf).unwrap();
    let mut frame = buf[..n].to_vec();
    let mut parsed = softrnic_wire::frame::parse(&frame).unwrap().repr;
    parsed.bth.dest_qp = ud;
    let payload = softrnic_wire::frame::parse(&frame)
        .unwrap()
        .payload()
        .to_vec();
    frame.resize(softrnic_emu_core::MAX_FRAME, 0);
    let n = parsed.emit(&payload, &mut frame).unwrap();
    frame.truncate(n);
    sim.inject(1, frame);
    sim.run_idle(10_000).unwrap();
    assert_eq!(received(&mut sim, 1, cq), []);
    assert_eq!(sim.hosts[1].engine.counters().rcvd_bad_context, 1);
}

#[test]
fn a_qp_that_blocks_self_loopback_skips_its_own_multicast() {
    // The device loops multicast back to its own members (the daemon hands each sent group
    // frame to every device, the sender's included): host 0 gets its own frame here.
    let mut sim = Sim::new(1, 1, LinkSpec::default());
    let group = softrnic_emu_core::Gid::from("239.9.9.9".parse::<std::net::Ipv4Addr>().unwrap());
    let (blocking, blocking_cq, b_buf, b_key) = ud_member(&mut sim, 0, 2, true);
    let (open, open_cq, o_buf, o_key) = ud_member(&mut sim, 0, 2, false);
    for qpn in [blocking, open] {
        sim.hosts[0].engine.attach_mcast(qpn, group).unwrap();
    }
    for (from, buf) in [(blocking, (b_buf, b_key)), (open, (o_buf, o_key))] {
        mcast_send(&mut sim, 0, from, group, buf);
        let now = softrnic_emu_core::Instant::from_nanos(0);
        let mut buf = vec![0; softrnic_emu_core::MAX_FRAME];
        let n = sim.hosts[0].engine.poll_transmit(now, &mut buf).unwrap();
        sim.inject(0, buf[..n].to_vec());
        sim.run_idle(10_000).unwrap();
    }
    assert_eq!(
        received(&mut sim, 0, blocking_cq),
        [(WcStatus::Success, 56, open)]
    );
    assert_eq!(
        received(&mut sim, 0, open_cq),
        [
            (WcStatus::Success, 56, blocking),
            (WcStatus::Success, 56, open)
        ]
    );
}
