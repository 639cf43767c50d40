//! The four single-producer single-consumer rings of an AF_XDP socket, mapped from it.

use std::io;

use softrnic_sys::Mmap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// One ring: a power-of-two array of `T` with a producer and a consumer index shared with the
/// kernel. We are the producer of the fill and TX rings, the consumer of the RX and completion
/// rings.
pub struct Ring<T> {
    _map: Mmap,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    mask: u32,
}

// SAFETY: the pointers point into `map`, which the ring owns.
unsafe impl<T> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries at page offset `pgoff`, laid out as `off` says.
    pub fn map(
        fd: &OwnedFd,
        pgoff: u64,
        off: &libc::xdp_ring_offset,
        size: u32,
    ) -> io::Result<Ring<T>> {
        let len = off.desc as usize + size as usize * size_of::<T>();
        let map = Mmap::new(len, Some((fd, pgoff)))?;
        let base = map.as_ptr();
        // SAFETY: the kernel's offsets lie inside the mapping it just gave us.
        unsafe {
            Ok(Ring {
                producer: base.add(off.producer as usize).cast(),
                consumer: base.add(off.consumer as usize).cast(),
                flags: base.add(off.flags as usize).cast(),
                descs: base.add(off.desc as usize).cast(),
                mask: size - 1,
                _map: map,
            })
        }
    }

    fn load(p: *const AtomicU32, order: Ordering) -> u32 {
        // SAFETY: `p` points at a u32 index in the mapping, shared with the kernel.
        unsafe { (*p).load(order) }
    }

    fn store(p: *const AtomicU32, v: u32) {
        // SAFETY: as in `load`.
        unsafe { (*p).store(v, Ordering::Release) }
    }

    /// Entries the producer may still add.
    pub fn free(&self) -> u32 {
        let prod = Self::load(self.producer, Ordering::Relaxed);
        let cons = Self::load(self.consumer, Ordering::Acquire);
        self.mask + 1 - prod.wrapping_sub(cons)
    }

    /// Adds one entry (producer side); false if the ring is full.
    pub fn push(&mut self, v: T) -> bool {
        if self.free() == 0 {
            return false;
        }
        let prod = Self::load(self.producer, Ordering::Relaxed);
        // SAFETY: the slot is inside the ring, and free: the consumer has passed it.
        unsafe { self.descs.add((prod & self.mask) as usize).write(v) };
        Self::store(self.producer, prod.wrapping_add(1));
        true
    }

    /// Takes one entry (consumer side).
    pub fn pop(&mut self) -> Option<T> {
        let cons = Self::load(self.consumer, Ordering::Relaxed);
        let prod = Self::load(self.producer, Ordering::Acquire);
        if cons == prod {
            return None;
        }
        // SAFETY: the slot is inside the ring, and the producer has published it.
        let v = unsafe { self.descs.add((cons & self.mask) as usize).read() };
        Self::store(self.consumer, cons.wrapping_add(1));
        Some(v)
    }

    /// Whether the kernel asks to be woken (XDP_RING_NEED_WAKEUP).
    pub fn needs_wakeup(&self) -> bool {
        Self::load(self.flags, Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}
