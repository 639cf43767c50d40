//! The notification point of RoCEv2 congestion control (Annex A17.9.3): a packet that reaches
//! its QP with the IP ECN bits at CE (a congested switch marked it) is answered with a CNP to the
//! QP that sent it, at most one per QP every [`CNP_INTERVAL`], so that the sender can slow
//! down. The sender's reaction to a CNP is its reaction point's (`reaction.rs`).

use core::time::Duration;

use softrnic_wire::{BthRepr, ExtRepr};

use crate::memory::Memory;
use crate::qp::{Qp, Shared};
use crate::time::Instant;

/// The least time between two CNPs of one QP (mlx5's `min_time_between_cnps` is the same
/// knob).
pub const CNP_INTERVAL: Duration = Duration::from_micros(4);

/// A QP's notification point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Notification {
    /// A CNP waits to be sent.
    due: bool,
    /// When the last one went.
    last: Option<Instant>,
}

/// Whether the IP ECN bits say Congestion Experienced (RFC 3168: 11).
pub(crate) fn congestion_experienced(ecn: u8) -> bool {
    ecn & 3 == 3
}

/// A CE-marked packet reached `qp` at `now`: a CNP is due unless one went too recently.
pub(crate) fn marked<M>(qp: &mut Qp, sh: &mut Shared<M>, now: Instant) {
    sh.counters.np_ecn_marked_roce_packets += 1;
    let n = qp.np.get_or_insert_with(Box::default);
    if n.last
        .is_none_or(|t| now.saturating_since(t) >= CNP_INTERVAL)
    {
        n.due = true;
    }
}

/// The CNP `qp` owes, if one is due: BECN set, to the peer's QP (Annex A17.9.3), on the QP's
/// path.
pub(crate) fn poll<M: Memory>(
    qp: &mut Qp,
    sh: &mut Shared<M>,
    now: Instant,
    buf: &mut [u8],
) -> Option<usize> {
    if !qp.np.as_ref().is_some_and(|n| n.due) {
        return None;
    }
    let path = qp.path?;
    let repr = path.frame(
        BthRepr::cnp(qp.attr.dest_qp_num, 0xffff),
        ExtRepr::default(),
    );
    let n = repr.emit_in_place_with(0, buf, sh.icrc).ok()?;
    qp.np = Some(Box::new(Notification {
        due: false,
        last: Some(now),
    }));
    sh.counters.np_cnp_sent += 1;
    sh.counters.sent_pkts += 1;
    Some(n)
}
