//! `arbitrary::Arbitrary` for the header values, so a cargo-fuzz harness can ask for well-formed
//! frames (feature `arbitrary`). Generated values are ones the parser gives back: 24-bit fields
//! fit in 24 bits, and a [`FrameRepr`]'s extension headers are exactly those its opcode
//! requires. [`Packet`] adds a payload and emits the frame; [`crate::mutate`] turns well-formed
//! frames into the malformed ones an implementation must survive.

use arbitrary::{Arbitrary, Result, Unstructured};
use smoltcp::wire::{EthernetAddress, Ipv4Address, Ipv6Address};

use crate::aeth::{AethRepr, Syndrome};
use crate::atomic::{AtomicAckEthRepr, AtomicEthRepr};
use crate::bth::{BthRepr, MASK_24};
use crate::deth::DethRepr;
use crate::feth::{FethRepr, FlushLevel, FlushPlacement};
use crate::frame::{EthRepr, ExtRepr, FrameRepr, IpRepr, UdpChecksum, UdpRepr};
use crate::opcode::{Headers, Opcode, TABLE};
use crate::reth::RethRepr;
use crate::vlan::VlanTag;

impl<'a> Arbitrary<'a> for Opcode {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(u.choose(TABLE)?.opcode)
    }
}

fn u24(u: &mut Unstructured<'_>) -> Result<u32> {
    Ok(u32::arbitrary(u)? & MASK_24)
}

impl<'a> Arbitrary<'a> for BthRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(BthRepr {
            opcode: u.arbitrary()?,
            solicited: u.arbitrary()?,
            mig_req: u.arbitrary()?,
            pkey: u.arbitrary()?,
            fecn: u.arbitrary()?,
            becn: u.arbitrary()?,
            dest_qp: u24(u)?,
            ack_req: u.arbitrary()?,
            psn: u24(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for RethRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(RethRepr {
            va: u.arbitrary()?,
            rkey: u.arbitrary()?,
            dma_len: u.arbitrary()?,
        })
    }
}

impl<'a> Arbitrary<'a> for DethRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(DethRepr {
            qkey: u.arbitrary()?,
            src_qp: u24(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for FethRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(FethRepr {
            placement: FlushPlacement::from_bits_retain(u8::arbitrary(u)? & 3),
            level: FlushLevel::from_bits(u.arbitrary()?),
        })
    }
}

impl<'a> Arbitrary<'a> for AtomicEthRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(AtomicEthRepr {
            va: u.arbitrary()?,
            rkey: u.arbitrary()?,
            swap_add: u.arbitrary()?,
            compare: u.arbitrary()?,
        })
    }
}

impl<'a> Arbitrary<'a> for AtomicAckEthRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(AtomicAckEthRepr {
            orig: u.arbitrary()?,
        })
    }
}

impl<'a> Arbitrary<'a> for AethRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(AethRepr {
            syndrome: Syndrome::from_byte(u.arbitrary()?),
            msn: u24(u)?,
        })
    }
}

impl ExtRepr {
    /// Arbitrary values for exactly the extension headers in `headers`.
    pub fn arbitrary_for(headers: Headers, u: &mut Unstructured<'_>) -> Result<ExtRepr> {
        let has = |h| headers.contains(h);
        Ok(ExtRepr {
            xrceth: if has(Headers::XRCETH) {
                Some(u24(u)?)
            } else {
                None
            },
            deth: has(Headers::DETH).then(|| u.arbitrary()).transpose()?,
            feth: has(Headers::FETH).then(|| u.arbitrary()).transpose()?,
            reth: has(Headers::RETH).then(|| u.arbitrary()).transpose()?,
            atomic_eth: has(Headers::ATOMIC_ETH)
                .then(|| u.arbitrary())
                .transpose()?,
            aeth: has(Headers::AETH).then(|| u.arbitrary()).transpose()?,
            atomic_ack_eth: has(Headers::ATOMIC_ACK_ETH)
                .then(|| u.arbitrary())
                .transpose()?,
            immdt: has(Headers::IMMDT).then(|| u.arbitrary()).transpose()?,
            ieth: has(Headers::IETH).then(|| u.arbitrary()).transpose()?,
        })
    }
}

impl<'a> Arbitrary<'a> for VlanTag {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(VlanTag::from_tci(u.arbitrary()?))
    }
}

impl<'a> Arbitrary<'a> for EthRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(EthRepr {
            dst: EthernetAddress(u.arbitrary()?),
            src: EthernetAddress(u.arbitrary()?),
            vlan: u.arbitrary()?,
        })
    }
}

impl<'a> Arbitrary<'a> for IpRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let (dscp, ecn) = (u8::arbitrary(u)? & 0x3f, u8::arbitrary(u)? & 3);
        Ok(if u.arbitrary()? {
            IpRepr::V4 {
                src: Ipv4Address::from_octets(u.arbitrary()?),
                dst: Ipv4Address::from_octets(u.arbitrary()?),
                dscp,
                ecn,
                ttl: u.arbitrary()?,
            }
        } else {
            IpRepr::V6 {
                src: Ipv6Address::from_octets(u.arbitrary()?),
                dst: Ipv6Address::from_octets(u.arbitrary()?),
                dscp,
                ecn,
                flow_label: u32::arbitrary(u)? & 0xf_ffff,
                hop_limit: u.arbitrary()?,
            }
        })
    }
}

impl<'a> Arbitrary<'a> for UdpRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(UdpRepr {
            src_port: u.arbitrary()?,
            checksum: if u.arbitrary()? {
                UdpChecksum::Computed
            } else {
                UdpChecksum::Zero
            },
        })
    }
}

impl<'a> Arbitrary<'a> for FrameRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let bth: BthRepr = u.arbitrary()?;
        Ok(FrameRepr {
            eth: u.arbitrary()?,
            ip: u.arbitrary()?,
            udp: u.arbitrary()?,
            ext: ExtRepr::arbitrary_for(bth.opcode.info().headers, u)?,
            bth,
        })
    }
}

/// A whole frame: headers, and a payload where the opcode allows one (up to 4096 bytes, the
/// largest path MTU).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// The headers.
    pub repr: FrameRepr,
    /// The payload.
    pub payload: Vec<u8>,
}

impl Packet {
    /// The frame's bytes, with pad and ICRC.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut frame = vec![0; self.repr.frame_len(self.payload.len())];
        self.repr
            .emit(&self.payload, &mut frame)
            .expect("a generated packet fits its opcode and an IP packet");
        frame
    }
}

impl<'a> Arbitrary<'a> for Packet {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let repr: FrameRepr = u.arbitrary()?;
        let payload = if repr.bth.opcode.info().allows_payload() {
            let len = u.int_in_range(0..=4096)?;
            u.bytes(len.min(u.len()))?.to_vec()
        } else {
            Vec::new()
        };
        Ok(Packet { repr, payload })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::parse;

    /// Generated packets of every opcode parse back to themselves.
    #[test]
    fn generated_packets_parse_back_to_themselves() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut opcodes = std::collections::BTreeSet::new();
        for _ in 0..4000 {
            let bytes: Vec<u8> = (0..600)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (state >> 56) as u8
                })
                .collect();
            let packet = Packet::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
            let frame = packet.to_bytes();
            let parsed = parse(&frame).unwrap_or_else(|e| panic!("{packet:?}: {e}"));
            assert_eq!(parsed.repr, packet.repr);
            assert_eq!(parsed.payload(), packet.payload);
            opcodes.insert(packet.repr.bth.opcode);
        }
        assert_eq!(opcodes.len(), TABLE.len(), "every opcode is generated");
    }
}
