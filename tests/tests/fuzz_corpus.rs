//! Every cargo-fuzz target runs over its checked-in corpus as an ordinary test, so stable CI
//! exercises the same code the fuzzer does.

use softrnic_tests::root;
use softrnic_wire::fuzz;

/// The engine targets (and the daemon's) build a whole device per input, so each input runs
/// once.
fn run_engine(target: &str, body: fn(&[u8])) {
    for data in corpus(target) {
        body(&data);
    }
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = root().join("fuzz/corpus").join(target);
    let inputs: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.expect("dir entry").path()).expect("corpus file"))
        .collect();
    assert!(!inputs.is_empty(), "{target}: empty corpus");
    inputs
}

fn run(target: &str, body: fn(&[u8])) {
    for data in corpus(target) {
        body(&data);
        // Every truncation and single-byte corruption of a seed too: cheap, and close to what
        // the fuzzer tries first.
        for n in 0..data.len() {
            body(&data[..n]);
        }
        for i in 0..data.len() {
            let mut bad = data.clone();
            bad[i] ^= 0xa5;
            body(&bad);
        }
    }
}

#[test]
fn parse_frame_corpus() {
    run("parse_frame", fuzz::parse_frame);
}

#[test]
fn dissect_corpus() {
    run("dissect", fuzz::dissect);
}

#[test]
fn round_trip_corpus() {
    run("round_trip", fuzz::round_trip);
}

#[test]
fn mutate_corpus() {
    run("mutate", fuzz::mutate);
}

#[test]
fn engine_frames_corpus() {
    run_engine("engine_frames", softrnic_emu_core::fuzz::frames);
}

#[test]
fn engine_ops_corpus() {
    run_engine("engine_ops", softrnic_emu_core::fuzz::ops);
}

#[test]
fn cm_corpus() {
    run_engine("cm", softrnic_emu_core::fuzz::cm);
}

#[test]
fn ring_slots_corpus() {
    use softrnic_client::slot;
    run("ring_slots", slot::fuzz);
    // The seeds are real slots: each kind decodes from one at least.
    let seeds = corpus("ring_slots");
    assert!(
        seeds
            .iter()
            .any(|s| slot::decode_send(s, Vec::new()).is_some())
    );
    assert!(
        seeds
            .iter()
            .any(|s| slot::decode_recv(s, Vec::new()).is_some())
    );
    assert!(seeds.iter().any(|s| slot::decode_wc(s).is_some()));
}

#[test]
fn control_corpus() {
    run_engine("control", softrnic_daemon::fuzz::control);
}
