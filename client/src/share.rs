//! Registered memory shared with the daemon, where the program asks for it
//! (`SOFTRNIC_SHARED_MR=1`).
//!
//! By default the daemon reaches registered memory with a system call per run of bytes
//! (`process_vm_writev`, `/proc/PID/mem`): about half a microsecond per 8-byte message on a
//! small VM, most of the daemon's cost for short messages. With sharing on, `ibv_reg_mr` moves
//! the whole pages of the region onto a memfd (a copy, then `mremap` of the copy over the
//! original pages) and the daemon maps that memfd: its reads and writes are then plain memory
//! accesses, as a NIC's DMA is. The bytes before the first whole page and after the last keep
//! the system calls.
//!
//! Why it is not the default: the copy is not atomic. A store another thread makes into those
//! pages while `ibv_reg_mr` copies them is lost. And after `fork` the child shares the pages
//! with the parent instead of getting a copy. Only private anonymous memory (`malloc`,
//! `mmap(MAP_PRIVATE | MAP_ANONYMOUS)`, not the main stack) is moved; a region over anything
//! else, or over part of pages moved for another region, keeps the system calls. A region
//! inside pages moved for an earlier one that is still registered shares them.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::proto::SharedPages;

const PAGE: u64 = 4096;

/// Pages moved onto a memfd, and how many registrations use them.
#[derive(Debug)]
struct Window {
    start: u64,
    len: u64,
    fd: OwnedFd,
    users: u32,
}

impl Window {
    fn contains(&self, start: u64, end: u64) -> bool {
        start >= self.start && end <= self.start + self.len
    }
}

/// A context's shared pages.
#[derive(Debug, Default)]
pub(crate) struct Windows {
    on: bool,
    list: Vec<Window>,
    /// The window each registration uses, by key.
    by_key: HashMap<u32, u64>,
}

impl Windows {
    /// On if `SOFTRNIC_SHARED_MR` is 1.
    pub fn from_env() -> Windows {
        Windows {
            on: std::env::var_os("SOFTRNIC_SHARED_MR").is_some_and(|v| v == "1"),
            ..Windows::default()
        }
    }

    /// The pages of `[addr, addr + len)` the daemon may map, moved onto a memfd if they are
    /// not yet: `None` when sharing is off or the region cannot be shared.
    pub fn offer(&mut self, addr: u64, len: u64) -> Option<SharedPages> {
        if !self.on {
            return None;
        }
        let start = addr.checked_next_multiple_of(PAGE)?;
        let end = addr.checked_add(len)? & !(PAGE - 1);
        if end <= start {
            return None;
        }
        if let Some(w) = self.list.iter().find(|w| w.contains(start, end)) {
            return Some(pages(w, start, end));
        }
        if self
            .list
            .iter()
            .any(|w| start < w.start + w.len && w.start < end)
        {
            return None;
        }
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        if !private_anonymous(&maps, start, end) {
            return None;
        }
        // SAFETY: the range is whole pages of this process's private anonymous memory (just
        // checked); moving it keeps its bytes at its addresses.
        let fd = unsafe { move_to_memfd(start, end - start) }.ok()?;
        self.list.push(Window {
            start,
            len: end - start,
            fd,
            users: 0,
        });
        Some(pages(self.list.last().expect("pushed"), start, end))
    }

    /// Registration `key` took `pages` (from [`Windows::offer`]); `None`: it failed, or
    /// there was nothing to share.
    pub fn registered(&mut self, key: Option<u32>, pages: Option<&SharedPages>) {
        if let (Some(key), Some(p)) = (key, pages)
            && let Some(w) = (self.list.iter_mut()).find(|w| w.contains(p.addr, p.addr + p.len))
        {
            w.users += 1;
            self.by_key.insert(key, w.start);
        }
        // A window no registration took is let go (its pages stay on the memfd).
        self.list.retain(|w| w.users > 0);
    }

    /// Registration `key` is gone, or no longer covers its pages.
    pub fn released(&mut self, key: u32) {
        let Some(start) = self.by_key.remove(&key) else {
            return;
        };
        if let Some(w) = self.list.iter_mut().find(|w| w.start == start) {
            w.users -= 1;
        }
        self.list.retain(|w| w.users > 0);
    }
}

fn pages(w: &Window, start: u64, end: u64) -> SharedPages {
    SharedPages {
        fd: w.fd.as_raw_fd(),
        offset: start - w.start,
        addr: start,
        len: end - start,
    }
}

/// Whether the mappings of a `/proc/PID/maps` text cover `[start, end)` without a gap with
/// private anonymous memory that is readable and writable (no file, no stack).
fn private_anonymous(maps: &str, mut start: u64, end: u64) -> bool {
    for line in maps.lines() {
        let Some((from, to, perms, rest)) = softrnic_sys::maps_line(line) else {
            continue;
        };
        if to <= start {
            continue;
        }
        // Offset, device, inode, and a path only for the heap.
        let rest: Vec<&str> = rest.collect();
        let anonymous = rest.get(2) == Some(&"0") && matches!(rest.get(3..), Some([] | ["[heap]"]));
        if from > start || perms != "rw-p" || !anonymous {
            return false;
        }
        start = to;
        if start >= end {
            return true;
        }
    }
    false
}

/// Moves the `len` bytes of pages at `start` onto a new memfd (sealed against shrinking),
/// keeping their contents and addresses; returns the memfd.
///
/// # Safety
/// `[start, start + len)` must be whole pages of this process's private anonymous memory.
/// A store into them by another thread during the call may be lost.
unsafe fn move_to_memfd(start: u64, len: u64) -> io::Result<OwnedFd> {
    let fd = softrnic_sys::memfd(c"softrnic-mr", len)?;
    let len = len as usize;
    // SAFETY: a fresh shared mapping of the memfd, which is `len` bytes long.
    let copy = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if copy == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both ranges are mapped, `len` bytes, and do not overlap (the copy is new).
    unsafe { std::ptr::copy_nonoverlapping(start as *const u8, copy.cast::<u8>(), len) };
    // SAFETY: the copy's mapping replaces the original pages at their addresses in one call.
    let moved = unsafe {
        libc::mremap(
            copy,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            start as *mut libc::c_void,
        )
    };
    if moved == libc::MAP_FAILED {
        let e = io::Error::last_os_error();
        // SAFETY: the copy's mapping is still where mmap put it, and nothing uses it.
        unsafe { libc::munmap(copy, len) };
        return Err(e);
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
00400000-00401000 r-xp 00000000 08:01 1 /bin/x
00401000-00403000 rw-p 00000000 00:00 0
00403000-00404000 rw-p 00000000 00:00 0 [heap]
00404000-00405000 rw-s 00000000 00:01 7 /memfd:softrnic-mr (deleted)
00405000-00406000 rw-p 00000000 00:00 0 [stack]
";

    #[test]
    fn only_private_anonymous_writable_memory_is_moved() {
        assert!(
            private_anonymous(MAPS, 0x401000, 0x404000),
            "anonymous and heap"
        );
        assert!(!private_anonymous(MAPS, 0x400000, 0x401000), "text");
        assert!(
            !private_anonymous(MAPS, 0x403000, 0x405000),
            "shared already"
        );
        assert!(!private_anonymous(MAPS, 0x405000, 0x406000), "the stack");
        assert!(!private_anonymous(MAPS, 0x406000, 0x407000), "unmapped");
    }

    #[test]
    fn moved_pages_keep_their_bytes_and_share_them_with_another_mapping() {
        let mut w = Windows {
            on: true,
            ..Windows::default()
        };
        // Four pages of private anonymous memory; a region from byte 100 to the middle of the
        // fourth page: its two whole pages are moved.
        let mem = softrnic_sys::Mmap::new(4 * PAGE as usize, None).unwrap();
        let (base, n) = (mem.as_ptr(), mem.len());
        let byte = |i: usize| i as u8 ^ (i >> 8) as u8;
        // SAFETY: `mem` maps `n` bytes; volatile throughout, as the same bytes are reached
        // below by pointers the compiler takes for unrelated.
        let at = |i: usize| unsafe { base.add(i) };
        (0..n).for_each(|i| unsafe { at(i).write_volatile(byte(i)) });
        let p = w
            .offer(base as u64 + 100, 3 * PAGE + PAGE / 2 - 100)
            .unwrap();
        assert_eq!((p.addr, p.offset, p.len), (base as u64 + PAGE, 0, 2 * PAGE));
        assert!((0..n).all(|i| unsafe { at(i).read_volatile() } == byte(i)));
        // What the daemon maps: the same bytes, both ways.
        let fd = w.list[0].fd.try_clone().unwrap();
        let view = softrnic_sys::Mmap::of_sealed(&fd, 0, p.len as usize).unwrap();
        let mut got = [0u8; 2];
        assert!(view.read_at(5, &mut got));
        assert_eq!(got, [byte(4096 + 5), byte(4096 + 6)]);
        assert!(view.write_at(1, &[0xee]));
        unsafe { at(4096 + 2).write_volatile(0xdd) };
        assert_eq!(unsafe { at(4096 + 1).read_volatile() }, 0xee);
        assert!(view.read_at(2, &mut got[..1]));
        assert_eq!(got[0], 0xdd);
        assert!(!view.write_at(p.len as usize - 1, &[0; 2]), "past its end");
        // A region inside shares the same window; the window goes with its last user.
        w.registered(Some(1), Some(&p));
        let inner = w.offer(p.addr + PAGE, PAGE).expect("inside the window");
        assert_eq!((inner.fd, inner.offset), (p.fd, PAGE));
        w.registered(Some(2), Some(&inner));
        assert!(
            w.offer(p.addr - PAGE, 2 * PAGE).is_none(),
            "part of the window"
        );
        w.released(1);
        assert_eq!(w.list.len(), 1);
        w.released(2);
        assert!(w.list.is_empty());
        // The moved pages are still this process's memory.
        unsafe { at(4096).write_volatile(7) };
        assert_eq!(unsafe { at(4096).read_volatile() }, 7);
    }

    #[test]
    fn nothing_is_moved_when_off_or_without_a_whole_page() {
        let mut w = Windows::default();
        let buf = vec![0u8; 3 * PAGE as usize];
        assert!(w.offer(buf.as_ptr() as u64, buf.len() as u64).is_none());
        w.on = true;
        let page = (buf.as_ptr() as u64).next_multiple_of(PAGE);
        assert!(w.offer(page + 1, PAGE).is_none());
    }
}
