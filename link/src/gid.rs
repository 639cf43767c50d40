//! The GID table of a port, built from its interface's addresses in the order kernel rxe builds
//! it (the kernel's roce_gid_mgmt: the default GID from the IPv6 link-local address first,
//! then the addresses as the kernel lists them, IPv4 as IPv4-mapped GIDs), so scripts written
//! for rxe's GID indexes (`-g 1`, `-x 1`) pick the same address on softrnic. A [`Watch`] keeps
//! it in sync as addresses come and go.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use softrnic_emu_core::Gid;

use softrnic_sys as sys;
use softrnic_sys::rtnetlink::{attrs, ip_from, messages, request};

const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;
const NLM_F_DUMP: u16 = 0x300;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
/// The multicast groups of link and address changes: RTMGRP_LINK, RTMGRP_IPV4_IFADDR and
/// RTMGRP_IPV6_IFADDR.
const WATCHED_GROUPS: u32 = 0x1 | 0x10 | 0x100;

/// The GIDs for `addrs`: IPv6 link-local first, then the IPv4 addresses, then the other IPv6
/// ones, each group in the order given.
pub fn order(addrs: &[IpAddr]) -> Vec<Gid> {
    let link_local =
        |a: &IpAddr| matches!(a, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
    let groups: [&dyn Fn(&IpAddr) -> bool; 3] = [&|a| link_local(a), &|a| a.is_ipv4(), &|a| {
        a.is_ipv6() && !link_local(a)
    }];
    groups
        .iter()
        .flat_map(|keep| addrs.iter().filter(|a| keep(a)).map(|&a| Gid::from_ip(a)))
        .collect()
}

/// The addresses of interface `ifindex`, as an RTM_GETADDR dump on `fd` lists them.
fn addresses(fd: &OwnedFd, ifindex: u32) -> io::Result<Vec<IpAddr>> {
    // struct ifaddrmsg: family (any), prefix length, flags, scope, index.
    let body = [0u8; 8];
    let reply = sys::netlink_on(fd, &request(RTM_GETADDR, NLM_F_DUMP, &body), true)?;
    let mut out = Vec::new();
    for (kind, body) in messages(&reply) {
        if kind != RTM_NEWADDR || body.len() < 8 {
            continue;
        }
        if u32::from_ne_bytes(body[4..8].try_into().unwrap_or([0; 4])) != ifindex {
            continue;
        }
        // IPv4 names its own address IFA_LOCAL (IFA_ADDRESS is the peer's on point-to-point
        // links); IPv6 has only IFA_ADDRESS.
        let (mut local, mut address) = (None, None);
        for (t, data) in attrs(body, 8) {
            match t {
                IFA_LOCAL => local = ip_from(data),
                IFA_ADDRESS => address = ip_from(data),
                _ => {}
            }
        }
        out.extend(local.or(address));
    }
    Ok(out)
}

/// The GID table of interface `ifname` in this thread's network namespace.
pub fn table(ifname: &str) -> io::Result<Vec<Gid>> {
    let ifindex = sys::if_index(ifname)?;
    Ok(order(&addresses(&sys::netlink_socket(0)?, ifindex)?))
}

/// Keeps a port's GID table and MAC in sync with its interface: its sockets belong to the
/// interface's namespace (open it there), and work from any thread afterwards.
pub struct Watch {
    ifname: String,
    ifindex: u32,
    query: OwnedFd,
    events: OwnedFd,
}

/// What an interface has now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// The GID table.
    pub gids: Vec<Gid>,
    /// The interface's MAC.
    pub mac: [u8; 6],
}

impl Watch {
    /// Watches interface `ifname` in this thread's network namespace.
    pub fn open(ifname: &str) -> io::Result<Watch> {
        Ok(Watch {
            ifname: ifname.to_owned(),
            ifindex: sys::if_index(ifname)?,
            query: sys::netlink_socket(0)?,
            events: sys::netlink_socket(WATCHED_GROUPS)?,
        })
    }

    /// Readable when the link or an address changed, for poll(2).
    pub fn fd(&self) -> RawFd {
        self.events.as_raw_fd()
    }

    /// The table now.
    pub fn table(&self) -> io::Result<Vec<Gid>> {
        Ok(order(&addresses(&self.query, self.ifindex)?))
    }

    /// The interface's addresses and MAC, if the link or an address changed since the last
    /// call.
    pub fn changed(&self) -> Option<Port> {
        if !sys::drain(&self.events) {
            return None;
        }
        Some(Port {
            gids: self.table().ok()?,
            mac: sys::if_hwaddr(&self.query, &self.ifname).ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_then_ipv4_then_ipv6() {
        let addrs: Vec<IpAddr> = ["2001:db8::5", "198.18.0.1", "fe80::1", "198.18.0.9"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let names: Vec<String> = order(&addrs).iter().map(|g| g.to_string()).collect();
        assert_eq!(
            names,
            [
                "fe80::1",
                "::ffff:198.18.0.1",
                "::ffff:198.18.0.9",
                "2001:db8::5"
            ]
        );
    }
}
