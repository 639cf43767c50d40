//! A stream rsocket's connection: connecting (rdma-core's `rs_do_connect`), listening and
//! accepting in a thread of the listener's own, CM events, shutting down and closing.

use core::ffi::c_int;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use libc::{pollfd, sockaddr, socklen_t};

use super::stream::{Stream, state};
use super::{
    Inner, Listener, Rsock, cm_fd, errno, insert, lookup, proto, rgetpeername, set_nonblock,
    sockets,
};
use crate::abi::*;
use crate::id::{complete, rdma_destroy_id};

/// Takes the id's next event, for a connected socket: a disconnect ends the connection
/// (rdma-core's connect service, `rs_handle_cm_event`).
pub(super) unsafe fn cm_event(g: &mut Inner) {
    if g.s.state & state::OPENING != 0 {
        let _ = do_connect(g);
        return;
    }
    if complete(g.s.id).is_ok() {
        let ev = (*g.s.id).event;
        if !ev.is_null()
            && (*ev).event == RDMA_CM_EVENT_DISCONNECTED
            && g.s.state & state::CONNECTED != 0
        {
            g.s.state = state::DISCONNECTED;
        }
    }
}

/// Moves a connecting socket on (rdma-core's `rs_do_connect`): resolve the address and the
/// route, make the QP and buffers, connect with the connection data, and take the peer's. A
/// non-blocking socket stops where it would wait (EINPROGRESS) and goes on when called again.
pub(super) unsafe fn do_connect(g: &mut Inner) -> Result<(), c_int> {
    let s = &mut g.s;
    let id = s.id;
    let step = |r: c_int| if r == 0 { Ok(()) } else { Err(errno()) };
    let result = (|| {
        if s.state & state::OPENING == 0 {
            match s.state {
                state::INIT | state::BOUND => {}
                st if st & (state::CONNECT_ERROR | state::DISCONNECTED | state::ERROR) != 0 => {
                    return Err(libc::ENOTCONN);
                }
                st if st & state::CONNECTED != 0 => return Ok(()),
                _ => return Err(libc::EINVAL),
            }
            let dst = (&raw mut (*id).route.addr.dst.dst_storage).cast::<sockaddr>();
            s.state = state::RESOLVING_ADDR;
            step(crate::id::rdma_resolve_addr(
                id,
                std::ptr::null_mut(),
                dst,
                2000,
            ))?;
            s.state = state::RESOLVING_ROUTE;
            step(crate::id::rdma_resolve_route(id, 2000))?;
            return connect(s);
        }
        match s.state {
            state::RESOLVING_ADDR => {
                complete(id)?;
                s.state = state::RESOLVING_ROUTE;
                step(crate::id::rdma_resolve_route(id, 2000))?;
                connect(s)
            }
            state::RESOLVING_ROUTE => {
                complete(id)?;
                connect(s)
            }
            state::CONNECTING => {
                complete(id)?;
                connected(s)
            }
            state::ACCEPTING => {
                complete(id)?;
                s.state = state::CONNECT_RDWR;
                Ok(())
            }
            _ => Err(libc::EINVAL),
        }
    })();
    match result {
        Err(e) if e == libc::EAGAIN || e == libc::EWOULDBLOCK => Err(libc::EINPROGRESS),
        Err(e) => {
            if g.s.state & state::OPENING != 0
                || g.s.state == state::INIT
                || g.s.state == state::BOUND
            {
                g.s.state = state::CONNECT_ERROR;
                g.s.err = e;
            }
            Err(e)
        }
        ok => ok,
    }
}

/// The QP and buffers made, the REQ sent with this side's connection data.
unsafe fn connect(s: &mut Stream) -> Result<(), c_int> {
    if !s.has_buffers() {
        s.create_ep()?;
    }
    let data = s.conn_data().to_bytes();
    let mut param: rdma_conn_param = std::mem::zeroed();
    param.private_data = data.as_ptr().cast();
    param.private_data_len = data.len() as u8;
    param.flow_control = 1;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    s.state = state::CONNECTING;
    if crate::id::rdma_connect(s.id, &mut param) != 0 {
        return Err(errno());
    }
    connected(s)
}

/// The peer's connection data, from the REP.
unsafe fn connected(s: &mut Stream) -> Result<(), c_int> {
    let ev = (*s.id).event;
    let conn = (!ev.is_null())
        .then(|| {
            let c = &(*ev).param.conn;
            let data = std::slice::from_raw_parts(
                c.private_data.cast::<u8>(),
                if c.private_data.is_null() {
                    0
                } else {
                    usize::from(c.private_data_len)
                },
            );
            proto::ConnData::parse(data)
        })
        .flatten()
        .ok_or(libc::EOPNOTSUPP)?;
    s.save_conn_data(&conn);
    s.state = state::CONNECT_RDWR;
    Ok(())
}

/// Accepts the listener's next connection request (rdma-core's `rs_accept`): the new socket's
/// number, or `None` when none waits (or it was refused).
unsafe fn accept_one(listener: &Rsock) -> Option<c_int> {
    let (lid, template) = {
        let g = listener.lock();
        (g.s.id, Stream::new(std::ptr::null_mut(), Some(&g.s)))
    };
    let mut nid: *mut rdma_cm_id = std::ptr::null_mut();
    if crate::id::rdma_get_request(lid, &mut nid) != 0 {
        return None;
    }
    let mut s = Stream::new(nid, Some(&template));
    let made = (|| {
        let ev = (*nid).event;
        let c = &(*ev).param.conn;
        let data = if c.private_data.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(c.private_data.cast::<u8>(), usize::from(c.private_data_len))
        };
        let peer = proto::ConnData::parse(data).ok_or(libc::EPROTO)?;
        s.create_ep()?;
        s.save_conn_data(&peer);
        let mine = s.conn_data().to_bytes();
        let mut param = *c;
        param.private_data = mine.as_ptr().cast();
        param.private_data_len = mine.len() as u8;
        if crate::id::rdma_accept(nid, &mut param) == 0 {
            s.state = state::CONNECT_RDWR;
            Ok(())
        } else {
            match errno() {
                e if e == libc::EAGAIN || e == libc::EWOULDBLOCK => {
                    s.state = state::ACCEPTING;
                    Ok(())
                }
                e => Err(e),
            }
        }
    })();
    if made.is_err() {
        crate::id::rdma_reject(nid, std::ptr::null(), 0);
        s.release();
        rdma_destroy_id(nid);
        return None;
    }
    let fd = cm_fd(&s);
    let inherit = listener.lock();
    insert(fd, s, Some(&inherit));
    Some(fd)
}

/// The listener's thread: accepts each connection request as it comes, until stopped.
fn listen_thread(listener: Arc<Rsock>, cm: c_int, stop: c_int, queue: c_int) {
    loop {
        let mut p = [
            pollfd {
                fd: cm,
                events: libc::POLLIN,
                revents: 0,
            },
            pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        if unsafe { libc::poll(p.as_mut_ptr(), 2, -1) } < 0 {
            continue;
        }
        if p[1].revents != 0 {
            return;
        }
        // SAFETY: the listener's id lives until this thread is joined.
        while let Some(fd) = unsafe { accept_one(&listener) } {
            let bytes = fd.to_ne_bytes();
            // SAFETY: writes 4 bytes from a live buffer.
            unsafe { libc::write(queue, bytes.as_ptr().cast(), bytes.len()) };
        }
    }
}

pub(super) unsafe fn listen(rs: &Arc<Rsock>, backlog: c_int) -> Result<(), c_int> {
    let mut g = rs.lock();
    if g.s.state == state::LISTENING {
        return Ok(());
    }
    if crate::id::rdma_listen(g.s.id, backlog) != 0 {
        return Err(errno());
    }
    let mut pair = [0; 2];
    if libc::socketpair(
        libc::AF_UNIX,
        libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
        0,
        pair.as_mut_ptr(),
    ) != 0
    {
        return Err(errno());
    }
    let (queue, feed) = (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1]));
    let mut p = [0; 2];
    if libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
        return Err(errno());
    }
    let (stop_r, stop_w) = (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1]));
    if g.fd_flags & libc::O_NONBLOCK != 0 {
        set_nonblock(queue.as_raw_fd(), true);
    }
    let cm = cm_fd(&g.s);
    set_nonblock(cm, true);
    let listener = rs.clone();
    let thread = std::thread::Builder::new()
        .name("rsocket-listen".into())
        .spawn(move || {
            let (stop, feed) = (stop_r, feed);
            listen_thread(listener, cm, stop.as_raw_fd(), feed.as_raw_fd());
        })
        .map_err(|_| libc::EAGAIN)?;
    let _ = rs.queue.set(queue);
    g.listener = Some(Listener {
        stop: Some(stop_w),
        thread: Some(thread),
    });
    g.s.state = state::LISTENING;
    Ok(())
}

pub(super) unsafe fn accept(
    rs: &Rsock,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> Result<c_int, c_int> {
    let Some(queue) = rs.queue.get().map(AsRawFd::as_raw_fd) else {
        return Err(libc::EBADF);
    };
    let mut fd = [0u8; 4];
    let n = libc::read(queue, fd.as_mut_ptr().cast(), 4);
    if n != 4 {
        return Err(if n < 0 { errno() } else { libc::EIO });
    }
    let fd = c_int::from_ne_bytes(fd);
    if !addr.is_null() && !len.is_null() {
        rgetpeername(fd, addr, len);
    }
    Ok(fd)
}

/// rdma-core's `rshutdown`: tells the peer (a control message), waits for the sends to
/// complete, and once disconnected moves the QP to the error state.
pub(super) unsafe fn shutdown(rs: &Rsock, how: c_int) -> Result<(), c_int> {
    let mut g = rs.lock();
    let mut ret = Ok(());
    'out: {
        if g.s.state & state::CONNECTED != 0 {
            let ctrl = match how {
                libc::SHUT_RDWR => {
                    g.s.state &= !(state::READABLE | state::WRITABLE);
                    proto::CTRL_DISCONNECT
                }
                libc::SHUT_WR => {
                    g.s.state &= !state::WRITABLE;
                    if g.s.state & state::READABLE != 0 {
                        proto::CTRL_SHUTDOWN
                    } else {
                        proto::CTRL_DISCONNECT
                    }
                }
                _ => {
                    g.s.state &= !state::READABLE;
                    if g.s.state & state::WRITABLE != 0 {
                        break 'out;
                    }
                    proto::CTRL_DISCONNECT
                }
            };
            if !g.s.ctrl_ready() {
                let (back, r) = rs.process(g, false, Stream::conn_can_send_ctrl);
                g = back;
                if r.is_err() {
                    ret = r;
                    break 'out;
                }
            }
            if g.s.state & state::CONNECTED != 0 && g.s.ctrl_ready() {
                ret = g.s.send_ctrl(ctrl);
            }
        }
        if g.s.state & state::CONNECTED != 0 {
            let (back, _) = rs.process(g, false, Stream::conn_all_sends_done);
            g = back;
        }
    }
    if g.s.state & state::DISCONNECTED != 0 && !(*g.s.id).qp.is_null() {
        // Flushes the receives, so that a sleeper in rpoll wakes.
        let _ = crate::qp::modify_err(g.s.id);
    }
    ret
}

pub(super) unsafe fn close(fd: c_int) -> c_int {
    let Some(rs) = lookup(fd) else {
        return libc::EBADF;
    };
    if rs.lock().s.state & state::CONNECTED != 0 {
        let _ = shutdown(&rs, libc::SHUT_RDWR);
    }
    let listener = rs.lock().listener.take();
    if let Some(mut l) = listener {
        drop(l.stop.take());
        if let Some(t) = l.thread.take() {
            let _ = t.join();
        }
        // Connections accepted and never taken go too.
        if let Some(q) = rs.queue.get().map(AsRawFd::as_raw_fd) {
            let mut fd = [0u8; 4];
            set_nonblock(q, true);
            while libc::read(q, fd.as_mut_ptr().cast(), 4) == 4 {
                close(c_int::from_ne_bytes(fd));
            }
        }
    }
    if let Some(map) = sockets().as_mut() {
        map.remove(&fd);
    }
    let mut g = rs.lock();
    g.s.release();
    rdma_destroy_id(g.s.id);
    0
}
