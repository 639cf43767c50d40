//! `softrnic dissect` as a user runs it: several files, standard input, and files that are
//! damaged or not captures at all.

use std::io::Write;
use std::process::{Command, Stdio};

fn softrnic() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softrnic"))
}

#[test]
fn several_files_standard_input_and_a_bad_one() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dissect-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let sample = dir.join("sample.pcap");
    let ok = softrnic()
        .arg("sample-capture")
        .arg(&sample)
        .status()
        .unwrap();
    assert!(ok.success());
    let bytes = std::fs::read(&sample).unwrap();
    let cut = dir.join("cut.pcap");
    std::fs::write(&cut, &bytes[..3000]).unwrap();
    let junk = dir.join("junk.pcap");
    std::fs::write(&junk, b"not a capture").unwrap();

    let mut c = softrnic()
        .args(["dissect", "--compact", "-"])
        .arg(&junk)
        .arg(&cut)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(&bytes).unwrap();
    let out = c.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert!(!out.status.success(), "a bad file fails the run");
    let frames = softrnic::capture::read(&bytes).unwrap();
    let n = frames.len();
    // A pcap file: a 24-byte header, then 16 bytes before each frame.
    let mut whole = 0;
    let mut at = 24;
    while at + 16 + frames[whole].data.len() <= 3000 {
        at += 16 + frames[whole].data.len();
        whole += 1;
    }
    // Each file under its name; the good one whole, the cut one up to its damage.
    let sections: Vec<&str> = stdout.split("==> ").skip(1).collect();
    assert_eq!(sections.len(), 3, "{stdout}");
    assert!(sections[0].starts_with("standard input <==\n"));
    assert_eq!(
        sections[0]
            .lines()
            .filter(|l| l.contains("ICRC ok"))
            .count(),
        n
    );
    assert!(
        sections[1].trim_end().ends_with("junk.pcap <=="),
        "{stdout}"
    );
    assert_eq!(
        sections[2]
            .lines()
            .filter(|l| l.contains("ICRC ok"))
            .count(),
        whole
    );
    assert!(
        stderr.contains("junk.pcap: not a pcap or pcapng file"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "cut.pcap: damaged at byte {at}: the file ends inside a record"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("the {whole} frames before it are shown")),
        "{stderr}"
    );
}
