//! rtnetlink sockets: requests and their replies, and draining notifications.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::check;

/// An rtnetlink socket in this thread's network namespace, subscribed to the multicast
/// `groups` (0 for none); non-blocking if it listens to groups, else with a 2 s receive
/// timeout.
pub fn netlink_socket(groups: u32) -> io::Result<OwnedFd> {
    let nonblock = if groups != 0 { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: no pointers; the descriptor is owned below.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | nonblock,
            libc::NETLINK_ROUTE,
        )
    };
    let fd = check(raw)?;
    // SAFETY: a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_nl = unsafe { zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    addr.nl_groups = groups;
    // SAFETY: `addr` outlives the call and its size is passed.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_nl>() as u32,
        )
    })?;
    if groups == 0 {
        let timeout = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        // SAFETY: `timeout` outlives the call and its size is passed.
        check(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const timeout).cast(),
                size_of::<libc::timeval>() as u32,
            )
        })?;
    }
    Ok(fd)
}

/// Sends one rtnetlink request on `fd` and returns the reply's bytes: every message up to
/// NLMSG_DONE for a dump, or the single answer (or error) otherwise.
pub fn netlink_on(fd: &OwnedFd, request: &[u8], dump: bool) -> io::Result<Vec<u8>> {
    // SAFETY: `request` outlives the call and its length is passed.
    let sent = unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: `buf` outlives the call and its length is passed.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let chunk = &buf[..n as usize];
        out.extend_from_slice(chunk);
        // A dump ends with NLMSG_DONE (type 3); a single answer (or error, type 2) is whole.
        let done = !dump || crate::rtnetlink::messages(chunk).any(|(t, _)| t == 3 || t == 2);
        if done || n == 0 {
            return Ok(out);
        }
    }
}

/// Sends one rtnetlink request on a new socket in this thread's namespace.
pub fn netlink(request: &[u8], dump: bool) -> io::Result<Vec<u8>> {
    netlink_on(&netlink_socket(0)?, request, dump)
}

/// Reads and discards everything waiting on a non-blocking socket; returns whether anything
/// was.
pub fn drain(fd: &OwnedFd) -> bool {
    let mut buf = [0u8; 8192];
    let mut any = false;
    loop {
        // SAFETY: `buf` outlives the call and its length is passed.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n <= 0 {
            return any;
        }
        any = true;
    }
}
