//! Between the C structures and the engine's types: the data path (work requests,
//! completions) here, the control path in [`softrnic_verbs_abi::convert`] (re-exported).

use std::ffi::c_int;

use softrnic_emu_core::{
    MwBind, QpType, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdDest, Wc, WcFlags,
};

pub use softrnic_verbs_abi::convert::*;

use crate::abi::*;
use crate::memory::Ah;

/// A scatter/gather list.
///
/// # Safety
/// `list` must point to `n` SGEs (or `n` be 0).
pub unsafe fn sgl(list: *const ibv_sge, n: c_int) -> Result<Vec<Sge>, c_int> {
    let mut out = Vec::new();
    sgl_into(list, n, &mut out)?;
    Ok(out)
}

/// As [`sgl`], into `out` (emptied first), whose allocation a caller keeps from one work
/// request to the next.
///
/// # Safety
/// As [`sgl`].
unsafe fn sgl_into(list: *const ibv_sge, n: c_int, out: &mut Vec<Sge>) -> Result<(), c_int> {
    if n < 0 || (n > 0 && list.is_null()) {
        return Err(libc::EINVAL);
    }
    out.clear();
    out.extend((0..n as usize).map(|i| {
        let s = &*list.add(i);
        Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        }
    }));
    Ok(())
}

/// A send work request, its SGEs in `sgl` (a vector kept from one post to the next, so that
/// posting allocates nothing); EINVAL for an opcode softrnic does not run.
///
/// # Safety
/// `wr` must be a valid work request whose `ud.ah` (for UD) is one of ours.
pub unsafe fn send_wr(
    wr: &ibv_send_wr,
    qp_type: QpType,
    mut sgl: Vec<Sge>,
) -> Result<SendWr, c_int> {
    let rdma = || Remote {
        addr: wr.wr.rdma.remote_addr,
        rkey: wr.wr.rdma.rkey,
    };
    let atomic = || Remote {
        addr: wr.wr.atomic.remote_addr,
        rkey: wr.wr.atomic.rkey,
    };
    // Immediate data is in network order in memory: its value is the big-endian number the
    // IMMDT carries.
    let imm = || u32::from_be(wr.imm.imm_data);
    let op = match wr.opcode {
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm(imm()),
        IBV_WR_SEND_WITH_INV => SendOp::SendWithInv(wr.imm.invalidate_rkey),
        IBV_WR_RDMA_WRITE => SendOp::Write(rdma()),
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::WriteWithImm(rdma(), imm()),
        IBV_WR_RDMA_READ => SendOp::Read(rdma()),
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
            remote: atomic(),
            compare: wr.wr.atomic.compare_add,
            swap: wr.wr.atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            remote: atomic(),
            add: wr.wr.atomic.compare_add,
        },
        IBV_WR_LOCAL_INV => SendOp::LocalInv(wr.imm.invalidate_rkey),
        IBV_WR_BIND_MW => {
            let b = &wr.bind_mw_tso.bind_mw;
            if b.mw.is_null() || b.bind_info.mr.is_null() {
                return Err(libc::EINVAL);
            }
            SendOp::BindMw(MwBind {
                mw_rkey: (*b.mw).rkey,
                new_key: b.rkey as u8,
                mr_lkey: (*b.bind_info.mr).lkey,
                addr: b.bind_info.addr,
                len: b.bind_info.length,
                access: access(b.bind_info.mw_access_flags)?,
            })
        }
        _ => return Err(libc::EINVAL),
    };
    let ud = if qp_type == QpType::Ud {
        let u = &wr.wr.ud;
        if u.ah.is_null() {
            return Err(libc::EINVAL);
        }
        Some(UdDest {
            ah: (*u.ah.cast::<Ah>()).handle,
            remote_qpn: u.remote_qpn,
            remote_qkey: u.remote_qkey,
        })
    } else {
        None
    };
    sgl_into(wr.sg_list, wr.num_sge, &mut sgl)?;
    Ok(SendWr {
        wr_id: wr.wr_id,
        op,
        sgl,
        flags: SendFlags::from_bits_retain(wr.send_flags),
        ud,
        xrc_srqn: (qp_type == QpType::XrcSend).then_some(wr.qp_type.xrc.remote_srqn),
    })
}

/// The most inline bytes a WR carries (the device's `max_inline_data`).
pub const MAX_INLINE: usize = 256;

/// An inline WR's bytes, copied from its buffers at post time as a hardware provider copies
/// them into its WQE (IBA 10.8.2.2): no system call. `None` if the WR is not inline or is too
/// long (the post then refuses it).
///
/// # Safety
/// The SGEs of an inline WR must point at readable memory, as every provider requires.
pub unsafe fn inline_bytes<'a>(wr: &SendWr, buf: &'a mut [u8; MAX_INLINE]) -> Option<&'a [u8]> {
    if !wr.is_inline() {
        return None;
    }
    let mut at = 0usize;
    for s in &wr.sgl {
        let end = at
            .checked_add(s.length as usize)
            .filter(|&e| e <= MAX_INLINE)?;
        if s.length > 0 {
            let src = std::slice::from_raw_parts(s.addr as *const u8, s.length as usize);
            buf[at..end].copy_from_slice(src);
        }
        at = end;
    }
    Some(&buf[..at])
}

/// A receive work request, its SGEs in `sgl` (kept from one post to the next).
///
/// # Safety
/// `wr` must be a valid work request.
pub unsafe fn recv_wr(wr: &ibv_recv_wr, mut sgl: Vec<Sge>) -> Result<RecvWr, c_int> {
    sgl_into(wr.sg_list, wr.num_sge, &mut sgl)?;
    Ok(RecvWr {
        wr_id: wr.wr_id,
        sgl,
    })
}

/// The C form of a completion.
pub fn wc(w: &Wc) -> ibv_wc {
    // SAFETY: plain data.
    let mut c: ibv_wc = unsafe { std::mem::zeroed() };
    c.wr_id = w.wr_id;
    c.status = w.status as u32;
    c.opcode = w.opcode as u32;
    c.byte_len = w.byte_len;
    if w.wc_flags.contains(WcFlags::WITH_INV) {
        c.imm.invalidated_rkey = w.imm_data;
    } else {
        c.imm.imm_data = w.imm_data.to_be();
    }
    c.qp_num = w.qp_num;
    c.src_qp = w.src_qp;
    c.sl = w.sl;
    c.wc_flags = w.wc_flags.bits();
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_emu_core::{WcFlags, WcOpcode, WcStatus};

    #[test]
    fn immediate_data_keeps_its_bytes() {
        let mut w = Wc::new(7, WcStatus::Success, WcOpcode::Recv, 3);
        w.imm_data = 0x1122_3344;
        w.wc_flags = WcFlags::WITH_IMM;
        let c = wc(&w);
        // SAFETY: the member written for WITH_IMM.
        let imm = unsafe { c.imm.imm_data };
        assert_eq!(imm.to_ne_bytes(), [0x11, 0x22, 0x33, 0x44]);
    }
}
