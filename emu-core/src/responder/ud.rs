//! UD requests: one datagram per message, Q_Key checked, the GRH placed before the payload.

use softrnic_wire::{IpRepr, ParsedFrame};

use crate::cq::{SL_ROCE_V2_IPV4, SL_ROCE_V2_IPV6, WcFlags, WcOpcode, WcStatus};
use crate::dma;
use crate::memory::Memory;
use crate::qp::{Qp, Shared};

/// UD (IBA 9.8.4, 11.4.1.1): check the Q_Key, take a receive WQE, and place the 40-byte GRH
/// before the payload: the IPv6 header, or for IPv4 20 bytes of zeros and the IPv4 header.
pub(super) fn handle<M: Memory>(qp: &mut Qp, sh: &mut Shared<M>, pkt: &ParsedFrame) {
    let Some(deth) = pkt.repr.ext.deth else {
        return;
    };
    if deth.qkey != qp.attr.qkey {
        sh.counters.qkey_violation += 1;
        return;
    }
    let payload = pkt.payload();
    if payload.len() as u32 > qp.mtu(sh) {
        sh.counters.rcvd_malformed += 1;
        return;
    }
    let Some(wr) = qp.take_recv(sh) else {
        sh.counters.rcv_no_wqe_drop += 1;
        return;
    };
    let l3 = pkt.l3();
    let mut grh = [0u8; 40];
    let ip_len = pkt.repr.ip.header_len();
    grh[40 - ip_len..].copy_from_slice(&l3[..ip_len]);
    let placed = dma::scatter(&mut sh.mem, &sh.keys, qp.pd, &wr.sgl, 0, &grh)
        .and_then(|()| dma::scatter(&mut sh.mem, &sh.keys, qp.pd, &wr.sgl, 40, payload));
    let status = match placed {
        Ok(()) => WcStatus::Success,
        Err(s) => {
            if s == WcStatus::LocLenErr {
                sh.counters.resp_local_length_error += 1;
            }
            s
        }
    };
    let mut wc = qp.recv_wc(wr.wr_id, status, WcOpcode::Recv);
    wc.byte_len = 40 + payload.len() as u32;
    wc.src_qp = deth.src_qp;
    wc.wc_flags = WcFlags::GRH;
    wc.sl = match pkt.repr.ip {
        IpRepr::V4 { .. } => SL_ROCE_V2_IPV4,
        IpRepr::V6 { .. } => SL_ROCE_V2_IPV6,
    };
    wc.solicited = pkt.repr.bth.solicited;
    if let Some(imm) = pkt.repr.ext.immdt {
        wc.imm_data = imm;
        wc.wc_flags |= WcFlags::WITH_IMM;
    }
    sh.complete(qp.init.recv_cq, wc);
    sh.recycle(wr.sgl);
    if status != WcStatus::Success {
        qp.enter_error(sh);
    }
}
