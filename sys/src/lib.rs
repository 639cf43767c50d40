//! The system calls softrnic makes, each behind a safe function, by subject: packet sockets
//! and interfaces, netlink, network and mount namespaces, memory mappings, fd passing, notification
//! pipes, and other processes (credentials, their memory, signals). Every `unsafe` block
//! passes pointers to buffers it owns, with their true lengths.
#![allow(unsafe_code)]

use std::io;

mod fds;
mod interface;
mod mmap;
mod mount;
mod netlink;
mod netns;
mod notify;
mod packet;
mod peer;
mod process;
pub mod rtnetlink;

pub use fds::*;
pub use interface::*;
pub use mmap::Mmap;
pub use mount::*;
pub use netlink::*;
pub use netns::*;
pub use notify::*;
pub use packet::*;
pub use peer::{Peer, maps_line};
pub use process::*;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
