//! The ACK Extended Transport Header (IBA Vol 1 9.3.5), 4 bytes: `Syndrome(1) MSN(3)`.
//!
//! The syndrome says what kind of acknowledgement this is (IBA table 42): bit 7 is reserved,
//! bits 6..5 are the type (00 ACK, 01 RNR NAK, 11 NAK, 10 reserved) and bits 4..0 its value: the
//! credit count of an ACK (table 43), the timer of an RNR NAK (table 45), or the NAK code
//! (table 44).

use crate::Result;
use core::fmt;

mod field {
    use core::ops::Range;
    pub const SYNDROME: usize = 0;
    pub const MSN: Range<usize> = 1..4;
}

header_view!(
    /// A zero-copy view of an AETH.
    Aeth,
    4
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// The raw syndrome byte.
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }
    /// Message Sequence Number: how many messages the responder has completed (24 bits).
    pub fn msn(&self) -> u32 {
        self.be(field::MSN) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Sets the raw syndrome byte.
    pub fn set_syndrome(&mut self, value: u8) {
        self.buffer.as_mut()[field::SYNDROME] = value;
    }
    /// Sets the MSN (24 bits).
    pub fn set_msn(&mut self, value: u32) {
        self.set_be(field::MSN, (value & crate::bth::MASK_24).into());
    }
}

/// An ACK's credit count code (IBA table 43): how many receive WQEs the responder has, for
/// end-to-end flow control. Code 31 means the count is invalid (no flow control).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CreditCount(u8);

impl CreditCount {
    /// The code that says the credit count is not valid.
    pub const INVALID: CreditCount = CreditCount(31);

    /// A code from its 5-bit value.
    pub const fn from_code(code: u8) -> CreditCount {
        CreditCount(code & 0x1f)
    }

    /// The largest code whose credits do not exceed `credits`.
    pub fn for_credits(credits: u32) -> CreditCount {
        let code = (0..31u8)
            .rev()
            .find(|&c| CreditCount(c).credits().unwrap_or(0) <= credits);
        CreditCount(code.unwrap_or(0))
    }

    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// The number of credits the code stands for, or `None` for the invalid code 31.
    /// Codes 0..=4 are themselves; then the count alternates ×1.5 and ×4/3: 6, 8, 12, 16, ...
    pub const fn credits(self) -> Option<u32> {
        match self.0 {
            31 => None,
            c if c <= 4 => Some(c as u32),
            c => {
                // c = 5 -> 6, 6 -> 8, 7 -> 12, 8 -> 16: (2 or 3) * 2^k.
                let k = (c - 5) / 2 + 1;
                let base = if (c - 5) % 2 == 0 { 3 } else { 4 };
                Some(base << k)
            }
        }
    }
}

/// An RNR NAK's timer code (IBA table 45): how long the requester waits before retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RnrTimer(u8);

/// Table 45, in microseconds: code 0 is 655.36 ms, codes 1..=31 run from 0.01 ms to 491.52 ms.
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

impl RnrTimer {
    /// A timer from its 5-bit code.
    pub const fn from_code(code: u8) -> RnrTimer {
        RnrTimer(code & 0x1f)
    }
    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        self.0
    }
    /// The delay in microseconds.
    pub const fn micros(self) -> u32 {
        RNR_TIMER_US[self.0 as usize]
    }
}

/// A NAK code (IBA table 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: the responder saw a PSN it did not expect; the requester retransmits from the MSN's
    /// PSN.
    PsnSequenceError,
    /// 1: the request was malformed or not supported by the QP.
    InvalidRequest,
    /// 2: R_Key, address range or access rights check failed.
    RemoteAccessError,
    /// 3: the responder could not complete the request for a reason of its own.
    RemoteOperationalError,
    /// 4: invalid RD request (Reliable Datagram only).
    InvalidRdRequest,
    /// 5..=31: reserved. Kept rather than rejected so the completer can report it.
    Reserved(u8),
}

impl NakCode {
    /// The code for a 5-bit value.
    pub const fn from_code(code: u8) -> NakCode {
        match code & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
    /// The 5-bit value.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }
}

/// A decoded syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// A positive acknowledgement, with the responder's credit count.
    Ack(CreditCount),
    /// Receiver Not Ready: no receive WQE was posted; retry after the timer.
    RnrNak(RnrTimer),
    /// A negative acknowledgement.
    Nak(NakCode),
    /// A syndrome with the reserved bit 7 set or the reserved type 10; kept so it can be
    /// reported, as a real completer treats it as an error.
    Reserved(u8),
}

impl Syndrome {
    /// Decodes a syndrome byte. Every byte decodes, so `Syndrome::from_byte(s.to_byte()) == s`.
    pub const fn from_byte(byte: u8) -> Syndrome {
        let value = byte & 0x1f;
        match byte >> 5 {
            0b000 => Syndrome::Ack(CreditCount::from_code(value)),
            0b001 => Syndrome::RnrNak(RnrTimer::from_code(value)),
            0b011 => Syndrome::Nak(NakCode::from_code(value)),
            _ => Syndrome::Reserved(byte),
        }
    }

    /// Encodes the syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack(c) => c.code(),
            Syndrome::RnrNak(t) => 0x20 | t.code(),
            Syndrome::Nak(n) => 0x60 | n.code(),
            Syndrome::Reserved(b) => b,
        }
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Syndrome::Ack(c) => match c.credits() {
                Some(n) => write!(f, "ACK, credits {n} (code {})", c.code()),
                // IBA 9.7.7.2: code 31 is the "invalid" credit count, which a responder
                // that does not report credits (an SRQ, or none to give) always sends.
                None => write!(f, "ACK, credits not reported (code 31)"),
            },
            Syndrome::RnrNak(t) => {
                let us = t.micros();
                write!(
                    f,
                    "RNR NAK, timer {}.{:02} ms (code {})",
                    us / 1000,
                    us % 1000 / 10,
                    t.code()
                )
            }
            Syndrome::Nak(n) => {
                let what = match n {
                    NakCode::PsnSequenceError => "PSN sequence error",
                    NakCode::InvalidRequest => "invalid request",
                    NakCode::RemoteAccessError => "remote access error",
                    NakCode::RemoteOperationalError => "remote operational error",
                    NakCode::InvalidRdRequest => "invalid RD request",
                    NakCode::Reserved(_) => "reserved NAK code",
                };
                write!(f, "NAK, {what} (code {})", n.code())
            }
            Syndrome::Reserved(b) => write!(f, "reserved syndrome {b:#04x}"),
        }
    }
}

/// The fields of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// What kind of acknowledgement.
    pub syndrome: Syndrome,
    /// Message Sequence Number (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Parses an AETH. Every syndrome decodes (reserved ones as [`Syndrome::Reserved`]).
    pub fn parse<T: AsRef<[u8]>>(aeth: &Aeth<T>) -> Result<AethRepr> {
        aeth.check_len()?;
        Ok(AethRepr {
            syndrome: Syndrome::from_byte(aeth.syndrome()),
            msn: aeth.msn(),
        })
    }
    /// Writes an AETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, aeth: &mut Aeth<T>) {
        aeth.set_syndrome(self.syndrome.to_byte());
        aeth.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_table_43() {
        let expected = [
            0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
            1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
        ];
        for (code, &n) in expected.iter().enumerate() {
            assert_eq!(
                CreditCount::from_code(code as u8).credits(),
                Some(n),
                "code {code}"
            );
            assert_eq!(CreditCount::for_credits(n).code(), code as u8);
        }
        assert_eq!(CreditCount::INVALID.credits(), None);
        assert_eq!(CreditCount::for_credits(7).code(), 5);
        assert_eq!(CreditCount::for_credits(u32::MAX).code(), 30);
    }

    #[test]
    fn rnr_timer_table_45() {
        assert_eq!(RnrTimer::from_code(0).micros(), 655_360);
        assert_eq!(RnrTimer::from_code(1).micros(), 10);
        assert_eq!(RnrTimer::from_code(14).micros(), 1_280);
        assert_eq!(RnrTimer::from_code(25).micros(), 61_440);
        assert_eq!(RnrTimer::from_code(31).micros(), 491_520);
    }

    #[test]
    fn syndromes_decode() {
        assert_eq!(
            Syndrome::from_byte(0x1f),
            Syndrome::Ack(CreditCount::INVALID)
        );
        assert_eq!(
            Syndrome::from_byte(0x0c),
            Syndrome::Ack(CreditCount::from_code(12))
        );
        assert_eq!(
            Syndrome::from_byte(0x2e),
            Syndrome::RnrNak(RnrTimer::from_code(14))
        );
        assert_eq!(
            Syndrome::from_byte(0x60),
            Syndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            Syndrome::from_byte(0x61),
            Syndrome::Nak(NakCode::InvalidRequest)
        );
        assert_eq!(
            Syndrome::from_byte(0x62),
            Syndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(
            Syndrome::from_byte(0x63),
            Syndrome::Nak(NakCode::RemoteOperationalError)
        );
        assert_eq!(
            Syndrome::from_byte(0x64),
            Syndrome::Nak(NakCode::InvalidRdRequest)
        );
        assert_eq!(
            Syndrome::from_byte(0x65),
            Syndrome::Nak(NakCode::Reserved(5))
        );
        assert_eq!(Syndrome::from_byte(0x40), Syndrome::Reserved(0x40));
        assert_eq!(Syndrome::from_byte(0x80), Syndrome::Reserved(0x80));
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b);
        }
    }

    #[test]
    fn parse_and_emit() {
        let bytes = [0x60, 0x00, 0x01, 0x02];
        let aeth = Aeth::new_checked(&bytes[..]).unwrap();
        let repr = AethRepr::parse(&aeth).unwrap();
        assert_eq!(
            repr,
            AethRepr {
                syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                msn: 0x102
            }
        );
        let mut out = [0u8; 4];
        repr.emit(&mut Aeth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert_eq!(
            repr.syndrome.to_string(),
            "NAK, PSN sequence error (code 0)"
        );
        let rnr = Syndrome::RnrNak(RnrTimer::from_code(25)).to_string();
        assert_eq!(rnr, "RNR NAK, timer 61.44 ms (code 25)");
    }
}
