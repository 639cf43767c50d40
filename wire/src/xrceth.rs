//! The XRC Extended Transport Header (IBA Vol 1 Annex A14, 14.4.2.1), 4 bytes right after the
//! BTH of every XRC request: `reserved(1) XRCSRQ(3)`, the shared receive queue at the target
//! that the request works against (its receive WQEs, its PD for R_Keys, its CQ).

use crate::Result;

header_view!(
    /// A zero-copy view of an XRCETH.
    XrcEth,
    4
);

impl<T: AsRef<[u8]>> XrcEth<T> {
    /// The XRC SRQ number (24 bits).
    pub fn srq(&self) -> u32 {
        self.be(0..4) as u32 & crate::bth::MASK_24
    }
    /// The reserved byte (0 on send, ignored on receipt).
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// Parses an XRCETH.
    pub fn parse(&self) -> Result<u32> {
        self.check_len()?;
        Ok(self.srq())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> XrcEth<T> {
    /// Writes the SRQ number; the reserved byte becomes 0.
    pub fn emit(&mut self, srq: u32) {
        self.set_be(0..4, (srq & crate::bth::MASK_24).into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_srq_number_is_the_low_24_bits() {
        let mut out = [0xffu8; 4];
        XrcEth::new_unchecked(&mut out[..]).emit(0xab_cdef);
        assert_eq!(out, [0, 0xab, 0xcd, 0xef]);
        let x = XrcEth::new_checked(&[0x7f, 0, 0, 9][..]).unwrap();
        assert_eq!((x.parse(), x.reserved()), (Ok(9), 0x7f));
        assert!(XrcEth::new_checked(&[0u8; 3][..]).is_err());
    }
}
