//! An XRC target QP (IBA Annex A14): each request's XRCETH names the SRQ it works against,
//! which must be an XRC SRQ of the QP's domain. That SRQ lends the QP its PD (for R_Keys), its
//! receive WQEs and its CQ; everything else is RC's (`rc.rs`).

use softrnic_wire::ParsedFrame;

use super::checks::Request;
use super::{INVALID, Refuse};
use crate::qp::{NO_OBJECT, Qp, Shared};

/// Points the QP at the SRQ the request names, if it may use it. A message in progress keeps
/// its SRQ: a later packet naming another is refused by [`named_srq`].
pub(super) fn target<M>(qp: &mut Qp, sh: &Shared<M>, pkt: &ParsedFrame) {
    if qp.resp.cur.is_some() {
        return;
    }
    let named = pkt.repr.ext.xrceth.and_then(|n| {
        let s = sh.srqs.get(n)?;
        let x = s.xrc.filter(|x| Some(x.xrcd) == qp.xrcd)?;
        Some((n, s.pd, x.cq))
    });
    (qp.init.srq, qp.pd, qp.init.recv_cq) = match named {
        Some((n, pd, cq)) => (Some(n), pd, cq),
        None => (None, NO_OBJECT, qp.init.recv_cq),
    };
}

/// The first check of an XRC request in sequence: its SRQ is the one the QP was pointed at,
/// else the request is invalid (no such SRQ in the domain, or another SRQ mid-message).
pub(super) fn named_srq(qp: &Qp, r: &Request) -> Result<(), Refuse> {
    match r.ext.xrceth {
        Some(n) if qp.init.srq == Some(n) => Ok(()),
        _ => Err(INVALID),
    }
}
