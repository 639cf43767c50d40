//! The GID table of a port, built from its interface's addresses in the order kernel rxe builds
//! it (the kernel's roce_gid_mgmt: the default GID from the IPv6 link-local address first,
//! then the addresses as the kernel lists them, IPv4 as IPv4-mapped GIDs), so scripts written
//! for rxe's GID indexes (`-g 1`, `-x 1`) pick the same address on softrnic.

use std::io;
use std::net::IpAddr;

use softrnic_emu_core::Gid;

use crate::sys;

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

/// The GID table of interface `ifname` in this thread's network namespace.
pub fn table(ifname: &str) -> io::Result<Vec<Gid>> {
    Ok(order(&sys::if_addrs(ifname)?))
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
