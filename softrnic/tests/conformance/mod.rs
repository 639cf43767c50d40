//! The differential check against kernel rxe and kernel rdma_cm: call sequences (the
//! hand-written corpus, `tests/interop/conformance.corpus`, and sequences proptest generates
//! from a grammar of verbs calls) run by `softrnic-conform` (`tests/interop/conform.c`) on
//! both sides, and their lines compared call by call. A difference is known when
//! docs/compatibility.md lists it ("Where behaviour differs"); the interop test prints the
//! others.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// The hand-written sequences.
pub const CORPUS: &str = include_str!("../../../tests/interop/conformance.corpus");

/// Differences docs/compatibility.md lists: (the corpus sequence, softrnic's line, rxe's
/// line), each the first line where the two part. Generated sequences keep clear of them
/// (`with_prerequisites`), so any difference there is new.
pub const KNOWN: &[(&str, &str, &str)] = &[
    // softrnic's device limits: 16 Ki work requests a queue (rxe 6.1: 1 Mi).
    (
        "qp: more work requests than softrnic takes",
        "create_qp: err EINVAL",
        "create_qp: ok",
    ),
    // softrnic has XRC (through ibv_create_qp_ex with an XRC domain); rxe has none.
    (
        "qp: XRC without a domain",
        "create_qp: err EINVAL",
        "create_qp: err EOPNOTSUPP",
    ),
    // A datagram beyond the path MTU: softrnic completes it with a local length error
    // (IBA 11.4.1.1: a UD message is one packet); rxe sends it.
    (
        "ud qp states and a datagram to itself",
        "poll: wc local length error",
        "poll: wc success opcode 0 len 0",
    ),
    // An opcode a QP's type does not take: softrnic refuses the post (EINVAL); rxe's
    // provider posts it and its kernel completes it with an error, or never.
    (
        "uc qp takes no read or atomic",
        "post_send: err EINVAL",
        "post_send: ok",
    ),
    (
        "work requests: an unknown opcode",
        "post_send: err EINVAL",
        "post_send: ok",
    ),
    // A QP asked for no inline data takes none (EINVAL); rxe sizes its send queue's entries
    // for the SGEs asked for and takes as many inline bytes (16 a SGE: rxe_qp_init_req).
    (
        "work requests: inline data on a QP asked for none",
        "post_send: err EINVAL",
        "post_send: ok",
    ),
    // A P_Key index beyond the one-entry table: EINVAL, as mlx5 gives; rxe 6.1 takes any.
    (
        "qp: a P_Key index beyond the table",
        "modify_qp: err EINVAL",
        "modify_qp: ok",
    ),
    // A work request whose post failed takes no place in softrnic's send queue. rxe 6.1's
    // provider writes it into the queue before its kernel refuses the post (in INIT, for
    // one), so it stays there and runs later: rxe's queue of two is full after one accepted
    // send, and the same four completions come from fewer posts.
    (
        "work requests a QP cannot take",
        "post_send: ok",
        "post_send: err ENOMEM",
    ),
    // A SEND longer than the receive: the responder NAKs it as an invalid request (IBA
    // 9.9.3, a class C length error), which the requester completes as a remote invalid
    // request error and the receiver as a local length error, as mlx5 does; rxe 6.1 NAKs
    // it as a remote operational error and completes the receive as a local QP error.
    (
        "rc errors: receive too small",
        "poll: wc remote invalid request error",
        "poll: wc remote operation error",
    ),
    // librdmacm's rdma_resolve_route, rdma_connect and rdma_accept on an id with no address
    // dereference its NULL route or QP; softrnic's return EINVAL.
    (
        "rdma_cm: a route before an address (librdmacm dereferences a NULL route)",
        "resolve_route: err EINVAL",
        "killed by signal 11",
    ),
    (
        "rdma_cm: connect before an address (librdmacm dereferences a NULL route)",
        "connect: err EINVAL",
        "killed by signal 11",
    ),
    (
        "rdma_cm: states a call needs",
        "accept: err EINVAL",
        "killed by signal 11",
    ),
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
        let known = (KNOWN.iter()).any(|&(seq, x, y)| seq == name && x == a && y == b);
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

/// A step of the generated grammar: one verbs call, or a QP's way to RTS ("up"). Objects are
/// named by kind and number; `with_prerequisites` makes those a step names before they are used.
fn step() -> impl Strategy<Value = String> {
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
    // Within both devices' limits (softrnic 16 Ki, rxe 1 Mi): the corpus has the difference.
    let wr = prop_oneof![Just(0u32), Just(1), Just(16), Just(4096)];
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
        (qp.clone(), qp.clone()).prop_map(|(q, peer)| format!(
            "modify_qp {q} init\nmodify_qp {q} rtr {peer}\nmodify_qp {q} rts"
        )),
        qp.clone().prop_map(|q| format!("query_qp {q}")),
        (qp.clone(), mr.clone(), len.clone())
            .prop_map(|(q, m, l)| format!("post_recv {q} {m} 0 {l}")),
        (qp, opcode, mr.clone(), len, mr)
            .prop_map(|(q, o, m, l, r)| format!("post_send {q} {o} {m} 0 {l} {r} 0")),
        cq.prop_map(|c| format!("poll {c} 1")),
    ]
}

/// The call that makes object `name` with arguments that are valid on both sides.
fn maker(name: &str) -> Option<String> {
    let n = &name[1..];
    Some(match name.as_bytes()[0] {
        b'p' => format!("alloc_pd p{n}"),
        b'm' => format!("reg_mr m{n} p0 4096 15"),
        b'c' => format!("create_cq c{n} 16"),
        b'q' => format!("create_qp q{n} p0 c0 c0 rc 16 16 1 0"),
        _ => return None,
    })
}

/// `calls` with, before each, the calls that make the objects it names and the sequence does
/// not hold (as far as the calls say: a make with arguments out of range may fail, and then
/// softrnic-conform skips what names the object, the same way on both sides). A READ or an
/// atomic on a UC QP becomes a WRITE: that difference is KNOWN, and would hide what follows.
fn with_prerequisites(calls: &[String]) -> Vec<String> {
    fn need(name: &str, held: &mut BTreeSet<String>, out: &mut Vec<String>) {
        if held.contains(name) {
            return;
        }
        let Some(make) = maker(name) else { return };
        held.insert(name.to_owned());
        for dep in make.split(' ').skip(2).filter(|a| is_object(a)) {
            need(dep, held, out);
        }
        out.push(make);
    }
    fn is_object(a: &str) -> bool {
        a.len() == 2 && b"pmcq".contains(&a.as_bytes()[0]) && a.as_bytes()[1].is_ascii_digit()
    }
    let mut held = BTreeSet::new();
    let mut uc = BTreeSet::new();
    let mut out = Vec::new();
    for line in calls.iter().flat_map(|c| c.lines()) {
        let mut words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            ["create_qp", q, _, _, _, "uc", ..] => uc.insert(q.to_owned()),
            ["create_qp", q, ..] => uc.remove(q),
            _ => false,
        };
        if words[0] == "post_send"
            && uc.contains(words[1])
            && matches!(words.get(2), Some(&("read" | "cas" | "fadd")))
        {
            words[2] = "write";
        }
        let makes = matches!(words[0], "alloc_pd" | "reg_mr" | "create_cq" | "create_qp");
        let unmakes = matches!(
            words[0],
            "dealloc_pd" | "dereg_mr" | "destroy_cq" | "destroy_qp"
        );
        for (i, w) in words.iter().enumerate().skip(1) {
            if is_object(w) && !(makes && i == 1) {
                need(w, &mut held, &mut out);
            }
        }
        if makes {
            held.insert(words[1].to_owned());
        } else if unmakes {
            held.remove(words[1]);
        }
        out.push(words.join(" "));
    }
    out
}

/// `cases` generated sequences of up to 24 steps from `seed`: the same seed gives the same
/// sequences (SOFTRNIC_CONFORMANCE_SEED replays a run).
pub fn generated(seed: u64, cases: usize) -> String {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let strategy = proptest::collection::vec(step(), 1..24);
    let mut out = String::new();
    for k in 0..cases {
        let steps = strategy
            .new_tree(&mut runner)
            .expect("a sequence")
            .current();
        let calls = with_prerequisites(&steps).join("\n");
        out.push_str(&format!("--- generated {seed}-{k}\n{calls}\n"));
    }
    out
}

#[test]
fn generated_sequences_make_each_object_before_a_call_names_it() {
    let calls = [
        "post_send q1 send m0 0 64 m2 0",
        "destroy_qp q1",
        "query_qp q1",
    ];
    let calls: Vec<String> = calls.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        with_prerequisites(&calls),
        [
            "alloc_pd p0",
            "create_cq c0 16",
            "create_qp q1 p0 c0 c0 rc 16 16 1 0",
            "reg_mr m0 p0 4096 15",
            "reg_mr m2 p0 4096 15",
            "post_send q1 send m0 0 64 m2 0",
            "destroy_qp q1",
            "create_qp q1 p0 c0 c0 rc 16 16 1 0",
            "query_qp q1",
        ]
    );
    // A generated make is the sequence's own: nothing is made for it, nor again after it.
    let calls = ["create_cq c1 -1".to_string(), "poll c1 1".to_string()];
    assert_eq!(with_prerequisites(&calls), calls);
    // A UC QP is sent no READ or atomic.
    let calls = [
        "create_qp q0 p0 c0 c0 uc 1 1 1 0",
        "post_send q0 cas m0 0 8 m0 0",
    ];
    let calls: Vec<String> = calls.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        with_prerequisites(&calls)[2..],
        [
            "create_qp q0 p0 c0 c0 uc 1 1 1 0",
            "reg_mr m0 p0 4096 15",
            "post_send q0 write m0 0 8 m0 0",
        ]
    );
}

#[test]
fn a_seed_gives_the_same_sequences_and_the_comparison_finds_the_first_difference() {
    assert_eq!(generated(7, 5), generated(7, 5));
    assert_ne!(generated(7, 5), generated(8, 5));
    assert_eq!(generated(7, 5).matches("--- generated 7-").count(), 5);
    // A difference is known only in the sequence that lists it.
    let a = "=== qp: more work requests than softrnic takes\nalloc_pd: ok\ncreate_qp: ";
    let c = "=== c\nalloc_pd: ok\ncreate_qp: ";
    let rxe = format!("{a}ok\n=== b\nbind: ok\nlisten: err EINVAL\n{c}ok\n");
    let ours = format!("{a}err EINVAL\n=== b\nbind: ok\nlisten: ok\n{c}err EINVAL\n");
    let r = compare(&ours, &rxe);
    assert_eq!((r.sequences, r.calls), (3, 6));
    assert_eq!(r.known.len(), 1, "{r:?}");
    let line = |name: &str, a: &str, b: &str| (name.to_owned(), 1, a.to_owned(), b.to_owned());
    assert_eq!(
        r.unknown,
        [
            line("b", "listen: ok", "listen: err EINVAL"),
            line("c", "create_qp: err EINVAL", "create_qp: ok"),
        ]
    );
}
