//! The device: what turns the sans-IO engine into a network device on a plain NIC.
//!
//! - The frame backends, each a [`Link`] any engine in library mode can run over: [`AfXdp`]
//!   (the fast path) and [`AfPacket`] (the fallback); the [`gid`] table built from an
//!   interface's addresses and kept in sync; [`neigh`]bour resolution through the kernel.
//! - The [`daemon`], which is the NIC: it owns the wire, the QPN space and the GID table, and
//!   serves programs (verbs, rings in shared memory, rdma_cm).
//! - The protocol between program and daemon ([`proto`], [`shm`]) and the program's side of
//!   it ([`client`]), which the drop-in libraries use.
//!
//! `unsafe` is confined to the modules marked `allow(unsafe_code)` below: system calls
//! ([`sys`]), shared memory ([`shm`], `mmap`) and AF_XDP's rings and BPF ([`xdp`]).
//!
//! [`Link`]: softrnic_emu_core::native::Link

pub mod backend;
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

pub use backend::{Backend, Interface};
pub use packet::{AfPacket, PacketStats};
pub use xdp::{AfXdp, Mode as XdpMode};
