//! `rpoll`: what each rsocket's CQ, CM and accept queue say, sleeping on their fds and the
//! program's other fds together.

use core::ffi::c_int;
use std::os::fd::AsRawFd;
use std::time::Instant;

use libc::{nfds_t, pollfd};

use super::connection::{cm_event, do_connect};
use super::stream::{Stream, state};
use super::{POLLING_TIME, Rsock, cm_fd, comp_fd, lookup, readable};

/// rdma-core's `rs_poll_rs`: the events that hold for the socket now, having taken what its
/// CQ and CM have (sleeping if `!nonblock` until `test` holds).
unsafe fn poll_rs(rs: &Rsock, events: i16, nonblock: bool, test: fn(&Stream) -> bool) -> i16 {
    let mut g = rs.lock();
    loop {
        let st = g.s.state;
        if st & state::CONNECTED != 0 || st == state::DISCONNECTED || st & state::ERROR != 0 {
            let (back, _) = rs.process(g, nonblock, test);
            g = back;
            let mut revents = 0;
            if events & libc::POLLIN != 0 && g.s.conn_have_rdata() {
                revents |= libc::POLLIN;
            }
            if events & libc::POLLOUT != 0 && g.s.can_send() {
                revents |= libc::POLLOUT;
            }
            // A hangup is told once the data that came before it is read (rdma-core tells
            // it at once, which programs that take POLLHUP for an error, such as rstream,
            // race with the peer's last data).
            if g.s.state == state::DISCONNECTED {
                if !g.s.have_rdata() {
                    revents |= libc::POLLHUP;
                }
            } else if g.s.state & state::CONNECTED == 0 {
                revents |= libc::POLLERR;
            }
            return revents;
        }
        if st == state::LISTENING {
            let Some(q) = rs.queue.get() else { return 0 };
            let mut p = pollfd {
                fd: q.as_raw_fd(),
                events,
                revents: 0,
            };
            libc::poll(&mut p, 1, 0);
            return p.revents;
        }
        if st & state::OPENING != 0 && do_connect(&mut g) != Err(libc::EINPROGRESS) {
            continue;
        }
        if g.s.state == state::CONNECT_ERROR {
            return (events & (libc::POLLIN | libc::POLLOUT)) | libc::POLLERR;
        }
        return 0;
    }
}

fn poll_all(_: &Stream) -> bool {
    true
}

fn is_cq_armed(s: &Stream) -> bool {
    s.cq_armed
}

/// `rpoll` (rdma-core's): checks every fd, then sleeps on the rsockets' completion channels,
/// CM channels or accept queues, and the other fds, as asked.
pub(super) unsafe fn rpoll_impl(fds: &mut [pollfd], timeout: c_int) -> c_int {
    let check = |fds: &mut [pollfd]| -> c_int {
        let mut n = 0;
        for f in fds.iter_mut() {
            f.revents = match lookup(f.fd) {
                Some(rs) => poll_rs(&rs, f.events, true, poll_all),
                None => {
                    libc::poll(f, 1, 0);
                    f.revents
                }
            };
            n += c_int::from(f.revents != 0);
        }
        n
    };
    let start = Instant::now();
    loop {
        let n = check(fds);
        if n > 0 || timeout == 0 {
            return n;
        }
        if start.elapsed() > POLLING_TIME {
            break;
        }
    }
    loop {
        // What to sleep on: (index into fds, pollfd) for each.
        let mut sleep: Vec<(usize, pollfd)> = Vec::new();
        let mut armed = 0;
        for (i, f) in fds.iter_mut().enumerate() {
            let Some(rs) = lookup(f.fd) else {
                sleep.push((
                    i,
                    pollfd {
                        fd: f.fd,
                        events: f.events,
                        revents: 0,
                    },
                ));
                continue;
            };
            f.revents = poll_rs(&rs, f.events, false, is_cq_armed);
            if f.revents != 0 {
                armed += 1;
                continue;
            }
            let g = rs.lock();
            let on = |fd| pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            match (rs.queue.get(), comp_fd(&g.s)) {
                (Some(q), _) => sleep.push((i, on(q.as_raw_fd()))),
                (None, Some(c)) if g.s.state >= state::CONNECTED => {
                    sleep.push((i, on(c)));
                    sleep.push((i, on(cm_fd(&g.s))));
                }
                _ => sleep.push((i, on(cm_fd(&g.s)))),
            }
        }
        if armed > 0 {
            return armed;
        }
        let wait = if timeout < 0 {
            -1
        } else {
            let left = timeout - start.elapsed().as_millis() as c_int;
            if left <= 0 {
                return 0;
            }
            left
        };
        let mut p: Vec<pollfd> = sleep.iter().map(|(_, p)| *p).collect();
        if libc::poll(p.as_mut_ptr(), p.len() as nfds_t, wait) < 0 {
            return -1;
        }
        let mut n = 0;
        for (i, f) in fds.iter_mut().enumerate() {
            let mine = sleep.iter().zip(&p).filter(|((at, _), _)| *at == i);
            match lookup(f.fd) {
                Some(rs) => {
                    let woken: Vec<c_int> = mine
                        .filter(|(_, q)| q.revents != 0)
                        .map(|(_, q)| q.fd)
                        .collect();
                    if !woken.is_empty() {
                        let _w = rs.wait.lock().unwrap_or_else(|e| e.into_inner());
                        let mut g = rs.lock();
                        if comp_fd(&g.s).is_some_and(|c| woken.contains(&c)) {
                            g.s.take_cq_event();
                        }
                        let cm = cm_fd(&g.s);
                        if woken.contains(&cm) && rs.queue.get().is_none() && readable(cm) {
                            cm_event(&mut g);
                        }
                    }
                    f.revents = poll_rs(&rs, f.events, true, poll_all);
                }
                None => f.revents = mine.map(|(_, q)| q.revents).fold(0, |a, b| a | b),
            }
            n += c_int::from(f.revents != 0);
        }
        if n > 0 {
            return n;
        }
    }
}
