//! What every frame backend has beside moving frames (its [`Link`]): the interface it runs on,
//! and the descriptors to poll for arriving frames.

use std::io;
use std::os::fd::{OwnedFd, RawFd};

use crate::Link;

use softrnic_sys as sys;

/// An interface's Ethernet address and MTU, as a backend found them when it opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interface {
    /// Its MAC.
    pub mac: [u8; 6],
    /// Its MTU.
    pub mtu: u32,
}

impl Interface {
    /// Asks the kernel through `fd`, any socket of the interface's namespace.
    pub fn query(fd: &OwnedFd, name: &str) -> io::Result<Interface> {
        Ok(Interface {
            mac: sys::if_hwaddr(fd, name)?,
            mtu: sys::if_mtu(fd, name)?,
        })
    }
}

/// A frame backend: a [`Link`] on an interface ([`crate::AfXdp`], [`crate::AfPacket`]).
pub trait Backend: Link {
    /// The interface it runs on.
    fn interface(&self) -> Interface;

    /// Adds the descriptors that are readable when frames arrived (one per receive queue),
    /// for poll(2).
    fn poll_fds(&self, fds: &mut Vec<RawFd>);

    /// How many of the interface's receive queues it serves.
    fn queues(&self) -> usize {
        1
    }

    /// The interface's MAC.
    fn mac(&self) -> [u8; 6] {
        self.interface().mac
    }

    /// The interface's MTU.
    fn mtu(&self) -> u32 {
        self.interface().mtu
    }
}
