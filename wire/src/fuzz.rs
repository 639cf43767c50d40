//! The bodies of the cargo-fuzz targets in `fuzz/`. They live here so that the corpus tests in
//! `tests/` run exactly the same code on stable, without libFuzzer.

use crate::{cm, dissect, frame, mad};

/// Arbitrary bytes into the frame parser: it may refuse them but never panic, and whatever
/// parses must be self-consistent.
pub fn parse_frame(data: &[u8]) {
    match frame::parse(data) {
        Err(e) => {
            // What a capture's reader shows for a frame it refuses.
            let _ = e.to_string();
        }
        Ok(p) => check_layout(data, &p),
    }
}

/// Arbitrary bytes into the dissector, whole and as a capture's cut of a frame (the last byte
/// says how much was cut): it writes something for anything, and never panics.
pub fn dissect(data: &[u8]) {
    let _ = dissect::summary(data);
    let mut text = String::new();
    let _ = dissect::dissect(data, &mut text);
    if let Some((&cut, head)) = data.split_last() {
        let original = head.len() + usize::from(cut) * 8;
        let _ = dissect::summary_captured(head, original);
        let _ = dissect::dissect_captured(head, original, &mut text);
    }
}

/// A parsed frame's parts are in order and inside the bytes; a CM MAD in it re-emits.
fn check_layout(data: &[u8], p: &frame::ParsedFrame<'_>) {
    let l = p.layout;
    assert!(l.ip < l.udp && l.udp < l.bth && l.bth < l.ext && l.ext <= l.payload);
    assert!(l.payload <= l.pad && l.pad <= l.icrc && l.icrc + 4 == l.end);
    assert!(l.end <= data.len());
    assert_eq!(p.payload().len(), l.pad - l.payload);
    // A UD payload may be a CM MAD: whatever parses re-emits to the same bytes but for
    // the fields IBA reserves.
    if let Ok(mad) = cm::CmMad::parse(p.payload()) {
        let mut buf = [0u8; mad::MAD_LEN];
        mad.emit(&mut buf).expect("a parsed MAD re-emits");
        assert_eq!(cm::CmMad::parse(&buf), Ok(mad));
    }
}

/// Parse, emit what was parsed, parse again: the two parses must agree, and the emitted frame
/// must verify (its ICRC is computed afresh, so this holds even for fuzzer inputs that only got
/// past the ICRC check because fuzzing builds skip it).
pub fn round_trip(data: &[u8]) {
    let Ok(first) = frame::parse(data) else {
        return;
    };
    let mut buf = vec![0u8; first.repr.frame_len(first.payload().len())];
    let n = first
        .repr
        .emit(first.payload(), &mut buf)
        .expect("a parsed frame re-emits");
    let second = frame::parse(&buf[..n]).expect("an emitted frame parses");
    assert_eq!(second.repr, first.repr);
    assert_eq!(second.payload(), first.payload());
    let computed = second.computed_icrc();
    assert_eq!(second.icrc(), computed);
}

/// Structure-aware mutation: a template (a sample frame of every opcode or of the sample
/// conversations, or a generated
/// [`Packet`](crate::generate::Packet), which must parse back to itself) mutated a few times by
/// a seeded [`Mutator`](crate::mutate::Mutator); every variant goes through the parser and the
/// dissector as above.
#[cfg(feature = "arbitrary")]
pub fn mutate(data: &[u8]) {
    use crate::generate::Packet;
    use crate::mutate::{Class, Mutator};
    use crate::sample::{Ip, cm_conversation, every_opcode};
    use arbitrary::{Arbitrary, Unstructured};
    use std::sync::OnceLock;

    static SAMPLES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    let samples = SAMPLES.get_or_init(|| {
        let all = every_opcode(Ip::V4).into_iter().chain(every_opcode(Ip::V6));
        let conversations = crate::sample::capture()
            .into_iter()
            .chain(cm_conversation());
        all.chain(conversations).map(|s| s.frame()).collect()
    });
    let mut u = Unstructured::new(data);
    let Ok((pick, seed, peer_psn, count)) = <(Option<u8>, u64, u32, u8)>::arbitrary(&mut u) else {
        return;
    };
    let frame = match pick {
        Some(i) => samples[usize::from(i) % samples.len()].clone(),
        None => {
            let Ok(packet) = Packet::arbitrary(&mut u) else {
                return;
            };
            let bytes = packet.to_bytes();
            let parsed = frame::parse(&bytes).expect("a generated packet parses");
            assert_eq!(parsed.repr, packet.repr);
            assert_eq!(parsed.payload(), packet.payload);
            bytes
        }
    };
    let template = frame::parse(&frame).expect("templates parse");
    let mut mutator = Mutator::new(seed);
    let mut out = Vec::new();
    for _ in 0..=count % 8 {
        let class = Class::ALL[u.choose_index(Class::ALL.len()).unwrap_or(0)];
        mutator.mutate_as(class, &template, peer_psn, &mut out);
    }
    for variant in &out {
        parse_frame(variant);
        round_trip(variant);
    }
}
