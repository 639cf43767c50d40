//! Example frames for every opcode: the shipped sample capture, the docs and the independent
//! checks are made from these. Two hosts, A (198.18.0.1, QP 0x11) and B (198.18.0.2, QP 0x12);
//! requests go from A to B and responses come back.

use crate::aeth::{AethRepr, CreditCount, NakCode, RnrTimer, Syndrome};
use crate::atomic::{AtomicAckEthRepr, AtomicEthRepr};
use crate::deth::DethRepr;
use crate::frame::{EthRepr, ExtRepr, FrameRepr, IpRepr, UdpChecksum, UdpRepr};
use crate::opcode::{Headers, Operation, TABLE};
use crate::reth::RethRepr;
use crate::{BthRepr, EthernetAddress, Ipv4Address, Ipv6Address, Opcode, VlanTag};

/// One example frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// What it shows.
    pub name: String,
    /// Its headers.
    pub repr: FrameRepr,
    /// Its payload.
    pub payload: Vec<u8>,
}

impl Sample {
    /// The frame's bytes.
    pub fn frame(&self) -> Vec<u8> {
        let mut buf = vec![0; self.repr.frame_len(self.payload.len())];
        // The samples are built to be valid, so this cannot fail.
        let n = self
            .repr
            .emit(&self.payload, &mut buf)
            .expect("sample frames are valid");
        buf.truncate(n);
        buf
    }
}

/// Which IP version a sample uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ip {
    /// IPv4: 198.18.0.1 and 198.18.0.2.
    V4,
    /// IPv6: fd00:5e::1 and fd00:5e::2 (unique local), with a flow label.
    V6,
}

const MAC_A: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x00, 0x01]);
const MAC_B: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x00, 0x02]);
const QP_A: u32 = 0x11;
const QP_B: u32 = 0x12;
/// The R_Key of B's buffer in the samples.
pub const RKEY: u32 = 0x0000_1207;
/// The address of B's buffer in the samples.
pub const VA: u64 = 0x0000_7f3a_2c00_1000;

fn ip(version: Ip, from_a: bool) -> IpRepr {
    let (a4, b4) = (
        Ipv4Address::new(198, 18, 0, 1),
        Ipv4Address::new(198, 18, 0, 2),
    );
    let (a6, b6) = (
        Ipv6Address::new(0xfd00, 0x5e, 0, 0, 0, 0, 0, 1),
        Ipv6Address::new(0xfd00, 0x5e, 0, 0, 0, 0, 0, 2),
    );
    let (src4, dst4, src6, dst6) = if from_a {
        (a4, b4, a6, b6)
    } else {
        (b4, a4, b6, a6)
    };
    match version {
        Ip::V4 => IpRepr::V4 {
            src: src4,
            dst: dst4,
            dscp: 26,
            ecn: 2,
            ttl: 64,
        },
        Ip::V6 => IpRepr::V6 {
            src: src6,
            dst: dst6,
            dscp: 26,
            ecn: 2,
            flow_label: 0x1_2345,
            hop_limit: 64,
        },
    }
}

/// A frame of `opcode` with plausible fields: the given PSN, and a payload of `payload_len`
/// bytes if the opcode allows one.
pub fn example(opcode: Opcode, version: Ip, psn: u32, payload_len: usize) -> Sample {
    let info = opcode.info();
    let from_a = !info.operation.is_response();
    let (src_mac, dst_mac, dest_qp) = if from_a {
        (MAC_A, MAC_B, QP_B)
    } else {
        (MAC_B, MAC_A, QP_A)
    };
    let h = info.headers;
    let has = |x| h.contains(x);
    let ext = ExtRepr {
        deth: has(Headers::DETH).then_some(DethRepr {
            qkey: 0x1111_1111,
            src_qp: QP_A,
        }),
        reth: has(Headers::RETH).then_some(RethRepr {
            va: VA,
            rkey: RKEY,
            dma_len: if info.operation == Operation::RdmaReadRequest {
                4096
            } else {
                payload_len as u32
            },
        }),
        atomic_eth: has(Headers::ATOMIC_ETH).then_some(AtomicEthRepr {
            va: VA + 0x40,
            rkey: RKEY,
            swap_add: if opcode == Opcode::RcFetchAdd {
                1
            } else {
                0xcafe
            },
            compare: if opcode == Opcode::RcFetchAdd { 0 } else { 41 },
        }),
        aeth: has(Headers::AETH).then_some(AethRepr {
            syndrome: Syndrome::Ack(CreditCount::INVALID),
            msn: psn & 0xff,
        }),
        atomic_ack_eth: has(Headers::ATOMIC_ACK_ETH).then_some(AtomicAckEthRepr { orig: 41 }),
        immdt: has(Headers::IMMDT).then_some(0x1234_5678),
        ieth: has(Headers::IETH).then_some(0x0000_0a07),
    };
    let last = matches!(info.position, crate::Position::Last | crate::Position::Only);
    let bth = if opcode == Opcode::Cnp {
        BthRepr::cnp(dest_qp, 0xffff)
    } else {
        BthRepr {
            opcode,
            solicited: last && info.operation == Operation::Send,
            mig_req: true,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: last
                && !info.operation.is_response()
                && info.transport == crate::Transport::Rc,
            psn,
        }
    };
    let payload = if info.allows_payload() {
        (0..payload_len)
            .map(|i| b"RoCEv2 on a plain NIC. "[i % 23])
            .collect()
    } else {
        Vec::new()
    };
    let checksum = match version {
        Ip::V4 => UdpChecksum::Zero,
        Ip::V6 => UdpChecksum::Computed,
    };
    let suffix = match version {
        Ip::V4 => "IPv4",
        Ip::V6 => "IPv6",
    };
    Sample {
        name: format!("{} over {suffix}", info.name),
        repr: FrameRepr {
            eth: EthRepr {
                dst: dst_mac,
                src: src_mac,
                vlan: None,
            },
            ip: ip(version, from_a),
            udp: UdpRepr {
                src_port: 0xc000 | ((dest_qp as u16 * 0x9e3) & 0x3fff),
                checksum,
            },
            bth,
            ext,
        },
        payload,
    }
}

/// One frame of every opcode, in opcode order, with payload lengths that exercise every pad
/// count.
pub fn every_opcode(version: Ip) -> Vec<Sample> {
    TABLE
        .iter()
        .enumerate()
        .map(|(i, info)| example(info.opcode, version, 0x100 + i as u32, 13 + i))
        .collect()
}

/// The frames of the shipped sample capture: every opcode over IPv4 and IPv6, then the NAKs,
/// an RNR NAK, a VLAN-tagged frame and a frame with congestion marks.
pub fn capture() -> Vec<Sample> {
    let mut frames = every_opcode(Ip::V4);
    frames.extend(every_opcode(Ip::V6));
    for (syndrome, what) in [
        (
            Syndrome::Nak(NakCode::PsnSequenceError),
            "NAK: PSN sequence error",
        ),
        (
            Syndrome::Nak(NakCode::InvalidRequest),
            "NAK: invalid request",
        ),
        (
            Syndrome::Nak(NakCode::RemoteAccessError),
            "NAK: remote access error",
        ),
        (
            Syndrome::Nak(NakCode::RemoteOperationalError),
            "NAK: remote operational error",
        ),
        (
            Syndrome::Nak(NakCode::InvalidRdRequest),
            "NAK: invalid RD request",
        ),
        (
            Syndrome::RnrNak(RnrTimer::from_code(14)),
            "RNR NAK, 1.28 ms",
        ),
        (
            Syndrome::Ack(CreditCount::for_credits(64)),
            "ACK with 64 credits",
        ),
    ] {
        let mut s = example(Opcode::RcAcknowledge, Ip::V4, 0x200, 0);
        if let Some(aeth) = s.repr.ext.aeth.as_mut() {
            aeth.syndrome = syndrome;
        }
        s.name = format!("RC_ACKNOWLEDGE over IPv4, {what}");
        frames.push(s);
    }
    let mut tagged = example(Opcode::RcWriteOnly, Ip::V4, 0x300, 64);
    tagged.repr.eth.vlan = Some(VlanTag {
        pcp: 3,
        dei: false,
        vid: 100,
    });
    tagged.name = "RC_RDMA_WRITE_ONLY over IPv4 in VLAN 100, priority 3".into();
    frames.push(tagged);
    let mut marked = example(Opcode::RcSendOnly, Ip::V4, 0x301, 8);
    if let IpRepr::V4 { ecn, .. } = &mut marked.repr.ip {
        *ecn = 3;
    }
    marked.repr.bth.fecn = true;
    marked.name = "RC_SEND_ONLY over IPv4, ECN CE (congestion experienced) and FECN".into();
    frames.push(marked);
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_parse_back() {
        for s in capture() {
            let frame = s.frame();
            let parsed = crate::frame::parse(&frame).unwrap_or_else(|e| panic!("{}: {e}", s.name));
            assert_eq!(parsed.repr, s.repr, "{}", s.name);
            assert_eq!(parsed.payload(), &s.payload[..], "{}", s.name);
        }
    }

    #[test]
    fn every_opcode_and_pad_count_is_covered() {
        let samples = every_opcode(Ip::V4);
        assert_eq!(samples.len(), TABLE.len());
        let pads: std::collections::BTreeSet<usize> = samples
            .iter()
            .map(|s| crate::frame::pad_for(s.payload.len()))
            .collect();
        assert_eq!(pads.len(), 4);
    }
}
