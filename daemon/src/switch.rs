//! What joins the devices of one daemon: the addresses of every device, known to every thread
//! (same-host frames are switched by MAC, and a GID of this daemon resolves to its device's
//! MAC), and the same-host frames a pass hands from device to device.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use softrnic_client::proto::DeviceInfo;
use softrnic_emu_core::{Gid, MAX_FRAME};

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

    /// Same-host frame `data` reaching `device` now. Built without its ICRC (`sealed` false:
    /// no capture ran when its device sent it), it gets it here: a capture shows frames as a
    /// wire would carry them.
    pub fn arriving(device: usize, data: &[u8], sealed: bool) -> Tap {
        let mut tap = Tap::now(device, false, data);
        if !sealed {
            // A frame an engine built parses; were it not to, it is shown as it came.
            let _ = softrnic_wire::seal_icrc(&mut tap.data);
        }
        tap
    }
}

/// How same-host frames reach a device: its MAC, and how many engines (shards, at device
/// indexes from its own on) share its QPs by lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Station {
    pub mac: [u8; 6],
    pub shards: usize,
}

/// A device's station and GIDs.
type Entry = (Station, Vec<Gid>);

/// Each device's station and GIDs, at the index of its first shard.
#[derive(Default)]
pub(crate) struct Switch {
    table: RwLock<Vec<Option<Entry>>>,
}

impl Switch {
    fn read(&self) -> RwLockReadGuard<'_, Vec<Option<Entry>>> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Vec<Option<Entry>>> {
        self.table.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Device `d` (its first shard's index), of `shards` shards, has these addresses (it is
    /// new, or they changed).
    pub fn set(&self, d: usize, shards: usize, info: &DeviceInfo) {
        let mut t = self.write();
        if t.len() <= d {
            t.resize(d + 1, None);
        }
        let station = Station {
            mac: info.mac,
            shards,
        };
        t[d] = Some((station, info.gids.clone()));
    }

    /// Device `d` is gone.
    pub fn remove(&self, d: usize) {
        if let Some(slot) = self.write().get_mut(d) {
            *slot = None;
        }
    }

    /// Each device's station, into `stations`.
    pub fn stations(&self, stations: &mut Vec<Option<Station>>) {
        stations.clear();
        stations.extend(self.read().iter().map(|a| a.as_ref().map(|a| a.0)));
    }

    /// The MAC of the device of this daemon that has `gid`.
    pub fn mac_of(&self, gid: &Gid) -> Option<[u8; 6]> {
        self.read()
            .iter()
            .flatten()
            .find(|a| a.1.contains(gid))
            .map(|a| a.0.mac)
    }
}

/// Where a same-host frame comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// An engine of this daemon built it: with its ICRC (`true`), or without it (no capture
    /// ran).
    Built(bool),
    /// Another shard of its device took it from the wire: that shard checked its ICRC, and a
    /// capture has it already.
    Wire,
}

/// Same-host frames: their bytes back to back, and (device, start, length, origin) of each.
/// Kept between passes to reuse the allocations. A frame of a device with no wire is built
/// here in place ([`Frames::build`]), so it is never copied on its way to the engine that
/// takes it.
#[derive(Default)]
pub(crate) struct Frames {
    /// The frames in `bytes[..used]`; the rest is room already initialised, so building a
    /// frame in it writes only the frame.
    bytes: Vec<u8>,
    used: usize,
    frames: Vec<(usize, usize, usize, Origin)>,
}

impl Frames {
    /// Room for `len` more bytes after the frames.
    fn room(&mut self, len: usize) -> &mut [u8] {
        let end = self.used + len;
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        &mut self.bytes[self.used..end]
    }

    /// A copy of `frame`, for device `to`.
    pub fn push(&mut self, to: usize, frame: &[u8], origin: Origin) {
        self.room(frame.len()).copy_from_slice(frame);
        self.keep(to, frame.len(), origin);
    }

    /// Builds a frame in place with `fill` (which writes it into room for the largest frame
    /// and says how long it is, or `None` for no frame). The frame, until [`Frames::keep`]
    /// keeps it, is [`Frames::built`]; whatever is not kept is overwritten by the next.
    pub fn build(&mut self, fill: impl FnOnce(&mut [u8]) -> Option<usize>) -> Option<usize> {
        fill(self.room(MAX_FRAME))
    }

    /// The frame [`Frames::build`] made, `len` bytes long.
    pub fn built(&self, len: usize) -> &[u8] {
        &self.bytes[self.used..self.used + len]
    }

    /// Keeps the frame built (or copied) last, `len` bytes long, for device `to`.
    pub fn keep(&mut self, to: usize, len: usize, origin: Origin) {
        self.frames.push((to, self.used, len, origin));
        self.used += len;
    }

    /// Keeps the frame built last, `len` bytes long, for every device of `to` (a multicast
    /// frame): the first takes it in place, the others copies.
    pub fn keep_for(&mut self, mut to: impl Iterator<Item = usize>, len: usize, origin: Origin) {
        let Some(first) = to.next() else {
            return;
        };
        let start = self.used;
        self.keep(first, len, origin);
        for d in to {
            self.room(len);
            self.bytes.copy_within(start..start + len, self.used);
            self.keep(d, len, origin);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Each frame, with the device it is for and where it comes from.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &[u8], Origin)> {
        self.frames
            .iter()
            .map(|&(to, start, len, origin)| (to, &self.bytes[start..start + len], origin))
    }

    pub fn clear(&mut self) {
        self.used = 0;
        self.frames.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_wire::{Opcode, frame::parse, sample};

    #[test]
    fn a_frame_built_without_its_icrc_reaches_a_capture_with_it() {
        let frame = sample::example(Opcode::RcWriteOnly, sample::Ip::V4, 7, 64).frame();
        let mut unsealed = frame.clone();
        let icrc = unsealed.len() - 4;
        unsealed[icrc..].fill(0);
        let tap = Tap::arriving(1, &unsealed, false);
        assert_eq!((tap.device, tap.outbound), (1, false));
        assert_eq!(tap.data, frame);
        assert!(parse(&tap.data).is_ok());
        // A frame that carries its ICRC is shown as it came, right or wrong.
        assert_eq!(Tap::arriving(1, &unsealed, true).data, unsealed);
    }

    #[test]
    fn frames_built_in_place_copied_and_multicast_keep_their_bytes() {
        let mut f = Frames::default();
        f.push(3, b"copied", Origin::Wire);
        // A frame built and not kept is overwritten by the next.
        assert_eq!(f.build(|room| Some(room.len())), Some(MAX_FRAME));
        let n = f.build(|room| {
            room[..5].copy_from_slice(b"built");
            Some(5)
        });
        assert_eq!(f.built(5), b"built");
        f.keep(1, n.unwrap(), Origin::Built(false));
        assert_eq!(f.build(|_| None), None);
        let n = f
            .build(|room| {
                room[..5].copy_from_slice(b"group");
                Some(5)
            })
            .unwrap();
        f.keep_for([0, 2].into_iter(), n, Origin::Built(true));
        let got: Vec<_> = f.iter().map(|(to, b, s)| (to, b.to_vec(), s)).collect();
        let want = [
            (3, "copied", Origin::Wire),
            (1, "built", Origin::Built(false)),
            (0, "group", Origin::Built(true)),
            (2, "group", Origin::Built(true)),
        ]
        .map(|(to, b, s)| (to, b.as_bytes().to_vec(), s));
        assert_eq!(got, want);
        f.clear();
        assert!(f.is_empty());
        f.push(4, b"again", Origin::Wire);
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            [(4, &b"again"[..], Origin::Wire)]
        );
    }
}
