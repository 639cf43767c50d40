//! Work requests, as `ibv_send_wr` and `ibv_recv_wr` carry them.

use crate::ah::AddressHandle;
use crate::error::{Result, VerbsError};
use crate::keys::MwBind;
use crate::qp_attr::QpType;
use softrnic_wire::{Operation, With};

/// A scatter/gather element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Sge {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// Queue sizes, as `ibv_qp_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
}

impl QpCap {
    /// `wr` WRs each way, `sge` SGEs per WR, `inline` inline bytes.
    pub const fn new(wr: u32, sge: u32, inline: u32) -> QpCap {
        QpCap {
            max_send_wr: wr,
            max_recv_wr: wr,
            max_send_sge: sge,
            max_recv_sge: sge,
            max_inline_data: inline,
        }
    }
}

/// The remote half of an RDMA operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Remote {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// What a send work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendWithImm(u32),
    /// SEND that invalidates the given rkey at the responder.
    SendWithInv(u32),
    /// RDMA WRITE.
    Write(Remote),
    /// RDMA WRITE with immediate data (consumes a receive WQE at the responder).
    WriteWithImm(Remote, u32),
    /// RDMA READ into the local SGEs.
    Read(Remote),
    /// 64-bit compare and swap; the original value lands in the local SGE.
    CompareSwap {
        /// Remote address (8-byte aligned).
        remote: Remote,
        /// The value to compare with.
        compare: u64,
        /// The value to store if equal.
        swap: u64,
    },
    /// 64-bit fetch and add; the original value lands in the local SGE.
    FetchAdd {
        /// Remote address (8-byte aligned).
        remote: Remote,
        /// The value to add.
        add: u64,
    },
    /// ATOMIC WRITE (IBA 1.5): the 8 bytes land at the remote address at once, after every
    /// earlier request; no local buffer (`ibv_wr_atomic_write`).
    AtomicWrite {
        /// Remote address (8-byte aligned).
        remote: Remote,
        /// The bytes to store, in memory order.
        value: [u8; 8],
    },
    /// FLUSH (IBA 1.5): earlier writes to the range (or the whole region) become visible
    /// or persistent before it completes (`ibv_wr_flush`).
    Flush {
        /// The range's start and the region's rkey.
        remote: Remote,
        /// The range's length (ignored for a whole-region flush).
        len: u32,
        /// `IBV_FLUSH_GLOBAL` and/or `IBV_FLUSH_PERSISTENT`: the FETH's placement bits.
        placement: u8,
        /// `IBV_FLUSH_RANGE` or `IBV_FLUSH_MR`: the FETH's selectivity level.
        level: u8,
    },
    /// Invalidate a local key.
    LocalInv(u32),
    /// Bind a memory window.
    BindMw(MwBind),
}

impl SendOp {
    /// Whether this takes one of the responder's READ/atomic resources (max_rd_atomic, IBA
    /// 9.5.1; ATOMIC WRITE and FLUSH too, IBA 1.5), and so waits behind a fence.
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::Read(_)
                | SendOp::CompareSwap { .. }
                | SendOp::FetchAdd { .. }
                | SendOp::AtomicWrite { .. }
                | SendOp::Flush { .. }
        )
    }

    /// Whether only its own response completes it, because that response carries data (READ
    /// data, an atomic's original value): an ACK beyond it means the response was lost
    /// (IBA 9.7.5.1.5). ATOMIC WRITE and FLUSH answer with an empty READ response, which a
    /// later ACK covers as it covers a WRITE.
    pub fn needs_response(&self) -> bool {
        matches!(
            self,
            SendOp::Read(_) | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }

    /// Whether this is an atomic.
    pub fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }

    /// Whether the work request is executed locally, without packets.
    pub fn is_local(&self) -> bool {
        matches!(self, SendOp::LocalInv(_) | SendOp::BindMw(_))
    }

    /// What its packets do on the wire, and what the last one carries (`None` for a local
    /// operation).
    pub fn wire(&self) -> Option<(Operation, With)> {
        Some(match self {
            SendOp::Send => (Operation::Send, With::Nothing),
            SendOp::SendWithImm(_) => (Operation::Send, With::Immediate),
            SendOp::SendWithInv(_) => (Operation::Send, With::Invalidate),
            SendOp::Write(_) => (Operation::RdmaWrite, With::Nothing),
            SendOp::WriteWithImm(..) => (Operation::RdmaWrite, With::Immediate),
            SendOp::Read(_) => (Operation::RdmaReadRequest, With::Nothing),
            SendOp::CompareSwap { .. } => (Operation::CompareSwap, With::Nothing),
            SendOp::FetchAdd { .. } => (Operation::FetchAdd, With::Nothing),
            SendOp::AtomicWrite { .. } => (Operation::AtomicWrite, With::Nothing),
            SendOp::Flush { .. } => (Operation::Flush, With::Nothing),
            SendOp::LocalInv(_) | SendOp::BindMw(_) => return None,
        })
    }

    /// Whether packets of this operation carry the data of the SGEs.
    pub fn sends_data(&self) -> bool {
        matches!(
            self,
            SendOp::Send
                | SendOp::SendWithImm(_)
                | SendOp::SendWithInv(_)
                | SendOp::Write(_)
                | SendOp::WriteWithImm(..)
        )
    }
}

bitflags::bitflags! {
    /// `ibv_send_flags`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub struct SendFlags: u32 {
        /// Wait for prior READs and atomics to complete.
        const FENCE = 1;
        /// Generate a completion.
        const SIGNALED = 2;
        /// Set the solicited event bit.
        const SOLICITED = 4;
        /// The SGEs' bytes are copied at post time.
        const INLINE = 8;
    }
}

/// The destination of a UD send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct UdDest {
    /// Address handle.
    pub ah: AddressHandle,
    /// Remote QP number.
    pub remote_qpn: u32,
    /// Remote Q_Key. If its high bit is set, the QP's own Q_Key is sent instead (IBA 10.2.5).
    pub remote_qkey: u32,
}

/// A send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// The local buffers.
    pub sgl: Vec<Sge>,
    /// Its `ibv_send_flags`.
    pub flags: SendFlags,
    /// UD only: where to.
    pub ud: Option<UdDest>,
    /// XRC initiators only: the SRQ at the target that the request goes to
    /// (`wr.qp_type.xrc.remote_srqn`, `ibv_wr_set_xrc_srqn`).
    pub xrc_srqn: Option<u32>,
}

impl SendWr {
    /// Whether the WR's bytes are taken at post time (`IBV_SEND_INLINE` on an operation that
    /// sends data).
    pub fn is_inline(&self) -> bool {
        self.flags.contains(SendFlags::INLINE) && self.op.sends_data()
    }

    /// The checks `ibv_post_send` makes before a WR is queued (those that need neither the
    /// queue nor memory), with rxe's EINVAL reasons. Returns the message length.
    pub fn check(&self, qp_type: QpType, cap: &QpCap) -> Result<u32> {
        if self.sgl.len() > cap.max_send_sge as usize {
            return Err(VerbsError::Invalid("too many SGEs"));
        }
        let allowed = match (qp_type, &self.op) {
            (QpType::Ud, SendOp::Send | SendOp::SendWithImm(_)) => self.ud.is_some(),
            (QpType::Ud, _) => false,
            (QpType::Uc, op) => !op.is_read_or_atomic() && !matches!(op, SendOp::SendWithInv(_)),
            (QpType::Rc, _) => true,
            // IBA A14: XRC carries RC's operations of IBA's first release, each to an SRQ.
            (QpType::XrcSend, op) => {
                self.xrc_srqn.is_some()
                    && !matches!(op, SendOp::AtomicWrite { .. } | SendOp::Flush { .. })
            }
            (QpType::XrcRecv, _) => false,
        };
        if !allowed {
            return Err(VerbsError::Invalid(
                "operation not supported on this QP type",
            ));
        }
        let len = match self.op {
            // An ATOMIC WRITE carries its own 8 bytes; a FLUSH carries none.
            SendOp::AtomicWrite { .. } => 8,
            SendOp::Flush { .. } => 0,
            _ if self.op.is_local() => 0,
            _ => sgl_len(&self.sgl).ok_or(VerbsError::Invalid("message longer than 2^31 bytes"))?,
        };
        if let SendOp::CompareSwap { remote, .. } | SendOp::FetchAdd { remote, .. } = self.op
            && (len != 8 || remote.addr % 8 != 0)
        {
            return Err(VerbsError::Invalid(
                "atomics need an 8-byte buffer and an aligned remote address",
            ));
        }
        if self.is_inline() && len > cap.max_inline_data {
            return Err(VerbsError::Invalid("inline data above max_inline_data"));
        }
        Ok(len)
    }
}

/// A queue work requests are posted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkQueue {
    /// A QP's send queue.
    Send(u32),
    /// A QP's own receive queue.
    Recv(u32),
    /// A shared receive queue.
    Srq(u32),
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where received bytes go.
    pub sgl: Vec<Sge>,
}

/// The total length of a scatter/gather list, or `None` if it exceeds 2^31 (IBA's message size
/// limit).
fn sgl_len(sgl: &[Sge]) -> Option<u32> {
    let total: u64 = sgl.iter().map(|s| s.length as u64).sum();
    (total <= 1 << 31).then_some(total as u32)
}
