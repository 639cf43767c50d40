//! What joins the devices of one daemon: the addresses of every device, known to every thread
//! (same-host frames are switched by MAC, and a GID of this daemon resolves to its device's
//! MAC), and the same-host frames a pass hands from device to device.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use softrnic_client::proto::DeviceInfo;
use softrnic_emu_core::Gid;

/// A frame seen while a capture runs.
pub(crate) struct Tap {
    pub device: usize,
    pub outbound: bool,
    /// When it passed, in nanoseconds since the Unix epoch: taken here, since the control
    /// thread hands frames to captures in batches.
    pub unix_nanos: u64,
    pub data: Vec<u8>,
}

impl Tap {
    /// Frame `data` passing through `device` now.
    pub fn now(device: usize, outbound: bool, data: &[u8]) -> Tap {
        let unix_nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Tap {
            device,
            outbound,
            unix_nanos,
            data: data.to_vec(),
        }
    }
}

/// A device's MAC and GIDs.
type Addresses = ([u8; 6], Vec<Gid>);

/// Each device's addresses, by device index.
#[derive(Default)]
pub(crate) struct Switch {
    table: RwLock<Vec<Option<Addresses>>>,
}

impl Switch {
    fn read(&self) -> RwLockReadGuard<'_, Vec<Option<Addresses>>> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Vec<Option<Addresses>>> {
        self.table.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Device `d` has these addresses (it is new, or they changed).
    pub fn set(&self, d: usize, info: &DeviceInfo) {
        let mut t = self.write();
        if t.len() <= d {
            t.resize(d + 1, None);
        }
        t[d] = Some((info.mac, info.gids.clone()));
    }

    /// Device `d` is gone.
    pub fn remove(&self, d: usize) {
        if let Some(slot) = self.write().get_mut(d) {
            *slot = None;
        }
    }

    /// Each device's MAC, into `macs`.
    pub fn macs(&self, macs: &mut Vec<Option<[u8; 6]>>) {
        macs.clear();
        macs.extend(self.read().iter().map(|a| a.as_ref().map(|a| a.0)));
    }

    /// The MAC of the device of this daemon that has `gid`.
    pub fn mac_of(&self, gid: &Gid) -> Option<[u8; 6]> {
        self.read()
            .iter()
            .flatten()
            .find(|a| a.1.contains(gid))
            .map(|a| a.0)
    }
}

/// Same-host frames: their bytes back to back, and (device, start, length) of each. Kept
/// between passes to reuse the allocations.
#[derive(Default)]
pub(crate) struct Frames {
    bytes: Vec<u8>,
    frames: Vec<(usize, usize, usize)>,
}

impl Frames {
    pub fn push(&mut self, to: usize, frame: &[u8]) {
        self.frames.push((to, self.bytes.len(), frame.len()));
        self.bytes.extend_from_slice(frame);
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Each frame, with the device it is for.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &[u8])> {
        self.frames
            .iter()
            .map(|&(to, start, len)| (to, &self.bytes[start..start + len]))
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.frames.clear();
    }
}
