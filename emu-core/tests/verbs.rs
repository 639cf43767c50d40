//! Verbs semantics over the in-process loopback: the errno of each refused call, local errors
//! as completions, memory windows, SRQs, CQ events and QP state events.

use std::time::Duration;

use softrnic_emu_core::{
    Access, AttrMask, Event, MwBind, MwType, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr,
    Remote, SendFlags, SendOp, SendWr, Sge, Wc, WcOpcode, WcStatus,
};
use softrnic_link::library::Device;
use softrnic_link::local::Loopback;

const ALL: Access = Access::from_bits_retain(1 | 2 | 4 | 8);
const WAIT: Duration = Duration::from_secs(5);

struct Fixture {
    dev: Device<Loopback>,
    pd: u32,
    cq: u32,
    a: u32,
    b: u32,
}

fn fixture(qp_type: QpType) -> Fixture {
    let mut dev = Device::new(
        Loopback::default(),
        Device::<Loopback>::config(1, [198, 18, 0, 1]),
    );
    let pd = dev.engine().alloc_pd(0).unwrap();
    let cq = dev.engine().create_cq(64).unwrap();
    let a = dev.create_qp(pd, qp_type, cq).unwrap();
    let b = dev.create_qp(pd, qp_type, cq).unwrap();
    let (ea, eb) = (dev.endpoint(a), dev.endpoint(b));
    dev.connect(a, &eb).unwrap();
    dev.connect(b, &ea).unwrap();
    Fixture { dev, pd, cq, a, b }
}

impl Fixture {
    fn buf(&mut self, len: usize, fill: u8, access: Access) -> (u64, u32) {
        let addr = self.dev.alloc(len);
        self.dev.write(addr, &vec![fill; len]);
        let key = self
            .dev
            .engine()
            .reg_mr(self.pd, addr, len as u64, access)
            .unwrap();
        (addr, key)
    }

    fn post(&mut self, qpn: u32, wr_id: u64, op: SendOp, sgl: Vec<Sge>, flags: SendFlags) {
        let wr = SendWr {
            wr_id,
            op,
            sgl,
            flags: flags | SendFlags::SIGNALED,
            ud: None,
            xrc_srqn: None,
        };
        self.dev.engine().post_send(qpn, wr).unwrap();
    }

    fn recv(&mut self, qpn: u32, wr_id: u64, sgl: Vec<Sge>) {
        self.dev
            .engine()
            .post_recv(qpn, RecvWr { wr_id, sgl })
            .unwrap();
    }

    fn wait(&mut self, n: usize) -> Vec<(u64, WcStatus, WcOpcode)> {
        let cq = self.cq;
        let wcs = self.dev.wait(cq, n, WAIT);
        assert_eq!(wcs.len(), n, "completions: {wcs:?}");
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect()
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.dev.engine().poll_event()).collect()
    }
}

fn sge(addr: u64, len: usize, lkey: u32) -> Vec<Sge> {
    vec![Sge {
        addr,
        length: len as u32,
        lkey,
    }]
}

fn errno<T: std::fmt::Debug>(r: softrnic_emu_core::Result<T>) -> i32 {
    r.unwrap_err().errno()
}

#[test]
fn device_and_port_attributes() {
    let mut f = fixture(QpType::Rc);
    let d = f.dev.engine().query_device().clone();
    assert_eq!((d.max_sge, d.max_qp_rd_atom, d.atomic_cap), (32, 128, 1));
    let p = f.dev.engine().query_port().clone();
    assert_eq!(p.active_mtu, softrnic_emu_core::Mtu::M4096);
    assert_eq!(f.dev.engine().gids()[0].to_string(), "::ffff:198.18.0.1");
}

#[test]
fn objects_in_use_cannot_be_destroyed() {
    let mut f = fixture(QpType::Rc);
    let (_, key) = f.buf(8, 0, ALL);
    let e = f.dev.engine();
    assert_eq!(errno(e.dealloc_pd(f.pd)), 16);
    assert_eq!(errno(e.destroy_cq(f.cq)), 16);
    assert_eq!(errno(e.dealloc_pd(99)), 22);
    e.dereg_mr(key).unwrap();
    assert_eq!(errno(e.dereg_mr(key)), 22);
    e.destroy_qp(f.a).unwrap();
    e.destroy_qp(f.b).unwrap();
    e.destroy_cq(f.cq).unwrap();
    e.dealloc_pd(f.pd).unwrap();
}

#[test]
fn bad_work_requests_are_refused_with_rxe_errnos() {
    let mut f = fixture(QpType::Rc);
    let (src, lkey) = f.buf(512, 1, ALL);
    let wr = |op, sgl: Vec<Sge>, flags| SendWr {
        wr_id: 1,
        op,
        sgl,
        flags,
        ud: None,
        xrc_srqn: None,
    };
    let e = f.dev.engine();
    // Too many SGEs (the fixture's QPs have 4).
    let five = vec![
        Sge {
            addr: src,
            length: 1,
            lkey
        };
        5
    ];
    assert_eq!(
        errno(e.post_send(f.a, wr(SendOp::Send, five, SendFlags::empty()))),
        22
    );
    // Atomics need exactly 8 bytes and an aligned address.
    let remote = Remote { addr: 8, rkey: 1 };
    let add = SendOp::FetchAdd { remote, add: 1 };
    assert_eq!(
        errno(e.post_send(f.a, wr(add, sge(src, 4, lkey), SendFlags::empty()))),
        22
    );
    let odd = SendOp::FetchAdd {
        remote: Remote { addr: 12, rkey: 1 },
        add: 1,
    };
    assert_eq!(
        errno(e.post_send(f.a, wr(odd, sge(src, 8, lkey), SendFlags::empty()))),
        22
    );
    // Inline data above max_inline_data (64).
    let big = wr(SendOp::Send, sge(src, 65, lkey), SendFlags::INLINE);
    assert_eq!(errno(e.post_send(f.a, big)), 22);
    // A full send queue is ENOMEM.
    for _ in 0..256 {
        e.post_send(f.a, wr(SendOp::Send, vec![], SendFlags::empty()))
            .unwrap();
    }
    assert_eq!(
        errno(e.post_send(f.a, wr(SendOp::Send, vec![], SendFlags::empty()))),
        12
    );
    // UD QPs carry only SENDs, and need a destination.
    let mut u = fixture(QpType::Ud);
    let w = wr(
        SendOp::Write(Remote { addr: 0, rkey: 0 }),
        vec![],
        SendFlags::empty(),
    );
    assert_eq!(errno(u.dev.engine().post_send(u.a, w)), 22);
    assert_eq!(
        errno(
            u.dev
                .engine()
                .post_send(u.a, wr(SendOp::Send, vec![], SendFlags::empty()))
        ),
        22
    );
}

#[test]
fn posting_before_rts_is_einval() {
    let mut dev = Device::new(
        Loopback::default(),
        Device::<Loopback>::config(1, [198, 18, 0, 1]),
    );
    let pd = dev.engine().alloc_pd(0).unwrap();
    let cq = dev.engine().create_cq(8).unwrap();
    let qp = dev.create_qp(pd, QpType::Rc, cq).unwrap();
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sgl: vec![],
        flags: SendFlags::empty(),
        ud: None,
        xrc_srqn: None,
    };
    assert_eq!(errno(dev.engine().post_send(qp, wr)), 22);
    // Receives may not be posted in RESET either.
    assert_eq!(
        errno(dev.engine().post_recv(
            qp,
            RecvWr {
                wr_id: 1,
                sgl: vec![]
            }
        )),
        22
    );
    // A QP asking for more than the device has is EINVAL.
    let cap = QpCap {
        max_send_wr: 1 << 20,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = QpInit::new(QpType::Rc, cq, cap);
    assert_eq!(errno(dev.engine().create_qp(pd, init)), 22);
}

#[test]
fn a_bad_lkey_is_a_local_protection_error_and_flushes_the_rest() {
    let mut f = fixture(QpType::Rc);
    let (src, lkey) = f.buf(16, 1, ALL);
    f.post(
        f.a,
        1,
        SendOp::Send,
        sge(src, 16, lkey ^ 0x10),
        SendFlags::empty(),
    );
    f.post(f.a, 2, SendOp::Send, sge(src, 16, lkey), SendFlags::empty());
    assert_eq!(
        f.wait(2),
        [
            (1, WcStatus::LocProtErr, WcOpcode::Send),
            (2, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    assert_eq!(f.dev.engine().qp_state(f.a), Some(QpState::Err));
    // The range past the region is a protection error too.
    let mut g = fixture(QpType::Rc);
    let (src, lkey) = g.buf(16, 1, ALL);
    g.post(
        g.a,
        1,
        SendOp::Send,
        sge(src + 1, 16, lkey),
        SendFlags::empty(),
    );
    assert_eq!(g.wait(1), [(1, WcStatus::LocProtErr, WcOpcode::Send)]);
}

#[test]
fn a_receive_too_small_is_a_local_length_error() {
    let mut f = fixture(QpType::Rc);
    let (src, lkey) = f.buf(100, 1, ALL);
    let (dst, dkey) = f.buf(50, 0, ALL);
    f.recv(f.b, 9, sge(dst, 50, dkey));
    f.post(
        f.a,
        1,
        SendOp::Send,
        sge(src, 100, lkey),
        SendFlags::empty(),
    );
    let got = f.wait(2);
    assert!(
        got.contains(&(9, WcStatus::LocLenErr, WcOpcode::Recv)),
        "{got:?}"
    );
    assert!(
        got.contains(&(1, WcStatus::RemInvReqErr, WcOpcode::Send)),
        "{got:?}"
    );
}

#[test]
fn ud_message_longer_than_the_mtu_fails_locally() {
    let mut f = fixture(QpType::Ud);
    let (src, lkey) = f.buf(5000, 1, ALL);
    let ep = f.dev.endpoint(f.b);
    let ud = softrnic_emu_core::UdDest {
        ah: softrnic_emu_core::AddressHandle::to(ep.gid, 0).via(ep.mac),
        remote_qpn: f.b,
        remote_qkey: 0x1111_1111,
    };
    let wr = SendWr {
        wr_id: 3,
        op: SendOp::Send,
        sgl: sge(src, 5000, lkey),
        flags: SendFlags::SIGNALED,
        ud: Some(ud),
        xrc_srqn: None,
    };
    f.dev.engine().post_send(f.a, wr).unwrap();
    assert_eq!(f.wait(1), [(3, WcStatus::LocLenErr, WcOpcode::Send)]);
}

#[test]
fn memory_window_type2_bind_use_and_invalidate() {
    let mut f = fixture(QpType::Rc);
    let (src, lkey) = f.buf(64, 7, ALL);
    let (region, rkey) = f.buf(256, 0, ALL.union(Access::MW_BIND));
    let mw = f.dev.engine().alloc_mw(f.pd, MwType::Type2).unwrap();
    // The window covers bytes 64..128 of the region, for remote writes; bound on QP b, which
    // is the QP the peer's requests arrive on.
    let bind = MwBind {
        mw_rkey: mw,
        new_key: 0x5c,
        mr_lkey: rkey,
        addr: region + 64,
        len: 64,
        access: Access::REMOTE_WRITE,
    };
    f.post(f.b, 1, SendOp::BindMw(bind), vec![], SendFlags::empty());
    assert_eq!(f.wait(1), [(1, WcStatus::Success, WcOpcode::BindMw)]);
    let window = (mw & !0xff) | 0x5c;
    f.post(
        f.a,
        2,
        SendOp::Write(Remote {
            addr: region + 64,
            rkey: window,
        }),
        sge(src, 64, lkey),
        SendFlags::empty(),
    );
    assert_eq!(f.wait(1), [(2, WcStatus::Success, WcOpcode::RdmaWrite)]);
    assert_eq!(f.dev.read(region + 64, 64), vec![7; 64]);
    assert_eq!(f.dev.read(region, 64), vec![0; 64]);
    // SEND with Invalidate on the window: afterwards its key no longer works.
    let (rbuf, rkey2) = f.buf(8, 0, ALL);
    f.recv(f.b, 3, sge(rbuf, 8, rkey2));
    f.post(
        f.a,
        4,
        SendOp::SendWithInv(window),
        sge(src, 8, lkey),
        SendFlags::empty(),
    );
    let got = f.wait(2);
    assert!(
        got.contains(&(3, WcStatus::Success, WcOpcode::Recv)),
        "{got:?}"
    );
    f.post(
        f.a,
        5,
        SendOp::Write(Remote {
            addr: region + 64,
            rkey: window,
        }),
        sge(src, 8, lkey),
        SendFlags::empty(),
    );
    assert_eq!(
        f.wait(1),
        [(5, WcStatus::RemAccessErr, WcOpcode::RdmaWrite)]
    );
}

#[test]
fn memory_window_outside_its_range_is_a_remote_access_error() {
    let mut f = fixture(QpType::Rc);
    let (src, lkey) = f.buf(64, 7, ALL);
    let (region, rkey) = f.buf(256, 0, ALL.union(Access::MW_BIND));
    let mw = f.dev.engine().alloc_mw(f.pd, MwType::Type1).unwrap();
    let bind = MwBind {
        mw_rkey: mw,
        new_key: 0x11,
        mr_lkey: rkey,
        addr: region,
        len: 32,
        access: Access::REMOTE_WRITE,
    };
    f.post(f.b, 1, SendOp::BindMw(bind), vec![], SendFlags::empty());
    assert_eq!(f.wait(1), [(1, WcStatus::Success, WcOpcode::BindMw)]);
    let window = (mw & !0xff) | 0x11;
    f.post(
        f.a,
        2,
        SendOp::Write(Remote {
            addr: region + 16,
            rkey: window,
        }),
        sge(src, 32, lkey),
        SendFlags::empty(),
    );
    assert_eq!(
        f.wait(1),
        [(2, WcStatus::RemAccessErr, WcOpcode::RdmaWrite)]
    );
    assert_eq!(f.dev.read(region, 32), vec![0; 32]);
}

#[test]
fn local_invalidate_stops_a_region() {
    let mut f = fixture(QpType::Rc);
    let (src, lkey) = f.buf(8, 7, ALL);
    let (dst, rkey) = f.buf(8, 0, ALL);
    f.post(f.b, 1, SendOp::LocalInv(rkey), vec![], SendFlags::empty());
    assert_eq!(f.wait(1), [(1, WcStatus::Success, WcOpcode::LocalInv)]);
    f.post(
        f.a,
        2,
        SendOp::Write(Remote { addr: dst, rkey }),
        sge(src, 8, lkey),
        SendFlags::empty(),
    );
    assert_eq!(
        f.wait(1),
        [(2, WcStatus::RemAccessErr, WcOpcode::RdmaWrite)]
    );
}

#[test]
fn srq_feeds_two_qps_and_fires_its_limit() {
    let mut dev = Device::new(
        Loopback::default(),
        Device::<Loopback>::config(1, [198, 18, 0, 1]),
    );
    let e = dev.engine();
    let pd = e.alloc_pd(0).unwrap();
    let cq = e.create_cq(64).unwrap();
    let srq = e.create_srq(pd, 8, 1).unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = |srq| QpInit {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq,
        cap,
        sq_sig_all: true,
        block_self_mcast_lb: false,
    };
    let (s1, s2) = (
        e.create_qp(pd, init(None)).unwrap(),
        e.create_qp(pd, init(None)).unwrap(),
    );
    let (r1, r2) = (
        e.create_qp(pd, init(Some(srq))).unwrap(),
        e.create_qp(pd, init(Some(srq))).unwrap(),
    );
    for (s, r) in [(s1, r1), (s2, r2)] {
        let (es, er) = (dev.endpoint(s), dev.endpoint(r));
        dev.connect(s, &er).unwrap();
        dev.connect(r, &es).unwrap();
    }
    let buf = dev.alloc(64);
    let key = dev.engine().reg_mr(pd, buf, 64, ALL).unwrap();
    for i in 0..4 {
        let wr = RecvWr {
            wr_id: 100 + i,
            sgl: sge(buf + 16 * i, 16, key),
        };
        dev.engine().post_srq_recv(srq, wr).unwrap();
    }
    // Posting on a QP that uses an SRQ is EINVAL.
    assert_eq!(
        errno(dev.engine().post_recv(
            r1,
            RecvWr {
                wr_id: 0,
                sgl: vec![]
            }
        )),
        22
    );
    dev.engine().modify_srq_limit(srq, 3).unwrap();
    for (i, s) in [s1, s2, s1].into_iter().enumerate() {
        let wr = SendWr {
            wr_id: i as u64,
            op: SendOp::Send,
            sgl: vec![],
            flags: SendFlags::empty(),
            ud: None,
            xrc_srqn: None,
        };
        dev.engine().post_send(s, wr).unwrap();
    }
    let wcs = dev.wait(cq, 6, WAIT);
    let recvs: Vec<(u64, u32)> = wcs
        .iter()
        .filter(|w| w.opcode == WcOpcode::Recv)
        .map(|w| (w.wr_id, w.qp_num))
        .collect();
    assert_eq!(recvs.len(), 3);
    assert_eq!(
        recvs.iter().map(|r| r.0).collect::<Vec<_>>(),
        [100, 101, 102]
    );
    assert!(recvs.iter().any(|r| r.1 == r1) && recvs.iter().any(|r| r.1 == r2));
    let events: Vec<Event> = std::iter::from_fn(|| dev.engine().poll_event()).collect();
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::SrqLimitReached { .. }))
            .count(),
        1,
        "{events:?}"
    );
    assert_eq!(errno(dev.engine().destroy_srq(srq)), 16);
}

#[test]
fn cq_overflow_is_an_async_error() {
    let mut dev = Device::new(
        Loopback::default(),
        Device::<Loopback>::config(1, [198, 18, 0, 1]),
    );
    let pd = dev.engine().alloc_pd(0).unwrap();
    let cq = dev.engine().create_cq(2).unwrap();
    let a = dev.create_qp(pd, QpType::Rc, cq).unwrap();
    let b = dev.create_qp(pd, QpType::Rc, cq).unwrap();
    let (ea, eb) = (dev.endpoint(a), dev.endpoint(b));
    dev.connect(a, &eb).unwrap();
    dev.connect(b, &ea).unwrap();
    let addr = dev.alloc(8);
    let rkey = dev.engine().reg_mr(pd, addr, 8, ALL).unwrap();
    for i in 0..3 {
        let op = SendOp::Write(Remote { addr, rkey });
        let wr = SendWr {
            wr_id: i,
            op,
            sgl: vec![],
            flags: SendFlags::SIGNALED,
            ud: None,
            xrc_srqn: None,
        };
        dev.engine().post_send(a, wr).unwrap();
    }
    while dev.progress() {}
    let events: Vec<Event> = std::iter::from_fn(|| dev.engine().poll_event()).collect();
    assert!(events.contains(&Event::CqError { cq }), "{events:?}");
    let mut out = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 4];
    assert_eq!(dev.engine().poll_cq(cq, &mut out).unwrap(), 2);
}

#[test]
fn solicited_events_and_comm_established() {
    let mut f = fixture(QpType::Rc);
    f.events();
    let (src, lkey) = f.buf(8, 1, ALL);
    let (dst, dkey) = f.buf(16, 0, ALL);
    f.recv(f.b, 10, sge(dst, 8, dkey));
    f.recv(f.b, 11, sge(dst + 8, 8, dkey));
    f.dev.engine().req_notify_cq(f.cq, true).unwrap();
    f.post(f.a, 1, SendOp::Send, sge(src, 8, lkey), SendFlags::empty());
    f.wait(2);
    // Neither the unsolicited receive nor the send completion notified.
    assert_eq!(f.events(), []);
    f.post(
        f.a,
        2,
        SendOp::Send,
        sge(src, 8, lkey),
        SendFlags::SOLICITED,
    );
    f.wait(2);
    assert_eq!(f.events(), [Event::Completion { cq: f.cq }]);

    // A QP left in RTR reports COMM_EST on its first packet.
    let mut dev = Device::new(
        Loopback::default(),
        Device::<Loopback>::config(1, [198, 18, 0, 1]),
    );
    let pd = dev.engine().alloc_pd(0).unwrap();
    let cq = dev.engine().create_cq(8).unwrap();
    let a = dev.create_qp(pd, QpType::Rc, cq).unwrap();
    let b = dev.create_qp(pd, QpType::Rc, cq).unwrap();
    let (ea, eb) = (dev.endpoint(a), dev.endpoint(b));
    dev.connect(a, &eb).unwrap();
    let ah = softrnic_emu_core::AddressHandle::to(ea.gid, 0).via(ea.mac);
    let init = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: ALL,
        ..QpAttr::default()
    };
    let m = AttrMask::STATE
        .union(AttrMask::PKEY_INDEX)
        .union(AttrMask::PORT)
        .union(AttrMask::ACCESS_FLAGS);
    dev.engine().modify_qp(b, &init, m).unwrap();
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah: Some(ah),
        dest_qp_num: a,
        rq_psn: ea.psn,
        ..QpAttr::default()
    };
    let m = [
        AttrMask::AV,
        AttrMask::PATH_MTU,
        AttrMask::DEST_QPN,
        AttrMask::RQ_PSN,
        AttrMask::MAX_DEST_RD_ATOMIC,
        AttrMask::MIN_RNR_TIMER,
    ]
    .into_iter()
    .fold(AttrMask::STATE, AttrMask::union);
    dev.engine().modify_qp(b, &rtr, m).unwrap();
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Write(Remote { addr: 0, rkey: 0 }),
        sgl: vec![],
        flags: SendFlags::SIGNALED,
        ud: None,
        xrc_srqn: None,
    };
    dev.engine().post_send(a, wr).unwrap();
    assert_eq!(dev.wait(cq, 1, WAIT)[0].status, WcStatus::Success);
    let events: Vec<Event> = std::iter::from_fn(|| dev.engine().poll_event()).collect();
    assert_eq!(events, [Event::CommEstablished { qpn: b }]);
}

#[test]
fn sqd_stops_new_work_and_reports_drained() {
    let mut f = fixture(QpType::Rc);
    let (src, lkey) = f.buf(8, 1, ALL);
    let (dst, rkey) = f.buf(8, 0, ALL);
    let sqd = QpAttr {
        qp_state: QpState::Sqd,
        en_sqd_async_notify: true,
        ..QpAttr::default()
    };
    f.dev
        .engine()
        .modify_qp(
            f.a,
            &sqd,
            AttrMask::STATE.union(AttrMask::EN_SQD_ASYNC_NOTIFY),
        )
        .unwrap();
    assert_eq!(f.events(), [Event::SqDrained { qpn: f.a }]);
    f.post(
        f.a,
        1,
        SendOp::Write(Remote { addr: dst, rkey }),
        sge(src, 8, lkey),
        SendFlags::empty(),
    );
    while f.dev.progress() {}
    let mut out = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 1];
    assert_eq!(
        f.dev.engine().poll_cq(f.cq, &mut out).unwrap(),
        0,
        "nothing starts in SQD"
    );
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    f.dev
        .engine()
        .modify_qp(f.a, &rts, AttrMask::STATE)
        .unwrap();
    assert_eq!(f.wait(1), [(1, WcStatus::Success, WcOpcode::RdmaWrite)]);
    assert_eq!(f.dev.read(dst, 8), vec![1; 8]);
}

#[test]
fn inline_data_is_taken_at_post_time() {
    let mut f = fixture(QpType::Rc);
    let (src, lkey) = f.buf(8, 3, ALL);
    let (dst, rkey) = f.buf(8, 0, ALL);
    f.post(
        f.a,
        1,
        SendOp::Write(Remote { addr: dst, rkey }),
        sge(src, 8, lkey),
        SendFlags::INLINE,
    );
    // Changing the buffer after the post has no effect on what is sent.
    f.dev.write(src, &[9; 8]);
    assert_eq!(f.wait(1), [(1, WcStatus::Success, WcOpcode::RdmaWrite)]);
    assert_eq!(f.dev.read(dst, 8), vec![3; 8]);
}

#[test]
fn ipv6_gids_carry_rc_and_ud_with_the_ipv6_header_as_grh() {
    let mut config = Device::<Loopback>::config(1, [198, 18, 0, 1]);
    let v6: std::net::Ipv6Addr = "2001:2::1".parse().unwrap();
    config.gids = vec![softrnic_emu_core::Gid::from(v6)];
    let mut dev = Device::new(Loopback::default(), config);
    let pd = dev.engine().alloc_pd(0).unwrap();
    let cq = dev.engine().create_cq(16).unwrap();
    let mut f = Fixture {
        pd,
        cq,
        a: 0,
        b: 0,
        dev,
    };
    for qp_type in [QpType::Rc, QpType::Ud] {
        let a = f.dev.create_qp(pd, qp_type, cq).unwrap();
        let b = f.dev.create_qp(pd, qp_type, cq).unwrap();
        let (ea, eb) = (f.dev.endpoint(a), f.dev.endpoint(b));
        f.dev.connect(a, &eb).unwrap();
        f.dev.connect(b, &ea).unwrap();
        let (src, lkey) = f.buf(16, 0x66, ALL);
        let (dst, dkey) = f.buf(56, 0, ALL);
        f.recv(b, 1, sge(dst, 56, dkey));
        let ud = (qp_type == QpType::Ud).then_some(softrnic_emu_core::UdDest {
            ah: softrnic_emu_core::AddressHandle::to(eb.gid, 0).via(eb.mac),
            remote_qpn: b,
            remote_qkey: 0x1111_1111,
        });
        let wr = SendWr {
            wr_id: 2,
            op: SendOp::Send,
            sgl: sge(src, 16, lkey),
            flags: SendFlags::SIGNALED,
            ud,
            xrc_srqn: None,
        };
        f.dev.engine().post_send(a, wr).unwrap();
        let got = f.wait(2);
        assert!(
            got.contains(&(2, WcStatus::Success, WcOpcode::Send)),
            "{got:?}"
        );
        assert!(
            got.contains(&(1, WcStatus::Success, WcOpcode::Recv)),
            "{got:?}"
        );
        if qp_type == QpType::Ud {
            let grh = f.dev.read(dst, 40);
            assert_eq!(grh[0] >> 4, 6, "an IPv6 header");
            assert_eq!(&grh[8..24], &v6.octets(), "source address");
            assert_eq!(f.dev.read(dst + 40, 16), vec![0x66; 16]);
        } else {
            assert_eq!(f.dev.read(dst, 16), vec![0x66; 16]);
        }
    }
}

#[test]
fn faulty_loopback_loses_and_reorders_but_rc_recovers() {
    use softrnic_link::faults::{Faults, Faulty};
    let faults = Faults {
        loss: 0.05,
        duplicate: 0.02,
        reorder: 0.05,
        corrupt: 0.0,
    };
    let link = Faulty::new(Loopback::default(), 3, faults);
    let mut dev = Device::new(link, Device::<Loopback>::config(1, [198, 18, 0, 1]));
    let pd = dev.engine().alloc_pd(0).unwrap();
    let cq = dev.engine().create_cq(64).unwrap();
    // A short ACK timeout (1 ms), so the test does not wait 67 ms per loss.
    dev.set_ack_timeout(8);
    let a = dev.create_qp(pd, QpType::Rc, cq).unwrap();
    let b = dev.create_qp(pd, QpType::Rc, cq).unwrap();
    let (ea, eb) = (dev.endpoint(a), dev.endpoint(b));
    dev.connect(a, &eb).unwrap();
    dev.connect(b, &ea).unwrap();
    let len = 200_000;
    let src = dev.alloc(len);
    let dst = dev.alloc(len);
    let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
    dev.write(src, &data);
    let lkey = dev.engine().reg_mr(pd, src, len as u64, ALL).unwrap();
    let rkey = dev.engine().reg_mr(pd, dst, len as u64, ALL).unwrap();
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Write(Remote { addr: dst, rkey }),
        sgl: sge(src, len, lkey),
        flags: SendFlags::SIGNALED,
        ud: None,
        xrc_srqn: None,
    };
    dev.engine().post_send(a, wr).unwrap();
    let wcs = dev.wait(cq, 1, WAIT);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(dev.read(dst, len), data);
    assert!(dev.engine().counters().retransmitted_pkts > 0);
}

#[test]
fn regions_and_windows_stop_at_the_device_limits() {
    let mut config = Device::<Loopback>::config(1, [198, 18, 0, 1]);
    config.device.max_mr = 3;
    config.device.max_mw = 2;
    let mut dev = Device::new(Loopback::default(), config);
    let e = dev.engine();
    let pd = e.alloc_pd(0).unwrap();
    let addr = e.memory_mut().alloc(64);
    // Windows do not count against regions, nor regions against windows.
    let mws: Vec<u32> = (0..2)
        .map(|_| e.alloc_mw(pd, MwType::Type2).unwrap())
        .collect();
    assert_eq!(errno(e.alloc_mw(pd, MwType::Type2)), 12, "ENOMEM");
    let mrs: Vec<u32> = (0..3)
        .map(|_| e.reg_mr(pd, addr, 64, ALL).unwrap())
        .collect();
    assert_eq!(errno(e.reg_mr(pd, addr, 64, ALL)), 12, "ENOMEM");
    // Freeing one makes room for one.
    e.dereg_mr(mrs[0]).unwrap();
    e.dealloc_mw(mws[0]).unwrap();
    e.reg_mr(pd, addr, 64, ALL).unwrap();
    e.alloc_mw(pd, MwType::Type2).unwrap();
    assert_eq!(errno(e.reg_mr(pd, addr, 64, ALL)), 12, "ENOMEM");
}

#[test]
fn a_new_gid_table_moves_the_source_address_of_connected_qps() {
    let mut f = fixture(QpType::Rc);
    let (src, lkey) = f.buf(8, 1, ALL);
    let (dst, rkey) = f.buf(8, 0, ALL);
    let moved: softrnic_emu_core::Gid = std::net::Ipv4Addr::new(198, 18, 0, 9).into();
    f.dev.engine().set_gids(vec![moved]);
    f.post(
        f.a,
        1,
        SendOp::Write(Remote { addr: dst, rkey }),
        sge(src, 8, lkey),
        SendFlags::empty(),
    );
    let mut frame = vec![0; softrnic_emu_core::MAX_FRAME];
    let now = softrnic_emu_core::Instant::from_nanos(0);
    let n = f.dev.engine().poll_transmit(now, &mut frame).unwrap();
    let parsed = softrnic_wire::frame::parse(&frame[..n]).unwrap();
    let (from, _) = parsed.repr.ip.addrs();
    assert_eq!(from.to_string(), "198.18.0.9");
}

#[test]
fn an_atomic_write_lands_and_a_flush_completes_or_is_refused_by_its_access() {
    let mut f = fixture(QpType::Rc);
    let (dst, rkey) = f.buf(16, 0, ALL | Access::FLUSH_GLOBAL);
    // The responder's QP grants global flushes (IBA 1.5: QP and region alike).
    let rts = QpAttr {
        qp_state: QpState::Rts,
        qp_access_flags: ALL | Access::FLUSH_GLOBAL | Access::FLUSH_PERSISTENT,
        ..QpAttr::default()
    };
    let mask = AttrMask::STATE | AttrMask::ACCESS_FLAGS;
    f.dev.engine().modify_qp(f.b, &rts, mask).unwrap();
    let remote = |addr| Remote { addr, rkey };
    let (none, fence) = (SendFlags::empty(), SendFlags::FENCE);
    let value = *b"atomic!!";
    f.post(
        f.a,
        1,
        SendOp::AtomicWrite {
            remote: remote(dst + 8),
            value,
        },
        vec![],
        none,
    );
    let flush = |placement, level| SendOp::Flush {
        remote: remote(dst),
        len: 16,
        placement,
        level,
    };
    f.post(f.a, 2, flush(1, 0), vec![], fence);
    f.post(f.a, 3, flush(1, 1), vec![], none);
    assert_eq!(
        f.wait(3),
        [
            (1, WcStatus::Success, WcOpcode::AtomicWrite),
            (2, WcStatus::Success, WcOpcode::Flush),
            (3, WcStatus::Success, WcOpcode::Flush),
        ]
    );
    assert_eq!(f.dev.read(dst, 16), b"\0\0\0\0\0\0\0\0atomic!!");
    // The region cannot grant persistence: ordinary memory is never persistent.
    f.post(f.a, 4, flush(2, 0), vec![], none);
    assert_eq!(f.wait(1), [(4, WcStatus::RemAccessErr, WcOpcode::Flush)]);
    let persistent = ALL | Access::FLUSH_PERSISTENT;
    assert_eq!(errno(f.dev.engine().reg_mr(f.pd, dst, 16, persistent)), 22);
}

#[test]
fn atomic_writes_and_flushes_are_rc_only() {
    let mut f = fixture(QpType::Uc);
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::AtomicWrite {
            remote: Remote { addr: 0, rkey: 0 },
            value: [0; 8],
        },
        sgl: vec![],
        flags: SendFlags::SIGNALED,
        ud: None,
        xrc_srqn: None,
    };
    assert_eq!(errno(f.dev.engine().post_send(f.a, wr)), 22);
}

/// XRC (IBA Annex A14): an initiator QP sends to a target QP, each request into the SRQ its
/// work request names; the SRQ's PD checks R_Keys and its CQ gets the completions.
#[test]
fn xrc_requests_land_in_the_srq_they_name() {
    let mut f = fixture(QpType::Rc);
    let e = f.dev.engine();
    let xrcd = e.alloc_xrcd().unwrap();
    let srq_cq = e.create_cq(16).unwrap();
    let srq = e.create_xrc_srq(f.pd, xrcd, srq_cq, 8, 1).unwrap();
    let other = e.create_srq(f.pd, 8, 1).unwrap();
    let tgt = e.create_xrc_recv_qp(xrcd).unwrap();
    let init = QpInit::new(QpType::XrcSend, f.cq, QpCap::new(8, 1, 0));
    assert_eq!(
        errno(e.create_qp(f.pd, init)),
        22,
        "an initiator has no receive queue"
    );
    let ini = e
        .create_qp(
            f.pd,
            QpInit {
                cap: QpCap {
                    max_recv_wr: 0,
                    ..init.cap
                },
                ..init
            },
        )
        .unwrap();
    assert_eq!(errno(e.dealloc_xrcd(xrcd)), 16);
    let (ei, et) = (f.dev.endpoint(ini), f.dev.endpoint(tgt));
    f.dev.connect(ini, &et).unwrap();
    f.dev.connect(tgt, &ei).unwrap();

    let (src, lkey) = f.buf(64, 7, ALL);
    let (dst, rkey) = f.buf(64, 0, ALL);
    f.dev
        .engine()
        .post_srq_recv(
            srq,
            RecvWr {
                wr_id: 9,
                sgl: sge(dst, 64, rkey),
            },
        )
        .unwrap();
    let post = |f: &mut Fixture, wr_id, op, srqn| {
        let wr = SendWr {
            wr_id,
            op,
            sgl: sge(src, 16, lkey),
            flags: SendFlags::SIGNALED,
            ud: None,
            xrc_srqn: Some(srqn),
        };
        f.dev.engine().post_send(ini, wr).unwrap();
    };
    post(&mut f, 1, SendOp::SendWithImm(0x1234), srq);
    post(
        &mut f,
        2,
        SendOp::Write(Remote {
            addr: dst + 32,
            rkey,
        }),
        srq,
    );
    assert_eq!(
        f.wait(2),
        [
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::RdmaWrite)
        ]
    );
    let got = f.dev.wait(srq_cq, 1, WAIT);
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].qp_num),
        (9, WcStatus::Success, tgt)
    );
    assert_eq!((got[0].byte_len, got[0].imm_data), (16, 0x1234));
    assert_eq!(f.dev.read(dst, 16), [7; 16]);
    assert_eq!(f.dev.read(dst + 32, 16), [7; 16]);
    // An SRQ outside the target's domain is an invalid request.
    post(&mut f, 3, SendOp::Send, other);
    assert_eq!(f.wait(1), [(3, WcStatus::RemInvReqErr, WcOpcode::Send)]);
    let wr = SendWr {
        wr_id: 4,
        op: SendOp::Send,
        sgl: vec![],
        flags: SendFlags::SIGNALED,
        ud: None,
        xrc_srqn: None,
    };
    assert_eq!(errno(f.dev.engine().post_send(ini, wr)), 22, "no SRQ named");
}

/// What an XRC SRQ and target QP hold: the SRQ its CQ and domain; a target QP its domain only,
/// not the PD, CQ or SRQ its last request borrowed.
#[test]
fn xrc_objects_hold_what_they_belong_to() {
    let mut f = fixture(QpType::Rc);
    let e = f.dev.engine();
    let xrcd = e.alloc_xrcd().unwrap();
    let pd = e.alloc_pd(0).unwrap();
    let cq = e.create_cq(4).unwrap();
    let srq = e.create_xrc_srq(pd, xrcd, cq, 4, 1).unwrap();
    let tgt = e.create_xrc_recv_qp(xrcd).unwrap();
    assert_eq!(errno(e.destroy_cq(cq)), 16, "the SRQ completes to it");
    assert_eq!(errno(e.dealloc_xrcd(xrcd)), 16);
    e.destroy_srq(srq).unwrap();
    e.destroy_cq(cq).unwrap();
    e.dealloc_pd(pd).unwrap();
    assert_eq!(errno(e.dealloc_xrcd(xrcd)), 16, "the target QP is in it");
    e.destroy_qp(tgt).unwrap();
    e.dealloc_xrcd(xrcd).unwrap();
    assert_eq!(errno(e.create_xrc_recv_qp(xrcd)), 22);
}

#[test]
fn the_cqs_given_completions_are_listed_once_until_taken() {
    let mut f = fixture(QpType::Rc);
    let (src, lkey) = f.buf(8, 1, ALL);
    let (dst, rkey) = f.buf(8, 0, ALL);
    let mut filled = Vec::new();
    f.dev.engine().take_filled_cqs(&mut filled);
    assert_eq!(filled, [], "connecting completes nothing");
    let write = SendOp::Write(Remote { addr: dst, rkey });
    for wr_id in [1, 2] {
        f.post(f.a, wr_id, write, sge(src, 8, lkey), SendFlags::empty());
    }
    while f.dev.engine().cq_len(f.cq).unwrap() < 2 {
        f.dev.progress();
    }
    f.dev.engine().take_filled_cqs(&mut filled);
    assert_eq!(filled, [f.cq], "two completions, one listing");
    filled.clear();
    f.dev.engine().take_filled_cqs(&mut filled);
    assert_eq!(filled, [], "nothing new since");
    // Completions still waiting are the taker's to keep in mind; a new one lists it again.
    f.post(f.a, 3, write, sge(src, 8, lkey), SendFlags::empty());
    assert_eq!(f.wait(3).len(), 3);
    f.dev.engine().take_filled_cqs(&mut filled);
    assert_eq!(filled, [f.cq]);
}

#[test]
fn the_sge_lists_of_wrs_done_with_are_given_back_for_reuse() {
    let mut f = fixture(QpType::Rc);
    let (src, lkey) = f.buf(8, 1, ALL);
    let (dst, rkey) = f.buf(8, 0, ALL);
    let rbuf = f.buf(8, 0, ALL);
    let mut sgl = sge(src, 8, lkey);
    sgl.reserve_exact(2);
    let capacity = sgl.capacity();
    let write = SendOp::Write(Remote { addr: dst, rkey });
    f.post(f.a, 1, write, sgl, SendFlags::empty());
    f.recv(f.b, 2, sge(rbuf.0, 8, rbuf.1));
    f.post(f.a, 3, SendOp::Send, sge(src, 8, lkey), SendFlags::empty());
    assert_eq!(f.wait(3).len(), 3);
    let mut spare = Vec::new();
    f.dev.engine().take_spare_sgls(&mut spare);
    assert_eq!(spare.len(), 3, "two sends and a receive");
    assert!(spare.iter().all(Vec::is_empty));
    assert!(spare.iter().any(|s| s.capacity() == capacity));
    spare.clear();
    f.dev.engine().take_spare_sgls(&mut spare);
    assert!(spare.is_empty(), "each given once");
}

#[test]
fn a_path_from_an_empty_gid_entry_is_enodata() {
    let mut dev = Device::new(
        Loopback::default(),
        Device::<Loopback>::config(1, [198, 18, 0, 1]),
    );
    let pd = dev.engine().alloc_pd(0).unwrap();
    let cq = dev.engine().create_cq(8).unwrap();
    let a = dev.create_qp(pd, QpType::Rc, cq).unwrap();
    let b = dev.create_qp(pd, QpType::Rc, cq).unwrap();
    let ea = dev.endpoint(a);
    let init = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: ALL,
        ..QpAttr::default()
    };
    let m = [AttrMask::PKEY_INDEX, AttrMask::PORT, AttrMask::ACCESS_FLAGS]
        .into_iter()
        .fold(AttrMask::STATE, AttrMask::union);
    dev.engine().modify_qp(b, &init, m).unwrap();
    let rtr = |sgid_index| QpAttr {
        qp_state: QpState::Rtr,
        ah: Some(softrnic_emu_core::AddressHandle::to(ea.gid, sgid_index)),
        dest_qp_num: a,
        ..QpAttr::default()
    };
    let m = [
        AttrMask::AV,
        AttrMask::PATH_MTU,
        AttrMask::DEST_QPN,
        AttrMask::RQ_PSN,
        AttrMask::MAX_DEST_RD_ATOMIC,
        AttrMask::MIN_RNR_TIMER,
    ]
    .into_iter()
    .fold(AttrMask::STATE, AttrMask::union);
    // The kernel's rdma_get_gid_attr: an index inside the table with no GID is ENODATA (61).
    assert_eq!(errno(dev.engine().modify_qp(b, &rtr(40), m)), 61);
    dev.engine().modify_qp(b, &rtr(0), m).unwrap();
}
