//! Files generated from the code stay in sync with it: the sample capture, the fuzz seed
//! corpora and the byte dumps in docs/wire-format.md. `SOFTRNIC_BLESS=1` rewrites them.

use softrnic_tests::{check_generated, file_name, root};
use softrnic_wire::{dissect, sample};

#[test]
fn sample_capture_is_current() {
    let mut pcap = Vec::new();
    softrnic::capture::write_pcap(&softrnic::capture::sample_frames(), &mut pcap).expect("write");
    check_generated(&root().join("docs/samples/roce-sample.pcap"), &pcap);
}

/// The sample of a loss: the go-back-n lesson's capture of both ports.
#[test]
fn loss_sample_is_current() {
    let options = softrnic::lesson::lesson_options("go-back-n").expect("the lesson");
    let outcome = softrnic::lesson::simulate(&options).expect("it runs");
    let mut pcapng = Vec::new();
    softrnic::capture::write_pcapng(&outcome.frames, &mut pcapng).expect("write");
    check_generated(&root().join("docs/samples/go-back-n.pcapng"), &pcapng);
}

#[test]
fn fuzz_seed_corpora_hold_every_sample() {
    for target in ["parse_frame", "round_trip"] {
        for s in sample::capture() {
            let path = root().join("fuzz/corpus").join(target).join(file_name(&s));
            check_generated(&path, &s.frame());
        }
    }
}

/// docs/wire-format.md shows dissections of sample frames in blocks that start with
/// `<!-- dissect: NAME -->` (or `<!-- icrc-prefix: NAME -->` for the bytes the ICRC hashes); each
/// block must be what the dissector prints for that sample now.
#[test]
fn wire_format_doc_dumps_are_current() {
    let path = root().join("docs/wire-format.md");
    let doc = std::fs::read_to_string(&path).expect("docs/wire-format.md");
    let samples = sample::capture();
    let mut out = String::new();
    let mut rest = doc.as_str();
    let mut blocks = 0;
    while let Some(at) = rest.find("<!-- ") {
        let name_end = at + rest[at..].find(" -->").expect("marker ends with -->");
        // `doc:` markers are the docs test's (softrnic/tests/docs.rs): commands, not dumps.
        let marker = rest[at + 5..name_end].split_once(": ");
        let Some((kind, name)) = marker.filter(|(kind, _)| *kind != "doc") else {
            out.push_str(&rest[..name_end]);
            rest = &rest[name_end..];
            continue;
        };
        let s = samples
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("docs name an unknown sample {name:?}"));
        let mut text = String::new();
        match kind {
            "dissect" => dissect::dissect(&s.frame(), &mut text),
            "icrc-prefix" => dissect::icrc_prefix(&s.frame(), &mut text),
            other => panic!("unknown doc block kind {other:?}"),
        }
        .expect("dissect");
        // The block is the marker line, then a ```text fence up to the closing fence.
        let fence_open = name_end
            + rest[name_end..]
                .find("```text\n")
                .expect("```text after marker");
        let body = fence_open + "```text\n".len();
        let fence_close = body + rest[body..].find("```").expect("closing fence");
        out.push_str(&rest[..body]);
        out.push_str(&text);
        rest = &rest[fence_close..];
        blocks += 1;
    }
    out.push_str(rest);
    assert!(blocks >= 5, "the doc shows real frames ({blocks} found)");
    check_generated(&path, out.as_bytes());
}
