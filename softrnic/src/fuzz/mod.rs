//! `softrnic fuzz`: structure-aware fuzzing of another RoCEv2 implementation over live
//! connections. The peer runs an ordinary program, rdma-core's `ibv_rc_pingpong` server (in a
//! loop, so each round finds a fresh one). Each round connects to it as pingpong's client does,
//! exchanges one message, then sends mutations of its own request (see
//! [`softrnic_wire::mutate`]), watching what the peer answers, and tries one more exchange.
//!
//! Oracles: the next round connecting is the control connection (a peer that never comes back
//! has crashed or hung); `--check` runs a command after each round (for kernel rxe: the guest's
//! log has no WARN, BUG or oops); a mutation IBA requires be dropped silently must get no
//! answer; and one for which IBA requires a NAK ([`expect`]) must get that NAK. A finding is
//! saved as a pcapng of its round and the command that replays that round: rounds are
//! deterministic from the seed.

pub mod expect;
pub mod pingpong;
pub mod tap;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use softrnic_emu_core::{
    Access, Config, DeviceAttr, Gid, Lane, Mtu, QpType, RecvWr, SendFlags, SendOp, SendWr, Sge,
    WcStatus,
};
use softrnic_link::library::{Device, Endpoint};
use softrnic_link::{AfPacket, Backend, gid, neigh};
use softrnic_wire::frame;
use softrnic_wire::mutate::{Class, Mutator};
use softrnic_wire::{NakCode, Syndrome};

use crate::capture::{CapturedFrame, Direction, write_pcapng};
use tap::Tapped;

/// What to fuzz and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// The interface to send on (AF_PACKET; needs CAP_NET_RAW).
    pub interface: String,
    /// The pingpong server's address and port.
    pub peer: SocketAddr,
    /// Every choice follows from it.
    pub seed: u64,
    /// The first round's number (to replay one round of an earlier run).
    pub first_round: u32,
    /// How many rounds.
    pub rounds: u32,
    /// Mutations per round.
    pub mutations: u32,
    /// The classes to draw from.
    pub classes: Vec<Class>,
    /// The message size (pingpong's `-s`).
    pub size: u32,
    /// The path MTU (pingpong's `-m`).
    pub mtu: Mtu,
    /// How long the peer may take to answer a connection or a message.
    pub peer_timeout: Duration,
    /// How long to watch for answers to each mutation.
    pub window: Duration,
    /// Run after each round with `sh -c`; a failure is a finding.
    pub check: Option<String>,
    /// Where findings go.
    pub out: PathBuf,
}

/// What a run found and did.
#[derive(Debug, Default)]
pub struct Report {
    /// Rounds run.
    pub rounds: u32,
    /// Rounds whose last exchange still worked.
    pub survived: u32,
    /// Per class: mutations sent, and how many the peer answered.
    pub classes: BTreeMap<Class, (u32, u32)>,
    /// Every mutation, in order: round, class and what it changed.
    pub mutations: Vec<(u32, Class, String)>,
    /// What the oracles found, each with its reproducer.
    pub findings: Vec<Finding>,
}

/// One thing the oracles found.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The round it happened in.
    pub round: u32,
    /// What happened.
    pub what: String,
    /// The round's frames.
    pub pcapng: PathBuf,
}

/// One round's frames and what came of it.
struct Round {
    seen: Vec<tap::Seen>,
    findings: Vec<String>,
}

/// Mixes a round number into the seed (SplitMix64's finaliser).
fn round_seed(seed: u64, round: u32, salt: u64) -> u64 {
    let mut z = seed ^ (u64::from(round) << 32) ^ salt;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Runs the rounds, saying what happens on `log`.
pub fn run(opts: &Options, log: &mut dyn Write) -> Result<Report, String> {
    if opts.classes.is_empty() {
        return Err("no mutation classes to draw from".into());
    }
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("{}: {e}", opts.out.display()))?;
    let mut report = Report::default();
    let mut previous: Option<(u32, Vec<tap::Seen>)> = None;
    for r in opts.first_round..opts.first_round + opts.rounds {
        let round = match one_round(opts, r, &mut report, log) {
            Ok(round) => round,
            Err(Stop::Failed(e)) => return Err(format!("round {r}: {e}")),
            Err(Stop::Unreachable(e)) => {
                // The control connection: a peer that served the last round and now does not
                // answer for the whole timeout has crashed or hung.
                let what = format!("the peer stopped answering: {e}");
                match previous {
                    Some((p, seen)) => save(opts, &mut report, p, &seen, &what, log)?,
                    None => return Err(format!("round {r}: {e}")),
                }
                break;
            }
        };
        report.rounds += 1;
        let mut findings = round.findings;
        if let Some(cmd) = &opts.check {
            let out = std::process::Command::new("sh")
                .args(["-c", cmd])
                .output()
                .map_err(|e| format!("--check {cmd}: {e}"))?;
            if !out.status.success() {
                let said = String::from_utf8_lossy(&out.stdout).into_owned()
                    + &String::from_utf8_lossy(&out.stderr);
                findings.push(format!(
                    "the check failed ({}): {}",
                    out.status,
                    said.trim()
                ));
            }
        }
        for what in findings {
            save(opts, &mut report, r, &round.seen, &what, log)?;
        }
        previous = Some((r, round.seen));
    }
    Ok(report)
}

/// Why a round stopped short.
enum Stop {
    /// The peer did not take a connection.
    Unreachable(String),
    /// Something here failed (the interface, a verbs call).
    Failed(String),
}

fn one_round(
    opts: &Options,
    r: u32,
    report: &mut Report,
    log: &mut dyn Write,
) -> Result<Round, Stop> {
    let fail = |what: &str, e: &dyn std::fmt::Display| Stop::Failed(format!("{what}: {e}"));
    let packet = AfPacket::open(&opts.interface).map_err(|e| fail(&opts.interface, &e))?;
    let (mac, eth_mtu) = (packet.mac(), packet.mtu());
    let mut gids = gid::table(&opts.interface).map_err(|e| fail("the GID table", &e))?;
    // The QP's GID (index 0) is of the peer's IP version: RoCEv2 does not mix them.
    gids.sort_by_key(|g| g.to_ip().is_ipv4() != opts.peer.ip().is_ipv4());
    let config = Config {
        seed: round_seed(opts.seed, r, 1),
        key_secret: round_seed(opts.seed, r, 2),
        mac: softrnic_wire::EthernetAddress(mac),
        gids,
        eth_mtu,
        device: DeviceAttr::default(),
        lane: Lane::ONLY,
    };
    let mut dev = Device::new(Tapped::new(packet), config);
    dev.set_path_mtu(opts.mtu);
    let verbs = |e: softrnic_emu_core::VerbsError| fail("a verbs call", &e);
    let pd = dev.engine().alloc_pd(0).map_err(verbs)?;
    let cq = dev.engine().create_cq(64).map_err(verbs)?;
    let qpn = dev.create_qp(pd, QpType::Rc, cq).map_err(verbs)?;
    let size = opts.size as usize;
    let buf = dev.alloc(size * 2);
    let lkey = dev
        .engine()
        .reg_mr(pd, buf, (size * 2) as u64, Access::LOCAL_WRITE)
        .map_err(verbs)?;
    let recv = Sge {
        addr: buf + size as u64,
        length: opts.size,
        lkey,
    };
    let own = dev.endpoint(qpn);
    let ours = pingpong::Dest {
        lid: 0,
        qpn,
        psn: own.psn,
        gid: own.gid.0,
    };
    // The peer restarts its server between rounds: ask again until the timeout.
    let deadline = Instant::now() + opts.peer_timeout;
    let theirs = loop {
        match pingpong::exchange(opts.peer, &ours, opts.peer_timeout) {
            Ok(d) => break d,
            Err(e) if Instant::now() >= deadline => {
                return Err(Stop::Unreachable(format!("no connection: {e}")));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let their_mac = neigh::resolve(opts.peer.ip(), opts.peer_timeout)
        .map_err(|e| Stop::Unreachable(format!("the peer's MAC: {e}")))?;
    let peer = Endpoint {
        gid: Gid(theirs.gid),
        mac: softrnic_wire::EthernetAddress(their_mac),
        qpn: theirs.qpn,
        psn: theirs.psn,
    };
    dev.connect(qpn, &peer).map_err(verbs)?;
    // Before our first SEND: the peer answers each with one of its own.
    for _ in 0..32 {
        let wr = RecvWr {
            wr_id: 2,
            sgl: vec![recv],
        };
        dev.engine().post_recv(qpn, wr).map_err(verbs)?;
    }
    let _ = writeln!(
        log,
        "round {r}: QP {qpn:#x} to the peer's QP {:#x}",
        theirs.qpn
    );
    let mut round = Round {
        seen: Vec::new(),
        findings: Vec::new(),
    };
    let send = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sgl: vec![Sge {
            addr: buf,
            length: opts.size,
            lkey,
        }],
        flags: SendFlags::SIGNALED,
        ud: None,
        xrc_srqn: None,
    };
    if let Err(e) = exchange(&mut dev, qpn, cq, &send, opts.peer_timeout) {
        round
            .findings
            .push(format!("the first exchange failed: {e}"));
        round.seen = std::mem::take(&mut dev.link_mut().seen);
        return Ok(round);
    }
    // Two templates: the request just sent, which the peer has seen (a variant that gets
    // through is a duplicate, answered again but not executed), and the same at the PSN the
    // peer expects next (a variant meets every check of a new request, IBA 9.7.5.2). The
    // peer's PSN: its request just received.
    let seen = &dev.link_mut().seen;
    let request = |s: &&tap::Seen, to: u32| {
        frame::parse(&s.data).is_ok_and(|p| {
            p.repr.bth.dest_qp == to && !p.repr.bth.opcode.info().operation.is_response()
        })
    };
    let template = seen
        .iter()
        .rev()
        .find(|s| s.outbound && request(s, theirs.qpn));
    let peer_psn = seen
        .iter()
        .rev()
        .find(|s| !s.outbound && request(s, qpn))
        .and_then(|s| frame::parse(&s.data).ok())
        .map_or(theirs.psn, |p| p.repr.bth.psn);
    let Some(template) = template.map(|s| s.data.clone()) else {
        round
            .findings
            .push("no request of ours to mutate was seen".into());
        round.seen = std::mem::take(&mut dev.link_mut().seen);
        return Ok(round);
    };
    let seen_psn = frame::parse(&template).expect("found by parsing");
    let next = {
        let mut repr = seen_psn.repr;
        repr.bth.psn = (repr.bth.psn + 1) & 0xff_ffff;
        let mut buf = vec![0; repr.frame_len(seen_psn.payload().len())];
        repr.emit(seen_psn.payload(), &mut buf)
            .map_err(|e| fail("the next request", &e))?;
        buf
    };
    let next = frame::parse(&next).expect("emitted");
    let mut mutator = Mutator::new(round_seed(opts.seed, r, 3));
    let mut fresh = Fresh::default();
    for i in 0..opts.mutations {
        let mut frames = Vec::new();
        let (template, at) = if i % 2 == 0 {
            (&next, "the next PSN")
        } else {
            (&seen_psn, "a seen PSN")
        };
        let m = mutator.mutate_among(&opts.classes, template, peer_psn, &mut frames);
        let pmtu = opts.mtu.bytes() as usize;
        let required = (i % 2 == 0 && fresh.live)
            .then(|| expect::required(&next, &frames[0], m.class, size, pmtu))
            .flatten()
            .filter(|&code| !(code == NakCode::PsnSequenceError && fresh.gap_nakked));
        let mark = dev.link_mut().seen.len();
        for f in &frames {
            if let Err(e) = dev.link_mut().inject(f) {
                let _ = writeln!(log, "  {}: not sent: {e}", m.class);
            }
        }
        // The window, and for a required NAK as long as the peer may take to answer.
        let start = Instant::now();
        loop {
            let waited = start.elapsed();
            if waited >= opts.window {
                let nakked = naks(&dev.link_mut().seen[mark..], qpn).next().is_some();
                if required.is_none() || nakked || waited >= opts.peer_timeout {
                    break;
                }
            }
            if !dev.progress() {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
        let got: Vec<NakCode> = naks(&dev.link_mut().seen[mark..], qpn).collect();
        if let Some(code) = required
            && got.first() != Some(&code)
        {
            round.findings.push(format!(
                "{} ({}, at {at}) was answered with {}, where IBA requires {}",
                m.class,
                m.what,
                got.first()
                    .map_or("no NAK".to_owned(), |&c| Syndrome::Nak(c).to_string()),
                Syndrome::Nak(code),
            ));
        }
        let answers = answers(&dev.link_mut().seen[mark..], qpn);
        // A forged response finds nothing outstanding at the peer (its message was
        // acknowledged): a ghost, ignored (IBA 9.7.5.1.2).
        fresh.after(m.silent || m.class == Class::ForgedAck, &got, answers.len());
        let entry = report.classes.entry(m.class).or_default();
        entry.0 += 1;
        entry.1 += u32::from(!answers.is_empty());
        let _ = writeln!(
            log,
            "  {}: {} (at {at}) -> {}{}",
            m.class,
            m.what,
            if answers.is_empty() {
                "no answer".to_owned()
            } else {
                answers.join(", ")
            },
            required.map_or(String::new(), |c| format!(" [IBA: {}]", Syndrome::Nak(c)))
        );
        if m.silent && !answers.is_empty() {
            round.findings.push(format!(
                "{} ({}, at {at}) was answered ({}), where IBA requires it be dropped without \
                 a reply",
                m.class,
                m.what,
                answers.join(", ")
            ));
        }
        report.mutations.push((r, m.class, m.what));
    }
    let last = exchange(&mut dev, qpn, cq, &send, opts.peer_timeout);
    let _ = match &last {
        Ok(()) => writeln!(log, "  the connection still works"),
        Err(e) => writeln!(log, "  the last exchange: {e}"),
    };
    report.survived += u32::from(last.is_ok());
    round.seen = std::mem::take(&mut dev.link_mut().seen);
    Ok(round)
}

/// One pingpong exchange: our SEND, and the peer's. The SEND's completion comes within the
/// QP's retry budget (the protocol's timeout); the peer's message within `timeout`.
fn exchange<L: softrnic_link::Link>(
    dev: &mut Device<L>,
    qpn: u32,
    cq: u32,
    send: &SendWr,
    timeout: Duration,
) -> Result<(), String> {
    dev.engine()
        .post_send(qpn, send.clone())
        .map_err(|e| format!("post_send: {e}"))?;
    let (mut sent, mut received) = (false, false);
    let deadline = Instant::now() + timeout;
    while !(sent && received) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "{} within {timeout:?}",
                if sent {
                    "no message from the peer"
                } else {
                    "our SEND did not complete"
                }
            ));
        }
        for wc in dev.wait(cq, 1, left) {
            if wc.status != WcStatus::Success {
                return Err(format!("a completion with status {:?}", wc.status));
            }
            sent |= wc.wr_id == 1;
            received |= wc.wr_id == 2;
        }
    }
    Ok(())
}

/// Whether the peer's responder is still as the first exchange left it, so that
/// [`expect::required`] holds for a variant at the next PSN.
struct Fresh {
    /// No variant has been taken, refused with a fatal NAK, or met with silence that IBA does
    /// not require.
    live: bool,
    /// A PSN sequence NAK was sent for the current gap: the next one waits for the gap to
    /// close (one NAK per gap, IBA 9.7.5.2.1).
    gap_nakked: bool,
}

impl Default for Fresh {
    fn default() -> Fresh {
        Fresh {
            live: true,
            gap_nakked: false,
        }
    }
}

impl Fresh {
    /// After a variant that IBA requires be dropped or ignored (`ignored`), or that got
    /// `naks` among `answers` frames.
    fn after(&mut self, ignored: bool, naks: &[NakCode], answers: usize) {
        if ignored {
            return;
        }
        if answers == 1 && naks == [NakCode::PsnSequenceError] {
            self.gap_nakked = true;
        } else {
            self.live = false;
        }
    }
}

/// The NAK codes the peer sent to `qpn` among `seen`.
fn naks(seen: &[tap::Seen], qpn: u32) -> impl Iterator<Item = NakCode> + '_ {
    seen.iter()
        .filter(|s| !s.outbound)
        .filter_map(|s| frame::parse(&s.data).ok())
        .filter(move |p| p.repr.bth.dest_qp == qpn)
        .filter_map(|p| match p.repr.ext.aeth?.syndrome {
            Syndrome::Nak(code) => Some(code),
            _ => None,
        })
}

/// What the peer sent to `qpn` among `seen`, in words.
fn answers(seen: &[tap::Seen], qpn: u32) -> Vec<String> {
    seen.iter()
        .filter(|s| !s.outbound)
        .filter_map(|s| frame::parse(&s.data).ok())
        .filter(|p| p.repr.bth.dest_qp == qpn)
        .map(|p| {
            let mut what = format!("{} PSN {:#08x}", p.repr.bth.opcode, p.repr.bth.psn);
            if let Some(aeth) = p.repr.ext.aeth {
                let _ = write!(what, " {}", aeth.syndrome);
            }
            what
        })
        .collect()
}

/// Writes a finding's reproducer: the round's frames, and the command that runs that round
/// again.
fn save(
    opts: &Options,
    report: &mut Report,
    round: u32,
    seen: &[tap::Seen],
    what: &str,
    log: &mut dyn Write,
) -> Result<(), String> {
    let n = report.findings.len() + 1;
    let pcapng = opts.out.join(format!("finding-{n}-round-{round}.pcapng"));
    let frames: Vec<CapturedFrame> = seen
        .iter()
        .map(|s| CapturedFrame {
            direction: Some(if s.outbound {
                Direction::Out
            } else {
                Direction::In
            }),
            interface: Some(if s.injected { "injected" } else { "wire" }.to_owned()),
            ..CapturedFrame::new(s.at, s.data.clone())
        })
        .collect();
    let file = std::fs::File::create(&pcapng).map_err(|e| format!("{}: {e}", pcapng.display()))?;
    write_pcapng(&frames, std::io::BufWriter::new(file))
        .map_err(|e| format!("{}: {e}", pcapng.display()))?;
    let classes: Vec<&str> = opts.classes.iter().map(|c| c.name()).collect();
    let replay = format!(
        "softrnic fuzz --interface {} --peer {} --seed {} --first-round {round} --rounds 1 \
         --mutations {} --classes {} --size {} --mtu {}",
        opts.interface,
        opts.peer,
        opts.seed,
        opts.mutations,
        classes.join(","),
        opts.size,
        opts.mtu.bytes(),
    );
    let text = format!("{what}\n\nframes: {}\nreplay: {replay}\n", pcapng.display());
    let txt = pcapng.with_extension("txt");
    std::fs::write(&txt, &text).map_err(|e| format!("{}: {e}", txt.display()))?;
    let _ = writeln!(
        log,
        "FINDING {n} (round {round}): {what}\n  replay: {replay}"
    );
    report.findings.push(Finding {
        round,
        what: what.to_owned(),
        pcapng,
    });
    Ok(())
}
