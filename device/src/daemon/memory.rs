//! The daemon reaches a program's registered memory in the program's own address space, with
//! process_vm_readv/writev: no copy into the daemon, no shared mapping to set up. The engine has
//! checked keys, PDs, access and ranges before it asks; a process that has gone (or an address
//! it unmapped) is a fault, which the engine turns into an error completion.

use std::collections::HashMap;

use softrnic_emu_core::{Fault, Memory, Space};

use crate::sys;

/// The address spaces of a device's contexts: each context's space is its process.
#[derive(Debug, Default)]
pub struct ProcessMemory {
    pids: HashMap<Space, u32>,
}

impl ProcessMemory {
    /// Context `space` lives in process `pid`.
    pub fn attach(&mut self, space: Space, pid: u32) {
        self.pids.insert(space, pid);
    }

    /// The context is gone.
    pub fn detach(&mut self, space: Space) {
        self.pids.remove(&space);
    }
}

impl Memory for ProcessMemory {
    fn read(&self, space: Space, addr: u64, dst: &mut [u8]) -> Result<(), Fault> {
        let pid = *self.pids.get(&space).ok_or(Fault)?;
        sys::vm_read(pid, addr, dst).map_err(|_| Fault)
    }

    fn write(&mut self, space: Space, addr: u64, src: &[u8]) -> Result<(), Fault> {
        let pid = *self.pids.get(&space).ok_or(Fault)?;
        sys::vm_write(pid, addr, src).map_err(|_| Fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_a_process_and_faults_elsewhere() {
        let mut m = ProcessMemory::default();
        let mut data = vec![1u8, 2, 3, 4];
        let addr = data.as_mut_ptr() as u64;
        m.attach(7, std::process::id());
        let mut out = [0u8; 4];
        m.read(7, addr, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
        m.write(7, addr + 1, &[9, 9]).unwrap();
        // The kernel wrote behind the compiler's back: read through a volatile view.
        let seen: Vec<u8> = (0..4).map(|i| std::hint::black_box(&data)[i]).collect();
        assert_eq!(seen, [1, 9, 9, 4]);
        assert_eq!(m.read(8, addr, &mut out), Err(Fault), "an unknown context");
        assert_eq!(m.read(7, 8, &mut out), Err(Fault), "an unmapped address");
        m.detach(7);
        assert_eq!(m.read(7, addr, &mut out), Err(Fault));
    }
}
