//! Registered memory shared with the daemon.
//!
//! Without it the daemon reaches registered memory with a system call per run of bytes
//! (`process_vm_writev`, `/proc/PID/mem`): about half a microsecond per 8-byte message on a
//! small VM, most of the daemon's cost for short messages. So `ibv_reg_mr` moves the whole
//! pages of a region onto a memfd (a copy, then `mremap` of the copy over the original pages)
//! and the daemon maps that memfd: its reads and writes are then plain memory accesses, as a
//! NIC's DMA is. The bytes before the first whole page and after the last keep the system calls.
//!
//! The copy is not atomic, so pages move only while nothing else can store into them: while
//! the program has one thread (its signals blocked for the copy), and only pages that no other
//! registration reaches (the daemon may be writing into those). `SOFTRNIC_SHARED_MR=1` moves
//! pages while other threads run too (a store another thread makes into them during the copy
//! is lost); `SOFTRNIC_SHARED_MR=0` never moves any.
//!
//! When their last registration goes, the pages move back onto private memory, under the same
//! rule: allocators take memory they gave back with `MADV_DONTNEED` for zeroed, which a shared
//! mapping's is not. After `fork` the child makes its copies of moved pages private (a
//! `pthread_atfork` handler), so that it gets a copy, as the kernel gives a child of pages
//! pinned for a device. Only private anonymous memory (`malloc`, `mmap(MAP_PRIVATE |
//! MAP_ANONYMOUS)`, not the main stack) is moved. A region inside pages moved for an earlier
//! one that is still registered shares them.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, Once, PoisonError};

use crate::proto::SharedPages;

const PAGE: u64 = 4096;

/// The memfds' name, and how their mappings show in `/proc/self/maps`.
const NAME: &std::ffi::CStr = c"softrnic-mr";
const MAPS_PATH: &str = "/memfd:softrnic-mr";

/// When pages may move (`SOFTRNIC_SHARED_MR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    /// `0`.
    Never,
    /// The default: while the program has one thread.
    Alone,
    /// `1`.
    Always,
}

impl Policy {
    fn from_env() -> Policy {
        match std::env::var_os("SOFTRNIC_SHARED_MR") {
            Some(v) if v == "0" => Policy::Never,
            Some(v) if v == "1" => Policy::Always,
            _ => Policy::Alone,
        }
    }

    fn allows_now(self) -> bool {
        match self {
            Policy::Never => false,
            Policy::Always => true,
            Policy::Alone => std::fs::read_to_string("/proc/self/status")
                .is_ok_and(|status| threads(&status) == Some(1)),
        }
    }
}

/// The thread count of a `/proc/PID/status` text.
fn threads(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("Threads:"))?;
    line.trim().parse().ok()
}

static POLICY: LazyLock<Policy> = LazyLock::new(Policy::from_env);

/// Every context's registrations in this process: pages moved for one must not be reached by
/// another through system calls while they move.
static SHARES: Mutex<Shares> = Mutex::new(Shares::new());

fn shares() -> MutexGuard<'static, Shares> {
    SHARES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A context's registrations; dropping it forgets them, as the daemon does when the context
/// closes.
#[derive(Debug)]
pub(crate) struct Registrations(u64);

impl Registrations {
    pub fn new() -> Registrations {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Registrations(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// Names this context in [`register`], [`reregister`] and [`deregister`].
    pub fn id(&self) -> u64 {
        self.0
    }
}

impl Drop for Registrations {
    fn drop(&mut self) {
        let mut s = shares();
        s.regs.retain(|&(ctx, _), _| ctx != self.0);
        s.settle(*POLICY);
    }
}

/// `ibv_reg_mr` of `len` bytes at `addr` in context `ctx`: `request` asks the daemon, with the
/// pages it may map, for the key. Registrations of the process wait for each other.
pub(crate) fn register<E>(
    ctx: u64,
    (addr, len): (u64, u64),
    request: impl FnOnce(Option<SharedPages>) -> Result<u32, E>,
) -> Result<u32, E> {
    let mut s = shares();
    let pages = s.offer(*POLICY, addr, len);
    let key = request(pages);
    if let Ok(key) = key {
        s.registered((ctx, key), (addr, len), pages.as_ref());
    }
    s.settle(*POLICY);
    key
}

/// `ibv_rereg_mr` of region `key`; a new `translation` is reached through system calls (the
/// daemon maps new memory by address only).
pub(crate) fn reregister<E>(
    ctx: u64,
    key: u32,
    translation: Option<(u64, u64)>,
    request: impl FnOnce() -> Result<(), E>,
) -> Result<(), E> {
    let mut s = shares();
    request()?;
    if let Some(range) = translation {
        // The new range first, so that the old pages stay where the daemon now reaches them.
        s.registered((ctx, key), range, None);
        s.settle(*POLICY);
    }
    Ok(())
}

/// `ibv_dereg_mr` of region `key`.
pub(crate) fn deregister<E>(
    ctx: u64,
    key: u32,
    request: impl FnOnce() -> Result<(), E>,
) -> Result<(), E> {
    let mut s = shares();
    request()?;
    s.released((ctx, key));
    s.settle(*POLICY);
    Ok(())
}

/// Pages moved onto a memfd, and how many registrations use them.
#[derive(Debug)]
struct Window {
    start: u64,
    len: u64,
    fd: OwnedFd,
    /// The memfd's inode, which names its mappings in `/proc/self/maps`.
    inode: u64,
    users: u32,
}

impl Window {
    fn end(&self) -> u64 {
        self.start + self.len
    }

    fn contains(&self, start: u64, end: u64) -> bool {
        start >= self.start && end <= self.end()
    }

    fn pages(&self, start: u64, end: u64) -> SharedPages {
        SharedPages {
            fd: self.fd.as_raw_fd(),
            offset: start - self.start,
            addr: start,
            len: end - start,
        }
    }
}

/// A registered range, and the window whose pages it shares (by start).
#[derive(Debug)]
struct Reg {
    start: u64,
    end: u64,
    window: Option<u64>,
}

fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

#[derive(Debug)]
struct Shares {
    windows: Vec<Window>,
    /// By context and key.
    regs: BTreeMap<(u64, u32), Reg>,
}

impl Shares {
    const fn new() -> Shares {
        Shares {
            windows: Vec::new(),
            regs: BTreeMap::new(),
        }
    }

    /// The pages of `[addr, addr + len)` the daemon may map, moved onto a memfd if they are
    /// not yet and `policy` allows: `None` when the region cannot be shared.
    fn offer(&mut self, policy: Policy, addr: u64, len: u64) -> Option<SharedPages> {
        let start = addr.checked_next_multiple_of(PAGE)?;
        let end = addr.checked_add(len)? & !(PAGE - 1);
        if end <= start {
            return None;
        }
        if let Some(w) = self.windows.iter().find(|w| w.contains(start, end)) {
            return Some(w.pages(start, end));
        }
        // The daemon may be writing into pages another registration reaches through system
        // calls: the copy would lose those writes.
        let reached = self
            .windows
            .iter()
            .any(|w| overlap((w.start, w.end()), (start, end)))
            || self
                .regs
                .values()
                .any(|r| overlap((r.start, r.end), (start, end)));
        if reached || !policy.allows_now() {
            return None;
        }
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        if !covers(&maps, (start, end), private_anonymous) {
            return None;
        }
        AT_FORK.call_once(|| {
            // SAFETY: the handlers are functions of this library, which is never unloaded
            // while the program runs (it is the program's libibverbs).
            unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(in_child)) };
        });
        let fd = softrnic_sys::memfd(NAME, end - start).ok()?;
        let inode = inode(&fd).ok()?;
        // SAFETY: the range is whole pages of this process's private anonymous memory (just
        // checked), which no registration reaches and, as the policy allows, no other thread
        // stores into; the copy keeps their bytes at their addresses.
        unsafe { replace_with_copy((start, end - start), Some(&fd)) }.ok()?;
        self.windows.push(Window {
            start,
            len: end - start,
            fd,
            inode,
            users: 0,
        });
        self.windows.last().map(|w| w.pages(start, end))
    }

    /// Registration `id` covers `[addr, addr + len)`, sharing `pages` (from
    /// [`Shares::offer`]) if given; it replaces what `id` covered before.
    fn registered(&mut self, id: (u64, u32), (addr, len): (u64, u64), pages: Option<&SharedPages>) {
        let window = pages.and_then(|p| {
            let w = (self.windows.iter_mut()).find(|w| w.contains(p.addr, p.addr + p.len))?;
            w.users += 1;
            Some(w.start)
        });
        let reg = Reg {
            start: addr,
            end: addr.saturating_add(len),
            window,
        };
        if let Some(old) = self.regs.insert(id, reg) {
            self.left(old);
        }
    }

    /// Registration `id` is gone.
    fn released(&mut self, id: (u64, u32)) {
        if let Some(old) = self.regs.remove(&id) {
            self.left(old);
        }
    }

    fn left(&mut self, reg: Reg) {
        if let Some(w) = (self.windows.iter_mut()).find(|w| Some(w.start) == reg.window) {
            w.users -= 1;
        }
    }

    /// Lets go of the windows no registration uses: their pages move back onto private memory
    /// where `policy` allows and nothing reaches them through system calls, or else stay on
    /// their memfd.
    fn settle(&mut self, policy: Policy) {
        let mut allowed = None;
        let regs = &self.regs;
        self.windows.retain(|w| {
            if w.users > 0 {
                return true;
            }
            let reached = regs
                .values()
                .any(|r| overlap((r.start, r.end), (w.start, w.end())));
            if !reached && *allowed.get_or_insert_with(|| policy.allows_now()) {
                move_back(w);
            }
            false
        });
    }
}

/// Moves `w`'s pages back onto private anonymous memory, if they are still its memfd's.
fn move_back(w: &Window) {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    if covers(&maps, (w.start, w.end()), |perms, rest| {
        perms == "rw-s" && rest.get(2).and_then(|i| i.parse().ok()) == Some(w.inode)
    }) {
        // SAFETY: whole pages of this process, mapped readable and writable (just checked);
        // no registration reaches them and, as the policy allows, no other thread stores into
        // them.
        let _ = unsafe { replace_with_copy((w.start, w.len), None) };
    }
}

/// Whether a mapping (its permissions and other fields, as [`covers`] gives them) is private
/// anonymous memory that is readable and writable: no file, no stack.
fn private_anonymous(perms: &str, rest: &[&str]) -> bool {
    let anonymous = rest.get(2) == Some(&"0") && matches!(rest.get(3..), Some([] | ["[heap]"]));
    perms == "rw-p" && anonymous
}

/// Whether the mappings of a `/proc/PID/maps` text cover `[start, end)` without a gap, each
/// with permissions and other fields (offset, device, inode, path) that `ok` accepts.
fn covers(maps: &str, (mut start, end): (u64, u64), ok: impl Fn(&str, &[&str]) -> bool) -> bool {
    for line in maps.lines() {
        let Some((from, to, perms, rest)) = softrnic_sys::maps_line(line) else {
            continue;
        };
        if to <= start {
            continue;
        }
        if from > start || !ok(perms, &rest.collect::<Vec<_>>()) {
            return false;
        }
        start = to;
        if start >= end {
            return true;
        }
    }
    false
}

fn inode(fd: &OwnedFd) -> io::Result<u64> {
    // SAFETY: fstat fills the zeroed struct it is given.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a struct to fill.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_ino)
}

/// Replaces the `len` bytes of pages at `start` with a copy of them at the same addresses: in
/// the memfd `fd` (which is `len` bytes long) if given, else in new private anonymous memory.
/// This thread's signals are blocked meanwhile, so no handler stores into them.
///
/// # Safety
/// `[start, start + len)` must be whole pages of this process, mapped readable and writable,
/// into which nothing else stores during the call.
unsafe fn replace_with_copy((start, len): (u64, u64), fd: Option<&OwnedFd>) -> io::Result<()> {
    let len = len as usize;
    let (flags, fd) = match fd {
        Some(fd) => (libc::MAP_SHARED, fd.as_raw_fd()),
        None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1),
    };
    // The calls are made as bare system calls: a library that watches the program's memory
    // by interposing mmap and mremap (libfabric's and UCX's registration caches do) would take
    // the move for an unmap of the registered range, though its bytes stay where they were.
    // SAFETY: a fresh mapping of `len` bytes where the kernel chooses.
    let copy = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            0usize,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0usize,
        )
    } as *mut libc::c_void;
    if copy == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let _blocked = SignalsBlocked::new();
    // SAFETY: both ranges are mapped, `len` bytes, and do not overlap (the copy is new).
    unsafe { std::ptr::copy_nonoverlapping(start as *const u8, copy.cast::<u8>(), len) };
    // SAFETY: the copy's mapping replaces the original pages at their addresses in one call.
    let moved = unsafe {
        libc::syscall(
            libc::SYS_mremap,
            copy,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            start as usize,
        )
    };
    if moved == -1 {
        let e = io::Error::last_os_error();
        // SAFETY: the copy's mapping is still where mmap put it, and nothing uses it.
        unsafe { libc::syscall(libc::SYS_munmap, copy, len) };
        return Err(e);
    }
    Ok(())
}

/// This thread's signals blocked, until dropped.
struct SignalsBlocked(libc::sigset_t);

impl SignalsBlocked {
    fn new() -> SignalsBlocked {
        // SAFETY: sigfillset and pthread_sigmask fill the sets they are given.
        unsafe {
            let (mut all, mut old) = (std::mem::zeroed(), std::mem::zeroed());
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
            SignalsBlocked(old)
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

static AT_FORK: Once = Once::new();

thread_local! {
    /// The registrations, held by the thread that forks from just before to just after.
    static FORKING: RefCell<Option<MutexGuard<'static, Shares>>> = const { RefCell::new(None) };
}

/// Before `fork`: no registration is half made in the child.
extern "C" fn before_fork() {
    let _ = FORKING.try_with(|f| *f.borrow_mut() = Some(shares()));
}

extern "C" fn after_fork() {
    let _ = FORKING.try_with(|f| drop(f.borrow_mut().take()));
}

/// In the child after `fork`: the parent's registrations are not the child's, and the
/// child's copy of moved pages is made its own (it has one thread: nothing else stores).
extern "C" fn in_child() {
    let _ = FORKING.try_with(|f| {
        if let Some(mut s) = f.borrow_mut().take() {
            *s = Shares::new();
        }
    });
    if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
        make_private(&maps, |_| true);
    }
}

/// Makes the moved pages of a `/proc/self/maps` text (those of memfds whose inode `which`
/// accepts) private anonymous memory with the same bytes.
fn make_private(maps: &str, which: impl Fn(u64) -> bool) {
    for line in maps.lines() {
        let Some((from, to, perms, rest)) = softrnic_sys::maps_line(line) else {
            continue;
        };
        let rest: Vec<&str> = rest.collect();
        let ours = rest.get(3) == Some(&MAPS_PATH)
            && rest.get(2).and_then(|i| i.parse().ok()).is_some_and(&which);
        if ours && perms == "rw-s" {
            // SAFETY: whole pages of this process, mapped readable and writable; the caller
            // makes sure that nothing else stores into them.
            let _ = unsafe { replace_with_copy((from, to - from), None) };
        }
    }
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

    fn private_anonymous_at(maps: &str, start: u64, end: u64) -> bool {
        covers(maps, (start, end), private_anonymous)
    }

    fn own_maps() -> String {
        std::fs::read_to_string("/proc/self/maps").unwrap()
    }

    #[test]
    fn mappings_are_matched_over_the_whole_range() {
        assert!(
            private_anonymous_at(MAPS, 0x401000, 0x404000),
            "anonymous and heap"
        );
        assert!(!private_anonymous_at(MAPS, 0x400000, 0x401000), "text");
        assert!(
            !private_anonymous_at(MAPS, 0x403000, 0x405000),
            "shared already"
        );
        assert!(!private_anonymous_at(MAPS, 0x405000, 0x406000), "the stack");
        assert!(!private_anonymous_at(MAPS, 0x406000, 0x407000), "unmapped");
        assert!(covers(MAPS, (0x404000, 0x405000), |p, rest| p == "rw-s"
            && rest[2] == "7"));
        assert_eq!(threads("Name:\tx\nThreads:\t3\nSigQ:\t0/1\n"), Some(3));
        assert_eq!(threads("Name:\tx\n"), None);
    }

    /// Four pages of private anonymous memory, each byte a function of its place.
    struct Memory {
        mem: softrnic_sys::Mmap,
    }

    fn byte(i: usize) -> u8 {
        i as u8 ^ (i >> 8) as u8
    }

    impl Memory {
        fn new() -> Memory {
            let m = Memory {
                mem: softrnic_sys::Mmap::new(4 * PAGE as usize, None).unwrap(),
            };
            (0..m.mem.len()).for_each(|i| m.set(i, byte(i)));
            m
        }

        fn base(&self) -> u64 {
            self.mem.as_ptr() as u64
        }

        // Volatile throughout, as the same bytes are reached by pointers the compiler takes
        // for unrelated (the daemon's view of a memfd).
        fn get(&self, i: usize) -> u8 {
            assert!(i < self.mem.len());
            // SAFETY: in bounds of the mapping.
            unsafe { self.mem.as_ptr().add(i).read_volatile() }
        }

        fn set(&self, i: usize, v: u8) {
            assert!(i < self.mem.len());
            // SAFETY: in bounds of the mapping, which is writable.
            unsafe { self.mem.as_ptr().add(i).write_volatile(v) }
        }
    }

    #[test]
    fn moved_pages_keep_their_bytes_are_the_daemons_and_move_back_with_their_last_user() {
        let mut s = Shares::new();
        let m = Memory::new();
        // A region from byte 100 to the middle of the fourth page: its two whole pages move.
        let p = s
            .offer(Policy::Always, m.base() + 100, 3 * PAGE + PAGE / 2 - 100)
            .unwrap();
        assert_eq!((p.addr, p.offset, p.len), (m.base() + PAGE, 0, 2 * PAGE));
        assert!((0..m.mem.len()).all(|i| m.get(i) == byte(i)));
        assert!(own_maps().contains(MAPS_PATH));
        // What the daemon maps: the same bytes, both ways.
        let fd = s.windows[0].fd.try_clone().unwrap();
        let view = softrnic_sys::Mmap::of_sealed(&fd, 0, p.len as usize).unwrap();
        let mut got = [0u8; 2];
        assert!(view.read_at(5, &mut got));
        assert_eq!(got, [byte(4096 + 5), byte(4096 + 6)]);
        assert!(view.write_at(1, &[0xee]));
        m.set(4096 + 2, 0xdd);
        assert_eq!(m.get(4096 + 1), 0xee);
        assert!(view.read_at(2, &mut got[..1]));
        assert_eq!(got[0], 0xdd);
        assert!(!view.write_at(p.len as usize - 1, &[0; 2]), "past its end");
        // A region inside shares the window; one over part of it is not shared.
        s.registered((1, 1), (m.base() + 100, 3 * PAGE), Some(&p));
        let inner = s
            .offer(Policy::Always, p.addr + PAGE, PAGE)
            .expect("inside the window");
        assert_eq!((inner.fd, inner.offset), (p.fd, PAGE));
        s.registered((1, 2), (p.addr + PAGE, PAGE), Some(&inner));
        assert!(
            s.offer(Policy::Always, p.addr - PAGE, 2 * PAGE).is_none(),
            "part of it"
        );
        s.released((1, 1));
        s.settle(Policy::Always);
        assert_eq!(s.windows.len(), 1, "the inner region still uses it");
        s.released((1, 2));
        s.settle(Policy::Always);
        assert!(s.windows.is_empty());
        // Back on private memory, with the bytes they had; the daemon's view is no longer them.
        assert!(private_anonymous_at(&own_maps(), p.addr, p.addr + p.len));
        assert_eq!(
            (m.get(4096 + 1), m.get(4096 + 2), m.get(4096 + 3)),
            (0xee, 0xdd, byte(4099))
        );
        m.set(4096 + 3, 0x11);
        assert!(view.read_at(3, &mut got[..1]));
        assert_eq!(got[0], byte(4099));
    }

    #[test]
    fn pages_another_registration_reaches_through_system_calls_do_not_move() {
        let mut s = Shares::new();
        let m = Memory::new();
        // A registration that was not shared (its pages were not movable then) keeps its
        // pages where they are.
        s.registered((1, 1), (m.base() + 10, PAGE), None);
        assert!(s.offer(Policy::Always, m.base(), 2 * PAGE).is_none());
        // Pages moved for a region stay on their memfd while a registration over part of
        // them reaches them through system calls, and move back once it is gone.
        let p = s
            .offer(Policy::Always, m.base() + 2 * PAGE, 2 * PAGE)
            .unwrap();
        s.registered((2, 1), (p.addr, p.len), Some(&p));
        assert!(
            s.offer(Policy::Always, m.base() + PAGE, 2 * PAGE).is_none(),
            "part of it"
        );
        s.registered((2, 2), (m.base() + PAGE + 5, PAGE), None);
        s.released((2, 1));
        s.settle(Policy::Always);
        assert!(s.windows.is_empty());
        assert!(
            !private_anonymous_at(&own_maps(), p.addr, p.addr + p.len),
            "still shared"
        );
        s.released((2, 2));
        assert_eq!(s.regs.len(), 1);
        m.set(2 * 4096, 3);
        assert_eq!(m.get(2 * 4096), 3, "still the program's memory");
    }

    #[test]
    fn a_region_given_new_memory_lets_its_old_pages_go() {
        let mut s = Shares::new();
        let (old, new) = (Memory::new(), Memory::new());
        let p = s.offer(Policy::Always, old.base(), 2 * PAGE).unwrap();
        s.registered((1, 1), (p.addr, p.len), Some(&p));
        // `ibv_rereg_mr` with a translation: the daemon reaches the new range by system calls.
        s.registered((1, 1), (new.base(), PAGE), None);
        s.settle(Policy::Always);
        assert!(s.windows.is_empty());
        assert!(private_anonymous_at(&own_maps(), p.addr, p.addr + p.len));
        assert!(
            s.offer(Policy::Always, new.base(), PAGE).is_none(),
            "reached by calls"
        );
        assert_eq!(old.get(PAGE as usize + 7), byte(4096 + 7));
    }

    #[test]
    fn nothing_moves_when_never_with_other_threads_or_without_a_whole_page() {
        let mut s = Shares::new();
        let buf = vec![0u8; 3 * PAGE as usize];
        let (addr, len) = (buf.as_ptr() as u64, buf.len() as u64);
        assert!(s.offer(Policy::Never, addr, len).is_none());
        // The test runs beside the harness's threads, and one more.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || rx.recv());
        assert!(!Policy::Alone.allows_now());
        assert!(s.offer(Policy::Alone, addr, len).is_none());
        drop(tx);
        other.join().unwrap().unwrap_err();
        let page = addr.next_multiple_of(PAGE);
        assert!(s.offer(Policy::Always, page + 1, PAGE).is_none());
        assert!(s.windows.is_empty());
    }

    #[test]
    fn a_child_after_fork_makes_its_copy_of_moved_pages_private() {
        let mut s = Shares::new();
        let m = Memory::new();
        let p = s.offer(Policy::Always, m.base(), 2 * PAGE).unwrap();
        let w = &s.windows[0];
        let view = softrnic_sys::Mmap::of_sealed(&w.fd, 0, p.len as usize).unwrap();
        // What the child's handler does, for this window only (other tests' windows are
        // this process's too).
        make_private(&own_maps(), |inode| inode == w.inode);
        assert!(private_anonymous_at(&own_maps(), p.addr, p.addr + p.len));
        assert_eq!(m.get(5), byte(5));
        m.set(5, 0x42);
        let mut got = [0u8];
        assert!(view.read_at(5, &mut got));
        assert_eq!(
            got[0],
            byte(5),
            "the daemon's view is not the child's memory"
        );
    }
}
