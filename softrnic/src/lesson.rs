//! Lessons and `softrnic simulate`: two hosts, A (198.18.0.1) and B (198.18.0.2), each with an
//! RC QP, running softrnic's engine over the deterministic simulated network in virtual time.
//! Work is posted at A; faults are chosen (a packet dropped, random loss, reordering,
//! duplication) or drawn from the seed, so a run replays exactly. Every port is captured, so
//! the capture shows each packet leaving and arriving, and a lost one leaving only.

use crate::capture::{CapturedFrame, Direction};
use crate::conversation::{self, Analysis};
use softrnic_emu_core::{Access, Counters, Mtu, Origin, QpType, Remote, SendOp, Sge, Wc};
use softrnic_link::sim::{Fate, Faults, LinkSpec, Pair, Sent, Settings};
use softrnic_wire::Opcode;
use std::fmt::Write;
use std::time::Duration;

/// The operations `simulate` posts at A.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// SEND into a receive buffer posted at B.
    Send,
    /// RDMA WRITE into B's buffer.
    Write,
    /// RDMA READ of B's buffer.
    Read,
    /// Compare and swap on an 8-byte counter at B (compare 0, swap 1).
    CompareSwap,
    /// Fetch and add 1 on an 8-byte counter at B.
    FetchAdd,
}

impl Op {
    /// The operation by its command-line name.
    pub fn from_name(name: &str) -> Option<Op> {
        Some(match name {
            "send" => Op::Send,
            "write" => Op::Write,
            "read" => Op::Read,
            "cas" | "compare-swap" => Op::CompareSwap,
            "fadd" | "fetch-add" => Op::FetchAdd,
            _ => return None,
        })
    }
}

/// Which packet a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The Nth packet sent (from 1, both directions counted).
    Nth(usize),
    /// The first packet of this opcode.
    Opcode(Opcode),
}

impl Pick {
    /// `N` or an opcode name (`RC_SEND_MIDDLE`, or `SEND_MIDDLE` for RC).
    pub fn parse(s: &str) -> Result<Pick, String> {
        if let Ok(n) = s.parse::<usize>() {
            return if n == 0 {
                Err("packets are counted from 1".into())
            } else {
                Ok(Pick::Nth(n))
            };
        }
        let want = s.to_ascii_uppercase();
        softrnic_wire::opcode::TABLE
            .iter()
            .find(|i| i.name == want || i.name == format!("RC_{want}"))
            .map(|i| Pick::Opcode(i.opcode))
            .ok_or_else(|| format!("{s}: neither a packet number nor an opcode name"))
    }
}

/// Counts the packets sent, to tell for each which picks name it.
#[derive(Default)]
struct Picker {
    sent: usize,
    seen: Vec<Opcode>,
}

impl Picker {
    /// The next packet sent: whether any of `picks` names it (the Nth sent, or the first of
    /// its opcode).
    fn hits(&mut self, s: &Sent, picks: &[&[Pick]]) -> Vec<bool> {
        self.sent += 1;
        let first = !self.seen.contains(&s.opcode);
        if first {
            self.seen.push(s.opcode);
        }
        picks
            .iter()
            .map(|p| {
                p.iter().any(|d| match *d {
                    Pick::Nth(k) => k == self.sent,
                    Pick::Opcode(op) => op == s.opcode && first,
                })
            })
            .collect()
    }
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The operations, posted in this order, each `count` times.
    pub ops: Vec<Op>,
    /// Bytes per SEND, WRITE or READ.
    pub size: usize,
    /// How many times each operation is posted.
    pub count: usize,
    /// The path MTU.
    pub mtu: Mtu,
    /// Everything random comes from it.
    pub seed: u64,
    /// Packets to lose.
    pub drop: Vec<Pick>,
    /// Packets the network delivers twice.
    pub twice: Vec<Pick>,
    /// Packets a congested switch marks CE (A sends ECN-capable, ECT(0), when any are).
    pub mark: Vec<Pick>,
    /// Random loss, duplication and reordering, as probabilities.
    pub faults: Faults,
    /// A's first PSN.
    pub first_psn: u32,
    /// B posts its receive buffers this many microseconds late (an RNR NAK until then).
    pub late_receive_us: Option<u64>,
    /// The ACK timeout exponent: 4.096 µs × 2^timeout (IBA 9.7.6.1.3).
    pub timeout: u8,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            ops: vec![Op::Send],
            size: 3000,
            count: 1,
            mtu: Mtu::M1024,
            seed: 1,
            drop: Vec::new(),
            twice: Vec::new(),
            mark: Vec::new(),
            faults: Faults::default(),
            first_psn: 0,
            late_receive_us: None,
            timeout: 4,
        }
    }
}

/// What a run did.
#[derive(Debug)]
pub struct Outcome {
    /// Every port's capture, in time order: what `-w` writes.
    pub frames: Vec<CapturedFrame>,
    /// The conversation.
    pub analysis: Analysis,
    /// The simulator's own record of each packet sent and what the link did with it.
    pub trace: Vec<Sent>,
    /// Completions at A and at B.
    pub completions: [Vec<Wc>; 2],
    /// Counters of A and B.
    pub counters: [Counters; 2],
    /// The rate DCQCN holds A's and B's QPs to at the end, in Mb/s, if it does.
    pub rates: [Option<f64>; 2],
    /// A's rate over the run, each time it changed: (ns, Mb/s; the line rate while A is not
    /// limited). Empty if A was never limited.
    pub rate_trace: Vec<(u64, f64)>,
    /// Whether the bytes landed as sent (SEND, WRITE, READ) and atomics acted once.
    pub data_ok: bool,
    /// A line on what was checked.
    pub data: String,
}

const HOSTS: [&str; 2] = ["A", "B"];
/// The simulated link's rate (LinkSpec's default 1250 bytes a microsecond), which DCQCN starts
/// from and returns to.
const LINE_RATE_MBPS: f64 = 10_000.0;
const RW: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);
/// Virtual time starts here, so captures have plausible dates: 2026-01-01T00:00:00Z.
const EPOCH: Duration = Duration::from_secs(1_767_225_600);

/// Runs the options' work between A and B.
pub fn simulate(o: &Options) -> Result<Outcome, String> {
    if o.ops.is_empty() || o.count == 0 {
        return Err("nothing to do: give an operation and a count of at least 1".into());
    }
    let settings = Settings {
        mtu: o.mtu,
        timeout: o.timeout,
        traffic_class: if o.mark.is_empty() { 0 } else { 2 },
        ..Settings::default()
    };
    let link = LinkSpec {
        faults: o.faults,
        ..LinkSpec::default()
    };
    let mut p = Pair::with(QpType::Rc, settings, o.seed, link, [o.first_psn, 0x500]);
    p.sim.capture = true;
    for h in &mut p.sim.hosts {
        h.engine.set_dcqcn(softrnic_emu_core::Dcqcn {
            line_rate_mbps: LINE_RATE_MBPS,
            ..Default::default()
        });
    }
    let (drops, twice) = (o.drop.clone(), o.twice.clone());
    let mut picker = Picker::default();
    p.sim.hook = Some(Box::new(move |s: &Sent| {
        match picker.hits(s, &[&drops, &twice])[..] {
            [true, _] => Some(Fate::Dropped),
            [_, true] => Some(Fate::Duplicated),
            _ => None,
        }
    }));
    let mark = o.mark.clone();
    let mut picker = Picker::default();
    p.sim.congested = Some(Box::new(move |s: &Sent| picker.hits(s, &[&mark])[0]));

    let n = o.size.max(1);
    let rounds = o.count;
    let (src, lkey) = patterned(&mut p, 0, n * rounds, sent_byte)?;
    // READs fetch a buffer of B's own bytes into one of A's.
    let (dst, rkey) = p.buf(1, n * rounds, 0, RW);
    let (rsrc, rsrc_key) = patterned(&mut p, 1, n * rounds, held_byte)?;
    let (rdst, rdst_key) = p.buf(0, n * rounds, 0, RW);
    let (ctr, ctr_key) = p.buf(1, 8, 0, RW);
    let (orig, orig_key) = p.buf(0, 8 * rounds * o.ops.len(), 0, RW);
    let sends = rounds * o.ops.iter().filter(|&&op| op == Op::Send).count();
    let (rbuf, rbuf_key) = p.buf(1, n * sends.max(1), 0, RW);
    let sge = |addr: u64, len: usize, lkey: u32| {
        vec![Sge {
            addr,
            length: len as u32,
            lkey,
        }]
    };
    let post_receives = |p: &mut Pair| {
        for r in 0..sends {
            p.recv(100 + r as u64, sge(rbuf + (r * n) as u64, n, rbuf_key));
        }
    };
    if o.late_receive_us.is_none() {
        post_receives(&mut p);
    }
    let mut wr_id = 1;
    for r in 0..rounds {
        for (k, &op) in o.ops.iter().enumerate() {
            let at = (r * n) as u64;
            let remote = Remote {
                addr: dst + at,
                rkey,
            };
            let counter = Remote {
                addr: ctr,
                rkey: ctr_key,
            };
            let result = orig + 8 * (r * o.ops.len() + k) as u64;
            let (wr, sgl) = match op {
                Op::Send => (SendOp::Send, sge(src + at, n, lkey)),
                Op::Write => (SendOp::Write(remote), sge(src + at, n, lkey)),
                Op::Read => {
                    let from = Remote {
                        addr: rsrc + at,
                        rkey: rsrc_key,
                    };
                    (SendOp::Read(from), sge(rdst + at, n, rdst_key))
                }
                Op::CompareSwap => (
                    SendOp::CompareSwap {
                        remote: counter,
                        compare: 0,
                        swap: 1,
                    },
                    sge(result, 8, orig_key),
                ),
                Op::FetchAdd => (
                    SendOp::FetchAdd {
                        remote: counter,
                        add: 1,
                    },
                    sge(result, 8, orig_key),
                ),
            };
            p.send(wr_id, wr, sgl);
            wr_id += 1;
        }
    }
    if let Some(us) = o.late_receive_us {
        let at = us * 1000;
        p.sim.alarm = Some(at);
        p.sim.run_until(1_000_000, |s| s.now >= at)?;
        post_receives(&mut p);
    }
    // A's rate, sampled as the run goes.
    let mut rate_trace: Vec<(u64, f64)> = vec![(0, LINE_RATE_MBPS)];
    let mut steps = 0;
    while p.sim.step() {
        let rate = p.sim.hosts[0].engine.qp_rate(p.qp[0]);
        let rate = rate.unwrap_or(LINE_RATE_MBPS);
        if rate_trace.last().is_some_and(|&(_, r)| r != rate) {
            rate_trace.push((p.sim.now, rate));
        }
        steps += 1;
        if steps == 1_000_000 {
            return Err(format!("still busy after {steps} steps"));
        }
    }
    // The plot ends with A's last packet (later, only timers run out).
    let last_sent = p
        .sim
        .trace
        .iter()
        .filter(|s| s.from == 0)
        .map(|s| s.at)
        .max();
    match (rate_trace.len(), last_sent) {
        (1, _) | (_, None) => rate_trace.clear(),
        (_, Some(at)) => {
            let rate = rate_trace.last().expect("two").1;
            rate_trace.retain(|&(t, _)| t <= at);
            rate_trace.push((at, rate));
        }
    }

    let completions = [p.poll(0), p.poll(1)];
    let rates = [0, 1].map(|h| p.sim.hosts[h].engine.qp_rate(p.qp[h]));
    let counters = [p.counters(0), p.counters(1)];
    let (data_ok, data) = check_data(&p, o, (dst, rbuf, rdst, ctr));
    let frames: Vec<CapturedFrame> = p
        .sim
        .seen
        .iter()
        .map(|s| CapturedFrame {
            direction: Some(if s.outbound {
                Direction::Out
            } else {
                Direction::In
            }),
            interface: Some(HOSTS[s.host].to_string()),
            ..CapturedFrame::new(EPOCH + Duration::from_nanos(s.at), s.frame.clone())
        })
        .collect();
    let known = conversation::Known {
        mtu: Some(o.mtu.bytes() as usize),
        complete: true,
    };
    let analysis = conversation::analyse(&frames, known);
    Ok(Outcome {
        frames,
        analysis,
        trace: p.sim.trace.clone(),
        completions,
        counters,
        rates,
        rate_trace,
        data_ok,
        data,
    })
}

/// Byte `i` of what A sends or writes.
fn sent_byte(i: usize) -> u8 {
    (i * 7 + 1) as u8
}

/// Byte `i` of what B holds for A to read.
fn held_byte(i: usize) -> u8 {
    (i * 5 + 3) as u8
}

/// A buffer of `len` bytes on host `h`, registered, holding `byte(i)` at `i`.
fn patterned(
    p: &mut Pair,
    h: usize,
    len: usize,
    byte: fn(usize) -> u8,
) -> Result<(u64, u32), String> {
    let (addr, key) = p.buf(h, len, 0, RW);
    let mem = p.sim.hosts[h].engine.memory_mut();
    let b = mem.slice_mut(addr, len).map_err(|e| format!("{e:?}"))?;
    for (i, x) in b.iter_mut().enumerate() {
        *x = byte(i);
    }
    Ok((addr, key))
}

/// Checks what landed: B's receive buffers or memory hold what A sent, A holds what it read,
/// and the counter moved once per atomic that succeeded.
fn check_data(
    p: &Pair,
    o: &Options,
    (dst, rbuf, rdst, ctr): (u64, u64, u64, u64),
) -> (bool, String) {
    let n = o.size.max(1);
    let len = n * o.count;
    let mut checks = Vec::new();
    let mut ok = true;
    let sent: Vec<u8> = (0..len).map(sent_byte).collect();
    if o.ops.contains(&Op::Write) {
        let good = p.bytes(1, dst, len) == sent;
        ok &= good;
        checks.push(format!(
            "WRITE data at B {}",
            if good { "as sent" } else { "WRONG" }
        ));
    }
    if o.ops.iter().filter(|&&op| op == Op::Send).count() == 1 {
        let good = p.bytes(1, rbuf, len) == sent;
        ok &= good;
        checks.push(format!(
            "SEND data at B {}",
            if good { "as sent" } else { "WRONG" }
        ));
    }
    if o.ops.contains(&Op::Read) {
        let want: Vec<u8> = (0..len).map(held_byte).collect();
        let good = p.bytes(0, rdst, len) == want;
        ok &= good;
        checks.push(format!(
            "READ data at A {}",
            if good { "as B held it" } else { "WRONG" }
        ));
    }
    let atomics = o
        .ops
        .iter()
        .filter(|op| matches!(op, Op::CompareSwap | Op::FetchAdd))
        .count()
        * o.count;
    if atomics > 0 {
        let value = u64::from_ne_bytes(p.bytes(1, ctr, 8).try_into().unwrap_or([0; 8]));
        let adds = o.ops.iter().filter(|&&op| op == Op::FetchAdd).count() * o.count;
        let swaps = o.ops.contains(&Op::CompareSwap);
        // Each FETCH_ADD adds 1; a COMPARE_SWAP (0 -> 1) acts only on a counter still 0.
        let good = if swaps && adds == 0 {
            value == 1
        } else {
            value >= adds as u64 && value <= adds as u64 + 1
        };
        ok &= good;
        checks.push(format!(
            "counter at B {value} after {atomics} atomic{} ({})",
            if atomics == 1 { "" } else { "s" },
            if good { "each executed once" } else { "WRONG" }
        ));
    }
    (ok, checks.join("; "))
}

/// A lesson: a name, what it shows, and the run that shows it.
#[derive(Debug, Clone, Copy)]
pub struct Lesson {
    /// Its name on the command line.
    pub name: &'static str,
    /// One line.
    pub title: &'static str,
    /// What to look for.
    pub explain: &'static str,
}

/// Every lesson.
pub const LESSONS: &[Lesson] = &[
    Lesson {
        name: "go-back-n",
        title: "a lost packet, a sequence NAK, and go-back-N",
        explain: "A sends a 3000-byte SEND as three packets (path MTU 1024). The middle one is lost. \
B expected PSN 1 and sees PSN 2: it answers with a NAK (PSN sequence error) that carries the PSN it \
expected, and drops everything until that PSN comes. A goes back to that PSN and sends from there: \
RoCE has no selective acknowledgement, so everything after the loss is sent again (go-back-N).",
    },
    Lesson {
        name: "ack-timeout",
        title: "a lost ACK, the ACK timeout, and a duplicate request",
        explain: "A sends a SEND; B's ACK is lost. A waits its local ACK timeout \
(4.096 µs × 2^timeout, here timeout 4: 65.5 µs) and sends the request again. B has it already: a \
duplicate is not delivered twice, only acknowledged again.",
    },
    Lesson {
        name: "rnr",
        title: "receiver not ready: an RNR NAK and its retry",
        explain: "A sends before B has posted a receive buffer. B cannot take the SEND and answers \
with an RNR NAK, which says how long to wait (its RNR timer). A waits and retries; when B has posted \
its buffer, the SEND lands. RNR is flow control, like TCP's zero window, not a loss.",
    },
    Lesson {
        name: "read",
        title: "an RDMA READ: one request, a response per path MTU",
        explain: "A reads 3000 bytes of B's memory. The request carries no data; it takes one PSN per \
response packet (3 at path MTU 1024), and B answers with READ RESPONSE FIRST, MIDDLE and LAST at those \
PSNs, the first and last with an AETH. No ACK: the responses are the acknowledgement.",
    },
    Lesson {
        name: "implied-nak",
        title: "a lost READ response, found by the ACK after it (implied NAK)",
        explain: "A reads 8 bytes, then sends. B's READ response is lost, but its ACK of the SEND \
arrives: acknowledging a later PSN says the READ's response is not coming. A reads again from the \
READ's PSN (and resends the SEND after it, which B answers as a duplicate).",
    },
    Lesson {
        name: "atomic-replay",
        title: "a lost atomic answer, and the saved result replayed",
        explain: "A does a FETCH_ADD; B's ATOMIC ACKNOWLEDGE is lost. A times out and sends the atomic \
again. B must not add twice: it recognises the duplicate and answers from the result it saved \
(IBA 9.4.5). The counter ends at 1.",
    },
    Lesson {
        name: "duplicate-request",
        title: "a packet duplicated by the network",
        explain: "The network delivers A's WRITE twice. The second copy has a PSN B has already \
passed: B writes nothing again, but acknowledges it again so that A, if its first ACK was lost, \
learns. A's extra ACK acknowledges nothing new.",
    },
    Lesson {
        name: "cnp",
        title: "congestion: ECN marks and the CNP back to the sender",
        explain: "A sends ECN-capable packets (ECT(0)). A congested switch marks the SEND's three \
packets Congestion Experienced instead of dropping them. B's notification point answers with a CNP \
to A's QP (RoCEv2's CNP, Annex A17.9.3): it goes from the receiver of the marked packets back to \
their sender, at most one per QP every 4 µs (mlx5's min_time_between_cnps), so three marks close \
together give one CNP. A's reaction point (DCQCN) halves its rate and paces what it sends next; \
the rate climbs back on DCQCN's timer and byte counter while no CNP comes.",
    },
    Lesson {
        name: "dcqcn",
        title: "DCQCN: CNPs cut the sender's rate, and it climbs back",
        explain: "A WRITEs 256 KiB as 64 packets (path MTU 4096) over a 10 Gb/s link. A congested \
switch marks A's first packets CE; B answers with CNPs, at most one every 4 µs. Each CNP cuts A's \
rate (DCQCN's reaction point: rate × (1 − alpha/2), alpha near 1 at first, at most one cut per \
4 µs), and A paces its packets to the rate: watch the gaps between them grow. Once the marks stop, \
the rate waits for an increase event: the timer's, 300 µs after the last cut, or the byte \
counter's, every 32 KiB sent. Each halves the distance back to the rate A had before the cuts \
(fast recovery); when it is back at the line rate, the limiter goes.",
    },
    Lesson {
        name: "psn-wrap",
        title: "PSNs wrap at 2^24",
        explain: "A's first PSN is 0xfffffe. A 4-packet SEND takes PSNs 0xfffffe, 0xffffff, 0 and 1: \
PSNs are 24 bits and compared in a window of 2^23, so 0 comes after 0xffffff.",
    },
];

/// A lesson's run.
pub fn lesson_options(name: &str) -> Option<Options> {
    let base = Options::default();
    Some(match name {
        "go-back-n" => Options {
            drop: vec![Pick::Opcode(Opcode::RcSendMiddle)],
            ..base
        },
        "ack-timeout" => Options {
            size: 64,
            drop: vec![Pick::Opcode(Opcode::RcAcknowledge)],
            ..base
        },
        "rnr" => Options {
            size: 64,
            late_receive_us: Some(30),
            ..base
        },
        "read" => Options {
            ops: vec![Op::Read],
            ..base
        },
        "implied-nak" => Options {
            ops: vec![Op::Read, Op::Send],
            size: 8,
            drop: vec![Pick::Opcode(Opcode::RcReadResponseOnly)],
            ..base
        },
        "atomic-replay" => Options {
            ops: vec![Op::FetchAdd],
            drop: vec![Pick::Opcode(Opcode::RcAtomicAcknowledge)],
            ..base
        },
        "duplicate-request" => Options {
            ops: vec![Op::Write],
            size: 64,
            twice: vec![Pick::Opcode(Opcode::RcWriteOnly)],
            ..base
        },
        "cnp" => Options {
            mark: vec![Pick::Nth(1), Pick::Nth(2), Pick::Nth(3)],
            ..base
        },
        "dcqcn" => Options {
            ops: vec![Op::Write],
            size: 64 * 1024,
            count: 4,
            mtu: Mtu::M4096,
            mark: (1..=12).map(Pick::Nth).collect(),
            // 16.8 ms: a paced packet must not look lost.
            timeout: 12,
            ..base
        },
        "psn-wrap" => Options {
            size: 3500,
            first_psn: 0xff_fffe,
            ..base
        },
        _ => return None,
    })
}

/// A's rate at `rows` times evenly over the trace: (µs, Mb/s).
fn rate_rows(trace: &[(u64, f64)], rows: usize) -> Vec<(f64, f64)> {
    let end = trace.last().map_or(0, |&(t, _)| t).max(1);
    (0..=rows)
        .map(|i| {
            let t = end * i as u64 / rows as u64;
            let rate = trace
                .iter()
                .take_while(|&&(at, _)| at <= t)
                .last()
                .map_or(LINE_RATE_MBPS, |&(_, r)| r);
            (t as f64 / 1000.0, rate)
        })
        .collect()
}

/// A's rate as a text chart: a row per sample, a bar as long as the rate.
fn rate_text(trace: &[(u64, f64)]) -> String {
    let mut out = String::new();
    for (us, rate) in rate_rows(trace, 16) {
        let bar = (rate / LINE_RATE_MBPS * 40.0).round() as usize;
        let _ = writeln!(out, "  {us:>8.1} µs {rate:>6.0} {}", "█".repeat(bar));
    }
    out
}

/// A's rate over the run as an SVG step plot.
pub fn rate_svg(trace: &[(u64, f64)]) -> String {
    const W: f64 = 700.0;
    const H: f64 = 200.0;
    let end = trace.last().map_or(1, |&(t, _)| t).max(1) as f64;
    let x = |t: u64| 60.0 + W * t as f64 / end;
    let y = |r: f64| 20.0 + H * (1.0 - r / LINE_RATE_MBPS);
    let mut points = Vec::new();
    for (i, &(t, r)) in trace.iter().enumerate() {
        if i > 0 {
            points.push(format!("{:.1},{:.1}", x(t), y(trace[i - 1].1)));
        }
        points.push(format!("{:.1},{:.1}", x(t), y(r)));
    }
    format!(
        "<svg class=\"rate\" xmlns=\"http://www.w3.org/2000/svg\" width=\"800\" height=\"250\" viewBox=\"0 0 800 250\">\
<rect x=\"60\" y=\"20\" width=\"{W}\" height=\"{H}\" fill=\"none\" stroke=\"#999\"/>\
<text x=\"55\" y=\"28\" text-anchor=\"end\" font-size=\"11\">{LINE_RATE_MBPS:.0}</text>\
<text x=\"55\" y=\"{}\" text-anchor=\"end\" font-size=\"11\">0</text>\
<text x=\"60\" y=\"240\" font-size=\"11\">0 µs</text>\
<text x=\"{}\" y=\"240\" text-anchor=\"end\" font-size=\"11\">{:.1} µs</text>\
<text x=\"410\" y=\"14\" text-anchor=\"middle\" font-size=\"12\">A's rate (DCQCN), Mb/s</text>\
<polyline fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"2\" points=\"{}\"/></svg>",
        20.0 + H,
        60.0 + W,
        end / 1000.0,
        points.join(" ")
    )
}

/// The run's page: its ladder page, with A's rate plot above the fields when DCQCN held it.
pub fn page(o: &Outcome, name: &str) -> String {
    let page = crate::ladder::html(&o.analysis, name);
    if o.rate_trace.is_empty() {
        return page;
    }
    let plot = format!("<h2>A's rate</h2>\n{}\n", rate_svg(&o.rate_trace));
    match page.find("<div id=\"fields\">") {
        Some(at) => format!("{}{plot}{}", &page[..at], &page[at..]),
        None => page,
    }
}

/// What `lesson` and `simulate` print: the ladder, the narration, completions, counters.
pub fn report(o: &Outcome, intro: Option<&Lesson>) -> String {
    let mut out = String::new();
    if let Some(l) = intro {
        let _ = writeln!(out, "Lesson {}: {}\n", l.name, l.title);
        let _ = writeln!(out, "{}\n", l.explain);
    }
    let _ = writeln!(out, "A is 198.18.0.1, B is 198.18.0.2.\n");
    out.push_str(&crate::ladder::text(&o.analysis));
    let _ = writeln!(out, "What happened:");
    for p in &o.analysis.packets {
        if p.notes.is_empty() {
            continue;
        }
        let who = |ip: &str| if ip == "198.18.0.1" { "A" } else { "B" };
        let notes: Vec<&str> = p.notes.iter().map(|n| n.text.as_str()).collect();
        let _ = writeln!(
            out,
            "  frame {} ({} > {}, {}): {}",
            p.number,
            who(&p.src),
            who(&p.dst),
            crate::ladder::label(p),
            notes.join("; ")
        );
    }
    let _ = writeln!(out, "\nCompletions:");
    for (h, wcs) in o.completions.iter().enumerate() {
        for w in wcs {
            let _ = writeln!(
                out,
                "  {}: wr {} {:?} {:?}, {} bytes",
                HOSTS[h], w.wr_id, w.opcode, w.status, w.byte_len
            );
        }
    }
    let _ = writeln!(out, "Data: {}", o.data);
    for (h, r) in o.rates.iter().enumerate() {
        if let Some(r) = r {
            let _ = writeln!(
                out,
                "Rate: {}'s QP is held to {r:.0} Mb/s by DCQCN (line rate {LINE_RATE_MBPS:.0})",
                HOSTS[h]
            );
        }
    }
    if !o.rate_trace.is_empty() {
        let _ = writeln!(out, "A's rate over time (DCQCN), Mb/s:");
        out.push_str(&rate_text(&o.rate_trace));
    }
    let _ = writeln!(out, "Counters that moved:");
    for (h, c) in o.counters.iter().enumerate() {
        let moved: Vec<String> = c
            .iter()
            .filter(|&(_, v)| v > 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(out, "  {}: {}", HOSTS[h], moved.join(", "));
    }
    // What each counter that moved counts: `rnr_nak_retry_err` in a lesson that succeeds reads
    // as a failure without it.
    let moved = |name: &str| {
        o.counters
            .iter()
            .flat_map(Counters::iter)
            .any(|(n, v)| n == name && v > 0)
    };
    let _ = writeln!(out, "What they count:");
    for (name, origin, what) in Counters::described().filter(|&(n, _, _)| moved(n)) {
        let whose = match origin {
            Origin::Rxe => "rxe's name",
            Origin::Mlx5 => "mlx5's name",
            Origin::Both => "rxe's and mlx5's name",
            Origin::Softrnic => "softrnic's own",
        };
        let _ = writeln!(out, "  {name} ({whose}): {what}");
    }
    out
}
