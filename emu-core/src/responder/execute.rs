//! An RC or UC request in sequence: through the checks, then executed by its operation, then
//! acknowledged (IBA 9.7.5.2; rxe's responder states from check_op_seq to acknowledge).

use softrnic_wire::{Operation, ParsedFrame};

use super::checks::{self, Request};
use super::{INVALID, OPERATIONAL, Refuse, ack_syndrome};
use crate::cq::{WcFlags, WcOpcode, WcStatus};
use crate::dma;
use crate::keys::Target;
use crate::memory::Memory;
use crate::psn;
use crate::qp::{InProgress, Qp, Resource, ResourceKind, Response, Shared};
use crate::qp_attr::QpType;

/// Checks and executes a request whose PSN is the expected one.
pub(super) fn execute<M: Memory>(
    qp: &mut Qp,
    sh: &mut Shared<M>,
    pkt: &ParsedFrame,
) -> Result<(), Refuse> {
    let r = Request::of(qp, sh, pkt);
    if qp.init.qp_type == QpType::XrcRecv {
        super::xrc::named_srq(qp, &r)?;
    }
    checks::sequence(qp, &r)?;
    checks::allowed(qp, &r)?;
    checks::resources(qp, sh, &r)?;
    checks::length(qp, &r)?;
    let target = checks::key(qp, sh, &r)?;
    match r.op {
        Operation::Send => send(qp, sh, &r)?,
        Operation::RdmaWrite => write(qp, sh, &r, target)?,
        // A READ or atomic is a whole message, answered by its own response.
        Operation::RdmaReadRequest => {
            read(qp, &r);
            return Ok(());
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            return atomic(qp, sh, &r, target.ok_or(INVALID)?);
        }
        Operation::AtomicWrite => {
            let t = target.ok_or(INVALID)?;
            let value = u64::from_ne_bytes(r.payload.try_into().map_err(|_| INVALID)?);
            // One 8-byte store, never torn; every earlier request has executed already.
            sh.mem
                .atomic(t.space, t.addr, &|_| value)
                .map_err(|_| OPERATIONAL)?;
            done(qp, &r);
            return Ok(());
        }
        // Requests execute in order as they arrive, each store complete when it returns: the
        // bytes a FLUSH covers are visible to every later access already.
        Operation::Flush => {
            done(qp, &r);
            return Ok(());
        }
        _ => return Err(INVALID),
    }
    acknowledge(qp, &r);
    Ok(())
}

/// A SEND packet: its payload lands in the receive WQE the message holds; the last packet
/// completes it, after a SEND with Invalidate's key is invalidated (IBA 9.4.7, 10.6.6).
fn send<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, r: &Request) -> Result<(), Refuse> {
    if qp.resp.held.is_none() && !qp.hold_recv(sh) {
        return Err(Refuse::Rnr);
    }
    let (wr, offset) = qp.resp.held.as_ref().expect("held");
    if let Err(status) = dma::scatter(&mut sh.mem, &sh.keys, qp.pd, &wr.sgl, *offset, r.payload) {
        return Err(match status {
            WcStatus::LocLenErr => {
                sh.counters.resp_local_length_error += 1;
                Refuse::Nak(softrnic_wire::NakCode::InvalidRequest, WcStatus::LocLenErr)
            }
            s => Refuse::Nak(softrnic_wire::NakCode::RemoteOperationalError, s),
        });
    }
    if let Some((_, offset)) = qp.resp.held.as_mut() {
        *offset += r.len();
    }
    qp.resp.cur = Some(InProgress::Send);
    if !r.ends() {
        return Ok(());
    }
    if let Some(rkey) = r.ext.ieth {
        sh.keys.invalidate(rkey, qp.pd).map_err(|_| INVALID)?;
    }
    let (wr, len) = qp.release_held(sh).expect("held");
    let mut wc = qp.recv_wc(wr.wr_id, WcStatus::Success, WcOpcode::Recv);
    wc.byte_len = len;
    wc.solicited = r.solicited;
    if let Some(imm) = r.ext.immdt {
        wc.imm_data = imm;
        wc.wc_flags |= WcFlags::WITH_IMM;
    }
    if let Some(rkey) = r.ext.ieth {
        wc.imm_data = rkey;
        wc.wc_flags |= WcFlags::WITH_INV;
    }
    sh.complete(qp.init.recv_cq, wc);
    sh.recycle(wr.sgl);
    qp.resp.cur = None;
    Ok(())
}

/// An RDMA WRITE packet: its payload lands where the message's RETH pointed, past what
/// earlier packets wrote; with immediate, the last packet consumes a receive WQE.
fn write<M: Memory>(
    qp: &mut Qp,
    sh: &mut Shared<M>,
    r: &Request,
    first: Option<Target>,
) -> Result<(), Refuse> {
    if let (Some(target), Some(reth)) = (first, r.ext.reth) {
        qp.resp.cur = Some(InProgress::Write {
            target,
            left: reth.dma_len,
            len: reth.dma_len,
        });
    }
    let Some(InProgress::Write { target, left, len }) = qp.resp.cur else {
        return Err(INVALID);
    };
    let n = r.len();
    if n > 0 {
        sh.mem
            .write(target.space, target.addr, r.payload)
            .map_err(|_| OPERATIONAL)?;
    }
    qp.resp.cur = Some(InProgress::Write {
        target: Target {
            space: target.space,
            addr: target.addr + u64::from(n),
        },
        left: left - n,
        len,
    });
    if !r.ends() {
        return Ok(());
    }
    qp.resp.cur = None;
    if let Some(imm) = r.ext.immdt {
        let wr = qp.take_recv(sh).ok_or(Refuse::Rnr)?;
        let mut wc = qp.recv_wc(wr.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm);
        wc.byte_len = len;
        wc.imm_data = imm;
        wc.wc_flags = WcFlags::WITH_IMM;
        wc.solicited = r.solicited;
        sh.complete(qp.init.recv_cq, wc);
        sh.recycle(wr.sgl);
    }
    Ok(())
}

/// An RDMA READ request: its responses are queued, and it is kept to answer a duplicate.
fn read(qp: &mut Qp, r: &Request) {
    let reth = r.ext.reth.expect("checked by length");
    let npkts = psn::npkts(reth.dma_len, r.mtu);
    let p = r.psn;
    let res = Resource {
        first_psn: p,
        last_psn: psn::add(p, npkts - 1),
        kind: ResourceKind::Read {
            rkey: reth.rkey,
            va: reth.va,
            len: reth.dma_len,
        },
    };
    qp.resp
        .start_rd_atomic(qp.attr.max_dest_rd_atomic, res, |msn| Response::Read {
            psn: p,
            rkey: reth.rkey,
            va: reth.va,
            left: reth.dma_len,
            first: true,
            msn,
            replay: false,
        });
}

/// An atomic: executed once, its original value queued in the ATOMIC ACKNOWLEDGE and kept to
/// answer a duplicate (IBA 9.7.5.2.5: never executed twice).
fn atomic<M: Memory>(
    qp: &mut Qp,
    sh: &mut Shared<M>,
    r: &Request,
    t: Target,
) -> Result<(), Refuse> {
    let a = r.ext.atomic_eth.expect("checked by length");
    let orig = if r.op == Operation::CompareSwap {
        let (cmp, swap) = (a.compare, a.swap_add);
        sh.mem
            .atomic(t.space, t.addr, &|v| if v == cmp { swap } else { v })
    } else {
        let add = a.swap_add;
        sh.mem.atomic(t.space, t.addr, &|v| v.wrapping_add(add))
    }
    .map_err(|_| OPERATIONAL)?;
    let p = r.psn;
    let res = Resource {
        first_psn: p,
        last_psn: p,
        kind: ResourceKind::Atomic { orig },
    };
    qp.resp
        .start_rd_atomic(qp.attr.max_dest_rd_atomic, res, |msn| Response::Atomic {
            psn: p,
            orig,
            msn,
            replay: false,
        });
    Ok(())
}

/// An ATOMIC WRITE or FLUSH executed: answered by an empty READ RESPONSE ONLY, and kept to
/// answer a duplicate without executing it again (IBA 1.5, as 9.7.5.2.5 for atomics).
fn done(qp: &mut Qp, r: &Request) {
    let p = r.psn;
    let res = Resource {
        first_psn: p,
        last_psn: p,
        kind: ResourceKind::Done,
    };
    qp.resp
        .start_rd_atomic(qp.attr.max_dest_rd_atomic, res, |msn| {
            Response::empty_read(p, msn, false)
        });
}

/// The next PSN is expected, a finished message counts in the MSN, and an RC request that
/// asks for an ACK gets one (UC has none, IBA 9.8.3, whatever AckReq says).
fn acknowledge(qp: &mut Qp, r: &Request) {
    qp.resp.epsn = psn::add(r.psn, 1);
    if r.ends() {
        qp.resp.msn = qp.resp.msn.wrapping_add(1) & psn::MASK;
    }
    if r.ack_req && qp.init.qp_type.is_reliable() {
        qp.resp.queue_ack(r.psn, ack_syndrome());
    }
}
