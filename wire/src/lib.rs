//! The RoCEv2 wire format.
//!
//! A RoCEv2 frame is `Ethernet [802.1Q] / IPv4|IPv6 / UDP (dst 4791) / BTH / extension headers /
//! payload / pad / ICRC` (IBA Vol 1 Annex A17). This crate has, in the style of smoltcp's `wire`:
//!
//! - a zero-copy view per InfiniBand transport header ([`Bth`], [`Reth`], [`Aeth`], [`AtomicEth`],
//!   [`AtomicAckEth`], [`ImmDt`], [`Ieth`], [`Deth`]) and a plain `Repr` value for each with
//!   `parse` / `emit`;
//! - the [`opcode`] table, which says which headers follow each opcode, whether a payload is
//!   allowed and where the packet sits in its message;
//! - the [`icrc`] (Invariant CRC) with exactly the fields RoCEv2 masks;
//! - a [`frame`] builder and parser for whole frames, including the CNP;
//! - the Communication Manager's [`cm`] messages (REQ, REP, RTU, REJ, MRA, DREQ, DREP, SIDR) in
//!   [`mad`]s to QP1, and rdma_cm's private-data header;
//! - a [`dissect`]or that explains a frame field by field, for teaching, and [`sample`] frames.
//!
//! # Panics
//! After a view's `new_checked` succeeds, none of its accessors panics. Receive paths use
//! `new_checked`; transmit paths, which size their buffers first, use `new_unchecked`.
//! Nothing in [`frame::parse`] panics on any input (the fuzz targets in `fuzz/` check this).
//!
//! # Fuzzing
//! Built with `--cfg fuzzing`, the parser skips the ICRC and IPv4 header checksum comparisons, so
//! the fuzzer gets past them.

#![forbid(unsafe_code)]

#[macro_use]
mod view;
pub mod aeth;
pub mod atomic;
pub mod bth;
pub mod cm;
pub mod deth;
pub mod dissect;
mod error;
pub mod feth;
pub mod frame;
pub mod fuzz;
#[cfg(feature = "arbitrary")]
pub mod generate;
pub mod icrc;
pub mod imm;
pub mod mad;
pub mod mutate;
pub mod opcode;
pub mod reth;
pub mod sample;
pub mod vlan;
pub mod xrceth;

pub use aeth::{Aeth, AethRepr, CreditCount, NakCode, RnrTimer, Syndrome};
pub use atomic::{AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr};
pub use bth::{Bth, BthRepr, MULTICAST_QPN};
pub use deth::{Deth, DethRepr};
pub use error::{Error, Result};
pub use feth::{Feth, FethRepr, FlushLevel, FlushPlacement};
pub use frame::{
    EthRepr, ExtRepr, FrameRepr, Icrc, IpRepr, Outer, ParsedFrame, UdpChecksum, UdpRepr, seal_icrc,
};
pub use imm::{Ieth, ImmDt};
pub use opcode::{Headers, Opcode, OpcodeInfo, Operation, Position, Transport, With};
pub use reth::{Reth, RethRepr};
pub use smoltcp::wire::{EthernetAddress, Ipv4Address, Ipv6Address};
pub use vlan::VlanTag;
pub use xrceth::XrcEth;

/// The UDP destination port IANA assigned to RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;
