//! The outer headers of a RoCEv2 frame: Ethernet (with an optional 802.1Q tag), IPv4 or IPv6,
//! and UDP to port 4791, read and written with `smoltcp::wire`.

use smoltcp::wire::{
    EthernetAddress, IpAddress, IpProtocol, Ipv4Address, Ipv4Packet, Ipv6Address, Ipv6Packet,
};

use super::{IPV4_LEN, IPV6_LEN, PROTO_UDP};
use crate::vlan::VlanTag;
use crate::{Error, Result};

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

impl EthRepr {
    /// An untagged header from `src` to `dst`.
    pub const fn untagged(dst: EthernetAddress, src: EthernetAddress) -> Self {
        EthRepr {
            dst,
            src,
            vlan: None,
        }
    }
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
    /// Plain IPv4, as a socket sends by default: DSCP 0, not ECN-capable, TTL 64.
    pub const fn v4(src: Ipv4Address, dst: Ipv4Address) -> Self {
        IpRepr::V4 {
            src,
            dst,
            dscp: 0,
            ecn: 0,
            ttl: 64,
        }
    }
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
    /// The same header with this DSCP and these ECN bits.
    pub const fn with_traffic_class(self, dscp: u8, ecn: u8) -> Self {
        match self {
            IpRepr::V4 { src, dst, ttl, .. } => IpRepr::V4 {
                src,
                dst,
                dscp,
                ecn,
                ttl,
            },
            IpRepr::V6 {
                src,
                dst,
                flow_label,
                hop_limit,
                ..
            } => IpRepr::V6 {
                src,
                dst,
                dscp,
                ecn,
                flow_label,
                hop_limit,
            },
        }
    }
    /// The source and destination addresses.
    pub fn addrs(&self) -> (IpAddress, IpAddress) {
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

impl UdpRepr {
    /// From `src_port`, with no checksum (as RoCEv2 senders do over IPv4).
    pub const fn unchecked(src_port: u16) -> Self {
        UdpRepr {
            src_port,
            checksum: UdpChecksum::Zero,
        }
    }
}

/// Parses an IPv4 header; returns it, its length and the end of the packet within `rest`.
pub(super) fn parse_ipv4(rest: &[u8]) -> Result<(IpRepr, usize, usize)> {
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
pub(super) fn parse_ipv6(rest: &[u8]) -> Result<(IpRepr, usize, usize)> {
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
