//! Packet sockets: opening, binding, options, BPF filters, and frames in and out in batches.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::check;

/// A raw packet socket for every protocol, non-blocking, not yet bound.
pub fn packet_socket() -> io::Result<OwnedFd> {
    let proto = (libc::ETH_P_ALL as u16).to_be() as libc::c_int;
    // SAFETY: no pointers; the returned descriptor is owned by the OwnedFd.
    let fd = check(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            proto,
        )
    })?;
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Binds a packet socket to one interface.
pub fn bind_packet(fd: &OwnedFd, ifindex: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: `addr` lives across the call and its size is passed.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_ll>() as u32,
        )
    })?;
    Ok(())
}

/// Sets an integer socket option.
pub fn set_int_option(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` lives across the call and its size is passed.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            size_of::<i32>() as u32,
        )
    })?;
    Ok(())
}

/// Attaches a classic BPF filter (SO_ATTACH_FILTER).
pub fn attach_filter(fd: RawFd, program: &[libc::sock_filter]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points into `program`, which outlives the call; the kernel copies it.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const prog).cast(),
            size_of::<libc::sock_fprog>() as u32,
        )
    })?;
    Ok(())
}

/// Receives up to `bufs.len()` frames without blocking (recvmmsg); writes their lengths
/// (truncated frames are marked by a length above the buffer's) and returns how many.
pub fn recv_batch(fd: &OwnedFd, bufs: &mut [Vec<u8>], lens: &mut [usize]) -> io::Result<usize> {
    let n = bufs.len().min(lens.len());
    let mut iovs: Vec<libc::iovec> = bufs[..n]
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain data; all-zero is a valid value.
    let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { zeroed() }).collect();
    for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: every iovec points into a buffer of `bufs` with its length, and `msgs` and
    // `iovs` outlive the call.
    let got = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as u32,
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            std::ptr::null_mut(),
        )
    };
    match check(got) {
        Ok(got) => {
            for (l, m) in lens.iter_mut().zip(&msgs[..got as usize]) {
                *l = m.msg_len as usize;
            }
            Ok(got as usize)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

/// Sends frames on a bound packet socket in one call (sendmmsg); returns how many went.
pub fn send_batch(fd: &OwnedFd, frames: &[&[u8]]) -> io::Result<usize> {
    let mut iovs: Vec<libc::iovec> = frames
        .iter()
        .map(|f| libc::iovec {
            iov_base: f.as_ptr().cast_mut().cast(),
            iov_len: f.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain data; all-zero is a valid value.
    let mut msgs: Vec<libc::mmsghdr> = (0..frames.len()).map(|_| unsafe { zeroed() }).collect();
    for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: every iovec points into a frame the caller keeps alive, with its length; the
    // kernel only reads them.
    let sent = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            msgs.len() as u32,
            libc::MSG_DONTWAIT,
        )
    };
    check(sent).map(|n| n as usize)
}
