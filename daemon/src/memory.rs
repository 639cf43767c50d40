//! The daemon reaches a program's registered memory in the program's own address space,
//! through `/proc/PID/mem` of the process that connected, opened when it opened its device
//! ([`sys::Peer`]): no copy into the daemon, no shared mapping to set up, and never another
//! process that reused the PID. The engine has checked keys, PDs, access and ranges before it
//! asks, and registration checked that the program itself can reach the range; a process that
//! has gone (or an address it unmapped) is a fault, which the engine turns into an error
//! completion.
//!
//! Each of those calls costs far more than the bytes it moves, and the engine asks once per
//! packet. So, within one pass of the daemon's loop ([`ProcessMemory::end_pass`]):
//! - a packet-sized read fetches up to [`READ_AHEAD`] bytes, and the packets after it are
//!   served from them; a short read fetches its page, and the short messages after it in the
//!   same buffer are served from it. Up to [`AHEAD_BUFFERS`] messages are read ahead at once: the engine
//!   sends the packets of its ready QPs in turn, so the next packet of one message comes after
//!   a packet of each other one (a single buffer fetched 64 KiB for each 4 KiB packet of
//!   `ib_write_bw -q 8`);
//! - writes are collected (adjoining ones joined) and written together before anything
//!   that could let a program see them: before the daemon sends frames, and at the end of the
//!   pass (before completions reach the rings). A read of bytes with a write pending writes
//!   them first.
//!
//! Where the program shares a region's pages (the client's `share`, `SOFTRNIC_SHARED_MR`), the
//! daemon maps them ([`ProcessMemory::share`]) and reads and writes them in place, with no
//! system call: such a write is made at once, after the collected ones (so the bytes of a
//! message still land in order).
//!
//! Nothing is kept across passes: work a program posts is taken at the start of a pass, after
//! it wrote its buffers. A write that fails when collected writes go out (the program unmapped
//! registered memory) is lost and logged, as data written to the pinned pages of an unmapped
//! region is with rxe.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use softrnic_emu_core::{Fault, IdHasher, Memory, Space};

use softrnic_sys as sys;

/// How much a read fetches at most: sixteen times what it asks for, up to this.
pub const READ_AHEAD: usize = 128 << 10;
/// Reads shorter than this fetch the pages they are in.
const MIN_READ_AHEAD: usize = 1024;
/// The pages short reads fetch.
const PAGE: u64 = 4096;
/// Messages read ahead at once (the least recently used makes room for the next).
pub const AHEAD_BUFFERS: usize = 16;
/// Collected writes go out when they reach this many bytes.
const WRITE_BATCH: usize = 1 << 20;

/// Bytes read ahead from one address space (`bytes` keeps its allocation from pass to pass;
/// `valid` says whether it holds anything in this one).
#[derive(Debug, Default)]
struct Ahead {
    valid: bool,
    space: Space,
    addr: u64,
    bytes: Vec<u8>,
    /// When it last served a read (a count of reads), to find the least recently used.
    used: u64,
}

impl Ahead {
    fn covers(&self, space: Space, addr: u64, len: usize) -> bool {
        self.valid
            && space == self.space
            && addr >= self.addr
            && addr + len as u64 <= self.addr + self.bytes.len() as u64
    }

    fn overlaps(&self, space: Space, addr: u64, len: usize) -> bool {
        self.valid && space == self.space && overlap(self.addr, self.bytes.len(), addr, len)
    }
}

/// Writes not yet made: their bytes back to back in one buffer (kept from pass to pass), and
/// for each run of bytes where it goes.
#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    /// (space, address, start in `bytes`, length), in order.
    runs: Vec<(Space, u64, usize, usize)>,
    /// The spaces of `runs`, while they are written.
    spaces: Vec<Space>,
}

impl Pending {
    fn push(&mut self, space: Space, addr: u64, src: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(src);
        // Packets of one message land back to back: one run.
        match self.runs.last_mut() {
            Some((s, a, _, len)) if *s == space && *a + *len as u64 == addr => *len += src.len(),
            _ => self.runs.push((space, addr, start, src.len())),
        }
    }

    fn overlaps(&self, space: Space, addr: u64, len: usize) -> bool {
        self.runs
            .iter()
            .any(|&(s, a, _, l)| s == space && overlap(a, l, addr, len))
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.runs.clear();
    }
}

/// Whether `[a, a + alen)` and `[b, b + blen)` share a byte.
fn overlap(a: u64, alen: usize, b: u64, blen: usize) -> bool {
    a < b + blen as u64 && b < a + alen as u64
}

/// A context's process, and the pages of its regions it shares, by (address, region key).
#[derive(Debug)]
struct Process {
    peer: Arc<sys::Peer>,
    windows: BTreeMap<(u64, u32), sys::Mmap>,
}

impl Process {
    /// The mapping that holds all of `[addr, addr + len)`, and where in it `addr` is.
    fn window(&self, addr: u64, len: usize) -> Option<(&sys::Mmap, usize)> {
        let (&(start, _), map) = self.windows.range(..=(addr, u32::MAX)).next_back()?;
        let at = (addr - start) as usize;
        (at.checked_add(len)? <= map.len()).then_some((map, at))
    }
}

/// The address spaces of a device's contexts: each context's space is its process.
#[derive(Debug, Default)]
pub struct ProcessMemory {
    procs: HashMap<Space, Process, BuildHasherDefault<IdHasher>>,
    ahead: RefCell<Vec<Ahead>>,
    /// Reads so far, the clock of [`Ahead::used`].
    reads: std::cell::Cell<u64>,
    pending: RefCell<Pending>,
}

impl ProcessMemory {
    /// Context `space` lives in process `peer`.
    pub fn attach(&mut self, space: Space, peer: Arc<sys::Peer>) {
        let windows = BTreeMap::new();
        self.procs.insert(space, Process { peer, windows });
    }

    /// Region `key` of context `space` has pages at `addr` that the program shares: `map`.
    pub fn share(&mut self, space: Space, key: u32, addr: u64, map: sys::Mmap) {
        if let Some(p) = self.procs.get_mut(&space) {
            p.windows.insert((addr, key), map);
        }
    }

    /// Region `key` of context `space` is gone, or no longer over its shared pages.
    pub fn unshare(&mut self, space: Space, key: u32) {
        if let Some(p) = self.procs.get_mut(&space) {
            p.windows.retain(|&(_, k), _| k != key);
        }
    }

    /// The context is gone.
    pub fn detach(&mut self, space: Space) {
        self.flush();
        self.procs.remove(&space);
        self.drop_ahead();
    }

    /// Makes the collected writes: a call per process (or per run, see
    /// [`sys::Peer::write_runs`]).
    pub fn flush(&mut self) {
        self.flush_all();
    }

    /// `flush`, through a shared reference (reads may need it).
    fn flush_all(&self) {
        let mut pending = self.pending.borrow_mut();
        if pending.runs.is_empty() {
            return;
        }
        let pending = &mut *pending;
        pending.spaces.clear();
        for &(space, ..) in &pending.runs {
            if !pending.spaces.contains(&space) {
                pending.spaces.push(space);
            }
        }
        // Each process's writes together, in their order.
        for &space in &pending.spaces {
            // A context that went has no memory left to write.
            let Some(Process { peer, .. }) = self.procs.get(&space) else {
                continue;
            };
            let runs = (pending.runs.iter())
                .filter(|run| run.0 == space)
                .map(|&(_, addr, start, len)| (addr, &pending.bytes[start..start + len]));
            peer.write_runs(runs, |addr, e| {
                let pid = peer.pid();
                tracing::warn!(pid, addr, %e, "writing registered memory failed (unmapped?)");
            });
        }
        pending.clear();
    }

    /// The end of a pass of the daemon's loop: writes made, read-ahead dropped.
    pub fn end_pass(&mut self) {
        self.flush();
        self.drop_ahead();
    }

    fn drop_ahead(&mut self) {
        for a in self.ahead.get_mut() {
            a.valid = false;
        }
    }

    /// Makes the collected writes if one overlaps `[addr, addr + len)` in `space`.
    fn flush_overlapping(&self, space: Space, addr: u64, len: usize) {
        if self.pending.borrow().overlaps(space, addr, len) {
            self.flush_all();
        }
    }
}

impl Memory for ProcessMemory {
    fn read(&self, space: Space, addr: u64, dst: &mut [u8]) -> Result<(), Fault> {
        let proc = self.procs.get(&space).ok_or(Fault)?;
        self.flush_overlapping(space, addr, dst.len());
        if let Some((map, at)) = proc.window(addr, dst.len()) {
            map.read_at(at, dst);
            return Ok(());
        }
        let peer = &proc.peer;
        let now = self.reads.get() + 1;
        self.reads.set(now);
        let mut buffers = self.ahead.borrow_mut();
        if let Some(a) = buffers
            .iter_mut()
            .find(|a| a.covers(space, addr, dst.len()))
        {
            let at = (addr - a.addr) as usize;
            dst.copy_from_slice(&a.bytes[at..at + dst.len()]);
            a.used = now;
            return Ok(());
        }
        // A packet-sized read is likely followed by the rest of its message: fetch ahead (the
        // fetch stops at the first unmapped page, which is fine while it covers what was
        // asked). A short one is a short message, and the next short messages of this pass
        // are likely in the same buffer (a program cycling through it): fetch its pages.
        let (start, want) = if dst.len() < MIN_READ_AHEAD {
            let start = addr & !(PAGE - 1);
            (
                start,
                (addr + dst.len() as u64).next_multiple_of(PAGE) - start,
            )
        } else {
            (addr, (dst.len() * 16).min(READ_AHEAD) as u64)
        };
        let skip = (addr - start) as usize;
        if want as usize <= dst.len() {
            return peer.read(addr, dst).map_err(|_| Fault);
        }
        if buffers.len() < AHEAD_BUFFERS {
            buffers.push(Ahead::default());
        }
        let a = buffers
            .iter_mut()
            .min_by_key(|a| (a.valid, a.used))
            .expect("at least one");
        a.valid = false;
        a.used = now;
        a.bytes.resize(want as usize, 0);
        let n = peer.read_some(start, &mut a.bytes).map_err(|_| Fault)?;
        if n < skip + dst.len() {
            return Err(Fault);
        }
        a.bytes.truncate(n);
        dst.copy_from_slice(&a.bytes[skip..skip + dst.len()]);
        (a.valid, a.space, a.addr) = (true, space, start);
        Ok(())
    }

    fn write(&mut self, space: Space, addr: u64, src: &[u8]) -> Result<(), Fault> {
        let proc = self.procs.get(&space).ok_or(Fault)?;
        for a in self.ahead.get_mut() {
            if a.overlaps(space, addr, src.len()) {
                a.valid = false;
            }
        }
        if let Some((map, at)) = proc.window(addr, src.len()) {
            // After the writes collected before it (a program that watches a message's last
            // byte must find the bytes before it there).
            self.flush_all();
            map.write_at(at, src);
            return Ok(());
        }
        let pending = self.pending.get_mut();
        pending.push(space, addr, src);
        if pending.bytes.len() >= WRITE_BATCH {
            self.flush();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process, as a program at the other end of a socket.
    fn me() -> Arc<sys::Peer> {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        Arc::new(sys::Peer::of_socket(std::os::fd::AsRawFd::as_raw_fd(&a)).unwrap())
    }

    /// The bytes as they are now: the kernel writes them behind the compiler's back.
    fn seen(data: &[u8]) -> Vec<u8> {
        std::hint::black_box(data).to_vec()
    }

    #[test]
    fn reads_and_writes_a_process_and_faults_elsewhere() {
        let mut m = ProcessMemory::default();
        let mut data = vec![1u8, 2, 3, 4];
        let addr = data.as_mut_ptr() as u64;
        m.attach(7, me());
        let mut out = [0u8; 4];
        m.read(7, addr, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
        m.write(7, addr + 1, &[9, 9]).unwrap();
        // A read of written bytes sees them, before the pass ends.
        m.read(7, addr, &mut out).unwrap();
        assert_eq!(out, [1, 9, 9, 4]);
        m.end_pass();
        assert_eq!(seen(&data), [1, 9, 9, 4]);
        assert_eq!(m.read(8, addr, &mut out), Err(Fault), "an unknown context");
        assert_eq!(m.read(7, 8, &mut out), Err(Fault), "an unmapped address");
        m.detach(7);
        assert_eq!(m.read(7, addr, &mut out), Err(Fault));
    }

    #[test]
    fn writes_wait_for_the_pass_to_end_and_reads_ahead_stop_there() {
        let mut m = ProcessMemory::default();
        let mut data = vec![0u8; 3 * 4096];
        let addr = data.as_mut_ptr() as u64;
        m.attach(1, me());
        // Three packets' worth, back to back: collected into one piece.
        for k in 0..3u8 {
            m.write(1, addr + u64::from(k) * 4096, &[k + 1; 4096])
                .unwrap();
        }
        assert_eq!(m.pending.borrow().runs.len(), 1);
        assert_eq!(seen(&data[..1]), [0], "not written yet");
        m.end_pass();
        assert_eq!(seen(&data[8191..8193]), [2, 3]);
        // A packet-sized read fetches ahead, and serves the next packet without asking the
        // kernel...
        let mut packet = [0u8; 4096];
        m.read(1, addr, &mut packet).unwrap();
        data[4096] = 77;
        m.read(1, addr + 4096, &mut packet).unwrap();
        assert_eq!(
            packet[..2],
            [2, 2],
            "served from the bytes read ahead in this pass"
        );
        // ...until the pass ends.
        m.end_pass();
        m.read(1, addr + 4096, &mut packet).unwrap();
        assert_eq!(packet[..2], [77, 2]);
        // A short read fetches its page, which serves the next short read in it.
        m.end_pass();
        m.read(1, addr + 4096 + 8, &mut packet[..8]).unwrap();
        data[4096 + 16] = 55;
        m.read(1, addr + 4096 + 16, &mut packet[..8]).unwrap();
        assert_eq!(packet[0], 2, "the page as it was fetched");
        m.end_pass();
        m.read(1, addr + 4096 + 16, &mut packet[..8]).unwrap();
        assert_eq!(packet[0], 55);
    }

    #[test]
    fn messages_read_in_turn_are_each_read_ahead() {
        let mut m = ProcessMemory::default();
        // Four 16 KiB messages, far enough apart that no fetch covers two.
        const APART: usize = READ_AHEAD;
        let data: Vec<u8> = (0..4 * APART).map(|i| (i / APART) as u8).collect();
        let base = data.as_ptr() as u64;
        m.attach(1, me());
        let mut packet = [0u8; 4096];
        for p in 0..4 {
            for k in 0..4 {
                m.read(1, base + (k * APART + p * 4096) as u64, &mut packet)
                    .unwrap();
                assert_eq!(packet[0], k as u8);
            }
        }
        // One fetch per message, each still held.
        assert_eq!(m.ahead.borrow().iter().filter(|a| a.valid).count(), 4);
        // A write into one drops that one only.
        m.write(1, base + 2 * APART as u64 + 100, &[9]).unwrap();
        assert_eq!(m.ahead.borrow().iter().filter(|a| a.valid).count(), 3);
        m.end_pass();
        assert_eq!(seen(&data[2 * APART + 100..][..1]), [9]);
    }

    #[test]
    fn shared_pages_are_reached_in_place_after_the_writes_collected_before() {
        let mut m = ProcessMemory::default();
        m.attach(1, me());
        // The program's pages on a memfd, at `prog`; the daemon's own mapping of them.
        let fd = sys::memfd(c"test", 2 * 4096).unwrap();
        let prog = sys::Mmap::new(2 * 4096, Some((&fd, 0))).unwrap();
        let addr = prog.as_ptr() as u64;
        m.share(1, 5, addr, sys::Mmap::of_sealed(&fd, 0, 2 * 4096).unwrap());
        let mut other = vec![0u8; 8];
        let edge = other.as_mut_ptr() as u64;
        let mut out = [0u8; 2];
        // Collected (outside the pages)...
        m.write(1, edge, &[3]).unwrap();
        assert_eq!(seen(&other[..1]), [0]);
        // ...then made, before a write into the pages, which lands at once.
        m.write(1, addr + 4095, &[1, 2]).unwrap();
        assert_eq!(seen(&other[..1]), [3]);
        assert!(prog.read_at(4095, &mut out));
        assert_eq!(out, [1, 2]);
        assert!(m.pending.borrow().runs.is_empty());
        // The program's stores are what the daemon reads.
        assert!(prog.write_at(10, &[8, 9]));
        m.read(1, addr + 10, &mut out).unwrap();
        assert_eq!(out, [8, 9]);
        // Once the region is gone its writes are collected again.
        m.unshare(1, 5);
        m.write(1, addr, &[4]).unwrap();
        assert!(prog.read_at(0, &mut out[..1]));
        assert_eq!(out[0], 0);
        m.end_pass();
        assert!(prog.read_at(0, &mut out[..1]));
        assert_eq!(out[0], 4);
    }
}
