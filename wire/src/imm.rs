//! The two 4-byte extension headers: Immediate Data (IBA Vol 1 9.3.6), opaque 32 bits handed
//! to the receiver's completion, and the Invalidate ETH (9.3.7), the R_Key that SEND with
//! Invalidate asks the responder to invalidate.

use crate::Result;

header_view!(
    /// A zero-copy view of ImmDt.
    ImmDt,
    4
);

header_view!(
    /// A zero-copy view of an IETH.
    Ieth,
    4
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The immediate data, read big-endian (verbs hand it over as a `__be32`).
    pub fn value(&self) -> u32 {
        self.be(0..4) as u32
    }
    /// Parses ImmDt.
    pub fn parse(&self) -> Result<u32> {
        self.check_len()?;
        Ok(self.value())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Writes the immediate data.
    pub fn emit(&mut self, value: u32) {
        self.set_be(0..4, value.into());
    }
}

impl<T: AsRef<[u8]>> Ieth<T> {
    /// The R_Key to invalidate.
    pub fn rkey(&self) -> u32 {
        self.be(0..4) as u32
    }
    /// Parses an IETH.
    pub fn parse(&self) -> Result<u32> {
        self.check_len()?;
        Ok(self.rkey())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    /// Writes the R_Key.
    pub fn emit(&mut self, rkey: u32) {
        self.set_be(0..4, rkey.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn parse_and_emit() {
        let bytes = [0xde, 0xad, 0xbe, 0xef];
        assert_eq!(
            ImmDt::new_checked(&bytes[..]).unwrap().parse(),
            Ok(0xdead_beef)
        );
        assert_eq!(
            Ieth::new_checked(&bytes[..]).unwrap().parse(),
            Ok(0xdead_beef)
        );
        let mut out = [0u8; 4];
        ImmDt::new_unchecked(&mut out[..]).emit(0x0102_0304);
        assert_eq!(out, [1, 2, 3, 4]);
        Ieth::new_unchecked(&mut out[..]).emit(0x0a0b_0c0d);
        assert_eq!(out, [0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(ImmDt::new_checked(&bytes[..3]), Err(Error::Truncated));
        assert_eq!(Ieth::new_checked(&bytes[..3]), Err(Error::Truncated));
    }
}
