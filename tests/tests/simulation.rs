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
    // Per fault profile: WRs posted and WRs that succeeded.
    let mut totals = std::collections::BTreeMap::<&str, (usize, usize)>::new();
    let mut failed = Vec::new();
    for seed in first..first + count {
        match workload::run(seed) {
            Ok(o) => {
                let t = totals.entry(o.profile).or_default();
                t.0 += o.wrs;
                t.1 += o.succeeded;
            }
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
    // Beyond each flow's own properties: the reliable service delivers. Only a partition
    // (and, rarely, the hostile mix) may exhaust RC retries.
    for (&profile, &(wrs, ok)) in &totals {
        let enough = match profile {
            "partitioned" => wrs / 2,
            "hostile" => wrs - wrs / 100,
            _ => wrs,
        };
        assert!(ok >= enough, "{profile}: only {ok} of {wrs} WRs succeeded");
    }
    if count >= 100 {
        assert_eq!(totals.len(), 5, "every fault profile ran: {totals:?}");
    }
}
