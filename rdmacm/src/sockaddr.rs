//! Between C socket addresses and `std::net::SocketAddr`.

use core::ffi::c_int;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage};

/// The address at `addr`: EINVAL for NULL, EAFNOSUPPORT for a family other than IPv4/IPv6
/// (AF_IB needs a kernel that speaks it; softrnic's rdma_cm speaks IP).
///
/// # Safety
/// `addr` must be NULL or point to a socket address of its family's size.
pub unsafe fn read(addr: *const sockaddr) -> Result<SocketAddr, c_int> {
    if addr.is_null() {
        return Err(libc::EINVAL);
    }
    match c_int::from((*addr).sa_family) {
        libc::AF_INET => {
            let a = &*addr.cast::<sockaddr_in>();
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Ok(SocketAddrV4::new(ip, u16::from_be(a.sin_port)).into())
        }
        libc::AF_INET6 => {
            let a = &*addr.cast::<sockaddr_in6>();
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            let port = u16::from_be(a.sin6_port);
            Ok(SocketAddrV6::new(ip, port, a.sin6_flowinfo, a.sin6_scope_id).into())
        }
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// The C form of `a`, and its length.
pub fn write(a: SocketAddr) -> (sockaddr_storage, libc::socklen_t) {
    // SAFETY: plain data.
    let mut s: sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage holds any socket address.
            let sin = unsafe { &mut *(&raw mut s).cast::<sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            std::mem::size_of::<sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above.
            let sin6 = unsafe { &mut *(&raw mut s).cast::<sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_scope_id = v6.scope_id();
            std::mem::size_of::<sockaddr_in6>()
        }
    };
    (s, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_and_other_families_are_refused() {
        for a in ["198.18.0.1:4791", "[fe80::1]:7471", "0.0.0.0:0"] {
            let a: SocketAddr = a.parse().unwrap();
            let (s, _) = write(a);
            // SAFETY: a valid storage.
            assert_eq!(unsafe { read((&raw const s).cast()) }, Ok(a));
        }
        // SAFETY: plain data; a NULL pointer is checked.
        unsafe {
            let mut s: sockaddr_storage = std::mem::zeroed();
            s.ss_family = libc::AF_UNIX as libc::sa_family_t;
            assert_eq!(read((&raw const s).cast()), Err(libc::EAFNOSUPPORT));
            assert_eq!(read(std::ptr::null()), Err(libc::EINVAL));
        }
    }
}
