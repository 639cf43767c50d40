//! The Invariant CRC (RoCEv2 Annex A17.3.3, after IBA Vol 1 7.8.1).
//!
//! The ICRC is the CRC-32 of Ethernet (polynomial 0x04C11DB7, reflected, initial value and final
//! XOR all ones) over everything from the IP header to the end of the pad, preceded by 8 bytes
//! of 0xFF that stand for the InfiniBand LRH a RoCEv2 frame does not have. Fields that routers may
//! change on the way are replaced by ones before hashing ("masked"):
//!
//! - IPv4: Type of Service (DSCP+ECN), TTL and header checksum;
//! - IPv6: Traffic Class, Flow Label and Hop Limit;
//! - UDP: checksum;
//! - BTH: byte 4, i.e. FECN, BECN and the 6 reserved bits.
//!
//! It is carried after the pad as the CRC value in little-endian byte order, like Ethernet's FCS.

use crate::bth::BthRepr;
use crate::{Error, Result};
use crc32fast::Hasher;

/// The ICRC's length in bytes.
pub const ICRC_LEN: usize = 4;
/// The stand-in for the LRH that starts the hashed bytes.
pub const MASKED_LRH: [u8; 8] = [0xff; 8];
/// The longest masked prefix: LRH stand-in, IPv6 header, UDP header and BTH.
pub const MAX_PREFIX_LEN: usize = 8 + 40 + UDP_LEN + BthRepr::LEN;

const UDP_LEN: usize = 8;

/// The CRC-32 of [`MASKED_LRH`] alone, computed at compile time: every ICRC starts from it, so
/// the eight bytes are never hashed at run time.
const LRH_STATE: u32 = reference_crc(!0, &MASKED_LRH) ^ !0;

/// A bit-at-a-time CRC-32 step (reflected polynomial 0xEDB88320) over `bytes`, from and to the
/// raw (non-inverted) register. Slow; for the constant above and for tests.
const fn reference_crc(mut crc: u32, bytes: &[u8]) -> u32 {
    let mut i = 0;
    while i < bytes.len() {
        crc ^= bytes[i] as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        i += 1;
    }
    crc
}

/// The IP header length for the version in the first nibble of `l3`.
fn ip_header_len(l3: &[u8]) -> Result<usize> {
    match l3.first().map(|b| b >> 4) {
        Some(4) => Ok(20),
        Some(6) => Ok(40),
        Some(v) => Err(Error::BadIpVersion(v)),
        None => Err(Error::Truncated),
    }
}

/// The offsets in `l3` of the masked bytes, and how long the IP, UDP and BTH headers are
/// together. Each masked byte becomes 0xff, except the IPv6 version nibble, which stays.
fn masked_bytes(l3: &[u8]) -> Result<(&'static [usize], usize)> {
    // IPv4: ToS 1, TTL 8, checksum 10-11; UDP checksum 26-27; BTH byte 4 at 32.
    const V4: &[usize] = &[1, 8, 10, 11, 26, 27, 32];
    // IPv6: Traffic Class and Flow Label 0-3 (byte 0's low nibble only), Hop Limit 7; UDP
    // checksum 46-47; BTH byte 4 at 52.
    const V6: &[usize] = &[0, 1, 2, 3, 7, 46, 47, 52];
    let ip_len = ip_header_len(l3)?;
    let headers = ip_len + UDP_LEN + BthRepr::LEN;
    if l3.len() < headers {
        return Err(Error::Truncated);
    }
    Ok((if ip_len == 20 { V4 } else { V6 }, headers))
}

/// Sets the masked bytes of `headers` (the IP, UDP and BTH headers) to ones.
fn mask(headers: &mut [u8], offsets: &[usize]) {
    for &i in offsets {
        // The IPv6 version nibble is covered as it is.
        headers[i] = if i == 0 { headers[0] | 0x0f } else { 0xff };
    }
}

/// Writes the masked prefix (LRH stand-in, IP, UDP and BTH headers with the variant fields set to
/// ones) of `l3`, the bytes from the IP header to the end of the pad, into `out`. Returns the
/// prefix's length; the ICRC goes on over `l3[prefix_len - 8..]`.
pub fn masked_prefix(l3: &[u8], out: &mut [u8; MAX_PREFIX_LEN]) -> Result<usize> {
    let (offsets, headers) = masked_bytes(l3)?;
    out[..8].copy_from_slice(&MASKED_LRH);
    out[8..8 + headers].copy_from_slice(&l3[..headers]);
    mask(&mut out[8..8 + headers], offsets);
    Ok(8 + headers)
}

/// Computes the ICRC of `l3`: the bytes from the IP header to the end of the pad, without the
/// ICRC itself. It hashes a masked copy of the headers, then the rest in place; no allocation.
#[inline]
pub fn compute(l3: &[u8]) -> Result<u32> {
    let (offsets, headers) = masked_bytes(l3)?;
    let mut copy = [0u8; MAX_PREFIX_LEN - 8];
    let copy = &mut copy[..headers];
    copy.copy_from_slice(&l3[..headers]);
    mask(copy, offsets);
    let mut hasher = Hasher::new_with_initial(LRH_STATE);
    hasher.update(copy);
    hasher.update(&l3[headers..]);
    Ok(hasher.finalize())
}

/// Computes the ICRC of `l3` like [`compute`], but in one pass over the bytes where they are: it
/// masks the variant fields in place, hashes, and puts them back. For buffers the caller owns,
/// such as a frame being built.
#[inline]
pub fn compute_in_place(l3: &mut [u8]) -> Result<u32> {
    let (offsets, _) = masked_bytes(l3)?;
    let mut saved = [0u8; 8];
    for (s, &i) in saved.iter_mut().zip(offsets) {
        *s = l3[i];
    }
    mask(l3, offsets);
    let mut hasher = Hasher::new_with_initial(LRH_STATE);
    hasher.update(l3);
    for (&s, &i) in saved.iter().zip(offsets) {
        l3[i] = s;
    }
    Ok(hasher.finalize())
}

/// Reads the ICRC a packet carries (little-endian).
pub fn read(icrc: &[u8; ICRC_LEN]) -> u32 {
    u32::from_le_bytes(*icrc)
}

/// The ICRC's wire bytes.
pub fn to_bytes(icrc: u32) -> [u8; ICRC_LEN] {
    icrc.to_le_bytes()
}

/// A slow reference, written from the spec's description alone, to test [`compute`] against:
/// a fully masked copy (with its own masking code) hashed a bit at a time.
#[cfg(test)]
pub(crate) fn reference(l3: &[u8]) -> u32 {
    let mut bytes = MASKED_LRH.to_vec();
    bytes.extend_from_slice(l3);
    let ip = 8;
    let (udp, bth) = if l3[0] >> 4 == 4 {
        for i in [1, 8, 10, 11] {
            bytes[ip + i] = 0xff;
        }
        (ip + 20, ip + 28)
    } else {
        bytes[ip] |= 0x0f;
        for i in [1, 2, 3, 7] {
            bytes[ip + i] = 0xff;
        }
        (ip + 40, ip + 48)
    };
    bytes[udp + 6] = 0xff;
    bytes[udp + 7] = 0xff;
    bytes[bth + 4] = 0xff;
    !reference_crc(!0, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RC SEND_ONLY of "abcd" from 198.18.0.1 to 198.18.0.2, from IP header to pad.
    fn v4_send() -> Vec<u8> {
        let mut l3 = vec![
            0x45, 0x68, 0x00, 0x30, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 198, 18, 0, 1,
            198, 18, 0, 2, // IPv4 (checksum left 0: masked anyway)
            0xc0, 0x00, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, // UDP
            0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x01, // BTH
        ];
        l3.extend_from_slice(b"abcd");
        l3
    }

    #[test]
    fn matches_reference() {
        let l3 = v4_send();
        assert_eq!(compute(&l3).unwrap(), reference(&l3));
    }

    #[test]
    fn masked_fields_do_not_change_it() {
        let l3 = v4_send();
        let icrc = compute(&l3).unwrap();
        for (i, v) in [(1, 0x00), (8, 1), (10, 0xab), (26, 0x12), (32, 0xc0)] {
            let mut changed = l3.clone();
            changed[i] = v;
            assert_eq!(compute(&changed).unwrap(), icrc, "byte {i}");
        }
        for i in [0, 2, 12, 20, 22, 28, 35, 39, 40] {
            let mut changed = l3.clone();
            changed[i] ^= 0x01;
            assert_ne!(compute(&changed).unwrap(), icrc, "byte {i}");
        }
    }

    #[test]
    fn ipv6_masks_traffic_class_flow_label_and_hop_limit() {
        let mut l3 = vec![0x60, 0x00, 0x00, 0x00, 0x00, 0x1c, 0x11, 0x40];
        l3.extend_from_slice(&[0xfd; 32]);
        l3.extend_from_slice(&v4_send()[20..]);
        let icrc = compute(&l3).unwrap();
        assert_eq!(icrc, reference(&l3));
        let mut changed = l3.clone();
        changed[0] = 0x6f;
        changed[1] = 0x12;
        changed[3] = 0x34;
        changed[7] = 1;
        assert_eq!(compute(&changed).unwrap(), icrc);
        changed[4] = 1; // payload length is covered
        assert_ne!(compute(&changed).unwrap(), icrc);
    }

    #[test]
    fn in_place_agrees_and_restores_the_bytes() {
        let mut v6 = vec![0x6a, 0xbc, 0xde, 0xf1, 0x00, 0x1c, 0x11, 0x40];
        v6.extend_from_slice(&[0xfd; 32]);
        v6.extend_from_slice(&v4_send()[20..]);
        for l3 in [v4_send(), v6] {
            let mut buf = l3.clone();
            assert_eq!(compute_in_place(&mut buf).unwrap(), compute(&l3).unwrap());
            assert_eq!(buf, l3);
        }
        assert_eq!(compute_in_place(&mut [0x45; 30]), Err(Error::Truncated));
    }

    #[test]
    fn lrh_state_is_the_crc_of_eight_ff_bytes() {
        let mut h = Hasher::new();
        h.update(&MASKED_LRH);
        assert_eq!(LRH_STATE, h.finalize());
    }

    #[test]
    fn short_or_non_ip_input_is_an_error() {
        assert_eq!(compute(&[]), Err(Error::Truncated));
        assert_eq!(compute(&v4_send()[..39]), Err(Error::Truncated));
        assert_eq!(compute(&[0x55; 64]), Err(Error::BadIpVersion(5)));
    }
}
