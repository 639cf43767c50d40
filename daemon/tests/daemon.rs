//! The daemon over its socket: contexts on local devices talking RC through it, same-host
//! delivery between devices, isolation between contexts, and cleanup when a program is killed
//! in the middle of a transfer.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use softrnic_client::client::Client;
use softrnic_client::proto::UpRequest;
use softrnic_daemon::Running;
use softrnic_emu_core::{
    Access, AddressHandle, Gid, Mtu, QpAttr, QpCap, QpInit, QpType, RecvWr, Remote, SendFlags,
    SendOp, SendWr, Sge, WcOpcode, WcStatus, bring_up,
};

const ALL: Access = Access::from_bits_retain(1 | 2 | 4 | 8);
const WAIT: Duration = Duration::from_secs(10);

fn socket(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("softrnic-test-{}-{tag}.sock", std::process::id()))
}

/// A daemon with `n` local devices.
fn daemon(tag: &str, n: usize) -> Running {
    let running = Running::start(&socket(tag)).expect("start the daemon");
    let mut admin = Client::connect(running.path()).expect("connect");
    for _ in 0..n {
        admin
            .up(UpRequest {
                netdev: None,
                backend: None,
                netns: None,
            })
            .expect("up");
    }
    running
}

/// A context with a PD, a CQ and one RC QP.
struct Ctx {
    c: Client,
    pd: u32,
    cq: u32,
    qp: u32,
    gid: Gid,
}

fn context(path: &std::path::Path, device: &str) -> Ctx {
    context_with_cq(path, device, 256)
}

/// A context whose CQ has room for `cqe` completions.
fn context_with_cq(path: &std::path::Path, device: &str, cqe: u32) -> Ctx {
    let mut c = Client::connect(path).unwrap();
    c.open(device).unwrap();
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(cqe).unwrap();
    with_qp(c, pd, cq, None)
}

/// Completes a context: an RC QP on `cq` (receiving from `srq`, if given), and its GID.
fn with_qp(mut c: Client, pd: u32, cq: u32, srq: Option<u32>) -> Ctx {
    let init = QpInit {
        srq,
        ..QpInit::new(QpType::Rc, cq, QpCap::new(64, 2, 64))
    };
    let qp = c.create_qp(pd, init).unwrap();
    let gid = c.gids().unwrap()[0];
    Ctx { c, pd, cq, qp, gid }
}

/// Takes `qp` to RTS towards `peer_qpn` at `peer_gid` (from GID index `sgid`); this side sends
/// from PSN `psn`, the peer from `peer_psn`.
fn connect(
    c: &mut Client,
    qp: u32,
    psn: u32,
    peer_qpn: u32,
    peer_psn: u32,
    peer_gid: Gid,
    sgid: u8,
) {
    let ah = AddressHandle::to(peer_gid, sgid);
    let base = QpAttr {
        qp_access_flags: ALL,
        ah: Some(ah),
        path_mtu: Mtu::M4096,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        rq_psn: peer_psn,
        sq_psn: psn,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        dest_qp_num: peer_qpn,
        ..QpAttr::default()
    };
    for (state, mask) in bring_up(QpType::Rc) {
        c.modify_qp(
            qp,
            QpAttr {
                qp_state: state,
                ..base
            },
            mask,
        )
        .unwrap();
    }
}

fn pair(a: &mut Ctx, b: &mut Ctx) {
    connect(&mut a.c, a.qp, 100, b.qp, 200, b.gid, 0);
    connect(&mut b.c, b.qp, 200, a.qp, 100, a.gid, 0);
}

/// Registers `buf` with every access right.
fn reg(c: &mut Client, pd: u32, buf: &[u8]) -> u32 {
    c.reg_mr(pd, buf.as_ptr() as u64, buf.len() as u64, ALL)
        .unwrap()
}

fn sge(buf: &[u8], lkey: u32) -> Vec<Sge> {
    vec![Sge {
        addr: buf.as_ptr() as u64,
        length: buf.len() as u32,
        lkey,
    }]
}

fn wr(wr_id: u64, op: SendOp, buf: &[u8], lkey: u32) -> SendWr {
    SendWr {
        wr_id,
        op,
        sgl: sge(buf, lkey),
        flags: SendFlags::SIGNALED,
        ud: None,
        xrc_srqn: None,
    }
}

/// The bytes of `buf` as they are now (the daemon writes them from another thread).
fn seen(buf: &[u8]) -> Vec<u8> {
    std::hint::black_box(buf).to_vec()
}

fn rc_between(a: &mut Ctx, b: &mut Ctx) {
    let src: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let dst = vec![0u8; 100_000];
    let back = vec![0u8; 100_000];
    let ka = reg(&mut a.c, a.pd, &src);
    let kb = reg(&mut b.c, b.pd, &dst);
    let kback = reg(&mut a.c, a.pd, &back);
    let remote = Remote {
        addr: dst.as_ptr() as u64,
        rkey: kb,
    };
    a.c.post_send(
        a.qp,
        vec![
            wr(1, SendOp::Write(remote), &src, ka),
            wr(2, SendOp::Read(remote), &back, kback),
        ],
    )
    .unwrap();
    let wcs = a.c.wait(a.cq, 2, WAIT).unwrap();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::RdmaRead)
        ]
    );
    assert_eq!(
        seen(&dst),
        src,
        "WRITE landed in the other context's memory"
    );
    assert_eq!(seen(&back), src, "READ brought it back");
    // SEND to a posted receive.
    let rbuf = vec![0u8; 64];
    let krb = reg(&mut b.c, b.pd, &rbuf);
    let sgl = sge(&rbuf, krb);
    b.c.post_recv(b.qp, vec![RecvWr { wr_id: 9, sgl }]).unwrap();
    a.c.post_send(a.qp, vec![wr(3, SendOp::Send, &src[..64], ka)])
        .unwrap();
    let r = b.c.wait(b.cq, 1, WAIT).unwrap();
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len),
        (9, WcStatus::Success, 64)
    );
    assert_eq!(seen(&rbuf), src[..64]);
    assert_eq!(
        a.c.wait(a.cq, 1, WAIT).unwrap()[0].status,
        WcStatus::Success
    );
}

#[test]
fn two_contexts_on_one_device() {
    let d = daemon("one", 1);
    let (mut a, mut b) = (context(d.path(), "srnic0"), context(d.path(), "srnic0"));
    pair(&mut a, &mut b);
    rc_between(&mut a, &mut b);
    let mut admin = Client::connect(d.path()).unwrap();
    let info = &admin.devices().unwrap()[0];
    assert_eq!(info.contexts, 2);
    assert_eq!(info.objects, [2, 4, 2, 2], "PDs, MRs, CQs, QPs");
}

/// Work posted before a verbs call is done by the time the call is answered, as with a kernel
/// provider: a CQ cannot be resized below the completions of sends posted just before.
#[test]
fn a_verbs_call_sees_the_work_posted_before_it() {
    let d = daemon("order", 1);
    let (mut a, mut b) = (context(d.path(), "srnic0"), context(d.path(), "srnic0"));
    pair(&mut a, &mut b);
    let (buf, rbuf) = (vec![7u8; 64], vec![0u8; 64]);
    let (la, lb) = (reg(&mut a.c, a.pd, &buf), reg(&mut b.c, b.pd, &rbuf));
    let recvs = (0..8).map(|i| RecvWr {
        wr_id: i,
        sgl: sge(&rbuf, lb),
    });
    b.c.post_recv(b.qp, recvs.collect()).unwrap();
    let sends = (0..8).map(|i| wr(i, SendOp::Send, &buf, la));
    a.c.post_send(a.qp, sends.collect()).unwrap();
    let refused = a.c.resize_cq(a.cq, 4).unwrap_err();
    assert_eq!(refused.errno, libc::EINVAL, "{refused}");
}

/// Completions that find the program's CQ ring full wait in the daemon, and follow as the
/// program polls and makes room: in order, none lost.
#[test]
fn completions_wait_for_room_in_the_cq_ring() {
    let d = daemon("cqroom", 1);
    let mut a = context_with_cq(d.path(), "srnic0", 4);
    let mut b = context(d.path(), "srnic0");
    pair(&mut a, &mut b);
    let (src, dst) = (vec![5u8; 64], vec![0u8; 64]);
    let (ka, kb) = (reg(&mut a.c, a.pd, &src), reg(&mut b.c, b.pd, &dst));
    let remote = Remote {
        addr: dst.as_ptr() as u64,
        rkey: kb,
    };
    // A verbs call's pass completes what was posted before it (one device, both QPs on it),
    // so four completions fill the ring, then four more wait in the daemon's CQ.
    for batch in [0..4, 4..8] {
        let writes = batch.map(|i| wr(i, SendOp::Write(remote), &src, ka));
        a.c.post_send(a.qp, writes.collect()).unwrap();
        a.c.query_qp(a.qp).unwrap();
    }
    let wcs = a.c.wait(a.cq, 8, WAIT).unwrap();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    let want: Vec<_> = (0..8).map(|i| (i, WcStatus::Success)).collect();
    assert_eq!(got, want);
}

/// On one host, a receiver that destroys its QP the moment it sees its last completion (as
/// a program that exits then does) must not take the ACK for that message with it: the
/// sender's SEND completes successfully every time, and the daemon never retransmits it.
#[test]
fn the_ack_leaves_before_the_receiver_sees_its_completion() {
    let d = daemon("ack", 1);
    let (mut a, mut b) = (context(d.path(), "srnic0"), context(d.path(), "srnic0"));
    let msg = vec![7u8; 5000];
    let rbuf = vec![0u8; 5000];
    let ka = reg(&mut a.c, a.pd, &msg);
    let kb = reg(&mut b.c, b.pd, &rbuf);
    for round in 0..30 {
        pair(&mut a, &mut b);
        let sgl = sge(&rbuf, kb);
        b.c.post_recv(b.qp, vec![RecvWr { wr_id: 1, sgl }]).unwrap();
        a.c.post_send(a.qp, vec![wr(2, SendOp::Send, &msg, ka)])
            .unwrap();
        // Spin, as a busy-polling program does, and tear down at once.
        let deadline = std::time::Instant::now() + WAIT;
        while b.c.poll_cq(b.cq, 1).unwrap().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "no receive completion"
            );
        }
        b.c.destroy_qp(b.qp).unwrap();
        let sent = a.c.wait(a.cq, 1, WAIT).unwrap();
        assert_eq!(sent[0].status, WcStatus::Success, "round {round}");
        a.c.destroy_qp(a.qp).unwrap();
        for ctx in [&mut a, &mut b] {
            let init = QpInit::new(QpType::Rc, ctx.cq, QpCap::new(64, 2, 64));
            ctx.qp = ctx.c.create_qp(ctx.pd, init).unwrap();
        }
    }
    let counters = Client::connect(d.path())
        .unwrap()
        .counters("srnic0")
        .unwrap();
    assert_eq!(counters.retransmitted_pkts, 0);
    assert_eq!(counters.local_ack_timeout_err, 0);
}

#[test]
fn same_host_delivery_between_two_devices() {
    let d = daemon("two", 2);
    let (mut a, mut b) = (context(d.path(), "srnic0"), context(d.path(), "srnic1"));
    assert_ne!(a.gid, b.gid);
    pair(&mut a, &mut b);
    rc_between(&mut a, &mut b);
    let mut admin = Client::connect(d.path()).unwrap();
    let (c0, c1) = (
        admin.counters("srnic0").unwrap(),
        admin.counters("srnic1").unwrap(),
    );
    assert!(c0.sent_pkts > 25 && c1.rcvd_pkts > 25, "{c0:?} {c1:?}");
}

#[test]
fn contexts_cannot_reach_each_others_objects() {
    let d = daemon("iso", 1);
    let (mut a, mut b) = (context(d.path(), "srnic0"), context(d.path(), "srnic0"));
    let einval = |r: Result<(), softrnic_client::client::Error>| r.unwrap_err().errno;
    assert_eq!(einval(b.c.dealloc_pd(a.pd)), libc::EINVAL);
    assert_eq!(einval(b.c.destroy_qp(a.qp)), libc::EINVAL);
    assert_eq!(einval(b.c.destroy_cq(a.cq)), libc::EINVAL);
    assert_eq!(b.c.poll_cq(a.cq, 1).unwrap_err().errno, libc::EINVAL);
    let sgl = vec![Sge {
        addr: 0,
        length: 0,
        lkey: 0,
    }];
    assert_eq!(
        b.c.post_recv(a.qp, vec![RecvWr { wr_id: 0, sgl }])
            .unwrap_err()
            .errno,
        libc::EINVAL
    );
    // A region of A's in a PD B's QP is not in: B's WRITE to it fails at the responder.
    let mut other = Client::connect(d.path()).unwrap();
    other.open("srnic0").unwrap();
    let secret = vec![7u8; 64];
    let pd2 = a.c.alloc_pd().unwrap();
    let key = reg(&mut a.c, pd2, &secret);
    pair(&mut a, &mut b);
    let src = vec![1u8; 64];
    let kb = reg(&mut b.c, b.pd, &src);
    let remote = Remote {
        addr: secret.as_ptr() as u64,
        rkey: key,
    };
    b.c.post_send(b.qp, vec![wr(1, SendOp::Write(remote), &src, kb)])
        .unwrap();
    assert_eq!(
        b.c.wait(b.cq, 1, WAIT).unwrap()[0].status,
        WcStatus::RemAccessErr
    );
    assert_eq!(seen(&secret), vec![7u8; 64]);
    // Registering memory the program has not mapped is EFAULT.
    assert_eq!(
        a.c.reg_mr(a.pd, 8, 64, ALL).unwrap_err().errno,
        libc::EFAULT
    );
}

/// Run by `a_killed_program_leaves_nothing_behind` in a child process: connects to the
/// daemon, streams WRITEs to the parent's QP until it is killed.
#[test]
#[ignore = "a helper process for a_killed_program_leaves_nothing_behind"]
fn child_client() {
    let path = std::env::var_os("SOFTRNIC_CHILD_SOCKET")
        .expect("run by a_killed_program_leaves_nothing_behind, which sets SOFTRNIC_CHILD_SOCKET");
    let mut me = context(std::path::Path::new(&path), "srnic0");
    println!("QPN {}", me.qp);
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let mut words = line.split_whitespace().skip(1);
    let peer_qpn: u32 = words.next().unwrap().parse().unwrap();
    let rkey: u32 = words.next().unwrap().parse().unwrap();
    let addr: u64 = words.next().unwrap().parse().unwrap();
    let gid = me.gid;
    connect(&mut me.c, me.qp, 300, peer_qpn, 400, gid, 0);
    let src = vec![0xc5u8; 65536];
    let key = reg(&mut me.c, me.pd, &src);
    let remote = Remote { addr, rkey };
    for i in 0.. {
        let batch = (0..8)
            .map(|j| wr(i * 8 + j, SendOp::Write(remote), &src, key))
            .collect();
        me.c.post_send(me.qp, batch).unwrap();
        me.c.wait(me.cq, 8, WAIT).unwrap();
        if i == 2 {
            println!("STARTED");
        }
    }
}

#[test]
fn a_killed_program_leaves_nothing_behind() {
    let d = daemon("kill", 1);
    let mut me = context(d.path(), "srnic0");
    let target = vec![0u8; 65536];
    let rkey = reg(&mut me.c, me.pd, &target);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_client",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SOFTRNIC_CHILD_SOCKET", d.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let child_qpn = loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the child ended early"
        );
        // libtest prints the test's name first, on the same line.
        if let Some((_, n)) = line.split_once("QPN ") {
            break n.trim().parse::<u32>().unwrap();
        }
    };
    let gid = me.gid;
    connect(&mut me.c, me.qp, 400, child_qpn, 300, gid, 0);
    let mut input = child.stdin.take().unwrap();
    writeln!(input, "GO {} {rkey} {}", me.qp, target.as_ptr() as u64).unwrap();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the child ended early"
        );
        if line.contains("STARTED") {
            break;
        }
    }
    // Mid-transfer: SIGKILL.
    std::thread::sleep(Duration::from_millis(20));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(seen(&target[..16]), vec![0xc5; 16], "the WRITEs arrived");

    let mut admin = Client::connect(d.path()).unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let info = admin.devices().unwrap().remove(0);
        // Only this test's own context remains: 1 PD, 1 MR, 1 CQ, 1 QP.
        if info.contexts == 1 && info.objects == [1, 1, 1, 1] {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still held: {info:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The daemon carries on: a new pair of contexts works.
    let (mut a, mut b) = (context(d.path(), "srnic0"), context(d.path(), "srnic0"));
    pair(&mut a, &mut b);
    rc_between(&mut a, &mut b);
}

/// A context with one QP of each type, on a device of the daemon at `path`.
struct Full {
    c: Client,
    pd: u32,
    cq: u32,
    qps: [u32; 3],
    gid: Gid,
}

fn full(path: &std::path::Path, device: &str) -> Full {
    let mut c = Client::connect(path).unwrap();
    c.open(device).unwrap();
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(256).unwrap();
    let cap = QpCap::new(64, 2, 64);
    let qps = [QpType::Rc, QpType::Uc, QpType::Ud].map(|qp_type| {
        let init = QpInit::new(qp_type, cq, cap);
        c.create_qp(pd, init).unwrap()
    });
    // Index 1 is the IPv4 address, once the IPv6 link-local one (index 0) has appeared.
    let deadline = std::time::Instant::now() + WAIT;
    let gid = loop {
        let gids = c.gids().unwrap();
        if gids.len() >= 2 {
            break gids[1];
        }
        assert!(std::time::Instant::now() < deadline, "GIDs: {gids:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    Full {
        c,
        pd,
        cq,
        qps,
        gid,
    }
}

/// Takes the UC and UD QPs to RTS (the RC one goes through `connect`).
fn connect_uc_ud(me: &mut Full, peer: &Full) {
    let ah = AddressHandle::to(peer.gid, 1);
    let uc = QpAttr {
        qp_access_flags: ALL,
        ah: Some(ah),
        path_mtu: Mtu::M4096,
        rq_psn: 7,
        sq_psn: 7,
        dest_qp_num: peer.qps[1],
        qkey: 0x1111_1111,
        ..QpAttr::default()
    };
    for (q, qp_type) in [(1, QpType::Uc), (2, QpType::Ud)] {
        for (state, mask) in bring_up(qp_type) {
            let attr = QpAttr {
                qp_state: state,
                ..uc
            };
            me.c.modify_qp(me.qps[q], attr, mask).unwrap();
        }
    }
}

/// Every RC opcode, and SENDs over UC and UD, from `a` to `b`, with the data checked.
fn every_opcode(a: &mut Full, b: &mut Full) {
    // GID index 1: the IPv4 address (index 0 is the IPv6 link-local one, as with rxe).
    connect(&mut a.c, a.qps[0], 100, b.qps[0], 200, b.gid, 1);
    connect(&mut b.c, b.qps[0], 200, a.qps[0], 100, a.gid, 1);
    connect_uc_ud(a, b);
    connect_uc_ud(b, a);
    let src: Vec<u8> = (0..20_000u32).map(|i| (i % 253) as u8).collect();
    let dst = vec![0u8; 20_000];
    let rcv = vec![0u8; 4 * 8192];
    let res = vec![0u8; 16];
    let ka = reg(&mut a.c, a.pd, &src);
    let kres = reg(&mut a.c, a.pd, &res);
    let kb = reg(&mut b.c, b.pd, &dst);
    let kr = reg(&mut b.c, b.pd, &rcv);
    // Receives: RC SEND, RC SEND with immediate, RC WRITE with immediate, UC SEND, UD SEND.
    for (i, q) in [(0, 0), (1, 0), (2, 0), (3, 1), (4, 2)] {
        let sgl = sge(&rcv[6000 * i..][..6000], kr);
        b.c.post_recv(
            b.qps[q],
            vec![RecvWr {
                wr_id: i as u64,
                sgl,
            }],
        )
        .unwrap();
    }
    let remote = Remote {
        addr: dst.as_ptr() as u64,
        rkey: kb,
    };
    let word = Remote {
        addr: dst.as_ptr() as u64 + 16_000,
        rkey: kb,
    };
    let small = &src[..3000];
    let rc = vec![
        wr(1, SendOp::Write(remote), &src[..15_000], ka),
        wr(2, SendOp::Send, small, ka),
        wr(3, SendOp::SendWithImm(0xabc), small, ka),
        wr(
            4,
            SendOp::WriteWithImm(
                Remote {
                    addr: remote.addr + 15_000,
                    rkey: kb,
                },
                0xdef,
            ),
            &src[..100],
            ka,
        ),
        wr(5, SendOp::Read(remote), &res[..8], kres),
        wr(
            6,
            SendOp::FetchAdd {
                remote: word,
                add: 5,
            },
            &res[8..],
            kres,
        ),
        wr(
            7,
            SendOp::CompareSwap {
                remote: word,
                compare: 0,
                swap: 9,
            },
            &res[..8],
            kres,
        ),
    ];
    a.c.post_send(a.qps[0], rc).unwrap();
    a.c.post_send(a.qps[1], vec![wr(8, SendOp::Send, small, ka)])
        .unwrap();
    let mut ud = wr(9, SendOp::Send, &src[..1000], ka);
    ud.ud = Some(softrnic_emu_core::UdDest {
        ah: AddressHandle::to(b.gid, 1),
        remote_qpn: b.qps[2],
        remote_qkey: 0x1111_1111,
    });
    a.c.post_send(a.qps[2], vec![ud]).unwrap();
    let mut sent = a.c.wait(a.cq, 9, WAIT).unwrap();
    sent.sort_by_key(|w| w.wr_id);
    assert!(
        sent.len() == 9 && sent.iter().all(|w| w.status == WcStatus::Success),
        "{sent:?}"
    );
    let mut got = b.c.wait(b.cq, 5, WAIT).unwrap();
    got.sort_by_key(|w| w.wr_id);
    let lens: Vec<_> = got
        .iter()
        .map(|w| (w.wr_id, w.status, w.byte_len, w.imm_data))
        .collect();
    assert_eq!(
        lens,
        [
            (0, WcStatus::Success, 3000, 0),
            (1, WcStatus::Success, 3000, 0xabc),
            (2, WcStatus::Success, 100, 0xdef),
            (3, WcStatus::Success, 3000, 0),
            (4, WcStatus::Success, 1040, 0),
        ]
    );
    let d = seen(&dst);
    assert!(d[..15_000] == src[..15_000], "WRITE data");
    assert!(d[15_000..15_100] == src[..100], "WRITE with immediate data");
    let r = seen(&rcv);
    // Receives 0, 1 (RC) and 3 (UC) hold a SEND's bytes; 2 was a WRITE with immediate's.
    for i in [0, 1, 3] {
        assert!(r[6000 * i..6000 * i + 3000] == src[..3000], "receive {i}");
    }
    assert!(r[24_040..25_040] == src[..1000], "UD after its GRH");
    let res = seen(&res);
    assert_eq!(res[8..], [0; 8], "FETCH_ADD saw 0");
    assert_eq!(
        u64::from_ne_bytes(res[..8].try_into().unwrap()),
        5,
        "CAS saw 5 and failed"
    );
    assert_eq!(u64::from_ne_bytes(d[16_000..16_008].try_into().unwrap()), 5);
}

/// Two daemons, each with a device in its own namespace, so every frame crosses the veth.
fn two_daemons_over(tag: &str, backend: softrnic_client::proto::BackendKind) {
    use softrnic_link::netns::VethPair;
    let pair = VethPair::new(tag, 9000).expect("namespaces (needs root)");
    let daemons: Vec<Running> = (0..2)
        .map(|i| {
            let d = Running::start(&socket(&format!("{tag}{i}"))).unwrap();
            let mut admin = Client::connect(d.path()).unwrap();
            let up = UpRequest {
                netdev: Some(pair.ifs[i].clone()),
                backend: Some(backend),
                netns: Some(pair.path(i)),
            };
            let info = admin.up(up).unwrap();
            assert_eq!(info.backend, backend);
            assert_eq!(info.backend_reason, format!("{backend:?} as asked"));
            d
        })
        .collect();
    let mut a = full(daemons[0].path(), "srnic0");
    let mut b = full(daemons[1].path(), "srnic0");
    every_opcode(&mut a, &mut b);
}

#[test]
fn two_daemons_over_af_packet() {
    two_daemons_over("dp", softrnic_client::proto::BackendKind::Packet);
}

#[test]
fn two_daemons_over_af_xdp_skb() {
    two_daemons_over("ds", softrnic_client::proto::BackendKind::XdpSkb);
}

#[test]
fn two_daemons_over_af_xdp_drv() {
    two_daemons_over("dd", softrnic_client::proto::BackendKind::XdpDrv);
}

#[test]
fn the_gid_table_follows_address_changes() {
    use softrnic_link::netns::VethPair;
    let pair = VethPair::new("gw", 1500).expect("namespaces (needs root)");
    let d = Running::start(&socket("gw")).unwrap();
    let mut c = Client::connect(d.path()).unwrap();
    let up = UpRequest {
        netdev: Some(pair.ifs[0].clone()),
        backend: None,
        netns: Some(pair.path(0)),
    };
    let info = c.up(up).unwrap();
    // No backend was asked for: the reason says how this one was chosen.
    assert!(
        !info.backend_reason.contains("as asked"),
        "{}",
        info.backend_reason
    );
    c.open(&info.name).unwrap();
    let has = |c: &mut Client, want: &str| c.gids().unwrap().iter().any(|g| g.to_string() == want);
    let wait_for = |c: &mut Client, want: &str, present: bool| {
        let deadline = std::time::Instant::now() + WAIT;
        while has(c, want) != present {
            assert!(
                std::time::Instant::now() < deadline,
                "{want} present: {}",
                !present
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    assert!(has(&mut c, "::ffff:198.18.1.1"));
    pair.add_ipv6(0, "2001:db8::7/64").unwrap();
    wait_for(&mut c, "2001:db8::7", true);
    pair.exec(
        0,
        &["ip", "addr", "del", "198.18.1.1/24", "dev", &pair.ifs[0]],
    )
    .unwrap();
    wait_for(&mut c, "::ffff:198.18.1.1", false);
}

#[test]
fn srqs_and_events_reach_only_their_context() {
    let d = daemon("srq", 1);
    let mut a = context(d.path(), "srnic0");
    // B's QP takes its receives from an SRQ.
    let mut b = Client::connect(d.path()).unwrap();
    b.open("srnic0").unwrap();
    let pd = b.alloc_pd().unwrap();
    let cq = b.create_cq(64).unwrap();
    let srq = b.create_srq(pd, 8, 1).unwrap();
    let mut bctx = with_qp(b, pd, cq, Some(srq));
    pair(&mut a, &mut bctx);
    let buf = [0u8; 64];
    let key = reg(&mut bctx.c, pd, &buf);
    for i in 0..3 {
        let sgl = sge(&buf[16 * i..][..16], key);
        bctx.c
            .post_srq_recv(
                srq,
                vec![RecvWr {
                    wr_id: i as u64,
                    sgl,
                }],
            )
            .unwrap();
    }
    bctx.c.modify_srq(srq, 3).unwrap();
    let _mw = bctx
        .c
        .alloc_mw(pd, softrnic_emu_core::MwType::Type2)
        .unwrap();
    a.c.post_send(a.qp, vec![wr(1, SendOp::Send, &[], 0)])
        .unwrap();
    assert_eq!(
        a.c.wait(a.cq, 1, WAIT).unwrap()[0].status,
        WcStatus::Success
    );
    let got = bctx.c.wait(cq, 1, WAIT).unwrap();
    assert_eq!((got[0].wr_id, got[0].status), (0, WcStatus::Success));
    // The async fd has a byte per event: take them as ibv_get_async_event does.
    let async_fd = bctx.c.async_fd().unwrap();
    let mut events = Vec::new();
    while softrnic_sys::poll_readable(&[async_fd], 1000).unwrap() == 1 {
        assert!(softrnic_sys::take_notification(async_fd).unwrap());
        events.push(bctx.c.async_event().unwrap());
        if events.contains(&softrnic_emu_core::Event::SrqLimitReached { srq }) {
            break;
        }
    }
    assert!(
        events.contains(&softrnic_emu_core::Event::SrqLimitReached { srq }),
        "{events:?}"
    );
    assert_eq!(
        a.c.events().unwrap(),
        [],
        "A owns nothing the events are about"
    );
    // Closing B frees its SRQ, window and the rest.
    drop(bctx);
    let mut admin = Client::connect(d.path()).unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while admin.devices().unwrap()[0].objects != [1, 0, 1, 1] {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_completion_channel_fd_fires_for_an_armed_cq() {
    use std::os::fd::AsRawFd;
    let d = daemon("chan", 1);
    let mut a = context(d.path(), "srnic0");
    let mut b = Client::connect(d.path()).unwrap();
    b.open("srnic0").unwrap();
    let (channel, fd) = b.create_comp_channel().unwrap();
    let pd = b.alloc_pd().unwrap();
    let cq = b.create_cq_on(16, Some(channel)).unwrap();
    let mut bctx = with_qp(b, pd, cq, None);
    pair(&mut a, &mut bctx);
    let buf = [0u8; 16];
    let key = reg(&mut bctx.c, pd, &buf);
    let sgl = sge(&buf, key);
    bctx.c
        .post_recv(bctx.qp, vec![RecvWr { wr_id: 5, sgl }])
        .unwrap();
    bctx.c.req_notify_cq(cq, false).unwrap();
    // Nothing yet: the fd is quiet.
    assert_eq!(
        softrnic_sys::poll_readable(&[fd.as_raw_fd()], 0).unwrap(),
        0
    );
    a.c.post_send(a.qp, vec![wr(1, SendOp::Send, &[], 0)])
        .unwrap();
    // A program would block in poll(2) or epoll here.
    assert_eq!(
        softrnic_sys::poll_readable(&[fd.as_raw_fd()], 10_000).unwrap(),
        1
    );
    // A byte per notification, then the CQ it was for (ibv_get_cq_event).
    assert!(softrnic_sys::take_notification(fd.as_raw_fd()).unwrap());
    assert_eq!(bctx.c.cq_event(channel).unwrap(), cq);
    let wc = bctx.c.poll_cq(cq, 4).unwrap();
    assert_eq!((wc[0].wr_id, wc[0].status), (5, WcStatus::Success));
    // Not re-armed: no second notification, and the fd is quiet again.
    assert_eq!(
        softrnic_sys::poll_readable(&[fd.as_raw_fd()], 0).unwrap(),
        0
    );
    assert_eq!(bctx.c.cq_event(channel).unwrap_err().errno, libc::EAGAIN);
    // The channel cannot go while its CQ uses it.
    assert_eq!(
        bctx.c.destroy_comp_channel(channel).unwrap_err().errno,
        libc::EBUSY
    );
    bctx.c.destroy_cq(cq).ok();
}

#[test]
fn a_full_send_queue_is_enomem_and_nothing_posted_is_lost() {
    const N: u64 = 200;
    let d = daemon("full", 1);
    let mut a = context(d.path(), "srnic0");
    let mut b = context(d.path(), "srnic0");
    // Still in RESET: EINVAL at once, as from rxe, not a WR that silently goes nowhere.
    let early = a.c.post_send(a.qp, vec![wr(0, SendOp::Send, &[], 0)]);
    assert_eq!(early.unwrap_err().errno, libc::EINVAL);
    pair(&mut a, &mut b);
    // B has no receives yet: A's first SEND meets RNR NAKs, so nothing completes and A's
    // queue fills.
    let mut posted = 0;
    let full = loop {
        match a.c.post_send(a.qp, vec![wr(posted, SendOp::Send, &[], 0)]) {
            Ok(()) => posted += 1,
            Err(e) => break e,
        }
        assert!(posted < N, "the queue never filled");
    };
    assert_eq!(full.errno, libc::ENOMEM, "{full}");
    assert!(posted >= 64, "only {posted} taken");
    // Now B receives, and A posts the rest as room appears: every SEND completes, in order.
    let (mut done, mut recvs, mut received) = (Vec::new(), 0u64, 0u64);
    let deadline = std::time::Instant::now() + WAIT;
    while done.len() < N as usize {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {N} done",
            done.len()
        );
        if recvs - received < 32 {
            let more = (0..8).map(|i| RecvWr {
                wr_id: recvs + i,
                sgl: Vec::new(),
            });
            b.c.post_recv(b.qp, more.collect()).unwrap();
            recvs += 8;
        }
        received += b.c.poll_cq(b.cq, 64).unwrap().len() as u64;
        if posted < N
            && a.c
                .post_send(a.qp, vec![wr(posted, SendOp::Send, &[], 0)])
                .is_ok()
        {
            posted += 1;
        }
        for w in a.c.poll_cq(a.cq, 64).unwrap() {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            done.push(w.wr_id);
        }
    }
    while received < N {
        assert!(
            std::time::Instant::now() < deadline,
            "{received} of {N} received"
        );
        received += b.c.poll_cq(b.cq, 64).unwrap().len() as u64;
    }
    assert_eq!(done, (0..N).collect::<Vec<_>>());
}

#[test]
fn local_devices_have_distinct_macs_with_or_without_an_interface() {
    let d = daemon("macs", 1);
    let mut admin = Client::connect(d.path()).unwrap();
    for _ in 0..2 {
        admin
            .up(UpRequest {
                netdev: Some("lo".into()),
                backend: Some(softrnic_client::proto::BackendKind::Local),
                netns: None,
            })
            .unwrap();
    }
    let macs: std::collections::BTreeSet<_> = admin
        .devices()
        .unwrap()
        .into_iter()
        .map(|i| i.mac)
        .collect();
    // Same-host frames are delivered by MAC: each device needs its own.
    assert_eq!(macs.len(), 3, "{macs:?}");
}

#[test]
fn taking_a_device_down_closes_the_contexts_using_it() {
    let d = daemon("down", 2);
    let mut a = context(d.path(), "srnic0");
    let mut other = context(d.path(), "srnic1");
    // A context that has the device open may itself take it down: it gets its answer, then
    // loses the connection like every other user of the device.
    a.c.down("srnic0").unwrap();
    let err = a.c.devices().unwrap_err();
    // The device is lost to it, as one removed under rdma-core: EIO.
    assert_eq!(err.errno, libc::EIO, "{err}");
    assert!(a.c.lost());
    // The other device and its context carry on.
    let names: Vec<_> = other
        .c
        .devices()
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert_eq!(names, ["srnic1"]);
    assert!(other.c.poll_cq(other.cq, 1).unwrap().is_empty());
}

#[test]
fn bad_requests_get_errors_and_the_daemon_carries_on() {
    use softrnic_client::proto::{self, Reply, Request};
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    let d = daemon("bad", 1);
    let reply = |s: &mut UnixStream| proto::recv::<Reply>(s).unwrap();
    // Anything before Hello is refused.
    let mut s = UnixStream::connect(d.path()).unwrap();
    proto::send(&mut s, &Request::ListDevices).unwrap();
    assert!(matches!(reply(&mut s), Some(Reply::Error { errno, .. }) if errno == libc::EPROTO));
    proto::send(
        &mut s,
        &Request::Hello {
            version: proto::VERSION,
        },
    )
    .unwrap();
    assert!(matches!(reply(&mut s), Some(Reply::Hello { .. })));
    // A body that decodes to nothing: EINVAL, and the connection stays usable.
    for body in [&[0xff, 0xff, 0xff, 0xff][..], &[7u8; 3][..], &[][..]] {
        let mut msg = (body.len() as u32).to_le_bytes().to_vec();
        msg.extend_from_slice(body);
        s.write_all(&msg).unwrap();
        assert!(matches!(reply(&mut s), Some(Reply::Error { errno, .. }) if errno == libc::EINVAL));
    }
    // Verbs without an open device, and handles that were never made: EINVAL.
    proto::send(&mut s, &Request::DeallocPd(3)).unwrap();
    assert!(matches!(reply(&mut s), Some(Reply::Error { errno, .. }) if errno == libc::EINVAL));
    // A length beyond the limit closes the connection.
    s.write_all(&u32::MAX.to_le_bytes()).unwrap();
    assert!(matches!(reply(&mut s), Some(Reply::Error { errno, .. }) if errno == libc::EINVAL));
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "closed");
    // Others are served all along.
    let mut c = Client::connect(d.path()).unwrap();
    assert_eq!(c.devices().unwrap().len(), 1);
}

#[test]
fn a_context_that_creates_and_destroys_qps_for_ever_keeps_room_for_its_rings() {
    let d = daemon("churn", 1);
    let mut c = Client::connect(d.path()).unwrap();
    c.open("srnic0").unwrap();
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(16).unwrap();
    // Rings of about 60 KiB a QP: 10,000 of them take more than a context's region holds,
    // unless the place of each destroyed QP's rings is given to the next.
    let init = QpInit::new(QpType::Rc, cq, QpCap::new(256, 4, 0));
    for n in 0..10_000 {
        let qp = c
            .create_qp(pd, init)
            .unwrap_or_else(|e| panic!("QP {n}: {e}"));
        c.destroy_qp(qp).unwrap();
    }
}
