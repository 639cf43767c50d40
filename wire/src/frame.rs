//! Whole RoCEv2 frames: `Ethernet [802.1Q] / IPv4|IPv6 / UDP 4791 / BTH / extension headers /
//! payload / pad / ICRC`.
//!
//! [`FrameRepr::emit`] writes a frame into the caller's buffer; [`parse`] turns a frame into a
//! [`ParsedFrame`] that borrows its payload. Neither allocates. The Ethernet, IP and UDP headers
//! are read and written with `smoltcp::wire`.
//!
//! The builder does not pad frames to Ethernet's 60-byte minimum (the NIC does, as for any
//! frame); the parser ignores bytes after the IP packet, which is where such padding goes.

use crate::aeth::{Aeth, AethRepr};
use crate::atomic::{AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr};
use crate::bth::{Bth, BthRepr};
use crate::deth::{Deth, DethRepr};
use crate::icrc::{self, ICRC_LEN};
use crate::imm::{Ieth, ImmDt};
use crate::opcode::Headers;
use crate::reth::{Reth, RethRepr};
use crate::vlan::{self, VlanTag};
use crate::{Error, ROCEV2_UDP_PORT, Result};
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, IpAddress, IpProtocol, Ipv4Address,
    Ipv4Packet, Ipv6Address, Ipv6Packet, UdpPacket,
};

const ETH_LEN: usize = 14;
const VLAN_LEN: usize = 4;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const PROTO_UDP: u8 = 17;

/// The Ethernet header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthRepr {
    /// Destination MAC (the next hop's).
    pub dst: EthernetAddress,
    /// Source MAC.
    pub src: EthernetAddress,
    /// An optional 802.1Q tag, for VLANs and the PFC priority.
    pub vlan: Option<VlanTag>,
}

/// The IP header's fields. DSCP and ECN are the same 8 bits in both versions (the IPv4 Type of
/// Service and the IPv6 Traffic Class).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4, 20 bytes, Don't Fragment set.
    V4 {
        /// Source address.
        src: Ipv4Address,
        /// Destination address.
        dst: Ipv4Address,
        /// Differentiated Services Code Point (6 bits).
        dscp: u8,
        /// Explicit Congestion Notification (2 bits): 0 Not-ECT, 1/2 ECT, 3 CE.
        ecn: u8,
        /// Time to live.
        ttl: u8,
    },
    /// IPv6, 40 bytes, no extension headers.
    V6 {
        /// Source address.
        src: Ipv6Address,
        /// Destination address.
        dst: Ipv6Address,
        /// Differentiated Services Code Point (6 bits).
        dscp: u8,
        /// Explicit Congestion Notification (2 bits).
        ecn: u8,
        /// Flow label (20 bits).
        flow_label: u32,
        /// Hop limit.
        hop_limit: u8,
    },
}

impl IpRepr {
    /// The header's length.
    pub const fn header_len(&self) -> usize {
        match self {
            IpRepr::V4 { .. } => IPV4_LEN,
            IpRepr::V6 { .. } => IPV6_LEN,
        }
    }
    /// The DSCP.
    pub const fn dscp(&self) -> u8 {
        match *self {
            IpRepr::V4 { dscp, .. } | IpRepr::V6 { dscp, .. } => dscp,
        }
    }
    /// The ECN bits.
    pub const fn ecn(&self) -> u8 {
        match *self {
            IpRepr::V4 { ecn, .. } | IpRepr::V6 { ecn, .. } => ecn,
        }
    }
    fn addrs(&self) -> (IpAddress, IpAddress) {
        match *self {
            IpRepr::V4 { src, dst, .. } => (src.into(), dst.into()),
            IpRepr::V6 { src, dst, .. } => (src.into(), dst.into()),
        }
    }
}

/// Whether the UDP checksum is sent. The ICRC already covers the transport, so RoCEv2 senders
/// usually leave it zero over IPv4; IPv6 requires one (RFC 8200 8.1), and tools flag its absence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UdpChecksum {
    /// Sent as zero (no checksum).
    Zero,
    /// Computed over the pseudo-header and the datagram, ICRC included.
    Computed,
}

/// The UDP header's fields. The destination port is always 4791.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port: RoCEv2 puts per-flow entropy here for ECMP (Annex A17.5.1.1).
    pub src_port: u16,
    /// Whether a checksum is sent. The parser does not verify it (the ICRC protects the
    /// transport, and virtual NICs with checksum offload hand frames over with it unfinished).
    pub checksum: UdpChecksum,
}

/// The extension headers after the BTH. Exactly those the opcode requires must be present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtRepr {
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// RETH (RDMA WRITE first/only, READ request).
    pub reth: Option<RethRepr>,
    /// AtomicETH (COMPARE_SWAP, FETCH_ADD).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (ACK, READ response first/last/only, ATOMIC ACK).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH (ATOMIC ACK).
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data.
    pub immdt: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
}

impl ExtRepr {
    /// The set of headers present (the CNP's reserved bytes have no fields, so never included).
    pub fn headers(&self) -> Headers {
        let mut h = Headers::NONE;
        for (present, header) in [
            (self.deth.is_some(), Headers::DETH),
            (self.reth.is_some(), Headers::RETH),
            (self.atomic_eth.is_some(), Headers::ATOMIC_ETH),
            (self.aeth.is_some(), Headers::AETH),
            (self.atomic_ack_eth.is_some(), Headers::ATOMIC_ACK_ETH),
            (self.immdt.is_some(), Headers::IMMDT),
            (self.ieth.is_some(), Headers::IETH),
        ] {
            if present {
                h = h.with(header);
            }
        }
        h
    }

    /// Writes the headers in wire order into `buf`, which starts right after the BTH and holds
    /// exactly `headers.len()` bytes. The caller has checked that `self.headers()` matches.
    fn emit(&self, headers: Headers, buf: &mut [u8]) {
        let at = |h| headers.offset_of(h).unwrap_or(0);
        if let Some(r) = &self.deth {
            r.emit(&mut Deth::new_unchecked(&mut buf[at(Headers::DETH)..]));
        }
        if let Some(r) = &self.reth {
            r.emit(&mut Reth::new_unchecked(&mut buf[at(Headers::RETH)..]));
        }
        if let Some(r) = &self.atomic_eth {
            r.emit(&mut AtomicEth::new_unchecked(
                &mut buf[at(Headers::ATOMIC_ETH)..],
            ));
        }
        if let Some(r) = &self.aeth {
            r.emit(&mut Aeth::new_unchecked(&mut buf[at(Headers::AETH)..]));
        }
        if let Some(r) = &self.atomic_ack_eth {
            r.emit(&mut AtomicAckEth::new_unchecked(
                &mut buf[at(Headers::ATOMIC_ACK_ETH)..],
            ));
        }
        if let Some(v) = self.immdt {
            ImmDt::new_unchecked(&mut buf[at(Headers::IMMDT)..]).emit(v);
        }
        if let Some(v) = self.ieth {
            Ieth::new_unchecked(&mut buf[at(Headers::IETH)..]).emit(v);
        }
        if let Some(off) = headers.offset_of(Headers::CNP_RESERVED) {
            buf[off..off + 16].fill(0);
        }
    }

    /// Parses the headers `headers` from `buf`, which starts right after the BTH and holds at
    /// least `headers.len()` bytes.
    fn parse(headers: Headers, buf: &[u8]) -> Result<ExtRepr> {
        let at = |h| headers.offset_of(h).map(|off| &buf[off..]);
        Ok(ExtRepr {
            deth: at(Headers::DETH)
                .map(|b| DethRepr::parse(&Deth::new_unchecked(b)))
                .transpose()?,
            reth: at(Headers::RETH)
                .map(|b| RethRepr::parse(&Reth::new_unchecked(b)))
                .transpose()?,
            atomic_eth: at(Headers::ATOMIC_ETH)
                .map(|b| AtomicEthRepr::parse(&AtomicEth::new_unchecked(b)))
                .transpose()?,
            aeth: at(Headers::AETH)
                .map(|b| AethRepr::parse(&Aeth::new_unchecked(b)))
                .transpose()?,
            atomic_ack_eth: at(Headers::ATOMIC_ACK_ETH)
                .map(|b| AtomicAckEthRepr::parse(&AtomicAckEth::new_unchecked(b)))
                .transpose()?,
            immdt: at(Headers::IMMDT)
                .map(|b| ImmDt::new_unchecked(b).parse())
                .transpose()?,
            ieth: at(Headers::IETH)
                .map(|b| Ieth::new_unchecked(b).parse())
                .transpose()?,
        })
    }
}

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

    /// Writes the frame with `payload` into the start of `buf` and returns its length. Fails if
    /// the extension headers do not match the opcode, if the opcode allows no payload and one is
    /// given, if the payload does not fit in an IP packet, or if `buf` is too small.
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize> {
        let info = self.bth.opcode.info();
        if self.ext.headers() != info.headers.without(Headers::CNP_RESERVED) {
            return Err(Error::HeadersMismatch);
        }
        if !info.allows_payload() && !payload.is_empty() {
            return Err(Error::PayloadNotAllowed);
        }
        let l = self.layout(payload.len());
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
        buf[l.payload..l.pad].copy_from_slice(payload);
        buf[l.pad..l.icrc].fill(0);
        let icrc = icrc::compute(&buf[l.ip..l.icrc])?;
        buf[l.icrc..l.end].copy_from_slice(&icrc::to_bytes(icrc));

        // Last: the UDP checksum covers the ICRC (and the ICRC masks the UDP checksum).
        if self.udp.checksum == UdpChecksum::Computed {
            let (src, dst) = self.ip.addrs();
            UdpPacket::new_unchecked(&mut buf[l.udp..]).fill_checksum(&src, &dst);
        }
        Ok(l.end)
    }
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
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[self.layout.payload..self.layout.pad]
    }
    /// The BTH pad count.
    pub fn pad_count(&self) -> u8 {
        (self.layout.icrc - self.layout.pad) as u8
    }
    /// The ICRC the frame carries.
    pub fn icrc(&self) -> u32 {
        let b = &self.bytes[self.layout.icrc..self.layout.end];
        icrc::read(&[b[0], b[1], b[2], b[3]])
    }
    /// The ICRC computed over the frame.
    pub fn computed_icrc(&self) -> u32 {
        // The layout was checked by the parser, so the IP, UDP and BTH headers are present.
        icrc::compute(self.l3()).unwrap_or(0)
    }
    /// The bytes the ICRC covers: from the IP header to the end of the pad.
    pub fn l3(&self) -> &'a [u8] {
        &self.bytes[self.layout.ip..self.layout.icrc]
    }
    /// The whole frame, including any Ethernet padding.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Fails with [`Error::BadIcrc`] unless the carried ICRC is the computed one. Always
    /// succeeds when built with `--cfg fuzzing`.
    pub fn verify_icrc(&self) -> Result<()> {
        let (computed, received) = (self.computed_icrc(), self.icrc());
        if computed == received || cfg!(fuzzing) {
            Ok(())
        } else {
            Err(Error::BadIcrc { computed, received })
        }
    }
}

/// Parses and verifies a whole frame. Every malformed input fails with its own [`Error`];
/// nothing panics.
pub fn parse(frame: &[u8]) -> Result<ParsedFrame<'_>> {
    let parsed = parse_unverified(frame)?;
    parsed.verify_icrc()?;
    Ok(parsed)
}

/// Parses a frame and checks its structure, but not its ICRC: the dissector uses this to show a
/// frame whose ICRC is wrong. Receive paths use [`parse`].
pub fn parse_unverified(frame: &[u8]) -> Result<ParsedFrame<'_>> {
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
    let udp_repr = UdpRepr {
        src_port: udp.src_port(),
        checksum,
    };

    let transport = &l4[UDP_LEN..];
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
    if body_len % 4 != 0 || pad > body_len {
        return Err(Error::PadInconsistent);
    }
    let ext_at = ip_at + ip_len + UDP_LEN + BthRepr::LEN;
    let ext = ExtRepr::parse(info.headers, &frame[ext_at..ext_at + ext_len])?;
    let layout = Layout::new(vlan.is_some(), ip_len, info.headers, body_len - pad, pad);
    debug_assert_eq!(layout.end, ip_at + ip_end);
    Ok(ParsedFrame {
        repr: FrameRepr {
            eth: eth_repr,
            ip,
            udp: udp_repr,
            bth: bth_repr,
            ext,
        },
        layout,
        bytes: frame,
    })
}

/// Parses an IPv4 header; returns it, its length and the end of the packet within `rest`.
fn parse_ipv4(rest: &[u8]) -> Result<(IpRepr, usize, usize)> {
    if rest.len() < IPV4_LEN {
        return Err(Error::Truncated);
    }
    let ip = Ipv4Packet::new_unchecked(rest);
    if ip.version() != 4 {
        return Err(Error::BadIpVersion(ip.version()));
    }
    match usize::from(ip.header_len()) {
        IPV4_LEN => {}
        n if n > IPV4_LEN => return Err(Error::Ipv4Options),
        _ => return Err(Error::BadIpLength),
    }
    let total = usize::from(ip.total_len());
    if total < IPV4_LEN || total > rest.len() {
        return Err(Error::BadIpLength);
    }
    if !ip.verify_checksum() {
        return Err(Error::BadIpChecksum);
    }
    if ip.more_frags() || ip.frag_offset() != 0 {
        return Err(Error::IpFragment);
    }
    if ip.next_header() != IpProtocol::Udp {
        return Err(Error::NotUdp(ip.next_header().into()));
    }
    let repr = IpRepr::V4 {
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        dscp: ip.dscp(),
        ecn: ip.ecn(),
        ttl: ip.hop_limit(),
    };
    Ok((repr, IPV4_LEN, total))
}

/// Parses an IPv6 header; returns it, its length and the end of the packet within `rest`.
fn parse_ipv6(rest: &[u8]) -> Result<(IpRepr, usize, usize)> {
    if rest.len() < IPV6_LEN {
        return Err(Error::Truncated);
    }
    let ip = Ipv6Packet::new_unchecked(rest);
    if ip.version() != 6 {
        return Err(Error::BadIpVersion(ip.version()));
    }
    let total = IPV6_LEN + usize::from(ip.payload_len());
    if total > rest.len() {
        return Err(Error::BadIpLength);
    }
    let next = u8::from(ip.next_header());
    if next != PROTO_UDP {
        return Err(Error::NotUdp(next));
    }
    let tc = ip.traffic_class();
    let repr = IpRepr::V6 {
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        dscp: tc >> 2,
        ecn: tc & 0x3,
        flow_label: ip.flow_label(),
        hop_limit: ip.hop_limit(),
    };
    Ok((repr, IPV6_LEN, total))
}
