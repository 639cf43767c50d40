//! Between the C structures of the control path (access flags, QP types, states and
//! attributes, address handles) and the engine's types.

use std::ffi::c_int;

use softrnic_emu_core::{Access, AddressHandle, AttrMask, Gid, Mtu, QpAttr, QpState, QpType};
use softrnic_wire::EthernetAddress;

use crate::abi::*;

/// The access flags softrnic knows; others are refused with EINVAL, as rxe does.
const KNOWN_ACCESS: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ZERO_BASED
    | IBV_ACCESS_FLUSH_GLOBAL
    | IBV_ACCESS_FLUSH_PERSISTENT
    | IBV_ACCESS_RELAXED_ORDERING;

/// Access flags, or EINVAL for one softrnic does not know. Relaxed ordering is a hint.
pub fn access(flags: u32) -> Result<Access, c_int> {
    if flags & !KNOWN_ACCESS != 0 {
        return Err(libc::EINVAL);
    }
    Ok(Access::from_bits_retain(
        flags & !IBV_ACCESS_RELAXED_ORDERING,
    ))
}

/// A QP type softrnic runs, else EOPNOTSUPP (raw packet, driver QPs).
pub fn qp_type(t: u32) -> Result<QpType, c_int> {
    match t {
        IBV_QPT_RC => Ok(QpType::Rc),
        IBV_QPT_UC => Ok(QpType::Uc),
        IBV_QPT_UD => Ok(QpType::Ud),
        IBV_QPT_XRC_SEND => Ok(QpType::XrcSend),
        IBV_QPT_XRC_RECV => Ok(QpType::XrcRecv),
        IBV_QPT_RAW_PACKET | IBV_QPT_DRIVER => Err(libc::EOPNOTSUPP),
        _ => Err(libc::EINVAL),
    }
}

fn qp_state(s: u32) -> Result<QpState, c_int> {
    Ok(match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_SQD => QpState::Sqd,
        IBV_QPS_SQE => QpState::Sqe,
        IBV_QPS_ERR => QpState::Err,
        _ => return Err(libc::EINVAL),
    })
}

/// An address vector: RoCE needs the GRH (IBA A17.4.5.1: the GID routes the packet), so one
/// without it is EINVAL, as rxe gives.
pub fn address(a: &ibv_ah_attr) -> Result<AddressHandle, c_int> {
    if a.is_global == 0 || a.port_num > 1 {
        return Err(libc::EINVAL);
    }
    // SAFETY: a union of two views of the same 16 bytes.
    let dgid = Gid(unsafe { a.grh.dgid.raw });
    Ok(AddressHandle {
        dgid,
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        flow_label: a.grh.flow_label,
        dmac: EthernetAddress([0; 6]),
    })
}

/// The C form of an address vector.
pub fn ah_attr(h: &AddressHandle) -> ibv_ah_attr {
    // SAFETY: plain data.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    a.is_global = 1;
    a.port_num = 1;
    a.grh.dgid.raw = h.dgid.0;
    a.grh.sgid_index = h.sgid_index;
    a.grh.hop_limit = h.hop_limit;
    a.grh.traffic_class = h.traffic_class;
    a.grh.flow_label = h.flow_label;
    a
}

/// `ibv_modify_qp`'s attributes, for the bits of `mask` (the others keep defaults and are not
/// read by the engine).
pub fn qp_attr(a: &ibv_qp_attr, mask: c_int) -> Result<(QpAttr, AttrMask), c_int> {
    let mask = AttrMask::from_bits_retain(mask as u32);
    let mut q = QpAttr::default();
    let has = |m: AttrMask| mask.contains(m);
    if has(AttrMask::STATE) {
        q.qp_state = qp_state(a.qp_state)?;
    }
    if has(AttrMask::CUR_STATE) {
        q.cur_qp_state = qp_state(a.cur_qp_state)?;
    }
    if has(AttrMask::ACCESS_FLAGS) {
        q.qp_access_flags = access(a.qp_access_flags)?;
    }
    if has(AttrMask::AV) {
        q.ah = Some(address(&a.ah_attr)?);
    }
    if has(AttrMask::PATH_MTU) {
        q.path_mtu = u8::try_from(a.path_mtu)
            .ok()
            .and_then(Mtu::from_ibv)
            .ok_or(libc::EINVAL)?;
    }
    if has(AttrMask::ALT_PATH) || has(AttrMask::PATH_MIG_STATE) {
        // Automatic path migration needs a second port; rxe refuses it too.
        return Err(libc::EINVAL);
    }
    q.pkey_index = a.pkey_index;
    q.port_num = a.port_num;
    q.qkey = a.qkey;
    q.timeout = a.timeout;
    q.retry_cnt = a.retry_cnt;
    q.rnr_retry = a.rnr_retry;
    q.rq_psn = a.rq_psn;
    q.sq_psn = a.sq_psn;
    q.max_rd_atomic = a.max_rd_atomic;
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    q.min_rnr_timer = a.min_rnr_timer;
    q.dest_qp_num = a.dest_qp_num;
    q.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    Ok((q, mask))
}

/// The C form of a QP's attributes and capabilities.
pub fn ibv_qp_attr_of(q: &QpAttr, cap: &softrnic_emu_core::QpCap) -> ibv_qp_attr {
    // SAFETY: plain data.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = q.qp_state as u32;
    a.cur_qp_state = q.qp_state as u32;
    a.path_mtu = q.path_mtu as u32;
    a.path_mig_state = IBV_MIG_MIGRATED;
    a.qkey = q.qkey;
    a.rq_psn = q.rq_psn;
    a.sq_psn = q.sq_psn;
    a.dest_qp_num = q.dest_qp_num;
    a.qp_access_flags = q.qp_access_flags.bits();
    a.cap = qp_cap(cap);
    if let Some(h) = &q.ah {
        a.ah_attr = ah_attr(h);
    }
    a.pkey_index = q.pkey_index;
    a.en_sqd_async_notify = u8::from(q.en_sqd_async_notify);
    a.sq_draining = 0;
    a.max_rd_atomic = q.max_rd_atomic;
    a.max_dest_rd_atomic = q.max_dest_rd_atomic;
    a.min_rnr_timer = q.min_rnr_timer;
    a.port_num = q.port_num;
    a.timeout = q.timeout;
    a.retry_cnt = q.retry_cnt;
    a.rnr_retry = q.rnr_retry;
    a
}

/// Capabilities both ways.
pub fn qp_cap(c: &softrnic_emu_core::QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// See [`qp_cap`].
pub fn cap(c: &ibv_qp_cap) -> softrnic_emu_core::QpCap {
    softrnic_emu_core::QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_access_bits_and_types_are_refused() {
        assert_eq!(access(1 << 30), Err(libc::EINVAL));
        assert_eq!(
            access(IBV_ACCESS_RELAXED_ORDERING),
            Ok(Access::from_bits_retain(0))
        );
        assert_eq!(qp_type(IBV_QPT_XRC_SEND), Ok(QpType::XrcSend));
        assert_eq!(qp_type(IBV_QPT_RAW_PACKET), Err(libc::EOPNOTSUPP));
        assert_eq!(qp_type(77), Err(libc::EINVAL));
    }
}
