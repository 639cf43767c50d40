//! Random workloads over the simulated network, and the properties every run must keep:
//!
//! - every work request completes exactly once, in order, with the right status;
//! - every byte written, read, sent or atomically updated is intact;
//! - every fault ends as the right error completion, never a hang;
//! - the engines' queues and the frames in flight stay bounded.
//!
//! Everything comes from the seed: a failing seed replays exactly with
//! `SOFTRNIC_SEED=<seed> cargo test -p softrnic-tests --test simulation`.

use softrnic_emu_core::{
    Access, AddressHandle, Mtu, QpCap, QpInit, QpType, RecvWr, Remote, SendFlags, SendOp, SendWr,
    Sge, UdDest, Wc, WcFlags, WcOpcode, WcStatus,
};

use crate::Rng;
use crate::sim::{Faults, LinkSpec, Settings, Sim};

/// What a run did, for the soak command's summary.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Work requests posted.
    pub wrs: usize,
    /// Of those, completed successfully.
    pub succeeded: usize,
    /// Frames sent.
    pub frames: u64,
    /// Virtual time at the end, in nanoseconds.
    pub sim_ns: u64,
    /// The fault profile.
    pub profile: &'static str,
    /// Every engine counter, summed over the hosts.
    pub counters: std::collections::BTreeMap<&'static str, u64>,
}

/// The kind of a generated work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CompareSwap,
}

impl Kind {
    fn consumes_recv(self) -> bool {
        matches!(self, Kind::Send | Kind::SendImm | Kind::WriteImm)
    }
}

/// One generated WR and where its bytes live.
#[derive(Debug, Clone)]
struct Op {
    kind: Kind,
    len: usize,
    /// Requester's local buffer.
    local: u64,
    /// Responder's buffer (WRITE target, READ source, atomic counter), if any.
    remote: u64,
    /// The bytes the WR moves.
    data: Vec<u8>,
    /// Atomics: compare (CAS), and the value to add or swap in.
    compare: u64,
    operand: u64,
    /// Atomics: the original value the responder must return.
    orig: u64,
}

struct Flow {
    qp_type: QpType,
    a: usize,
    b: usize,
    qpa: u32,
    qpb: u32,
    cqa: u32,
    cqb: u32,
    ops: Vec<Op>,
    /// Receive buffers at B, in posting order, and how many are posted.
    recvs: Vec<(u64, usize)>,
    posted: usize,
    lkey_b: u32,
    counter: u64,
    counter_final: u64,
    done_a: Vec<Wc>,
    done_b: Vec<Wc>,
}

const PROFILES: [&str; 5] = ["clean", "lossy", "corrupting", "hostile", "partitioned"];

fn faults(profile: &str) -> Faults {
    match profile {
        "lossy" => Faults {
            loss: 0.02,
            duplicate: 0.01,
            reorder: 0.02,
            corrupt: 0.0,
        },
        "corrupting" => Faults {
            loss: 0.01,
            corrupt: 0.03,
            ..Faults::default()
        },
        "hostile" => Faults {
            loss: 0.05,
            duplicate: 0.03,
            reorder: 0.05,
            corrupt: 0.01,
        },
        _ => Faults::default(),
    }
}

/// A non-zero byte pattern, so untouched (zero) bytes are told apart from written ones; the
/// first 8 bytes carry the message's id when there is room.
fn pattern(rng: &mut Rng, id: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|_| (rng.below(255) + 1) as u8).collect();
    if len >= 8 {
        v[..8].copy_from_slice(&id_bytes(id));
    }
    v
}

fn id_bytes(id: u64) -> [u8; 8] {
    (id | 1 << 63).to_le_bytes()
}

fn length(rng: &mut Rng, mtu: usize, min: usize) -> usize {
    let len = match rng.below(10) {
        0 => 0,
        1..=4 => rng.below(64) as usize,
        5..=8 => rng.below(3 * mtu as u64 + 17) as usize,
        _ => rng.below(16 * 1024) as usize,
    };
    len.max(min)
}

const RNR_DELAY_NS: u64 = 2_000_000;
const MAX_STEPS: usize = 3_000_000;

/// Runs the workload of `seed` and checks every property; the error says what broke.
pub fn run(seed: u64) -> Result<Outcome, String> {
    let mut rng = Rng::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xabcd);
    let profile = PROFILES[(seed % PROFILES.len() as u64) as usize];
    let n_hosts = 2 + rng.below(2) as usize;
    let link = LinkSpec {
        latency_ns: 1_000 + rng.below(9_000),
        bytes_per_us: 1250,
        faults: faults(profile),
    };
    let mut sim = Sim::new(seed, n_hosts, link);
    if profile == "partitioned" {
        // Longer than 8 ACK timeouts of 1.05 ms: RC flows caught by it must fail with
        // RETRY_EXC_ERR.
        let start = 100_000 + rng.below(400_000);
        sim.partition = Some((start, start + 20_000_000));
    }
    let mtu = [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096][rng.below(5) as usize];
    let settings = Settings {
        mtu,
        ..Settings::default()
    };
    let n_flows = 1 + rng.below(4) as usize;
    let mut flows: Vec<Flow> = (0..n_flows)
        .map(|f| make_flow(&mut sim, &mut rng, f, &settings))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("seed {seed}: {e}"))?;
    // Sometimes receivers post half their buffers late, so senders meet RNR NAKs.
    let late = rng.below(3) == 0;
    for flow in &mut flows {
        let n = if late {
            flow.recvs.len() / 2
        } else {
            flow.recvs.len()
        };
        post_recvs(&mut sim, flow, n);
    }

    if late {
        sim.alarm = Some(RNR_DELAY_NS);
    }
    let mut bound_err = None;
    let done = |sim: &mut Sim| {
        if late && sim.now >= RNR_DELAY_NS {
            for flow in flows.iter_mut() {
                let n = flow.recvs.len();
                post_recvs(sim, flow, n);
            }
        }
        for (i, h) in sim.hosts.iter().enumerate() {
            if let Err(e) = h.engine.check_invariants()
                && bound_err.is_none()
            {
                bound_err = Some(format!("host {i}: {e}"));
            }
        }
        flows.iter_mut().all(|f| {
            drain(sim, f.a, f.cqa, &mut f.done_a);
            f.done_a.len() >= f.ops.len()
        }) && (!late || sim.now >= RNR_DELAY_NS)
    };
    let trace = std::env::var_os("SOFTRNIC_TRACE").is_some();
    sim.record = trace;
    let ran = sim.run_until(MAX_STEPS, done);
    if trace {
        for (f, flow) in flows.iter().enumerate() {
            let kinds: Vec<_> = flow.ops.iter().map(|o| (o.kind, o.len)).collect();
            eprintln!(
                "flow {f} {:?} {}->{} qp {:#x}->{:#x}: {kinds:?}",
                flow.qp_type, flow.a, flow.b, flow.qpa, flow.qpb
            );
            eprintln!(
                "  done_a {:?}",
                flow.done_a
                    .iter()
                    .map(|w| (w.wr_id, w.status))
                    .collect::<Vec<_>>()
            );
        }
        for t in &sim.trace {
            eprintln!("{:>10} {}", t.at, t.line());
        }
    }
    if let Some(e) = bound_err {
        return Err(format!("seed {seed} ({profile}): {e}"));
    }
    ran.map_err(|e| format!("seed {seed} ({profile}): a work request never completed: {e}"))?;
    // Let stragglers (duplicates, late responses) settle; nothing may change the outcome.
    sim.run_idle(MAX_STEPS)
        .map_err(|e| format!("seed {seed} ({profile}): {e}"))?;
    let in_flight_bound = n_flows * 4 * 256 + 64;
    if sim.max_in_flight > in_flight_bound {
        return Err(format!(
            "seed {seed} ({profile}): {} frames in flight, above {in_flight_bound}",
            sim.max_in_flight
        ));
    }

    let mut outcome = Outcome {
        profile,
        sim_ns: sim.now,
        frames: sim
            .hosts
            .iter()
            .map(|h| h.engine.counters().sent_pkts)
            .sum(),
        ..Outcome::default()
    };
    for h in &sim.hosts {
        for (name, v) in h.engine.counters().iter() {
            *outcome.counters.entry(name).or_default() += v;
        }
    }
    for (i, flow) in flows.iter_mut().enumerate() {
        drain(&mut sim, flow.a, flow.cqa, &mut flow.done_a);
        drain(&mut sim, flow.b, flow.cqb, &mut flow.done_b);
        let ordered = sim.link.faults.duplicate == 0.0 && sim.link.faults.reorder == 0.0;
        // A partition longer than the retry budget must exhaust it. So can the hostile profile:
        // go-back-N over a network that reorders 5% of frames (RoCE assumes one that does not)
        // sometimes retries the same PSN eight times without progress (about 1 flow in 10^4).
        let may_fail = matches!(profile, "partitioned" | "hostile");
        check_flow(&sim, flow, may_fail, ordered).map_err(|e| {
            format!(
                "seed {seed} ({profile}), flow {i} ({:?}): {e}",
                flow.qp_type
            )
        })?;
        outcome.wrs += flow.ops.len();
        outcome.succeeded += flow
            .done_a
            .iter()
            .filter(|w| w.status == WcStatus::Success)
            .count();
    }
    Ok(outcome)
}

fn drain(sim: &mut Sim, h: usize, cq: u32, into: &mut Vec<Wc>) {
    let mut buf = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 32];
    loop {
        let n = sim.hosts[h].engine.poll_cq(cq, &mut buf).unwrap_or(0);
        into.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return;
        }
    }
}

fn post_recvs(sim: &mut Sim, flow: &mut Flow, upto: usize) {
    while flow.posted < upto {
        let (addr, room) = flow.recvs[flow.posted];
        let wr = RecvWr {
            wr_id: flow.posted as u64,
            sgl: vec![Sge {
                addr,
                length: room as u32,
                lkey: flow.lkey_b,
            }],
        };
        sim.hosts[flow.b]
            .engine
            .post_recv(flow.qpb, wr)
            .expect("post_recv");
        flow.posted += 1;
    }
}

/// Creates a flow: a QP on host a sending to a QP on host b, its buffers, and its posted WRs.
fn make_flow(sim: &mut Sim, rng: &mut Rng, f: usize, settings: &Settings) -> Result<Flow, String> {
    let n_hosts = sim.hosts.len();
    let a = rng.below(n_hosts as u64) as usize;
    let b = (a + 1 + rng.below(n_hosts as u64 - 1) as usize) % n_hosts;
    let qp_type = match rng.below(10) {
        0..=5 => QpType::Rc,
        6..=7 => QpType::Uc,
        _ => QpType::Ud,
    };
    let mtu = settings.mtu.bytes() as usize;
    let cap = QpCap::new(64, 2, 64);
    let mut make = |h: usize| -> Result<(u32, u32, u32), String> {
        let e = &mut sim.hosts[h].engine;
        let pd = e.alloc_pd(0).map_err(|e| e.to_string())?;
        let cq = e.create_cq(256).map_err(|e| e.to_string())?;
        let init = QpInit::new(qp_type, cq, cap);
        Ok((pd, cq, e.create_qp(pd, init).map_err(|e| e.to_string())?))
    };
    let (pda, cqa, qpa) = make(a)?;
    let (pdb, cqb, qpb) = make(b)?;
    let (psna, psnb) = (rng.below(1 << 24) as u32, rng.below(1 << 24) as u32);
    let (ea, eb) = (sim.endpoint(a, qpa, psna), sim.endpoint(b, qpb, psnb));
    sim.connect(a, qpa, psna, &eb, settings);
    sim.connect(b, qpb, psnb, &ea, settings);

    // Buffers; one region per side covers all of them.
    let mut spans = [(u64::MAX, 0u64); 2];
    let mut alloc = |sim: &mut Sim, side: usize, data: &[u8], len: usize| {
        let h = [a, b][side];
        let m = sim.hosts[h].engine.memory_mut();
        let addr = m.alloc(len.max(1));
        m.slice_mut(addr, data.len())
            .expect("fresh buffer")
            .copy_from_slice(data);
        spans[side].0 = spans[side].0.min(addr);
        spans[side].1 = spans[side].1.max(addr + len.max(1) as u64);
        addr
    };
    let counter = rng.next_u64();
    let ctr = alloc(sim, 1, &counter.to_ne_bytes(), 8);
    let mut current = counter;
    let n_ops = 5 + rng.below(26) as usize;
    let mut ops = Vec::new();
    let mut recvs = Vec::new();
    for i in 0..n_ops {
        let id = ((f as u64) << 32) | i as u64;
        let kinds: &[Kind] = match qp_type {
            QpType::Ud => &[Kind::Send, Kind::SendImm],
            QpType::Uc => &[Kind::Send, Kind::SendImm, Kind::Write, Kind::WriteImm],
            QpType::Rc => &[
                Kind::Send,
                Kind::SendImm,
                Kind::Write,
                Kind::WriteImm,
                Kind::Read,
                Kind::FetchAdd,
                Kind::CompareSwap,
            ],
            QpType::XrcSend | QpType::XrcRecv => unreachable!("flows are RC, UC or UD"),
        };
        let kind = kinds[rng.below(kinds.len() as u64) as usize];
        let len = match (qp_type, kind) {
            (_, Kind::FetchAdd | Kind::CompareSwap) => 8,
            // UD messages fit one packet, with room for the id.
            (QpType::Ud, _) => 8 + rng.below(mtu as u64 - 7) as usize,
            // UC receivers tell messages apart by their id.
            (QpType::Uc, _) => length(rng, mtu, 8),
            (_, Kind::Read) => length(rng, mtu, 0).min(8 * mtu),
            _ => length(rng, mtu, 0),
        };
        let data = pattern(rng, id, len);
        let (mut compare, mut operand, mut orig) = (0, 0, 0);
        let (local, remote) = match kind {
            Kind::Read => (alloc(sim, 0, &[], len), alloc(sim, 1, &data, len)),
            Kind::Write | Kind::WriteImm => (alloc(sim, 0, &data, len), alloc(sim, 1, &[], len)),
            Kind::FetchAdd | Kind::CompareSwap => {
                orig = current;
                operand = rng.next_u64();
                if kind == Kind::FetchAdd {
                    current = current.wrapping_add(operand);
                } else {
                    compare = if rng.flip() {
                        current
                    } else {
                        current ^ (rng.next_u64() | 1)
                    };
                    if compare == current {
                        current = operand;
                    }
                }
                (alloc(sim, 0, &[], 8), ctr)
            }
            _ => (alloc(sim, 0, &data, len), 0),
        };
        if kind.consumes_recv() {
            let room = match qp_type {
                QpType::Ud => 40 + mtu,
                QpType::Uc => 16 * 1024 + 3 * mtu + 17,
                QpType::Rc => len + rng.below(3) as usize,
                QpType::XrcSend | QpType::XrcRecv => unreachable!("flows are RC, UC or UD"),
            };
            recvs.push((alloc(sim, 1, &[], room), room));
        }
        ops.push(Op {
            kind,
            len,
            local,
            remote,
            data,
            compare,
            operand,
            orig,
        });
    }
    let all = Access::LOCAL_WRITE
        .union(Access::REMOTE_WRITE)
        .union(Access::REMOTE_READ)
        .union(Access::REMOTE_ATOMIC);
    let reg = |sim: &mut Sim, h: usize, pd: u32, (lo, hi): (u64, u64)| {
        sim.hosts[h]
            .engine
            .reg_mr(pd, lo, hi - lo, all)
            .map_err(|e| e.to_string())
    };
    let lkey_a = reg(sim, a, pda, spans[0])?;
    let lkey_b = reg(sim, b, pdb, spans[1])?;

    for (i, op) in ops.iter().enumerate() {
        let remote = Remote {
            addr: op.remote,
            rkey: lkey_b,
        };
        let sop = match op.kind {
            Kind::Send => SendOp::Send,
            Kind::SendImm => SendOp::SendWithImm(i as u32),
            Kind::Write => SendOp::Write(remote),
            Kind::WriteImm => SendOp::WriteWithImm(remote, i as u32),
            Kind::Read => SendOp::Read(remote),
            Kind::FetchAdd => SendOp::FetchAdd {
                remote,
                add: op.operand,
            },
            Kind::CompareSwap => SendOp::CompareSwap {
                remote,
                compare: op.compare,
                swap: op.operand,
            },
        };
        let atomic = matches!(op.kind, Kind::FetchAdd | Kind::CompareSwap);
        // Split the local buffer over two SGEs sometimes.
        let sgl = if op.len > 1 && !atomic && rng.flip() {
            let cut = 1 + rng.below(op.len as u64 - 1) as u32;
            vec![
                Sge {
                    addr: op.local,
                    length: cut,
                    lkey: lkey_a,
                },
                Sge {
                    addr: op.local + cut as u64,
                    length: op.len as u32 - cut,
                    lkey: lkey_a,
                },
            ]
        } else {
            vec![Sge {
                addr: op.local,
                length: op.len as u32,
                lkey: lkey_a,
            }]
        };
        let mut flags = SendFlags::SIGNALED;
        if op.len <= 64 && matches!(op.kind, Kind::Send | Kind::Write) && rng.flip() {
            flags |= SendFlags::INLINE;
        }
        if rng.below(4) == 0 {
            flags |= SendFlags::SOLICITED;
        }
        let ud = (qp_type == QpType::Ud).then(|| UdDest {
            ah: AddressHandle::to(sim.hosts[b].gid, 0).via(sim.hosts[b].mac),
            remote_qpn: qpb,
            remote_qkey: 0x1111_1111,
        });
        let wr = SendWr {
            wr_id: i as u64,
            op: sop,
            sgl,
            flags,
            ud,
            xrc_srqn: None,
        };
        sim.hosts[a]
            .engine
            .post_send(qpa, wr)
            .map_err(|e| format!("post_send: {e}"))?;
    }
    Ok(Flow {
        qp_type,
        a,
        b,
        qpa,
        qpb,
        cqa,
        cqb,
        ops,
        recvs,
        posted: 0,
        lkey_b,
        counter,
        counter_final: current,
        done_a: Vec::new(),
        done_b: Vec::new(),
    })
}

fn wc_opcode(kind: Kind) -> WcOpcode {
    match kind {
        Kind::Send | Kind::SendImm => WcOpcode::Send,
        Kind::Write | Kind::WriteImm => WcOpcode::RdmaWrite,
        Kind::Read => WcOpcode::RdmaRead,
        Kind::FetchAdd => WcOpcode::FetchAdd,
        Kind::CompareSwap => WcOpcode::CompSwap,
    }
}

fn bytes(sim: &Sim, h: usize, addr: u64, len: usize) -> Vec<u8> {
    sim.hosts[h]
        .engine
        .memory()
        .slice(addr, len)
        .expect("allocated")
        .to_vec()
}

/// Checks one flow's completions and data.
fn check_flow(sim: &Sim, f: &Flow, may_fail: bool, ordered: bool) -> Result<(), String> {
    // Every WR completes exactly once, in order.
    let ids: Vec<u64> = f.done_a.iter().map(|w| w.wr_id).collect();
    let want: Vec<u64> = (0..f.ops.len() as u64).collect();
    if ids != want {
        return Err(format!("sender completions {ids:?}, want {want:?}"));
    }
    // RC: successes, then possibly one RETRY_EXC_ERR (only with a partition) and flushes.
    let ok = f
        .done_a
        .iter()
        .take_while(|w| w.status == WcStatus::Success)
        .count();
    if ok < f.ops.len() {
        let first = f.done_a[ok].status;
        let rest_flushed = f.done_a[ok + 1..]
            .iter()
            .all(|w| w.status == WcStatus::WrFlushErr);
        if f.qp_type != QpType::Rc || !may_fail || first != WcStatus::RetryExcErr || !rest_flushed {
            let statuses: Vec<_> = f.done_a.iter().map(|w| w.status).collect();
            return Err(format!("sender statuses {statuses:?}"));
        }
    }
    for (w, op) in f.done_a[..ok].iter().zip(&f.ops) {
        if w.opcode != wc_opcode(op.kind) || w.qp_num != f.qpa {
            return Err(format!(
                "WR {}: completion {w:?} for {:?}",
                w.wr_id, op.kind
            ));
        }
        let got = match op.kind {
            Kind::Read => bytes(sim, f.a, op.local, op.len),
            Kind::FetchAdd | Kind::CompareSwap => bytes(sim, f.a, op.local, 8),
            Kind::Write | Kind::WriteImm if f.qp_type == QpType::Rc => {
                bytes(sim, f.b, op.remote, op.len)
            }
            _ => continue,
        };
        let want = match op.kind {
            Kind::FetchAdd | Kind::CompareSwap => op.orig.to_ne_bytes().to_vec(),
            _ => op.data.clone(),
        };
        if got != want {
            return Err(format!(
                "WR {} ({:?}, {} bytes): data differs",
                w.wr_id, op.kind, op.len
            ));
        }
    }
    let atomics = f
        .ops
        .iter()
        .filter(|o| matches!(o.kind, Kind::FetchAdd | Kind::CompareSwap))
        .count();
    if atomics > 0 && ok == f.ops.len() {
        let ctr = f
            .ops
            .iter()
            .find(|o| o.kind == Kind::FetchAdd || o.kind == Kind::CompareSwap);
        let got = bytes(sim, f.b, ctr.expect("an atomic").remote, 8);
        if got != f.counter_final.to_ne_bytes() {
            return Err(format!(
                "counter {:#x} after atomics from {:#x}, want {:#x}",
                u64::from_ne_bytes(got.try_into().expect("8")),
                f.counter,
                f.counter_final
            ));
        }
    }
    check_receiver(sim, f, ok, ordered)
}

/// The receiver's completions: in posting order of its buffers, each message intact. RC
/// delivers every message once and in order; UC and UD may lose messages, and when the network
/// duplicates or reorders frames they may also deliver them twice or out of order (they have
/// no duplicate detection: IBA 9.8.3, and rxe's `check_psn`).
fn check_receiver(sim: &Sim, f: &Flow, sender_ok: usize, ordered: bool) -> Result<(), String> {
    let consuming: Vec<usize> = (0..f.ops.len())
        .filter(|&i| f.ops[i].kind.consumes_recv())
        .collect();
    let mut last = None;
    for (k, w) in f.done_b.iter().enumerate() {
        if w.wr_id != k as u64 || w.status != WcStatus::Success || w.qp_num != f.qpb {
            return Err(format!("receive completion {k}: {w:?}"));
        }
        let (addr, _) = f.recvs[k];
        // Which message landed here.
        let i = match f.qp_type {
            QpType::Rc => consuming[k],
            _ if w.wc_flags.contains(WcFlags::WITH_IMM) => w.imm_data as usize,
            QpType::Ud => {
                let id = bytes(sim, f.b, addr + 40, 8);
                (u64::from_le_bytes(id.try_into().expect("8")) & 0xffff_ffff) as usize
            }
            QpType::Uc => {
                let id = bytes(sim, f.b, addr, 8);
                (u64::from_le_bytes(id.try_into().expect("8")) & 0xffff_ffff) as usize
            }
            QpType::XrcSend | QpType::XrcRecv => unreachable!("flows are RC, UC or UD"),
        };
        let strict = ordered || f.qp_type == QpType::Rc;
        if (strict && last.is_some_and(|l| i <= l))
            || i >= f.ops.len()
            || !f.ops[i].kind.consumes_recv()
        {
            return Err(format!(
                "receive {k}: message {i} out of order (after {last:?})"
            ));
        }
        last = Some(i);
        let op = &f.ops[i];
        let imm = matches!(op.kind, Kind::SendImm | Kind::WriteImm);
        if imm != (w.wc_flags.contains(WcFlags::WITH_IMM)) || (imm && w.imm_data != i as u32) {
            return Err(format!("receive {k}: immediate data {w:?} for message {i}"));
        }
        match (f.qp_type, op.kind) {
            (_, Kind::WriteImm) => {
                if w.opcode != WcOpcode::RecvRdmaWithImm || w.byte_len as usize != op.len {
                    return Err(format!("receive {k}: {w:?} for WRITE_WITH_IMM {i}"));
                }
                if bytes(sim, f.b, op.remote, op.len) != op.data {
                    return Err(format!("WRITE_WITH_IMM {i}: data differs"));
                }
            }
            (QpType::Ud, _) => {
                let got = bytes(sim, f.b, addr, 40 + op.len);
                let src_ip = &got[20 + 12..20 + 16];
                let want_ip = match sim.hosts[f.a].gid.to_ip() {
                    core::net::IpAddr::V4(v4) => v4.octets(),
                    core::net::IpAddr::V6(_) => unreachable!("IPv4 hosts"),
                };
                if w.byte_len as usize != 40 + op.len
                    || w.src_qp != f.qpa
                    || !w.wc_flags.contains(WcFlags::GRH)
                    || got[..20] != [0; 20]
                    || got[20] != 0x45
                    || src_ip != want_ip
                    || got[40..] != op.data[..]
                {
                    return Err(format!("UD receive {k} of message {i}: {w:?}"));
                }
            }
            _ => {
                if w.opcode != WcOpcode::Recv
                    || w.byte_len as usize != op.len
                    || bytes(sim, f.b, addr, op.len) != op.data
                {
                    return Err(format!(
                        "receive {k} of message {i} ({} bytes): {w:?}",
                        op.len
                    ));
                }
            }
        }
    }
    if f.qp_type == QpType::Rc {
        // Every SEND the sender saw acknowledged was received.
        let acked = consuming.iter().filter(|&&i| i < sender_ok).count();
        if f.done_b.len() < acked {
            return Err(format!(
                "{} receives completed, but {acked} sends were acknowledged",
                f.done_b.len()
            ));
        }
    }
    if f.qp_type == QpType::Uc {
        // A UC WRITE may be cut short by a loss, but never corrupted.
        for op in f.ops.iter().filter(|o| o.kind == Kind::Write) {
            let got = bytes(sim, f.b, op.remote, op.len);
            if got.iter().zip(&op.data).any(|(g, d)| *g != 0 && g != d) {
                return Err("a UC WRITE left foreign bytes".into());
            }
        }
    }
    Ok(())
}
