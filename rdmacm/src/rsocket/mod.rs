//! rsockets: a socket API over RDMA (`rsocket`, `rbind`, `rlisten`, `raccept`, `rconnect`,
//! `rsend`/`rrecv`, `rpoll`, `riomap`/`riowrite`...), as rdma-core's librdmacm provides it and
//! speaking its protocol ([`proto`]), built like rdma-core's on the rdma_cm and verbs calls.
//!
//! A stream rsocket is a synchronous rdma_cm id (its channel's fd is the socket's number) and,
//! once connected, an RC QP ([`stream`]). A listener accepts in a thread of its own, as
//! rdma-core's listen service does, so that connections complete before `raccept` (as TCP's
//! backlog), and hands each new socket over a socket pair that `raccept` and `rpoll` read.
//! Datagram rsockets (`SOCK_DGRAM`) are not provided (ENOTSUP).

mod proto;
mod stream;

use core::ffi::{c_int, c_long, c_void};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use libc::{
    fd_set, iovec, msghdr, nfds_t, off_t, pollfd, size_t, sockaddr, socklen_t, ssize_t, timeval,
};

use crate::abi::*;
use crate::fail;
use crate::id::{self, complete, rdma_create_id, rdma_destroy_id};
use stream::{Stream, state};

const QP_MAX_SIZE: u32 = 0xfffe;
/// How long a blocking call polls before it sleeps on the completion channel (rdma-core's
/// `polling_time`, in µs).
const POLLING_TIME: Duration = Duration::from_micros(10);

/// One rsocket.
struct Rsock {
    inner: Mutex<Inner>,
    /// Held by the one thread sleeping on the socket's completion channel (rdma-core's
    /// `cq_wait_lock`): others wait here, then find what it took.
    wait: Mutex<()>,
    /// A listener's accept queue: new sockets' numbers, written by its thread, read by
    /// `raccept` (which takes no lock, so that a program spinning on a non-blocking `raccept`
    /// never holds the listener from its thread) and polled by `rpoll`.
    queue: std::sync::OnceLock<OwnedFd>,
}

struct Inner {
    s: Stream,
    fd_flags: c_int,
    so_opts: u64,
    tcp_opts: u64,
    ipv6_opts: u64,
    keepalive_time: u32,
    /// Path data given with `RDMA_ROUTE` (accepted; the route is resolved as without it).
    route: Option<Vec<u8>>,
    listener: Option<Listener>,
}

/// The thread that fills a listening socket's accept queue.
struct Listener {
    /// Closed to stop the thread.
    stop: Option<OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

static SOCKETS: Mutex<Option<HashMap<c_int, Arc<Rsock>>>> = Mutex::new(None);

fn sockets() -> MutexGuard<'static, Option<HashMap<c_int, Arc<Rsock>>>> {
    SOCKETS.lock().unwrap_or_else(|e| e.into_inner())
}

fn lookup(fd: c_int) -> Option<Arc<Rsock>> {
    sockets().as_ref()?.get(&fd).cloned()
}

fn insert(fd: c_int, s: Stream, inherit: Option<&Inner>) -> Arc<Rsock> {
    let rs = Arc::new(Rsock {
        inner: Mutex::new(Inner {
            s,
            fd_flags: 0,
            so_opts: inherit.map_or(0, |i| i.so_opts),
            tcp_opts: inherit.map_or(0, |i| i.tcp_opts),
            ipv6_opts: inherit.map_or(0, |i| i.ipv6_opts),
            keepalive_time: inherit.map_or(0, |i| i.keepalive_time),
            route: None,
            listener: None,
        }),
        wait: Mutex::new(()),
        queue: std::sync::OnceLock::new(),
    });
    sockets()
        .get_or_insert_with(HashMap::new)
        .insert(fd, rs.clone());
    rs
}

impl Rsock {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The fd of the id's event channel.
unsafe fn cm_fd(s: &Stream) -> c_int {
    (*(*s.id).channel).fd
}

unsafe fn comp_fd(s: &Stream) -> Option<c_int> {
    let ch = (*s.id).recv_cq_channel;
    (!ch.is_null()).then(|| (*ch).fd)
}

fn readable(fd: c_int) -> bool {
    let mut p = pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, 0) > 0 }
}

/// Takes the id's next event, for a connected socket: a disconnect ends the connection
/// (rdma-core's connect service, `rs_handle_cm_event`).
unsafe fn cm_event(g: &mut Inner) {
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

impl Rsock {
    /// Takes completions until `test` holds: at once (`nonblock`: EWOULDBLOCK otherwise), or
    /// sleeping on the completion channel (rdma-core's `rs_process_cq`). A disconnect wakes it
    /// too.
    unsafe fn process<'a>(
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
    unsafe fn get_comp<'a>(
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

fn nonblocking(g: &Inner, flags: c_int) -> bool {
    g.fd_flags & libc::O_NONBLOCK != 0 || flags & libc::MSG_DONTWAIT != 0
}

/// Moves a connecting socket on (rdma-core's `rs_do_connect`): resolve the address and the
/// route, make the QP and buffers, connect with the connection data, and take the peer's. A
/// non-blocking socket stops where it would wait (EINPROGRESS) and goes on when called again.
unsafe fn do_connect(g: &mut Inner) -> Result<(), c_int> {
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

unsafe fn listen(rs: &Arc<Rsock>, backlog: c_int) -> Result<(), c_int> {
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

fn set_nonblock(fd: c_int, on: bool) -> c_int {
    // SAFETY: fcntl on an fd the caller owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        let flags = if on {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        libc::fcntl(fd, libc::F_SETFL, flags)
    }
}

unsafe fn accept(rs: &Rsock, addr: *mut sockaddr, len: *mut socklen_t) -> Result<c_int, c_int> {
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

/// `rrecv`: received data, up to `len` bytes; 0 once the peer has shut down and everything
/// is read (rdma-core's `rrecv`).
unsafe fn recv(rs: &Rsock, buf: *mut u8, len: usize, flags: c_int) -> Result<usize, c_int> {
    let mut g = rs.lock();
    if g.s.state & state::OPENING != 0 {
        do_connect(&mut g).map_err(|e| {
            if e == libc::EINPROGRESS {
                libc::EAGAIN
            } else {
                e
            }
        })?;
    }
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
unsafe fn send(rs: &Rsock, buf: *const u8, len: usize, flags: c_int) -> Result<usize, c_int> {
    let mut g = rs.lock();
    if g.s.state & state::OPENING != 0 {
        do_connect(&mut g).map_err(|e| {
            if e == libc::EINPROGRESS {
                libc::EAGAIN
            } else {
                e
            }
        })?;
    }
    g = send_iomaps(rs, g, flags)?;
    let mut olen = Stream::olap_start();
    let mut sent = 0;
    while sent < len {
        if !g.s.can_send() {
            let nb = nonblocking(&g, flags);
            let (back, r) = rs.get_comp(g, nb, Stream::conn_can_send);
            g = back;
            let r = r.and_then(|()| {
                if g.s.state & state::WRITABLE == 0 {
                    Err(libc::ECONNRESET)
                } else {
                    Ok(())
                }
            });
            if let Err(e) = r {
                return if sent == 0 { Err(e) } else { Ok(sent) };
            }
        }
        match g.s.put(buf.add(sent), len - sent, &mut olen) {
            Ok(n) => sent += n,
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
        if !g.s.can_send() {
            let nb = nonblocking(&g, flags);
            let (back, r) = rs.get_comp(g, nb, Stream::conn_can_send);
            g = back;
            r?;
            if g.s.state & state::WRITABLE == 0 {
                return Err(libc::ECONNRESET);
            }
        }
        g.s.send_next_iomap()?;
    }
    Ok(g)
}

unsafe fn iowrite(
    rs: &Rsock,
    buf: *const u8,
    len: usize,
    offset: u64,
    flags: c_int,
) -> Result<usize, c_int> {
    let mut g = send_iomaps(rs, rs.lock(), flags)?;
    let mut olen = Stream::olap_start();
    let mut sent = 0;
    while sent < len {
        if !g.s.can_send() {
            let nb = nonblocking(&g, flags);
            let (back, r) = rs.get_comp(g, nb, Stream::conn_can_send);
            g = back;
            let r = r.and_then(|()| {
                if g.s.state & state::WRITABLE == 0 {
                    Err(libc::ECONNRESET)
                } else {
                    Ok(())
                }
            });
            if let Err(e) = r {
                return if sent == 0 { Err(e) } else { Ok(sent) };
            }
        }
        match g
            .s
            .put_direct(buf.add(sent), len - sent, offset + sent as u64, &mut olen)
        {
            Ok(Some(n)) => sent += n,
            // No mapping of the peer holds the offset: what was written.
            Ok(None) => return Ok(sent),
            Err(e) => return if sent == 0 { Err(e) } else { Ok(sent) },
        }
    }
    Ok(sent)
}

/// rdma-core's `rshutdown`: tells the peer (a control message), waits for the sends to
/// complete, and once disconnected moves the QP to the error state.
unsafe fn shutdown(rs: &Rsock, how: c_int) -> Result<(), c_int> {
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

unsafe fn close(fd: c_int) -> c_int {
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
unsafe fn rpoll_impl(fds: &mut [pollfd], timeout: c_int) -> c_int {
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

/// Reads an `int` option value.
unsafe fn int_opt(val: *const c_void, len: socklen_t) -> Result<c_int, c_int> {
    if val.is_null() || (len as usize) < size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    Ok(*val.cast::<c_int>())
}

unsafe fn setsockopt(
    g: &mut Inner,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> Result<(), c_int> {
    let v = int_opt(val, len);
    let (bits, on): (Option<&mut u64>, bool) = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
            // rdma_cm refuses it once bound; rdma-core then keeps the socket's own flag.
            let _ = crate::id::rdma_set_option(
                g.s.id,
                RDMA_OPTION_ID,
                RDMA_OPTION_ID_REUSEADDR,
                val.cast_mut(),
                len as usize,
            );
            (Some(&mut g.so_opts), v? != 0)
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            if !g.s.has_buffers() {
                g.s.rbuf_size = (v? as u32) << 1;
            }
            (None, false)
        }
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            if !g.s.has_buffers() {
                g.s.sbuf_size = ((v? as u32) << 1).max(2048 << 1);
            }
            (None, false)
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if val.is_null() || (len as usize) < size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            // Inverted, so that the default (0) is on.
            (
                Some(&mut g.so_opts),
                (*val.cast::<libc::linger>()).l_onoff == 0,
            )
        }
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
            if v? != 0 && g.keepalive_time == 0 {
                g.keepalive_time = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time")
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                    .unwrap_or(7200);
            }
            (Some(&mut g.so_opts), v? != 0)
        }
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => (Some(&mut g.so_opts), v? != 0),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG) => {
            (None, false)
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            if v? <= 0 {
                return Err(libc::EINVAL);
            }
            g.keepalive_time = v? as u32;
            (None, false)
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => (Some(&mut g.tcp_opts), v? != 0),
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
            if crate::id::rdma_set_option(
                g.s.id,
                RDMA_OPTION_ID,
                RDMA_OPTION_ID_AFONLY,
                val.cast_mut(),
                len as usize,
            ) != 0
            {
                return Err(errno());
            }
            (Some(&mut g.ipv6_opts), v? != 0)
        }
        (SOL_RDMA, _) if g.s.state >= state::OPENING => return Err(libc::EINVAL),
        (SOL_RDMA, RDMA_SQSIZE) => {
            g.s.sq_size = (v? as u32).min(QP_MAX_SIZE) as u16;
            (None, false)
        }
        (SOL_RDMA, RDMA_RQSIZE) => {
            g.s.rq_size = (v? as u32).min(QP_MAX_SIZE) as u16;
            (None, false)
        }
        (SOL_RDMA, RDMA_INLINE) => {
            g.s.sq_inline = (v? as u32).min(QP_MAX_SIZE) as u16;
            (None, false)
        }
        (SOL_RDMA, RDMA_IOMAPSIZE) => {
            let scaled = proto::value_to_scale(v? as u32, 8) as u8;
            g.s.target_iomap_size = proto::scale_to_value(u32::from(scaled), 8) as u16;
            (None, false)
        }
        (SOL_RDMA, RDMA_ROUTE) => {
            if val.is_null() {
                return Err(libc::EINVAL);
            }
            g.route = Some(std::slice::from_raw_parts(val.cast::<u8>(), len as usize).to_vec());
            (None, false)
        }
        _ => return Err(libc::EOPNOTSUPP),
    };
    if let Some(bits) = bits {
        if on {
            *bits |= 1 << name;
        } else {
            *bits &= !(1 << name);
        }
    }
    Ok(())
}

unsafe fn getsockopt(
    g: &mut Inner,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> Result<(), c_int> {
    if val.is_null() || len.is_null() {
        return Err(libc::EINVAL);
    }
    let bit = |bits: u64| c_int::from(bits & (1 << name) != 0);
    let v = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            bit(g.so_opts)
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => g.s.rbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => g.s.sbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if (*len as usize) < size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            *val.cast::<libc::linger>() = libc::linger {
                l_onoff: 1 - bit(g.so_opts),
                l_linger: 0,
            };
            *len = size_of::<libc::linger>() as socklen_t;
            return Ok(());
        }
        (libc::SOL_SOCKET, libc::SO_ERROR) => std::mem::take(&mut g.s.err),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => 1,
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => g.keepalive_time as c_int,
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => bit(g.tcp_opts),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
            let route = &(*g.s.id).route;
            if route.num_paths > 0 && !route.path_rec.is_null() {
                1 << (7 + c_int::from((*route.path_rec).mtu))
            } else {
                2048
            }
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => bit(g.ipv6_opts),
        (SOL_RDMA, RDMA_SQSIZE) => c_int::from(g.s.sq_size),
        (SOL_RDMA, RDMA_RQSIZE) => c_int::from(g.s.rq_size),
        (SOL_RDMA, RDMA_INLINE) => c_int::from(g.s.sq_inline),
        (SOL_RDMA, RDMA_IOMAPSIZE) => c_int::from(g.s.target_iomap_size),
        _ => return Err(libc::EOPNOTSUPP),
    };
    if (*len as usize) < size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    *val.cast::<c_int>() = v;
    *len = size_of::<c_int>() as socklen_t;
    Ok(())
}

/// Copies `src` into the caller's address buffer, as much as fits; `*len` becomes its size
/// (rdma-core's `rs_copy_addr`).
unsafe fn copy_addr(
    dst: *mut sockaddr,
    src: &libc::sockaddr_storage,
    len: *mut socklen_t,
) -> c_int {
    if dst.is_null() || len.is_null() {
        return fail(libc::EINVAL);
    }
    let size = if c_int::from(src.ss_family) == libc::AF_INET {
        size_of::<libc::sockaddr_in>()
    } else {
        size_of::<libc::sockaddr_in6>()
    };
    let n = (*len as usize).min(size);
    std::ptr::copy_nonoverlapping(
        (src as *const libc::sockaddr_storage).cast::<u8>(),
        dst.cast(),
        n,
    );
    *len = size as socklen_t;
    0
}

/// `ssize_t` results: the count, or -1 with errno.
fn count(r: Result<usize, c_int>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => fail(e) as ssize_t,
    }
}

fn status(r: Result<(), c_int>) -> c_int {
    r.map_or_else(fail, |()| 0)
}

/// The socket, or EBADF.
macro_rules! socket {
    ($fd:expr) => {
        match lookup($fd) {
            Some(rs) => rs,
            None => return fail(libc::EBADF) as _,
        }
    };
}

/// Iovecs one after another (rdma-core sends them all; it receives into the first only).
unsafe fn each_iov(
    iov: *const iovec,
    n: c_int,
    mut f: impl FnMut(*mut u8, usize) -> Result<usize, c_int>,
) -> Result<usize, c_int> {
    if iov.is_null() || n < 0 {
        return Err(libc::EINVAL);
    }
    let mut total = 0;
    for v in std::slice::from_raw_parts(iov, n as usize) {
        match f(v.iov_base.cast(), v.iov_len) {
            Ok(k) => {
                total += k;
                if k < v.iov_len {
                    break;
                }
            }
            Err(e) if total == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(total)
}

exported! {
    /// `rsocket`: a stream socket (AF_INET or AF_INET6, TCP or protocol 0). Datagram rsockets
    /// are not provided (ENOTSUP).
    fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
        let family = domain == libc::AF_INET || domain == libc::AF_INET6 || domain == libc::AF_IB;
        if !family || kind != libc::SOCK_STREAM || (protocol != 0 && protocol != libc::IPPROTO_TCP) {
            return fail(libc::EOPNOTSUPP);
        }
        let mut id: *mut rdma_cm_id = std::ptr::null_mut();
        if rdma_create_id(std::ptr::null_mut(), &mut id, std::ptr::null_mut(), RDMA_PS_TCP) != 0 {
            return -1;
        }
        (*id).route.addr.src.src_storage.ss_family = domain as libc::sa_family_t;
        let s = Stream::new(id, None);
        let fd = cm_fd(&s);
        insert(fd, s, None);
        fd
    }

    /// `rbind`.
    fn rbind(socket: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
        let _ = len;
        let rs = socket!(socket);
        let mut g = rs.lock();
        if id::rdma_bind_addr(g.s.id, addr.cast_mut()) != 0 {
            return -1;
        }
        g.s.state = state::BOUND;
        0
    }

    /// `rlisten`: connections are accepted from now on, in the background.
    fn rlisten(socket: c_int, backlog: c_int) -> c_int {
        let rs = socket!(socket);
        status(listen(&rs, backlog))
    }

    /// `raccept`: the next connection (EAGAIN on a non-blocking socket with none).
    fn raccept(socket: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
        let rs = socket!(socket);
        accept(&rs, addr, len).unwrap_or_else(fail)
    }

    /// `rconnect`: EINPROGRESS on a non-blocking socket (then `rpoll` for POLLOUT and
    /// `rgetsockopt(SO_ERROR)`).
    fn rconnect(socket: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
        let rs = socket!(socket);
        if addr.is_null() || len as usize > size_of::<libc::sockaddr_storage>() {
            return fail(libc::EINVAL);
        }
        let mut g = rs.lock();
        let dst = (&raw mut (*g.s.id).route.addr.dst.dst_storage).cast::<u8>();
        std::ptr::copy_nonoverlapping(addr.cast::<u8>(), dst, len as usize);
        status(do_connect(&mut g))
    }

    /// `rshutdown`.
    fn rshutdown(socket: c_int, how: c_int) -> c_int {
        let rs = socket!(socket);
        status(shutdown(&rs, how))
    }

    /// `rclose`: shuts the connection down (or stops listening) and frees the socket.
    fn rclose(socket: c_int) -> c_int {
        close(socket)
    }

    /// `rrecv`.
    fn rrecv(socket: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
        let rs = socket!(socket);
        count(recv(&rs, buf.cast(), len, flags))
    }

    /// `rrecvfrom`: as `rrecv`, with the peer's address.
    fn rrecvfrom(socket: c_int, buf: *mut c_void, len: size_t, flags: c_int, src: *mut sockaddr, alen: *mut socklen_t) -> ssize_t {
        let rs = socket!(socket);
        let r = recv(&rs, buf.cast(), len, flags);
        if matches!(r, Ok(n) if n > 0) && !src.is_null() {
            rgetpeername(socket, src, alen);
        }
        count(r)
    }

    /// `rrecvmsg`: into the first iovec, without control data (ENOTSUP), as rdma-core.
    fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
        let rs = socket!(socket);
        if msg.is_null() {
            return fail(libc::EINVAL) as ssize_t;
        }
        let m = &*msg;
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return fail(libc::EOPNOTSUPP) as ssize_t;
        }
        if m.msg_iovlen == 0 {
            return 0;
        }
        let _ = flags;
        count(recv(&rs, (*m.msg_iov).iov_base.cast(), (*m.msg_iov).iov_len, m.msg_flags))
    }

    /// `rsend`.
    fn rsend(socket: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
        let rs = socket!(socket);
        count(send(&rs, buf.cast(), len, flags))
    }

    /// `rsendto`: a stream socket is connected: the address is ignored, as rdma-core does.
    fn rsendto(socket: c_int, buf: *const c_void, len: size_t, flags: c_int, dst: *const sockaddr, alen: socklen_t) -> ssize_t {
        let _ = (dst, alen);
        let rs = socket!(socket);
        count(send(&rs, buf.cast(), len, flags))
    }

    /// `rsendmsg`: every iovec, without control data.
    fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
        let rs = socket!(socket);
        if msg.is_null() {
            return fail(libc::EINVAL) as ssize_t;
        }
        let m = &*msg;
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return fail(libc::EOPNOTSUPP) as ssize_t;
        }
        count(each_iov(m.msg_iov, m.msg_iovlen as c_int, |b, l| send(&rs, b, l, flags)))
    }

    /// `rread`.
    fn rread(socket: c_int, buf: *mut c_void, count_: size_t) -> ssize_t {
        let rs = socket!(socket);
        count(recv(&rs, buf.cast(), count_, 0))
    }

    /// `rreadv`: into the first iovec, as rdma-core.
    fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
        let rs = socket!(socket);
        if iov.is_null() || iovcnt <= 0 {
            return fail(libc::EINVAL) as ssize_t;
        }
        count(recv(&rs, (*iov).iov_base.cast(), (*iov).iov_len, 0))
    }

    /// `rwrite`.
    fn rwrite(socket: c_int, buf: *const c_void, count_: size_t) -> ssize_t {
        let rs = socket!(socket);
        count(send(&rs, buf.cast(), count_, 0))
    }

    /// `rwritev`.
    fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
        let rs = socket!(socket);
        count(each_iov(iov, iovcnt, |b, l| send(&rs, b, l, 0)))
    }

    /// `rpoll`: rsockets and other fds together.
    fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
        if fds.is_null() && nfds > 0 {
            return fail(libc::EFAULT);
        }
        let fds = if nfds == 0 { &mut [][..] } else { std::slice::from_raw_parts_mut(fds, nfds as usize) };
        rpoll_impl(fds, timeout)
    }

    /// `rselect`, through `rpoll`.
    fn rselect(nfds: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *mut timeval) -> c_int {
        let mut fds: Vec<pollfd> = Vec::new();
        for fd in 0..nfds.max(0) {
            let mut events = 0;
            if !r.is_null() && libc::FD_ISSET(fd, r) {
                events |= libc::POLLIN;
            }
            if !w.is_null() && libc::FD_ISSET(fd, w) {
                events |= libc::POLLOUT;
            }
            if events != 0 || (!e.is_null() && libc::FD_ISSET(fd, e)) {
                fds.push(pollfd { fd, events, revents: 0 });
            }
        }
        let ms = if timeout.is_null() {
            -1
        } else {
            ((*timeout).tv_sec * 1000 + (*timeout).tv_usec / 1000) as c_int
        };
        let ret = rpoll_impl(&mut fds, ms);
        for set in [r, w, e] {
            if !set.is_null() {
                libc::FD_ZERO(set);
            }
        }
        if ret <= 0 {
            return ret;
        }
        let mut n = 0;
        for f in &fds {
            if !r.is_null() && f.revents & (libc::POLLIN | libc::POLLHUP) != 0 {
                libc::FD_SET(f.fd, r);
                n += 1;
            }
            if !w.is_null() && f.revents & libc::POLLOUT != 0 {
                libc::FD_SET(f.fd, w);
                n += 1;
            }
            if !e.is_null() && f.revents & !(libc::POLLIN | libc::POLLOUT) != 0 {
                libc::FD_SET(f.fd, e);
                n += 1;
            }
        }
        n
    }

    /// `rgetpeername`.
    fn rgetpeername(socket: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
        let rs = socket!(socket);
        let g = rs.lock();
        copy_addr(addr, &(*g.s.id).route.addr.dst.dst_storage, len)
    }

    /// `rgetsockname`.
    fn rgetsockname(socket: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
        let rs = socket!(socket);
        let g = rs.lock();
        copy_addr(addr, &(*g.s.id).route.addr.src.src_storage, len)
    }

    /// `rsetsockopt`: SO_REUSEADDR, SO_RCVBUF, SO_SNDBUF, SO_LINGER, SO_KEEPALIVE,
    /// SO_OOBINLINE, TCP_NODELAY, TCP_KEEPIDLE (and TCP_KEEPCNT, TCP_KEEPINTVL, TCP_MAXSEG,
    /// which mean nothing on RC), IPV6_V6ONLY, and SOL_RDMA's sizes before connecting.
    fn rsetsockopt(socket: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int {
        let rs = socket!(socket);
        let mut g = rs.lock();
        status(setsockopt(&mut g, level, name, val, len))
    }

    /// `rgetsockopt` (SO_ERROR: the connect error, once).
    fn rgetsockopt(socket: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut socklen_t) -> c_int {
        let rs = socket!(socket);
        let mut g = rs.lock();
        status(getsockopt(&mut g, level, name, val, len))
    }

    /// `rfcntl`: F_GETFL and F_SETFL (O_NONBLOCK).
    fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> c_int {
        let rs = socket!(socket);
        let mut g = rs.lock();
        match cmd {
            libc::F_GETFL => g.fd_flags,
            libc::F_SETFL => {
                let arg = arg as c_int;
                let on = arg & libc::O_NONBLOCK != 0;
                if let Some(c) = comp_fd(&g.s) {
                    set_nonblock(c, on);
                }
                if let Some(q) = rs.queue.get() {
                    set_nonblock(q.as_raw_fd(), on);
                } else if g.s.state < state::CONNECTED {
                    set_nonblock(cm_fd(&g.s), on);
                }
                g.fd_flags = arg;
                0
            }
            _ => fail(libc::EOPNOTSUPP),
        }
    }

    /// `riomap`: maps `len` bytes at `buf` at `offset` (-1: the buffer's address) for the peer
    /// to `riowrite` into (PROT_WRITE), or only registers them (PROT_NONE).
    fn riomap(socket: c_int, buf: *mut c_void, len: size_t, prot: c_int, flags: c_int, offset: off_t) -> off_t {
        let _ = flags;
        let rs = socket!(socket);
        let mut g = rs.lock();
        if (*g.s.id).pd.is_null() || prot & !libc::PROT_WRITE != 0 {
            return fail(libc::EINVAL) as off_t;
        }
        let offset = if offset == -1 { buf as u64 } else { offset as u64 };
        match g.s.map(buf, len, prot & libc::PROT_WRITE != 0, offset) {
            Ok(o) => o as off_t,
            Err(e) => fail(e) as off_t,
        }
    }

    /// `riounmap`: EINVAL for no such mapping.
    fn riounmap(socket: c_int, buf: *mut c_void, len: size_t) -> c_int {
        let rs = socket!(socket);
        let mut g = rs.lock();
        if g.s.unmap(buf, len) { 0 } else { fail(libc::EINVAL) }
    }

    /// `riowrite`: RDMA WRITEs into the peer's mapping at `offset`; the bytes written.
    fn riowrite(socket: c_int, buf: *const c_void, count_: size_t, offset: off_t, flags: c_int) -> size_t {
        let rs = socket!(socket);
        count(iowrite(&rs, buf.cast(), count_, offset as u64, flags)) as size_t
    }
}
