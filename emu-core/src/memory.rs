//! How the engine reaches application memory: through the [`Memory`] trait, so the same engine
//! serves a Rust program in-process ([`HeapMemory`]) and the device daemon, which reaches into
//! other processes.
//!
//! The engine checks keys, access rights and ranges *before* it calls the trait (see
//! [`crate::keys`]); an implementation still fails cleanly on an address it cannot reach, and
//! the engine turns that failure into an error completion, never a panic.

use std::collections::BTreeMap;

/// An address space: the process a protection domain belongs to. In-process use has one.
pub type Space = u32;

/// An access the memory refused (an address that is not mapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault;

/// Application memory, addressed by (space, virtual address).
pub trait Memory {
    /// Copies `dst.len()` bytes at `addr` into `dst`.
    fn read(&self, space: Space, addr: u64, dst: &mut [u8]) -> Result<(), Fault>;
    /// Copies `src` to `addr`.
    fn write(&mut self, space: Space, addr: u64, src: &[u8]) -> Result<(), Fault>;

    /// An 8-byte atomic at an 8-aligned address: replaces the value `v` with `op(v)` and returns
    /// `v`. The engine is the only one that executes RDMA atomics on its memory, so reading and
    /// writing under `&mut self` makes them atomic with respect to each other (IBV_ATOMIC_HCA).
    fn atomic(&mut self, space: Space, addr: u64, op: &dyn Fn(u64) -> u64) -> Result<u64, Fault> {
        let mut bytes = [0u8; 8];
        self.read(space, addr, &mut bytes)?;
        let old = u64::from_ne_bytes(bytes);
        self.write(space, addr, &op(old).to_ne_bytes())?;
        Ok(old)
    }
}

/// Memory owned by the engine's user, in one address space: buffers placed at addresses of its
/// choosing. Library mode and the simulation use it.
#[derive(Debug, Clone)]
pub struct HeapMemory {
    buffers: BTreeMap<u64, Vec<u8>>,
    next: u64,
}

impl Default for HeapMemory {
    fn default() -> HeapMemory {
        HeapMemory::new()
    }
}

impl HeapMemory {
    /// Empty memory; the first buffer is placed at 0x1000, so address 0 is never valid.
    pub fn new() -> HeapMemory {
        HeapMemory {
            buffers: BTreeMap::new(),
            next: 0x1000,
        }
    }

    /// Allocates a zeroed buffer of `len` bytes and returns its address. Buffers are 4 KiB
    /// aligned with an unmapped gap between them, so an overrun faults.
    pub fn alloc(&mut self, len: usize) -> u64 {
        let addr = self.next;
        self.next = (addr + len as u64 + 0x1fff) & !0xfff;
        self.buffers.insert(addr, vec![0; len]);
        addr
    }

    /// Frees the buffer at `addr` (its start).
    pub fn free(&mut self, addr: u64) -> bool {
        self.buffers.remove(&addr).is_some()
    }

    /// The bytes of the buffer that holds `addr..addr + len`.
    pub fn slice(&self, addr: u64, len: usize) -> Result<&[u8], Fault> {
        let (start, buf) = self.buffers.range(..=addr).next_back().ok_or(Fault)?;
        let at = (addr - start) as usize;
        buf.get(at..at.checked_add(len).ok_or(Fault)?).ok_or(Fault)
    }

    /// The bytes of the buffer that holds `addr..addr + len`, writable.
    pub fn slice_mut(&mut self, addr: u64, len: usize) -> Result<&mut [u8], Fault> {
        let (start, buf) = self.buffers.range_mut(..=addr).next_back().ok_or(Fault)?;
        let at = (addr - start) as usize;
        buf.get_mut(at..at.checked_add(len).ok_or(Fault)?)
            .ok_or(Fault)
    }

    /// Bytes allocated, for memory-bound checks.
    pub fn allocated(&self) -> usize {
        self.buffers.values().map(Vec::len).sum()
    }
}

impl Memory for HeapMemory {
    fn read(&self, _space: Space, addr: u64, dst: &mut [u8]) -> Result<(), Fault> {
        dst.copy_from_slice(self.slice(addr, dst.len())?);
        Ok(())
    }

    fn write(&mut self, _space: Space, addr: u64, src: &[u8]) -> Result<(), Fault> {
        self.slice_mut(addr, src.len())?.copy_from_slice(src);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_separate_and_bounded() {
        let mut m = HeapMemory::new();
        let a = m.alloc(100);
        let b = m.alloc(10);
        assert!(b >= a + 100 + 0x1000 - 1);
        m.write(0, a + 96, &[1, 2, 3, 4]).unwrap();
        assert_eq!(m.write(0, a + 97, &[1, 2, 3, 4]), Err(Fault));
        assert_eq!(m.write(0, a - 1, &[1]), Err(Fault));
        let mut out = [0; 4];
        m.read(0, a + 96, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
        assert_eq!(m.read(0, b + 10, &mut [0]), Err(Fault));
        assert!(m.free(a));
        assert_eq!(m.read(0, a, &mut [0]), Err(Fault));
    }

    #[test]
    fn atomics_read_modify_write() {
        let mut m = HeapMemory::new();
        let a = m.alloc(8);
        assert_eq!(m.atomic(0, a, &|v| v + 5).unwrap(), 0);
        assert_eq!(m.atomic(0, a, &|v| v + 5).unwrap(), 5);
        assert_eq!(m.slice(a, 8).unwrap(), &10u64.to_ne_bytes());
    }
}
