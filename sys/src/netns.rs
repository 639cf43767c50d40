//! Network namespaces: moving a thread into one.

use std::io;
use std::os::fd::AsRawFd;

use super::check;

/// Moves the calling thread into the network namespace at `path` (e.g. /var/run/netns/NAME).
/// Only this thread changes namespace; sockets it opens afterwards belong to the new one.
pub fn enter_netns(path: &str) -> io::Result<()> {
    let file = std::fs::File::open(path)?;
    // SAFETY: no pointers; the descriptor is valid while `file` lives.
    check(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) })?;
    Ok(())
}
