//! Runs the simulation's random workloads over many seeds and prints what they exercised:
//! `cargo run --release -p softrnic-tests --bin soak -- [FIRST_SEED] [COUNT]`.

use std::collections::BTreeMap;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("seeds are numbers"))
        .collect();
    let first = args.first().copied().unwrap_or(0);
    let count = args.get(1).copied().unwrap_or(10_000);
    let started = std::time::Instant::now();
    let (mut wrs, mut ok, mut frames, mut failed) = (0, 0, 0, 0);
    let mut counters: BTreeMap<&str, u64> = BTreeMap::new();
    let mut profiles: BTreeMap<&str, u64> = BTreeMap::new();
    for seed in first..first + count {
        match softrnic_tests::workload::run(seed) {
            Ok(o) => {
                wrs += o.wrs;
                ok += o.succeeded;
                frames += o.frames;
                *profiles.entry(o.profile).or_default() += 1;
                for (k, v) in o.counters {
                    *counters.entry(k).or_default() += v;
                }
            }
            Err(e) => {
                failed += 1;
                eprintln!("FAIL {e}");
            }
        }
        if (seed - first + 1) % 100_000 == 0 {
            eprintln!("{} seeds, {failed} failed", seed - first + 1);
        }
    }
    println!(
        "{count} seeds from {first} in {:.1} s: {failed} failed; {wrs} work requests, {ok} \
         succeeded; {frames} frames",
        started.elapsed().as_secs_f64()
    );
    println!("profiles: {profiles:?}");
    for (k, v) in counters {
        println!("  {k:>30} {v}");
    }
    std::process::exit(i32::from(failed > 0));
}
