//! Asynchronous events and completion notifications, as `ibv_get_async_event` and completion
//! channels deliver them.

/// Something the application is told about outside the completion queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Event {
    /// An armed CQ got a completion (the completion channel fires).
    Completion {
        /// The CQ.
        cq: u32,
    },
    /// A CQ overflowed and lost completions (IBV_EVENT_CQ_ERR).
    CqError {
        /// The CQ.
        cq: u32,
    },
    /// The first packet arrived on a QP in RTR (IBV_EVENT_COMM_EST).
    CommEstablished {
        /// The QP.
        qpn: u32,
    },
    /// A QP in SQD has drained its send queue (IBV_EVENT_SQ_DRAINED).
    SqDrained {
        /// The QP.
        qpn: u32,
    },
    /// A QP on an SRQ entered the error state and will take no more WQEs
    /// (IBV_EVENT_QP_LAST_WQE_REACHED).
    LastWqeReached {
        /// The QP.
        qpn: u32,
    },
    /// A QP failed for a reason with no completion to carry it (IBV_EVENT_QP_FATAL).
    QpFatal {
        /// The QP.
        qpn: u32,
    },
    /// An SRQ fell below its armed limit (IBV_EVENT_SRQ_LIMIT_REACHED).
    SrqLimitReached {
        /// The SRQ.
        srq: u32,
    },
}
