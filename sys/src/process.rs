//! Other processes: their credentials on a Unix socket and their memory (process_vm_readv/writev);
//! this process's user id and termination signals.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::RawFd;

use super::check;

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
