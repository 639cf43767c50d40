//! The data path between a program and the daemon: rings in a memory region they share, so
//! posting a work request or polling a completion is a few memory accesses, not a message.
//!
//! The daemon creates a context's region (a memfd) and hands it to the program with the
//! context. Each send, receive and shared receive queue is a ring the program produces into and
//! the daemon consumes; each completion queue a ring the daemon produces into and the program
//! consumes. A slot holds one fixed-layout record ([`crate::slot`]).
//!
//! Doorbells cost a syscall only when the daemon sleeps: the program bumps the region's doorbell
//! counter after producing, and writes the wake-up socket only if the daemon has said it is
//! going to sleep. Before that it says which queue has new work: a ring that goes from quiet to
//! busy is announced once, by its number in the region's notice ring, so the daemon looks at the
//! rings named there and not at every ring of the context (a program may hold 100,000 QPs). If
//! the notice ring is full, an overflow flag makes the daemon look at every ring. The daemon says so, then looks at every ring once more before it sleeps, so
//! a work request produced in between is never left waiting.
//!
//! The region is shared with a program the daemon does not trust: the daemon keeps its own copy
//! of the indices it owns, and checks every length and index it reads.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};

use softrnic_emu_core::WorkQueue;

use softrnic_sys as sys;
use softrnic_sys::Mmap;

/// Bytes per context region (memfd pages appear only as rings use them).
pub const REGION_BYTES: usize = 512 << 20;
/// The header page: magic, the daemon's "going to sleep" flag, the doorbell counter.
const HEADER: usize = 4096;
const MAGIC: u32 = 0x534e_5231; // "SNR1"
const SLEEPING: usize = 64;
const DOORBELL: usize = 128;
const OVERFLOW: usize = 192;
/// A ring's consumer index sits a cache line after its producer index; slots start after both.
const CONSUMER: usize = 64;
/// A work request ring's "announced" flag, in the consumer's line.
const ANNOUNCED: usize = CONSUMER + 4;
const SLOTS: usize = 128;
/// The notice ring, right after the header: one slot per announcement.
const NOTICES: RingInfo = RingInfo {
    offset: HEADER as u64,
    slots: 4096,
    slot_size: 8,
};

/// Where a ring lives in a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingInfo {
    /// Byte offset in the region.
    pub offset: u64,
    /// Number of slots (a power of two).
    pub slots: u32,
    /// Bytes per slot.
    pub slot_size: u32,
}

impl RingInfo {
    fn bytes(&self) -> usize {
        SLOTS + self.slots as usize * self.slot_size as usize
    }

    /// The place it takes in a region: its bytes, rounded up to whole cache lines.
    fn size(&self) -> usize {
        self.bytes().next_multiple_of(64)
    }
}

/// A mapped region.
pub struct Region {
    map: Mmap,
    /// The program's mapping: its peer is the daemon, which it trusts to keep to the rings'
    /// contract (never to write a slot the program is writing or reading), so the program
    /// writes and reads slots in place. The daemon's peer is a program, which may write
    /// anything at any time: the daemon copies.
    in_place: bool,
}

// SAFETY: the region is plain shared memory, reached only through atomics and bounds-checked
// copies.
unsafe impl Sync for Region {}

impl Region {
    /// Creates a region (the daemon) and returns it with the memfd to hand to the program.
    pub fn create() -> io::Result<(Arc<Region>, OwnedFd)> {
        let fd = sys::memfd(c"softrnic-context", REGION_BYTES as u64)?;
        let region = Region {
            map: Mmap::new(REGION_BYTES, Some((&fd, 0)))?,
            in_place: false,
        };
        region.atomic(0).store(MAGIC, Ordering::Release);
        Ok((Arc::new(region), fd))
    }

    /// Maps a region the daemon handed over (the program).
    pub fn open(fd: &OwnedFd) -> io::Result<Arc<Region>> {
        let region = Region {
            map: Mmap::new(REGION_BYTES, Some((fd, 0)))?,
            in_place: true,
        };
        if region.atomic(0).load(Ordering::Acquire) != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a softrnic region",
            ));
        }
        Ok(Arc::new(region))
    }

    /// The 32-bit atomic at byte `at` (4-aligned, inside the region).
    fn atomic(&self, at: usize) -> &AtomicU32 {
        assert!(at.is_multiple_of(4) && at + 4 <= self.map.len());
        // SAFETY: in bounds and aligned (checked above, and the mapping is page-aligned);
        // every access to these words is atomic, on both sides.
        unsafe { &*self.map.as_ptr().add(at).cast::<AtomicU32>() }
    }

    /// Copies `src` into the region at `at`.
    fn write(&self, at: usize, src: &[u8]) {
        assert!(at + src.len() <= self.map.len());
        // SAFETY: in bounds (checked above); the slot belongs to the producer until it
        // publishes it, so no one else writes it now.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.map.as_ptr().add(at), src.len()) }
    }

    /// The `len` bytes at `at` of the program's mapping, to write in place: the caller
    /// (a ring's producer) holds them until it produces them, and the daemon neither reads
    /// nor writes them meanwhile.
    #[allow(clippy::mut_from_ref)]
    fn bytes_mut(&self, at: usize, len: usize) -> &mut [u8] {
        assert!(self.in_place && at + len <= self.map.len());
        // SAFETY: in bounds (checked above); the program's mapping, where the daemon keeps
        // to the contract, and the caller's slot until produced.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr().add(at), len) }
    }

    /// The `len` bytes at `at` of the program's mapping, to read in place: a slot the daemon
    /// produced, which it does not write again until the caller consumes it.
    fn bytes(&self, at: usize, len: usize) -> &[u8] {
        assert!(self.in_place && at + len <= self.map.len());
        // SAFETY: in bounds (checked above); the program's mapping, where the daemon keeps to
        // the contract.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(at), len) }
    }

    /// Copies bytes at `at` out of the region.
    fn read(&self, at: usize, dst: &mut [u8]) {
        assert!(at + dst.len() <= self.map.len());
        // SAFETY: in bounds (checked above). A misbehaving peer may change the bytes while we
        // copy; we only ever treat what we copied as untrusted input.
        unsafe {
            std::ptr::copy_nonoverlapping(self.map.as_ptr().add(at), dst.as_mut_ptr(), dst.len())
        }
    }

    /// The daemon says it is about to sleep (`true`) or is awake.
    pub fn set_sleeping(&self, sleeping: bool) {
        self.atomic(SLEEPING)
            .store(u32::from(sleeping), Ordering::SeqCst);
    }

    /// Whether the daemon sleeps (the program then writes the wake-up socket).
    pub fn sleeping(&self) -> bool {
        self.atomic(SLEEPING).load(Ordering::SeqCst) != 0
    }

    /// The program rings the doorbell after producing.
    pub fn ring_doorbell(&self) {
        self.atomic(DOORBELL).fetch_add(1, Ordering::SeqCst);
    }

    /// The doorbell's count (the daemon compares it with the last it saw).
    pub fn doorbell(&self) -> u32 {
        self.atomic(DOORBELL).load(Ordering::SeqCst)
    }

    /// The program found the notice ring full: the daemon is to look at every ring.
    pub fn set_overflow(&self) {
        self.atomic(OVERFLOW).store(1, Ordering::SeqCst);
    }

    /// Whether the notice ring overflowed since the daemon last asked (the daemon).
    pub fn take_overflow(&self) -> bool {
        self.atomic(OVERFLOW).swap(0, Ordering::SeqCst) != 0
    }
}

/// A notice names a queue by one word: its kind in the top two bits, its number below.
fn to_word(queue: WorkQueue) -> u32 {
    const NUMBER: u32 = 0x3fff_ffff;
    match queue {
        WorkQueue::Send(n) => n & NUMBER,
        WorkQueue::Recv(n) => 1 << 30 | (n & NUMBER),
        WorkQueue::Srq(n) => 2 << 30 | (n & NUMBER),
    }
}

fn from_word(w: u32) -> Option<WorkQueue> {
    let n = w & 0x3fff_ffff;
    match w >> 30 {
        0 => Some(WorkQueue::Send(n)),
        1 => Some(WorkQueue::Recv(n)),
        2 => Some(WorkQueue::Srq(n)),
        _ => None,
    }
}

/// One side of the region's notice ring: the program produces, the daemon consumes.
pub struct Notices(Ring);

impl Notices {
    /// The notice ring of `region`.
    pub fn new(region: &Arc<Region>) -> Notices {
        Notices(Ring::new(region, NOTICES).expect("inside every region"))
    }

    /// Says that `ring` (the ring of `queue`) has new work, unless it was said and the daemon
    /// has not looked yet (the program, after pushing into `ring`).
    pub fn announce(&mut self, ring: &Ring, queue: WorkQueue) {
        if ring.announced().swap(1, Ordering::AcqRel) == 0
            && !self.0.push(&to_word(queue).to_le_bytes())
        {
            self.0.region.set_overflow();
        }
    }

    /// The next notice, if any; a word that names no kind of queue is skipped (the daemon).
    pub fn next(&mut self, buf: &mut Vec<u8>) -> Option<WorkQueue> {
        while self.0.pop(buf) {
            let word = u32::from_le_bytes(buf[..4].try_into().expect("a slot holds 8 bytes"));
            if let Some(n) = from_word(word) {
                return Some(n);
            }
        }
        None
    }
}

/// Places rings in a region (the daemon): one after the other, and again in the place of a
/// freed ring of the same size, so a program that creates and destroys objects for ever does
/// not run out of room.
#[derive(Debug)]
pub struct Allocator {
    next: usize,
    /// Freed places, by their size in bytes.
    free: BTreeMap<usize, Vec<usize>>,
}

impl Default for Allocator {
    fn default() -> Allocator {
        Allocator {
            next: HEADER + NOTICES.bytes(),
            free: BTreeMap::new(),
        }
    }
}

impl Allocator {
    /// Room for a ring of at least `entries` slots of `slot_size` bytes; ENOMEM when the region
    /// is full. A reused place still holds its last ring's indices: [`Ring::reset`] them.
    pub fn ring(&mut self, entries: u32, slot_size: u32) -> io::Result<RingInfo> {
        let mut info = RingInfo {
            offset: 0,
            slots: entries.max(1).next_power_of_two(),
            slot_size,
        };
        let size = info.size();
        if let Some(at) = self.free.get_mut(&size).and_then(Vec::pop) {
            info.offset = at as u64;
            return Ok(info);
        }
        if self.next + size > REGION_BYTES {
            return Err(io::Error::from_raw_os_error(libc::ENOMEM));
        }
        info.offset = self.next as u64;
        self.next += size;
        Ok(info)
    }

    /// The ring at `info` is gone: its place may be given again.
    pub fn free(&mut self, info: RingInfo) {
        self.free
            .entry(info.size())
            .or_default()
            .push(info.offset as usize);
    }
}

/// One side of a ring. The producer owns the producer index and the consumer the consumer
/// index; each keeps its own copy and reads the other's from the region, checked.
pub struct Ring {
    region: Arc<Region>,
    info: RingInfo,
    /// Our own index (producer or consumer, by how we use the ring).
    mine: u32,
    /// The other side's index as we last read it: read again only when it says the ring is
    /// empty (consumer) or full (producer), so a batch costs one read of the other side's
    /// cache line, not one per slot. Stale is safe: it only ever shows less than there is.
    theirs: u32,
}

impl Ring {
    /// A side of the ring at `info` in `region`; fails if it does not fit.
    pub fn new(region: &Arc<Region>, info: RingInfo) -> io::Result<Ring> {
        let fits = info.slots.is_power_of_two()
            && info.slot_size >= 8
            && info.slot_size.is_multiple_of(4)
            && (info.offset as usize).is_multiple_of(64)
            && (info.offset as usize)
                .checked_add(info.bytes())
                .is_some_and(|e| e <= REGION_BYTES);
        if !fits {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring outside its region",
            ));
        }
        Ok(Ring {
            region: Arc::clone(region),
            info,
            mine: 0,
            theirs: 0,
        })
    }

    /// Where it lives.
    pub fn info(&self) -> RingInfo {
        self.info
    }

    /// Empties a ring whose place held another ring before (the daemon, before the program
    /// has it).
    pub fn reset(&mut self) {
        (self.mine, self.theirs) = (0, 0);
        self.producer().store(0, Ordering::Release);
        self.consumer().store(0, Ordering::Release);
        self.announced().store(0, Ordering::Release);
    }

    fn producer(&self) -> &AtomicU32 {
        self.region.atomic(self.info.offset as usize)
    }

    fn consumer(&self) -> &AtomicU32 {
        self.region.atomic(self.info.offset as usize + CONSUMER)
    }

    fn announced(&self) -> &AtomicU32 {
        self.region.atomic(self.info.offset as usize + ANNOUNCED)
    }

    /// The daemon is about to look at this ring: work pushed from now on is announced again.
    pub fn clear_announced(&self) {
        // A read-modify-write, as the program's announcement is: one of the two sees the other.
        self.announced().swap(0, Ordering::AcqRel);
    }

    fn slot(&self, index: u32) -> usize {
        self.info.offset as usize
            + SLOTS
            + (index & (self.info.slots - 1)) as usize * self.info.slot_size as usize
    }

    /// Bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.info.slot_size as usize
    }

    /// Produces one slot from `msg`'s bytes (the rest of the slot is left as it was); false if
    /// the ring is full or `msg` is bigger than a slot.
    pub fn push(&mut self, msg: &[u8]) -> bool {
        if !self.room() || msg.len() > self.slot_size() {
            return false;
        }
        self.region.write(self.slot(self.mine), msg);
        self.produced();
        true
    }

    /// Whether a slot is free (producer side), looking at the consumer index only when the
    /// one last seen leaves none.
    fn room(&mut self) -> bool {
        if self.mine.wrapping_sub(self.theirs) >= self.info.slots {
            self.theirs = self.consumer().load(Ordering::Acquire);
        }
        // A consumer index that claims more than was produced is treated as "nothing consumed".
        self.mine.wrapping_sub(self.theirs) < self.info.slots
    }

    /// The slot produced.
    fn produced(&mut self) {
        self.mine = self.mine.wrapping_add(1);
        self.producer().store(self.mine, Ordering::Release);
    }

    /// Produces one slot that `fill` writes in place, unless it fails (then nothing is
    /// produced); `Ok(false)` if the ring is full. The program's side only (its send and
    /// receive rings), with no copy; the daemon copies ([`push`](Self::push)).
    pub fn push_in_place<E>(
        &mut self,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<bool, E> {
        if !self.room() {
            return Ok(false);
        }
        fill(
            self.region
                .bytes_mut(self.slot(self.mine), self.slot_size()),
        )?;
        self.produced();
        Ok(true)
    }

    /// The index of the next slot to consume, if one waits (consumer side).
    fn next_waiting(&mut self) -> Option<u32> {
        if self.theirs == self.mine {
            self.theirs = self.producer().load(Ordering::Acquire);
        }
        let waiting = self.theirs.wrapping_sub(self.mine);
        if waiting == 0 || waiting > self.info.slots {
            // A producer index out of the ring's range is not kept.
            self.theirs = self.mine;
            return None;
        }
        Some(self.mine)
    }

    /// The slot consumed.
    fn consumed(&mut self) {
        self.mine = self.mine.wrapping_add(1);
        self.consumer().store(self.mine, Ordering::Release);
    }

    /// Consumes one slot, copied into `out` (resized to a slot); false if the ring is empty.
    pub fn pop(&mut self, out: &mut Vec<u8>) -> bool {
        let Some(at) = self.next_waiting() else {
            return false;
        };
        out.resize(self.slot_size(), 0);
        self.region.read(self.slot(at), out);
        self.consumed();
        true
    }

    /// Consumes one slot, read in place by `read`; `None` if the ring is empty. The program's
    /// side only (its completion rings), with no copy; the daemon copies ([`pop`](Self::pop)).
    pub fn pop_in_place<T>(&mut self, read: impl FnOnce(&[u8]) -> T) -> Option<T> {
        let at = self.next_waiting()?;
        let got = read(self.region.bytes(self.slot(at), self.slot_size()));
        self.consumed();
        Some(got)
    }

    /// Drops the waiting slots `drop` picks (consumer side), keeping the others in order: they
    /// move up against the newest, and the consumer index passes the freed slots. The producer
    /// writes only past the producer index and reads only the consumer index, so it may go on
    /// meanwhile. How many were dropped.
    pub fn drop_waiting(&mut self, mut drop: impl FnMut(&[u8]) -> bool) -> u32 {
        let produced = self.producer().load(Ordering::Acquire);
        let waiting = produced.wrapping_sub(self.mine);
        if waiting == 0 || waiting > self.info.slots {
            return 0;
        }
        let mut slot = vec![0u8; self.slot_size()];
        let mut kept_from = produced;
        for k in (0..waiting).rev() {
            let at = self.mine.wrapping_add(k);
            self.region.read(self.slot(at), &mut slot);
            if !drop(&slot) {
                kept_from = kept_from.wrapping_sub(1);
                if kept_from != at {
                    self.region.write(self.slot(kept_from), &slot);
                }
            }
        }
        let dropped = kept_from.wrapping_sub(self.mine);
        (self.mine, self.theirs) = (kept_from, produced);
        self.consumer().store(self.mine, Ordering::Release);
        dropped
    }

    /// Whether a message waits (consumer side).
    pub fn has_message(&self) -> bool {
        let waiting = self
            .producer()
            .load(Ordering::Acquire)
            .wrapping_sub(self.mine);
        waiting != 0 && waiting <= self.info.slots
    }

    /// The slots produced but not consumed yet (producer side), oldest first.
    pub fn unconsumed(&self) -> Vec<Vec<u8>> {
        let consumed = self.consumer().load(Ordering::Acquire);
        let waiting = self.mine.wrapping_sub(consumed).min(self.info.slots);
        (0..waiting)
            .map(|k| {
                let at = self.slot(self.mine.wrapping_sub(waiting).wrapping_add(k));
                let mut out = vec![0u8; self.slot_size()];
                self.region.read(at, &mut out);
                out
            })
            .collect()
    }

    /// Whether every slot holds a message (consumer side): the producer may have more that
    /// wait for room. The producer index read is kept for the next [`pop`](Self::pop).
    pub fn is_full(&mut self) -> bool {
        self.theirs = self.producer().load(Ordering::Acquire);
        self.theirs.wrapping_sub(self.mine) == self.info.slots
    }

    /// Whether there is room for another message (producer side).
    pub fn has_room(&self) -> bool {
        self.mine
            .wrapping_sub(self.consumer().load(Ordering::Acquire))
            < self.info.slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new ring of `slots` slots of `size` bytes, as its producer on `from` and its consumer
    /// on `to` see it.
    fn ring(
        alloc: &mut Allocator,
        (from, to): (&Arc<Region>, &Arc<Region>),
        (slots, size): (u32, u32),
    ) -> (Ring, Ring) {
        let info = alloc.ring(slots, size).unwrap();
        (Ring::new(from, info).unwrap(), Ring::new(to, info).unwrap())
    }

    #[test]
    fn dropping_waiting_slots_keeps_the_others_in_order() {
        let (daemon, fd) = Region::create().unwrap();
        let program = Region::open(&fd).unwrap();
        let (mut tx, mut rx) = ring(&mut Allocator::default(), (&daemon, &program), (8, 8));
        let mut out = Vec::new();
        // Wrap the indexes first: the ring's slots are reused across its end.
        for i in 0..6u8 {
            assert!(tx.push(&[i; 8]));
            assert!(rx.pop(&mut out));
        }
        for i in 10..16u8 {
            assert!(tx.push(&[i; 8]));
        }
        assert_eq!(rx.drop_waiting(|s| s[0] % 2 == 1), 3);
        // The producer may go on: the freed slots are its again.
        assert!(tx.push(&[20; 8]));
        let mut got = Vec::new();
        while rx.pop(&mut out) {
            got.push(out[0]);
        }
        assert_eq!(got, [10, 12, 14, 20]);
        assert_eq!(rx.drop_waiting(|_| true), 0, "nothing waits");
    }

    #[test]
    fn a_ring_carries_messages_between_two_mappings() {
        let (daemon, fd) = Region::create().unwrap();
        let program = Region::open(&fd).unwrap();
        let mut alloc = Allocator::default();
        let info = alloc.ring(3, 64).unwrap();
        assert_eq!(info.slots, 4);
        let mut tx = Ring::new(&program, info).unwrap();
        let mut rx = Ring::new(&daemon, info).unwrap();
        let mut out = Vec::new();
        assert!(!rx.pop(&mut out));
        for i in 0..4u8 {
            assert!(tx.push(&[i; 64]));
        }
        assert!(!tx.push(&[9]), "full");
        for i in 0..4u8 {
            assert!(rx.pop(&mut out));
            assert_eq!(out, [i; 64]);
        }
        assert!(!tx.push(&[0; 65]), "too big for a slot");
        assert!(!rx.has_message());
        assert!(tx.has_room());
        // Wraps around.
        for round in 0..10u8 {
            assert!(tx.push(&[round; 64]));
            assert!(rx.pop(&mut out));
            assert_eq!(out, [round; 64]);
        }
        // Doorbell and sleep flag are seen across mappings.
        daemon.set_sleeping(true);
        assert!(program.sleeping());
        program.ring_doorbell();
        assert_eq!(daemon.doorbell(), 1);
    }

    #[test]
    fn the_program_writes_and_reads_slots_in_place_and_sees_a_full_ring() {
        let (daemon, fd) = Region::create().unwrap();
        let program = Region::open(&fd).unwrap();
        let mut alloc = Allocator::default();
        // A send ring: the program produces in place, the daemon copies out.
        let (mut sq, mut taken) = ring(&mut alloc, (&program, &daemon), (2, 16));
        let fill = |sq: &mut Ring, v: u8| {
            sq.push_in_place(|s: &mut [u8]| {
                s.fill(v);
                Ok::<_, ()>(())
            })
        };
        // A fill that fails produces nothing.
        assert_eq!(sq.push_in_place(|_| Err("no")), Err("no"));
        assert!(!taken.has_message());
        let mut out = Vec::new();
        for round in 0..3u8 {
            assert_eq!(fill(&mut sq, 2 * round), Ok(true));
            assert_eq!(fill(&mut sq, 2 * round + 1), Ok(true));
            assert_eq!(fill(&mut sq, 99), Ok(false), "full");
            for k in 0..2 {
                assert!(taken.pop(&mut out));
                assert_eq!(out, [2 * round + k; 16]);
            }
        }
        // A completion ring: the daemon copies in, the program reads in place, and sees when
        // the ring is full (completions may then wait in the daemon).
        let (mut cq, mut polled) = ring(&mut alloc, (&daemon, &program), (2, 16));
        for round in 0..3u8 {
            assert!(!polled.is_full());
            assert!(cq.push(&[2 * round; 16]) && cq.push(&[2 * round + 1; 16]));
            assert!(polled.is_full());
            for k in 0..2 {
                assert_eq!(
                    polled.pop_in_place(<[u8]>::to_vec),
                    Some(vec![2 * round + k; 16])
                );
                assert!(!polled.is_full());
            }
            assert_eq!(polled.pop_in_place(|_| ()), None);
        }
    }

    #[test]
    #[should_panic]
    fn the_daemon_never_writes_a_slot_in_place() {
        let (daemon, _fd) = Region::create().unwrap();
        let info = Allocator::default().ring(2, 16).unwrap();
        let _ = Ring::new(&daemon, info)
            .unwrap()
            .push_in_place(|_| Ok::<_, ()>(()));
    }

    #[test]
    fn a_busy_ring_is_announced_once_until_the_daemon_looks() {
        let (daemon, fd) = Region::create().unwrap();
        let program = Region::open(&fd).unwrap();
        let mut alloc = Allocator::default();
        let info = alloc.ring(4, 64).unwrap();
        let mut tx = Ring::new(&program, info).unwrap();
        let rx = Ring::new(&daemon, info).unwrap();
        let mut said = Notices::new(&program);
        let mut heard = Notices::new(&daemon);
        let mut buf = Vec::new();
        for _ in 0..3 {
            assert!(tx.push(&[1; 64]));
            said.announce(&tx, WorkQueue::Recv(9));
        }
        assert_eq!(heard.next(&mut buf), Some(WorkQueue::Recv(9)));
        assert_eq!(heard.next(&mut buf), None, "announced once");
        rx.clear_announced();
        said.announce(&tx, WorkQueue::Recv(9));
        assert_eq!(
            heard.next(&mut buf),
            Some(WorkQueue::Recv(9)),
            "again once looked at"
        );
        // A full notice ring sets the overflow flag.
        let other = Ring::new(&program, alloc.ring(1, 64).unwrap()).unwrap();
        for _ in 0..NOTICES.slots {
            other.clear_announced();
            said.announce(&other, WorkQueue::Send(1));
        }
        assert!(!daemon.take_overflow());
        other.clear_announced();
        said.announce(&other, WorkQueue::Send(1));
        assert!(daemon.take_overflow());
        assert!(!daemon.take_overflow(), "taken");
        // A word naming no queue is skipped.
        assert_eq!(from_word(3 << 30), None);
        assert_eq!(
            from_word(to_word(WorkQueue::Srq(5))),
            Some(WorkQueue::Srq(5))
        );
    }

    #[test]
    fn a_freed_place_is_given_to_the_next_ring_of_its_size() {
        let (region, _fd) = Region::create().unwrap();
        let mut alloc = Allocator::default();
        let a = alloc.ring(16, 112).unwrap();
        alloc.ring(16, 32).unwrap();
        let mut ring = Ring::new(&region, a).unwrap();
        assert!(ring.push(&[7; 112]));
        alloc.free(a);
        assert_ne!(alloc.ring(16, 32).unwrap().offset, a.offset, "another size");
        let again = alloc.ring(16, 112).unwrap();
        assert_eq!(again, a);
        assert_ne!(alloc.ring(16, 112).unwrap().offset, a.offset, "given once");
        // Reset, the place holds an empty ring again.
        let mut consumer = Ring::new(&region, again).unwrap();
        consumer.reset();
        assert!(!consumer.has_message());
        let mut producer = Ring::new(&region, again).unwrap();
        assert!(producer.push(&[1; 112]));
        let mut out = Vec::new();
        assert!(consumer.pop(&mut out));
        assert_eq!(out, [1; 112]);
        assert!(!consumer.has_message());
    }

    #[test]
    fn a_program_cannot_resize_the_region() {
        use std::os::fd::AsRawFd;
        let (_daemon, fd) = Region::create().unwrap();
        for len in [0, REGION_BYTES as libc::off_t * 2] {
            // SAFETY: no pointers.
            let r = unsafe { libc::ftruncate(fd.as_raw_fd(), len) };
            assert_eq!(r, -1, "resized to {len}");
            assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::EPERM));
        }
    }

    #[test]
    fn garbage_from_the_other_side_is_contained() {
        let (daemon, fd) = Region::create().unwrap();
        let program = Region::open(&fd).unwrap();
        let info = Allocator::default().ring(4, 64).unwrap();
        let mut rx = Ring::new(&daemon, info).unwrap();
        // A producer index far beyond the ring: nothing is consumed.
        program
            .atomic(info.offset as usize)
            .store(1000, Ordering::Release);
        assert!(!rx.pop(&mut Vec::new()));
        // A plausible index: one slot's bytes, however long the program made `out`.
        program
            .atomic(info.offset as usize)
            .store(1, Ordering::Release);
        let mut out = vec![1; 1000];
        assert!(rx.pop(&mut out));
        assert_eq!(out.len(), 64);
        // Rings outside the region are refused.
        let bad = RingInfo {
            offset: REGION_BYTES as u64,
            ..info
        };
        assert!(Ring::new(&daemon, bad).is_err());
    }
}
