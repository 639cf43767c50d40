//! The device: what turns the sans-IO engine into a network device on a plain NIC.
//!
//! Today it has the frame backends, each a [`Link`] any engine in library mode can run over:
//! [`AfXdp`] (the fast path) and [`AfPacket`] (the fallback); the [`gid`] table built from an
//! interface's addresses; and [`neigh`]bour resolution through the kernel. Keeping the GID
//! table in sync and the daemon come next (issue 4).
//!
//! [`Link`]: softrnic_emu_core::native::Link

pub mod client;
pub mod daemon;
mod filter;
pub mod gid;
#[allow(unsafe_code)]
mod mmap;
pub mod neigh;
mod netlink;
pub mod netns;
pub mod packet;
pub mod proto;
#[allow(unsafe_code)]
pub mod shm;
#[allow(unsafe_code)]
pub mod sys;
#[allow(unsafe_code)]
pub mod xdp;

pub use packet::{AfPacket, PacketStats};
pub use xdp::{AfXdp, Mode as XdpMode};
