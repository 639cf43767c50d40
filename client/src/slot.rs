//! The data-plane contract: the fixed layouts of the slots in a context's rings, defined once
//! for both sides. The program writes send and receive slots and reads completion slots; the
//! daemon does the reverse. Nothing is serialized: a slot is a `repr(C)` header, followed, for
//! a work request, by its SGEs or its inline bytes.
//!
//! A slot is read from memory the other side can write at any time, so it is copied out first
//! and then decoded: every bit pattern is a valid header, and decoding refuses what no work
//! request or completion can be (an unknown opcode or status, more SGEs than the slot holds).

use bytemuck::{Pod, Zeroable};

use softrnic_emu_core::{
    Access, AddressHandle, Gid, MwBind, QpCap, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge,
    UdDest, Wc, WcFlags, WcOpcode, WcStatus,
};
use softrnic_wire::EthernetAddress;

/// A send slot's header; `num_sge` [`SgeSlot`]s follow it, then `inline_len` bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct SendSlot {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What the WR does: one of the `OP_*` values.
    pub opcode: u32,
    /// Its `ibv_send_flags` ([`SendFlags`]).
    pub flags: u32,
    /// SGEs after the header.
    pub num_sge: u32,
    /// Inline bytes after the SGEs (taken at post time; the SGEs still give the length).
    pub inline_len: u32,
    /// Immediate data, the rkey a SEND invalidates, the key LOCAL_INV invalidates, or the
    /// window's rkey for a bind.
    pub imm_or_key: u32,
    /// The remote rkey, or for a bind the region's lkey.
    pub rkey: u32,
    /// The remote address, or for a bind the window's start.
    pub remote_addr: u64,
    /// The compare or add operand, an ATOMIC WRITE's 8 bytes, a FLUSH's length, or for a bind
    /// the window's length.
    pub operand: u64,
    /// The swap operand, a FLUSH's placement (low 8 bits) and level (next 8), or for a bind
    /// its access flags (low 32 bits) and new key byte (next 8).
    pub swap: u64,
    /// UD: whether the fields below are set.
    pub has_ud: u32,
    /// UD: the remote QP and Q_Key.
    pub remote_qpn: u32,
    /// UD: the remote Q_Key.
    pub remote_qkey: u32,
    /// UD: the address handle's flow label.
    pub flow_label: u32,
    /// UD: the destination GID.
    pub dgid: [u8; 16],
    /// UD: source GID index, hop limit, traffic class (the daemon resolves the MAC).
    pub sgid_index: u8,
    /// UD: hop limit.
    pub hop_limit: u8,
    /// UD: traffic class.
    pub traffic_class: u8,
    /// Zero.
    pub reserved: [u8; 5],
    /// XRC: whether `xrc_srqn` is set.
    pub has_xrc: u32,
    /// XRC: the SRQ at the target the request goes to.
    pub xrc_srqn: u32,
}

/// A receive slot's header; `num_sge` [`SgeSlot`]s follow it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct RecvSlot {
    /// Returned in the completion.
    pub wr_id: u64,
    /// SGEs after the header.
    pub num_sge: u32,
    /// Zero.
    pub reserved: u32,
}

/// One scatter/gather element in a slot.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct SgeSlot {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The region's lkey.
    pub lkey: u32,
}

/// A completion slot, the fields of `struct ibv_wc` that softrnic fills.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct CqeSlot {
    /// The WR's ID.
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: u32,
    /// `enum ibv_wc_opcode`.
    pub opcode: u32,
    /// Bytes received or read.
    pub byte_len: u32,
    /// Immediate data or the invalidated rkey.
    pub imm_data: u32,
    /// The local QP.
    pub qp_num: u32,
    /// The sender's QP (UD).
    pub src_qp: u32,
    /// `ibv_wc_flags` ([`WcFlags`]).
    pub wc_flags: u32,
    /// Whether the sender asked for a solicited event.
    pub solicited: u16,
    /// `ibv_wc.sl`.
    pub sl: u16,
    /// Whether `srq` is set.
    pub has_srq: u32,
    /// The SRQ the receive's work request came from.
    pub srq: u32,
}

impl CqeSlot {
    /// The slot's bytes, as they go into a ring.
    pub fn as_bytes(&self) -> &[u8] {
        bytemuck::bytes_of(self)
    }
}

/// The `opcode` of a [`SendSlot`].
const OP_SEND: u32 = 0;
const OP_SEND_WITH_IMM: u32 = 1;
const OP_SEND_WITH_INV: u32 = 2;
const OP_WRITE: u32 = 3;
const OP_WRITE_WITH_IMM: u32 = 4;
const OP_READ: u32 = 5;
const OP_COMPARE_SWAP: u32 = 6;
const OP_FETCH_ADD: u32 = 7;
const OP_LOCAL_INV: u32 = 8;
const OP_BIND_MW: u32 = 9;
const OP_ATOMIC_WRITE: u32 = 10;
const OP_FLUSH: u32 = 11;

const SEND_HEADER: usize = size_of::<SendSlot>();
const RECV_HEADER: usize = size_of::<RecvSlot>();
const SGE: usize = size_of::<SgeSlot>();

/// Bytes per send slot for a QP of `cap`: the header, its SGEs and its inline bytes (rounded
/// up so that slots stay 8-byte aligned).
pub fn send_slot_size(cap: &QpCap) -> u32 {
    let tail = cap.max_send_sge as usize * SGE + (cap.max_inline_data as usize).next_multiple_of(8);
    (SEND_HEADER + tail) as u32
}

/// Bytes per receive slot for a queue of `max_sge` SGEs per WR.
pub fn recv_slot_size(max_sge: u32) -> u32 {
    (RECV_HEADER + max_sge.max(1) as usize * SGE) as u32
}

/// Bytes per completion slot.
pub const CQE_SLOT: u32 = size_of::<CqeSlot>() as u32;

/// Writes `wr` (with its inline bytes, taken at post time) into `slot`; the bytes written, or
/// `None` if it does not fit.
pub fn encode_send(wr: &SendWr, inline: Option<&[u8]>, slot: &mut [u8]) -> Option<usize> {
    let mut h = SendSlot {
        wr_id: wr.wr_id,
        flags: wr.flags.bits(),
        ..SendSlot::default()
    };
    let remote = |h: &mut SendSlot, r: &Remote| {
        h.remote_addr = r.addr;
        h.rkey = r.rkey;
    };
    h.opcode = match wr.op {
        SendOp::Send => OP_SEND,
        SendOp::SendWithImm(imm) => {
            h.imm_or_key = imm;
            OP_SEND_WITH_IMM
        }
        SendOp::SendWithInv(key) => {
            h.imm_or_key = key;
            OP_SEND_WITH_INV
        }
        SendOp::Write(r) => {
            remote(&mut h, &r);
            OP_WRITE
        }
        SendOp::WriteWithImm(r, imm) => {
            remote(&mut h, &r);
            h.imm_or_key = imm;
            OP_WRITE_WITH_IMM
        }
        SendOp::Read(r) => {
            remote(&mut h, &r);
            OP_READ
        }
        SendOp::CompareSwap {
            remote: r,
            compare,
            swap,
        } => {
            remote(&mut h, &r);
            (h.operand, h.swap) = (compare, swap);
            OP_COMPARE_SWAP
        }
        SendOp::FetchAdd { remote: r, add } => {
            remote(&mut h, &r);
            h.operand = add;
            OP_FETCH_ADD
        }
        SendOp::AtomicWrite { remote: r, value } => {
            remote(&mut h, &r);
            h.operand = u64::from_ne_bytes(value);
            OP_ATOMIC_WRITE
        }
        SendOp::Flush {
            remote: r,
            len,
            placement,
            level,
        } => {
            remote(&mut h, &r);
            h.operand = len.into();
            h.swap = u64::from(placement) | u64::from(level) << 8;
            OP_FLUSH
        }
        SendOp::LocalInv(key) => {
            h.imm_or_key = key;
            OP_LOCAL_INV
        }
        SendOp::BindMw(b) => {
            h.imm_or_key = b.mw_rkey;
            h.rkey = b.mr_lkey;
            h.remote_addr = b.addr;
            h.operand = b.len;
            h.swap = u64::from(b.access.bits()) | u64::from(b.new_key) << 32;
            OP_BIND_MW
        }
    };
    if let Some(ud) = &wr.ud {
        h.has_ud = 1;
        h.remote_qpn = ud.remote_qpn;
        h.remote_qkey = ud.remote_qkey;
        h.flow_label = ud.ah.flow_label;
        h.dgid = ud.ah.dgid.0;
        h.sgid_index = ud.ah.sgid_index;
        h.hop_limit = ud.ah.hop_limit;
        h.traffic_class = ud.ah.traffic_class;
    }
    if let Some(srqn) = wr.xrc_srqn {
        (h.has_xrc, h.xrc_srqn) = (1, srqn);
    }
    let inline = inline.unwrap_or_default();
    h.num_sge = u32::try_from(wr.sgl.len()).ok()?;
    h.inline_len = u32::try_from(inline.len()).ok()?;
    let sges_end = SEND_HEADER + wr.sgl.len() * SGE;
    let end = sges_end.checked_add(inline.len())?;
    let slot = slot.get_mut(..end)?;
    slot[..SEND_HEADER].copy_from_slice(bytemuck::bytes_of(&h));
    write_sges(&wr.sgl, &mut slot[SEND_HEADER..sges_end]);
    slot[sges_end..].copy_from_slice(inline);
    Some(end)
}

/// Reads a send slot: the work request and its inline bytes, or `None` if it is not one. Its
/// SGEs go into `sgl` (emptied first: a list kept from a WR done with, so that decoding does
/// not allocate).
pub fn decode_send(slot: &[u8], sgl: Vec<Sge>) -> Option<(SendWr, Option<Vec<u8>>)> {
    let h: SendSlot = bytemuck::pod_read_unaligned(slot.get(..SEND_HEADER)?);
    let tail = &slot[SEND_HEADER..];
    let remote = Remote {
        addr: h.remote_addr,
        rkey: h.rkey,
    };
    let op = match h.opcode {
        OP_SEND => SendOp::Send,
        OP_SEND_WITH_IMM => SendOp::SendWithImm(h.imm_or_key),
        OP_SEND_WITH_INV => SendOp::SendWithInv(h.imm_or_key),
        OP_WRITE => SendOp::Write(remote),
        OP_WRITE_WITH_IMM => SendOp::WriteWithImm(remote, h.imm_or_key),
        OP_READ => SendOp::Read(remote),
        OP_COMPARE_SWAP => SendOp::CompareSwap {
            remote,
            compare: h.operand,
            swap: h.swap,
        },
        OP_FETCH_ADD => SendOp::FetchAdd {
            remote,
            add: h.operand,
        },
        OP_ATOMIC_WRITE => SendOp::AtomicWrite {
            remote,
            value: h.operand.to_ne_bytes(),
        },
        OP_FLUSH => SendOp::Flush {
            remote,
            len: u32::try_from(h.operand).ok()?,
            placement: h.swap as u8,
            level: (h.swap >> 8) as u8,
        },
        OP_LOCAL_INV => SendOp::LocalInv(h.imm_or_key),
        OP_BIND_MW => SendOp::BindMw(MwBind {
            mw_rkey: h.imm_or_key,
            new_key: (h.swap >> 32) as u8,
            mr_lkey: h.rkey,
            addr: h.remote_addr,
            len: h.operand,
            access: Access::from_bits(h.swap as u32)?,
        }),
        _ => return None,
    };
    let ud = (h.has_ud != 0).then_some(UdDest {
        ah: AddressHandle {
            dgid: Gid(h.dgid),
            sgid_index: h.sgid_index,
            hop_limit: h.hop_limit,
            traffic_class: h.traffic_class,
            flow_label: h.flow_label,
            // The daemon resolves the next hop.
            dmac: EthernetAddress([0; 6]),
        },
        remote_qpn: h.remote_qpn,
        remote_qkey: h.remote_qkey,
    });
    let sgl = read_sges(tail, h.num_sge, sgl)?;
    let inline_at = sgl.len() * SGE;
    let wr = SendWr {
        wr_id: h.wr_id,
        op,
        sgl,
        flags: SendFlags::from_bits(h.flags)?,
        ud,
        xrc_srqn: (h.has_xrc != 0).then_some(h.xrc_srqn),
    };
    let inline = match wr.is_inline() {
        true => Some(
            tail.get(inline_at..inline_at + h.inline_len as usize)?
                .to_vec(),
        ),
        false => None,
    };
    Some((wr, inline))
}

/// Writes `wr` into `slot`; the bytes written, or `None` if it does not fit.
pub fn encode_recv(wr: &RecvWr, slot: &mut [u8]) -> Option<usize> {
    let h = RecvSlot {
        wr_id: wr.wr_id,
        num_sge: u32::try_from(wr.sgl.len()).ok()?,
        reserved: 0,
    };
    let end = RECV_HEADER.checked_add(wr.sgl.len() * SGE)?;
    let slot = slot.get_mut(..end)?;
    slot[..RECV_HEADER].copy_from_slice(bytemuck::bytes_of(&h));
    write_sges(&wr.sgl, &mut slot[RECV_HEADER..]);
    Some(end)
}

/// Reads a receive slot, or `None` if it is not one.
/// Reads a receive slot, its SGEs into `sgl` (as [`decode_send`]).
pub fn decode_recv(slot: &[u8], sgl: Vec<Sge>) -> Option<RecvWr> {
    let h: RecvSlot = bytemuck::pod_read_unaligned(slot.get(..RECV_HEADER)?);
    Some(RecvWr {
        wr_id: h.wr_id,
        sgl: read_sges(&slot[RECV_HEADER..], h.num_sge, sgl)?,
    })
}

/// A completion as its slot.
pub fn encode_wc(wc: &Wc) -> CqeSlot {
    CqeSlot {
        wr_id: wc.wr_id,
        status: wc.status as u32,
        opcode: wc.opcode as u32,
        byte_len: wc.byte_len,
        imm_data: wc.imm_data,
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        wc_flags: wc.wc_flags.bits(),
        solicited: u16::from(wc.solicited),
        sl: u16::from(wc.sl),
        has_srq: u32::from(wc.srq.is_some()),
        srq: wc.srq.unwrap_or(0),
    }
}

/// Reads a completion slot, or `None` if it is not one.
pub fn decode_wc(slot: &[u8]) -> Option<Wc> {
    let c: CqeSlot = bytemuck::pod_read_unaligned(slot.get(..size_of::<CqeSlot>())?);
    Some(Wc {
        wr_id: c.wr_id,
        status: WcStatus::from_u32(c.status)?,
        opcode: WcOpcode::from_u32(c.opcode)?,
        byte_len: c.byte_len,
        imm_data: c.imm_data,
        qp_num: c.qp_num,
        src_qp: c.src_qp,
        wc_flags: WcFlags::from_bits(c.wc_flags)?,
        solicited: c.solicited != 0,
        sl: u8::try_from(c.sl).ok()?,
        srq: (c.has_srq != 0).then_some(c.srq),
    })
}

/// The fuzz target's body: a slot's bytes from a program that does not keep the contract.
/// Decoding never panics, and whatever decodes encodes back into a slot of the same size that
/// decodes the same.
pub fn fuzz(data: &[u8]) {
    let mut buf = vec![0; data.len()];
    if let Some((wr, inline)) = decode_send(data, Vec::new()) {
        let n = encode_send(&wr, inline.as_deref(), &mut buf).expect("fits where it came from");
        assert_eq!(decode_send(&buf[..n], Vec::new()), Some((wr, inline)));
    }
    if let Some(wr) = decode_recv(data, Vec::new()) {
        let n = encode_recv(&wr, &mut buf).expect("fits where it came from");
        assert_eq!(decode_recv(&buf[..n], Vec::new()), Some(wr));
    }
    if let Some(wc) = decode_wc(data) {
        assert_eq!(decode_wc(encode_wc(&wc).as_bytes()), Some(wc));
    }
}

fn write_sges(sgl: &[Sge], out: &mut [u8]) {
    for (s, chunk) in sgl.iter().zip(out.chunks_exact_mut(SGE)) {
        let e = SgeSlot {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
        chunk.copy_from_slice(bytemuck::bytes_of(&e));
    }
}

/// `n` SGEs from the start of `tail`, in `sgl` (emptied first), or `None` if they run past it.
fn read_sges(tail: &[u8], n: u32, mut sgl: Vec<Sge>) -> Option<Vec<Sge>> {
    let bytes = tail.get(..(n as usize).checked_mul(SGE)?)?;
    sgl.clear();
    sgl.extend(bytes.chunks_exact(SGE).map(|c| {
        let e: SgeSlot = bytemuck::pod_read_unaligned(c);
        Sge {
            addr: e.addr,
            length: e.length,
            lkey: e.lkey,
        }
    }));
    Some(sgl)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_layouts_are_what_both_sides_compile() {
        assert_eq!(size_of::<SendSlot>(), 104);
        assert_eq!(size_of::<RecvSlot>(), 16);
        assert_eq!(size_of::<SgeSlot>(), 16);
        assert_eq!(CQE_SLOT, 48);
        assert_eq!(send_slot_size(&QpCap::new(16, 1, 0)), 120);
        assert_eq!(send_slot_size(&QpCap::new(16, 1, 60)), 184);
        assert_eq!(recv_slot_size(1), 32);
    }

    fn sge() -> impl Strategy<Value = Sge> {
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(addr, length, lkey)| Sge {
            addr,
            length,
            lkey,
        })
    }

    fn remote() -> impl Strategy<Value = Remote> {
        (any::<u64>(), any::<u32>()).prop_map(|(addr, rkey)| Remote { addr, rkey })
    }

    fn op() -> impl Strategy<Value = SendOp> {
        prop_oneof![
            Just(SendOp::Send),
            any::<u32>().prop_map(SendOp::SendWithImm),
            any::<u32>().prop_map(SendOp::SendWithInv),
            remote().prop_map(SendOp::Write),
            (remote(), any::<u32>()).prop_map(|(r, i)| SendOp::WriteWithImm(r, i)),
            remote().prop_map(SendOp::Read),
            (remote(), any::<u64>(), any::<u64>()).prop_map(|(remote, compare, swap)| {
                SendOp::CompareSwap {
                    remote,
                    compare,
                    swap,
                }
            }),
            (remote(), any::<u64>()).prop_map(|(remote, add)| SendOp::FetchAdd { remote, add }),
            (remote(), any::<[u8; 8]>())
                .prop_map(|(remote, value)| SendOp::AtomicWrite { remote, value }),
            (remote(), any::<u32>(), any::<u8>(), any::<u8>()).prop_map(
                |(remote, len, placement, level)| SendOp::Flush {
                    remote,
                    len,
                    placement,
                    level
                }
            ),
            any::<u32>().prop_map(SendOp::LocalInv),
            (
                any::<u32>(),
                any::<u8>(),
                any::<u32>(),
                any::<u64>(),
                any::<u64>()
            )
                .prop_map(|(mw_rkey, new_key, mr_lkey, addr, len)| SendOp::BindMw(
                    MwBind {
                        mw_rkey,
                        new_key,
                        mr_lkey,
                        addr,
                        len,
                        access: Access::REMOTE_WRITE | Access::REMOTE_READ,
                    }
                )),
        ]
    }

    fn ud() -> impl Strategy<Value = Option<UdDest>> {
        proptest::option::of(
            (any::<[u8; 16]>(), any::<u8>(), any::<u32>(), any::<u32>()).prop_map(
                |(gid, sgid_index, remote_qpn, flow_label)| UdDest {
                    ah: AddressHandle {
                        dgid: Gid(gid),
                        sgid_index,
                        hop_limit: 64,
                        traffic_class: 3,
                        flow_label,
                        dmac: EthernetAddress([0; 6]),
                    },
                    remote_qpn,
                    remote_qkey: 0x1111,
                },
            ),
        )
    }

    proptest! {
        #[test]
        fn a_send_slot_carries_every_work_request(
            wr_id in any::<u64>(),
            op in op(),
            sgl in proptest::collection::vec(sge(), 0..4),
            inline in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
            ud in ud(),
            xrc_srqn in proptest::option::of(0..1u32 << 24),
        ) {
            let mut flags = SendFlags::SIGNALED | SendFlags::FENCE;
            flags.set(SendFlags::INLINE, inline.is_some());
            let wr = SendWr { wr_id, op, sgl, flags, ud, xrc_srqn };
            let mut slot = vec![0u8; send_slot_size(&QpCap::new(1, 4, 64)) as usize];
            let n = encode_send(&wr, inline.as_deref(), &mut slot).unwrap();
            let (back, bytes) = decode_send(&slot[..n], Vec::new()).unwrap();
            // Only operations that send data carry inline bytes.
            prop_assert_eq!(bytes, inline.filter(|_| wr.op.sends_data()));
            prop_assert_eq!(back, wr);
        }

        #[test]
        fn a_receive_slot_carries_every_work_request(
            wr_id in any::<u64>(),
            sgl in proptest::collection::vec(sge(), 0..8),
        ) {
            let wr = RecvWr { wr_id, sgl };
            let mut slot = vec![0u8; recv_slot_size(8) as usize];
            let n = encode_recv(&wr, &mut slot).unwrap();
            prop_assert_eq!(decode_recv(&slot[..n], Vec::new()), Some(wr));
        }

        #[test]
        fn garbage_decodes_to_nothing_or_something_bounded(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Some((wr, inline)) = decode_send(&bytes, Vec::new()) {
                prop_assert!(wr.sgl.len() * SGE + inline.map_or(0, |i| i.len()) <= bytes.len());
            }
            if let Some(wr) = decode_recv(&bytes, Vec::new()) {
                prop_assert!(wr.sgl.len() * SGE <= bytes.len());
            }
            let _ = decode_wc(&bytes);
        }
    }

    #[test]
    fn a_completion_slot_carries_every_completion() {
        let mut wc = Wc::new(7, WcStatus::RnrRetryExcErr, WcOpcode::RecvRdmaWithImm, 0x12);
        wc.byte_len = 4096;
        wc.imm_data = 0xdead_beef;
        wc.src_qp = 0x34;
        wc.wc_flags = WcFlags::GRH | WcFlags::WITH_IMM;
        wc.solicited = true;
        wc.sl = softrnic_emu_core::SL_ROCE_V2_IPV6;
        let slot = encode_wc(&wc);
        assert_eq!(decode_wc(slot.as_bytes()), Some(wc));
        let bad = CqeSlot { status: 3, ..slot };
        assert_eq!(decode_wc(bad.as_bytes()), None, "3 is no ibv_wc_status");
    }

    #[test]
    fn a_slot_too_small_is_refused() {
        let wr = RecvWr {
            wr_id: 1,
            sgl: vec![Sge::default(); 2],
        };
        let mut slot = vec![0u8; recv_slot_size(1) as usize];
        assert_eq!(encode_recv(&wr, &mut slot), None);
        slot.resize(recv_slot_size(2) as usize, 0);
        let n = encode_recv(&wr, &mut slot).unwrap();
        assert_eq!(
            decode_recv(&slot[..n - 1], Vec::new()),
            None,
            "an SGE cut short"
        );
    }
}
