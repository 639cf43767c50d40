//! An interface's index, MAC, MTU and multicast filter (ioctls through any socket of its
//! namespace).

use std::ffi::CString;
use std::io;
use std::mem::zeroed;
use std::os::fd::{AsRawFd, OwnedFd};

use super::check;

/// The index of the interface called `name` in this thread's network namespace.
pub fn if_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i),
    }
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { zeroed() };
    if name.len() >= req.ifr_name.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

/// The interface's MAC address (SIOCGIFHWADDR), asked through any socket of its namespace.
pub fn if_hwaddr(fd: &OwnedFd, name: &str) -> io::Result<[u8; 6]> {
    let mut req = ifreq(name)?;
    // SAFETY: `req` is a valid ifreq that lives across the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR, &raw mut req) })?;
    // SAFETY: SIOCGIFHWADDR fills the ifru_hwaddr member.
    let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    let mut mac = [0u8; 6];
    for (m, d) in mac.iter_mut().zip(data) {
        *m = d as u8;
    }
    Ok(mac)
}

/// The interface's MTU (SIOCGIFMTU).
pub fn if_mtu(fd: &OwnedFd, name: &str) -> io::Result<u32> {
    let mut req = ifreq(name)?;
    // SAFETY: `req` is a valid ifreq that lives across the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &raw mut req) })?;
    // SAFETY: SIOCGIFMTU fills the ifru_mtu member.
    Ok(unsafe { req.ifr_ifru.ifru_mtu } as u32)
}

/// How many receive queues the interface has (ETHTOOL_GCHANNELS: its RX-only and combined
/// channels); 1 for a driver that does not say.
pub fn if_rx_queues(fd: &OwnedFd, name: &str) -> io::Result<u32> {
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    /// `struct ethtool_channels`: the command, four maxima, then the counts (rx, tx, other,
    /// combined).
    #[repr(C)]
    struct Channels([u32; 9]);
    let mut channels = Channels([0; 9]);
    channels.0[0] = ETHTOOL_GCHANNELS;
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_data = (&raw mut channels).cast();
    // SAFETY: `req` and the `channels` it points to live across the call, which fills them.
    match check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &raw mut req) }) {
        Ok(_) => Ok((channels.0[5] + channels.0[8]).max(1)),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(1),
        Err(e) => Err(e),
    }
}

/// Adds (SIOCADDMULTI) or removes (SIOCDELMULTI) a multicast MAC in the interface's receive
/// filter, as rxe's `dev_mc_add` does when a QP joins a group, through any socket of its
/// namespace.
pub fn if_multicast(fd: &OwnedFd, name: &str, mac: [u8; 6], add: bool) -> io::Result<()> {
    let mut req = ifreq(name)?;
    // SAFETY: writing the ifru_hwaddr member of a zeroed union.
    let sa = unsafe { &mut req.ifr_ifru.ifru_hwaddr };
    sa.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
    for (d, m) in sa.sa_data.iter_mut().zip(mac) {
        *d = m as libc::c_char;
    }
    let op = if add {
        libc::SIOCADDMULTI
    } else {
        libc::SIOCDELMULTI
    };
    // SAFETY: `req` is a valid ifreq that lives across the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), op, &raw mut req) }).map(drop)
}
