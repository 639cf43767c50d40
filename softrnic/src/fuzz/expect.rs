//! Protocol expectations: the NAK that IBA requires of the peer's responder for a variant, where
//! it requires one thing. They hold for a variant that arrives at the PSN the peer expects next,
//! on a QP that is not in error, with no message in progress and a receive WQE posted (the state
//! after an exchange with pingpong); the caller says when that is so.

use softrnic_wire::NakCode;
use softrnic_wire::bth::MASK_24;
use softrnic_wire::frame::{self, ParsedFrame};
use softrnic_wire::mutate::Class;
use softrnic_wire::opcode::{Operation, Position};

/// The NAK IBA requires for `variant` (a `class` mutation of `template`, a SEND ONLY at the
/// peer's expected PSN), given the peer's receive buffer and path MTU in bytes.
pub fn required(
    template: &ParsedFrame,
    variant: &[u8],
    class: Class,
    recv_len: usize,
    pmtu: usize,
) -> Option<NakCode> {
    // A variant the peer must drop (or cannot parse) is not for this oracle.
    let v = frame::parse(variant).ok()?;
    let (t, b) = (template.repr.bth, v.repr.bth);
    if b.dest_qp != t.dest_qp || b.pkey != t.pkey {
        return None;
    }
    let (ti, vi) = (t.opcode.info(), b.opcode.info());
    let ahead = b.psn.wrapping_sub(t.psn) & MASK_24;
    match class {
        // Ahead of the expected PSN: one NAK PSN sequence error (IBA 9.7.5.2.1). Exactly 2^23
        // away is neither behind nor ahead.
        Class::Psn if (1..1 << 23).contains(&ahead) => Some(NakCode::PsnSequenceError),
        // A MIDDLE or LAST with no message in progress is out of sequence: NAK invalid request
        // (IBA 9.7.5.2.2, C9-95), whatever else it carries.
        Class::Opcode
            if ahead == 0
                && vi.transport == ti.transport
                && !vi.operation.is_response()
                && matches!(vi.position, Position::Middle | Position::Last) =>
        {
            Some(NakCode::InvalidRequest)
        }
        // A SEND that fits the path MTU but not the receive WQE: a length error of class C,
        // NAK invalid request (IBA 9.9.3).
        Class::Length
            if ahead == 0
                && vi.transport == ti.transport
                && vi.operation == Operation::Send
                && vi.position == Position::Only
                && v.payload().len() > recv_len
                && v.payload().len() <= pmtu =>
        {
            Some(NakCode::InvalidRequest)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_wire::FrameRepr;
    use softrnic_wire::mutate::Mutator;
    use softrnic_wire::opcode::Opcode;
    use softrnic_wire::sample::{Ip, example};

    /// A SEND ONLY of 64 bytes, as pingpong's client sends it.
    fn send() -> Vec<u8> {
        example(Opcode::RcSendOnly, Ip::V4, 0x100, 64).frame()
    }

    fn with(f: impl Fn(&mut FrameRepr), payload: usize) -> Vec<u8> {
        let t = send();
        let mut repr = frame::parse(&t).unwrap().repr;
        f(&mut repr);
        let mut buf = vec![0; repr.frame_len(payload)];
        repr.emit(&vec![7; payload], &mut buf).unwrap();
        buf
    }

    #[test]
    fn what_iba_requires_of_a_fresh_responder() {
        let t = send();
        let t = frame::parse(&t).unwrap();
        let psn = t.repr.bth.psn;
        let req = |v: &[u8], class| required(&t, v, class, 64, 1024);
        let at = |d: u32| with(|r| r.bth.psn = (psn + d) & MASK_24, 64);
        assert_eq!(req(&at(1), Class::Psn), Some(NakCode::PsnSequenceError));
        assert_eq!(
            req(&at((1 << 23) - 1), Class::Psn),
            Some(NakCode::PsnSequenceError)
        );
        assert_eq!(
            req(&at(1 << 23), Class::Psn),
            None,
            "neither behind nor ahead"
        );
        assert_eq!(req(&at(MASK_24), Class::Psn), None, "behind: a duplicate");
        let op = |o: Opcode| with(|r| r.bth.opcode = o, 64);
        let invalid = Some(NakCode::InvalidRequest);
        assert_eq!(req(&op(Opcode::RcSendMiddle), Class::Opcode), invalid);
        assert_eq!(req(&op(Opcode::RcSendLast), Class::Opcode), invalid);
        assert_eq!(req(&op(Opcode::RcSendFirst), Class::Opcode), None);
        assert_eq!(
            req(&op(Opcode::UcSendMiddle), Class::Opcode),
            None,
            "another transport"
        );
        let long = |n| with(|_| {}, n);
        assert_eq!(req(&long(65), Class::Length), invalid);
        assert_eq!(req(&long(63), Class::Length), None, "fits");
        assert_eq!(req(&long(1025), Class::Length), None, "beyond the path MTU");
        let other_qp = with(|r| r.bth.dest_qp ^= 1, 64);
        assert_eq!(req(&other_qp, Class::Psn), None);
        let mut bad = at(1);
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert_eq!(req(&bad, Class::Psn), None, "a bad ICRC is dropped");
    }

    #[test]
    fn the_mutator_variants_that_have_an_expectation_are_those_of_its_classes() {
        let t = send();
        let t = frame::parse(&t).unwrap();
        let mut m = Mutator::new(5);
        let mut with_one = 0;
        for _ in 0..500 {
            let mut out = Vec::new();
            let mu = m.mutate(&t, t.repr.bth.psn, &mut out);
            if let Some(code) = required(&t, &out[0], mu.class, 64, 1024) {
                with_one += 1;
                assert!(matches!(
                    mu.class,
                    Class::Psn | Class::Opcode | Class::Length
                ));
                assert!(!mu.silent, "{mu:?}: {code:?}");
            }
        }
        assert!(with_one > 20, "{with_one}");
    }
}
