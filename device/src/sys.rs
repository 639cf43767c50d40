//! The system calls the device needs, each behind a safe function: every `unsafe` block passes
//! pointers to buffers it owns, with their true lengths.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A raw packet socket for every protocol, non-blocking, not yet bound.
pub fn packet_socket() -> io::Result<OwnedFd> {
    let proto = (libc::ETH_P_ALL as u16).to_be() as libc::c_int;
    // SAFETY: no pointers; the returned descriptor is owned by the OwnedFd.
    let fd = check(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            proto,
        )
    })?;
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Binds a packet socket to one interface.
pub fn bind_packet(fd: &OwnedFd, ifindex: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: `addr` lives across the call and its size is passed.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_ll>() as u32,
        )
    })?;
    Ok(())
}

/// Sets an integer socket option.
pub fn set_int_option(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` lives across the call and its size is passed.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            size_of::<i32>() as u32,
        )
    })?;
    Ok(())
}

/// Attaches a classic BPF filter (SO_ATTACH_FILTER).
pub fn attach_filter(fd: RawFd, program: &[libc::sock_filter]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points into `program`, which outlives the call; the kernel copies it.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const prog).cast(),
            size_of::<libc::sock_fprog>() as u32,
        )
    })?;
    Ok(())
}

/// The index of the interface called `name` in this thread's network namespace.
pub fn if_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i),
    }
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { zeroed() };
    if name.len() >= req.ifr_name.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

/// The interface's MAC address (SIOCGIFHWADDR), asked through any socket of its namespace.
pub fn if_hwaddr(fd: &OwnedFd, name: &str) -> io::Result<[u8; 6]> {
    let mut req = ifreq(name)?;
    // SAFETY: `req` is a valid ifreq that lives across the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR, &raw mut req) })?;
    // SAFETY: SIOCGIFHWADDR fills the ifru_hwaddr member.
    let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    let mut mac = [0u8; 6];
    for (m, d) in mac.iter_mut().zip(data) {
        *m = d as u8;
    }
    Ok(mac)
}

/// The interface's MTU (SIOCGIFMTU).
pub fn if_mtu(fd: &OwnedFd, name: &str) -> io::Result<u32> {
    let mut req = ifreq(name)?;
    // SAFETY: `req` is a valid ifreq that lives across the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &raw mut req) })?;
    // SAFETY: SIOCGIFMTU fills the ifru_mtu member.
    Ok(unsafe { req.ifr_ifru.ifru_mtu } as u32)
}

/// Adds (SIOCADDMULTI) or removes (SIOCDELMULTI) a multicast MAC in the interface's receive
/// filter, as rxe's `dev_mc_add` does when a QP joins a group, through any socket of its
/// namespace.
pub fn if_multicast(fd: &OwnedFd, name: &str, mac: [u8; 6], add: bool) -> io::Result<()> {
    let mut req = ifreq(name)?;
    // SAFETY: writing the ifru_hwaddr member of a zeroed union.
    let sa = unsafe { &mut req.ifr_ifru.ifru_hwaddr };
    sa.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
    for (d, m) in sa.sa_data.iter_mut().zip(mac) {
        *d = m as libc::c_char;
    }
    let op = if add {
        libc::SIOCADDMULTI
    } else {
        libc::SIOCDELMULTI
    };
    // SAFETY: `req` is a valid ifreq that lives across the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), op, &raw mut req) }).map(drop)
}

/// Receives up to `bufs.len()` frames without blocking (recvmmsg); writes their lengths
/// (truncated frames are marked by a length above the buffer's) and returns how many.
pub fn recv_batch(fd: &OwnedFd, bufs: &mut [Vec<u8>], lens: &mut [usize]) -> io::Result<usize> {
    let n = bufs.len().min(lens.len());
    let mut iovs: Vec<libc::iovec> = bufs[..n]
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain data; all-zero is a valid value.
    let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { zeroed() }).collect();
    for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: every iovec points into a buffer of `bufs` with its length, and `msgs` and
    // `iovs` outlive the call.
    let got = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as u32,
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            std::ptr::null_mut(),
        )
    };
    match check(got) {
        Ok(got) => {
            for (l, m) in lens.iter_mut().zip(&msgs[..got as usize]) {
                *l = m.msg_len as usize;
            }
            Ok(got as usize)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

/// Sends frames on a bound packet socket in one call (sendmmsg); returns how many went.
pub fn send_batch(fd: &OwnedFd, frames: &[&[u8]]) -> io::Result<usize> {
    let mut iovs: Vec<libc::iovec> = frames
        .iter()
        .map(|f| libc::iovec {
            iov_base: f.as_ptr().cast_mut().cast(),
            iov_len: f.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain data; all-zero is a valid value.
    let mut msgs: Vec<libc::mmsghdr> = (0..frames.len()).map(|_| unsafe { zeroed() }).collect();
    for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: every iovec points into a frame the caller keeps alive, with its length; the
    // kernel only reads them.
    let sent = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            msgs.len() as u32,
            libc::MSG_DONTWAIT,
        )
    };
    check(sent).map(|n| n as usize)
}

/// Moves the calling thread into the network namespace at `path` (e.g. /var/run/netns/NAME).
/// Only this thread changes namespace; sockets it opens afterwards belong to the new one.
pub fn enter_netns(path: &str) -> io::Result<()> {
    let file = std::fs::File::open(path)?;
    // SAFETY: no pointers; the descriptor is valid while `file` lives.
    check(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) })?;
    Ok(())
}

/// An rtnetlink socket in this thread's network namespace, subscribed to the multicast
/// `groups` (0 for none); non-blocking if it listens to groups, else with a 2 s receive
/// timeout.
pub fn netlink_socket(groups: u32) -> io::Result<OwnedFd> {
    let nonblock = if groups != 0 { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: no pointers; the descriptor is owned below.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | nonblock,
            libc::NETLINK_ROUTE,
        )
    };
    let fd = check(raw)?;
    // SAFETY: a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_nl = unsafe { zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    addr.nl_groups = groups;
    // SAFETY: `addr` outlives the call and its size is passed.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_nl>() as u32,
        )
    })?;
    if groups == 0 {
        let timeout = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        // SAFETY: `timeout` outlives the call and its size is passed.
        check(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const timeout).cast(),
                size_of::<libc::timeval>() as u32,
            )
        })?;
    }
    Ok(fd)
}

/// Sends one rtnetlink request on `fd` and returns the reply's bytes: every message up to
/// NLMSG_DONE for a dump, or the single answer (or error) otherwise.
pub fn netlink_on(fd: &OwnedFd, request: &[u8], dump: bool) -> io::Result<Vec<u8>> {
    // SAFETY: `request` outlives the call and its length is passed.
    let sent = unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: `buf` outlives the call and its length is passed.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let chunk = &buf[..n as usize];
        out.extend_from_slice(chunk);
        // A dump ends with NLMSG_DONE (type 3); a single answer (or error, type 2) is whole.
        let done = !dump || crate::netlink::messages(chunk).any(|(t, _)| t == 3 || t == 2);
        if done || n == 0 {
            return Ok(out);
        }
    }
}

/// Sends one rtnetlink request on a new socket in this thread's namespace.
pub fn netlink(request: &[u8], dump: bool) -> io::Result<Vec<u8>> {
    netlink_on(&netlink_socket(0)?, request, dump)
}

/// Reads and discards everything waiting on a non-blocking socket; returns whether anything
/// was.
pub fn drain(fd: &OwnedFd) -> bool {
    let mut buf = [0u8; 8192];
    let mut any = false;
    loop {
        // SAFETY: `buf` outlives the call and its length is passed.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n <= 0 {
            return any;
        }
        any = true;
    }
}

/// The process id and user id at the other end of a Unix socket (SO_PEERCRED).
pub fn peer_cred(fd: RawFd) -> io::Result<(u32, u32)> {
    // SAFETY: ucred is plain data; all-zero is a valid value.
    let mut cred: libc::ucred = unsafe { zeroed() };
    let mut len = size_of::<libc::ucred>() as u32;
    // SAFETY: `cred` and `len` outlive the call and `len` is its size.
    check(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    })?;
    Ok((cred.pid as u32, cred.uid))
}

/// Copies `dst.len()` bytes at `addr` in process `pid` into `dst` (process_vm_readv). Fails
/// unless every byte was copied.
pub fn vm_read(pid: u32, addr: u64, dst: &mut [u8]) -> io::Result<()> {
    let len = dst.len();
    whole(vm_read_some(pid, addr, dst)? as isize, len)
}

/// Reads up to `dst.len()` bytes at `addr` in process `pid`, stopping at the first unmapped
/// page; returns how many were read.
pub fn vm_read_some(pid: u32, addr: u64, dst: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: dst.len(),
    };
    // SAFETY: `local` describes `dst`, which outlives the call; the kernel checks `remote`
    // against the other process's mappings.
    let n = unsafe { libc::process_vm_readv(pid as i32, &local, 1, &remote, 1, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Copies each `(addr, bytes)` into process `pid` with one process_vm_writev per 1024 pieces
/// (IOV_MAX). Fails unless every byte was copied.
pub fn vm_write_all(pid: u32, pieces: &[(u64, &[u8])]) -> io::Result<()> {
    for chunk in pieces.chunks(1024) {
        let local: Vec<libc::iovec> = chunk
            .iter()
            .map(|(_, b)| libc::iovec {
                iov_base: b.as_ptr().cast_mut().cast(),
                iov_len: b.len(),
            })
            .collect();
        let remote: Vec<libc::iovec> = chunk
            .iter()
            .map(|(a, b)| libc::iovec {
                iov_base: *a as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        let len = chunk.iter().map(|(_, b)| b.len()).sum();
        // SAFETY: each local iovec describes a slice that outlives the call and is only read;
        // the kernel checks the remote ones against the other process's mappings.
        let n = unsafe {
            libc::process_vm_writev(
                pid as i32,
                local.as_ptr(),
                local.len() as u64,
                remote.as_ptr(),
                remote.len() as u64,
                0,
            )
        };
        whole(n, len)?;
    }
    Ok(())
}

/// The result of a process_vm_readv/writev that had to move `len` bytes.
fn whole(n: isize, len: usize) -> io::Result<()> {
    if n < 0 {
        Err(io::Error::last_os_error())
    } else if n as usize != len {
        Err(io::Error::from(io::ErrorKind::UnexpectedEof))
    } else {
        Ok(())
    }
}

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

/// This process's real user id.
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Sets `flag` when SIGINT or SIGTERM arrives (the flag must live for the program's life).
pub fn on_termination(flag: &'static std::sync::atomic::AtomicBool) {
    static FLAG: std::sync::OnceLock<&'static std::sync::atomic::AtomicBool> =
        std::sync::OnceLock::new();
    extern "C" fn handler(_: libc::c_int) {
        if let Some(f) = FLAG.get() {
            f.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let _ = FLAG.set(flag);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only does an atomic store, which is async-signal-safe.
        unsafe { libc::signal(sig, handler as *const () as libc::sighandler_t) };
    }
}

/// An anonymous file of `len` bytes for sharing memory (memfd_create + ftruncate), sealed at
/// that size: a program holding it cannot shrink it under the daemon's mapping (which would
/// turn the daemon's next access into SIGBUS).
pub fn memfd(name: &std::ffi::CStr, len: u64) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let fd = check(unsafe {
        libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    })?;
    // SAFETY: a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: no pointers.
    check(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) })?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: no pointers.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) })?;
    Ok(fd)
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
/// a non-blocking descriptor has none (EAGAIN).
pub fn take_notification(fd: RawFd) -> io::Result<bool> {
    let mut byte = 0u8;
    loop {
        // SAFETY: `byte` outlives the call; one byte is read.
        let n = unsafe { libc::read(fd, (&raw mut byte).cast(), 1) };
        match n {
            1 => return Ok(true),
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            _ => {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => return Ok(false),
                    _ => return Err(e),
                }
            }
        }
    }
}

/// Sends `data` with descriptors attached (SCM_RIGHTS), in one sendmsg.
pub fn send_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let space = cmsg_space(fds.len());
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: the control buffer has room for one header with `fds.len()` descriptors, as
    // CMSG_SPACE computed; CMSG_FIRSTHDR and CMSG_DATA point inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), fds.len());
    }
    let mut sent = 0;
    while sent < data.len() {
        // SAFETY: `msg` points at `iov` and `control`, which outlive the call.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                std::thread::yield_now();
                continue;
            }
            return Err(e);
        }
        sent += n as usize;
        // The descriptors went with the first bytes; the rest goes plain.
        msg.msg_control = std::ptr::null_mut();
        msg.msg_controllen = 0;
        iov.iov_base = data[sent..].as_ptr().cast_mut().cast();
        iov.iov_len = data.len() - sent;
        msg.msg_iov = &mut iov;
    }
    Ok(())
}

fn cmsg_space(fds: usize) -> usize {
    // SAFETY: CMSG_SPACE only computes a size.
    unsafe { libc::CMSG_SPACE((fds * size_of::<RawFd>()) as u32) as usize }
}

/// Receives up to `buf.len()` bytes and the descriptors sent with them (at most `max_fds`).
pub fn recv_fds(sock: RawFd, buf: &mut [u8], max_fds: usize) -> io::Result<(usize, Vec<OwnedFd>)> {
    let space = cmsg_space(max_fds);
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: `msg` points at `iov` and `control`, which outlive the call.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` with well-formed headers; CMSG_NXTHDR stays inside
    // msg_controllen; each SCM_RIGHTS payload holds (len - CMSG_LEN(0)) / 4 descriptors, which
    // are new and ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..bytes / size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n as usize, fds))
}

/// Sets O_NONBLOCK on a descriptor's open file description.
pub fn set_nonblocking(fd: RawFd) {
    // SAFETY: no pointers.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
}
