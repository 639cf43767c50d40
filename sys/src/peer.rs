//! The process at the other end of a Unix socket, pinned: its `/proc` directory and its memory,
//! opened while it was known to be the process that connected. Unlike a PID, they stay that
//! process's after it exits (reads and writes then fail), so a PID reused by another process
//! never leads to that process's memory.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{check, process};

/// `SO_PEERPIDFD` (Linux 6.5): a pidfd of the process that called connect(2).
const SO_PEERPIDFD: libc::c_int = 77;

/// A connected program's process and its memory.
#[derive(Debug)]
pub struct Peer {
    pid: u32,
    /// `/proc/PID`: a directory of this process alone.
    dir: OwnedFd,
    /// `/proc/PID/mem`: this process's address space.
    mem: File,
    /// The kernel's name of the process that connected (SO_PEERPIDFD), if it gave one.
    pidfd: Option<OwnedFd>,
    /// Whether [`Peer::write_runs`] may take process_vm_writev (see there); cleared when the
    /// kernel refuses it.
    vm_writes: AtomicBool,
}

/// From this many bytes on, a read takes process_vm_readv (one copy, about 30% faster at
/// 64 KiB than `/proc/PID/mem`, which copies through a page of its own), then checks that the
/// process is still alive: while it lives no other process can have its PID, so the bytes
/// were its own. Shorter reads go through `/proc/PID/mem`.
const VM_READ_FROM: usize = 16 * 1024;

impl Peer {
    /// The process that connected socket `fd`. On Linux 6.5 and later the kernel names it
    /// (SO_PEERPIDFD), so a process that passed its connection on and exited cannot make this
    /// reach whatever reused its PID: if the process is still alive once its `/proc`
    /// directory is open, that directory is its own. Older kernels give only the PID
    /// (SO_PEERCRED), pinned here.
    pub fn of_socket(fd: RawFd) -> io::Result<Peer> {
        let (pid, uid) = super::peer_cred(fd)?;
        let pidfd = match peer_pidfd(fd) {
            Ok(p) => Some(p),
            Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => None,
            Err(e) => return Err(e),
        };
        let pid = match &pidfd {
            Some(p) => pidfd_pid(p)?,
            None => pid,
        };
        let dir = open_at(libc::AT_FDCWD, &format!("/proc/{pid}"), libc::O_DIRECTORY)?;
        if pidfd.as_ref().is_some_and(exited) {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        let mem = File::from(open_at(dir.as_raw_fd(), "mem", libc::O_RDWR)?);
        let vm_writes = AtomicBool::new(pidfd.is_some() && uid == super::uid());
        Ok(Peer {
            pid,
            dir,
            mem,
            pidfd,
            vm_writes,
        })
    }

    /// Its PID when it connected.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Reads up to `dst.len()` bytes at `addr`, stopping at the first page it cannot read;
    /// returns how many it read (an error if none).
    pub fn read_some(&self, addr: u64, dst: &mut [u8]) -> io::Result<usize> {
        if let Some(pidfd) = self.pidfd.as_ref().filter(|_| dst.len() >= VM_READ_FROM) {
            let n = super::process::vm_read_some(self.pid, addr, dst)?;
            return match exited(pidfd) {
                true => Err(io::Error::from_raw_os_error(libc::ESRCH)),
                false => Ok(n),
            };
        }
        let mut done = 0;
        while done < dst.len() {
            match self.mem.read_at(&mut dst[done..], offset(addr, done)?) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        match done {
            0 if !dst.is_empty() => Err(io::Error::from_raw_os_error(libc::EFAULT)),
            n => Ok(n),
        }
    }

    /// Reads exactly `dst.len()` bytes at `addr`.
    pub fn read(&self, addr: u64, dst: &mut [u8]) -> io::Result<()> {
        match self.read_some(addr, dst)? {
            n if n == dst.len() => Ok(()),
            _ => Err(io::Error::from_raw_os_error(libc::EFAULT)),
        }
    }

    /// Writes each `(addr, bytes)` of `runs`, in order; `failed` hears of each run that could
    /// not be written (the others are).
    ///
    /// `/proc/PID/mem` costs a system call and a page of its own per run: most of the
    /// daemon's time for small messages. So when the program runs as the daemon's own user,
    /// up to 64 runs go in one process_vm_writev, which names the process by PID: it is
    /// checked alive just before (its PID cannot have been given to another process before it
    /// was reaped and the kernel's PIDs came round again), and even a process that got the
    /// PID in between is one the program's user can write to anyway (the kernel's ptrace
    /// check). For other users (a shared daemon) every run goes through `/proc/PID/mem`,
    /// which no reused PID reaches.
    pub fn write_runs<'a>(
        &self,
        runs: impl IntoIterator<Item = (u64, &'a [u8])>,
        mut failed: impl FnMut(u64, io::Error),
    ) {
        let mut runs = runs.into_iter();
        let mut chunk: [(u64, &[u8]); process::VM_IOVECS] = [(0, &[]); process::VM_IOVECS];
        loop {
            let mut n = 0;
            while n < chunk.len()
                && let Some(run) = runs.next()
            {
                chunk[n] = run;
                n += 1;
            }
            if n == 0 {
                return;
            }
            let chunk = &chunk[..n];
            // What process_vm_writev wrote: the first `done` bytes of the runs (it stops at the
            // first it cannot write).
            let mut done = 0;
            if self.vm_writes.load(Ordering::Relaxed)
                && let Some(pidfd) = &self.pidfd
                && !exited(pidfd)
            {
                match process::vm_write(self.pid, chunk) {
                    Ok(n) => done = n,
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                        self.vm_writes.store(false, Ordering::Relaxed);
                    }
                    Err(_) => {}
                }
            }
            // The rest one by one, which finds the run that fails.
            for &(addr, bytes) in chunk {
                if done >= bytes.len() {
                    done -= bytes.len();
                    continue;
                }
                if let Err(e) = self.write(addr + done as u64, &bytes[done..]) {
                    failed(addr, e);
                }
                done = 0;
            }
        }
    }

    /// The process's descriptor `fd`, duplicated into this one (pidfd_getfd: the same open
    /// file, with the access the program opened it with). Only where the kernel named the
    /// process (SO_PEERPIDFD), so that no reused PID can hand over another process's file.
    pub fn take_fd(&self, fd: i32) -> io::Result<OwnedFd> {
        let pidfd =
            (self.pidfd.as_ref()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSYS))?;
        // SAFETY: no pointers; the kernel checks both descriptors.
        let n = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
        let n = check(n as libc::c_int)?;
        // SAFETY: pidfd_getfd made a new descriptor (close-on-exec) for this process to own.
        Ok(unsafe { OwnedFd::from_raw_fd(n) })
    }

    /// Writes all of `src` at `addr`.
    pub fn write(&self, addr: u64, src: &[u8]) -> io::Result<()> {
        let mut done = 0;
        while done < src.len() {
            match self.mem.write_at(&src[done..], offset(addr, done)?)? {
                0 => return Err(io::Error::from_raw_os_error(libc::EFAULT)),
                n => done += n,
            }
        }
        Ok(())
    }

    /// Whether `[addr, addr + len)` is mapped in the process, readable, and writable too if
    /// `write` (as the kernel pins a region's pages for `ibv_reg_mr`: writable ones for an
    /// access that lets the device write). Writes through `/proc/PID/mem` could reach
    /// read-only pages, so this is what keeps the daemon to what the program itself can reach.
    pub fn mapped(&self, addr: u64, len: u64, write: bool) -> io::Result<bool> {
        if len == 0 {
            return Ok(true);
        }
        let Some(end) = addr.checked_add(len) else {
            return Ok(false);
        };
        let mut maps = String::new();
        io::Read::read_to_string(
            &mut File::from(open_at(self.dir.as_raw_fd(), "maps", 0)?),
            &mut maps,
        )?;
        Ok(covered(&maps, addr, end, write))
    }
}

/// Whether the mappings of a `/proc/PID/maps` text cover `[addr, end)` without a gap, each
/// readable and, if `write`, writable.
fn covered(maps: &str, mut addr: u64, end: u64, write: bool) -> bool {
    for line in maps.lines() {
        let Some((from, to, perms, _)) = maps_line(line) else {
            continue;
        };
        if to <= addr {
            continue;
        }
        let perms = perms.as_bytes();
        if from > addr || perms.first() != Some(&b'r') || (write && perms.get(1) != Some(&b'w')) {
            return false;
        }
        addr = to;
        if addr >= end {
            return true;
        }
    }
    false
}

/// One line of a `/proc/PID/maps` text: its range, its permissions, and its other fields
/// (offset, device, inode, path).
pub fn maps_line(line: &str) -> Option<(u64, u64, &str, std::str::SplitAsciiWhitespace<'_>)> {
    let mut fields = line.split_ascii_whitespace();
    let (from, to) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    let from = u64::from_str_radix(from, 16).ok()?;
    let to = u64::from_str_radix(to, 16).ok()?;
    Some((from, to, perms, fields))
}

/// `addr + done` as a file offset of `/proc/PID/mem`.
fn offset(addr: u64, done: usize) -> io::Result<u64> {
    addr.checked_add(done as u64)
        .filter(|&o| o <= i64::MAX as u64)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))
}

fn open_at(dir: RawFd, path: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    let path =
        std::ffi::CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = check(unsafe { libc::openat(dir, path.as_ptr(), flags | libc::O_CLOEXEC) })?;
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn peer_pidfd(fd: RawFd) -> io::Result<OwnedFd> {
    let mut pidfd: libc::c_int = -1;
    let mut len = size_of::<libc::c_int>() as u32;
    // SAFETY: `pidfd` and `len` outlive the call and `len` is its size.
    check(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&raw mut pidfd).cast(),
            &raw mut len,
        )
    })?;
    // SAFETY: the kernel made a new descriptor for this process to own.
    Ok(unsafe { OwnedFd::from_raw_fd(pidfd) })
}

/// The PID a pidfd names now, from its fdinfo (ESRCH once the process is gone).
fn pidfd_pid(pidfd: &OwnedFd) -> io::Result<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd()))?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|p| p.trim().parse::<i64>().ok())
        .filter(|&p| p > 0)
        .map(|p| p as u32)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
}

/// Whether a pidfd's process has exited (it polls readable then).
fn exited(pidfd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd that outlives the call.
    let n = unsafe { libc::poll(&raw mut p, 1, 0) };
    n != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    const MAPS: &str = "\
00400000-00401000 r-xp 00000000 08:01 1 /bin/x
00401000-00403000 rw-p 00000000 00:00 0
00403000-00404000 rw-p 00000000 00:00 0 [heap]
00500000-00501000 ---p 00000000 00:00 0
";

    #[test]
    fn a_range_is_covered_by_readable_mappings_without_gaps() {
        assert!(covered(MAPS, 0x400000, 0x400010, false));
        assert!(
            !covered(MAPS, 0x400000, 0x400010, true),
            "text is not writable"
        );
        assert!(
            covered(MAPS, 0x401800, 0x403800, true),
            "two adjoining mappings"
        );
        assert!(
            !covered(MAPS, 0x403800, 0x404800, false),
            "runs past the end"
        );
        assert!(!covered(MAPS, 0x500000, 0x500001, false), "PROT_NONE");
        assert!(
            !covered(MAPS, 0x300000, 0x300001, false),
            "before every mapping"
        );
        assert!(!covered(MAPS, 0x404000, 0x404001, false), "in a gap");
    }

    #[test]
    fn runs_are_written_in_order_and_one_that_fails_fails_alone() {
        let (a, _b) = UnixStream::pair().unwrap();
        let peer = Peer::of_socket(a.as_raw_fd()).unwrap();
        // This process is its own user's: process_vm_writev, where the kernel names it.
        assert_eq!(peer.vm_writes.load(Ordering::Relaxed), peer.pidfd.is_some());
        // Both ways: process_vm_writev and /proc/PID/mem.
        for vm_writes in [true, false] {
            peer.vm_writes.store(vm_writes, Ordering::Relaxed);
            let mut data = vec![0u8; 8];
            let addr = data.as_mut_ptr() as u64;
            // More runs than one call takes, each byte written again and again (the last one
            // stays), and one run in the middle into page 0, which is never mapped.
            let bytes: Vec<[u8; 1]> = (0..150u8).map(|i| [i]).collect();
            let at = |i: usize| if i == 70 { 8 } else { addr + (i % 8) as u64 };
            let mut failed = Vec::new();
            let runs = bytes.iter().enumerate().map(|(i, b)| (at(i), &b[..]));
            peer.write_runs(runs, |addr, _| failed.push(addr));
            assert_eq!(failed, [8], "vm_writes {vm_writes}");
            assert_eq!(
                peer.vm_writes.load(Ordering::Relaxed),
                vm_writes,
                "still allowed"
            );
            let want: Vec<u8> = (0..8)
                .map(|k| (142..150).find(|i| i % 8 == k).unwrap())
                .collect();
            assert_eq!(std::hint::black_box(&mut data)[..], want);
        }
    }

    #[test]
    fn reads_and_writes_the_process_at_the_other_end() {
        let (a, _b) = UnixStream::pair().unwrap();
        let peer = Peer::of_socket(a.as_raw_fd()).unwrap();
        assert_eq!(peer.pid(), std::process::id());
        let mut data = vec![1u8, 2, 3, 4];
        let addr = data.as_mut_ptr() as u64;
        peer.write(addr + 1, &[9, 9]).unwrap();
        let mut got = [0u8; 4];
        peer.read(addr, &mut got).unwrap();
        assert_eq!(got, [1, 9, 9, 4]);
        assert_eq!(std::hint::black_box(&mut data)[..], [1, 9, 9, 4]);
        assert!(peer.mapped(addr, 4, true).unwrap());
        // A large read takes the other way, to the same bytes.
        let big: Vec<u8> = (0..VM_READ_FROM * 2).map(|i| i as u8).collect();
        let mut got_big = vec![0u8; big.len()];
        peer.read(big.as_ptr() as u64, &mut got_big).unwrap();
        assert_eq!(got_big, big);
        assert!(peer.read(8, &mut got).is_err(), "page 0 is never mapped");
        assert!(peer.read(u64::MAX - 1, &mut got).is_err());
        let text = a_function as *const () as u64;
        assert!(peer.mapped(text, 1, false).unwrap());
        assert!(!peer.mapped(text, 1, true).unwrap(), "code is read-only");
    }

    fn a_function() {}

    #[test]
    fn a_pinned_process_that_exited_is_not_reached_through_its_pid() {
        let dir = std::env::temp_dir().join(format!("srn-peer-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let listener = std::os::unix::net::UnixListener::bind(&dir).unwrap();
        let mut child = std::process::Command::new("python3")
            .args(["-c", "import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); time.sleep(60)"])
            .arg(&dir)
            .spawn()
            .unwrap();
        let (conn, _) = listener.accept().unwrap();
        let peer = Peer::of_socket(conn.as_raw_fd()).unwrap();
        assert_eq!(peer.pid(), child.id());
        // Its stack is mapped while it lives...
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap();
        let stack = maps.lines().find(|l| l.ends_with("[stack]")).unwrap();
        let addr = u64::from_str_radix(stack.split('-').next().unwrap(), 16).unwrap();
        let mut b = [0u8; 8];
        peer.read(addr + 4096, &mut b).unwrap();
        assert_eq!(
            peer.read_some(addr, &mut vec![0u8; VM_READ_FROM]).unwrap(),
            VM_READ_FROM
        );
        // ...and not once it has gone, whatever has its PID now.
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(peer.read(addr + 4096, &mut b).is_err());
        let mut big = vec![0u8; VM_READ_FROM];
        assert!(
            peer.read(addr, &mut big).is_err(),
            "nor by the large reads' way"
        );
        assert!(peer.write(addr + 4096, &b).is_err());
        assert!(peer.mapped(addr, 1, false).is_err());
        let _ = std::fs::remove_file(&dir);
    }
}
