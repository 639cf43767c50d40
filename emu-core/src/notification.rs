//! The notification point of RoCEv2 congestion control (Annex A17.9.3): a packet that reaches
//! its QP with the IP ECN bits at CE (a congested switch marked it) is answered with a CNP to the
//! QP that sent it, at most one per QP every `min_time_between_cnps`, so that the sender can
//! slow down. The sender's reaction to a CNP is its reaction point's (`reaction.rs`).

use softrnic_wire::{BthRepr, ExtRepr};

use crate::memory::Memory;
use crate::qp::{Qp, Shared};
use crate::time::Instant;

/// A QP's notification point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Notification {
    /// A CNP waits to be sent.
    due: bool,
    /// When the last one went.
    last: Option<Instant>,
}

/// The IP ECN bits of an ECN-capable packet, ECT(0) (RFC 3168).
pub(crate) const ECT0: u8 = 0b10;

/// Whether the IP ECN bits say Congestion Experienced (RFC 3168: 11).
pub(crate) fn congestion_experienced(ecn: u8) -> bool {
    ecn & 3 == 3
}

/// A CE-marked packet reached `qp` at `now`: a CNP is due unless one went too recently.
pub(crate) fn marked<M>(qp: &mut Qp, sh: &mut Shared<M>, now: Instant) {
    sh.counters.np_ecn_marked_roce_packets += 1;
    if !sh.dcqcn.np_enabled {
        return;
    }
    let interval = sh.dcqcn.min_time_between_cnps;
    let n = qp.np.get_or_insert_with(Box::default);
    if n.last.is_none_or(|t| now.saturating_since(t) >= interval) {
        n.due = true;
    }
}

/// The CNP `qp` owes, if one is due: BECN set, to the peer's QP (Annex A17.9.3), on the QP's
/// path with the device's CNP DSCP, and not ECN-capable (a CNP marked in turn would tell the
/// sender nothing).
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
    let mut repr = path.frame(
        BthRepr::cnp(qp.attr.dest_qp_num, 0xffff),
        ExtRepr::default(),
    );
    repr.ip = repr.ip.with_traffic_class(sh.dcqcn.cnp_dscp, 0);
    let n = repr.emit_in_place_with(0, buf, sh.icrc).ok()?;
    qp.np = Some(Box::new(Notification {
        due: false,
        last: Some(now),
    }));
    sh.counters.np_cnp_sent += 1;
    sh.counters.sent_pkts += 1;
    Some(n)
}
