//! The FLUSH Extended Transport Header (IBA Vol 1 release 1.5, 9.3.8; rxe's `rxe_feth`), 4
//! bytes before the RETH of a FLUSH request: bits 3-0 say which placement the flush makes
//! (global visibility, persistence), bits 5-4 how much it covers (the RETH's range, or the
//! whole region); the other 26 bits are reserved.

use crate::Result;

const PLACEMENT_MASK: u32 = 0x0f;
const LEVEL_SHIFT: u32 = 4;
const LEVEL_MASK: u32 = 0x3 << LEVEL_SHIFT;

header_view!(
    /// A zero-copy view of a FETH.
    Feth,
    4
);

impl<T: AsRef<[u8]>> Feth<T> {
    /// The placement type bits (`FlushPlacement`).
    pub fn placement(&self) -> u8 {
        (self.be(0..4) as u32 & PLACEMENT_MASK) as u8
    }
    /// The selectivity level (`FlushLevel`'s value).
    pub fn level(&self) -> u8 {
        ((self.be(0..4) as u32 & LEVEL_MASK) >> LEVEL_SHIFT) as u8
    }
    /// The 26 reserved bits (0 on send, ignored on receipt).
    pub fn reserved(&self) -> u32 {
        self.be(0..4) as u32 & !(PLACEMENT_MASK | LEVEL_MASK)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    /// Writes the placement type and level, reserved bits 0.
    pub fn set(&mut self, placement: u8, level: u8) {
        let bits = (u32::from(placement) & PLACEMENT_MASK)
            | ((u32::from(level) << LEVEL_SHIFT) & LEVEL_MASK);
        self.set_be(0..4, bits.into());
    }
}

bitflags::bitflags! {
    /// What a FLUSH makes of the bytes it covers (the FETH's placement type, verbs'
    /// `IBV_FLUSH_GLOBAL` and `IBV_FLUSH_PERSISTENT`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct FlushPlacement: u8 {
        /// Globally visible to every later access.
        const GLOBAL = 1 << 0;
        /// Persistent (written to persistent memory).
        const PERSISTENT = 1 << 1;
    }
}

/// How much a FLUSH covers (the FETH's selectivity level, verbs' `IBV_FLUSH_RANGE` and
/// `IBV_FLUSH_MR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushLevel {
    /// The RETH's address range.
    Range,
    /// The whole memory region the R_Key names (the RETH's address and length are ignored).
    Region,
    /// A reserved level (2 or 3).
    Reserved(u8),
}

impl FlushLevel {
    /// The level of the FETH's two bits.
    pub const fn from_bits(bits: u8) -> FlushLevel {
        match bits & 3 {
            0 => FlushLevel::Range,
            1 => FlushLevel::Region,
            other => FlushLevel::Reserved(other),
        }
    }

    /// Its two bits.
    pub const fn bits(self) -> u8 {
        match self {
            FlushLevel::Range => 0,
            FlushLevel::Region => 1,
            FlushLevel::Reserved(b) => b & 3,
        }
    }
}

/// The fields of a FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FethRepr {
    /// Which placements (reserved bits 2-3 are kept, for the responder to refuse).
    pub placement: FlushPlacement,
    /// How much.
    pub level: FlushLevel,
}

impl FethRepr {
    /// Parses a FETH.
    pub fn parse<T: AsRef<[u8]>>(feth: &Feth<T>) -> Result<FethRepr> {
        feth.check_len()?;
        Ok(FethRepr {
            placement: FlushPlacement::from_bits_retain(feth.placement()),
            level: FlushLevel::from_bits(feth.level()),
        })
    }
    /// Writes a FETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, feth: &mut Feth<T>) {
        feth.set(self.placement.bits(), self.level.bits());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_in_bits_3_0_and_level_in_bits_5_4() {
        let repr = FethRepr {
            placement: FlushPlacement::GLOBAL | FlushPlacement::PERSISTENT,
            level: FlushLevel::Region,
        };
        let mut out = [0xffu8; 4];
        repr.emit(&mut Feth::new_unchecked(&mut out[..]));
        assert_eq!(out, [0, 0, 0, 0x13]);
        assert_eq!(
            FethRepr::parse(&Feth::new_checked(&out[..]).unwrap()),
            Ok(repr)
        );
    }

    #[test]
    fn reserved_bits_are_ignored_and_reserved_values_kept() {
        let feth = Feth::new_checked(&[0xff, 0xff, 0xff, 0xec][..]).unwrap();
        assert_eq!(feth.reserved(), 0xffff_ffc0);
        let r = FethRepr::parse(&feth).unwrap();
        assert_eq!(r.placement.bits(), 0xc);
        assert_eq!(r.level, FlushLevel::Reserved(2));
        assert_eq!(
            FethRepr::parse(&Feth::new_unchecked(&[0u8; 3][..])),
            Err(crate::Error::Truncated)
        );
    }
}
