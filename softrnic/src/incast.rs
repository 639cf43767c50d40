//! Incast on the simulated network: N senders WRITE to one receiver at once, through one switch
//! whose port to the receiver is the bottleneck. The switch marks ECN (RED) and, if asked,
//! pauses its feeders (PFC); the senders run DCQCN or not. Each run gives its figures
//! (utilisation, peak queue, drops, fairness) and samples over time for a plot.

use std::fmt::Write as _;

use softrnic_emu_core::{
    Access, Dcqcn, QpCap, QpInit, QpType, Remote, SendFlags, SendOp, SendWr, Sge, Wc, WcOpcode,
    WcStatus,
};
use softrnic_link::sim::{LinkSpec, Pfc, Red, Settings, Sim, SwitchSpec};

/// What one run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// Senders, each with one RC QP to the receiver.
    pub senders: usize,
    /// Whether the senders react to CNPs (DCQCN's reaction point); without it they send
    /// Not-ECT and nothing is marked.
    pub dcqcn: bool,
    /// Whether the switch pauses its feeders (PFC).
    pub pfc: bool,
    /// How long the senders keep sending, in microseconds of virtual time.
    pub duration_us: u64,
    /// Everything random comes from it.
    pub seed: u64,
    /// Bytes the bottleneck's queue holds (PFC's thresholds are set below it, leaving room
    /// for what is on the wire).
    pub buffer: u64,
}

impl Default for Setup {
    /// 8 senders with DCQCN, no PFC, for 5 ms, seed 1, a 1 MiB queue.
    fn default() -> Setup {
        Setup {
            senders: 8,
            dcqcn: true,
            pfc: false,
            duration_us: 5_000,
            seed: 1,
            buffer: 1024 * 1024,
        }
    }
}

/// The link: 10 Gb/s ports, 1 µs from a host to the switch.
pub const LINK: LinkSpec = LinkSpec {
    latency_ns: 2_000,
    bytes_per_us: 1250,
    faults: softrnic_link::sim::Faults::NONE,
};

/// The switch: marking as DCQCN's paper sets it up (Kmin 5 KB, Kmax 200 KB, Pmax 1%), and
/// with PFC an XOFF that leaves room above it for what each sender has on the wire when it is
/// paused: a round trip's bytes and two full-size frames (802.1Qbb's headroom).
pub fn switch(setup: Setup) -> SwitchSpec {
    let round_trip = LINK.latency_ns * LINK.bytes_per_us / 1000;
    let headroom = setup.senders as u64 * (round_trip + 2 * FRAME);
    let xoff = setup.buffer.saturating_sub(headroom);
    SwitchSpec {
        buffer: setup.buffer,
        red: Some(Red {
            kmin: 5_000,
            kmax: 200_000,
            pmax: 0.01,
        }),
        pfc: setup.pfc.then_some(Pfc {
            xoff,
            xon: xoff.saturating_sub(2 * FRAME),
        }),
    }
}

/// A full-size frame at the path MTU (1024) with its headers.
const FRAME: u64 = 1100;

/// Each WRITE's size, and how many each sender keeps outstanding.
const WRITE: usize = 64 * 1024;
const OUTSTANDING: usize = 4;

/// The time over which rates and fairness are sampled, in microseconds.
pub const BIN_US: u64 = 100;

/// One sample: the bottleneck over one bin.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The bin's start, in microseconds.
    pub at_us: u64,
    /// The most bytes queued at the bottleneck in the bin.
    pub queue: u64,
    /// Each sender's rate through the bottleneck, in Gb/s.
    pub rates: Vec<f64>,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// The run.
    pub setup: Setup,
    /// The bottleneck's busy share of the run (every frame, retransmissions too).
    pub utilisation: f64,
    /// WRITE bytes completed while the senders sent, as a share of what the bottleneck could
    /// carry.
    pub goodput: f64,
    /// The most bytes ever queued at the bottleneck.
    pub peak_queue: u64,
    /// Frames the switch dropped.
    pub dropped: u64,
    /// Frames it marked CE.
    pub marked: u64,
    /// PAUSEs it sent.
    pub pauses: u64,
    /// CNPs the receiver sent.
    pub cnps: u64,
    /// Packets the senders sent again (go-back-N).
    pub retransmitted: u64,
    /// Retransmissions started by the ACK timer.
    pub timeouts: u64,
    /// Senders whose QP failed: transport retries exceeded.
    pub failed: usize,
    /// Jain's fairness index of the senders' bytes completed while sending (1: all equal; 1/N:
    /// one took all).
    pub jain: f64,
    /// Over time.
    pub samples: Vec<Sample>,
}

/// Jain's fairness index of `x`: (Σx)² / (n·Σx²).
pub fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares == 0.0 {
        return 1.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

/// Runs one incast. Host 0 receives; hosts 1 to N send.
pub fn run(setup: Setup) -> Result<Figures, String> {
    let n = setup.senders;
    if n == 0 || n > 200 {
        return Err("senders: 1 to 200".into());
    }
    let mut sim = Sim::new(setup.seed, n + 1, LINK);
    sim.add_switch(switch(setup));
    let dcqcn = Dcqcn {
        rp_enabled: setup.dcqcn,
        line_rate_mbps: (LINK.bytes_per_us * 8) as f64,
        ..Dcqcn::default()
    };
    let access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);
    let mut flows = Vec::new();
    for s in 1..=n {
        let mut qp = [0; 2];
        let mut cq = [0; 2];
        for (k, h) in [s, 0].into_iter().enumerate() {
            let e = &mut sim.hosts[h].engine;
            e.set_dcqcn(dcqcn);
            let pd = e.alloc_pd(0).map_err(|e| e.to_string())?;
            cq[k] = e.create_cq(64).map_err(|e| e.to_string())?;
            let init = QpInit::new(QpType::Rc, cq[k], QpCap::new(16, 1, 1));
            qp[k] = e.create_qp(pd, init).map_err(|e| e.to_string())?;
            let addr = e.memory_mut().alloc(WRITE);
            let key = e
                .reg_mr(pd, addr, WRITE as u64, access)
                .map_err(|e| e.to_string())?;
            if k == 0 {
                flows.push(Flow {
                    cq: cq[0],
                    qp: qp[0],
                    addr,
                    key,
                    remote: Remote { addr: 0, rkey: 0 },
                    done: 0,
                    done_by_end: 0,
                    posted: 0,
                    failed: false,
                });
            } else {
                flows.last_mut().expect("pushed").remote = Remote { addr, rkey: key };
            }
        }
        // perftest's ACK timeout, 67 ms: a queue of a few hundred microseconds must not look
        // like a loss.
        let settings = Settings {
            timeout: 14,
            ..Settings::default()
        };
        let (a, b) = (sim.endpoint(s, qp[0], 0), sim.endpoint(0, qp[1], 0));
        sim.connect(s, qp[0], 0, &b, &settings);
        sim.connect(0, qp[1], 0, &a, &settings);
    }
    let end = setup.duration_us * 1000;
    let mut failed = 0;
    let mut wcs = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 16];
    let mut keep_sending = |sim: &mut Sim| {
        for (i, f) in flows.iter_mut().enumerate() {
            let e = &mut sim.hosts[i + 1].engine;
            let got = e.poll_cq(f.cq, &mut wcs).unwrap_or(0);
            for w in &wcs[..got] {
                if w.status == WcStatus::Success {
                    f.done += 1;
                } else {
                    // Retries ran out (a go-back-N storm): the QP is in error, its WRs flushed.
                    f.failed = true;
                    failed += 1;
                }
            }
            if sim.now <= end {
                f.done_by_end = f.done;
            }
            while sim.now < end && !f.failed && f.posted - f.done < OUTSTANDING {
                let wr = SendWr {
                    wr_id: f.posted as u64,
                    op: SendOp::Write(f.remote),
                    sgl: vec![Sge {
                        addr: f.addr,
                        length: WRITE as u32,
                        lkey: f.key,
                    }],
                    flags: SendFlags::SIGNALED,
                    ud: None,
                    xrc_srqn: None,
                };
                if e.post_send(f.qp, wr).is_err() {
                    break;
                }
                f.posted += 1;
            }
        }
        sim.now >= end && flows.iter().all(|f| f.failed || f.done == f.posted)
    };
    sim.run_until(50_000_000, &mut keep_sending)?;
    Ok(figures(&sim, setup, &flows))
}

/// One sender's QP, its buffer, and the WRITEs it posted and saw complete.
#[derive(Debug)]
struct Flow {
    cq: u32,
    qp: u32,
    addr: u64,
    key: u32,
    remote: Remote,
    posted: usize,
    done: usize,
    /// Completed while the senders were sending.
    done_by_end: usize,
    /// Whether a WRITE failed (transport retries exceeded), taking the QP to error.
    failed: bool,
}

fn figures(sim: &Sim, setup: Setup, flows: &[Flow]) -> Figures {
    let switch = sim.switch.as_ref().expect("a switch");
    let n = setup.senders;
    let to_receiver = || switch.log.iter().filter(|e| e.to == 0);
    // Figures cover the time the senders send; the plot goes on until the last WRITE is done.
    let span = setup.duration_us * 1000;
    let wire: u64 = to_receiver().filter(|e| e.at < span).map(|e| e.bytes).sum();
    let capacity = span as f64 * LINK.bytes_per_us as f64 / 1000.0;
    let bins = sim.now.div_ceil(BIN_US * 1000) as usize + 1;
    let mut samples: Vec<Sample> = (0..bins)
        .map(|b| Sample {
            at_us: b as u64 * BIN_US,
            queue: 0,
            rates: vec![0.0; n],
        })
        .collect();
    for e in to_receiver() {
        let s = &mut samples[(e.at / (BIN_US * 1000)) as usize];
        s.queue = s.queue.max(e.queued);
        s.rates[e.from - 1] += e.bytes as f64 * 8.0 / (BIN_US * 1000) as f64;
    }
    let counters = |h: usize| sim.hosts[h].engine.counters();
    let completed: Vec<f64> = flows
        .iter()
        .map(|f| (f.done_by_end * WRITE) as f64)
        .collect();
    Figures {
        setup,
        utilisation: wire as f64 / capacity,
        goodput: completed.iter().sum::<f64>() / capacity,
        peak_queue: switch.stats[0].peak,
        dropped: switch.stats.iter().map(|s| s.dropped).sum(),
        marked: switch.stats[0].marked,
        pauses: switch.stats[0].pauses,
        cnps: counters(0).np_cnp_sent,
        retransmitted: (1..=n).map(|h| counters(h).retransmitted_pkts).sum(),
        timeouts: (1..=n).map(|h| counters(h).local_ack_timeout_err).sum(),
        jain: jain(&completed),
        failed: flows.iter().filter(|f| f.failed).count(),
        samples,
    }
}

/// The figures as a table, one run per row.
pub fn table(runs: &[Figures]) -> String {
    let mut out = String::from(
        "senders  DCQCN  PFC   utilisation  goodput  peak queue  drops  marks  pauses   CNPs  resent  timeouts  failed   Jain\n",
    );
    let yes = |b: bool| if b { "on" } else { "off" };
    for f in runs {
        let s = f.setup;
        let _ = writeln!(
            out,
            "{:>7}  {:>5}  {:>3}  {:>10.1}%  {:>6.1}%  {:>7} KiB  {:>5}  {:>5}  {:>6}  {:>5}  {:>6}  {:>8}  {:>6}  {:>5.3}",
            s.senders,
            yes(s.dcqcn),
            yes(s.pfc),
            100.0 * f.utilisation,
            100.0 * f.goodput,
            f.peak_queue / 1024,
            f.dropped,
            f.marked,
            f.pauses,
            f.cnps,
            f.retransmitted,
            f.timeouts,
            f.failed,
            f.jain,
        );
    }
    out
}

/// One line of a run's figures, as its plot's heading.
fn heading(f: &Figures) -> String {
    let s = f.setup;
    let on = |b: bool| if b { "on" } else { "off" };
    format!(
        "{} senders, DCQCN {}, PFC {}: utilisation {:.1}%, goodput {:.1}%, peak queue {} KiB, {} drops, {} pauses, Jain {:.3}",
        s.senders,
        on(s.dcqcn),
        on(s.pfc),
        100.0 * f.utilisation,
        100.0 * f.goodput,
        f.peak_queue / 1024,
        f.dropped,
        f.pauses,
        f.jain
    )
}

/// The plots' size: each run a row of three, each plot this wide and tall inside its axes.
const PLOT_W: f64 = 360.0;
const PLOT_H: f64 = 110.0;
const ROW_H: f64 = 175.0;

/// One plot at (`x`, `y`) (its top left, inside the axes): `series` over the run's time, `top`
/// its largest value, with a title and the y axis's top label.
fn plot(out: &mut String, x: f64, y: f64, title: &str, top: f64, unit: &str, series: &[Vec<f64>]) {
    let _ = writeln!(
        out,
        "<text class=\"title\" x=\"{x}\" y=\"{}\">{title}</text><rect class=\"axes\" x=\"{x}\" y=\"{y}\" width=\"{PLOT_W}\" height=\"{PLOT_H}\"/><text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{top:.0}{unit}</text><text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>",
        y - 6.0,
        x - 4.0,
        y + 9.0,
        x - 4.0,
        y + PLOT_H,
    );
    for (k, values) in series.iter().enumerate() {
        let n = values.len().max(2) - 1;
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let px = x + PLOT_W * i as f64 / n as f64;
                let py = y + PLOT_H * (1.0 - (v / top.max(1e-9)).clamp(0.0, 1.0));
                format!("{px:.1},{py:.1}")
            })
            .collect();
        let hue = (k * 360 / series.len().max(1) + 200) % 360;
        let _ = writeln!(
            out,
            "<polyline class=\"series\" stroke=\"hsl({hue},70%,40%)\" points=\"{}\"/>",
            points.join(" ")
        );
    }
}

/// Each run over the time its senders send, a row of three plots: the bottleneck's queue,
/// each sender's rate through it, and Jain's index of those rates, bin by bin.
pub fn svg(runs: &[Figures]) -> String {
    let width = 3.0 * (PLOT_W + 60.0) + 20.0;
    let height = ROW_H * runs.len() as f64 + 40.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\">\n<style>.title{{font-size:12px}}.run{{font-size:13px;font-weight:bold}}.tick{{font-size:10px;fill:#555}}.axes{{fill:none;stroke:#999}}.series{{fill:none;stroke-width:1.2}}</style>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>"
    );
    let buffer = runs.iter().map(|f| f.setup.buffer).max().unwrap_or(1) as f64 / 1024.0;
    for (r, f) in runs.iter().enumerate() {
        let top = 30.0 + ROW_H * r as f64;
        let _ = writeln!(
            out,
            "<g class=\"run\" id=\"run{r}\"><text class=\"run\" x=\"10\" y=\"{top}\">{}</text>",
            heading(f)
        );
        let bins = (f.setup.duration_us / BIN_US) as usize;
        let samples = &f.samples[..bins.min(f.samples.len())];
        let queue: Vec<f64> = samples.iter().map(|s| s.queue as f64 / 1024.0).collect();
        let rates: Vec<Vec<f64>> = (0..f.setup.senders)
            .map(|k| samples.iter().map(|s| s.rates[k]).collect())
            .collect();
        let fairness: Vec<f64> = samples.iter().map(|s| jain(&s.rates)).collect();
        // The rates' scale: the fastest sender's, in whole Gb/s (at least one).
        let fastest = rates.iter().flatten().fold(1.0f64, |m, &r| m.max(r)).ceil();
        let y = top + 30.0;
        let us = f.setup.duration_us;
        plot(
            &mut out,
            50.0,
            y,
            &format!("queue at the bottleneck, KiB (0 to {us} µs)"),
            buffer,
            "",
            &[queue],
        );
        plot(
            &mut out,
            50.0 + PLOT_W + 60.0,
            y,
            "each sender's rate through it, Gb/s",
            fastest,
            "",
            &rates,
        );
        plot(
            &mut out,
            50.0 + 2.0 * (PLOT_W + 60.0),
            y,
            "Jain's index of those rates",
            1.0,
            "",
            &[fairness],
        );
        out.push_str("</g>\n");
    }
    out.push_str("</svg>\n");
    out
}
