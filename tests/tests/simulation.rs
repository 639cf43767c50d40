//! Random workloads over the simulated network, one per seed (see `softrnic_tests::workload`
//! for the properties). CI runs `SOFTRNIC_SEEDS` seeds (1000 by default); one seed replays
//! with `SOFTRNIC_SEED=<n>`; the soak command in docs/simulation.md runs millions.

use softrnic_tests::workload;

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn random_workloads_keep_every_property() {
    let (first, count) = match env("SOFTRNIC_SEED") {
        Some(seed) => (seed, 1),
        None => (
            env("SOFTRNIC_FIRST_SEED").unwrap_or(0),
            env("SOFTRNIC_SEEDS").unwrap_or(1000),
        ),
    };
    let mut wrs = 0;
    let mut failed = Vec::new();
    for seed in first..first + count {
        match workload::run(seed) {
            Ok(o) => wrs += o.wrs,
            Err(e) => failed.push(e),
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {count} seeds failed; replay one with SOFTRNIC_SEED=<seed>:\n{}",
        failed.len(),
        failed
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(wrs >= count as usize * 5, "every seed posts work");
}
