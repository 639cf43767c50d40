//! Raw packet rates of each backend over one veth pair, in one run: AF_PACKET, AF_XDP in
//! generic (SKB) mode and AF_XDP in native (DRV) mode, with 64-byte frames and the frames of
//! full RDMA WRITE MIDDLE packets at path MTU 1024 and 4096 (what an Ethernet MTU of 1500 and
//! 9000 carries), with the payload rate those carry: the most a device on that backend could
//! move with no engine at all. One thread sends as fast as the backend takes frames, another
//! receives, each in its namespace. Needs root. Run with `cargo bench -p softrnic-link`;
//! `BENCH_MS` sets each run's length.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use softrnic_link::Backend as _;
use softrnic_link::Link;
use softrnic_link::netns::VethPair;
use softrnic_link::{AfPacket, AfXdp, XdpMode};
use softrnic_sys as sys;
use softrnic_wire::{
    EthRepr, EthernetAddress, ExtRepr, FrameRepr, IpRepr, Opcode, UdpRepr, bth::BthRepr,
};

#[derive(Debug, Clone, Copy)]
enum Backend {
    Packet,
    Xdp(XdpMode),
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Packet => "AF_PACKET",
            Backend::Xdp(XdpMode::Skb) => "AF_XDP SKB",
            Backend::Xdp(XdpMode::Drv) => "AF_XDP DRV",
        }
    }

    fn open(self, ns: &str, ifname: &str) -> (Box<dyn Link>, [u8; 6]) {
        sys::enter_netns(ns).expect("enter namespace");
        match self {
            Backend::Packet => {
                let l = AfPacket::open(ifname).expect("AF_PACKET");
                let mac = l.mac();
                (Box::new(l), mac)
            }
            Backend::Xdp(mode) => {
                let l = AfXdp::open(ifname, mode).expect("AF_XDP");
                let mac = l.mac();
                (Box::new(l), mac)
            }
        }
    }
}

/// An RC SEND_ONLY frame of `size` bytes or the nearest below (RoCEv2 frames are 2 mod 4
/// bytes long over IPv4).
fn frame(src: [u8; 6], dst: [u8; 6], size: usize) -> Vec<u8> {
    let repr = FrameRepr {
        eth: EthRepr::untagged(EthernetAddress(dst), EthernetAddress(src)),
        ip: IpRepr::v4([198, 18, 1, 1].into(), [198, 18, 1, 2].into()),
        udp: UdpRepr::unchecked(0xc000),
        bth: BthRepr::new(Opcode::RcSendOnly, 0x11, 0),
        ext: ExtRepr::default(),
    };
    let payload = (size - 58) & !3;
    let mut buf = vec![0; size + 8];
    let n = repr.emit(&vec![0x5a; payload], &mut buf).expect("frame");
    buf.truncate(n);
    buf
}

/// Sends for `budget`; returns (frames sent, frames received, seconds).
fn run(pair: &VethPair, backend: Backend, size: usize, budget: Duration) -> (u64, u64, f64) {
    let (ready_tx, ready) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let (ns, ifname) = (pair.path(1), pair.ifs[1].clone());
    let stop_rx = Arc::clone(&stop);
    let receiver = std::thread::spawn(move || {
        let (mut link, mac) = backend.open(&ns, &ifname);
        ready_tx.send(mac).unwrap();
        let mut got = 0u64;
        while !stop_rx.load(Ordering::Relaxed) {
            while link.receive(&mut |_| got += 1) {}
        }
        got
    });
    let dst = ready.recv().unwrap();
    let (ns, ifname) = (pair.path(0), pair.ifs[0].clone());
    let sender = std::thread::spawn(move || {
        let (mut link, mac) = backend.open(&ns, &ifname);
        let f = frame(mac, dst, size);
        let (mut sent, start) = (0u64, Instant::now());
        while start.elapsed() < budget {
            for _ in 0..64 {
                let went = link.transmit(&mut |buf: &mut [u8]| {
                    buf[..f.len()].copy_from_slice(&f);
                    Some(f.len())
                });
                sent += u64::from(went);
            }
            // Flushes batches and reclaims buffers.
            link.receive(&mut |_| {});
        }
        (sent, start.elapsed().as_secs_f64())
    });
    let (sent, secs) = sender.join().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let got = receiver.join().unwrap();
    (sent, got, secs)
}

fn main() {
    let budget = Duration::from_millis(
        std::env::var("BENCH_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000),
    );
    let pair = VethPair::new("bench", 9000).expect("namespaces and a veth pair (needs root)");
    println!(
        "{:<11} {:>6} {:>12} {:>12} {:>10} {:>14}",
        "backend", "frame", "sent/s", "received/s", "Gbit/s", "payload MB/s"
    );
    for backend in [
        Backend::Packet,
        Backend::Xdp(XdpMode::Skb),
        Backend::Xdp(XdpMode::Drv),
    ] {
        // Ethernet, IPv4, UDP, BTH and ICRC around the payload of a WRITE MIDDLE packet.
        const HEADERS: usize = 14 + 20 + 8 + 12 + 4;
        for (size, payload) in [(64, 0), (HEADERS + 1024, 1024), (HEADERS + 4096, 4096)] {
            let (sent, got, secs) = run(&pair, backend, size, budget);
            let len = frame([0; 6], [0; 6], size).len();
            println!(
                "{:<11} {:>6} {:>12.0} {:>12.0} {:>10.2} {:>14.0}",
                backend.name(),
                len,
                sent as f64 / secs,
                got as f64 / secs,
                got as f64 * len as f64 * 8.0 / secs / 1e9,
                got as f64 * payload as f64 / secs / 1e6
            );
        }
    }
}
