//! The extended send API (`ibv_wr_start`, `ibv_wr_send`, `ibv_wr_set_sge`, ...,
//! `ibv_wr_complete`): calls build work requests in the QP, and `wr_complete` posts them all.

use std::ffi::{c_int, c_void};

use softrnic_emu_core::{MwBind, Remote, SendFlags, SendOp, SendWr, Sge, UdDest};

use crate::abi::*;
use crate::convert;
use crate::memory::Ah;
use crate::qp::Qp;

/// Work requests built since `wr_start`.
#[derive(Default)]
pub struct Batch {
    wrs: Vec<SendWr>,
    /// Inline bytes, copied when the program set them (it may reuse its buffer at once); the
    /// work requests' SGEs point here until `wr_complete` takes the bytes.
    inline: Vec<Vec<u8>>,
    /// The first error, returned by `wr_complete`.
    error: c_int,
}

/// Fills in the `wr_*` entry points.
pub fn install(ex: &mut ibv_qp_ex) {
    ex.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    ex.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    ex.wr_bind_mw = Some(wr_bind_mw);
    ex.wr_local_inv = Some(wr_local_inv);
    ex.wr_rdma_read = Some(wr_rdma_read);
    ex.wr_rdma_write = Some(wr_rdma_write);
    ex.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    ex.wr_send = Some(wr_send);
    ex.wr_send_imm = Some(wr_send_imm);
    ex.wr_send_inv = Some(wr_send_inv);
    ex.wr_send_tso = Some(wr_send_tso);
    ex.wr_set_ud_addr = Some(wr_set_ud_addr);
    ex.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    ex.wr_set_inline_data = Some(wr_set_inline_data);
    ex.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    ex.wr_set_sge = Some(wr_set_sge);
    ex.wr_set_sge_list = Some(wr_set_sge_list);
    ex.wr_start = Some(wr_start);
    ex.wr_complete = Some(wr_complete);
    ex.wr_abort = Some(wr_abort);
    ex.wr_atomic_write = Some(wr_atomic_write);
}

unsafe fn qp<'a>(p: *mut ibv_qp_ex) -> &'a mut Qp {
    &mut *p.cast::<Qp>()
}

/// Starts a work request with the QP's current `wr_id` and `wr_flags`.
unsafe fn op(p: *mut ibv_qp_ex, op: SendOp) {
    let q = qp(p);
    let wr = SendWr {
        wr_id: q.ex.wr_id,
        op,
        sgl: Vec::new(),
        flags: SendFlags::from_bits_retain(q.ex.wr_flags),
        ud: None,
        xrc_srqn: None,
    };
    q.batch.wrs.push(wr);
}

/// Sets something on the last work request; EINVAL at `wr_complete` if there is none.
unsafe fn last(p: *mut ibv_qp_ex, f: impl FnOnce(&mut SendWr, &mut Vec<Vec<u8>>)) {
    let b = &mut qp(p).batch;
    match b.wrs.last_mut() {
        Some(wr) => f(wr, &mut b.inline),
        None => fail(p, libc::EINVAL),
    }
}

/// Records the first error.
unsafe fn fail(p: *mut ibv_qp_ex, e: c_int) {
    let b = &mut qp(p).batch;
    if b.error == 0 {
        b.error = e;
    }
}

unsafe extern "C" fn wr_start(p: *mut ibv_qp_ex) {
    qp(p).batch = Batch::default();
}

unsafe extern "C" fn wr_abort(p: *mut ibv_qp_ex) {
    qp(p).batch = Batch::default();
}

/// Posts the batch: the errno of the first problem, or of the first work request refused.
unsafe extern "C" fn wr_complete(p: *mut ibv_qp_ex) -> c_int {
    let q = qp(p);
    let batch = std::mem::take(&mut q.batch);
    if batch.error != 0 {
        return batch.error;
    }
    let qpn = q.qpn();
    let result = q.ctx().call("ibv_wr_complete", |c| {
        let r = batch
            .wrs
            .into_iter()
            .try_for_each(|wr| c.push_send(qpn, &wr, None));
        let rung = c.doorbell();
        r.and(rung)
    });
    drop(batch.inline);
    result.err().unwrap_or(0)
}

unsafe extern "C" fn wr_send(p: *mut ibv_qp_ex) {
    op(p, SendOp::Send);
}

unsafe extern "C" fn wr_send_imm(p: *mut ibv_qp_ex, imm: u32) {
    op(p, SendOp::SendWithImm(u32::from_be(imm)));
}

unsafe extern "C" fn wr_send_inv(p: *mut ibv_qp_ex, rkey: u32) {
    op(p, SendOp::SendWithInv(rkey));
}

unsafe extern "C" fn wr_rdma_write(p: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    op(p, SendOp::Write(Remote { addr, rkey }));
}

unsafe extern "C" fn wr_rdma_write_imm(p: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    op(
        p,
        SendOp::WriteWithImm(Remote { addr, rkey }, u32::from_be(imm)),
    );
}

unsafe extern "C" fn wr_rdma_read(p: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    op(p, SendOp::Read(Remote { addr, rkey }));
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    p: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    let remote = Remote { addr, rkey };
    op(
        p,
        SendOp::CompareSwap {
            remote,
            compare,
            swap,
        },
    );
}

unsafe extern "C" fn wr_atomic_fetch_add(p: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    op(
        p,
        SendOp::FetchAdd {
            remote: Remote { addr, rkey },
            add,
        },
    );
}

unsafe extern "C" fn wr_local_inv(p: *mut ibv_qp_ex, rkey: u32) {
    op(p, SendOp::LocalInv(rkey));
}

unsafe extern "C" fn wr_bind_mw(
    p: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    if mw.is_null() || info.is_null() || (*info).mr.is_null() {
        return fail(p, libc::EINVAL);
    }
    let i = &*info;
    match convert::access(i.mw_access_flags) {
        Ok(access) => op(
            p,
            SendOp::BindMw(MwBind {
                mw_rkey: (*mw).rkey,
                new_key: rkey as u8,
                mr_lkey: (*i.mr).lkey,
                addr: i.addr,
                len: i.length,
                access,
            }),
        ),
        Err(e) => fail(p, e),
    }
}

unsafe extern "C" fn wr_set_sge(p: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    last(p, |wr, _| wr.sgl = vec![Sge { addr, length, lkey }]);
}

unsafe extern "C" fn wr_set_sge_list(p: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    match convert::sgl(list, n as c_int) {
        Ok(sgl) => last(p, |wr, _| wr.sgl = sgl),
        Err(e) => fail(p, e),
    }
}

/// Copies inline bytes now, as `ibv_wr_set_inline_data` promises.
unsafe fn set_inline(p: *mut ibv_qp_ex, bufs: &[(*const u8, usize)]) {
    last(p, |wr, store| {
        let mut data = Vec::with_capacity(bufs.iter().map(|b| b.1).sum());
        for &(addr, len) in bufs {
            if len > 0 {
                data.extend_from_slice(std::slice::from_raw_parts(addr, len));
            }
        }
        wr.flags |= SendFlags::INLINE;
        wr.sgl = vec![Sge {
            addr: data.as_ptr() as u64,
            length: data.len() as u32,
            lkey: 0,
        }];
        store.push(data);
    });
}

unsafe extern "C" fn wr_set_inline_data(p: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    set_inline(p, &[(addr.cast::<u8>().cast_const(), length)]);
}

unsafe extern "C" fn wr_set_inline_data_list(
    p: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    let bufs: Vec<_> = (0..n)
        .map(|i| {
            let b = &*list.add(i);
            (b.addr.cast::<u8>().cast_const(), b.length)
        })
        .collect();
    set_inline(p, &bufs);
}

unsafe extern "C" fn wr_set_ud_addr(
    p: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    if ah.is_null() {
        return fail(p, libc::EINVAL);
    }
    let handle = (*ah.cast::<Ah>()).handle;
    last(p, |wr, _| {
        wr.ud = Some(UdDest {
            ah: handle,
            remote_qpn,
            remote_qkey,
        });
    });
}

unsafe extern "C" fn wr_send_tso(p: *mut ibv_qp_ex, _: *mut c_void, _: u16, _: u16) {
    fail(p, libc::EOPNOTSUPP);
}

unsafe extern "C" fn wr_set_xrc_srqn(p: *mut ibv_qp_ex, remote_srqn: u32) {
    last(p, |wr, _| wr.xrc_srqn = Some(remote_srqn));
}

/// `ibv_wr_atomic_write`: the 8 bytes at `value` are taken now.
unsafe extern "C" fn wr_atomic_write(
    p: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    value: *const c_void,
) {
    if value.is_null() {
        return fail(p, libc::EINVAL);
    }
    let value = value.cast::<[u8; 8]>().read_unaligned();
    op(
        p,
        SendOp::AtomicWrite {
            remote: Remote { addr, rkey },
            value,
        },
    );
}

/// `ibv_wr_flush` (rdma-core 45): EINVAL for a length beyond 2^31 (IBA's message limit), or
/// for an unknown placement type or level.
pub unsafe extern "C" fn wr_flush(
    p: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    len: usize,
    placement: u8,
    level: u8,
) {
    let known = placement & !(IBV_FLUSH_GLOBAL | IBV_FLUSH_PERSISTENT) == 0
        && (level == IBV_FLUSH_RANGE || level == IBV_FLUSH_MR);
    match u32::try_from(len) {
        Ok(len) if known && len <= 1 << 31 => op(
            p,
            SendOp::Flush {
                remote: Remote { addr, rkey },
                len,
                placement,
                level,
            },
        ),
        _ => fail(p, libc::EINVAL),
    }
}
