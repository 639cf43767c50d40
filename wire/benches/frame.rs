//! Parse + ICRC verify and build + ICRC compute, in ns per frame and GB/s, beside crc32fast
//! hashing the same bytes in the same run. Run with `cargo bench -p softrnic-wire`.
//!
//! Figures, not assertions: this machine is shared, so the ratio to the in-process crc32fast
//! reference is what to read.

use softrnic_wire::sample::{self, Ip};
use softrnic_wire::{Opcode, frame};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Runs `f` in batches until `budget` has passed; returns the best ns per call over batches
/// (the least disturbed by other load).
fn best_ns(budget: Duration, mut f: impl FnMut()) -> f64 {
    const BATCH: u32 = 2_000;
    let start = Instant::now();
    let mut best = f64::INFINITY;
    while start.elapsed() < budget {
        let t = Instant::now();
        for _ in 0..BATCH {
            f();
        }
        best = best.min(t.elapsed().as_nanos() as f64 / f64::from(BATCH));
    }
    best
}

fn main() {
    let budget = Duration::from_millis(
        std::env::var("BENCH_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1500),
    );
    println!(
        "{:<6} {:>7} {:<22} {:>9} {:>8} {:>14}",
        "ip", "payload", "operation", "ns/frame", "GB/s", "vs crc32fast"
    );
    for ip in [Ip::V4, Ip::V6] {
        for payload in [64usize, 4096] {
            let s = sample::example(Opcode::RcWriteOnly, ip, 1, payload);
            let bytes = s.frame();
            let hashed = frame::parse(&bytes).expect("valid").l3().len() + 8;
            let mut buf = vec![0u8; bytes.len()];
            let ip_name = if ip == Ip::V4 { "IPv4" } else { "IPv6" };

            let reference = best_ns(budget, || {
                let mut h = crc32fast::Hasher::new();
                h.update(black_box(&bytes[..hashed]));
                black_box(h.finalize());
            });
            let parse = best_ns(budget, || {
                let p = frame::parse(black_box(&bytes)).expect("valid");
                black_box(p.payload());
            });
            let build = best_ns(budget, || {
                black_box(s.repr.emit(black_box(&s.payload), &mut buf).expect("fits"));
            });
            // The payload already in the frame buffer, as a sender that reads its data straight
            // into the frame has it.
            let build_in_place = best_ns(budget, || {
                black_box(
                    s.repr
                        .emit_in_place(payload, black_box(&mut buf))
                        .expect("fits"),
                );
            });
            // GB/s over the bytes the ICRC covers, so all three rows count the same bytes.
            let gbps = |ns: f64| hashed as f64 / ns;
            for (name, ns) in [
                ("crc32fast (reference)", reference),
                ("parse + ICRC verify", parse),
                ("build + ICRC compute", build),
                ("  same, payload placed", build_in_place),
            ] {
                println!(
                    "{ip_name:<6} {payload:>7} {name:<22} {ns:>9.1} {:>8.2} {:>13.0}%",
                    gbps(ns),
                    100.0 * reference / ns
                );
            }
        }
    }
}
