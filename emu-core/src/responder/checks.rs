//! The checks an RC or UC request in sequence passes before it is executed, one step each, in
//! the order of IBA 9.7.5.2 (and rxe's responder): opcode sequence, operation allowed,
//! resources, length, key. Each returns the refusal its failure maps to.

use softrnic_wire::{
    ExtRepr, FethRepr, FlushLevel, FlushPlacement, Operation, ParsedFrame, Position,
};

use super::{ACCESS, INVALID, Refuse};
use crate::keys::{Access, Target};
use crate::qp::{InProgress, Qp, Shared};

/// Everything the steps read of a request.
pub(super) struct Request<'a> {
    pub op: Operation,
    pub pos: Position,
    pub psn: u32,
    pub ext: &'a ExtRepr,
    pub payload: &'a [u8],
    pub mtu: u32,
    pub solicited: bool,
    pub ack_req: bool,
}

impl<'a> Request<'a> {
    pub fn of<M>(qp: &Qp, sh: &Shared<M>, pkt: &'a ParsedFrame) -> Request<'a> {
        let bth = &pkt.repr.bth;
        let info = bth.opcode.info();
        Request {
            op: info.operation,
            pos: info.position,
            psn: bth.psn,
            ext: &pkt.repr.ext,
            payload: pkt.payload(),
            mtu: qp.mtu(sh),
            solicited: bth.solicited,
            ack_req: bth.ack_req,
        }
    }

    /// The payload's length.
    pub fn len(&self) -> u32 {
        self.payload.len() as u32
    }

    /// Whether this packet ends its message.
    pub fn ends(&self) -> bool {
        self.pos.is_last()
    }

    /// Whether the packet needs a receive WQE: a SEND's first packet and an RDMA WRITE with
    /// immediate's last.
    pub fn needs_recv(&self) -> bool {
        match self.op {
            Operation::Send => self.pos.is_first(),
            Operation::RdmaWrite => self.ends() && self.ext.immdt.is_some(),
            _ => false,
        }
    }
}

/// The operation must be in sequence with the message in progress (IBA 9.7.5.2.2 / C9-95).
pub(super) fn in_sequence(cur: Option<InProgress>, op: Operation, pos: Position) -> bool {
    match cur {
        Some(InProgress::Send) => op == Operation::Send && !pos.is_first(),
        Some(InProgress::Write { .. }) => op == Operation::RdmaWrite && !pos.is_first(),
        Some(InProgress::Dropping) | None => pos.is_first(),
    }
}

/// Step 1: the opcode sequence.
pub(super) fn sequence(qp: &Qp, r: &Request) -> Result<(), Refuse> {
    in_sequence(qp.resp.cur, r.op, r.pos)
        .then_some(())
        .ok_or(INVALID)
}

/// Step 2: the QP allows the operation (its remote access flags, as Modify QP set them),
/// checked on the packet that carries the RETH or AtomicETH; a responder executes only
/// requests. An operation the QP does not enable is an invalid request (class C, IBA 9.9.3:
/// the operation is not supported by this receive queue; rxe and RNICs answer the same), not
/// a remote access error, which is about the region a key names. FLUSH is the exception: its
/// placement is checked against the QP and the region alike, as a remote access error (IBA
/// 1.5, as rxe and rdma-core's test_qp_ex_rc_flush_type_violate expect).
pub(super) fn allowed(qp: &Qp, r: &Request) -> Result<(), Refuse> {
    let (needs, refuse) = match r.op {
        Operation::Send => return Ok(()),
        Operation::RdmaWrite if r.ext.reth.is_none() => return Ok(()),
        Operation::RdmaWrite | Operation::AtomicWrite => (Access::REMOTE_WRITE, INVALID),
        Operation::RdmaReadRequest => (Access::REMOTE_READ, INVALID),
        Operation::CompareSwap | Operation::FetchAdd => (Access::REMOTE_ATOMIC, INVALID),
        Operation::Flush => (flush_access(r.ext.feth.ok_or(INVALID)?)?, ACCESS),
        _ => return Err(INVALID),
    };
    if qp.attr.qp_access_flags.contains(needs) {
        Ok(())
    } else {
        Err(refuse)
    }
}

/// The access a FLUSH needs, QP and region alike: one flag per placement it asks for (IBA
/// 1.5, as rxe checks it). Reserved placement bits or level are an invalid request.
fn flush_access(feth: FethRepr) -> Result<Access, Refuse> {
    if !FlushPlacement::all().contains(feth.placement)
        || matches!(feth.level, FlushLevel::Reserved(_))
    {
        return Err(INVALID);
    }
    let mut access = Access::empty();
    if feth.placement.contains(FlushPlacement::GLOBAL) {
        access |= Access::FLUSH_GLOBAL;
    }
    if feth.placement.contains(FlushPlacement::PERSISTENT) {
        access |= Access::FLUSH_PERSISTENT;
    }
    Ok(access)
}

/// Step 3: resources. A receive WQE where one is needed, else an RNR NAK (IBA 9.7.5.2.8); a
/// free READ/atomic slot (max_dest_rd_atomic, IBA 9.5.1), else an invalid request.
pub(super) fn resources<M>(qp: &Qp, sh: &Shared<M>, r: &Request) -> Result<(), Refuse> {
    if r.needs_recv() && qp.resp.held.is_none() && !qp.has_recv(sh) {
        return Err(Refuse::Rnr);
    }
    let max = qp.attr.max_dest_rd_atomic as usize;
    let rd_atomic = matches!(
        r.op,
        Operation::RdmaReadRequest
            | Operation::CompareSwap
            | Operation::FetchAdd
            | Operation::AtomicWrite
            | Operation::Flush
    );
    if rd_atomic && (max == 0 || qp.resp.pending_rd_atomic() >= max) {
        return Err(INVALID);
    }
    Ok(())
}

/// Step 4: lengths (IBA 9.7.5.2.3). A packet's payload fits its position; a DMA length is at
/// most 2^31; a WRITE's payloads add up to the length its RETH announced; an atomic's address
/// is 8-byte aligned (IBA 9.4.5), and an ATOMIC WRITE's too, with 8 bytes announced and
/// carried (IBA 1.5).
pub(super) fn length(qp: &Qp, r: &Request) -> Result<(), Refuse> {
    let n = r.len();
    let ok = match r.op {
        Operation::Send => position_allows(r.pos, n, r.mtu),
        Operation::RdmaWrite => {
            let left = match (r.ext.reth, qp.resp.cur) {
                (Some(reth), _) if reth.dma_len > 1 << 31 => return Err(INVALID),
                (Some(reth), _) => reth.dma_len,
                (None, Some(InProgress::Write { left, .. })) => left,
                (None, _) => return Err(INVALID),
            };
            let fits = if r.ends() { n == left } else { n < left };
            position_allows(r.pos, n, r.mtu) && fits
        }
        Operation::RdmaReadRequest | Operation::Flush => {
            r.ext.reth.is_some_and(|reth| reth.dma_len <= 1 << 31)
        }
        Operation::AtomicWrite => r
            .ext
            .reth
            .is_some_and(|reth| reth.dma_len == 8 && reth.va % 8 == 0 && n == 8),
        _ => r.ext.atomic_eth.is_some_and(|a| a.va % 8 == 0),
    };
    ok.then_some(()).ok_or(INVALID)
}

/// Payload lengths IBA 9.7.5.2.3 allows: FIRST and MIDDLE packets carry exactly the path MTU,
/// LAST at least one byte and at most the MTU, ONLY at most the MTU.
fn position_allows(pos: Position, len: u32, mtu: u32) -> bool {
    match pos {
        Position::First | Position::Middle => len == mtu,
        Position::Last => len > 0 && len <= mtu,
        Position::Only => len <= mtu,
    }
}

/// Step 5: the R_Key grants the access over the range (IBA 10.6.3). Returns where a WRITE's
/// first packet, an atomic or an ATOMIC WRITE lands. A zero-length WRITE or READ checks no key (IBA 9.7.5.2.3).
pub(super) fn key<M>(qp: &Qp, sh: &Shared<M>, r: &Request) -> Result<Option<Target>, Refuse> {
    let (rkey, access, va, len) = match (r.op, r.ext.reth, r.ext.atomic_eth) {
        (Operation::RdmaWrite, Some(reth), _) if reth.dma_len == 0 => {
            return Ok(Some(Target {
                space: 0,
                addr: reth.va,
            }));
        }
        (Operation::RdmaReadRequest, Some(reth), _) => {
            return read_key(qp, sh, reth.rkey, reth.va, reth.dma_len).map(|()| None);
        }
        (Operation::RdmaWrite, Some(reth), _) => (
            reth.rkey,
            Access::REMOTE_WRITE,
            reth.va,
            reth.dma_len.into(),
        ),
        (Operation::CompareSwap | Operation::FetchAdd, _, Some(a)) => {
            (a.rkey, Access::REMOTE_ATOMIC, a.va, 8)
        }
        (Operation::AtomicWrite, Some(reth), _) => (reth.rkey, Access::REMOTE_WRITE, reth.va, 8),
        (Operation::Flush, Some(reth), _) => {
            let feth = r.ext.feth.ok_or(INVALID)?;
            let access = flush_access(feth)?;
            // A whole-region flush ignores the RETH's range (IBA 1.5).
            let (va, len) = match feth.level {
                FlushLevel::Region => sh.keys.extent(reth.rkey).ok_or(ACCESS)?,
                _ => (reth.va, reth.dma_len.into()),
            };
            (reth.rkey, access, va, len)
        }
        _ => return Ok(None),
    };
    sh.keys
        .check_remote(rkey, qp.pd, qp.qpn, access, va, len)
        .map(Some)
        .map_err(|_| ACCESS)
}

/// The key check of a READ of `len` bytes at `va`, also for a duplicate READ answered again:
/// none for a zero-length READ (IBA 9.7.5.2.3).
pub(super) fn read_key<M>(
    qp: &Qp,
    sh: &Shared<M>,
    rkey: u32,
    va: u64,
    len: u32,
) -> Result<(), Refuse> {
    if len == 0 {
        return Ok(());
    }
    sh.keys
        .check_remote(rkey, qp.pd, qp.qpn, Access::REMOTE_READ, va, len.into())
        .map(|_| ())
        .map_err(|_| ACCESS)
}
