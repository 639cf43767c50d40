//! Completion queues and work completions, with the statuses and opcodes of `ibv_wc`.

use std::collections::VecDeque;

/// A completion status, numbered as `enum ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[allow(missing_docs)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    FatalErr = 19,
    GeneralErr = 21,
}

/// A completion opcode, numbered as `enum ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[allow(missing_docs)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum WcOpcode {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    BindMw = 5,
    LocalInv = 6,
    Flush = 8,
    AtomicWrite = 9,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

impl WcStatus {
    /// The status numbered `n` in `enum ibv_wc_status`, if softrnic has it.
    pub fn from_u32(n: u32) -> Option<WcStatus> {
        use WcStatus::*;
        [
            Success,
            LocLenErr,
            LocQpOpErr,
            LocProtErr,
            WrFlushErr,
            MwBindErr,
            BadRespErr,
            LocAccessErr,
            RemInvReqErr,
            RemAccessErr,
            RemOpErr,
            RetryExcErr,
            RnrRetryExcErr,
            FatalErr,
            GeneralErr,
        ]
        .into_iter()
        .find(|s| *s as u32 == n)
    }
}

impl WcOpcode {
    /// The opcode numbered `n` in `enum ibv_wc_opcode`, if softrnic has it.
    pub fn from_u32(n: u32) -> Option<WcOpcode> {
        use WcOpcode::*;
        [
            Send,
            RdmaWrite,
            RdmaRead,
            CompSwap,
            FetchAdd,
            BindMw,
            LocalInv,
            Flush,
            AtomicWrite,
            Recv,
            RecvRdmaWithImm,
        ]
        .into_iter()
        .find(|o| *o as u32 == n)
    }
}

bitflags::bitflags! {
    /// `ibv_wc_flags`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub struct WcFlags: u32 {
        /// The completion carries a GRH.
        const GRH = 1;
        /// The completion carries immediate data.
        const WITH_IMM = 2;
        /// The completion invalidated a key.
        const WITH_INV = 8;
    }
}

/// A work completion, as `struct ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Wc {
    /// The WR's ID.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it was (valid only on success, as in verbs, but softrnic always sets it).
    pub opcode: WcOpcode,
    /// Bytes received (receive completions) or read.
    pub byte_len: u32,
    /// Immediate data (network order value as the IMMDT carried it), or the invalidated rkey.
    pub imm_data: u32,
    /// The local QP number.
    pub qp_num: u32,
    /// The sender's QP (UD receives).
    pub src_qp: u32,
    /// `WcFlags::GRH`, `WcFlags::WITH_IMM`, `WcFlags::WITH_INV`.
    pub wc_flags: WcFlags,
    /// Whether the sender set the solicited event bit (receives).
    pub solicited: bool,
    /// `ibv_wc.sl` (UD receives). RoCE carries no SL; like ConnectX (the mlx5 CQE's
    /// `roce_pkt_type`, which UCX's UD transport reads to find the destination address in the
    /// GRH) it holds the packet type: [`SL_ROCE_V2_IPV4`] or [`SL_ROCE_V2_IPV6`].
    pub sl: u8,
    /// The SRQ a receive completion's work request came from (not in `ibv_wc`: for the
    /// program's library, whose SRQ has room again, as a hardware CQE names its SRQ).
    pub srq: Option<u32>,
}

/// `ibv_wc.sl` of a RoCEv2 datagram over IPv4: UDP present (bit 3), L3 type 2 (bits 2:0).
pub const SL_ROCE_V2_IPV4: u8 = 0b1010;
/// `ibv_wc.sl` of a RoCEv2 datagram over IPv6: UDP present (bit 3), L3 type 1 (bits 2:0).
pub const SL_ROCE_V2_IPV6: u8 = 0b1001;

impl Wc {
    /// A completion with only the fields every completion has.
    pub const fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm_data: 0,
            qp_num,
            src_qp: 0,
            wc_flags: WcFlags::empty(),
            solicited: false,
            sl: 0,
            srq: None,
        }
    }
}

/// How a CQ is armed (`ibv_req_notify_cq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    /// Not armed.
    Off,
    /// Notify on the next completion.
    Any,
    /// Notify on the next solicited or error completion.
    Solicited,
}

/// A completion queue.
#[derive(Debug)]
#[cfg_attr(feature = "fuzz", derive(Clone))]
pub struct Cq {
    entries: VecDeque<Wc>,
    capacity: usize,
    arm: Arm,
    overflowed: bool,
    /// In the engine's list of CQs given completions since the user last took it.
    listed: bool,
}

/// What pushing a completion caused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued, and no notification is due.
    Queued,
    /// Queued, and the CQ was armed for it: notify the completion channel.
    Notify,
    /// The CQ was full: the completion is lost and the CQ is in error (IBA 11.4.2.1: CQ
    /// overrun is an affiliated asynchronous error).
    Overflow,
}

impl Cq {
    /// A CQ with room for `capacity` completions.
    pub fn new(capacity: usize) -> Cq {
        Cq {
            entries: VecDeque::with_capacity(capacity.min(4096)),
            capacity,
            arm: Arm::Off,
            overflowed: false,
            listed: false,
        }
    }

    /// Marks the CQ as listed; whether it was not yet.
    pub(crate) fn list(&mut self) -> bool {
        !std::mem::replace(&mut self.listed, true)
    }

    /// The CQ left the list.
    pub(crate) fn unlist(&mut self) {
        self.listed = false;
    }

    /// Drops QP `qpn`'s completions not yet polled: the QP was reset, and, as on ConnectX
    /// (libmlx5 cleans the CQ when a QP goes to RESET), a QP restarted from RESET finds none of
    /// its old ones (IBA 10.3.1 leaves it to the device).
    pub fn forget(&mut self, qpn: u32) {
        self.entries.retain(|w| w.qp_num != qpn);
    }

    /// Adds a completion.
    pub fn push(&mut self, wc: Wc) -> Pushed {
        if self.overflowed || self.entries.len() >= self.capacity {
            let first = !self.overflowed;
            self.overflowed = true;
            return if first {
                Pushed::Overflow
            } else {
                Pushed::Queued
            };
        }
        self.entries.push_back(wc);
        let due = match self.arm {
            Arm::Off => false,
            Arm::Any => true,
            Arm::Solicited => wc.solicited || wc.status != WcStatus::Success,
        };
        if due {
            self.arm = Arm::Off;
            Pushed::Notify
        } else {
            Pushed::Queued
        }
    }

    /// Takes up to `out.len()` completions, oldest first; returns how many.
    pub fn poll(&mut self, out: &mut [Wc]) -> usize {
        let n = out.len().min(self.entries.len());
        for (slot, wc) in out.iter_mut().zip(self.entries.drain(..n)) {
            *slot = wc;
        }
        n
    }

    /// Arms the CQ for the next completion (IBA 11.4.2.2: a solicited request never downgrades
    /// an armed "any" request).
    pub fn arm(&mut self, solicited_only: bool) {
        self.arm = match (self.arm, solicited_only) {
            (Arm::Any, _) | (_, false) => Arm::Any,
            _ => Arm::Solicited,
        };
    }

    /// Whether the CQ overflowed (it then accepts no more completions).
    #[cfg(test)]
    fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// How many completions wait.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Changes the capacity (`ibv_resize_cq`); fails if the waiting completions do not fit.
    pub fn resize(&mut self, capacity: usize) -> crate::Result<()> {
        if capacity < self.entries.len() {
            return Err(crate::VerbsError::Invalid(
                "new size is smaller than the completions waiting",
            ));
        }
        self.capacity = capacity;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(id: u64, solicited: bool) -> Wc {
        Wc {
            solicited,
            ..Wc::new(id, WcStatus::Success, WcOpcode::Recv, 1)
        }
    }

    #[test]
    fn polls_in_order_and_overflows_once() {
        let mut cq = Cq::new(2);
        assert_eq!(cq.push(wc(1, false)), Pushed::Queued);
        assert_eq!(cq.push(wc(2, false)), Pushed::Queued);
        assert_eq!(cq.push(wc(3, false)), Pushed::Overflow);
        assert_eq!(cq.push(wc(4, false)), Pushed::Queued);
        assert!(cq.overflowed());
        let mut out = [wc(0, false); 4];
        assert_eq!(cq.poll(&mut out), 2);
        assert_eq!((out[0].wr_id, out[1].wr_id), (1, 2));
    }

    #[test]
    fn arming_notifies_once() {
        let mut cq = Cq::new(8);
        cq.arm(true);
        assert_eq!(cq.push(wc(1, false)), Pushed::Queued);
        assert_eq!(cq.push(wc(2, true)), Pushed::Notify);
        assert_eq!(cq.push(wc(3, true)), Pushed::Queued);
        cq.arm(false);
        cq.arm(true);
        assert_eq!(cq.push(wc(4, false)), Pushed::Notify);
        cq.arm(true);
        let err = Wc::new(5, WcStatus::WrFlushErr, WcOpcode::Recv, 1);
        assert_eq!(cq.push(err), Pushed::Notify);
    }
}
