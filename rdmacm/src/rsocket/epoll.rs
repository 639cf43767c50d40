//! `repoll_create`, `repoll_ctl` and `repoll_wait` (rdma-core 65): epoll's interface over
//! rsockets and other fds, answered by `rpoll` over the set. Level-triggered, as rdma-core's
//! (EPOLLET and EPOLLONESHOT are not kept); a change made while another thread waits takes
//! effect at its next wait. The returned descriptor names the set for these calls and
//! `rclose`; unlike rdma-core's, it does not itself become readable when a member is ready.

use core::ffi::c_int;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

use libc::{epoll_event, pollfd};

use super::poll::rpoll_impl;
use crate::fail;

/// One set: each member's fd, the poll events it waits for, and the program's data.
struct Set {
    fd: OwnedFd,
    members: Vec<(c_int, i16, u64)>,
}

static SETS: Mutex<Option<HashMap<c_int, Set>>> = Mutex::new(None);

fn sets() -> MutexGuard<'static, Option<HashMap<c_int, Set>>> {
    SETS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The epoll events and the poll events they stand for (rdma-core's `epoll_to_poll_events`).
const EVENTS: [(c_int, i16); 4] = [
    (libc::EPOLLIN, libc::POLLIN),
    (libc::EPOLLOUT, libc::POLLOUT),
    (libc::EPOLLERR, libc::POLLERR),
    (libc::EPOLLHUP, libc::POLLHUP),
];

/// The poll events for what a member waits for.
fn poll_events(epoll: u32) -> i16 {
    EVENTS
        .iter()
        .filter(|(e, _)| epoll & *e as u32 != 0)
        .fold(0, |acc, (_, p)| acc | p)
}

/// The epoll events for what `poll` reported (a closed fd, POLLNVAL, as an error).
fn epoll_events(revents: i16) -> u32 {
    let revents = if revents & libc::POLLNVAL != 0 {
        revents | libc::POLLERR
    } else {
        revents
    };
    EVENTS
        .iter()
        .filter(|(_, p)| revents & *p != 0)
        .fold(0, |acc, (e, _)| acc | *e as u32)
}

/// Closes set `fd` if it is one (for `rclose`); `None` if it is not.
pub(super) fn close(fd: c_int) -> Option<c_int> {
    sets().as_mut()?.remove(&fd).map(|_| 0)
}

exported! {
    /// `repoll_create`: a new, empty set. `flags` may hold O_CLOEXEC.
    fn repoll_create(flags: c_int) -> c_int {
        if flags & !libc::O_CLOEXEC != 0 {
            return fail(libc::EINVAL);
        }
        let fd = libc::eventfd(0, libc::EFD_NONBLOCK | (flags & libc::O_CLOEXEC));
        if fd < 0 {
            return -1;
        }
        let set = Set { fd: OwnedFd::from_raw_fd(fd), members: Vec::new() };
        sets().get_or_insert_with(HashMap::new).insert(set.fd.as_raw_fd(), set);
        fd
    }

    /// `repoll_ctl`: EPOLL_CTL_ADD (EEXIST if `fd` is a member), EPOLL_CTL_MOD and
    /// EPOLL_CTL_DEL (ENOENT if it is not); EBADF if `epfd` is no set.
    fn repoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut epoll_event) -> c_int {
        let mut g = sets();
        let Some(set) = g.as_mut().and_then(|s| s.get_mut(&epfd)) else {
            return fail(libc::EBADF);
        };
        let at = set.members.iter().position(|m| m.0 == fd);
        let wanted = event.as_ref().map(|e| (fd, poll_events(e.events), e.u64));
        let done = match (op, at, wanted) {
            (libc::EPOLL_CTL_ADD, Some(_), _) => Err(libc::EEXIST),
            (libc::EPOLL_CTL_ADD, None, Some(m)) => {
                set.members.push(m);
                Ok(())
            }
            (libc::EPOLL_CTL_MOD, Some(i), Some(m)) => {
                set.members[i] = m;
                Ok(())
            }
            (libc::EPOLL_CTL_DEL, Some(i), _) => {
                set.members.swap_remove(i);
                Ok(())
            }
            (libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL, None, _) => Err(libc::ENOENT),
            (libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD, _, None) => Err(libc::EFAULT),
            _ => Err(libc::EINVAL),
        };
        match done {
            Ok(()) => 0,
            Err(e) => fail(e),
        }
    }

    /// `repoll_wait`: up to `maxevents` ready members, waiting up to `timeout` ms (-1: without
    /// end), as `epoll_wait`.
    fn repoll_wait(epfd: c_int, events: *mut epoll_event, maxevents: c_int, timeout: c_int) -> c_int {
        if maxevents <= 0 || events.is_null() {
            return fail(libc::EINVAL);
        }
        let members = match sets().as_ref().and_then(|s| s.get(&epfd)) {
            Some(set) => set.members.clone(),
            None => return fail(libc::EBADF),
        };
        let mut fds: Vec<pollfd> = members
            .iter()
            .map(|&(fd, events, _)| pollfd { fd, events, revents: 0 })
            .collect();
        let n = rpoll_impl(&mut fds, timeout);
        if n <= 0 {
            return n;
        }
        let out = std::slice::from_raw_parts_mut(events, maxevents as usize);
        let ready = fds.iter().zip(&members).filter(|(p, _)| p.revents != 0);
        let mut count = 0;
        for (slot, (p, m)) in out.iter_mut().zip(ready) {
            *slot = epoll_event { events: epoll_events(p.revents), u64: m.2 };
            count += 1;
        }
        count
    }
}
