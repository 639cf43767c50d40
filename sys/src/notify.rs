//! Notifications between program and daemon: pipes and socket pairs of one byte per event, and
//! waiting on them.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::check;
use super::fds::set_nonblocking;

/// Waits until one of `fds` is readable or `timeout_ms` passes (poll(2)); returns how many are.
pub fn poll_readable(fds: &[RawFd], timeout_ms: i32) -> io::Result<usize> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` outlives the call and its length is passed.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as u64, timeout_ms) };
    match check(n) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

/// A pipe for notifications, one byte per event: (read end, write end). Each end is its own
/// open file description, so the program may make its read end blocking or not without the
/// daemon's non-blocking write end noticing (an eventfd shared both ways cannot do that).
pub fn notify_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: fresh descriptors nobody else owns.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    set_nonblocking(write.as_raw_fd());
    Ok((read, write))
}

/// The wake-up channel a program writes to when the daemon sleeps: (daemon's end, program's
/// end), both non-blocking. A socket pair, not a pipe: a program that writes after the daemon
/// died gets EPIPE (through [`wake`]), where a pipe would kill it with SIGPIPE.
pub fn wake_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    let kind = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    check(unsafe { libc::socketpair(libc::AF_UNIX, kind, 0, fds.as_mut_ptr()) })?;
    // SAFETY: fresh descriptors nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Writes a wake-up byte to the program's end of a [`wake_pair`]; `false` once the daemon's
/// end is gone. A full buffer already says there is something to read.
pub fn wake(fd: RawFd) -> bool {
    let flags = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
    // SAFETY: the byte outlives the call and its length is passed.
    let n = unsafe { libc::send(fd, [1u8].as_ptr().cast(), 1, flags) };
    n == 1 || io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
}

/// Whether the other end of a connected socket has closed (checked without waiting or
/// reading).
pub fn hung_up(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd, which outlives the call.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// Writes one notification byte (a full pipe already says there is something to read).
pub fn notify(fd: RawFd) {
    // SAFETY: the byte outlives the call and its length is passed.
    unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
}

/// Takes one notification byte, blocking or not as the descriptor is set. `Ok(false)` when
/// a non-blocking descriptor has none (EAGAIN). A signal ends a blocking wait with EINTR
/// unless its handler asks for SA_RESTART (the kernel then restarts the read), as it ends the
/// read of a uverbs or rdma_cm event file: qperf, for one, ends its test that way.
pub fn take_notification(fd: RawFd) -> io::Result<bool> {
    let mut byte = 0u8;
    // SAFETY: `byte` outlives the call; one byte is read.
    let n = unsafe { libc::read(fd, (&raw mut byte).cast(), 1) };
    match n {
        1 => Ok(true),
        0 => Err(io::ErrorKind::UnexpectedEof.into()),
        _ => {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => Ok(false),
                _ => Err(e),
            }
        }
    }
}
