//! Other processes: their credentials on a Unix socket; this process's memory as the kernel
//! checks it (process_vm_readv), its user id, randomness and termination signals.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::RawFd;

use super::check;

/// The process id and user id at the other end of a Unix socket (SO_PEERCRED).
pub fn peer_cred(fd: RawFd) -> io::Result<(u32, u32)> {
    let cred = ucred(fd)?;
    Ok((cred.pid as u32, cred.uid))
}

/// The credentials of the process at the other end of a Unix socket when it connected.
fn ucred(fd: RawFd) -> io::Result<libc::ucred> {
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
    Ok(cred)
}

/// The groups of the process at the other end of a Unix socket when it connected: its
/// primary group (SO_PEERCRED) and its supplementary ones (SO_PEERGROUPS).
pub fn peer_groups(fd: RawFd) -> io::Result<Vec<u32>> {
    let cred = ucred(fd)?;
    let mut groups = vec![0 as libc::gid_t; 64];
    loop {
        let mut len = (groups.len() * size_of::<libc::gid_t>()) as u32;
        // SAFETY: `groups` holds `len` bytes and outlives the call.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &raw mut len,
            )
        };
        let n = len as usize / size_of::<libc::gid_t>();
        match r {
            0 => {
                groups.truncate(n);
                groups.push(cred.gid);
                return Ok(groups);
            }
            // Too small: the kernel said how large.
            _ if io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE) => {
                groups.resize(n.max(groups.len() * 2), 0);
            }
            _ => return Err(io::Error::last_os_error()),
        }
    }
}

/// Whether this process may write `path` (access(2) with W_OK: what connecting to a Unix
/// socket needs).
pub fn may_write(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is NUL-terminated and outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The id of group `name` (or `name` itself, if it is a number).
pub fn group_id(name: &str) -> io::Result<u32> {
    if let Ok(gid) = name.parse() {
        return Ok(gid);
    }
    let c =
        std::ffi::CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is NUL-terminated; getgrnam's result is read at once, on the thread that
    // asked, before any other call could reuse its static storage.
    let g = unsafe { libc::getgrnam(c.as_ptr()) };
    if g.is_null() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no group {name}"),
        ));
    }
    // SAFETY: a non-null result points at a valid group entry.
    Ok(unsafe { (*g).gr_gid })
}

/// Lets group `gid` connect to the Unix socket at `path` and nobody else but its owner
/// (mode 0660), as /dev/infiniband/uverbs* is given to a group.
pub fn share_socket(path: &std::path::Path, gid: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(path, None, Some(gid))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
}

/// Copies `dst.len()` bytes at `addr` in process `pid` into `dst` (process_vm_readv). Fails
/// unless every byte was copied.
pub fn vm_read(pid: u32, addr: u64, dst: &mut [u8]) -> io::Result<()> {
    let len = dst.len();
    whole(vm_read_some(pid, addr, dst)? as isize, len)
}

/// Reads up to `dst.len()` bytes at `addr` in process `pid`, stopping at the first unmapped
/// page; returns how many were read.
pub(crate) fn vm_read_some(pid: u32, addr: u64, dst: &mut [u8]) -> io::Result<usize> {
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

/// How many runs one process_vm_writev takes ([`vm_write`]; the kernel's limit is 1024).
pub(crate) const VM_IOVECS: usize = 64;

/// Writes `runs` (each bytes at an address) in order in process `pid`, up to
/// [`VM_IOVECS`] of them; returns how many bytes were written (it stops at the first address
/// it cannot write).
pub(crate) fn vm_write(pid: u32, runs: &[(u64, &[u8])]) -> io::Result<usize> {
    let none = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let (mut local, mut remote) = ([none; VM_IOVECS], [none; VM_IOVECS]);
    let n = runs.len().min(VM_IOVECS);
    for (k, &(addr, bytes)) in runs[..n].iter().enumerate() {
        local[k] = libc::iovec {
            iov_base: bytes.as_ptr().cast_mut().cast(),
            iov_len: bytes.len(),
        };
        remote[k] = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: bytes.len(),
        };
    }
    // SAFETY: the first `n` entries of `local` describe slices that outlive the call (the
    // kernel only reads them); the kernel checks `remote` against the other process's
    // mappings.
    let written = unsafe {
        libc::process_vm_writev(
            pid as i32,
            local.as_ptr(),
            n as libc::c_ulong,
            remote.as_ptr(),
            n as libc::c_ulong,
            0,
        )
    };
    if written < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(written as usize)
    }
}

/// The result of a process_vm_readv that had to move `len` bytes.
fn whole(n: isize, len: usize) -> io::Result<()> {
    if n < 0 {
        Err(io::Error::last_os_error())
    } else if n as usize != len {
        Err(io::Error::from(io::ErrorKind::UnexpectedEof))
    } else {
        Ok(())
    }
}

/// 64 random bits from the kernel (getrandom).
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: `bytes` outlives the call and its length is given. Eight bytes never come back
    // short from getrandom once the pool is ready, which it waits for.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    assert_eq!(n, 8, "getrandom: {}", io::Error::last_os_error());
    u64::from_ne_bytes(bytes)
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
