//! The RDMA Extended Transport Header (IBA Vol 1 9.3.3), 16 bytes: where an RDMA WRITE or READ
//! goes. `VA(8) R_Key(4) DMA Length(4)`.

use crate::Result;

mod field {
    use core::ops::Range;
    pub const VA: Range<usize> = 0..8;
    pub const RKEY: Range<usize> = 8..12;
    pub const DMA_LEN: Range<usize> = 12..16;
}

header_view!(
    /// A zero-copy view of a RETH.
    Reth,
    16
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Virtual address of the first byte in the responder's memory.
    pub fn va(&self) -> u64 {
        self.be(field::VA)
    }
    /// The remote key that authorises the access.
    pub fn rkey(&self) -> u32 {
        self.be(field::RKEY) as u32
    }
    /// Length of the whole message in bytes (not of this packet).
    pub fn dma_len(&self) -> u32 {
        self.be(field::DMA_LEN) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, value: u64) {
        self.set_be(field::VA, value);
    }
    /// Sets the R_Key.
    pub fn set_rkey(&mut self, value: u32) {
        self.set_be(field::RKEY, value.into());
    }
    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, value: u32) {
        self.set_be(field::DMA_LEN, value.into());
    }
}

/// The fields of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RethRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length of the whole message.
    pub dma_len: u32,
}

impl RethRepr {
    /// Parses a RETH.
    pub fn parse<T: AsRef<[u8]>>(reth: &Reth<T>) -> Result<RethRepr> {
        reth.check_len()?;
        Ok(RethRepr {
            va: reth.va(),
            rkey: reth.rkey(),
            dma_len: reth.dma_len(),
        })
    }
    /// Writes a RETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, reth: &mut Reth<T>) {
        reth.set_va(self.va);
        reth.set_rkey(self.rkey);
        reth.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    static BYTES: [u8; 16] = [
        0x00, 0x00, 0x7f, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x12, 0x07, 0x00, 0x00, 0x10,
        0x00,
    ];
    const REPR: RethRepr = RethRepr {
        va: 0x7f12_3456_7800,
        rkey: 0x1207,
        dma_len: 4096,
    };

    #[test]
    fn parse_and_emit() {
        let reth = Reth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(RethRepr::parse(&reth).unwrap(), REPR);
        let mut out = [0u8; 16];
        REPR.emit(&mut Reth::new_unchecked(&mut out[..]));
        assert_eq!(out, BYTES);
        assert_eq!(Reth::new_checked(&BYTES[..15]), Err(Error::Truncated));
    }
}
