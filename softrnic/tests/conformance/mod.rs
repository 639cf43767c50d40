//! The differential check against kernel rxe and kernel rdma_cm: call sequences (the
//! hand-written corpus, `tests/interop/conformance.corpus`, and sequences proptest generates
//! from a grammar of verbs calls) run by `softrnic-conform` (`tests/interop/conform.c`) on
//! both sides, and their lines compared call by call. A difference is known when
//! docs/compatibility.md lists it ("Where behaviour differs"); the interop test prints the
//! others (report-only until the first runs' differences are triaged).

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// The hand-written sequences.
pub const CORPUS: &str = include_str!("../../../tests/interop/conformance.corpus");

/// Differences docs/compatibility.md lists: (softrnic's line, rxe's line), each the first
/// line of a sequence where the two part.
pub const KNOWN: &[(&str, &str)] = &[
    // softrnic's device limits: 16 Ki work requests a queue (rxe 6.1: 1 Mi).
    ("create_qp: err EINVAL", "create_qp: ok"),
    // softrnic has XRC (through ibv_create_qp_ex with an XRC domain); rxe has none.
    ("create_qp: err EINVAL", "create_qp: err EOPNOTSUPP"),
    // A datagram beyond the path MTU: softrnic completes it with a local length error
    // (IBA 11.4.1.1: a UD message is one packet); rxe sends it.
    (
        "poll: wc local length error",
        "poll: wc success opcode 0 len 0",
    ),
    // An opcode a QP's type does not take: softrnic refuses the post (EINVAL); rxe's
    // provider posts it and its kernel completes it with an error, or never.
    ("post_send: err EINVAL", "post_send: ok"),
    // librdmacm's rdma_resolve_route and rdma_connect on an id with no address dereference
    // its NULL route; softrnic's return EINVAL.
    ("resolve_route: err EINVAL", "killed by signal 11"),
    ("connect: err EINVAL", "killed by signal 11"),
];

/// The outcome of a differential run.
#[derive(Debug, Default)]
pub struct Report {
    pub sequences: usize,
    pub calls: usize,
    /// Sequences whose lines differ: (name, call, softrnic's line, rxe's line).
    pub known: Vec<(String, usize, String, String)>,
    pub unknown: Vec<(String, usize, String, String)>,
}

/// The lines of each sequence in softrnic-conform's output.
fn sequences(out: &str) -> BTreeMap<String, Vec<&str>> {
    let mut seqs = BTreeMap::new();
    let mut current = None;
    for line in out.lines() {
        if let Some(name) = line.strip_prefix("=== ") {
            current = Some(name.to_owned());
            seqs.insert(name.to_owned(), Vec::new());
        } else if let Some(name) = &current {
            seqs.get_mut(name).expect("inserted").push(line);
        }
    }
    seqs
}

/// Compares softrnic's output with rxe's, sequence by sequence, up to the first line where
/// they part (what follows depends on it).
pub fn compare(softrnic: &str, rxe: &str) -> Report {
    let (ours, theirs) = (sequences(softrnic), sequences(rxe));
    let mut report = Report::default();
    for (name, want) in &theirs {
        report.sequences += 1;
        let got = ours.get(name).cloned().unwrap_or_default();
        let n = want.len().max(got.len());
        report.calls += n;
        let Some(i) = (0..n).find(|&i| got.get(i) != want.get(i)) else {
            continue;
        };
        let line = |v: &[&str]| v.get(i).map_or("(nothing)".to_owned(), |s| s.to_string());
        let (a, b) = (line(&got), line(want));
        let known = KNOWN.iter().any(|&(x, y)| x == a && y == b);
        let entry = (name.clone(), i, a, b);
        if known {
            report.known.push(entry);
        } else {
            report.unknown.push(entry);
        }
    }
    for name in ours.keys().filter(|n| !theirs.contains_key(*n)) {
        report
            .unknown
            .push((name.clone(), 0, "(ran)".into(), "(not run)".into()));
    }
    report
}

/// A verbs call of the generated grammar: objects are named by kind and number, and a call
/// may name one that is gone or was never made (softrnic-conform then ends the sequence the
/// same way on both sides).
fn call() -> impl Strategy<Value = String> {
    let pd = (0..2u8).prop_map(|n| format!("p{n}"));
    let mr = (0..3u8).prop_map(|n| format!("m{n}"));
    let cq = (0..2u8).prop_map(|n| format!("c{n}"));
    let qp = (0..3u8).prop_map(|n| format!("q{n}"));
    let len = prop_oneof![Just(0u32), Just(1), Just(64), Just(4096), Just(70000)];
    let access = prop_oneof![
        Just(0u32),
        Just(1),
        Just(2),
        Just(4),
        Just(7),
        Just(8),
        Just(15)
    ];
    let cqe = prop_oneof![Just(-1i64), Just(0), Just(1), Just(16), Just(100_000_000)];
    let qp_type = prop_oneof![Just("rc"), Just("uc"), Just("ud")];
    let wr = prop_oneof![Just(0u32), Just(1), Just(16), Just(100_000)];
    let sge = prop_oneof![Just(0u32), Just(1), Just(2), Just(64)];
    let state = prop_oneof![
        Just("reset"),
        Just("init"),
        Just("rtr"),
        Just("rts"),
        Just("sqd"),
        Just("err")
    ];
    let opcode = prop_oneof![
        Just("send"),
        Just("write"),
        Just("read"),
        Just("cas"),
        Just("fadd")
    ];
    prop_oneof![
        pd.clone().prop_map(|p| format!("alloc_pd {p}")),
        pd.clone().prop_map(|p| format!("dealloc_pd {p}")),
        (mr.clone(), pd.clone(), len.clone(), access)
            .prop_map(|(m, p, l, a)| format!("reg_mr {m} {p} {l} {a}")),
        mr.clone().prop_map(|m| format!("dereg_mr {m}")),
        (cq.clone(), cqe).prop_map(|(c, n)| format!("create_cq {c} {n}")),
        cq.clone().prop_map(|c| format!("destroy_cq {c}")),
        (
            qp.clone(),
            pd,
            cq.clone(),
            cq.clone(),
            qp_type,
            wr.clone(),
            wr,
            sge
        )
            .prop_map(|(q, p, s, r, t, sw, rw, g)| format!(
                "create_qp {q} {p} {s} {r} {t} {sw} {rw} {g} 0"
            )),
        qp.clone().prop_map(|q| format!("destroy_qp {q}")),
        (qp.clone(), state, qp.clone())
            .prop_map(|(q, s, peer)| format!("modify_qp {q} {s} {peer}")),
        qp.clone().prop_map(|q| format!("query_qp {q}")),
        (qp.clone(), mr.clone(), len.clone())
            .prop_map(|(q, m, l)| format!("post_recv {q} {m} 0 {l}")),
        (qp, opcode, mr.clone(), len, mr)
            .prop_map(|(q, o, m, l, r)| format!("post_send {q} {o} {m} 0 {l} {r} 0")),
        cq.prop_map(|c| format!("poll {c} 1")),
    ]
}

/// `cases` generated sequences of up to 24 calls from `seed`: the same seed gives the same
/// sequences (SOFTRNIC_CONFORMANCE_SEED replays a run).
pub fn generated(seed: u64, cases: usize) -> String {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let strategy = proptest::collection::vec(call(), 1..24);
    let mut out = String::new();
    for k in 0..cases {
        let calls = strategy
            .new_tree(&mut runner)
            .expect("a sequence")
            .current();
        out.push_str(&format!("--- generated {seed}-{k}\n{}\n", calls.join("\n")));
    }
    out
}

#[test]
fn a_seed_gives_the_same_sequences_and_the_comparison_finds_the_first_difference() {
    assert_eq!(generated(7, 5), generated(7, 5));
    assert_ne!(generated(7, 5), generated(8, 5));
    assert_eq!(generated(7, 5).matches("--- generated 7-").count(), 5);
    let rxe = "=== a\nalloc_pd: ok\ncreate_qp: ok\n=== b\nbind: ok\nlisten: err EINVAL\n";
    let ours = "=== a\nalloc_pd: ok\ncreate_qp: err EINVAL\n=== b\nbind: ok\nlisten: ok\n";
    let r = compare(ours, rxe);
    assert_eq!((r.sequences, r.calls), (2, 4));
    assert_eq!(r.known.len(), 1, "{r:?}");
    assert_eq!(
        r.unknown,
        [(
            "b".into(),
            1,
            "listen: ok".into(),
            "listen: err EINVAL".into()
        )]
    );
}
