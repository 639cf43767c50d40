//! The engine over the in-process loopback link, on one core: 64 KiB RDMA WRITE throughput
//! beside a plain memcpy of the same bytes in the same run, the 8-byte SEND message rate, the
//! memory a QP takes, and the SEND rate beside 100,000 idle QPs. Run with `cargo bench -p
//! softrnic-emu-core`.
//!
//! Figures, not assertions: this machine is shared, so read the ratio to the in-process memcpy.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use softrnic_emu_core::{
    Access, QpCap, QpInit, QpType, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, Wc, WcOpcode,
    WcStatus,
};
use softrnic_link::library::Device;
use softrnic_link::local::Loopback;

/// Counts live heap bytes, for the per-QP memory figure.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const ALL: Access = Access::from_bits_retain(1 | 2 | 4 | 8);

fn budget() -> Duration {
    Duration::from_millis(
        std::env::var("BENCH_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000),
    )
}

struct Pair {
    dev: Device<Loopback>,
    pd: u32,
    cq: u32,
    a: u32,
    b: u32,
}

fn pair(depth: u32) -> Pair {
    let mut dev = Device::new(
        Loopback::default(),
        Device::<Loopback>::config(1, [198, 18, 0, 1]),
    );
    let pd = dev.engine().alloc_pd(0).unwrap();
    let cq = dev.engine().create_cq(4 * depth).unwrap();
    let cap = QpCap::new(depth, 1, 64);
    let init = QpInit::new(QpType::Rc, cq, cap);
    let a = dev.engine().create_qp(pd, init).unwrap();
    let b = dev.engine().create_qp(pd, init).unwrap();
    connect(&mut dev, a, b);
    Pair { dev, pd, cq, a, b }
}

/// Connects QPs `a` and `b` of `dev` to each other (to RTS).
fn connect(dev: &mut Device<Loopback>, a: u32, b: u32) {
    let (ea, eb) = (dev.endpoint(a), dev.endpoint(b));
    dev.connect(a, &eb).unwrap();
    dev.connect(b, &ea).unwrap();
}

/// An unsignaled work request `op` of one gather element (`pump` sets the signal).
fn one_sge_wr(wr_id: u64, op: SendOp, addr: u64, length: u32, lkey: u32) -> SendWr {
    SendWr {
        wr_id,
        op,
        sgl: vec![Sge { addr, length, lkey }],
        flags: SendFlags::empty(),
        ud: None,
        xrc_srqn: None,
    }
}

/// Posts `wr` for `count` messages, keeping `depth` outstanding and signaling every
/// `signal_every`th; returns the seconds taken. `before_send` posts what the receiver needs.
fn pump(
    p: &mut Pair,
    count: u64,
    depth: u64,
    signal_every: u64,
    make: &dyn Fn(u64) -> SendWr,
    recv: Option<&dyn Fn(u64) -> RecvWr>,
) -> f64 {
    let mut wcs = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 64];
    let (mut posted, mut done, mut recvs) = (0u64, 0u64, 0u64);
    let t = Instant::now();
    while done < count {
        // Each signaled completion retires `signal_every` sends.
        while posted < count && posted - done < depth {
            if let Some(r) = recv {
                p.dev.engine().post_recv(p.b, r(recvs)).unwrap();
                recvs += 1;
            }
            let mut wr = make(posted);
            if (posted + 1) % signal_every == 0 || posted + 1 == count {
                wr.flags |= SendFlags::SIGNALED;
            }
            p.dev.engine().post_send(p.a, wr).unwrap();
            posted += 1;
        }
        p.dev.progress();
        let n = p.dev.engine().poll_cq(p.cq, &mut wcs).unwrap();
        for w in &wcs[..n] {
            assert_eq!(w.status, WcStatus::Success);
            if matches!(w.opcode, WcOpcode::RdmaWrite | WcOpcode::Send) {
                done = (w.wr_id + 1).max(done);
            }
        }
    }
    t.elapsed().as_secs_f64()
}

fn write_throughput() {
    const LEN: usize = 64 * 1024;
    let depth = 16;
    let mut p = pair(depth as u32);
    let src = p.dev.alloc(LEN);
    let dst = p.dev.alloc(LEN);
    p.dev.write(src, &vec![0x5a; LEN]);
    let pd = p.pd;
    let lkey = p.dev.engine().reg_mr(pd, src, LEN as u64, ALL).unwrap();
    let rkey = p.dev.engine().reg_mr(pd, dst, LEN as u64, ALL).unwrap();
    let make = |i: u64| {
        one_sge_wr(
            i,
            SendOp::Write(Remote { addr: dst, rkey }),
            src,
            LEN as u32,
            lkey,
        )
    };
    // Warm up, then size the run to the budget.
    let warm = pump(&mut p, 200, depth, 8, &make, None);
    let count = ((budget().as_secs_f64() / (warm / 200.0)) as u64).max(200);
    let secs = pump(&mut p, count, depth, 8, &make, None);
    assert_eq!(p.dev.read(dst, LEN), vec![0x5a; LEN]);
    let write_gbs = (count * LEN as u64) as f64 / secs / 1e9;
    if std::env::var_os("BENCH_NO_REFERENCE").is_some() {
        println!("64 KiB RDMA WRITE: {write_gbs:.2} GB/s");
        return;
    }

    let a = vec![0x5au8; LEN];
    let mut b = vec![0u8; LEN];
    let t = Instant::now();
    let mut copies = 0u64;
    while t.elapsed() < budget() {
        for _ in 0..1000 {
            b.copy_from_slice(black_box(&a));
            black_box(&mut b);
        }
        copies += 1000;
    }
    let memcpy_gbs = (copies * LEN as u64) as f64 / t.elapsed().as_secs_f64() / 1e9;

    // The work no RoCEv2 sender and receiver can avoid, done directly: copy each 4 KiB into a
    // frame (at byte 54, where an IPv4 RDMA WRITE's payload starts), compute the ICRC over it,
    // check it again on receipt, copy it out.
    let mut frames = vec![vec![0u8; 4096 + 64]; 16];
    let t = Instant::now();
    let mut passes = 0u64;
    while t.elapsed() < budget() {
        for _ in 0..100 {
            for (i, chunk) in a.chunks(4096).enumerate() {
                let f = &mut frames[i % 16];
                f[54..54 + 4096].copy_from_slice(black_box(chunk));
                let sent = crc32fast::hash(f);
                black_box(crc32fast::hash(f) == sent);
                b[i * 4096..][..4096].copy_from_slice(&f[54..54 + 4096]);
            }
            black_box(&mut b);
        }
        passes += 100;
    }
    let floor_gbs = (passes * LEN as u64) as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!(
        "64 KiB RDMA WRITE: {write_gbs:.2} GB/s ({count} writes, 16 outstanding, MTU 4096)\n\
         \x20 memcpy of 64 KiB: {memcpy_gbs:.2} GB/s; WRITE/memcpy {:.0}%\n\
         \x20 copy in + ICRC out + ICRC in + copy out, done directly: {floor_gbs:.2} GB/s; \
         WRITE/that {:.0}%",
        100.0 * write_gbs / memcpy_gbs,
        100.0 * write_gbs / floor_gbs
    );
}

/// The 8-byte SEND rate on `p`'s pair: the sends measured and messages per second.
fn send_rate_of(p: &mut Pair) -> (u64, f64) {
    let depth = 128;
    let src = p.dev.alloc(8);
    let dst = p.dev.alloc(8 * 1024);
    let pd = p.pd;
    let lkey = p.dev.engine().reg_mr(pd, src, 8, ALL).unwrap();
    let rkey = p.dev.engine().reg_mr(pd, dst, 8 * 1024, ALL).unwrap();
    let make = |i: u64| one_sge_wr(i, SendOp::Send, src, 8, lkey);
    let recv = |i: u64| RecvWr {
        wr_id: i,
        sgl: vec![Sge {
            addr: dst + 8 * (i % 1024),
            length: 8,
            lkey: rkey,
        }],
    };
    let warm = pump(p, 20_000, depth, 32, &make, Some(&recv));
    let count = ((budget().as_secs_f64() / (warm / 20_000.0)) as u64).max(20_000);
    let secs = pump(p, count, depth, 32, &make, Some(&recv));
    (count, count as f64 / secs)
}

fn send_rate() {
    let (count, rate) = send_rate_of(&mut pair(128));
    println!(
        "8-byte SEND: {:.2} M messages/s ({count} sends, 128 outstanding, every 32nd signaled)",
        rate / 1e6
    );
}

/// One 2-byte RDMA WRITE at a time, each to its completion: what the engine alone takes for
/// a message on its own, the least any `ib_write_lat` through it can take.
fn write_latency() {
    let mut p = pair(1);
    let src = p.dev.alloc(2);
    let dst = p.dev.alloc(2);
    let pd = p.pd;
    let lkey = p.dev.engine().reg_mr(pd, src, 2, ALL).unwrap();
    let rkey = p.dev.engine().reg_mr(pd, dst, 2, ALL).unwrap();
    let make = |i: u64| one_sge_wr(i, SendOp::Write(Remote { addr: dst, rkey }), src, 2, lkey);
    let warm = pump(&mut p, 20_000, 1, 1, &make, None);
    let count = ((budget().as_secs_f64() / (warm / 20_000.0)) as u64).max(20_000);
    let secs = pump(&mut p, count, 1, 1, &make, None);
    println!(
        "2-byte WRITE one at a time: {:.3} us each, post to completion ({count} writes)",
        secs / count as f64 * 1e6
    );
}

/// The same SEND rate beside `BENCH_IDLE_QPS` (default 100,000) connected QPs that carry
/// nothing: timers are kept by deadline, so idle QPs should cost the busy pair nothing. Also
/// the memory each idle QP takes and how fast they are created and connected.
fn idle_qps() {
    let idle: usize = std::env::var("BENCH_IDLE_QPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let mut p = pair(128);
    let (_, alone) = send_rate_of(&mut p);
    let (pd, cq) = (p.pd, p.cq);
    let init = QpInit::new(QpType::Rc, cq, QpCap::new(16, 1, 0));
    let before = LIVE.load(Ordering::Relaxed);
    let t = Instant::now();
    for _ in 0..idle / 2 {
        let a = p.dev.engine().create_qp(pd, init).unwrap();
        let b = p.dev.engine().create_qp(pd, init).unwrap();
        connect(&mut p.dev, a, b);
    }
    let created = idle as f64 / t.elapsed().as_secs_f64();
    let per_qp = (LIVE.load(Ordering::Relaxed) - before) / idle.max(1) as isize;
    let (_, beside) = send_rate_of(&mut p);
    println!(
        "8-byte SEND beside {idle} idle RC QPs: {:.2} M messages/s, {:.2} M alone; \
         ratio {:.2}; {per_qp} bytes per idle QP (connected, 16-entry queues); \
         {:.0} QPs created and connected per second",
        beside / 1e6,
        alone / 1e6,
        beside / alone,
        created
    );
}

fn per_qp_memory() {
    const N: usize = 1000;
    let mut p = pair(256);
    let cq = p.cq;
    let pd = p.pd;
    let cap = QpCap::new(256, 1, 64);
    let init = QpInit::new(QpType::Rc, cq, cap);
    let before = LIVE.load(Ordering::Relaxed);
    let qps: Vec<u32> = (0..N)
        .map(|_| p.dev.engine().create_qp(pd, init).unwrap())
        .collect();
    let created = LIVE.load(Ordering::Relaxed) - before;
    for pair in qps.chunks(2) {
        connect(&mut p.dev, pair[0], pair[1]);
    }
    // Fill every queue once, so the queues have grown to the depth the traffic used.
    let buf = p.dev.alloc(64);
    let key = p.dev.engine().reg_mr(pd, buf, 64, ALL).unwrap();
    let sgl = vec![Sge {
        addr: buf,
        length: 8,
        lkey: key,
    }];
    // One pair at a time, so the link's frame buffers stay few.
    for pair in qps.chunks(2) {
        for i in 0..64 {
            let r = RecvWr {
                wr_id: i,
                sgl: sgl.clone(),
            };
            p.dev.engine().post_recv(pair[1], r).unwrap();
            let w = SendWr {
                wr_id: i,
                op: SendOp::Send,
                sgl: sgl.clone(),
                flags: SendFlags::empty(),
                ud: None,
                xrc_srqn: None,
            };
            p.dev.engine().post_send(pair[0], w).unwrap();
        }
        while p.dev.progress() {}
    }
    let used = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "per-QP memory: {} bytes created (RESET), {} bytes after 64 SENDs each way \
         (queues grown; {N} QPs)",
        created / N as isize,
        used / N as isize
    );
    let _ = (p.a, p.b);
}

fn main() {
    // `BENCH_ONLY=write|send|latency|memory|idle` runs one part, for profiling.
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let parts: [(&str, fn()); 5] = [
        ("write", write_throughput),
        ("send", send_rate),
        ("latency", write_latency),
        ("memory", per_qp_memory),
        ("idle", idle_qps),
    ];
    for (name, run) in parts {
        if only.is_empty() || only == name {
            run();
        }
    }
}
