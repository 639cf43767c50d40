//! The bodies of the cargo-fuzz targets in `fuzz/`. They live here so that the corpus tests in
//! `tests/` run exactly the same code on stable, without libFuzzer.

use crate::{cm, dissect, frame, mad};

/// Arbitrary bytes into the parser and the dissector: neither may panic, and whatever parses
/// must be self-consistent.
pub fn parse_frame(data: &[u8]) {
    let _ = dissect::summary(data);
    let mut text = String::new();
    let _ = dissect::dissect(data, &mut text);
    // The same bytes as a capture's cut of a frame: the last byte says how much was cut.
    if let Some((&cut, head)) = data.split_last() {
        let original = head.len() + usize::from(cut) * 8;
        let _ = dissect::summary_captured(head, original);
        let _ = dissect::dissect_captured(head, original, &mut text);
    }
    if let Ok(p) = frame::parse(data) {
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
