//! The sans-IO RoCEv2 engine: what an RNIC does, with no sockets and no clock inside (the
//! shape of quinn-proto, the roles of Linux rxe).
//!
//! - [`Engine`] holds one device's verbs objects (protection domains, memory regions and
//!   windows, completion queues, shared receive queues, queue pairs) and runs the RC, UC and
//!   UD transports. Its inputs are verbs calls, received frames and time; its outputs are
//!   frames to send, completions, events and the next timeout.
//! - Each RC role has its own module: the [`requester`] turns work requests into packets, the
//!   [`responder`] checks and executes requests, the [`completer`] turns responses into
//!   completions and drives retransmission.
//! - Application memory is reached through the [`Memory`] trait.
//! - Library mode (the engine driven over a link in the program's own process) is the
//!   `softrnic-link` crate's: this crate never reads a clock or touches a socket.
//! - [`cm`] is the Communication Manager: connection setup and teardown over QP1, sans-IO too.

mod ah;
mod attr;
pub mod cm;
pub mod completer;
mod counters;
mod cq;
mod dma;
mod engine;
mod error;
mod event;
#[cfg(feature = "fuzz")]
pub mod fuzz;
mod gid;
mod keys;
mod lane;
mod memory;
mod multicast;
mod notification;
pub mod psn;
mod qp;
mod qp_attr;
mod reaction;
pub mod requester;
pub mod responder;
mod rng;
mod slab;
#[cfg(test)]
mod testing;
mod time;
mod timers;
mod wr;

pub use ah::AddressHandle;
pub use attr::{DeviceAttr, Mtu, PortAttr, PortState};
pub use counters::{Counters, Origin};
pub use cq::{SL_ROCE_V2_IPV4, SL_ROCE_V2_IPV6, Wc, WcFlags, WcOpcode, WcStatus};
pub use engine::{Config, Engine, IdHasher, MAX_FRAME};
pub use error::{Result, VerbsError};
pub use event::Event;
pub use gid::Gid;
pub use keys::{Access, MwBind, MwType, Span, key_index};
pub use lane::{Lane, Lanes};
pub use memory::{Fault, HeapMemory, Memory, Space};
pub use qp::QpInit;
pub use qp_attr::{AttrMask, QpAttr, QpState, QpType, bring_up};
pub use reaction::Dcqcn;
pub use rng::Rng;
pub use time::{Instant, ack_timeout};
pub use wr::{QpCap, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdDest, WorkQueue};
