//! Links: how an engine's frames reach a network, and an engine driven over one in-process.
//!
//! - The [`Link`] trait, and the links that are plain memory: [`local::Loopback`] (a device
//!   talks to itself) and [`local::Channel`] (two devices, possibly on two threads).
//! - The links to a real interface, each a [`Backend`]: [`AfXdp`] (the fast path) and
//!   [`AfPacket`] (the fallback), with the facts of their interface: its [`gid`] table, kept in
//!   sync, and [`neigh`]bour resolution through the kernel; [`netns`] for tests on veth pairs.
//! - [`faults`]: the project's one model of a lossy network (loss, duplication, reordering,
//!   corruption), as a wrapper around any link and for the simulator.
//! - [`sim`]: a deterministic network of engines in virtual time, for the protocol tests and
//!   the lessons that show a conversation.
//! - [`drive`]: the pass every driver runs (frames in, due timers, frames out), and
//!   [`library`] mode: the engine over a link in the program's own process, with memory the
//!   program owns, for tests, benchmarks and tools.
//!
//! `unsafe` is confined to [`xdp`] (AF_XDP's rings and BPF); system calls are
//! [`softrnic_sys`]'s.

pub mod backend;
pub mod drive;
pub mod faults;
mod filter;
pub mod gid;
pub mod library;
pub mod local;
pub mod neigh;
pub mod netns;
pub mod packet;
pub mod sim;
#[allow(unsafe_code)]
pub mod xdp;

pub use backend::{Backend, Interface};
pub use packet::{AfPacket, PacketStats};
pub use xdp::{AfXdp, Mode as XdpMode};

/// Moves frames between a device and its network. Buffers belong to the link, so the engine
/// writes each frame once, straight into the buffer that is sent.
pub trait Link {
    /// Offers a buffer to `fill`, which writes a frame and returns its length, or `None` to
    /// send nothing. Returns whether a frame was sent. The buffer holds a frame as long as the
    /// link's MTU allows ([`MAX_FRAME`](softrnic_emu_core::MAX_FRAME) for a 4096-byte path MTU); the device sets its port's
    /// MTU from the link's, so the engine writes no longer frame.
    fn transmit(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool;
    /// Calls `deliver` with the next received frame, if there is one. Returns whether there
    /// was.
    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool;
    /// Hands the frames `transmit` took to the network now. A link that batches them waits
    /// otherwise for a full batch or the next `receive`.
    fn flush(&mut self) {}
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn transmit(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool {
        (**self).transmit(fill)
    }
    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool {
        (**self).receive(deliver)
    }
    fn flush(&mut self) {
        (**self).flush()
    }
}
