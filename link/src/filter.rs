//! The classic BPF program that lets only RoCEv2 frames reach the packet socket: a whole
//! IPv4 datagram without options (what the wire parser accepts) or IPv6, carrying UDP to port
//! 4791. ARP, ND and all other traffic stay with the kernel.

use libc::sock_filter;

const LDH_ABS: u16 = 0x28; // BPF_LD | BPF_H | BPF_ABS
const LDB_ABS: u16 = 0x30; // BPF_LD | BPF_B | BPF_ABS
const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JSET: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET: u16 = 0x06; // BPF_RET | BPF_K

const PORT: u32 = softrnic_wire::ROCEV2_UDP_PORT as u32;

const fn op(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Accepts RoCEv2 frames (whole, up to 256 KiB) and drops everything else.
pub const ROCE_ONLY: [sock_filter; 17] = [
    op(LDH_ABS, 0, 0, 12),          // 0: EtherType
    op(JEQ, 9, 0, 0x86dd),          // 1: IPv6 -> 11
    op(JEQ, 0, 13, 0x0800),         // 2: not IPv4 -> reject
    op(LDB_ABS, 0, 0, 14),          // 3: IPv4 version and header length
    op(JEQ, 0, 11, 0x45),           // 4: options (or not version 4) -> reject
    op(LDB_ABS, 0, 0, 14 + 9),      // 5: IPv4 protocol
    op(JEQ, 0, 9, 17),              // 6: not UDP -> reject
    op(LDH_ABS, 0, 0, 14 + 6),      // 7: flags and fragment offset
    op(JSET, 7, 0, 0x3fff),         // 8: more fragments, or an offset -> reject
    op(LDH_ABS, 0, 0, 14 + 20 + 2), // 9: UDP destination port
    op(JEQ, 4, 5, PORT),            // 10: RoCEv2 -> accept, else reject
    op(LDB_ABS, 0, 0, 14 + 6),      // 11: IPv6 next header
    op(JEQ, 0, 3, 17),              // 12: not UDP -> reject
    op(LDH_ABS, 0, 0, 14 + 40 + 2), // 13: UDP destination port
    op(JEQ, 0, 1, PORT),            // 14: RoCEv2 -> accept, else reject
    op(RET, 0, 0, 0x4_0000),        // 15: accept
    op(RET, 0, 0, 0),               // 16: reject
];

/// Drops everything: for the UDP socket that only holds port 4791 open.
pub const DROP_ALL: [sock_filter; 1] = [op(RET, 0, 0, 0)];

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_wire::Opcode;
    use softrnic_wire::sample::{self, Ip};

    /// A tiny classic BPF interpreter for the instructions above.
    fn run(prog: &[sock_filter], pkt: &[u8]) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        let byte = |i: usize| pkt.get(i).copied().map(u32::from);
        let half = |i: usize| Some(byte(i)? << 8 | byte(i + 1)?);
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                LDH_ABS => match half(i.k as usize) {
                    Some(v) => a = v,
                    None => return 0,
                },
                LDB_ABS => match byte(i.k as usize) {
                    Some(v) => a = v,
                    None => return 0,
                },
                JEQ => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                JSET => pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf }),
                RET => return i.k,
                c => panic!("unknown opcode {c:#x}"),
            }
        }
    }

    #[test]
    fn accepts_roce_over_both_ip_versions_and_nothing_else() {
        for ip in [Ip::V4, Ip::V6] {
            let frame = sample::example(Opcode::RcSendOnly, ip, 1, 16).frame();
            assert_eq!(run(&ROCE_ONLY, &frame), 0x4_0000, "{ip:?}");
            // Another UDP port.
            let mut other = frame.clone();
            let port_at = if ip == Ip::V4 {
                14 + 20 + 2
            } else {
                14 + 40 + 2
            };
            other[port_at + 1] ^= 1;
            assert_eq!(run(&ROCE_ONLY, &other), 0);
            // Not UDP.
            let mut tcp = frame.clone();
            tcp[if ip == Ip::V4 { 23 } else { 20 }] = 6;
            assert_eq!(run(&ROCE_ONLY, &tcp), 0);
        }
        // ARP, and an IPv4 fragment.
        let mut arp = sample::example(Opcode::RcSendOnly, Ip::V4, 1, 16).frame();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(run(&ROCE_ONLY, &arp), 0);
        let v4 = sample::example(Opcode::RcSendOnly, Ip::V4, 1, 16).frame();
        // A later fragment (offset 8), and a first one (More Fragments set).
        for (at, bits) in [(21, 1), (20, 0x20)] {
            let mut frag = v4.clone();
            frag[at] |= bits;
            assert_eq!(run(&ROCE_ONLY, &frag), 0, "{at} {bits:#x}");
        }
        // IPv4 with options: the wire parser refuses it, so the kernel keeps it.
        let mut options = v4.clone();
        options[14] = 0x46;
        assert_eq!(run(&ROCE_ONLY, &options), 0);
        assert_eq!(run(&ROCE_ONLY, &[0; 10]), 0);
        assert_eq!(run(&DROP_ALL, &arp), 0);
    }
}
