//! Every cargo-fuzz target runs over its checked-in corpus as an ordinary test, so stable CI
//! exercises the same code the fuzzer does.

use softrnic_tests::root;
use softrnic_wire::fuzz;

fn run(target: &str, body: fn(&[u8])) {
    let dir = root().join("fuzz/corpus").join(target);
    let mut inputs = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        let data = std::fs::read(&path).expect("corpus file");
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
        inputs += 1;
    }
    assert!(inputs > 0, "{target}: empty corpus");
}

#[test]
fn parse_frame_corpus() {
    run("parse_frame", fuzz::parse_frame);
}

#[test]
fn round_trip_corpus() {
    run("round_trip", fuzz::round_trip);
}
