//! scapy computes the same ICRC for every frame this crate emits: with scapy.contrib.roce's own
//! `compute_icrc` for IPv4, and with scapy's layers and zlib's CRC-32 for IPv6 (which scapy's
//! RoCE layer does not support). See tests/scripts/scapy_icrc.py.

use softrnic_tests::{frames_to_check, root, scratch, write_pcap};
use softrnic_wire::IpRepr;
use std::process::Command;

/// Debian's interpreter, which is where the python3-scapy package installs scapy.
const PYTHON: &str = "/usr/bin/python3";

#[test]
fn scapy_computes_the_same_icrc() {
    let samples = frames_to_check(3);
    let dir = scratch("scapy");
    let pcap = dir.join("frames.pcap");
    write_pcap(&samples, &pcap);

    let script = root().join("tests/scripts/scapy_icrc.py");
    let out = Command::new(PYTHON)
        .arg(&script)
        .arg(&pcap)
        .output()
        .expect("python3 runs (apt-get install python3-scapy; .ci/run does)");
    assert!(
        out.status.success(),
        "scapy script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), samples.len(), "one line per frame:\n{text}");

    let (mut v4, mut v6) = (0, 0);
    for (s, line) in samples.iter().zip(lines) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 3, "{}: {line}", s.name);
        assert_eq!(
            fields[1], fields[2],
            "{}: scapy computed {} but the frame has {}",
            s.name, fields[1], fields[2]
        );
        match s.repr.ip {
            IpRepr::V4 { .. } => v4 += 1,
            IpRepr::V6 { .. } => v6 += 1,
        }
    }
    assert!(
        v4 > 100 && v6 > 100,
        "both IP versions are checked: {v4} IPv4, {v6} IPv6"
    );
    let _ = std::fs::remove_dir_all(dir);
}
