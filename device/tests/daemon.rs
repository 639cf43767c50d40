//! The daemon over its socket: contexts on local devices talking RC through it, same-host
//! delivery between devices, isolation between contexts, and cleanup when a program is killed
//! in the middle of a transfer.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use softrnic_device::client::Client;
use softrnic_device::daemon::Running;
use softrnic_device::proto::UpRequest;
use softrnic_emu_core::{
    Access, AddressHandle, AttrMask, Gid, Mtu, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr,
    Remote, SEND_SIGNALED, SendOp, SendWr, Sge, WcOpcode, WcStatus,
};
use softrnic_wire::EthernetAddress;

const ALL: Access = Access(1 | 2 | 4 | 8);
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
    let mut c = Client::connect(path).unwrap();
    c.open(device).unwrap();
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(256).unwrap();
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    };
    let init = QpInit {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: false,
    };
    let qp = c.create_qp(pd, init).unwrap();
    let gid = c.gids().unwrap()[0];
    Ctx { c, pd, cq, qp, gid }
}

/// Takes `qp` to RTS towards `peer_qpn` at `peer_gid`; this side sends from PSN `psn`, the peer
/// from `peer_psn`.
fn connect(c: &mut Client, qp: u32, psn: u32, peer_qpn: u32, peer_psn: u32, peer_gid: Gid) {
    let ah = AddressHandle {
        dgid: peer_gid,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        dmac: EthernetAddress([0; 6]),
    };
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
    use AttrMask as M;
    let steps: [(QpState, &[M]); 3] = [
        (QpState::Init, &[M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS]),
        (
            QpState::Rtr,
            &[
                M::AV,
                M::PATH_MTU,
                M::DEST_QPN,
                M::RQ_PSN,
                M::MAX_DEST_RD_ATOMIC,
                M::MIN_RNR_TIMER,
            ],
        ),
        (
            QpState::Rts,
            &[
                M::TIMEOUT,
                M::RETRY_CNT,
                M::RNR_RETRY,
                M::SQ_PSN,
                M::MAX_QP_RD_ATOMIC,
            ],
        ),
    ];
    for (state, bits) in steps {
        let mask = bits.iter().fold(M::STATE, |m, b| m.or(*b));
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
    connect(&mut a.c, a.qp, 100, b.qp, 200, b.gid);
    connect(&mut b.c, b.qp, 200, a.qp, 100, a.gid);
}

fn wr(wr_id: u64, op: SendOp, buf: &[u8], lkey: u32) -> SendWr {
    let sgl = vec![Sge {
        addr: buf.as_ptr() as u64,
        length: buf.len() as u32,
        lkey,
    }];
    SendWr {
        wr_id,
        op,
        sgl,
        flags: SEND_SIGNALED,
        ud: None,
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
    let ka =
        a.c.reg_mr(a.pd, src.as_ptr() as u64, src.len() as u64, ALL)
            .unwrap();
    let kb =
        b.c.reg_mr(b.pd, dst.as_ptr() as u64, dst.len() as u64, ALL)
            .unwrap();
    let kback =
        a.c.reg_mr(a.pd, back.as_ptr() as u64, back.len() as u64, ALL)
            .unwrap();
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
    let krb = b.c.reg_mr(b.pd, rbuf.as_ptr() as u64, 64, ALL).unwrap();
    let sgl = vec![Sge {
        addr: rbuf.as_ptr() as u64,
        length: 64,
        lkey: krb,
    }];
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
    let einval = |r: Result<(), softrnic_device::client::Error>| r.unwrap_err().errno;
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
    let key = a.c.reg_mr(pd2, secret.as_ptr() as u64, 64, ALL).unwrap();
    pair(&mut a, &mut b);
    let src = vec![1u8; 64];
    let kb = b.c.reg_mr(b.pd, src.as_ptr() as u64, 64, ALL).unwrap();
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
    let Some(path) = std::env::var_os("SOFTRNIC_CHILD_SOCKET") else {
        return;
    };
    let mut me = context(std::path::Path::new(&path), "srnic0");
    println!("QPN {}", me.qp);
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let mut words = line.split_whitespace().skip(1);
    let peer_qpn: u32 = words.next().unwrap().parse().unwrap();
    let rkey: u32 = words.next().unwrap().parse().unwrap();
    let addr: u64 = words.next().unwrap().parse().unwrap();
    let gid = me.gid;
    connect(&mut me.c, me.qp, 300, peer_qpn, 400, gid);
    let src = vec![0xc5u8; 65536];
    let key = me.c.reg_mr(me.pd, src.as_ptr() as u64, 65536, ALL).unwrap();
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
    let rkey =
        me.c.reg_mr(me.pd, target.as_ptr() as u64, 65536, ALL)
            .unwrap();
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
    connect(&mut me.c, me.qp, 400, child_qpn, 300, gid);
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
