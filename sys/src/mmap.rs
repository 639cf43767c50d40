//! Memory mappings: the AF_XDP UMEM and rings, and the regions a program shares with the daemon.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;

/// A memory mapping, unmapped on drop.
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value.
unsafe impl Send for Mmap {}

impl Mmap {
    /// `len` bytes of zeroed anonymous memory, or of `fd` (a socket's ring, a memfd) from
    /// `offset`, shared with whoever else maps it.
    pub fn new(len: usize, fd: Option<(&OwnedFd, u64)>) -> io::Result<Mmap> {
        let (flags, fd, off) = match fd {
            None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0),
            Some((f, off)) => (libc::MAP_SHARED, f.as_raw_fd(), off),
        };
        // SAFETY: a fresh mapping; the kernel checks `fd` and `off`.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                off as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            ptr: NonNull::new(p.cast()).ok_or_else(io::Error::last_os_error)?,
            len,
        })
    }

    /// The start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its length.
    #[allow(
        clippy::len_without_is_empty,
        reason = "mmap(2) makes no empty mapping"
    )]
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `new` with this length and is not used after this.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
