//! The atomic headers (IBA Vol 1 9.3.4 and 9.3.5.1).
//!
//! AtomicETH, 28 bytes, in COMPARE_SWAP and FETCH_ADD requests:
//! `VA(8) R_Key(4) Swap or Add Data(8) Compare Data(8)`.
//! AtomicAckETH, 8 bytes, in ATOMIC_ACKNOWLEDGE: `Original Remote Data(8)`.

use crate::Result;

mod field {
    use core::ops::Range;
    pub const VA: Range<usize> = 0..8;
    pub const RKEY: Range<usize> = 8..12;
    pub const SWAP_ADD: Range<usize> = 12..20;
    pub const COMPARE: Range<usize> = 20..28;
    pub const ORIG: Range<usize> = 0..8;
}

header_view!(
    /// A zero-copy view of an AtomicETH.
    AtomicEth,
    28
);

header_view!(
    /// A zero-copy view of an AtomicAckETH.
    AtomicAckEth,
    8
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Virtual address of the 8-byte, 8-aligned target.
    pub fn va(&self) -> u64 {
        self.be(field::VA)
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.be(field::RKEY) as u32
    }
    /// The value to swap in (COMPARE_SWAP) or to add (FETCH_ADD).
    pub fn swap_add(&self) -> u64 {
        self.be(field::SWAP_ADD)
    }
    /// The value to compare with (COMPARE_SWAP only).
    pub fn compare(&self) -> u64 {
        self.be(field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, value: u64) {
        self.set_be(field::VA, value);
    }
    /// Sets the R_Key.
    pub fn set_rkey(&mut self, value: u32) {
        self.set_be(field::RKEY, value.into());
    }
    /// Sets the swap or add data.
    pub fn set_swap_add(&mut self, value: u64) {
        self.set_be(field::SWAP_ADD, value);
    }
    /// Sets the compare data.
    pub fn set_compare(&mut self, value: u64) {
        self.set_be(field::COMPARE, value);
    }
}

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// The value at the target before the atomic operation.
    pub fn orig(&self) -> u64 {
        self.be(field::ORIG)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Sets the original remote data.
    pub fn set_orig(&mut self, value: u64) {
        self.set_be(field::ORIG, value);
    }
}

/// The fields of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap (COMPARE_SWAP) or add (FETCH_ADD) data.
    pub swap_add: u64,
    /// Compare data.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Parses an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicEth<T>) -> Result<AtomicEthRepr> {
        h.check_len()?;
        Ok(AtomicEthRepr {
            va: h.va(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        })
    }
    /// Writes an AtomicETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicEth<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
    }
}

/// The fields of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    /// Original remote data.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Parses an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicAckEth<T>) -> Result<AtomicAckEthRepr> {
        h.check_len()?;
        Ok(AtomicAckEthRepr { orig: h.orig() })
    }
    /// Writes an AtomicAckETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicAckEth<T>) {
        h.set_orig(self.orig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn atomic_eth() {
        let mut bytes = [0u8; 28];
        bytes[..8].copy_from_slice(&0x1000u64.to_be_bytes());
        bytes[8..12].copy_from_slice(&0xabcdu32.to_be_bytes());
        bytes[12..20].copy_from_slice(&5u64.to_be_bytes());
        bytes[20..28].copy_from_slice(&u64::MAX.to_be_bytes());
        let repr = AtomicEthRepr {
            va: 0x1000,
            rkey: 0xabcd,
            swap_add: 5,
            compare: u64::MAX,
        };
        assert_eq!(
            AtomicEthRepr::parse(&AtomicEth::new_checked(&bytes[..]).unwrap()),
            Ok(repr)
        );
        let mut out = [0u8; 28];
        repr.emit(&mut AtomicEth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert_eq!(AtomicEth::new_checked(&bytes[..27]), Err(Error::Truncated));
    }

    #[test]
    fn atomic_ack_eth() {
        let bytes = 0x0102_0304_0506_0708u64.to_be_bytes();
        let repr = AtomicAckEthRepr {
            orig: 0x0102_0304_0506_0708,
        };
        assert_eq!(
            AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(&bytes[..]).unwrap()),
            Ok(repr)
        );
        let mut out = [0u8; 8];
        repr.emit(&mut AtomicAckEth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert_eq!(
            AtomicAckEth::new_checked(&bytes[..7]),
            Err(Error::Truncated)
        );
    }
}
