//! rdma_cm through the daemon, driven as librdmacm drives the kernel's: event channels, ids
//! bound, resolved and listening, connections made and torn down with the CM on QP1, the QP
//! moved through its states with the attributes `rdma_init_qp_attr` gives, and data sent over
//! the connection. Refusals, SIDR for UD, and a program that goes away with a connection open.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use softrnic_client::client::Client;
use softrnic_client::proto::{CmEvent, CmOption, ConnParam, Request, UpRequest, cm_event};
use softrnic_daemon::Running;
use softrnic_emu_core::{
    Access, QpCap, QpInit, QpState, QpType, RecvWr, SendFlags, SendOp, SendWr, Sge, WcStatus,
};
use softrnic_sys as sys;
use softrnic_wire::cm::port_space;

const SERVER: &str = "198.19.255.1";

fn daemon(tag: &str) -> Running {
    let path: PathBuf =
        std::env::temp_dir().join(format!("softrnic-cm-{}-{tag}.sock", std::process::id()));
    let running = Running::start(&path).expect("start the daemon");
    let mut admin = Client::connect(running.path()).unwrap();
    admin
        .up(UpRequest {
            netdev: None,
            backend: None,
            netns: None,
        })
        .unwrap();
    running
}

fn addr(port: u16) -> SocketAddr {
    format!("{SERVER}:{port}").parse().unwrap()
}

/// An event channel.
struct Channel {
    c: Client,
    fd: OwnedFd,
}

impl Channel {
    fn open(path: &Path) -> Channel {
        let mut c = Client::connect(path).unwrap();
        let fd = c.cm_open().unwrap();
        Channel { c, fd }
    }

    /// The next event, as `rdma_get_cm_event` waits for it. The wait is a generous bound,
    /// not a timing: every event here follows from messages already sent.
    fn event(&mut self) -> CmEvent {
        let ready = sys::poll_readable(&[self.fd.as_raw_fd()], 30_000).unwrap();
        assert!(ready > 0, "no event");
        assert!(sys::take_notification(self.fd.as_raw_fd()).unwrap());
        self.c.cm_event().unwrap()
    }

    fn expect(&mut self, kind: u32) -> CmEvent {
        let e = self.event();
        assert_eq!(e.event, kind, "{e:?}");
        e
    }
}

/// A device context with a PD, a CQ and one QP of type `t`, as the program's own verbs.
struct Verbs {
    c: Client,
    pd: u32,
    cq: u32,
    qp: u32,
}

fn verbs(path: &Path, t: QpType) -> Verbs {
    let mut c = Client::connect(path).unwrap();
    c.open("srnic0").unwrap();
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(64).unwrap();
    let qp = c
        .create_qp(pd, QpInit::new(t, cq, QpCap::new(16, 1, 0)))
        .unwrap();
    Verbs { c, pd, cq, qp }
}

/// Moves the QP to `states` with the attributes rdma_cm gives, as librdmacm does.
fn ready(ch: &mut Channel, v: &mut Verbs, id: u32, states: &[QpState]) {
    for &s in states {
        let (attr, mask) = ch.c.cm_init_qp_attr(id, s).unwrap();
        v.c.modify_qp(v.qp, attr, mask).unwrap();
    }
}

fn param(qp: u32, data: &[u8]) -> ConnParam {
    ConnParam {
        private_data: data.to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        qp_num: qp,
        ..ConnParam::default()
    }
}

/// An id on `ch` resolved to `to`, with its QP in INIT.
fn resolved(ch: &mut Channel, v: &mut Verbs, to: SocketAddr, ps: u16, t: QpType) -> u32 {
    let id = ch.c.cm_create_id(ps, t).unwrap();
    ch.c.cm(Request::CmResolveAddr {
        id,
        src: None,
        dst: to,
        timeout_ms: 2000,
    })
    .unwrap();
    ch.expect(cm_event::ADDR_RESOLVED);
    ch.c.cm(Request::CmResolveRoute(id)).unwrap();
    ch.expect(cm_event::ROUTE_RESOLVED);
    ready(ch, v, id, &[QpState::Init]);
    id
}

fn listener(ch: &mut Channel, port: u16, ps: u16, t: QpType) -> u32 {
    let id = ch.c.cm_create_id(ps, t).unwrap();
    ch.c.cm(Request::CmBind {
        id,
        addr: addr(port),
    })
    .unwrap();
    ch.c.cm(Request::CmListen { id, backlog: 4 }).unwrap();
    id
}

/// A connected pair: (client channel, its id, its verbs), (server channel, its id, verbs).
struct Connected {
    client: (Channel, u32, Verbs),
    server: (Channel, u32, Verbs),
    listen: u32,
}

fn connected(path: &Path, port: u16) -> Connected {
    let mut sch = Channel::open(path);
    let listen = listener(&mut sch, port, port_space::TCP, QpType::Rc);
    let mut cch = Channel::open(path);
    let mut cv = verbs(path, QpType::Rc);
    let cid = resolved(&mut cch, &mut cv, addr(port), port_space::TCP, QpType::Rc);
    let route = cch.c.cm_query(cid).unwrap();
    assert_eq!(route.device.as_deref(), Some("srnic0"));
    assert!(route.resolved);
    cch.c
        .cm(Request::CmConnect {
            id: cid,
            param: param(cv.qp, b"hello"),
        })
        .unwrap();

    let req = sch.expect(cm_event::CONNECT_REQUEST);
    assert_eq!(req.listen, Some(listen));
    assert_eq!(&req.param.private_data[..5], b"hello");
    assert_eq!(
        req.param.private_data.len(),
        56,
        "all a REQ holds after rdma_cm's header"
    );
    assert_eq!(req.param.qp_num, cv.qp);
    let sid = req.id;
    let peer = sch.c.cm_query(sid).unwrap();
    assert_eq!(peer.src, Some(addr(port)));
    assert_eq!(
        peer.dst, route.src,
        "the passive side sees the client's address and port"
    );
    let mut sv = verbs(path, QpType::Rc);
    ready(
        &mut sch,
        &mut sv,
        sid,
        &[QpState::Init, QpState::Rtr, QpState::Rts],
    );
    sch.c
        .cm(Request::CmAccept {
            id: sid,
            param: param(sv.qp, b"welcome"),
        })
        .unwrap();

    let rep = cch.expect(cm_event::CONNECT_RESPONSE);
    assert_eq!(&rep.param.private_data[..7], b"welcome");
    assert_eq!(rep.param.qp_num, sv.qp);
    ready(&mut cch, &mut cv, cid, &[QpState::Rtr, QpState::Rts]);
    cch.c
        .cm(Request::CmAccept {
            id: cid,
            param: ConnParam::default(),
        })
        .unwrap();
    sch.expect(cm_event::ESTABLISHED);
    Connected {
        client: (cch, cid, cv),
        server: (sch, sid, sv),
        listen,
    }
}

/// Sends `data` from `a` to `b` and checks it arrived.
fn send(a: &mut Verbs, b: &mut Verbs, data: &[u8]) {
    let rbuf = vec![0u8; data.len()];
    let rkey =
        b.c.reg_mr(
            b.pd,
            rbuf.as_ptr() as u64,
            rbuf.len() as u64,
            Access::LOCAL_WRITE,
        )
        .unwrap();
    let lkey =
        a.c.reg_mr(
            a.pd,
            data.as_ptr() as u64,
            data.len() as u64,
            Default::default(),
        )
        .unwrap();
    let sge = |buf: &[u8], lkey| {
        vec![Sge {
            addr: buf.as_ptr() as u64,
            length: buf.len() as u32,
            lkey,
        }]
    };
    b.c.post_recv(
        b.qp,
        vec![RecvWr {
            wr_id: 2,
            sgl: sge(&rbuf, rkey),
        }],
    )
    .unwrap();
    a.c.post_send(
        a.qp,
        vec![SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sgl: sge(data, lkey),
            flags: SendFlags::SIGNALED,
            ud: None,
            xrc_srqn: None,
        }],
    )
    .unwrap();
    let wait = std::time::Duration::from_secs(30);
    let sent = a.c.wait(a.cq, 1, wait).unwrap();
    assert_eq!(sent[0].status, WcStatus::Success);
    let got = b.c.wait(b.cq, 1, wait).unwrap();
    assert_eq!(got[0].status, WcStatus::Success);
    assert_eq!(std::hint::black_box(&rbuf[..]), data);
}

#[test]
fn a_connection_is_made_carries_data_and_is_torn_down() {
    let d = daemon("connect");
    let mut c = connected(d.path(), 7471);
    let (cv, sv) = (&mut c.client.2, &mut c.server.2);
    send(cv, sv, b"ping over rdma_cm");
    send(sv, cv, b"pong");
    // The client disconnects: both sides see DISCONNECTED.
    let (cch, cid) = (&mut c.client.0, c.client.1);
    cch.c.cm(Request::CmDisconnect(cid)).unwrap();
    c.server.0.expect(cm_event::DISCONNECTED);
    // The server answers the DREQ with its own rdma_disconnect (the DREP), as the kernel's
    // rdma_cm has it; then the client's disconnect is done too.
    c.server.0.c.cm(Request::CmDisconnect(c.server.1)).unwrap();
    c.client.0.expect(cm_event::DISCONNECTED);
    // Events read count for the id they were about; a connection request, as in rdma_ucm,
    // for its listener.
    assert_eq!(c.server.0.c.cm_destroy_id(c.server.1).unwrap(), 2);
    c.client.0.c.cm_destroy_id(c.client.1).unwrap();
    assert_eq!(c.server.0.c.cm_destroy_id(c.listen).unwrap(), 1);
}

#[test]
fn a_program_that_goes_away_disconnects_its_connections() {
    let d = daemon("exit");
    let c = connected(d.path(), 7472);
    let Connected {
        client, mut server, ..
    } = c;
    // The client's channel and context close, as when its program exits.
    drop(client);
    server.0.expect(cm_event::DISCONNECTED);
}

#[test]
fn a_request_no_one_listens_for_is_rejected() {
    let d = daemon("reject");
    let mut ch = Channel::open(d.path());
    let mut v = verbs(d.path(), QpType::Rc);
    let id = resolved(&mut ch, &mut v, addr(7473), port_space::TCP, QpType::Rc);
    ch.c.cm(Request::CmConnect {
        id,
        param: param(v.qp, &[]),
    })
    .unwrap();
    let e = ch.expect(cm_event::REJECTED);
    assert_eq!(e.status, 8, "IBA reject reason 8: invalid service ID");
}

#[test]
fn a_listener_rejects_with_private_data() {
    let d = daemon("refuse");
    let mut sch = Channel::open(d.path());
    listener(&mut sch, 7474, port_space::TCP, QpType::Rc);
    let mut ch = Channel::open(d.path());
    let mut v = verbs(d.path(), QpType::Rc);
    let id = resolved(&mut ch, &mut v, addr(7474), port_space::TCP, QpType::Rc);
    ch.c.cm(Request::CmConnect {
        id,
        param: param(v.qp, &[]),
    })
    .unwrap();
    let req = sch.expect(cm_event::CONNECT_REQUEST);
    sch.c
        .cm(Request::CmReject {
            id: req.id,
            private_data: b"go away".to_vec(),
        })
        .unwrap();
    let e = ch.expect(cm_event::REJECTED);
    assert_eq!(e.status, 28, "IBA reject reason 28: consumer");
    assert_eq!(&e.param.private_data[..7], b"go away");
}

#[test]
fn ports_clash_as_the_kernel_says() {
    let d = daemon("ports");
    let mut ch = Channel::open(d.path());
    listener(&mut ch, 7475, port_space::TCP, QpType::Rc);
    // The kernel's cma_check_port: a wildcard on either side is EADDRNOTAVAIL, two equal
    // addresses EADDRINUSE (sideway's test_bind_on_the_same_port expects the first).
    let bind = |ch: &mut Channel, reuse: bool, afonly: Option<bool>, a: &str| {
        let id = ch.c.cm_create_id(port_space::TCP, QpType::Rc).unwrap();
        let options = [
            Some(CmOption::ReuseAddr(reuse)),
            afonly.map(CmOption::AfOnly),
        ];
        for option in options.into_iter().flatten() {
            ch.c.cm(Request::CmSetOption { id, option }).unwrap();
        }
        let addr = a.parse().unwrap();
        (
            id,
            ch.c.cm(Request::CmBind { id, addr }).err().map(|e| e.errno),
        )
    };
    assert_eq!(
        bind(&mut ch, false, None, "0.0.0.0:7475").1,
        Some(libc::EADDRNOTAVAIL)
    );
    assert_eq!(
        bind(&mut ch, false, None, &addr(7475).to_string()).1,
        Some(libc::EADDRINUSE)
    );
    let (first, e) = bind(&mut ch, false, None, "0.0.0.0:7479");
    assert_eq!(e, None);
    assert_eq!(
        bind(&mut ch, false, None, &addr(7479).to_string()).1,
        Some(libc::EADDRNOTAVAIL)
    );
    ch.c.cm_destroy_id(first).unwrap();
    // Two ids that both allow reuse share a port, until one listens: then its port is its own.
    let (a, e) = bind(&mut ch, true, None, &addr(7480).to_string());
    assert_eq!(e, None);
    let (b, e) = bind(&mut ch, true, None, &addr(7480).to_string());
    assert_eq!(e, None);
    let e =
        ch.c.cm(Request::CmListen { id: a, backlog: 1 })
            .unwrap_err();
    assert_eq!(e.errno, libc::EADDRINUSE);
    ch.c.cm_destroy_id(b).unwrap();
    ch.c.cm(Request::CmListen { id: a, backlog: 1 }).unwrap();
    assert_eq!(
        bind(&mut ch, true, None, &addr(7480).to_string()).1,
        Some(libc::EADDRINUSE)
    );
    // A listening id neither listens again nor takes reuse (rdma_listen, rdma_set_reuseaddr);
    // a bound one still takes reuse and AF-only.
    let e =
        ch.c.cm(Request::CmListen { id: a, backlog: 2 })
            .unwrap_err();
    assert_eq!(e.errno, libc::EINVAL);
    let set = |id, option| Request::CmSetOption { id, option };
    let e = ch.c.cm(set(a, CmOption::ReuseAddr(true))).unwrap_err();
    assert_eq!(e.errno, libc::EINVAL);
    let (bound, _) = bind(&mut ch, false, None, "0.0.0.0:7481");
    ch.c.cm(set(bound, CmOption::ReuseAddr(true))).unwrap();
    ch.c.cm(set(bound, CmOption::AfOnly(true))).unwrap();
    let e = ch.c.cm(set(bound, CmOption::ReuseAddr(false))).unwrap_err();
    assert_eq!(e.errno, libc::EINVAL);
    // AF-only ids of two families do not clash; an IPv6 wildcard that takes IPv4 does.
    assert_eq!(bind(&mut ch, false, Some(true), "[::]:7475").1, None);
    assert_eq!(
        bind(&mut ch, false, None, "[::]:7475").1,
        Some(libc::EADDRNOTAVAIL)
    );
    // The ids a listener's requests make hold no port: with the listener gone, the port is
    // free again while its connection lives (perftest -R listens twice on one port).
    let mut c = connected(d.path(), 7477);
    c.server.0.c.cm_destroy_id(c.listen).unwrap();
    let again = listener(&mut c.server.0, 7477, port_space::TCP, QpType::Rc);
    c.server.0.c.cm_destroy_id(again).unwrap();
    // Another port space has its own ports.
    let udp = ch.c.cm_create_id(port_space::UDP, QpType::Ud).unwrap();
    let any: SocketAddr = "0.0.0.0:7475".parse().unwrap();
    ch.c.cm(Request::CmBind { id: udp, addr: any }).unwrap();
    // An address no device has.
    let far = ch.c.cm_create_id(port_space::TCP, QpType::Rc).unwrap();
    let e =
        ch.c.cm(Request::CmBind {
            id: far,
            addr: "198.18.99.99:1".parse().unwrap(),
        })
        .unwrap_err();
    assert_eq!(e.errno, libc::ENODEV, "rdma_translate_ip finds no device");
    // Port 0 takes an ephemeral port.
    let eph = ch.c.cm_create_id(port_space::TCP, QpType::Rc).unwrap();
    ch.c.cm(Request::CmBind {
        id: eph,
        addr: "0.0.0.0:0".parse().unwrap(),
    })
    .unwrap();
    let port = ch.c.cm_query(eph).unwrap().src.unwrap().port();
    assert!((32768..=60999).contains(&port), "{port}");
    // Connecting before resolving is refused.
    let e =
        ch.c.cm(Request::CmConnect {
            id: eph,
            param: ConnParam::default(),
        })
        .unwrap_err();
    assert_eq!(e.errno, libc::EINVAL);
    // A loopback address is a wildcard to cma_check_port.
    assert_eq!(bind(&mut ch, false, None, "127.0.0.1:7482").1, None);
    assert_eq!(
        bind(&mut ch, false, None, "127.0.0.1:7482").1,
        Some(libc::EADDRNOTAVAIL)
    );
}

#[test]
fn resolving_checks_the_family_and_the_route_at_once() {
    let d = daemon("resolve");
    let mut ch = Channel::open(d.path());
    let resolve = |ch: &mut Channel, id, src: Option<&str>, dst: SocketAddr| {
        let src = src.map(|s| s.parse().unwrap());
        let r = ch.c.cm(Request::CmResolveAddr {
            id,
            src,
            dst,
            timeout_ms: 2000,
        });
        r.err().map(|e| e.errno)
    };
    // resolve_prepare_src: a source of another family than the destination's is EINVAL, and
    // the id stays bound to it.
    let id = ch.c.cm_create_id(port_space::TCP, QpType::Rc).unwrap();
    assert_eq!(
        resolve(&mut ch, id, Some("[::]:0"), addr(7490)),
        Some(libc::EINVAL)
    );
    let src = ch.c.cm_query(id).unwrap().src.unwrap();
    assert!(src.is_ipv6(), "{src}");
    // No route: ENETUNREACH at once (rdma_resolve_ip), no event, and the id, bound, resolves
    // another destination.
    let id = ch.c.cm_create_id(port_space::TCP, QpType::Rc).unwrap();
    let nowhere = "198.18.99.99:7491".parse().unwrap();
    assert_eq!(resolve(&mut ch, id, None, nowhere), Some(libc::ENETUNREACH));
    assert_eq!(resolve(&mut ch, id, None, addr(7491)), None);
    ch.expect(cm_event::ADDR_RESOLVED);
    // A loopback source to a loopback destination resolves (the kernel's cma_bind_loopback).
    let id = ch.c.cm_create_id(port_space::TCP, QpType::Rc).unwrap();
    let lo = "127.0.0.1:7492".parse().unwrap();
    assert_eq!(resolve(&mut ch, id, Some("127.0.0.1:0"), lo), None);
    ch.expect(cm_event::ADDR_RESOLVED);
}

#[test]
fn sidr_resolves_a_ud_service_and_datagrams_flow() {
    let d = daemon("sidr");
    let mut sch = Channel::open(d.path());
    listener(&mut sch, 7476, port_space::UDP, QpType::Ud);
    let mut sv = verbs(d.path(), QpType::Ud);
    let mut ch = Channel::open(d.path());
    let mut v = verbs(d.path(), QpType::Ud);
    let id = resolved(&mut ch, &mut v, addr(7476), port_space::UDP, QpType::Ud);
    ch.c.cm(Request::CmConnect {
        id,
        param: param(v.qp, b"who serves?"),
    })
    .unwrap();
    let req = sch.expect(cm_event::CONNECT_REQUEST);
    assert_eq!(&req.param.private_data[..11], b"who serves?");
    assert!(req.ah.is_some(), "a UD request says where the requester is");
    ready(&mut sch, &mut sv, req.id, &[QpState::Init]);
    sch.c
        .cm(Request::CmAccept {
            id: req.id,
            param: param(sv.qp, &[]),
        })
        .unwrap();
    let e = ch.expect(cm_event::ESTABLISHED);
    assert_eq!(e.param.qp_num, sv.qp);
    assert_eq!(e.param.qkey, 0x0123_4567, "RDMA_UDP_QKEY");
    assert!(e.ah.is_some());
}

#[test]
fn ids_on_a_device_taken_down_hear_of_it() {
    let d = daemon("removal");
    let c = connected(d.path(), 7478);
    let Connected {
        mut client,
        mut server,
        ..
    } = c;
    let mut admin = Client::connect(d.path()).unwrap();
    admin.down("srnic0").unwrap();
    client.0.expect(cm_event::DEVICE_REMOVAL);
    server.0.expect(cm_event::DEVICE_REMOVAL);
    // The ids can still be destroyed.
    client.0.c.cm_destroy_id(client.1).unwrap();
    server.0.c.cm_destroy_id(server.1).unwrap();
}

#[test]
fn multicast_joins_follow_the_kernels_rules() {
    let d = daemon("mcast");
    let mut ch = Channel::open(d.path());
    let group: SocketAddr = "239.4.5.6:0".parse().unwrap();
    let errno = |r: Result<u32, softrnic_client::client::Error>| r.unwrap_err().errno;
    // An id with no device yet, and a connected-mode id, cannot join (EINVAL).
    let idle = ch.c.cm_create_id(port_space::UDP, QpType::Ud).unwrap();
    assert_eq!(errno(ch.c.cm_join(idle, group)), libc::EINVAL);
    ch.c.cm(Request::CmBind {
        id: idle,
        addr: addr(0),
    })
    .unwrap();
    let tcp = ch.c.cm_create_id(port_space::TCP, QpType::Rc).unwrap();
    ch.c.cm(Request::CmBind {
        id: tcp,
        addr: addr(0),
    })
    .unwrap();
    assert_eq!(errno(ch.c.cm_join(tcp, group)), libc::EINVAL);
    // Not a group, and an IPv6 group on RoCEv2 (the kernel's ENOTSUPP, 524).
    assert_eq!(errno(ch.c.cm_join(idle, addr(0))), libc::EINVAL);
    let v6: SocketAddr = "[ff0e::1]:0".parse().unwrap();
    assert_eq!(errno(ch.c.cm_join(idle, v6)), 524);

    let mc = ch.c.cm_join(idle, group).unwrap();
    let e = ch.expect(cm_event::MULTICAST_JOIN);
    assert_eq!((e.id, e.mc, e.status), (idle, Some(mc), 0));
    assert_eq!((e.param.qp_num, e.param.qkey), (0xff_ffff, 0x0123_4567));
    let ah = e.ah.expect("the group's address handle");
    assert_eq!(ah.dgid.to_string(), "::ffff:239.4.5.6");
    assert_eq!(ah.dmac.0, [0x01, 0x00, 0x5e, 0x04, 0x05, 0x06]);
    // The join's event was read: leaving says so; the join is gone then.
    assert_eq!(ch.c.cm_leave(mc).unwrap(), 1);
    assert_eq!(errno(ch.c.cm_leave(mc)), libc::ENOENT);
    // A join left before its event is read takes the event with it.
    let mc = ch.c.cm_join(idle, group).unwrap();
    assert_eq!(ch.c.cm_leave(mc).unwrap(), 0);
    assert_eq!(
        errno(ch.c.cm(Request::CmGetEvent).map(|()| 0)),
        libc::EAGAIN
    );
}

#[test]
fn ids_on_an_interface_whose_mac_changes_hear_of_it() {
    let pair = softrnic_link::netns::VethPair::new("ac", 1500).expect("namespaces (needs root)");
    let path =
        std::env::temp_dir().join(format!("softrnic-cm-{}-addrchg.sock", std::process::id()));
    let d = Running::start(&path).unwrap();
    let mut admin = Client::connect(d.path()).unwrap();
    let info = admin
        .up(UpRequest {
            netdev: Some(pair.ifs[0].clone()),
            backend: Some(softrnic_client::proto::BackendKind::Packet),
            netns: Some(pair.path(0)),
        })
        .unwrap();
    let mut ch = Channel::open(d.path());
    let bound = ch.c.cm_create_id(port_space::TCP, QpType::Rc).unwrap();
    ch.c.cm(Request::CmBind {
        id: bound,
        addr: "198.18.1.1:0".parse().unwrap(),
    })
    .unwrap();
    // A wildcard id has no device: nothing for it.
    let wildcard = ch.c.cm_create_id(port_space::TCP, QpType::Rc).unwrap();
    ch.c.cm(Request::CmBind {
        id: wildcard,
        addr: "0.0.0.0:0".parse().unwrap(),
    })
    .unwrap();
    let mac = "02:53:52:4e:aa:01";
    pair.exec(
        0,
        &["ip", "link", "set", "dev", &pair.ifs[0], "address", mac],
    )
    .unwrap();
    let e = ch.expect(cm_event::ADDR_CHANGE);
    assert_eq!((e.id, e.status), (bound, 0));
    let now = admin.devices().unwrap();
    assert_eq!(
        now[0].mac,
        [0x02, 0x53, 0x52, 0x4e, 0xaa, 0x01],
        "was {:?}",
        info.mac
    );
    assert_eq!(
        sys::poll_readable(&[ch.fd.as_raw_fd()], 200).unwrap(),
        0,
        "one event, for the bound id only"
    );
}
