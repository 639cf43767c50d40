//! The lessons and the ladder: what the ladder says happened is what the simulator knows
//! happened (which packets it dropped or delivered twice, which the engine sent again), each
//! lesson shows the rule it is about, and the HTML page shows it in a browser.

mod browser;

use softrnic::conversation::{Analysis, Mark};
use softrnic::lesson::{self, LESSONS, Outcome};
use softrnic_link::sim::{Fate, Sent};
use softrnic_wire::Opcode;
use std::collections::HashSet;
use std::process::Command;

fn run(name: &str) -> Outcome {
    let o = lesson::lesson_options(name).unwrap_or_else(|| panic!("no lesson {name}"));
    lesson::simulate(&o).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The packets that were sent (not the network's second copies), in the order sent.
fn sent_packets(a: &Analysis) -> Vec<&softrnic::conversation::Packet> {
    a.packets
        .iter()
        .filter(|p| p.duplicate_of.is_none())
        .collect()
}

fn is_request(p: &softrnic::conversation::Packet) -> bool {
    let op = p.parsed().expect("it parsed").repr.bth.opcode;
    !op.info().operation.is_response()
}

/// What the simulator knows: per packet sent, whether it was lost, and whether the same
/// request (opcode and PSN, from the same host) was sent before. CNPs are not requests: every
/// one carries PSN 0.
fn truth(trace: &[Sent]) -> Vec<(bool, bool)> {
    let mut seen = HashSet::new();
    trace
        .iter()
        .map(|s| {
            let request = !s.opcode.info().operation.is_response() && s.opcode != Opcode::Cnp;
            let again = !seen.insert((s.from, s.opcode, s.psn)) && request;
            (s.fate == Fate::Dropped, again)
        })
        .collect()
}

#[test]
fn every_lesson_runs_and_its_ladder_agrees_with_the_simulator() {
    for l in LESSONS {
        let out = run(l.name);
        assert!(out.data_ok, "{}: {}", l.name, out.data);
        let packets = sent_packets(&out.analysis);
        let truth = truth(&out.trace);
        assert_eq!(
            packets.len(),
            truth.len(),
            "{}: one packet per frame sent",
            l.name
        );
        for (p, (lost, again)) in packets.iter().zip(&truth) {
            assert_eq!(p.lost, *lost, "{} frame {}: lost", l.name, p.number);
            assert_eq!(p.has(Mark::Lost), *lost, "{} frame {}", l.name, p.number);
            assert_eq!(
                p.has(Mark::Retransmission) && is_request(p),
                *again,
                "{} frame {}: retransmission",
                l.name,
                p.number
            );
        }
        let duplicated = out
            .trace
            .iter()
            .filter(|s| s.fate == Fate::Duplicated)
            .count();
        let copies = out
            .analysis
            .packets
            .iter()
            .filter(|p| p.duplicate_of.is_some())
            .count();
        assert_eq!(copies, duplicated, "{}: the network's copies", l.name);
        // A lesson's report has the ladder, what happened, completions and counters.
        let report = lesson::report(&out, Some(l));
        for want in [
            "Lesson ",
            "198.18.0.1 QP ",
            "What happened:",
            "Completions:",
            "Counters that moved:",
            "What they count:",
        ] {
            assert!(report.contains(want), "{}: {want}\n{report}", l.name);
        }
    }
}

fn marks(out: &Outcome) -> Vec<Mark> {
    out.analysis
        .packets
        .iter()
        .flat_map(|p| p.notes.iter().map(|n| n.mark))
        .collect()
}

fn notes(out: &Outcome) -> String {
    let mut s = String::new();
    for p in &out.analysis.packets {
        for n in &p.notes {
            s.push_str(&format!("{}: {}\n", p.number, n.text));
        }
    }
    s
}

#[test]
fn each_lesson_shows_its_rule() {
    let gbn = run("go-back-n");
    let n = notes(&gbn);
    assert!(n.contains("gap: the receiver expected PSN 0x000001"), "{n}");
    assert!(
        n.contains("NAK, PSN sequence error: the responder expected PSN 0x000001"),
        "{n}"
    );
    assert_eq!(gbn.counters[0].packet_seq_err, 1);

    let timeout = run("ack-timeout");
    assert!(marks(&timeout).contains(&Mark::Duplicate));
    assert!(timeout.counters[0].local_ack_timeout_err >= 1);

    let rnr = run("rnr");
    assert!(marks(&rnr).contains(&Mark::RnrNak), "{}", notes(&rnr));
    assert!(
        !marks(&rnr).contains(&Mark::Duplicate),
        "an RNR-NAKed request is not taken: {}",
        notes(&rnr)
    );
    // The lesson succeeds with `rnr_nak_retry_err` counted: its report says that is no failure.
    let report = lesson::report(&rnr, None);
    let said = report
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("rnr_nak_retry_err (mlx5's name): ")
        })
        .unwrap_or_else(|| panic!("rnr_nak_retry_err explained:\n{report}"));
    assert!(said.contains("Not a failure"), "{said}");

    let read = run("read");
    let n = notes(&read);
    assert!(
        n.contains("READ of 3000 bytes: expects 3 responses, PSNs 0x000000 to 0x000002"),
        "{n}"
    );
    for k in 1..=3 {
        assert!(
            n.contains(&format!("response {k} of 3 to the READ in frame 1")),
            "{n}"
        );
    }

    let implied = run("implied-nak");
    assert!(
        marks(&implied).contains(&Mark::ImpliedNak),
        "{}",
        notes(&implied)
    );
    assert_eq!(implied.counters[0].implied_nak_seq_err, 1);

    let replay = run("atomic-replay");
    assert!(marks(&replay).contains(&Mark::Replay), "{}", notes(&replay));
    assert!(
        replay
            .data
            .contains("counter at B 1 after 1 atomic (each executed once)"),
        "{}",
        replay.data
    );

    let dup = run("duplicate-request");
    assert!(
        notes(&dup).contains("the network duplicated frame 1"),
        "{}",
        notes(&dup)
    );
    assert!(
        notes(&dup).contains("acknowledges nothing new"),
        "{}",
        notes(&dup)
    );

    let cnp = run("cnp");
    let n = notes(&cnp);
    assert_eq!(n.matches("ECN CE on arrival").count(), 3, "{n}");
    assert!(n.contains("answers the CE marks from frame 1 on"), "{n}");
    let np = &cnp.counters[1];
    assert_eq!((np.np_ecn_marked_roce_packets, np.np_cnp_sent), (3, 1));
    assert_eq!(cnp.counters[0].rp_cnp_handled, 1);
    let rate = cnp.rates[0].expect("A is held to a rate");
    assert!(
        rate > 4_000.0 && rate < 6_000.0,
        "about half the line rate: {rate}"
    );

    let dcqcn = run("dcqcn");
    assert!(dcqcn.counters[1].np_cnp_sent >= 3);
    assert_eq!(
        dcqcn.counters[0].rp_cnp_handled,
        dcqcn.counters[1].np_cnp_sent
    );
    assert_eq!(
        dcqcn.counters[0].retransmitted_pkts, 0,
        "pacing looks like no loss"
    );
    let rates: Vec<f64> = dcqcn.rate_trace.iter().map(|&(_, r)| r).collect();
    let lowest = rates.iter().copied().fold(f64::MAX, f64::min);
    assert!(lowest < 1_000.0, "cut to under a tenth: {rates:?}");
    assert!(*rates.last().unwrap() > 9_900.0, "and back: {rates:?}");
    // The gaps between A's packets grow under the cut rate and shrink again.
    let sent: Vec<u64> = dcqcn
        .trace
        .iter()
        .filter(|s| s.from == 0)
        .map(|s| s.at)
        .collect();
    let gaps: Vec<u64> = sent.windows(2).map(|w| w[1] - w[0]).collect();
    let (first, widest, last) = (gaps[0], *gaps.iter().max().unwrap(), *gaps.last().unwrap());
    assert!(widest > 10 * first && widest > 10 * last, "{gaps:?}");

    let wrap = run("psn-wrap");
    let psns: Vec<u32> = sent_packets(&wrap.analysis)
        .iter()
        .filter_map(|p| p.parsed())
        .filter(|f| !f.repr.bth.opcode.info().operation.is_response())
        .map(|f| f.repr.bth.psn)
        .collect();
    assert_eq!(psns, [0xff_fffe, 0xff_ffff, 0, 1]);
    assert!(!marks(&wrap).contains(&Mark::Gap) && !marks(&wrap).contains(&Mark::Duplicate));
}

/// The dcqcn lesson's page shows A's rate over time: Chromium renders it, with the step plot
/// under the ladder.
#[test]
fn the_dcqcn_lesson_page_plots_the_rate() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lesson-dcqcn");
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("dcqcn.html");
    let out = Command::new(env!("CARGO_BIN_EXE_softrnic"))
        .args(["lesson", "dcqcn", "--html"])
        .arg(&page)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("A's rate over time (DCQCN), Mb/s:"), "{text}");
    let dom = browser::dom(&page, "1500,5000");
    let plot = dom.find("<svg class=\"rate\"").expect("the rate plot");
    let ladder = dom.find("<svg class=\"ladder\"").expect("the ladder");
    assert!(ladder < plot);
    assert!(dom[plot..].contains("<polyline"), "{dom}");
    assert!(dom[plot..].contains("A's rate (DCQCN), Mb/s"));
}

/// The ladder of a capture file agrees with the lesson's own: the capture holds what it saw.
#[test]
fn a_lessons_capture_gives_the_same_ladder() {
    let out = run("go-back-n");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lesson-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let (pcap, page) = (dir.join("gbn.pcapng"), dir.join("gbn.html"));
    let cli = Command::new(env!("CARGO_BIN_EXE_softrnic"))
        .args(["lesson", "go-back-n", "-w"])
        .arg(&pcap)
        .arg("--html")
        .arg(&page)
        .output()
        .unwrap();
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let stdout = String::from_utf8(cli.stdout).unwrap();
    assert!(
        stdout.contains(&softrnic::ladder::text(&out.analysis)),
        "{stdout}"
    );
    let ladder = Command::new(env!("CARGO_BIN_EXE_softrnic"))
        .arg("ladder")
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(ladder.status.success());
    assert_eq!(
        String::from_utf8(ladder.stdout).unwrap(),
        softrnic::ladder::text(&out.analysis)
    );
    // The capture is one Wireshark reads as InfiniBand, frame by frame, and every frame's
    // ICRC is good.
    let tshark = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args([
            "-Y",
            "infiniband && !_ws.malformed",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ])
        .output()
        .expect("tshark");
    let decoded = String::from_utf8(tshark.stdout).unwrap();
    assert_eq!(decoded.lines().count(), out.frames.len(), "{decoded}");
    let frames = softrnic::capture::read(&std::fs::read(&pcap).unwrap()).unwrap();
    assert!(
        frames
            .iter()
            .all(|f| softrnic_wire::frame::parse(&f.data).is_ok())
    );
    // The page, as a person sees it: headless Chromium renders it; its DOM has a packet per
    // packet sent, the lost one marked, and each packet's fields.
    let dom = browser::dom(&page, "1500,600");
    let packets = dom.matches("<g class=\"packet").count();
    assert_eq!(packets, out.analysis.packets.len(), "{dom}");
    assert_eq!(
        dom.matches("data-marks=\"lost\"").count(),
        1,
        "one lost packet"
    );
    assert!(
        dom.contains("class=\"packet nak") || dom.contains("class=\"packet covers nak"),
        "{dom}"
    );
    assert_eq!(
        dom.matches("<pre id=\"frame-").count(),
        out.analysis.packets.len()
    );
    assert!(dom.contains("BTH: Base Transport Header"));
    browser::screenshot(&page, "1500,600", &dir.join("gbn.png"), 10_000);
}

#[test]
fn simulate_takes_its_faults_from_the_command_line() {
    let cli = Command::new(env!("CARGO_BIN_EXE_softrnic"))
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .args([
            "simulate", "--op", "write", "--op", "read", "--size", "2500", "--count", "3",
        ])
        .args([
            "--loss",
            "0.1",
            "--reorder",
            "0.1",
            "--seed",
            "7",
            "--mtu",
            "512",
            "-w",
            "sim.pcapng",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&cli.stdout);
    assert!(
        cli.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    assert!(
        out.contains("WRITE data at B as sent; READ data at A as B held it"),
        "{out}"
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_softrnic"))
        .args(["simulate", "--mtu", "1000"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--mtu 1000: 256, 512, 1024, 2048 or 4096")
    );
}

/// Under random loss, reordering and duplication, over many seeds, the ladder still marks as
/// many losses as the simulator made of each packet, every copy the network made, and every
/// request sent again; and the data lands.
#[test]
fn the_ladder_agrees_with_the_simulator_under_random_faults() {
    use lesson::{Op, Options};
    for seed in 1..=40 {
        let o = Options {
            ops: vec![Op::Write, Op::Read, Op::Send, Op::FetchAdd],
            size: 1500,
            count: 2,
            seed,
            faults: softrnic_link::faults::Faults {
                loss: 0.1,
                reorder: 0.05,
                duplicate: 0.05,
                corrupt: 0.0,
            },
            ..Options::default()
        };
        let out = lesson::simulate(&o).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(out.data_ok, "seed {seed}: {}", out.data);
        let packets = sent_packets(&out.analysis);
        let truth = truth(&out.trace);
        assert_eq!(packets.len(), truth.len(), "seed {seed}");
        // Copies of one packet (a retransmission has the bytes of the first) cannot be told
        // apart by what arrived: of each set of identical frames, what a capture shows is how
        // many arrivals fewer or more there were than sendings. The ladder calls the first
        // lost, the second the network's copies; the simulator knows which.
        let mut per_bytes: std::collections::HashMap<&[u8], i64> = std::collections::HashMap::new();
        for (p, s) in packets.iter().zip(&out.trace) {
            let e = per_bytes.entry(&p.bytes[..]).or_default();
            *e += i64::from(p.lost) - i64::from(s.fate == Fate::Dropped);
            *e += i64::from(s.fate == Fate::Duplicated);
        }
        for p in out
            .analysis
            .packets
            .iter()
            .filter(|p| p.duplicate_of.is_some())
        {
            *per_bytes.entry(&p.bytes[..]).or_default() -= 1;
        }
        for (p, (_, again)) in packets.iter().zip(&truth) {
            assert_eq!(
                p.has(Mark::Retransmission) && is_request(p),
                *again,
                "seed {seed} frame {}",
                p.number
            );
        }
        assert!(
            per_bytes.values().all(|&d| d == 0),
            "seed {seed}: losses and copies"
        );
    }
}

/// What the ladder says the responder saw agrees with what the responder's engine counted:
/// the requests it called duplicates with `duplicate_request`, those it called beyond a gap
/// with `out_of_sequence`. Many seeds, every kind of fault and RC operation, SENDs and WRITEs
/// of several packets (so reordering overtakes within a message).
#[test]
fn the_ladders_responder_view_agrees_with_the_engines_counters() {
    use softrnic::lesson::{Op, Options};
    use softrnic_link::sim::Faults;
    let faults = [
        (
            "loss",
            Faults {
                loss: 0.1,
                ..Faults::NONE
            },
        ),
        (
            "duplicate",
            Faults {
                duplicate: 0.1,
                ..Faults::NONE
            },
        ),
        (
            "reorder",
            Faults {
                reorder: 0.3,
                ..Faults::NONE
            },
        ),
        (
            "corrupt",
            Faults {
                corrupt: 0.05,
                ..Faults::NONE
            },
        ),
        (
            "all",
            Faults {
                loss: 0.05,
                duplicate: 0.05,
                reorder: 0.2,
                corrupt: 0.02,
            },
        ),
    ];
    let mut checked = 0;
    for (kind, f) in faults {
        for ops in [
            vec![Op::Send],
            vec![Op::Write],
            vec![Op::Read],
            vec![Op::FetchAdd],
        ] {
            for seed in 1..=12 {
                let o = Options {
                    ops: ops.clone(),
                    count: 3,
                    size: 2000,
                    seed,
                    faults: f,
                    ..Options::default()
                };
                let out = lesson::simulate(&o).unwrap_or_else(|e| panic!("{kind} {seed}: {e}"));
                let said = |start: &str| {
                    out.analysis
                        .packets
                        .iter()
                        .filter(|p| p.notes.iter().any(|n| n.text.starts_with(start)))
                        .count() as u64
                };
                let b = &out.counters[1];
                let what = format!("{kind} {ops:?} seed {seed}\n{}", lesson::report(&out, None));
                assert_eq!(
                    said("duplicate: "),
                    b.duplicate_request,
                    "duplicates: {what}"
                );
                assert_eq!(
                    said("gap: the receiver expected"),
                    b.out_of_sequence,
                    "beyond a gap: {what}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 5 * 4 * 12);
}
