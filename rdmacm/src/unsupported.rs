//! What this librdmacm does not do yet, exported so programs linked against rdma-core's load
//! and fail the call cleanly (ENOSYS, as a kernel without the feature answers): rsockets.

// Each is documented by its C name: the call the module comment says is not done yet.
#![allow(missing_docs)]

use core::ffi::{c_int, c_long, c_void};

use libc::{
    fd_set, iovec, msghdr, nfds_t, off_t, pollfd, size_t, sockaddr, socklen_t, ssize_t, timeval,
};

use crate::fail;

fn nosys() -> c_int {
    fail(libc::ENOSYS)
}

fn nosys_len() -> ssize_t {
    nosys() as ssize_t
}

exported! {
    fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
        let _ = (domain, kind, protocol);
        nosys()
    }
    fn rbind(socket: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
        let _ = (socket, addr, len);
        nosys()
    }
    fn rlisten(socket: c_int, backlog: c_int) -> c_int {
        let _ = (socket, backlog);
        nosys()
    }
    fn raccept(socket: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
        let _ = (socket, addr, len);
        nosys()
    }
    fn rconnect(socket: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
        let _ = (socket, addr, len);
        nosys()
    }
    fn rshutdown(socket: c_int, how: c_int) -> c_int {
        let _ = (socket, how);
        nosys()
    }
    fn rclose(socket: c_int) -> c_int {
        let _ = socket;
        nosys()
    }
    fn rrecv(socket: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
        let _ = (socket, buf, len, flags);
        nosys_len()
    }
    fn rrecvfrom(socket: c_int, buf: *mut c_void, len: size_t, flags: c_int, src: *mut sockaddr, alen: *mut socklen_t) -> ssize_t {
        let _ = (socket, buf, len, flags, src, alen);
        nosys_len()
    }
    fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
        let _ = (socket, msg, flags);
        nosys_len()
    }
    fn rsend(socket: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
        let _ = (socket, buf, len, flags);
        nosys_len()
    }
    fn rsendto(socket: c_int, buf: *const c_void, len: size_t, flags: c_int, dst: *const sockaddr, alen: socklen_t) -> ssize_t {
        let _ = (socket, buf, len, flags, dst, alen);
        nosys_len()
    }
    fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
        let _ = (socket, msg, flags);
        nosys_len()
    }
    fn rread(socket: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
        let _ = (socket, buf, count);
        nosys_len()
    }
    fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
        let _ = (socket, iov, iovcnt);
        nosys_len()
    }
    fn rwrite(socket: c_int, buf: *const c_void, count: size_t) -> ssize_t {
        let _ = (socket, buf, count);
        nosys_len()
    }
    fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
        let _ = (socket, iov, iovcnt);
        nosys_len()
    }
    fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
        let _ = (fds, nfds, timeout);
        nosys()
    }
    fn rselect(nfds: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *mut timeval) -> c_int {
        let _ = (nfds, r, w, e, timeout);
        nosys()
    }
    fn rgetpeername(socket: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
        let _ = (socket, addr, len);
        nosys()
    }
    fn rgetsockname(socket: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
        let _ = (socket, addr, len);
        nosys()
    }
    fn rsetsockopt(socket: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int {
        let _ = (socket, level, name, val, len);
        nosys()
    }
    fn rgetsockopt(socket: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut socklen_t) -> c_int {
        let _ = (socket, level, name, val, len);
        nosys()
    }
    /// Variadic in C; its one argument arrives where a third fixed one would on x86_64.
    fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> c_int {
        let _ = (socket, cmd, arg);
        nosys()
    }
    fn riomap(socket: c_int, buf: *mut c_void, len: size_t, prot: c_int, flags: c_int, offset: off_t) -> off_t {
        let _ = (socket, buf, len, prot, flags, offset);
        nosys() as off_t
    }
    fn riounmap(socket: c_int, buf: *mut c_void, len: size_t) -> c_int {
        let _ = (socket, buf, len);
        nosys()
    }
    fn riowrite(socket: c_int, buf: *const c_void, count: size_t, offset: off_t, flags: c_int) -> size_t {
        let _ = (socket, buf, count, offset, flags);
        nosys() as size_t
    }
}
