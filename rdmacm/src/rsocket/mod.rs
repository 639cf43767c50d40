//! rsockets: a socket API over RDMA (`rsocket`, `rbind`, `rlisten`, `raccept`, `rconnect`,
//! `rsend`/`rrecv`, `rpoll`, `riomap`/`riowrite`...), as rdma-core's librdmacm provides it and
//! speaking its protocol ([`proto`]), built like rdma-core's on the rdma_cm and verbs calls.
//!
//! A stream rsocket is a synchronous rdma_cm id (its channel's fd is the socket's number) and,
//! once connected, an RC QP ([`stream`]). A listener accepts in a thread of its own, as
//! rdma-core's listen service does, so that connections complete before `raccept` (as TCP's
//! backlog), and hands each new socket over a socket pair that `raccept` and `rpoll` read.
//! Datagram rsockets (`SOCK_DGRAM`) are not provided (ENOTSUP).

mod connection;
mod epoll;
mod options;
mod poll;
mod proto;
mod stream;
mod transfer;

use core::ffi::{c_int, c_long, c_void};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use libc::{
    fd_set, iovec, msghdr, nfds_t, off_t, pollfd, size_t, sockaddr, socklen_t, ssize_t, timeval,
};

use crate::abi::*;
use crate::fail;
use crate::id::{self, rdma_create_id};
use connection::{accept, close, do_connect, listen, shutdown};
use options::{getsockopt, setsockopt};
use poll::rpoll_impl;
use stream::{Stream, state};
use transfer::{iowrite, recv, send};

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

/// A message header without control data (EOPNOTSUPP, as rdma-core: rsockets carry none).
unsafe fn plain<'a>(msg: *const msghdr) -> Result<&'a msghdr, c_int> {
    let m = msg.as_ref().ok_or(libc::EINVAL)?;
    if !m.msg_control.is_null() && m.msg_controllen > 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(m)
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
        epoll::close(socket).unwrap_or_else(|| close(socket))
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
        let _ = flags;
        let rs = socket!(socket);
        let m = match plain(msg) {
            Ok(m) => m,
            Err(e) => return fail(e) as ssize_t,
        };
        if m.msg_iovlen == 0 {
            return 0;
        }
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
        let m = match plain(msg) {
            Ok(m) => m,
            Err(e) => return fail(e) as ssize_t,
        };
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
