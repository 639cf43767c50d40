//! GIDs: a RoCEv2 port's addresses, as 16-byte IPv6 form (IBA Annex A17.4.5.1: an IPv4 address
//! a.b.c.d is the IPv4-mapped GID ::ffff:a.b.c.d).

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A 16-byte GID.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID for an IP address.
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IPv6 link-local GID of a MAC, fe80::/64 with the modified EUI-64 interface ID
    /// (RFC 4291 appendix A), as the kernel gives an interface and rxe lists first.
    pub fn link_local(mac: [u8; 6]) -> Gid {
        Gid([
            0xfe,
            0x80,
            0,
            0,
            0,
            0,
            0,
            0,
            mac[0] ^ 2,
            mac[1],
            mac[2],
            0xff,
            0xfe,
            mac[3],
            mac[4],
            mac[5],
        ])
    }

    /// Whether this is a multicast GID: IPv6 ff00::/8, or an IPv4-mapped 224.0.0.0/4 (the
    /// kernel's `rdma_is_multicast_addr`).
    pub fn is_multicast(self) -> bool {
        self.to_ip().is_multicast()
    }

    /// The Ethernet address a multicast GID's packets go to: 01:00:5e and the low 23 bits of
    /// an IPv4 group (RFC 1112 6.4), 33:33 and the low 32 bits of an IPv6 one (RFC 2464 7).
    pub fn multicast_mac(self) -> Option<[u8; 6]> {
        let g = self.0;
        match self.to_ip() {
            IpAddr::V4(v4) if v4.is_multicast() => {
                Some([0x01, 0x00, 0x5e, g[13] & 0x7f, g[14], g[15]])
            }
            IpAddr::V6(v6) if v6.is_multicast() => Some([0x33, 0x33, g[12], g[13], g[14], g[15]]),
            _ => None,
        }
    }

    /// The IP address the GID stands for: IPv4 for an IPv4-mapped GID, IPv6 otherwise.
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(ip: Ipv4Addr) -> Gid {
        Gid::from_ip(IpAddr::V4(ip))
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(ip: Ipv6Addr) -> Gid {
        Gid::from_ip(IpAddr::V6(ip))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_is_modified_eui64() {
        let g = Gid::link_local([0x02, 0x53, 0x52, 0x4e, 0x00, 0x01]);
        assert_eq!(g.to_string(), "fe80::53:52ff:fe4e:1");
    }

    #[test]
    fn ipv4_maps_and_back() {
        let ip: Ipv4Addr = "198.18.0.1".parse().unwrap();
        let gid = Gid::from(ip);
        assert_eq!(
            gid.0,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1]
        );
        assert_eq!(gid.to_ip(), IpAddr::V4(ip));
        assert_eq!(gid.to_string(), "::ffff:198.18.0.1");
    }

    #[test]
    fn multicast_groups_map_to_their_macs() {
        let v4 = Gid::from("239.129.2.3".parse::<Ipv4Addr>().unwrap());
        assert!(v4.is_multicast());
        assert_eq!(
            v4.multicast_mac(),
            Some([0x01, 0x00, 0x5e, 0x01, 0x02, 0x03])
        );
        let v6 = Gid::from("ff12::8:1:2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            v6.multicast_mac(),
            Some([0x33, 0x33, 0x00, 0x01, 0x00, 0x02])
        );
        let unicast = Gid::from("198.18.0.1".parse::<Ipv4Addr>().unwrap());
        assert!(!unicast.is_multicast());
        assert_eq!(unicast.multicast_mac(), None);
    }

    #[test]
    fn ipv6_is_itself() {
        let ip: Ipv6Addr = "2001:2::1".parse().unwrap();
        let gid = Gid::from(ip);
        assert_eq!(gid.to_ip(), IpAddr::V6(ip));
    }
}
