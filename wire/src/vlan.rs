//! The IEEE 802.1Q tag: TPID 0x8100 then `PCP(3) DEI(1) VID(12)`. RoCE deployments use the PCP
//! (priority) for lossless traffic classes with PFC.

/// The TPID that marks an 802.1Q tag.
pub const TPID: u16 = 0x8100;

/// An 802.1Q tag's control information.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority Code Point, 0..=7.
    pub pcp: u8,
    /// Drop Eligible Indicator.
    pub dei: bool,
    /// VLAN identifier, 0..=4095.
    pub vid: u16,
}

impl VlanTag {
    /// Decodes the 16-bit Tag Control Information.
    pub const fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }
    /// Encodes the Tag Control Information; out-of-range values are masked.
    pub const fn tci(self) -> u16 {
        ((self.pcp as u16 & 0x7) << 13) | ((self.dei as u16) << 12) | (self.vid & 0x0fff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tci() {
        let tag = VlanTag {
            pcp: 3,
            dei: true,
            vid: 100,
        };
        assert_eq!(tag.tci(), 0x7064);
        assert_eq!(VlanTag::from_tci(0x7064), tag);
        assert_eq!(
            VlanTag::from_tci(0xffff),
            VlanTag {
                pcp: 7,
                dei: true,
                vid: 0xfff
            }
        );
    }
}
