//! Memory mappings: the AF_XDP UMEM and rings, and the regions a program shares with the daemon.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;

use super::check;

/// A memory mapping, unmapped on drop.
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value.
unsafe impl Send for Mmap {}

impl std::fmt::Debug for Mmap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mmap({:p}, {} bytes)", self.ptr, self.len)
    }
}

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

    /// `len` bytes from `offset` of a file a program shares (its registered memory): only a
    /// file open for reading and writing, sealed against shrinking (a program that could
    /// shrink it would turn the next access through this mapping into SIGBUS), that covers
    /// the range.
    pub fn of_sealed(fd: &OwnedFd, offset: u64, len: usize) -> io::Result<Mmap> {
        let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, why.to_string());
        // SAFETY: no pointers.
        let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
        if flags & libc::O_ACCMODE != libc::O_RDWR {
            return Err(invalid("not open for reading and writing"));
        }
        // SAFETY: no pointers.
        let seals = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) })?;
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(invalid("its size is not sealed"));
        }
        // SAFETY: stat is plain data, filled by the kernel.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` outlives the call.
        check(unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) })?;
        let end = offset.checked_add(len as u64);
        if len == 0 || end.is_none_or(|e| e > st.st_size as u64) {
            return Err(invalid("the range is not in the file"));
        }
        Mmap::new(len, Some((fd, offset)))
    }

    /// Copies the bytes at `at` into `dst`; false (and nothing copied) if they are not all in
    /// the mapping. Another process may be writing them: what it sees is what a device's DMA
    /// would give, bytes with no order among them.
    pub fn read_at(&self, at: usize, dst: &mut [u8]) -> bool {
        if at.checked_add(dst.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: in the mapping (checked), which lives as long as `self`; `dst` is not in it.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(at), dst.as_mut_ptr(), dst.len())
        };
        true
    }

    /// Copies `src` to the bytes at `at`; false (and nothing copied) if they are not all in
    /// the mapping.
    pub fn write_at(&self, at: usize, src: &[u8]) -> bool {
        if at.checked_add(src.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: as in `read_at`.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(at), src.len())
        };
        true
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
