//! The system calls the device needs, each behind a safe function: every `unsafe` block passes
//! pointers to buffers it owns, with their true lengths.

use std::io;

mod fds;
mod interface;
mod netlink;
mod netns;
mod notify;
mod packet;
mod process;

pub use fds::*;
pub use interface::*;
pub use netlink::*;
pub use netns::*;
pub use notify::*;
pub use packet::*;
pub use process::*;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
