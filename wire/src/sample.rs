//! Example frames for every opcode: the shipped sample capture, the docs and the independent
//! checks are made from these. Two hosts, A (198.18.0.1, QP 0x11) and B (198.18.0.2, QP 0x12);
//! requests go from A to B and responses come back.

use crate::aeth::{AethRepr, CreditCount, NakCode, RnrTimer, Syndrome};
use crate::atomic::{AtomicAckEthRepr, AtomicEthRepr};
use crate::deth::DethRepr;
use crate::feth::{FethRepr, FlushLevel, FlushPlacement};
use crate::frame::{EthRepr, ExtRepr, FrameRepr, IpRepr, UdpChecksum, UdpRepr};
use crate::opcode::{Headers, Operation, TABLE};
use crate::reth::RethRepr;
use crate::{BthRepr, EthernetAddress, Ipv4Address, Ipv6Address, Opcode, VlanTag, cm, mad};

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
/// bytes if the opcode allows one (an ATOMIC WRITE's is always 8).
pub fn example(opcode: Opcode, version: Ip, psn: u32, payload_len: usize) -> Sample {
    let info = opcode.info();
    let payload_len = if info.operation == Operation::AtomicWrite {
        8
    } else {
        payload_len
    };
    let from_a = !info.operation.is_response();
    let (src_mac, dst_mac, dest_qp) = if from_a {
        (MAC_A, MAC_B, QP_B)
    } else {
        (MAC_B, MAC_A, QP_A)
    };
    let h = info.headers;
    let has = |x| h.contains(x);
    let ext = ExtRepr {
        xrceth: has(Headers::XRCETH).then_some(0x00_0042),
        deth: has(Headers::DETH).then_some(DethRepr {
            qkey: 0x1111_1111,
            src_qp: QP_A,
        }),
        feth: has(Headers::FETH).then_some(FethRepr {
            placement: FlushPlacement::GLOBAL,
            level: FlushLevel::Range,
        }),
        reth: has(Headers::RETH).then_some(RethRepr {
            va: VA,
            rkey: RKEY,
            dma_len: if matches!(
                info.operation,
                Operation::RdmaReadRequest | Operation::Flush
            ) {
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
                && matches!(info.transport, crate::Transport::Rc | crate::Transport::Xrc),
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
/// an RNR NAK, a VLAN-tagged frame, a frame with congestion marks, and a CM conversation.
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
    frames.extend(cm_conversation());
    frames
}

/// The port rdma_cm programs such as rping listen on by default.
const RPING_PORT: u16 = 7174;

/// A CM MAD from A (or B) to the other's QP1, over IPv4: a UD SEND_ONLY with the GSI's Q_Key.
fn mad(from_a: bool, psn: u32, what: &str, message: cm::CmMessage) -> Sample {
    let mut s = example(Opcode::UdSendOnly, Ip::V4, psn, 0);
    s.repr.ip = ip(Ip::V4, from_a);
    if !from_a {
        s.repr.eth = EthRepr {
            dst: MAC_A,
            src: MAC_B,
            vlan: None,
        };
    }
    s.repr.bth.dest_qp = mad::GSI_QPN;
    s.repr.bth.solicited = false;
    s.repr.ext.deth = Some(DethRepr {
        qkey: mad::GSI_QKEY,
        src_qp: mad::GSI_QPN,
    });
    let m = cm::CmMad {
        transaction_id: 0x0000_0001_2345_6780 | u64::from(!from_a),
        message,
    };
    s.payload = vec![0; mad::MAD_LEN];
    m.emit(&mut s.payload).expect("a valid MAD");
    s.name = format!("CM {} over IPv4 to QP1: {what}", m.message.name());
    s
}

/// An rdma_cm connection to port 7174 (rping's) set up and torn down (REQ, REP, RTU, DREQ,
/// DREP), a REQ for a port nobody listens on and its REJ, and a UD service resolved by SIDR.
pub fn cm_conversation() -> Vec<Sample> {
    let a4 = core::net::IpAddr::V4(core::net::Ipv4Addr::new(198, 18, 0, 1));
    let b4 = core::net::IpAddr::V4(core::net::Ipv4Addr::new(198, 18, 0, 2));
    let mapped = |ip: core::net::IpAddr| match ip {
        core::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        core::net::IpAddr::V6(v6) => v6.octets(),
    };
    let mut private = [0u8; cm::CmaHeader::LEN];
    cm::CmaHeader {
        src_port: 49152,
        src: a4,
        dst: b4,
    }
    .emit(&mut private)
    .expect("one family");
    let path = cm::CmPath {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: mapped(a4),
        remote_gid: mapped(b4),
        flow_label: 0,
        packet_rate: 3,
        traffic_class: 0,
        hop_limit: 64,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: 14,
    };
    let req = |service_id| cm::Req {
        local_comm_id: 0x0a0b_0c01,
        service_id,
        local_ca_guid: 0x0200_00ff_fe00_0001,
        local_qkey: 0,
        local_qpn: QP_A,
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: 20,
        transport: 0,
        end_to_end_flow_control: false,
        starting_psn: 0x00_1234,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport: 0,
        primary_path: path,
        alternate_path: cm::CmPath::default(),
        private_data: &private,
    };
    let ids = |from_a: bool| {
        let (a, b) = (0x0a0b_0c01, 0x0d0e_0f02);
        if from_a { (a, b) } else { (b, a) }
    };
    let (a, b) = (ids(true), ids(false));
    let service = cm::ip_service_id(cm::port_space::TCP, RPING_PORT);
    let udp_service = cm::ip_service_id(cm::port_space::UDP, RPING_PORT);
    vec![
        mad(
            true,
            0x10,
            "A asks for B's port 7174",
            cm::CmMessage::Req(req(service)),
        ),
        mad(
            false,
            0x20,
            "B accepts, with its QP",
            cm::CmMessage::Rep(cm::Rep {
                local_comm_id: b.0,
                remote_comm_id: b.1,
                local_qkey: 0,
                local_qpn: QP_B,
                starting_psn: 0x00_5678,
                responder_resources: 1,
                initiator_depth: 1,
                target_ack_delay: 15,
                failover_accepted: 0,
                end_to_end_flow_control: false,
                rnr_retry_count: 7,
                srq: false,
                local_ca_guid: 0x0200_00ff_fe00_0002,
                private_data: &[],
            }),
        ),
        mad(
            true,
            0x11,
            "A's QP is ready",
            cm::CmMessage::Rtu(cm::Ids {
                local_comm_id: a.0,
                remote_comm_id: a.1,
                private_data: &[],
            }),
        ),
        mad(
            true,
            0x12,
            "A disconnects",
            cm::CmMessage::Dreq(cm::Dreq {
                local_comm_id: a.0,
                remote_comm_id: a.1,
                remote_qpn: QP_B,
                private_data: &[],
            }),
        ),
        mad(
            false,
            0x21,
            "B agrees",
            cm::CmMessage::Drep(cm::Ids {
                local_comm_id: b.0,
                remote_comm_id: b.1,
                private_data: &[],
            }),
        ),
        mad(
            true,
            0x13,
            "A asks for port 7175, where nobody listens",
            cm::CmMessage::Req(req(cm::ip_service_id(cm::port_space::TCP, RPING_PORT + 1))),
        ),
        mad(
            false,
            0x22,
            "B refuses: invalid service ID",
            cm::CmMessage::Rej(cm::Rej {
                local_comm_id: 0,
                remote_comm_id: a.0,
                message_rejected: cm::about::REQ,
                reject_info_len: 0,
                reason: cm::rej_reason::INVALID_SERVICE_ID,
                ari: &[],
                private_data: &[],
            }),
        ),
        mad(
            true,
            0x14,
            "A asks which UD QP serves UDP port 7174",
            cm::CmMessage::SidrReq(cm::SidrReq {
                request_id: 0x0a0b_0c03,
                pkey: 0xffff,
                service_id: udp_service,
                private_data: &private,
            }),
        ),
        mad(
            false,
            0x23,
            "B's UD QP, with its Q_Key",
            cm::CmMessage::SidrRep(cm::SidrRep {
                request_id: 0x0a0b_0c03,
                status: 0,
                additional_info_len: 0,
                qpn: QP_B,
                service_id: udp_service,
                qkey: 0x0100_1c06,
                class_port_info: &[],
                private_data: &[],
            }),
        ),
    ]
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
