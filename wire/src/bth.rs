//! The Base Transport Header (IBA Vol 1 9.2), 12 bytes, in every RoCEv2 packet.
//!
//! ```text
//!  byte 0   OpCode
//!  byte 1   SE(1) M(1) PadCnt(2) TVer(4)
//!  2..4     P_Key
//!  byte 4   FECN(1) BECN(1) reserved(6)
//!  5..8     DestQP (24 bits)
//!  byte 8   AckReq(1) reserved(7)
//!  9..12    PSN (24 bits)
//! ```

use crate::{Error, Opcode, Result};

mod field {
    use core::ops::Range;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: Range<usize> = 2..4;
    pub const FECN_BECN: usize = 4;
    pub const DEST_QP: Range<usize> = 5..8;
    pub const ACK_REQ: usize = 8;
    pub const PSN: Range<usize> = 9..12;

    pub const SE: u8 = 0x80;
    pub const MIG_REQ: u8 = 0x40;
    pub const PAD_SHIFT: u8 = 4;
    pub const PAD_MASK: u8 = 0x30;
    pub const TVER_MASK: u8 = 0x0f;
    pub const FECN: u8 = 0x80;
    pub const BECN: u8 = 0x40;
    pub const RESV6: u8 = 0x3f;
    pub const ACK: u8 = 0x80;
    pub const RESV7: u8 = 0x7f;
}

/// PSNs and QP numbers are 24 bits.
pub const MASK_24: u32 = 0x00ff_ffff;

/// The DestQP of a multicast packet (IBA Vol 1 10.5, multicast): it goes to every QP attached
/// to the destination group.
pub const MULTICAST_QPN: u32 = MASK_24;

header_view!(
    /// A zero-copy view of a BTH.
    Bth,
    12
);

impl<T: AsRef<[u8]>> Bth<T> {
    fn byte(&self, i: usize) -> u8 {
        self.buffer.as_ref()[i]
    }
    /// The raw opcode byte.
    pub fn opcode(&self) -> u8 {
        self.byte(field::OPCODE)
    }
    /// Solicited Event: the responder should raise a completion event for this message.
    pub fn solicited(&self) -> bool {
        self.byte(field::FLAGS) & field::SE != 0
    }
    /// MigReq: the path migration state.
    pub fn mig_req(&self) -> bool {
        self.byte(field::FLAGS) & field::MIG_REQ != 0
    }
    /// Pad count: bytes added to make the payload a multiple of 4.
    pub fn pad_count(&self) -> u8 {
        (self.byte(field::FLAGS) & field::PAD_MASK) >> field::PAD_SHIFT
    }
    /// Transport header version; 0 in every IBA release.
    pub fn tver(&self) -> u8 {
        self.byte(field::FLAGS) & field::TVER_MASK
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        self.be(field::PKEY) as u16
    }
    /// Forward ECN: congestion seen on the way to the destination.
    pub fn fecn(&self) -> bool {
        self.byte(field::FECN_BECN) & field::FECN != 0
    }
    /// Backward ECN: congestion seen on the way back; set in CNPs.
    pub fn becn(&self) -> bool {
        self.byte(field::FECN_BECN) & field::BECN != 0
    }
    /// The six reserved bits after FECN/BECN (sent as 0, ignored on receipt).
    pub fn reserved6(&self) -> u8 {
        self.byte(field::FECN_BECN) & field::RESV6
    }
    /// Destination QP number.
    pub fn dest_qp(&self) -> u32 {
        self.be(field::DEST_QP) as u32
    }
    /// AckReq: the requester asks for an acknowledgement of this packet.
    pub fn ack_req(&self) -> bool {
        self.byte(field::ACK_REQ) & field::ACK != 0
    }
    /// The seven reserved bits after AckReq.
    pub fn reserved7(&self) -> u8 {
        self.byte(field::ACK_REQ) & field::RESV7
    }
    /// Packet sequence number.
    pub fn psn(&self) -> u32 {
        self.be(field::PSN) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    /// Sets the opcode byte.
    pub fn set_opcode(&mut self, value: u8) {
        self.buffer.as_mut()[field::OPCODE] = value;
    }
    /// Sets SE, M, PadCnt and TVer together.
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        self.buffer.as_mut()[field::FLAGS] = (u8::from(solicited) << 7)
            | (u8::from(mig_req) << 6)
            | ((pad_count << field::PAD_SHIFT) & field::PAD_MASK)
            | (tver & field::TVER_MASK);
    }
    /// Sets the P_Key.
    pub fn set_pkey(&mut self, value: u16) {
        self.set_be(field::PKEY, value.into());
    }
    /// Sets FECN and BECN; the reserved bits become 0.
    pub fn set_ecn_bits(&mut self, fecn: bool, becn: bool) {
        self.buffer.as_mut()[field::FECN_BECN] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }
    /// Sets the destination QP (24 bits).
    pub fn set_dest_qp(&mut self, value: u32) {
        self.set_be(field::DEST_QP, (value & MASK_24).into());
    }
    /// Sets AckReq; the reserved bits become 0.
    pub fn set_ack_req(&mut self, value: bool) {
        self.buffer.as_mut()[field::ACK_REQ] = u8::from(value) << 7;
    }
    /// Sets the PSN (24 bits).
    pub fn set_psn(&mut self, value: u32) {
        self.set_be(field::PSN, (value & MASK_24).into());
    }
}

/// The fields of a BTH. The pad count is not here: it follows from the payload length, and the
/// frame builder writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// The opcode.
    pub opcode: Opcode,
    /// Solicited Event.
    pub solicited: bool,
    /// MigReq.
    pub mig_req: bool,
    /// Partition key; 0xffff is the default full-member key.
    pub pkey: u16,
    /// Forward ECN.
    pub fecn: bool,
    /// Backward ECN.
    pub becn: bool,
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// Packet sequence number (24 bits).
    pub psn: u32,
}

impl BthRepr {
    /// The header's length.
    pub const LEN: usize = 12;

    /// A BTH of `opcode` to `dest_qp` at `psn`, with the other fields as this crate's senders
    /// set them: the default partition key, MigReq set (no path migration, IBA 9.2), no ECN
    /// marks, and neither SE nor AckReq (callers set those per packet).
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: u32) -> Self {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: true,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Parses a BTH. Reserved bits are ignored, as IBA 9.2 requires of receivers.
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<BthRepr> {
        // IBA C9-3 (9.2): a packet whose TVer is not 0 is dropped.
        if bth.tver() != 0 {
            return Err(Error::BadTver(bth.tver()));
        }
        Ok(BthRepr {
            opcode: Opcode::from_u8(bth.opcode())?,
            solicited: bth.solicited(),
            mig_req: bth.mig_req(),
            pkey: bth.pkey(),
            fecn: bth.fecn(),
            becn: bth.becn(),
            dest_qp: bth.dest_qp(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
        })
    }

    /// Writes the BTH with the given pad count, TVer 0 and zero reserved bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>, pad_count: u8) {
        bth.set_opcode(self.opcode as u8);
        bth.set_flags(self.solicited, self.mig_req, pad_count, 0);
        bth.set_pkey(self.pkey);
        bth.set_ecn_bits(self.fecn, self.becn);
        bth.set_dest_qp(self.dest_qp);
        bth.set_ack_req(self.ack_req);
        bth.set_psn(self.psn);
    }

    /// The BTH of a Congestion Notification Packet (RoCEv2 Annex A17.9.3): opcode 0x81, BECN set,
    /// sent to the QP whose traffic was marked; PSN, SE, M and AckReq are reserved (0).
    pub fn cnp(dest_qp: u32, pkey: u16) -> BthRepr {
        BthRepr {
            opcode: Opcode::Cnp,
            solicited: false,
            mig_req: false,
            pkey,
            fecn: false,
            becn: true,
            dest_qp: dest_qp & MASK_24,
            ack_req: false,
            psn: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RC RDMA_WRITE_ONLY, SE, M, pad 3, P_Key 0xffff, FECN, DestQP 0x123456, AckReq, PSN 0xabcdef.
    static BYTES: [u8; 12] = [
        0x0a, 0xf0, 0xff, 0xff, 0x80, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef,
    ];

    fn repr() -> BthRepr {
        BthRepr {
            opcode: Opcode::RcWriteOnly,
            solicited: true,
            mig_req: true,
            pkey: 0xffff,
            fecn: true,
            becn: false,
            dest_qp: 0x12_3456,
            ack_req: true,
            psn: 0xab_cdef,
        }
    }

    #[test]
    fn deconstruct() {
        let bth = Bth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(bth.opcode(), 0x0a);
        assert!(bth.solicited() && bth.mig_req());
        assert_eq!(bth.pad_count(), 3);
        assert_eq!(bth.tver(), 0);
        assert_eq!(bth.pkey(), 0xffff);
        assert!(bth.fecn() && !bth.becn());
        assert_eq!(bth.reserved6(), 0);
        assert_eq!(bth.dest_qp(), 0x12_3456);
        assert!(bth.ack_req());
        assert_eq!(bth.reserved7(), 0);
        assert_eq!(bth.psn(), 0xab_cdef);
    }

    #[test]
    fn parse_and_emit() {
        let bth = Bth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(BthRepr::parse(&bth).unwrap(), repr());
        let mut out = [0u8; 12];
        repr().emit(&mut Bth::new_unchecked(&mut out[..]), 3);
        assert_eq!(out, BYTES);
    }

    #[test]
    fn reserved_bits_are_ignored_and_emitted_as_zero() {
        let mut bytes = BYTES;
        bytes[4] |= 0x3f;
        bytes[8] |= 0x7f;
        let bth = Bth::new_checked(&bytes[..]).unwrap();
        assert_eq!(bth.reserved6(), 0x3f);
        assert_eq!(bth.reserved7(), 0x7f);
        assert_eq!(BthRepr::parse(&bth).unwrap(), repr());
    }

    #[test]
    fn bad_tver_and_unknown_opcode() {
        let mut bytes = BYTES;
        bytes[1] = 0x01;
        assert_eq!(
            BthRepr::parse(&Bth::new_unchecked(&bytes[..])),
            Err(Error::BadTver(1))
        );
        let mut bytes = BYTES;
        bytes[0] = 0x15;
        assert_eq!(
            BthRepr::parse(&Bth::new_unchecked(&bytes[..])),
            Err(Error::UnknownOpcode(0x15))
        );
    }

    #[test]
    fn truncated() {
        assert_eq!(Bth::new_checked(&BYTES[..11]), Err(Error::Truncated));
    }

    #[test]
    fn cnp_sets_becn() {
        let cnp = BthRepr::cnp(0x0100_0011, 0xffff);
        assert!(cnp.becn && !cnp.fecn && !cnp.ack_req);
        assert_eq!(cnp.dest_qp, 0x11);
        let mut out = [0u8; 12];
        cnp.emit(&mut Bth::new_unchecked(&mut out[..]), 0);
        assert_eq!(out, [0x81, 0, 0xff, 0xff, 0x40, 0, 0, 0x11, 0, 0, 0, 0]);
    }
}
