//! Whole RoCEv2 frames: `Ethernet [802.1Q] / IPv4|IPv6 / UDP 4791 / BTH / extension headers /
//! payload / pad / ICRC`.
//!
//! [`FrameRepr::emit`] writes a frame into the caller's buffer; [`parse`] turns a frame into a
//! [`ParsedFrame`] that borrows its payload. Neither allocates. The Ethernet, IP and UDP headers
//! are read and written with `smoltcp::wire`.
//!
//! The builder does not pad frames to Ethernet's 60-byte minimum (the NIC does, as for any
//! frame); the parser ignores bytes after the IP packet, which is where such padding goes.

use crate::bth::{Bth, BthRepr};
use crate::icrc::{self, ICRC_LEN};
use crate::opcode::Headers;
use crate::vlan::{self, VlanTag};
use crate::{Error, ROCEV2_UDP_PORT, Result};
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, Ipv6Packet, UdpPacket,
};

mod ext;
mod outer;

pub use ext::ExtRepr;
pub use outer::{EthRepr, IpRepr, UdpChecksum, UdpRepr};
use outer::{parse_ipv4, parse_ipv6};

const ETH_LEN: usize = 14;
const VLAN_LEN: usize = 4;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const PROTO_UDP: u8 = 17;

/// Where each part of a frame starts, as byte offsets from the start of the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    /// The IP header (after Ethernet and any 802.1Q tag).
    pub ip: usize,
    /// The UDP header.
    pub udp: usize,
    /// The BTH.
    pub bth: usize,
    /// The first extension header.
    pub ext: usize,
    /// The payload.
    pub payload: usize,
    /// The pad bytes.
    pub pad: usize,
    /// The ICRC.
    pub icrc: usize,
    /// The end of the IP packet; bytes after it are Ethernet padding.
    pub end: usize,
}

impl Layout {
    fn new(vlan: bool, ip_len: usize, headers: Headers, payload_len: usize, pad: usize) -> Layout {
        let ip = ETH_LEN + if vlan { VLAN_LEN } else { 0 };
        let udp = ip + ip_len;
        let bth = udp + UDP_LEN;
        let ext = bth + BthRepr::LEN;
        let payload = ext + headers.len();
        let pad_at = payload + payload_len;
        let icrc = pad_at + pad;
        Layout {
            ip,
            udp,
            bth,
            ext,
            payload,
            pad: pad_at,
            icrc,
            end: icrc + ICRC_LEN,
        }
    }
}

/// Every header of a RoCEv2 frame, as plain values. With a payload, this is a whole frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameRepr {
    /// Ethernet and 802.1Q.
    pub eth: EthRepr,
    /// IPv4 or IPv6.
    pub ip: IpRepr,
    /// UDP.
    pub udp: UdpRepr,
    /// The BTH.
    pub bth: BthRepr,
    /// The extension headers the opcode requires.
    pub ext: ExtRepr,
}

/// The pad that makes `payload_len` a multiple of 4 (IBA 9.2: PadCnt).
pub const fn pad_for(payload_len: usize) -> usize {
    (4 - payload_len % 4) % 4
}

impl FrameRepr {
    fn layout(&self, payload_len: usize) -> Layout {
        let headers = self.bth.opcode.info().headers;
        let ip_len = self.ip.header_len();
        Layout::new(
            self.eth.vlan.is_some(),
            ip_len,
            headers,
            payload_len,
            pad_for(payload_len),
        )
    }

    /// The length of the frame this repr makes with a payload of `payload_len` bytes.
    pub fn frame_len(&self, payload_len: usize) -> usize {
        self.layout(payload_len).end
    }

    /// Where the payload starts in the frame.
    pub fn payload_offset(&self) -> usize {
        self.layout(0).payload
    }

    /// Writes the frame with `payload` into the start of `buf` and returns its length. Fails if
    /// the extension headers do not match the opcode, if the opcode allows no payload and one is
    /// given, if the payload does not fit in an IP packet, or if `buf` is too small; after a
    /// failure, `buf` holds nothing meaningful.
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize> {
        let at = self.payload_offset();
        buf.get_mut(at..at + payload.len())
            .ok_or(Error::BufferTooSmall)?
            .copy_from_slice(payload);
        self.emit_in_place(payload.len(), buf)
    }

    /// Writes the headers, pad and ICRC around a payload of `payload_len` bytes that the caller
    /// has already put at [`payload_offset`](Self::payload_offset) in `buf`, so a sender copies
    /// its data once, straight into the frame. Returns the frame's length; fails as
    /// [`emit`](Self::emit) does.
    pub fn emit_in_place(&self, payload_len: usize, buf: &mut [u8]) -> Result<usize> {
        self.emit_in_place_with(payload_len, buf, Icrc::Compute)
    }

    /// [`emit_in_place`](Self::emit_in_place), with the ICRC computed or left zero: a frame
    /// that reaches no wire and no capture (same-host delivery) needs none.
    pub fn emit_in_place_with(
        &self,
        payload_len: usize,
        buf: &mut [u8],
        icrc: Icrc,
    ) -> Result<usize> {
        let info = self.bth.opcode.info();
        if self.ext.headers() != info.headers.difference(Headers::CNP_RESERVED) {
            return Err(Error::HeadersMismatch);
        }
        if !info.allows_payload() && payload_len != 0 {
            return Err(Error::PayloadNotAllowed);
        }
        let l = self.layout(payload_len);
        let udp_len = l.end - l.udp;
        let ip_payload_max = match self.ip {
            IpRepr::V4 { .. } => u16::MAX as usize - IPV4_LEN,
            IpRepr::V6 { .. } => u16::MAX as usize,
        };
        if udp_len > ip_payload_max {
            return Err(Error::PayloadTooLong);
        }
        let buf = buf.get_mut(..l.end).ok_or(Error::BufferTooSmall)?;

        let mut eth = EthernetFrame::new_unchecked(&mut *buf);
        eth.set_dst_addr(self.eth.dst);
        eth.set_src_addr(self.eth.src);
        let ip_type = match self.ip {
            IpRepr::V4 { .. } => ETHERTYPE_IPV4,
            IpRepr::V6 { .. } => ETHERTYPE_IPV6,
        };
        match self.eth.vlan {
            None => eth.set_ethertype(EthernetProtocol::from(ip_type)),
            Some(tag) => {
                eth.set_ethertype(EthernetProtocol::from(vlan::TPID));
                buf[ETH_LEN..ETH_LEN + 2].copy_from_slice(&tag.tci().to_be_bytes());
                buf[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&ip_type.to_be_bytes());
            }
        }

        match self.ip {
            IpRepr::V4 {
                src,
                dst,
                dscp,
                ecn,
                ttl,
            } => {
                let mut ip = Ipv4Packet::new_unchecked(&mut buf[l.ip..]);
                ip.set_version(4);
                ip.set_header_len(IPV4_LEN as u8);
                ip.set_dscp(dscp);
                ip.set_ecn(ecn);
                ip.set_total_len((l.end - l.ip) as u16);
                ip.set_ident(0);
                ip.clear_flags();
                ip.set_dont_frag(true);
                ip.set_frag_offset(0);
                ip.set_hop_limit(ttl);
                ip.set_next_header(IpProtocol::Udp);
                ip.set_src_addr(src);
                ip.set_dst_addr(dst);
                ip.fill_checksum();
            }
            IpRepr::V6 {
                src,
                dst,
                dscp,
                ecn,
                flow_label,
                hop_limit,
            } => {
                let mut ip = Ipv6Packet::new_unchecked(&mut buf[l.ip..]);
                ip.set_version(6);
                ip.set_traffic_class((dscp << 2) | (ecn & 0x3));
                ip.set_flow_label(flow_label & 0xf_ffff);
                ip.set_payload_len(udp_len as u16);
                ip.set_next_header(IpProtocol::Udp);
                ip.set_hop_limit(hop_limit);
                ip.set_src_addr(src);
                ip.set_dst_addr(dst);
            }
        }

        let mut udp = UdpPacket::new_unchecked(&mut buf[l.udp..]);
        udp.set_src_port(self.udp.src_port);
        udp.set_dst_port(ROCEV2_UDP_PORT);
        udp.set_len(udp_len as u16);
        udp.set_checksum(0);

        let pad = l.icrc - l.pad;
        self.bth
            .emit(&mut Bth::new_unchecked(&mut buf[l.bth..]), pad as u8);
        self.ext.emit(info.headers, &mut buf[l.ext..l.payload]);
        buf[l.pad..l.icrc].fill(0);
        let crc = match icrc {
            Icrc::Compute => icrc::compute_in_place(&mut buf[l.ip..l.icrc])?,
            Icrc::Skip => 0,
        };
        buf[l.icrc..l.end].copy_from_slice(&icrc::to_bytes(crc));

        // Last: the UDP checksum covers the ICRC (and the ICRC masks the UDP checksum).
        if self.udp.checksum == UdpChecksum::Computed {
            let (src, dst) = self.ip.addrs();
            UdpPacket::new_unchecked(&mut buf[l.udp..]).fill_checksum(&src, &dst);
        }
        Ok(l.end)
    }
}

/// Whether a frame built gets its ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icrc {
    /// Computed: the frame may reach a wire or a capture.
    Compute,
    /// Left zero: the frame goes only to a receiver that trusts its builder.
    Skip,
}

/// A parsed frame: its headers as values, where each part is, and the frame it borrows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedFrame<'a> {
    /// The headers.
    pub repr: FrameRepr,
    /// Where each part starts.
    pub layout: Layout,
    bytes: &'a [u8],
}

impl<'a> ParsedFrame<'a> {
    /// The payload, without pad.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[self.layout.payload..self.layout.pad]
    }
    /// The BTH pad count.
    #[inline]
    pub fn pad_count(&self) -> u8 {
        (self.layout.icrc - self.layout.pad) as u8
    }
    /// The ICRC the frame carries.
    #[inline]
    pub fn icrc(&self) -> u32 {
        carried_icrc(&self.bytes[self.layout.icrc..self.layout.end])
    }
    /// The ICRC computed over the frame.
    pub fn computed_icrc(&self) -> u32 {
        // The layout was checked by the parser, so the IP, UDP and BTH headers are present.
        icrc::compute(self.l3()).unwrap_or(0)
    }
    /// The bytes the ICRC covers: from the IP header to the end of the pad.
    #[inline]
    pub fn l3(&self) -> &'a [u8] {
        &self.bytes[self.layout.ip..self.layout.icrc]
    }
    /// The whole frame, including any Ethernet padding.
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Its Ethernet, IP and UDP headers, as [`parse_outer`] gives them.
    pub fn outer(&self) -> Outer {
        Outer {
            eth: self.repr.eth,
            ip: self.repr.ip,
            udp: self.repr.udp,
            ip_at: self.layout.ip,
            udp_at: self.layout.udp,
            end: self.layout.end,
        }
    }
    /// Fails with [`Error::BadIcrc`] unless the carried ICRC is the computed one. Always
    /// succeeds when built with `--cfg fuzzing`.
    pub fn verify_icrc(&self) -> Result<()> {
        let l = &self.layout;
        check_icrc(&self.bytes[l.ip..l.icrc], &self.bytes[l.icrc..l.end])
    }
}

fn carried_icrc(icrc: &[u8]) -> u32 {
    icrc::read(&[icrc[0], icrc[1], icrc[2], icrc[3]])
}

/// Compares the ICRC computed over `l3` with the carried one (skipped by fuzzing builds).
fn check_icrc(l3: &[u8], carried: &[u8]) -> Result<()> {
    let (computed, received) = (icrc::compute(l3)?, carried_icrc(carried));
    if computed == received || cfg!(fuzzing) {
        Ok(())
    } else {
        Err(Error::BadIcrc { computed, received })
    }
}

/// Writes the ICRC of a frame built with [`Icrc::Skip`] (or any frame: its ICRC is computed
/// anew), so that it may reach a wire or a capture after all.
pub fn seal_icrc(frame: &mut [u8]) -> Result<()> {
    let layout = parse_unverified(frame)?.layout;
    let icrc = icrc::compute(&frame[layout.ip..layout.icrc])?;
    frame[layout.icrc..layout.end].copy_from_slice(&icrc::to_bytes(icrc));
    Ok(())
}

/// Parses and verifies a whole frame. Every malformed input fails with its own [`Error`];
/// nothing panics.
pub fn parse(frame: &[u8]) -> Result<ParsedFrame<'_>> {
    parse_with(frame, true)
}

/// Parses a frame and checks its structure, but not its ICRC: the dissector uses this to show a
/// frame whose ICRC is wrong. Receive paths use [`parse`].
pub fn parse_unverified(frame: &[u8]) -> Result<ParsedFrame<'_>> {
    parse_with(frame, false)
}

/// The BTH destination QP of a frame, read past its outer headers only: a device whose QPs
/// are spread over several engines picks the engine by it before any of them parses the frame.
pub fn dest_qp(frame: &[u8]) -> Result<u32> {
    let outer = parse_outer(frame)?;
    let bth = Bth::new_checked(&frame[outer.udp_at + UDP_LEN..outer.end])?;
    Ok(bth.dest_qp())
}

/// The Ethernet, IP and UDP headers of a RoCEv2 frame, and where they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outer {
    /// Ethernet and 802.1Q.
    pub eth: EthRepr,
    /// IPv4 or IPv6.
    pub ip: IpRepr,
    /// UDP.
    pub udp: UdpRepr,
    /// Where the IP header starts.
    pub ip_at: usize,
    /// Where the UDP header starts.
    pub udp_at: usize,
    /// The end of the IP packet; bytes after it are Ethernet padding.
    pub end: usize,
}

/// Parses the headers up to UDP (a frame to port 4791), not the transport: the dissector shows
/// these when what follows is malformed. [`parse`] starts with it.
#[inline(always)]
pub fn parse_outer(frame: &[u8]) -> Result<Outer> {
    let eth = EthernetFrame::new_checked(frame).map_err(|_| Error::Truncated)?;
    let (vlan, ethertype, ip_at) = match u16::from(eth.ethertype()) {
        vlan::TPID => {
            let tag = frame
                .get(ETH_LEN..ETH_LEN + VLAN_LEN)
                .ok_or(Error::Truncated)?;
            let tci = u16::from_be_bytes([tag[0], tag[1]]);
            (
                Some(VlanTag::from_tci(tci)),
                u16::from_be_bytes([tag[2], tag[3]]),
                ETH_LEN + VLAN_LEN,
            )
        }
        t => (None, t, ETH_LEN),
    };
    let eth_repr = EthRepr {
        dst: eth.dst_addr(),
        src: eth.src_addr(),
        vlan,
    };
    let rest = &frame[ip_at..];
    let (ip, ip_len, ip_end) = match ethertype {
        ETHERTYPE_IPV4 => parse_ipv4(rest)?,
        ETHERTYPE_IPV6 => parse_ipv6(rest)?,
        other => return Err(Error::NotIp(other)),
    };
    let l4 = &rest[ip_len..ip_end];
    if l4.len() < UDP_LEN {
        return Err(Error::Truncated);
    }
    let udp = UdpPacket::new_unchecked(l4);
    if usize::from(udp.len()) != l4.len() {
        return Err(Error::BadUdpLength);
    }
    if udp.dst_port() != ROCEV2_UDP_PORT {
        return Err(Error::NotRoce(udp.dst_port()));
    }
    let checksum = if udp.checksum() == 0 {
        UdpChecksum::Zero
    } else {
        UdpChecksum::Computed
    };
    Ok(Outer {
        eth: eth_repr,
        ip,
        udp: UdpRepr {
            src_port: udp.src_port(),
            checksum,
        },
        ip_at,
        udp_at: ip_at + ip_len,
        end: ip_at + ip_end,
    })
}

/// The parser. `verify` checks the ICRC before the result is built, so [`parse`] writes its
/// result once instead of copying it out of [`parse_unverified`].
#[inline(always)]
fn parse_with(frame: &[u8], verify: bool) -> Result<ParsedFrame<'_>> {
    let outer = parse_outer(frame)?;
    let (ip_at, ip_len) = (outer.ip_at, outer.udp_at - outer.ip_at);
    let vlan = outer.eth.vlan;
    let transport = &frame[outer.udp_at + UDP_LEN..outer.end];
    let bth = Bth::new_checked(transport)?;
    let bth_repr = BthRepr::parse(&bth)?;
    let info = bth_repr.opcode.info();
    let ext_len = info.headers.len();
    let min = BthRepr::LEN + ext_len + ICRC_LEN;
    if transport.len() < min {
        return Err(Error::Truncated);
    }
    let body_len = transport.len() - min; // payload and pad
    let pad = usize::from(bth.pad_count());
    if !info.allows_payload() && body_len != 0 {
        return Err(Error::PayloadNotAllowed);
    }
    // IBA 9.2: the pad makes the payload a multiple of 4, and no packet is shorter than its pad.
    if !body_len.is_multiple_of(4) || pad > body_len {
        return Err(Error::PadInconsistent);
    }
    let ext_at = ip_at + ip_len + UDP_LEN + BthRepr::LEN;
    let ext = ExtRepr::parse(info.headers, &frame[ext_at..ext_at + ext_len])?;
    let layout = Layout::new(vlan.is_some(), ip_len, info.headers, body_len - pad, pad);
    debug_assert_eq!(layout.end, outer.end);
    if verify {
        check_icrc(
            &frame[layout.ip..layout.icrc],
            &frame[layout.icrc..layout.end],
        )?;
    }
    Ok(ParsedFrame {
        repr: FrameRepr {
            eth: outer.eth,
            ip: outer.ip,
            udp: outer.udp,
            bth: bth_repr,
            ext,
        },
        layout,
        bytes: frame,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Opcode, RnrTimer, Syndrome};
    use smoltcp::wire::{EthernetAddress, Ipv4Address, Ipv6Address};

    /// RC SEND_ONLY of the 17 bytes "RoCEv2 on a plain" (pad 3) from 198.18.0.1 to
    /// 198.18.0.2, DSCP 26 ECT(0). Its ICRC (04 c0 a0 e0) agrees with scapy.contrib.roce's.
    static SEND_ONLY_V4: [u8; 78] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08,
        0x00, // Eth
        0x45, 0x6a, 0x00, 0x40, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xae, 0x1b, 0xc6, 0x12, 0x00,
        0x01, 0xc6, 0x12, 0x00, 0x02, // IPv4
        0xf1, 0xf6, 0x12, 0xb7, 0x00, 0x2c, 0x00, 0x00, // UDP
        0x04, 0xf0, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x00, 0x01, 0x04, // BTH
        b'R', b'o', b'C', b'E', b'v', b'2', b' ', b'o', b'n', b' ', b'a', b' ', b'p', b'l', b'a',
        b'i', b'n', 0x00, 0x00, 0x00, // payload and pad
        0x04, 0xc0, 0xa0, 0xe0, // ICRC
    ];

    fn send_only_repr() -> FrameRepr {
        FrameRepr {
            eth: EthRepr {
                dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
                src: EthernetAddress([2, 0, 0, 0, 0, 1]),
                vlan: None,
            },
            ip: IpRepr::V4 {
                src: Ipv4Address::new(198, 18, 0, 1),
                dst: Ipv4Address::new(198, 18, 0, 2),
                dscp: 26,
                ecn: 2,
                ttl: 64,
            },
            udp: UdpRepr {
                src_port: 0xf1f6,
                checksum: UdpChecksum::Zero,
            },
            bth: BthRepr {
                opcode: Opcode::RcSendOnly,
                solicited: true,
                mig_req: true,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: 0x12,
                ack_req: true,
                psn: 0x104,
            },
            ext: ExtRepr::default(),
        }
    }

    #[test]
    fn the_destination_qp_is_read_past_the_outer_headers_alone() {
        assert_eq!(dest_qp(&SEND_ONLY_V4), Ok(0x12));
        // Nothing past the BTH is needed, nor checked.
        let mut broken = SEND_ONLY_V4;
        broken[74] ^= 0xff;
        assert_eq!(dest_qp(&broken), Ok(0x12));
        assert_eq!(dest_qp(&SEND_ONLY_V4[..40]), Err(Error::BadIpLength));
    }

    #[test]
    fn emit_fixed_frame() {
        let mut buf = [0u8; 128];
        let n = send_only_repr()
            .emit(b"RoCEv2 on a plain", &mut buf)
            .unwrap();
        assert_eq!(&buf[..n], &SEND_ONLY_V4[..]);
        assert_eq!(send_only_repr().frame_len(17), 78);
    }

    #[test]
    fn emit_in_place_around_a_placed_payload() {
        let mut buf = [0xeeu8; 128];
        let at = send_only_repr().payload_offset();
        assert_eq!(at, 54);
        buf[at..at + 17].copy_from_slice(b"RoCEv2 on a plain");
        let n = send_only_repr().emit_in_place(17, &mut buf).unwrap();
        assert_eq!(&buf[..n], &SEND_ONLY_V4[..]);
    }

    #[test]
    fn a_frame_built_without_its_icrc_is_sealed_to_the_bytes_built_with_it() {
        let mut buf = [0u8; 128];
        let at = send_only_repr().payload_offset();
        buf[at..at + 17].copy_from_slice(b"RoCEv2 on a plain");
        let n = send_only_repr()
            .emit_in_place_with(17, &mut buf, Icrc::Skip)
            .unwrap();
        assert!(matches!(parse(&buf[..n]), Err(Error::BadIcrc { .. })));
        seal_icrc(&mut buf[..n]).unwrap();
        assert_eq!(&buf[..n], &SEND_ONLY_V4[..]);
        // Not a frame: an error, nothing written.
        let mut short = [0u8; 20];
        assert!(seal_icrc(&mut short).is_err());
        assert_eq!(short, [0u8; 20]);
    }

    #[test]
    fn parse_fixed_frame() {
        let p = parse(&SEND_ONLY_V4).unwrap();
        assert_eq!(p.repr, send_only_repr());
        assert_eq!(p.payload(), b"RoCEv2 on a plain");
        assert_eq!(p.pad_count(), 3);
        assert_eq!(p.icrc(), 0xe0a0_c004);
        assert_eq!(p.layout.bth, 42);
        assert_eq!(p.layout.end, 78);
    }

    #[test]
    fn ethernet_padding_is_ignored() {
        let mut frame = SEND_ONLY_V4.to_vec();
        frame.extend_from_slice(&[0; 6]);
        assert_eq!(parse(&frame).unwrap().repr, send_only_repr());
    }

    #[test]
    fn vlan_and_ipv6_with_checksum() {
        let mut repr = send_only_repr();
        repr.eth.vlan = Some(VlanTag {
            pcp: 5,
            dei: false,
            vid: 42,
        });
        repr.ip = IpRepr::V6 {
            src: Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
            dscp: 46,
            ecn: 1,
            flow_label: 0xabcde,
            hop_limit: 3,
        };
        repr.udp.checksum = UdpChecksum::Computed;
        let mut buf = [0u8; 256];
        let n = repr.emit(b"hi", &mut buf).unwrap();
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0xa0, 0x2a, 0x86, 0xdd]);
        let p = parse(&buf[..n]).unwrap();
        assert_eq!(p.repr, repr);
        let udp = UdpPacket::new_unchecked(&buf[p.layout.udp..n]);
        let (src, dst) = repr.ip.addrs();
        assert!(udp.verify_checksum(&src, &dst));
    }

    /// Patches `frame` and re-seals the IPv4 header checksum and the ICRC, so that only the
    /// intended defect remains.
    fn patched(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut frame = SEND_ONLY_V4.to_vec();
        f(&mut frame);
        if frame.len() >= 34 {
            Ipv4Packet::new_unchecked(&mut frame[14..]).fill_checksum();
        }
        frame
    }

    #[test]
    fn every_malformation_has_its_own_error() {
        let cases: Vec<(&str, Vec<u8>, Error)> = vec![
            ("empty", vec![], Error::Truncated),
            (
                "short Ethernet",
                SEND_ONLY_V4[..13].to_vec(),
                Error::Truncated,
            ),
            (
                "short VLAN tag",
                patched(|f| {
                    f.truncate(16);
                    f[12..14].copy_from_slice(&[0x81, 0x00]);
                }),
                Error::Truncated,
            ),
            (
                "ARP",
                patched(|f| f[12..14].copy_from_slice(&[0x08, 0x06])),
                Error::NotIp(0x0806),
            ),
            ("short IPv4", SEND_ONLY_V4[..30].to_vec(), Error::Truncated),
            (
                "version 5",
                patched(|f| f[14] = 0x55),
                Error::BadIpVersion(5),
            ),
            ("options", patched(|f| f[14] = 0x46), Error::Ipv4Options),
            ("IHL 4", patched(|f| f[14] = 0x44), Error::BadIpLength),
            (
                "total length beyond frame",
                patched(|f| f[17] = 0x50),
                Error::BadIpLength,
            ),
            (
                "checksum",
                {
                    let mut f = SEND_ONLY_V4.to_vec();
                    f[24] ^= 1;
                    f
                },
                Error::BadIpChecksum,
            ),
            ("fragment", patched(|f| f[20] = 0x20), Error::IpFragment),
            ("TCP", patched(|f| f[23] = 6), Error::NotUdp(6)),
            ("UDP length", patched(|f| f[39] = 0x28), Error::BadUdpLength),
            ("not 4791", patched(|f| f[37] = 0xb8), Error::NotRoce(4792)),
            ("TVer 1", patched(|f| f[43] = 0xf1), Error::BadTver(1)),
            (
                "reserved opcode",
                patched(|f| f[42] = 0x15),
                Error::UnknownOpcode(0x15),
            ),
            (
                "ext header cut",
                patched(|f| f[42] = 0x13),
                Error::Truncated,
            ),
            (
                "payload on an ACK",
                patched(|f| f[42] = 0x11),
                Error::PayloadNotAllowed,
            ),
            (
                "unaligned",
                patched(|f| {
                    f.insert(60, 0);
                    f[17] += 1;
                    f[39] += 1;
                }),
                Error::PadInconsistent,
            ),
        ];
        for (what, frame, want) in cases {
            assert_eq!(parse(&frame).map(|p| p.repr), Err(want), "{what}");
        }
        // Pad larger than the payload: a zero-byte SEND_ONLY that claims 3 pad bytes.
        let mut buf = [0u8; 128];
        let n = send_only_repr().emit(&[], &mut buf).unwrap();
        buf[43] |= 0x30;
        assert_eq!(
            parse_unverified(&buf[..n]).map(|p| p.repr),
            Err(Error::PadInconsistent)
        );
        // A flipped payload bit: only the ICRC notices.
        let mut f = SEND_ONLY_V4;
        f[60] ^= 0x10;
        let computed = parse_unverified(&f).unwrap().computed_icrc();
        assert_eq!(
            parse(&f).map(|p| p.repr),
            Err(Error::BadIcrc {
                computed,
                received: 0xe0a0_c004
            })
        );
    }

    #[test]
    fn emit_refuses_inconsistent_input() {
        let mut buf = [0u8; 128];
        let mut r = send_only_repr();
        r.ext.immdt = Some(1);
        assert_eq!(r.emit(b"x", &mut buf), Err(Error::HeadersMismatch));
        let mut r = send_only_repr();
        r.bth.opcode = Opcode::RcAcknowledge;
        r.ext.aeth = Some(crate::AethRepr {
            syndrome: Syndrome::RnrNak(RnrTimer::from_code(1)),
            msn: 0,
        });
        assert_eq!(r.emit(b"x", &mut buf), Err(Error::PayloadNotAllowed));
        assert_eq!(r.emit(b"", &mut buf), Ok(62));
        assert_eq!(
            send_only_repr().emit(b"x", &mut buf[..60]),
            Err(Error::BufferTooSmall)
        );
        let big = vec![0u8; 65_536];
        let mut out = vec![0u8; 70_000];
        assert_eq!(
            send_only_repr().emit(&big, &mut out),
            Err(Error::PayloadTooLong)
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::aeth::{AethRepr, Syndrome};
    use crate::atomic::{AtomicAckEthRepr, AtomicEthRepr};
    use crate::deth::DethRepr;
    use crate::opcode::TABLE;
    use crate::reth::RethRepr;
    use proptest::prelude::*;
    use smoltcp::wire::{EthernetAddress, Ipv4Address, Ipv6Address};

    fn ip() -> impl Strategy<Value = IpRepr> {
        prop_oneof![
            (
                any::<[u8; 4]>(),
                any::<[u8; 4]>(),
                0..64u8,
                0..4u8,
                any::<u8>()
            )
                .prop_map(|(s, d, dscp, ecn, ttl)| IpRepr::V4 {
                    src: Ipv4Address::from(s),
                    dst: Ipv4Address::from(d),
                    dscp,
                    ecn,
                    ttl
                }),
            (
                any::<[u8; 16]>(),
                any::<[u8; 16]>(),
                0..64u8,
                0..4u8,
                0..0x10_0000u32,
                any::<u8>()
            )
                .prop_map(|(s, d, dscp, ecn, flow_label, hop_limit)| IpRepr::V6 {
                    src: Ipv6Address::from(s),
                    dst: Ipv6Address::from(d),
                    dscp,
                    ecn,
                    flow_label,
                    hop_limit
                }),
        ]
    }

    prop_compose! {
        fn bth()(row in 0..TABLE.len(), solicited: bool, mig_req: bool, pkey: u16, fecn: bool,
                 becn: bool, dest_qp in 0..0x100_0000u32, ack_req: bool, psn in 0..0x100_0000u32)
                 -> BthRepr {
            BthRepr { opcode: TABLE[row].opcode, solicited, mig_req, pkey, fecn, becn, dest_qp,
                      ack_req, psn }
        }
    }

    prop_compose! {
        /// A whole frame of any opcode, with exactly the extension headers it requires.
        fn frame()(bth in bth(), ip in ip(), dst: [u8; 6], src: [u8; 6],
                   vlan in proptest::option::of((0..8u8, any::<bool>(), 0..4096u16)),
                   src_port: u16, checksum: bool, words in any::<[u64; 4]>(),
                   keys in any::<[u32; 4]>(), syndrome: u8, len in 0..300usize, fill: u8)
                   -> (FrameRepr, Vec<u8>) {
            let h = bth.opcode.info().headers;
            let ext = ExtRepr {
                deth: h.contains(Headers::DETH)
                    .then_some(DethRepr { qkey: keys[0], src_qp: keys[1] & 0xff_ffff }),
                xrceth: h.contains(Headers::XRCETH).then_some(keys[1] & 0xff_ffff),
                feth: h.contains(Headers::FETH).then_some(crate::FethRepr {
                    placement: crate::FlushPlacement::from_bits_retain(syndrome & 0xf),
                    level: crate::FlushLevel::from_bits(syndrome >> 4) }),
                reth: h.contains(Headers::RETH)
                    .then_some(RethRepr { va: words[0], rkey: keys[2], dma_len: keys[3] }),
                atomic_eth: h.contains(Headers::ATOMIC_ETH).then_some(AtomicEthRepr {
                    va: words[0], rkey: keys[0], swap_add: words[1], compare: words[2] }),
                aeth: h.contains(Headers::AETH).then_some(AethRepr {
                    syndrome: Syndrome::from_byte(syndrome), msn: keys[1] & 0xff_ffff }),
                atomic_ack_eth: h.contains(Headers::ATOMIC_ACK_ETH)
                    .then_some(AtomicAckEthRepr { orig: words[3] }),
                immdt: h.contains(Headers::IMMDT).then_some(keys[2]),
                ieth: h.contains(Headers::IETH).then_some(keys[3]),
            };
            let payload = if bth.opcode.info().allows_payload() { vec![fill; len] } else { vec![] };
            let repr = FrameRepr {
                eth: EthRepr {
                    dst: EthernetAddress(dst),
                    src: EthernetAddress(src),
                    vlan: vlan.map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
                },
                ip,
                udp: UdpRepr {
                    src_port,
                    checksum: if checksum { UdpChecksum::Computed } else { UdpChecksum::Zero },
                },
                bth,
                ext,
            };
            (repr, payload)
        }
    }

    proptest! {
        #[test]
        fn parse_emit_round_trip((repr, payload) in frame()) {
            let mut buf = vec![0u8; repr.frame_len(payload.len())];
            let n = repr.emit(&payload, &mut buf).unwrap();
            prop_assert_eq!(n, buf.len());
            // Every emitted frame verifies, and reads back as what was written.
            let parsed = parse(&buf).unwrap();
            prop_assert_eq!(parsed.repr, repr);
            prop_assert_eq!(parsed.payload(), &payload[..]);
            prop_assert_eq!(usize::from(parsed.pad_count()), pad_for(payload.len()));
            prop_assert_eq!(parsed.icrc(), icrc::reference(parsed.l3()));
        }

        #[test]
        fn any_bit_flip_outside_masked_fields_is_caught((repr, payload) in frame(), bit in 0..8u32,
                                                         at in any::<prop::sample::Index>()) {
            let mut buf = vec![0u8; repr.frame_len(payload.len())];
            repr.emit(&payload, &mut buf).unwrap();
            let l = parse(&buf).unwrap().layout;
            // Anything from the BTH to the pad but the masked FECN/BECN byte.
            let mut i = l.bth + at.index(l.icrc - l.bth - 1);
            if i >= l.bth + 4 {
                i += 1;
            }
            buf[i] ^= 1 << bit;
            prop_assert!(parse(&buf).is_err());
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&bytes);
        }
    }
}
