//! The Datagram Extended Transport Header (IBA Vol 1 9.3.2), 8 bytes, in UD packets:
//! `Q_Key(4) reserved(1) SrcQP(3)`.

use crate::Result;

mod field {
    use core::ops::Range;
    pub const QKEY: Range<usize> = 0..4;
    pub const RESERVED: usize = 4;
    pub const SRC_QP: Range<usize> = 5..8;
}

header_view!(
    /// A zero-copy view of a DETH.
    Deth,
    8
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// The Queue Key the receiving UD QP must match (IBA 10.2.4).
    pub fn qkey(&self) -> u32 {
        self.be(field::QKEY) as u32
    }
    /// The reserved byte (0 on send, ignored on receipt).
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }
    /// The sender's QP number, reported in the receive completion.
    pub fn src_qp(&self) -> u32 {
        self.be(field::SRC_QP) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets the Q_Key.
    pub fn set_qkey(&mut self, value: u32) {
        self.set_be(field::QKEY, value.into());
    }
    /// Sets the source QP (24 bits); the reserved byte becomes 0.
    pub fn set_src_qp(&mut self, value: u32) {
        self.buffer.as_mut()[field::RESERVED] = 0;
        self.set_be(field::SRC_QP, (value & crate::bth::MASK_24).into());
    }
}

/// The fields of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DethRepr {
    /// Queue Key.
    pub qkey: u32,
    /// Source QP number (24 bits).
    pub src_qp: u32,
}

impl DethRepr {
    /// Parses a DETH.
    pub fn parse<T: AsRef<[u8]>>(deth: &Deth<T>) -> Result<DethRepr> {
        deth.check_len()?;
        Ok(DethRepr {
            qkey: deth.qkey(),
            src_qp: deth.src_qp(),
        })
    }
    /// Writes a DETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, deth: &mut Deth<T>) {
        deth.set_qkey(self.qkey);
        deth.set_src_qp(self.src_qp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 8] = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x2a];
    const REPR: DethRepr = DethRepr {
        qkey: 0x1111_1111,
        src_qp: 42,
    };

    #[test]
    fn parse_and_emit() {
        let deth = Deth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(DethRepr::parse(&deth).unwrap(), REPR);
        let mut out = [0xffu8; 8];
        REPR.emit(&mut Deth::new_unchecked(&mut out[..]));
        assert_eq!(out, BYTES);
        let mut with_reserved = BYTES;
        with_reserved[4] = 0xee;
        let deth = Deth::new_checked(&with_reserved[..]).unwrap();
        assert_eq!(deth.reserved(), 0xee);
        assert_eq!(DethRepr::parse(&deth).unwrap(), REPR);
    }
}
