//! The XDP program and the bpf(2) calls that load and attach it, with no libbpf: the program is
//! assembled here, and the link detaches by itself when the process dies (BPF_LINK_CREATE;
//! a netlink attachment would outlive a killed process).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use softrnic_wire::ROCEV2_UDP_PORT;

// bpf(2) commands.
const BPF_MAP_CREATE: i64 = 0;
const BPF_MAP_UPDATE_ELEM: i64 = 2;
const BPF_PROG_LOAD: i64 = 5;
const BPF_LINK_CREATE: i64 = 28;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_PSEUDO_MAP_FD: u8 = 1;
/// The program handles frames in several buffers (only the first is in `data..data_end`), so
/// it may run on interfaces whose MTU exceeds a page (BPF_F_XDP_HAS_FRAGS).
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
const HELPER_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;

/// Where the program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Generic XDP, in the kernel's receive path: works on every interface.
    Skb,
    /// Native XDP, in the driver.
    Drv,
}

impl Mode {
    fn flags(self) -> u32 {
        match self {
            Mode::Skb => 1 << 1, // XDP_FLAGS_SKB_MODE
            Mode::Drv => 1 << 2, // XDP_FLAGS_DRV_MODE
        }
    }
}

/// One eBPF instruction: opcode, registers (dst low nibble, src high), offset, immediate.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | src << 4,
        off,
        imm,
    }
}

const LDXW: u8 = 0x61; // dst = *(u32 *)(src + off)
const LDXH: u8 = 0x69; // dst = *(u16 *)(src + off)
const LDXB: u8 = 0x71; // dst = *(u8 *)(src + off)
const MOV_X: u8 = 0xbf; // dst = src
const MOV_K: u8 = 0xb7; // dst = imm
const ADD_K: u8 = 0x07; // dst += imm
const JGT_X: u8 = 0x2d; // if dst > src goto +off
const JEQ_K: u8 = 0x15; // if dst == imm goto +off
const JNE_K: u8 = 0x55; // if dst != imm goto +off
const JSET_K: u8 = 0x45; // if dst & imm goto +off
const JA: u8 = 0x05; // goto +off
const LD_DW: u8 = 0x18; // dst = imm64 (two slots)
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;

/// Big-endian 16-bit constants as a little-endian load sees them.
const fn be16(v: u16) -> i32 {
    v.swap_bytes() as i32
}

/// The program: UDP 4791 over IPv4 (20-byte header, not a fragment) or IPv6 (UDP next) goes
/// to the XSKMAP entry of the receiving queue; everything else (ARP, ND, other traffic) passes
/// to the kernel. `map_fd` fills the map load.
fn program(map_fd: i32) -> Vec<Insn> {
    const PASS: i16 = 30;
    let to = |from: i16, target: i16| target - from - 1;
    vec![
        insn(LDXW, 2, 1, 0, 0),                                 // 0: r2 = data
        insn(LDXW, 3, 1, 4, 0),                                 // 1: r3 = data_end
        insn(MOV_X, 4, 2, 0, 0),                                // 2
        insn(ADD_K, 4, 0, 0, 42),                               // 3: Ethernet + IPv4 + UDP
        insn(JGT_X, 4, 3, to(4, PASS), 0),                      // 4: too short
        insn(LDXH, 5, 2, 12, 0),                                // 5: EtherType
        insn(JEQ_K, 5, 0, to(6, 17), be16(0x86dd)),             // 6: IPv6
        insn(JNE_K, 5, 0, to(7, PASS), be16(0x0800)),           // 7: not IPv4
        insn(LDXB, 5, 2, 14, 0),                                // 8: version and IHL
        insn(JNE_K, 5, 0, to(9, PASS), 0x45),                   // 9: options: kernel
        insn(LDXB, 5, 2, 23, 0),                                // 10: protocol
        insn(JNE_K, 5, 0, to(11, PASS), 17),                    // 11: not UDP
        insn(LDXH, 5, 2, 20, 0),                                // 12: flags, fragment offset
        insn(JSET_K, 5, 0, to(13, PASS), be16(0x3fff)),         // 13: a fragment
        insn(LDXH, 5, 2, 36, 0),                                // 14: UDP destination port
        insn(JNE_K, 5, 0, to(15, PASS), be16(ROCEV2_UDP_PORT)), // 15
        insn(JA, 0, 0, to(16, 24), 0),                          // 16: redirect
        insn(MOV_X, 4, 2, 0, 0),                                // 17: IPv6
        insn(ADD_K, 4, 0, 0, 62),                               // 18: Ethernet + IPv6 + UDP
        insn(JGT_X, 4, 3, to(19, PASS), 0),                     // 19
        insn(LDXB, 5, 2, 20, 0),                                // 20: next header
        insn(JNE_K, 5, 0, to(21, PASS), 17),                    // 21
        insn(LDXH, 5, 2, 56, 0),                                // 22: UDP destination port
        insn(JNE_K, 5, 0, to(23, PASS), be16(ROCEV2_UDP_PORT)), // 23
        insn(LDXW, 2, 1, 16, 0),                                // 24: key = rx_queue_index
        insn(LD_DW, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),           // 25: r1 = the XSKMAP
        insn(0, 0, 0, 0, 0),                                    // 26
        insn(MOV_K, 3, 0, 0, XDP_PASS),                         // 27: no socket: pass
        insn(CALL, 0, 0, 0, HELPER_REDIRECT_MAP),               // 28
        insn(EXIT, 0, 0, 0, 0),                                 // 29
        insn(MOV_K, 0, 0, 0, XDP_PASS),                         // 30: pass
        insn(EXIT, 0, 0, 0, 0),                                 // 31
    ]
}

/// A bpf_attr: a zeroed 128-byte union with fields written at their offsets.
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(mut self, at: usize, v: u32) -> Attr {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, at: usize, v: u64) -> Attr {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

fn bpf(cmd: i64, attr: &mut Attr) -> io::Result<i32> {
    // SAFETY: `attr` is a 128-byte buffer that outlives the call; pointers inside it point to
    // buffers the caller keeps alive across the call.
    let ret = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), attr.0.len()) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as i32)
    }
}

fn owned(fd: i32) -> OwnedFd {
    // SAFETY: `fd` is a fresh descriptor the kernel just returned to us alone.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// An XSKMAP with `entries` slots (one per receive queue).
pub fn xskmap(entries: u32) -> io::Result<OwnedFd> {
    let mut attr = Attr::new()
        .u32(0, BPF_MAP_TYPE_XSKMAP)
        .u32(4, 4)
        .u32(8, 4)
        .u32(12, entries);
    bpf(BPF_MAP_CREATE, &mut attr).map(owned)
}

/// Puts socket `xsk` at `queue` in the XSKMAP.
pub fn map_set(map: &OwnedFd, queue: u32, xsk: i32) -> io::Result<()> {
    let (key, value) = (queue, xsk as u32);
    let mut attr = Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, (&raw const key) as u64)
        .u64(16, (&raw const value) as u64);
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
}

/// Loads the program for `map`. The verifier's log comes back in the error if it refuses.
pub fn load(map: &OwnedFd) -> io::Result<OwnedFd> {
    let prog = program(map.as_raw_fd());
    let license = c"Dual MIT/GPL";
    let mut log = vec![0u8; 64 * 1024];
    let mut attr = Attr::new()
        .u32(0, BPF_PROG_TYPE_XDP)
        .u32(4, prog.len() as u32)
        .u64(8, prog.as_ptr() as u64)
        .u64(16, license.as_ptr() as u64)
        .u32(24, 1)
        .u32(28, log.len() as u32)
        .u64(32, log.as_mut_ptr() as u64)
        .u32(44, BPF_F_XDP_HAS_FRAGS)
        .u32(68, BPF_XDP);
    bpf(BPF_PROG_LOAD, &mut attr).map(owned).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]);
        io::Error::new(e.kind(), format!("loading the XDP program: {e}\n{text}"))
    })
}

/// Attaches the program to interface `ifindex` in `mode`; detached when the link is closed.
pub fn attach(prog: &OwnedFd, ifindex: u32, mode: Mode) -> io::Result<OwnedFd> {
    let mut attr = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, BPF_XDP)
        .u32(12, mode.flags());
    bpf(BPF_LINK_CREATE, &mut attr).map(owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_targets() {
        let p = program(3);
        assert_eq!(p.len(), 32);
        for (i, ins) in p.iter().enumerate() {
            if matches!(ins.code, JGT_X | JEQ_K | JNE_K | JSET_K | JA) {
                let target = i as i64 + 1 + ins.off as i64;
                assert!([17, 24, 30].contains(&target), "insn {i} jumps to {target}");
            }
        }
        assert_eq!(p[25].imm, 3);
        assert_eq!(be16(4791), 0xb712);
    }
}
