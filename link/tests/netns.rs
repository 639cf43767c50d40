//! Two engines in two network namespaces, joined by a veth pair, over the AF_PACKET backend:
//! RC (every opcode), UC and UD traffic, with and without netem loss. Needs root (namespaces
//! and raw sockets), as CI has.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use softrnic_emu_core::{
    Access, AddressHandle, QpType, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdDest, Wc,
    WcFlags, WcOpcode, WcStatus,
};
use softrnic_link::Backend as _;
use softrnic_link::Link;
use softrnic_link::faults::{Faults, Faulty};
use softrnic_link::library::{Device, Endpoint};
use softrnic_link::netns::VethPair;
use softrnic_link::{AfPacket, AfXdp, XdpMode};
use softrnic_sys as sys;
use softrnic_wire::EthernetAddress;

const ALL: Access = Access::from_bits_retain(1 | 2 | 4 | 8);
const LEN: usize = 256 * 1024;
const WAIT: Duration = Duration::from_secs(30);

/// Two namespaces joined by a veth pair.
struct Pair(VethPair);

impl std::ops::Deref for Pair {
    type Target = VethPair;
    fn deref(&self) -> &VethPair {
        &self.0
    }
}

impl Pair {
    fn new(tag: &str) -> Pair {
        Pair::with_mtu(tag, 9000)
    }

    fn with_mtu(tag: &str, mtu: u32) -> Pair {
        Pair(VethPair::new(tag, mtu).expect("namespaces and a veth pair (needs root)"))
    }

    /// Adds a netem qdisc; false if the kernel has no netem (no sch_netem).
    fn netem(&self, i: usize, spec: &str) -> bool {
        let mut args = vec!["tc", "qdisc", "add", "dev", &self.ifs[i], "root", "netem"];
        args.extend(spec.split_whitespace());
        self.exec(i, &args).is_ok()
    }
}

type Dev = Device<Faulty<Box<dyn Link>>>;

/// Which backend a test runs over.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Packet,
    Xdp(XdpMode),
}

/// A device in the namespace at path `ns` on interface `ifname`, at 198.18.1.`n`, losing and reordering
/// `loss_ppm` parts per million of what it sends.
fn device(ns: &str, ifname: &str, n: u8, loss_ppm: u32, backend: Backend) -> Dev {
    sys::enter_netns(ns).expect("enter namespace");
    let (link, mac, mtu): (Box<dyn Link>, _, _) = match backend {
        Backend::Packet => {
            let l = AfPacket::open(ifname).expect("AF_PACKET");
            let (mac, mtu) = (l.mac(), l.mtu());
            (Box::new(l), mac, mtu)
        }
        Backend::Xdp(mode) => {
            let l = AfXdp::open(ifname, mode).expect("AF_XDP");
            let (mac, mtu) = (l.mac(), l.mtu());
            (Box::new(l), mac, mtu)
        }
    };
    let loss = f64::from(loss_ppm) / 1e6;
    let faults = Faults {
        loss,
        reorder: loss,
        ..Faults::default()
    };
    let mut config = Dev::config(n, [198, 18, 1, n]);
    config.mac = EthernetAddress(mac);
    config.eth_mtu = mtu;
    let mut dev = Device::new(Faulty::new(link, n as u64, faults), config);
    // A 16.8 ms ACK timeout: tail losses are recovered quickly, and eight in a row (the retry
    // budget) still outlast the tests' threads waiting for a core on a busy 2-core machine.
    dev.set_ack_timeout(12);
    dev
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// What the responder side tells the requester: its endpoints, and its buffer.
struct Offer {
    eps: Vec<Endpoint>,
    addr: u64,
    rkey: u32,
}

/// Runs the traffic: host 0 sends to host 1, each losing `loss_ppm` of what it sends.
/// Returns both sides' counters.
/// A PD, a CQ, and a QP of each type on them.
fn objects(dev: &mut Dev, types: &[QpType]) -> (u32, u32, Vec<u32>) {
    let pd = dev.engine().alloc_pd(0).unwrap();
    let cq = dev.engine().create_cq(256).unwrap();
    let qps = types
        .iter()
        .map(|&t| dev.create_qp(pd, t, cq).unwrap())
        .collect();
    (pd, cq, qps)
}

fn traffic(
    pair: &Pair,
    loss_ppm: u32,
    types: &'static [QpType],
    backend: Backend,
) -> (softrnic_emu_core::Counters, softrnic_emu_core::Counters) {
    let (to_a, from_b) = mpsc::channel::<Offer>();
    let (to_b, from_a) = mpsc::channel::<Vec<Endpoint>>();
    let (ready_tx, ready) = mpsc::channel::<()>();
    let stop = Arc::new(AtomicBool::new(false));
    let (ns_b, if_b) = (pair.path(1), pair.ifs[1].clone());
    let stop_b = Arc::clone(&stop);
    let responder = std::thread::spawn(move || {
        // Unreliable messages are not resent: only RC frames are lost on purpose.
        let mut dev = device(&ns_b, &if_b, 2, loss_ppm, backend);
        let (pd, cq, qps) = objects(&mut dev, types);
        let buf = dev.alloc(LEN);
        dev.write(buf, &pattern(2, LEN));
        let rkey = dev.engine().reg_mr(pd, buf, LEN as u64, ALL).unwrap();
        let rbuf = dev.alloc(3 * 65536);
        let lkey = dev.engine().reg_mr(pd, rbuf, 3 * 65536, ALL).unwrap();
        let eps = qps.iter().map(|&q| dev.endpoint(q)).collect();
        to_a.send(Offer {
            eps,
            addr: buf,
            rkey,
        })
        .unwrap();
        let peers = from_a.recv().unwrap();
        for (q, p) in qps.iter().zip(&peers) {
            dev.connect(*q, p).unwrap();
        }
        for (i, &qp) in qps.iter().enumerate() {
            let sgl = vec![Sge {
                addr: rbuf + 65536 * i as u64,
                length: 65536,
                lkey,
            }];
            dev.engine()
                .post_recv(
                    qp,
                    RecvWr {
                        wr_id: i as u64,
                        sgl,
                    },
                )
                .unwrap();
        }
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut wcs = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 8];
        let deadline = std::time::Instant::now() + WAIT;
        while !(stop_b.load(Ordering::Relaxed) && got.len() >= types.len()) {
            assert!(std::time::Instant::now() < deadline, "receives: {got:?}");
            if !dev.progress() {
                std::thread::sleep(Duration::from_micros(50));
            }
            let n = dev.engine().poll_cq(cq, &mut wcs).unwrap();
            got.extend_from_slice(&wcs[..n]);
        }
        // One message per QP: RC 50000 bytes, UC 3000, UD 1000 behind a 40-byte GRH.
        got.sort_by_key(|w| w.wr_id);
        assert_eq!(got.len(), types.len(), "{got:?}");
        for w in &got {
            let (len, at) = match types[w.wr_id as usize] {
                QpType::Rc => (50_000, 0),
                QpType::Uc => (3000, 0),
                QpType::Ud => (1000, 40),
                QpType::XrcSend | QpType::XrcRecv => unreachable!("RC, UC and UD only"),
            };
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            assert_eq!(w.byte_len as usize, len + at, "{w:?}");
            assert_eq!(at > 0, w.wc_flags.contains(WcFlags::GRH), "{w:?}");
            let data = dev.read(rbuf + 65536 * w.wr_id + at as u64, len);
            assert_eq!(data, pattern(1, LEN)[..len], "message {}", w.wr_id);
        }
        dev.engine().counters().clone()
    });

    let (ns_a, if_a) = (pair.path(0), pair.ifs[0].clone());
    let requester = std::thread::spawn(move || {
        let mut dev = device(&ns_a, &if_a, 1, loss_ppm, backend);
        let (pd, cq, qps) = objects(&mut dev, types);
        let offer = from_b.recv().unwrap();
        to_b.send(qps.iter().map(|&q| dev.endpoint(q)).collect())
            .unwrap();
        for (q, p) in qps.iter().zip(&offer.eps) {
            dev.connect(*q, p).unwrap();
        }
        ready.recv().unwrap();
        let src = dev.alloc(LEN);
        dev.write(src, &pattern(1, LEN));
        let dst = dev.alloc(LEN);
        let res = dev.alloc(8);
        let l = |dev: &mut Dev, a, n| dev.engine().reg_mr(pd, a, n, ALL).unwrap();
        let (ks, kd, kr) = (
            l(&mut dev, src, LEN as u64),
            l(&mut dev, dst, LEN as u64),
            l(&mut dev, res, 8),
        );
        let remote = Remote {
            addr: offer.addr,
            rkey: offer.rkey,
        };
        let sge = |addr, len: usize, lkey| {
            vec![Sge {
                addr,
                length: len as u32,
                lkey,
            }]
        };
        let post = |dev: &mut Dev, qp, id, op, sgl, ud| {
            let wr = SendWr {
                wr_id: id,
                op,
                sgl,
                flags: SendFlags::SIGNALED,
                ud,
                xrc_srqn: None,
            };
            dev.engine().post_send(qp, wr).unwrap();
        };
        let mut posted = 0;
        // UC and UD have no retransmission: they go first, ahead of RC's burst, which can
        // overflow a starved receiver's socket buffer on a loaded machine.
        let mut order: Vec<usize> = (0..types.len()).collect();
        order.sort_by_key(|&i| types[i] == QpType::Rc);
        for i in order {
            let (t, qp) = (types[i], qps[i]);
            match t {
                QpType::Rc => {
                    // WRITE the whole buffer, READ it back, a SEND, a FETCH_ADD on word 0.
                    post(
                        &mut dev,
                        qp,
                        1,
                        SendOp::Write(remote),
                        sge(src, LEN, ks),
                        None,
                    );
                    post(
                        &mut dev,
                        qp,
                        2,
                        SendOp::Read(remote),
                        sge(dst, LEN, kd),
                        None,
                    );
                    post(&mut dev, qp, 3, SendOp::Send, sge(src, 50_000, ks), None);
                    // Fenced: a READ resent after a loss takes its data again, and must not
                    // see the FETCH_ADD (IBA 10.8.3.3).
                    let add = SendOp::FetchAdd { remote, add: 1 };
                    let wr = SendWr {
                        wr_id: 4,
                        op: add,
                        sgl: sge(res, 8, kr),
                        flags: SendFlags::SIGNALED | SendFlags::FENCE,
                        ud: None,
                        xrc_srqn: None,
                    };
                    dev.engine().post_send(qp, wr).unwrap();
                    posted += 4;
                }
                QpType::Uc => {
                    post(&mut dev, qp, 5, SendOp::Send, sge(src, 3000, ks), None);
                    posted += 1;
                }
                QpType::Ud => {
                    let ud = UdDest {
                        ah: AddressHandle::to(offer.eps[i].gid, 0).via(offer.eps[i].mac),
                        remote_qpn: offer.eps[i].qpn,
                        remote_qkey: 0x1111_1111,
                    };
                    post(&mut dev, qp, 6, SendOp::Send, sge(src, 1000, ks), Some(ud));
                    posted += 1;
                }
                QpType::XrcSend | QpType::XrcRecv => unreachable!("RC, UC and UD only"),
            }
        }
        let wcs = dev.wait(cq, posted, WAIT);
        assert_eq!(wcs.len(), posted, "{wcs:?}");
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        if types.contains(&QpType::Rc) {
            assert_eq!(
                dev.read(dst, LEN),
                pattern(1, LEN),
                "READ returns what WRITE wrote"
            );
            assert_eq!(
                dev.read(res, 8),
                pattern(1, 8),
                "FETCH_ADD returns the original"
            );
        }
        // Keep answering while the responder finishes (its last ACKs may need resending).
        let deadline = std::time::Instant::now() + Duration::from_millis(200);
        while std::time::Instant::now() < deadline {
            if !dev.progress() {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        dev.engine().counters().clone()
    });
    let a = requester.join().expect("requester");
    stop.store(true, Ordering::Relaxed);
    let b = responder.join().expect("responder");
    (a, b)
}

#[test]
fn rc_uc_ud_between_namespaces_over_af_packet() {
    let pair = Pair::new("p");
    let (a, b) = traffic(
        &pair,
        0,
        &[QpType::Rc, QpType::Uc, QpType::Ud],
        Backend::Packet,
    );
    // The WRITE of 256 KiB at MTU 4096 is 64 packets; the READ request, the SEND's 13, the
    // FETCH_ADD, UC and UD add 16; the READ's responses are 64 the other way.
    let sent_by_requester = 64 + 16;
    assert!(a.sent_pkts >= sent_by_requester, "{a:?}");
    assert!(b.sent_pkts >= 64, "{b:?}");
    assert_eq!(
        a.rcvd_icrc_err + b.rcvd_icrc_err + a.rcvd_malformed + b.rcvd_malformed,
        0
    );
}

#[test]
fn the_gid_table_follows_rxe_order() {
    let pair = Pair::new("g");
    let (ns, ifname) = (pair.path(0), pair.ifs[0].clone());
    pair.add_ipv6(0, "2001:db8::1/64").unwrap();
    // The kernel adds the link-local address once the link is up: wait for it.
    let table = std::thread::spawn(move || {
        sys::enter_netns(&ns).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let table = softrnic_link::gid::table(&ifname).unwrap();
            if table.len() >= 3 || std::time::Instant::now() > deadline {
                break table;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })
    .join()
    .unwrap();
    let names: Vec<String> = table.iter().map(|g| g.to_string()).collect();
    // The link-local address first (index 0), the IPv4 address at index 1, as with rxe.
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(names[0].starts_with("fe80::"), "{names:?}");
    assert_eq!(names[1], "::ffff:198.18.1.1");
    assert_eq!(names[2], "2001:db8::1");
}

#[test]
fn loss_and_reordering_on_the_veth_are_recovered() {
    let pair = Pair::new("l");
    // netem where the kernel has it; otherwise (no sch_netem, as on this project's CI kernel)
    // each device loses and reorders 2% of what it sends on the real veth.
    let netem = pair.netem(0, "loss 2% delay 200us reorder 10% 50%") && pair.netem(1, "loss 2%");
    let injected = if netem { 0 } else { 20_000 };
    eprintln!(
        "loss from {}",
        if netem {
            "netem"
        } else {
            "softrnic's fault injector"
        }
    );
    // RC only: UC and UD do not resend what is lost.
    let (a, _) = traffic(&pair, injected, &[QpType::Rc], Backend::Packet);
    assert!(
        a.retransmitted_pkts > 0,
        "losses make the requester resend: {a:?}"
    );
    assert!(
        a.local_ack_timeout_err + a.packet_seq_err + a.implied_nak_seq_err > 0,
        "{a:?}"
    );
}

/// AF_XDP, in generic (SKB) and native (DRV) mode: veth takes both. With a 9000-byte MTU
/// (path MTU 4096) each frame spans two UMEM chunks; with 1500 (path MTU 1024), one.
fn over_xdp(tag: &str, mode: XdpMode, mtu: u32) {
    let pair = Pair::with_mtu(tag, mtu);
    let types = &[QpType::Rc, QpType::Uc, QpType::Ud];
    let (a, b) = traffic(&pair, 0, types, Backend::Xdp(mode));
    // The WRITE of 256 KiB is at least 64 packets, and its READ's responses 64 more.
    assert!(a.sent_pkts >= 64 + 16, "{a:?}");
    assert!(b.sent_pkts >= 64, "{b:?}");
    let bad = a.rcvd_icrc_err + b.rcvd_icrc_err + a.rcvd_malformed + b.rcvd_malformed;
    assert_eq!(bad, 0);
}

#[test]
fn rc_uc_ud_between_namespaces_over_af_xdp_skb() {
    over_xdp("s", XdpMode::Skb, 9000);
    over_xdp("t", XdpMode::Skb, 1500);
}

#[test]
fn rc_uc_ud_between_namespaces_over_af_xdp_drv() {
    over_xdp("d", XdpMode::Drv, 9000);
    over_xdp("e", XdpMode::Drv, 1500);
}

#[test]
fn neighbours_resolve_through_the_kernel_over_ipv4_and_ipv6() {
    let pair = Pair::new("n");
    pair.add_ipv6(1, "2001:db8::2/64").unwrap();
    pair.add_ipv6(0, "2001:db8::1/64").unwrap();
    let (ns_b, if_b) = (pair.path(1), pair.ifs[1].clone());
    let peer_mac = std::thread::spawn(move || {
        sys::enter_netns(&ns_b).unwrap();
        AfPacket::open(&if_b).unwrap().mac()
    })
    .join()
    .unwrap();
    let ns_a = pair.path(0);
    let found = std::thread::spawn(move || {
        sys::enter_netns(&ns_a).unwrap();
        let wait = Duration::from_secs(3);
        [
            softrnic_link::neigh::resolve("198.18.1.2".parse().unwrap(), wait),
            softrnic_link::neigh::resolve("2001:db8::2".parse().unwrap(), wait),
            softrnic_link::neigh::resolve(
                "198.18.1.77".parse().unwrap(),
                Duration::from_millis(300),
            ),
        ]
    })
    .join()
    .unwrap();
    assert_eq!(found[0].as_ref().unwrap(), &peer_mac);
    assert_eq!(found[1].as_ref().unwrap(), &peer_mac);
    let err = found[2].as_ref().unwrap_err().to_string();
    assert!(err.contains("no ARP/ND answer from 198.18.1.77"), "{err}");
}

/// `AfXdp::open_split` deals an interface's queues out (queue q to part q % parts, at most one
/// part per queue): a frame the peer sends on queue q arrives at part (q % parts) only, and
/// a part goes on receiving after another is dropped (the program stays while any lives).
#[test]
fn af_xdp_queues_dealt_out_to_parts() {
    use softrnic_wire::{Opcode, sample};
    let pair = VethPair::with_queues("split", 1500, 4).expect("a veth pair (needs root)");
    sys::enter_netns(&pair.path(0)).expect("enter namespace");
    let parts = AfXdp::open_split(&pair.ifs[0], XdpMode::Drv, 8).expect("AF_XDP");
    assert_eq!(parts.iter().map(|p| p.queues()).collect::<Vec<_>>(), [1; 4]);
    drop(parts);
    let mut parts = AfXdp::open_split(&pair.ifs[0], XdpMode::Drv, 2).expect("AF_XDP");
    assert_eq!(parts.iter().map(|p| p.queues()).collect::<Vec<_>>(), [2, 2]);
    let mac = parts[0].mac();
    sys::enter_netns(&pair.path(1)).expect("enter namespace");
    let mut peer = AfXdp::open(&pair.ifs[1], XdpMode::Drv).expect("AF_XDP");
    // The peer sends on the queue the UDP source port picks; veth hands a frame to the same
    // queue of the other end.
    let send = |peer: &mut AfXdp, port: u16| {
        let mut s = sample::example(Opcode::RcSendOnly, sample::Ip::V4, 7, 64);
        s.repr.eth.dst = EthernetAddress(mac);
        s.repr.udp.src_port = port;
        let frame = s.frame();
        assert!(peer.transmit(&mut |buf| {
            buf[..frame.len()].copy_from_slice(&frame);
            Some(frame.len())
        }));
        peer.flush();
        frame
    };
    // The next frame a part receives within `wait`.
    let receive = |part: &mut AfXdp, wait: u64| -> Option<Vec<u8>> {
        let deadline = std::time::Instant::now() + Duration::from_millis(wait);
        while std::time::Instant::now() < deadline {
            let mut got = None;
            if part.receive(&mut |f| got = Some(f.to_vec())) {
                return got;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    };
    for port in 0xc000u16..0xc004 {
        let frame = send(&mut peer, port);
        let to = usize::from(port % 4) % 2;
        assert_eq!(
            receive(&mut parts[to], 5000).as_ref(),
            Some(&frame),
            "port {port:#x}"
        );
        assert_eq!(receive(&mut parts[1 - to], 100), None, "port {port:#x}");
    }
    let mut second = parts.pop().expect("two parts");
    drop(parts);
    let frame = send(&mut peer, 0xc001);
    assert_eq!(receive(&mut second, 5000), Some(frame));
}
