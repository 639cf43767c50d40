//! 24-bit Packet Sequence Number arithmetic (IBA 9.7.1: PSNs wrap modulo 2^24, and a PSN is
//! "ahead" of another when it is less than 2^23 after it).

/// The PSN field's mask (24 bits, as QPNs).
pub use softrnic_wire::bth::MASK_24 as MASK;

/// The PSNs a message of `len` bytes takes at `mtu` (one for an empty message).
#[inline]
pub fn npkts(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

/// `psn + n`, wrapped to 24 bits.
#[inline]
pub fn add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & MASK
}

/// The signed distance from `b` to `a`: positive when `a` is after `b`, in -2^23..2^23.
#[inline]
pub fn diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps() {
        assert_eq!(add(MASK, 1), 0);
        assert_eq!(diff(0, MASK), 1);
        assert_eq!(diff(MASK, 0), -1);
        assert_eq!(diff(5, 5), 0);
        assert_eq!(diff(0x80_0000, 0), -0x80_0000);
    }

    proptest! {
        #[test]
        fn diff_inverts_add(a in 0..=MASK, n in 0u32..0x80_0000) {
            prop_assert_eq!(diff(add(a, n), a), n as i32);
            prop_assert_eq!(diff(a, add(a, n)), -(n as i32));
        }
    }
}
