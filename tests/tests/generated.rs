//! Files generated from the code stay in sync with it: the sample capture, the fuzz seed
//! corpora and the byte dumps in docs/wire-format.md. `SOFTRNIC_BLESS=1` rewrites them.

use softrnic_tests::{check_generated, file_name, root};
use softrnic_wire::{Opcode, dissect, sample};

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
    for target in ["parse_frame", "dissect", "round_trip"] {
        for s in sample::capture() {
            let path = root().join("fuzz/corpus").join(target).join(file_name(&s));
            check_generated(&path, &s.frame());
        }
    }
}

/// docs/wire-format.md shows dissections of sample frames in blocks that start with
/// `<!-- dissect: NAME -->` (or `<!-- icrc-prefix: NAME -->` for the bytes the ICRC hashes); each
/// block must be what the dissector prints for that sample now. Its table of opcodes by service
/// (`<!-- opcodes: by service -->`) is the wire crate's opcode table.
#[test]
fn wire_format_doc_dumps_are_current() {
    let samples = sample::capture();
    let blocks = refresh_blocks("docs/wire-format.md", |kind, name| {
        if kind == "opcodes" {
            return opcodes_by_service();
        }
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
        text
    });
    assert!(blocks >= 5, "the doc shows real frames ({blocks} found)");
}

/// One row per service that has opcodes: its top three bits, its name, and its opcodes as
/// ranges.
fn opcodes_by_service() -> String {
    let services = [
        (0b000, "RC, Reliable Connected"),
        (0b001, "UC, Unreliable Connected"),
        (0b011, "UD, Unreliable Datagram"),
        (0b100, "CNP, Congestion Notification (RoCEv2)"),
        (0b101, "XRC, Extended Reliable Connected"),
    ];
    let known = |b: &u8| Opcode::from_u8(*b).is_ok();
    assert!(
        (0..=255u8)
            .filter(known)
            .all(|b| services.iter().any(|&(s, _)| s == b >> 5)),
        "every service with opcodes has a row"
    );
    let mut text = format!("{:<11}{:<40}opcodes\n", "bits 7..5", "service");
    for (bits, name) in services {
        let known: Vec<u8> = (0..32u8).map(|low| bits << 5 | low).filter(known).collect();
        assert!(!known.is_empty(), "{name} has opcodes");
        let mut ranges: Vec<(u8, u8)> = Vec::new();
        for b in known {
            match ranges.last_mut() {
                Some((_, end)) if *end + 1 == b => *end = b,
                _ => ranges.push((b, b)),
            }
        }
        let ranges: Vec<String> = ranges
            .iter()
            .map(|&(a, z)| match a == z {
                true => format!("{a:#04x}"),
                false => format!("{a:#04x}-{z:#04x}"),
            })
            .collect();
        text += &format!("{bits:03b}        {name:<40}{}\n", ranges.join(", "));
    }
    text
}

/// docs/engine.md lists every counter: its name, whose name it is, and what it counts.
#[test]
fn engine_doc_counters_are_current() {
    let blocks = refresh_blocks("docs/engine.md", |kind, _| {
        assert_eq!(kind, "counters", "unknown doc block kind");
        let mut text = format!("{:<30}{:<11}what it counts\n", "counter", "name from");
        for (name, origin, what) in softrnic_emu_core::Counters::described() {
            // The description wrapped to 60 columns, beside the name.
            let mut lines = vec![String::new()];
            for word in what.split(' ') {
                let line = lines.last_mut().expect("a line");
                if !line.is_empty() && line.len() + 1 + word.len() > 60 {
                    lines.push(word.to_owned());
                } else {
                    if !line.is_empty() {
                        line.push(' ');
                    }
                    line.push_str(word);
                }
            }
            text += &format!("{name:<30}{:<11}{}\n", origin.name(), lines[0]);
            for line in &lines[1..] {
                text += &format!("{:41}{line}\n", "");
            }
        }
        text
    });
    assert_eq!(blocks, 1);
}

/// docs/roce-for-tcp-people.md shows each lesson's ladder in a block that starts with
/// `<!-- lesson: NAME -->`: each must be what the lesson draws now.
#[test]
fn tcp_people_doc_ladders_are_current() {
    let blocks = refresh_blocks("docs/roce-for-tcp-people.md", |kind, name| {
        assert_eq!(kind, "lesson", "unknown doc block kind");
        let options = softrnic::lesson::lesson_options(name)
            .unwrap_or_else(|| panic!("docs name an unknown lesson {name:?}"));
        let outcome = softrnic::lesson::simulate(&options).expect("the lesson runs");
        softrnic::ladder::text(&outcome.analysis)
    });
    assert!(blocks >= 6, "the doc shows the lessons ({blocks} found)");
}

/// Rewrites each block of the page at `path` (from the repository) that starts with a marker
/// `<!-- KIND: NAME -->` and a ```text fence with what `render(KIND, NAME)` gives, and checks the
/// page is current (or writes it when blessing). `doc:` markers are the docs test's
/// (softrnic/tests/docs.rs): commands, left as they are. Returns how many blocks there were.
fn refresh_blocks(path: &str, mut render: impl FnMut(&str, &str) -> String) -> usize {
    let path = root().join(path);
    let doc = std::fs::read_to_string(&path).expect("the page");
    let mut out = String::new();
    let mut rest = doc.as_str();
    let mut blocks = 0;
    while let Some(at) = rest.find("<!-- ") {
        let name_end = at + rest[at..].find(" -->").expect("marker ends with -->");
        let marker = rest[at + 5..name_end].split_once(": ");
        let Some((kind, name)) = marker.filter(|(kind, _)| *kind != "doc") else {
            out.push_str(&rest[..name_end]);
            rest = &rest[name_end..];
            continue;
        };
        let text = render(kind, name);
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
    check_generated(&path, out.as_bytes());
    blocks
}
