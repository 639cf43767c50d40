//! Moving data: waiting for completions (rdma-core's `rs_process_cq`, `rs_get_comp`),
//! `rrecv`, `rsend` and `riowrite`.

use core::ffi::c_int;
use std::sync::MutexGuard;
use std::time::Instant;

use libc::{nfds_t, pollfd};

use super::connection::{cm_event, do_connect};
use super::stream::{Stream, state};
use super::{Inner, POLLING_TIME, Rsock, cm_fd, comp_fd};

impl Rsock {
    /// Takes completions until `test` holds: at once (`nonblock`: EWOULDBLOCK otherwise), or
    /// sleeping on the completion channel (rdma-core's `rs_process_cq`). A disconnect wakes it
    /// too.
    pub(super) unsafe fn process<'a>(
        &'a self,
        mut g: MutexGuard<'a, Inner>,
        nonblock: bool,
        test: fn(&Stream) -> bool,
    ) -> (MutexGuard<'a, Inner>, Result<(), c_int>) {
        loop {
            g.s.update_credits();
            let polled = g.s.poll_cq();
            if test(&g.s) {
                break;
            }
            if let Err(e) = polled {
                g.s.update_credits();
                return (g, Err(e));
            }
            if nonblock {
                g.s.update_credits();
                return (g, Err(libc::EWOULDBLOCK));
            }
            if !g.s.cq_armed {
                g.s.arm();
                continue;
            }
            g.s.update_credits();
            let fds = [comp_fd(&g.s), Some(cm_fd(&g.s))];
            drop(g);
            let w = self.wait.lock().unwrap_or_else(|e| e.into_inner());
            g = self.lock();
            // Another sleeper may have taken the event this one waited for.
            let _ = g.s.poll_cq();
            if test(&g.s) {
                break;
            }
            drop(g);
            let mut p: Vec<pollfd> = fds
                .iter()
                .flatten()
                .map(|&fd| pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            libc::poll(p.as_mut_ptr(), p.len() as nfds_t, -1);
            g = self.lock();
            if p[0].revents != 0 {
                g.s.take_cq_event();
            }
            if p.get(1).is_some_and(|c| c.revents != 0) {
                cm_event(&mut g);
            }
            drop(w);
        }
        g.s.update_credits();
        (g, Ok(()))
    }

    /// [`process`](Self::process), polling for a while before sleeping (rdma-core's
    /// `rs_get_comp`).
    pub(super) unsafe fn get_comp<'a>(
        &'a self,
        mut g: MutexGuard<'a, Inner>,
        nonblock: bool,
        test: fn(&Stream) -> bool,
    ) -> (MutexGuard<'a, Inner>, Result<(), c_int>) {
        let start = Instant::now();
        loop {
            let (back, r) = self.process(g, true, test);
            g = back;
            if r != Err(libc::EWOULDBLOCK) || nonblock {
                return (g, r);
            }
            if start.elapsed() > POLLING_TIME {
                break;
            }
        }
        self.process(g, false, test)
    }
}

/// A socket still connecting moves on first; one that must wait says EAGAIN, as rdma-core's
/// `rrecv` and `rsend` do.
unsafe fn go_on_connecting(g: &mut Inner) -> Result<(), c_int> {
    if g.s.state & state::OPENING == 0 {
        return Ok(());
    }
    do_connect(g).map_err(|e| {
        if e == libc::EINPROGRESS {
            libc::EAGAIN
        } else {
            e
        }
    })
}

pub(super) fn nonblocking(g: &Inner, flags: c_int) -> bool {
    g.fd_flags & libc::O_NONBLOCK != 0 || flags & libc::MSG_DONTWAIT != 0
}

/// `rrecv`: received data, up to `len` bytes; 0 once the peer has shut down and everything
/// is read (rdma-core's `rrecv`).
pub(super) unsafe fn recv(
    rs: &Rsock,
    buf: *mut u8,
    len: usize,
    flags: c_int,
) -> Result<usize, c_int> {
    let mut g = rs.lock();
    go_on_connecting(&mut g)?;
    let mut done = 0;
    loop {
        if !g.s.have_rdata() {
            let nb = nonblocking(&g, flags);
            let (back, r) = rs.get_comp(g, nb, Stream::conn_have_rdata);
            g = back;
            if let Err(e) = r {
                return if done == 0 { Err(e) } else { Ok(done) };
            }
        }
        let peek = flags & libc::MSG_PEEK != 0;
        done += g.s.take(buf.add(done), len - done, peek);
        if peek || done == len || flags & libc::MSG_WAITALL == 0 || g.s.state & state::READABLE == 0
        {
            return Ok(done);
        }
    }
}

/// `rsend`: what fits of `len` bytes (all of it, for a blocking socket); ECONNRESET once the
/// connection can no longer send.
pub(super) unsafe fn send(
    rs: &Rsock,
    buf: *const u8,
    len: usize,
    flags: c_int,
) -> Result<usize, c_int> {
    let mut g = rs.lock();
    go_on_connecting(&mut g)?;
    let g = send_iomaps(rs, g, flags)?;
    let mut olen = Stream::olap_start();
    transfer(rs, g, flags, len, |s, sent| {
        s.put(buf.add(sent), len - sent, &mut olen).map(Some)
    })
}

/// Waits (unless non-blocking) until the socket can send: ECONNRESET once it no longer can.
unsafe fn room<'a>(
    rs: &'a Rsock,
    g: MutexGuard<'a, Inner>,
    flags: c_int,
) -> (MutexGuard<'a, Inner>, Result<(), c_int>) {
    if g.s.can_send() {
        return (g, Ok(()));
    }
    let nb = nonblocking(&g, flags);
    let (g, r) = rs.get_comp(g, nb, Stream::conn_can_send);
    let r = r.and_then(|()| {
        if g.s.state & state::WRITABLE == 0 {
            Err(libc::ECONNRESET)
        } else {
            Ok(())
        }
    });
    (g, r)
}

/// Sends `len` bytes with `put`, which sends what fits from byte `sent` on and says how many
/// (`None`: no more can go), waiting for room in between. The bytes sent, or the error if none
/// were (rdma-core's `rsend` and `riowrite` loops).
unsafe fn transfer<'a>(
    rs: &'a Rsock,
    mut g: MutexGuard<'a, Inner>,
    flags: c_int,
    len: usize,
    mut put: impl FnMut(&mut Stream, usize) -> Result<Option<usize>, c_int>,
) -> Result<usize, c_int> {
    let mut sent = 0;
    while sent < len {
        let (back, r) = room(rs, g, flags);
        g = back;
        match r.and_then(|()| put(&mut g.s, sent)) {
            Ok(Some(n)) => sent += n,
            Ok(None) => break,
            Err(e) => return if sent == 0 { Err(e) } else { Ok(sent) },
        }
    }
    Ok(sent)
}

/// Tells the peer of mappings made since the last send (rdma-core's `rs_send_iomaps`).
unsafe fn send_iomaps<'a>(
    rs: &'a Rsock,
    mut g: MutexGuard<'a, Inner>,
    flags: c_int,
) -> Result<MutexGuard<'a, Inner>, c_int> {
    while g.s.iomap_pending() {
        let (back, r) = room(rs, g, flags);
        g = back;
        r?;
        g.s.send_next_iomap()?;
    }
    Ok(g)
}

pub(super) unsafe fn iowrite(
    rs: &Rsock,
    buf: *const u8,
    len: usize,
    offset: u64,
    flags: c_int,
) -> Result<usize, c_int> {
    let g = send_iomaps(rs, rs.lock(), flags)?;
    let mut olen = Stream::olap_start();
    // Ends early (what was written) where no mapping of the peer holds the offset.
    transfer(rs, g, flags, len, |s, sent| {
        s.put_direct(buf.add(sent), len - sent, offset + sent as u64, &mut olen)
    })
}
