//! Congestion control over real links: two senders and a receiver in network namespaces,
//! joined through a third namespace whose path towards the receiver is the bottleneck: it
//! forwards at a low rate from a queue that marks ECT packets CE with RED's probabilities
//! instead of dropping them. The receiver's softrnic answers the marks with CNPs, the senders'
//! softrnic slows down, and the two share the bottleneck.
//!
//! The bottleneck is a forwarder of this test's (AF_PACKET on both ports), not a `tc` qdisc:
//! the kernels this runs on may lack `sch_red`, `sch_fq_codel` and every other qdisc that marks
//! (this machine's has only htb, tbf and pfifo). Where `tc qdisc ... red ... ecn` exists, a bridge
//! port under it does the same (docs/congestion.md).

mod common;

use std::collections::VecDeque;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use softrnic_link::sim::{Red, mark_ce};

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip");
    assert!(out.status.success(), "ip {args:?}: {}", text(&out.stderr));
}

fn in_netns(ns: &str, args: &[&str]) {
    let mut all = vec!["netns", "exec", ns];
    all.extend_from_slice(args);
    ip(&all);
}

/// Three namespaces: the senders' (`s0`, 198.18.3.1), the bottleneck's (`s1` and `r1`), the
/// receiver's (`r0`, 198.18.3.2). Removed when dropped.
struct Path {
    ns: [String; 3],
    /// The prefix of every name.
    base: String,
}

impl Path {
    fn new() -> Path {
        let base = format!("cc{}", std::process::id() % 100_000);
        let ns = ["s", "b", "r"].map(|n| format!("{base}{n}"));
        for n in &ns {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
            ip(&["netns", "add", n]);
        }
        let path = Path {
            ns,
            base: base.clone(),
        };
        let [s, b, r] = &path.ns;
        let sides = [(s, "s", "198.18.3.1"), (r, "r", "198.18.3.2")];
        for (ns, side, addr) in sides {
            let (end, port) = (format!("{base}{side}0"), format!("{base}{side}1"));
            ip(&["link", "add", &end, "type", "veth", "peer", "name", &port]);
            ip(&["link", "set", &end, "netns", ns]);
            ip(&["link", "set", &port, "netns", b]);
            for cmd in [
                &["ip", "link", "set", "lo", "up"][..],
                &["ip", "addr", "add", &format!("{addr}/24"), "dev", &end],
                &["ip", "link", "set", &end, "up"],
                // AF_XDP sees offloaded (incomplete) checksums otherwise.
                &["ethtool", "-K", &end, "tx", "off"],
            ] {
                in_netns(ns, cmd);
            }
            in_netns(b, &["ip", "link", "set", &port, "up"]);
            in_netns(b, &["ethtool", "-K", &port, "tx", "off"]);
        }
        path
    }

    fn port(&self, side: &str) -> String {
        format!("{}{side}", self.base)
    }
}

impl Drop for Path {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// What the bottleneck did.
#[derive(Debug, Default)]
struct Forwarded {
    frames: u64,
    marked: u64,
    dropped: u64,
    peak: u64,
}

/// A raw port of the bottleneck: every frame in, frames out.
struct Port {
    fd: std::os::fd::OwnedFd,
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
}

impl Port {
    fn open(ifname: &str) -> Port {
        use std::os::fd::AsRawFd;
        let fd = softrnic_sys::packet_socket().expect("AF_PACKET (needs root)");
        // PACKET_IGNORE_OUTGOING: not what this port sends itself.
        softrnic_sys::set_int_option(fd.as_raw_fd(), libc::SOL_PACKET, 23, 1).unwrap();
        softrnic_sys::bind_packet(&fd, softrnic_sys::if_index(ifname).unwrap()).unwrap();
        Port {
            fd,
            bufs: vec![vec![0; 9216]; 32],
            lens: vec![0; 32],
        }
    }

    /// The frames that arrived, whole.
    fn receive(&mut self) -> Vec<Vec<u8>> {
        let n = softrnic_sys::recv_batch(&self.fd, &mut self.bufs, &mut self.lens).unwrap_or(0);
        (0..n)
            .filter(|&i| self.lens[i] <= self.bufs[i].len())
            .map(|i| self.bufs[i][..self.lens[i]].to_vec())
            .collect()
    }

    fn send(&self, frames: &[&[u8]]) {
        let _ = softrnic_sys::send_batch(&self.fd, frames);
    }
}

/// Runs the bottleneck in namespace `ns` until `stop`: frames from `from` leave on `to` at
/// `rate` bytes a second from a queue of at most `limit` bytes, marked by `red` as they
/// leave; frames the other way pass at once.
fn bottleneck(
    ns: &str,
    from: &str,
    to: &str,
    rate: f64,
    red: Red,
    limit: u64,
    stop: &AtomicBool,
) -> Forwarded {
    softrnic_sys::enter_netns(&format!("/var/run/netns/{ns}")).expect("enter the namespace");
    let (mut inbound, mut outbound) = (Port::open(from), Port::open(to));
    let mut rng = softrnic_emu_core::Rng::new(7);
    let mut queue: VecDeque<Vec<u8>> = VecDeque::new();
    let (mut queued, mut free_at, mut looked) = (0u64, Instant::now(), Instant::now());
    let mut done = Forwarded::default();
    while !stop.load(Ordering::Relaxed) {
        let arrived = inbound.receive();
        let mut moved = !arrived.is_empty();
        for f in arrived {
            if queued + f.len() as u64 > limit {
                done.dropped += 1;
            } else {
                queued += f.len() as u64;
                done.peak = done.peak.max(queued);
                queue.push_back(f);
            }
        }
        // The way back is not the bottleneck.
        let back = outbound.receive();
        moved |= !back.is_empty();
        inbound.send(&back.iter().map(Vec::as_slice).collect::<Vec<_>>());
        let now = Instant::now();
        // An idle link does not save up time to send a burst later. A forwarder that did not
        // get the CPU (a busy machine) did not idle its link, though: what arrived meanwhile
        // waited in the socket, and the link's time since the forwarder last looked was theirs.
        let idle_from = looked.min(now - Duration::from_micros(200));
        looked = now;
        let mut out = Vec::new();
        while now >= free_at
            && let Some(mut f) = queue.pop_front()
        {
            if rng.chance(red.probability(queued)) && mark_ce(&mut f) {
                done.marked += 1;
            }
            queued -= f.len() as u64;
            free_at = free_at.max(idle_from) + Duration::from_secs_f64(f.len() as f64 / rate);
            out.push(f);
        }
        done.frames += out.len() as u64;
        moved |= !out.is_empty();
        outbound.send(&out.iter().map(Vec::as_slice).collect::<Vec<_>>());
        if !moved {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    done
}

/// A counter of `softrnic stat` on `host`.
fn counter(host: &Host, name: &str) -> u64 {
    let out = host.softrnic(&["stat"]).output().unwrap();
    let want = format!("{name}: ");
    text(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix(&want).map(|v| v.parse().unwrap()))
        .unwrap_or_else(|| panic!("no {name} in softrnic stat"))
}

#[test]
fn two_senders_share_a_marking_bottleneck_and_the_cnp_counters_move() {
    let _serial = serial();
    let path = Path::new();
    // 100 Mb/s, RED as DCQCN's paper sets a switch up (Kmin 5 KB, Kmax 200 KB, Pmax 1%), a
    // 1 MB queue.
    let red = Red {
        kmin: 5_000,
        kmax: 200_000,
        pmax: 0.01,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let forwarder = {
        let (ns, from, to, stop) = (
            path.ns[1].clone(),
            path.port("s1"),
            path.port("r1"),
            stop.clone(),
        );
        std::thread::spawn(move || bottleneck(&ns, &from, &to, 12.5e6, red, 1 << 20, &stop))
    };
    let receiver = Host::start("ccr", Some(&path.ns[2]), Some(&path.port("r0")));
    let senders = Host::start("ccs", Some(&path.ns[0]), Some(&path.port("s0")));
    // The senders' line rate is their link's, as a NIC's is.
    let set = senders
        .softrnic(&["dcqcn", "srnic0", "line_rate=1000"])
        .output()
        .unwrap();
    assert!(set.status.success(), "{}", text(&set.stderr));
    let s = Setup {
        hosts: vec![receiver, senders],
        server_addr: "198.18.3.2",
        pair: None,
        devices: None,
    };
    let counters = |h: &Host| {
        [
            "np_ecn_marked_roce_packets",
            "np_cnp_sent",
            "rp_cnp_handled",
        ]
        .map(|c| counter(h, c))
    };
    let (r0, s0) = (counters(s.server()), counters(s.client()));
    // Two WRITE streams at once, 5 s each, through the bottleneck.
    let args = ["ib_write_bw", "-D", "5", "-s", "65536", "-F"];
    let rates: Vec<f64> = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| s.run("-x", &args).1))
            .collect();
        runs.into_iter()
            .map(|r| perftest_row(&r.join().unwrap())[3])
            .collect()
    });
    stop.store(true, Ordering::Relaxed);
    let forwarded = forwarder.join().unwrap();
    let (r1, s1) = (counters(s.server()), counters(s.client()));
    let [marked, cnps, handled] = [r1[0] - r0[0], r1[1] - r0[1], s1[2] - s0[2]];
    eprintln!(
        "rates {rates:?} MB/s; {forwarded:?}; marked {marked}, CNPs {cnps}, handled {handled}"
    );
    // The bottleneck marked, the receiver saw the marks and sent CNPs, the senders acted on
    // them, and the queue never overflowed.
    assert!(forwarded.marked > 0 && marked > 0, "{forwarded:?}");
    assert!(marked <= forwarded.marked);
    assert!(
        cnps > 0 && handled > 0 && handled <= cnps,
        "CNPs {cnps}, handled {handled}"
    );
    assert_eq!(forwarded.dropped, 0, "{forwarded:?}");
    // Both got through and neither starved: each at least a third of the two together, and
    // together no more than the bottleneck (12.5 MB/s).
    let total: f64 = rates.iter().sum();
    assert!(total > 3.0 && total < 13.0, "{rates:?}");
    assert!(rates.iter().all(|&r| r > total / 3.0), "{rates:?}");
}
