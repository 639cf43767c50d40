//! Example frames for every opcode: the shipped sample capture, the docs and the independent
//! checks are made from these. Two hosts, A (198.18.0.1, QP 0x11) and B (198.18.0.2, QP 0x12);
//! requests go from A to B and responses come back.

use crate::aeth::{AethRepr, CreditCount, NakCode, RnrTimer, Syndrome};
use crate::atomic::{AtomicAckEthRepr, AtomicEthRepr};
use crate::deth::DethRepr;
use crate::feth::{FethRepr, FlushLevel, FlushPlacement};
use crate::frame::{EthRepr, ExtRepr, FrameRepr, IpRepr, UdpChecksum, UdpRepr};
use crate::opcode::{Headers, Operation, TABLE};
use crate::reth::RethRepr;
use crate::{BthRepr, EthernetAddress, Ipv4Address, Ipv6Address, Opcode, VlanTag, cm, mad};

/// One example frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// What it shows.
    pub name: String,
    /// Its headers.
    pub repr: FrameRepr,
    /// Its payload.
    pub payload: Vec<u8>,
}

impl Sample {
    /// The frame's bytes.
    pub fn frame(&self) -> Vec<u8> {
        let mut buf = vec![0; self.repr.frame_len(self.payload.len())];
        // The samples are built to be valid, so this cannot fail.
        let n = self
            .repr
            .emit(&self.payload, &mut buf)
            .expect("sample frames are valid");
        buf.truncate(n);
        buf
    }
}

/// Which IP version a sample uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ip {
    /// IPv4: 198.18.0.1 and 198.18.0.2.
    V4,
    /// IPv6: fd00:5e::1 and fd00:5e::2 (unique local), with a flow label.
    V6,
}

const MAC_A: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x00, 0x01]);
const MAC_B: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x00, 0x02]);
const QP_A: u32 = 0x11;
const QP_B: u32 = 0x12;
/// The R_Key of B's buffer in the samples.
pub const RKEY: u32 = 0x0000_1207;
/// The address of B's buffer in the samples.
pub const VA: u64 = 0x0000_7f3a_2c00_1000;

fn ip(version: Ip, from_a: bool) -> IpRepr {
    let (a4, b4) = (
        Ipv4Address::new(198, 18, 0, 1),
        Ipv4Address::new(198, 18, 0, 2),
    );
    let (a6, b6) = (
        Ipv6Address::new(0xfd00, 0x5e, 0, 0, 0, 0, 0, 1),
        Ipv6Address::new(0xfd00, 0x5e, 0, 0, 0, 0, 0, 2),
    );
    let (src4, dst4, src6, dst6) = if from_a {
        (a4, b4, a6, b6)
    } else {
        (b4, a4, b6, a6)
    };
    match version {
        Ip::V4 => IpRepr::V4 {
            src: src4,
            dst: dst4,
            dscp: 26,
            ecn: 2,
            ttl: 64,
        },
        Ip::V6 => IpRepr::V6 {
            src: src6,
            dst: dst6,
            dscp: 26,
            ecn: 2,
            flow_label: 0x1_2345,
            hop_limit: 64,
        },
    }
}

/// A frame of `opcode` with plausible fields: the given PSN, and a payload of `payload_len`
/// bytes if the opcode allows one (an ATOMIC WRITE's is always 8).
pub fn example(opcode: Opcode, version: Ip, psn: u32, payload_len: usize) -> Sample {
    let info = opcode.info();
    let payload_len = if info.operation == Operation::AtomicWrite {
        8
    } else {
        payload_len
    };
    let from_a = !info.operation.is_response();
    let (src_mac, dst_mac, dest_qp) = if from_a {
        (MAC_A, MAC_B, QP_B)
    } else {
        (MAC_B, MAC_A, QP_A)
    };
    let h = info.headers;
    let has = |x| h.contains(x);
    let ext = ExtRepr {
        xrceth: has(Headers::XRCETH).then_some(0x00_0042),
        deth: has(Headers::DETH).then_some(DethRepr {
            qkey: 0x1111_1111,
            src_qp: QP_A,
        }),
        feth: has(Headers::FETH).then_some(FethRepr {
            placement: FlushPlacement::GLOBAL,
            level: FlushLevel::Range,
        }),
        reth: has(Headers::RETH).then_some(RethRepr {
            va: VA,
            rkey: RKEY,
            dma_len: if matches!(
                info.operation,
                Operation::RdmaReadRequest | Operation::Flush
            ) {
                4096
            } else {
                payload_len as u32
            },
        }),
        atomic_eth: has(Headers::ATOMIC_ETH).then_some(AtomicEthRepr {
            va: VA + 0x40,
            rkey: RKEY,
            swap_add: if opcode == Opcode::RcFetchAdd {
                1
            } else {
                0xcafe
            },
            compare: if opcode == Opcode::RcFetchAdd { 0 } else { 41 },
        }),
        aeth: has(Headers::AETH).then_some(AethRepr {
            syndrome: Syndrome::Ack(CreditCount::INVALID),
            msn: 1,
        }),
        atomic_ack_eth: has(Headers::ATOMIC_ACK_ETH).then_some(AtomicAckEthRepr { orig: 41 }),
        immdt: has(Headers::IMMDT).then_some(0x1234_5678),
        ieth: has(Headers::IETH).then_some(0x0000_0a07),
    };
    let last = matches!(info.position, crate::Position::Last | crate::Position::Only);
    let bth = if opcode == Opcode::Cnp {
        BthRepr::cnp(dest_qp, 0xffff)
    } else {
        BthRepr {
            opcode,
            solicited: last && info.operation == Operation::Send,
            mig_req: true,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: last
                && !info.operation.is_response()
                && matches!(info.transport, crate::Transport::Rc | crate::Transport::Xrc),
            psn,
        }
    };
    let payload = if info.allows_payload() {
        (0..payload_len)
            .map(|i| b"RoCEv2 on a plain NIC. "[i % 23])
            .collect()
    } else {
        Vec::new()
    };
    let checksum = match version {
        Ip::V4 => UdpChecksum::Zero,
        Ip::V6 => UdpChecksum::Computed,
    };
    let suffix = match version {
        Ip::V4 => "IPv4",
        Ip::V6 => "IPv6",
    };
    Sample {
        name: format!("{} over {suffix}", info.name),
        repr: FrameRepr {
            eth: EthRepr {
                dst: dst_mac,
                src: src_mac,
                vlan: None,
            },
            ip: ip(version, from_a),
            udp: UdpRepr {
                src_port: entropy(if from_a { QP_A } else { QP_B }),
                checksum,
            },
            bth,
            ext,
        },
        payload,
    }
}

/// One frame of every opcode, in opcode order, with payload lengths that exercise every pad
/// count.
pub fn every_opcode(version: Ip) -> Vec<Sample> {
    TABLE
        .iter()
        .enumerate()
        .map(|(i, info)| example(info.opcode, version, 0x100 + i as u32, 13 + i))
        .collect()
}

/// The path MTU of the sample conversations: FIRST and MIDDLE packets carry this much.
pub const SAMPLE_MTU: usize = 256;

/// A's requests to B on one QP pair and B's answers, numbered as the two ends number them: A's
/// PSNs one after another (a READ takes one per response packet, IBA 9.7.2), B's MSN one more
/// for each message it completes, each response at the PSN of the request it answers.
struct Talk {
    version: Ip,
    /// RC opcodes become this transport's by adding its base (UC 0x20, XRC 0xa0).
    base: u8,
    a_qp: u32,
    b_qp: u32,
    psn: u32,
    msn: u32,
    frames: Vec<Sample>,
    /// Whether a frame keeps its opcode's plain name where no frame before it has it (the
    /// main conversations), or always says its context (the examples after them).
    plain: bool,
}

impl Talk {
    fn new(version: Ip, base: u8, (a_qp, b_qp): (u32, u32), psn: u32) -> Talk {
        Talk {
            version,
            base,
            a_qp,
            b_qp,
            psn,
            msn: 0,
            frames: Vec::new(),
            plain: true,
        }
    }

    fn opcode(&self, rc: Opcode) -> Opcode {
        Opcode::from_u8(rc as u8 + self.base).expect("the transport has the opcode")
    }

    /// A frame of `rc`'s opcode in this transport at `psn`, between this pair's QPs; `context`
    /// names it when its opcode's plain name is taken.
    fn frame(&self, rc: Opcode, psn: u32, len: usize, context: &str) -> Sample {
        let mut s = example(self.opcode(rc), self.version, psn, len);
        let to_b = !rc.info().operation.is_response();
        s.repr.bth.dest_qp = if to_b { self.b_qp } else { self.a_qp };
        s.repr.udp.src_port = entropy(if to_b { self.a_qp } else { self.b_qp });
        if let Some(d) = s.repr.ext.deth.as_mut() {
            d.src_qp = self.a_qp;
        }
        if let Some(x) = s.repr.ext.xrceth.as_mut() {
            *x = self.b_qp;
        }
        let taken = !self.plain || self.frames.iter().any(|f| f.name == s.name);
        if !context.is_empty() && taken {
            s.name = format!("{}, {context}", s.name);
        }
        s
    }

    /// A message of `last_len` bytes after a full packet for each opcode before the last:
    /// FIRST, MIDDLE... LAST, or one ONLY.
    fn message(&mut self, rc: &[Opcode], last_len: usize, context: &str) {
        let total = (rc.len() - 1) * SAMPLE_MTU + last_len;
        for (i, &op) in rc.iter().enumerate() {
            let len = if i + 1 == rc.len() {
                last_len
            } else {
                SAMPLE_MTU
            };
            let mut s = self.frame(op, self.psn, len, context);
            if let Some(r) = s.repr.ext.reth.as_mut() {
                r.dma_len = total as u32;
            }
            self.frames.push(s);
            self.psn = (self.psn + 1) & 0xff_ffff;
        }
        self.msn += 1;
    }

    /// The four SENDs, their last packets of `lens` bytes: of three packets, of two with
    /// immediate data, of one, of one with immediate data.
    fn sends(&mut self, lens: [usize; 4]) {
        use Opcode::*;
        self.message(&[RcSendFirst, RcSendMiddle, RcSendLast], lens[0], "");
        self.message(
            &[RcSendFirst, RcSendLastImm],
            lens[1],
            "of a SEND with immediate",
        );
        self.message(&[RcSendOnly], lens[2], "");
        self.message(&[RcSendOnlyImm], lens[3], "");
    }

    /// The same four shapes of RDMA WRITE.
    fn writes(&mut self, lens: [usize; 4]) {
        use Opcode::*;
        self.message(&[RcWriteFirst, RcWriteMiddle, RcWriteLast], lens[0], "");
        self.message(
            &[RcWriteFirst, RcWriteLastImm],
            lens[1],
            "of a WRITE with immediate",
        );
        self.message(&[RcWriteOnly], lens[2], "");
        self.message(&[RcWriteOnlyImm], lens[3], "");
    }

    /// B's ACK of everything so far: the PSN of the last packet it acknowledges, and its MSN.
    fn ack(&mut self, context: &str) {
        let last = self.psn.wrapping_sub(1) & 0xff_ffff;
        let mut s = self.frame(Opcode::RcAcknowledge, last, 0, context);
        set_aeth(&mut s, Syndrome::Ack(CreditCount::INVALID), self.msn);
        self.frames.push(s);
    }

    /// A READ of `len` bytes and B's responses, one per path MTU at the PSNs it took.
    fn read(&mut self, len: usize, context: &str) {
        let mut req = self.frame(Opcode::RcReadRequest, self.psn, 0, context);
        if let Some(r) = req.repr.ext.reth.as_mut() {
            r.dma_len = len as u32;
        }
        self.frames.push(req);
        self.msn += 1;
        let n = len.div_ceil(SAMPLE_MTU).max(1);
        for i in 0..n {
            let op = match (i, n) {
                (_, 1) => Opcode::RcReadResponseOnly,
                (0, _) => Opcode::RcReadResponseFirst,
                (i, n) if i + 1 == n => Opcode::RcReadResponseLast,
                _ => Opcode::RcReadResponseMiddle,
            };
            let part = if i + 1 == n {
                len - i * SAMPLE_MTU
            } else {
                SAMPLE_MTU
            };
            let mut s = self.frame(op, (self.psn + i as u32) & 0xff_ffff, part, context);
            set_aeth(&mut s, Syndrome::Ack(CreditCount::INVALID), self.msn);
            self.frames.push(s);
        }
        self.psn = (self.psn + n as u32) & 0xff_ffff;
    }

    /// A request of one packet without payload (an atomic, a FLUSH) or with its own (ATOMIC
    /// WRITE), and B's `answer` at its PSN.
    fn request(&mut self, rc: Opcode, answer: Opcode, orig: u64, context: &str) -> &mut Sample {
        let s = self.frame(rc, self.psn, 0, context);
        self.frames.push(s);
        self.msn += 1;
        let mut r = self.frame(answer, self.psn, 0, context);
        set_aeth(&mut r, Syndrome::Ack(CreditCount::INVALID), self.msn);
        if let Some(a) = r.repr.ext.atomic_ack_eth.as_mut() {
            a.orig = orig;
        }
        self.frames.push(r);
        self.psn = (self.psn + 1) & 0xff_ffff;
        let n = self.frames.len();
        &mut self.frames[n - 2]
    }
}

/// The UDP source port a sender picks for QP `qp`: RoCEv2's per-QP entropy (Annex A17.5.1.1).
fn entropy(qp: u32) -> u16 {
    0xc000 | ((qp as u16).wrapping_mul(0x9e3) & 0x3fff)
}

fn set_aeth(s: &mut Sample, syndrome: Syndrome, msn: u32) {
    if let Some(a) = s.repr.ext.aeth.as_mut() {
        a.syndrome = syndrome;
        a.msn = msn;
    }
}

/// Every RC operation on one QP pair, as a real conversation: SENDs and WRITEs of one and of
/// several packets (coalesced ACKs), READs of one and of three packets, a COMPARE_SWAP and the
/// FETCH_ADD that sees what it stored, SENDs with invalidate, a FLUSH and an ATOMIC WRITE.
fn rc_talk(version: Ip) -> Vec<Sample> {
    use Opcode::*;
    let mut t = Talk::new(version, 0, (QP_A, QP_B), 0x100);
    t.sends([88, 16, 17, 18]);
    t.ack("");
    t.writes([21, 22, 23, 24]);
    t.ack("of the WRITEs");
    t.read(29, "");
    t.read(600, "of 600 bytes");
    // The swap sees 41 and stores 0xcafe; the add then sees 0xcafe.
    t.request(RcCompareSwap, RcAtomicAcknowledge, 41, "");
    t.request(RcFetchAdd, RcAtomicAcknowledge, 0xcafe, "of the FETCH_ADD");
    t.message(
        &[RcSendFirst, RcSendLastInv],
        34,
        "of a SEND with invalidate",
    );
    t.message(&[RcSendOnlyInv], 35, "");
    t.ack("of the SENDs with invalidate");
    // IBA 1.5: both are answered by a READ RESPONSE ONLY without data.
    t.request(RcFlush, RcReadResponseOnly, 0, "");
    if let Some(last) = t.frames.last_mut() {
        last.name = format!("{}, of the FLUSH", last.name.trim_end_matches(", "));
    }
    t.request(RcAtomicWrite, RcReadResponseOnly, 0, "");
    if let Some(last) = t.frames.last_mut() {
        last.name = format!("{}, of the ATOMIC WRITE", last.name);
    }
    t.frames
}

/// UC on its own QP pair: the same SENDs and WRITEs, unacknowledged.
fn uc_talk(version: Ip) -> Vec<Sample> {
    let mut t = Talk::new(version, 0x20, (0x21, 0x22), 0x200);
    t.sends([40, 41, 42, 43]);
    t.writes([44, 45, 46, 47]);
    t.frames
}

/// XRC from A's initiator QP to B's target QP, each request naming B's SRQ 0x42.
fn xrc_talk(version: Ip) -> Vec<Sample> {
    use Opcode::*;
    let mut t = Talk::new(version, 0xa0, (0x41, 0x42), 0x400);
    t.sends([50, 51, 52, 53]);
    t.writes([54, 55, 56, 57]);
    t.message(
        &[RcSendFirst, RcSendLastInv],
        58,
        "of a SEND with invalidate",
    );
    t.message(&[RcSendOnlyInv], 59, "");
    t.ack("");
    t.read(61, "");
    t.read(600, "of 600 bytes");
    t.request(RcCompareSwap, RcAtomicAcknowledge, 41, "");
    t.request(RcFetchAdd, RcAtomicAcknowledge, 0xcafe, "of the FETCH_ADD");
    for s in &mut t.frames {
        if let Some(x) = s.repr.ext.xrceth.as_mut() {
            *x = 0x42;
        }
    }
    t.frames
}

/// UD datagrams from A's QP 0x31 to B's 0x32: each carries its Q_Key and its sender's QP.
fn ud_talk(version: Ip) -> Vec<Sample> {
    [(Opcode::UdSendOnly, 62), (Opcode::UdSendOnlyImm, 63)]
        .into_iter()
        .enumerate()
        .map(|(i, (op, len))| {
            let mut s = example(op, version, 0x600 + i as u32, len);
            s.repr.bth.dest_qp = 0x32;
            s.repr.udp.src_port = entropy(0x31);
            if let Some(d) = s.repr.ext.deth.as_mut() {
                d.src_qp = 0x31;
            }
            s
        })
        .collect()
}

/// Every opcode over one IP version, as the conversations of four QP pairs.
fn conversations(version: Ip) -> Vec<Sample> {
    let mut frames = rc_talk(version);
    frames.extend(uc_talk(version));
    frames.extend(ud_talk(version));
    frames.extend(xrc_talk(version));
    frames
}

/// The NAKs, each on a QP pair of its own (a NAK other than a sequence error ends its QP's
/// connection): what B answers and why, at the PSN the rule gives.
fn naks() -> Vec<Sample> {
    use Opcode::*;
    let mut frames = Vec::new();
    let nak = |t: &Talk, psn: u32, syndrome: Syndrome, what: &str| {
        let mut s = t.frame(RcAcknowledge, psn, 0, "");
        set_aeth(&mut s, syndrome, t.msn);
        s.name = format!("RC_ACKNOWLEDGE over IPv4, {what}");
        s
    };
    // A sequence error: 0x300 was lost, so B sees 0x301 first and NAKs with the PSN it expected
    // (9.7.5.1.1); A goes back to 0x300 and sends both again.
    let mut t = Talk::new(Ip::V4, 0, (0x51, 0x52), 0x300);
    t.plain = false;
    let second = t.frame(RcSendOnly, 0x301, 8, "the one after a lost packet");
    t.frames.push(second);
    let n = nak(
        &t,
        0x300,
        Syndrome::Nak(NakCode::PsnSequenceError),
        "NAK: PSN sequence error",
    );
    t.frames.push(n);
    t.message(&[RcSendOnly], 8, "the lost one, sent again");
    t.message(&[RcSendOnly], 8, "the one after it, sent again");
    t.ack("after the NAK");
    frames.extend(t.frames);
    // Errors that end the connection: the NAK carries the PSN of the request that failed.
    for (qps, op, len, context, code, what) in [
        (
            (0x53, 0x54),
            RcWriteOnly,
            300,
            "longer than the path MTU",
            NakCode::InvalidRequest,
            "NAK: invalid request",
        ),
        (
            (0x55, 0x56),
            RcWriteOnly,
            8,
            "with an R_Key B does not have",
            NakCode::RemoteAccessError,
            "NAK: remote access error",
        ),
        (
            (0x57, 0x58),
            RcSendOnly,
            8,
            "that B failed to complete",
            NakCode::RemoteOperationalError,
            "NAK: remote operational error",
        ),
        (
            (0x59, 0x5a),
            RcSendOnly,
            8,
            "answered with the RD code",
            NakCode::InvalidRdRequest,
            "NAK: invalid RD request",
        ),
    ] {
        let mut t = Talk::new(Ip::V4, 0, qps, 0x300);
        t.plain = false;
        let mut s = t.frame(op, t.psn, len, context);
        if code == NakCode::RemoteAccessError
            && let Some(r) = s.repr.ext.reth.as_mut()
        {
            r.rkey = 0x0000_dead;
        }
        t.frames.push(s);
        let n = nak(&t, t.psn, Syndrome::Nak(code), what);
        t.frames.push(n);
        frames.extend(t.frames);
    }
    // Receiver not ready: B has no receive buffer, so A waits the RNR timer and sends again.
    let mut t = Talk::new(Ip::V4, 0, (0x5b, 0x5c), 0x300);
    t.plain = false;
    t.frames
        .push(t.frame(RcSendOnly, 0x300, 8, "before B posted a receive buffer"));
    let n = nak(
        &t,
        0x300,
        Syndrome::RnrNak(RnrTimer::from_code(14)),
        "RNR NAK, 1.28 ms",
    );
    t.frames.push(n);
    t.message(&[RcSendOnly], 8, "sent again after the RNR timer");
    let n = nak(
        &t,
        0x300,
        Syndrome::Ack(CreditCount::for_credits(64)),
        "ACK with 64 credits",
    );
    t.frames.push(n);
    frames.extend(t.frames);
    frames
}

/// A SEND a congested switch marked CE on its way from A to B, B's ACK, and the CNP B then
/// sends to A's QP: Annex A17.9.3, the receiver of the marked packet tells its sender. The
/// switch marks only the IP header's ECN bits; the BTH's FECN is InfiniBand's own congestion
/// control, which RoCEv2 does not use.
fn congestion(version: Ip, psn: u32, msn: u32) -> Vec<Sample> {
    let mut t = Talk::new(version, 0, (QP_A, QP_B), psn);
    (t.msn, t.plain) = (msn, false);
    t.message(&[Opcode::RcSendOnly], 8, "ECN CE (congestion experienced)");
    if let Some(marked) = t.frames.last_mut() {
        match &mut marked.repr.ip {
            IpRepr::V4 { ecn, .. } | IpRepr::V6 { ecn, .. } => *ecn = 3,
        }
    }
    t.ack("of the marked SEND");
    let mut cnp = example(Opcode::Cnp, version, 0, 0);
    cnp.repr.ip = ip(version, false);
    cnp.repr.eth = EthRepr {
        dst: MAC_A,
        src: MAC_B,
        vlan: None,
    };
    cnp.repr.bth = BthRepr::cnp(QP_A, 0xffff);
    cnp.repr.udp.src_port = entropy(QP_B);
    t.frames.push(cnp);
    t.frames
}

/// The shipped sample capture: every opcode over IPv4 and IPv6 as the conversations of real QP
/// pairs, the NAKs and an RNR NAK in context, a VLAN-tagged WRITE, a packet a congested switch
/// marked and the CNP its receiver sends back, and a CM conversation.
pub fn capture() -> Vec<Sample> {
    let mut frames = conversations(Ip::V4);
    frames.extend(conversations(Ip::V6));
    frames.extend(naks());
    // On the main QP pair, after its conversation (PSN 0x119 on).
    let mut t = Talk::new(Ip::V4, 0, (QP_A, QP_B), 0x119);
    (t.msn, t.plain) = (16, false);
    t.message(&[Opcode::RcWriteOnly], 64, "in VLAN 100, priority 3");
    t.ack("in VLAN 100");
    for s in &mut t.frames {
        s.repr.eth.vlan = Some(VlanTag {
            pcp: 3,
            dei: false,
            vid: 100,
        });
        s.name = s.name.replace(", in VLAN", " in VLAN");
    }
    let (psn, msn) = (t.psn, t.msn);
    frames.extend(t.frames);
    frames.extend(congestion(Ip::V4, psn, msn));
    // Over IPv6, right after its conversation.
    frames.extend(congestion(Ip::V6, 0x119, 16));
    frames.extend(cm_conversation());
    frames
}

/// The port rdma_cm programs such as rping listen on by default.
const RPING_PORT: u16 = 7174;

/// A CM MAD from A (or B) to the other's QP1, over IPv4: a UD SEND_ONLY with the GSI's Q_Key.
fn mad(from_a: bool, psn: u32, what: &str, message: cm::CmMessage) -> Sample {
    let mut s = example(Opcode::UdSendOnly, Ip::V4, psn, 0);
    s.repr.ip = ip(Ip::V4, from_a);
    if !from_a {
        s.repr.eth = EthRepr {
            dst: MAC_A,
            src: MAC_B,
            vlan: None,
        };
    }
    s.repr.bth.dest_qp = mad::GSI_QPN;
    s.repr.bth.solicited = false;
    s.repr.ext.deth = Some(DethRepr {
        qkey: mad::GSI_QKEY,
        src_qp: mad::GSI_QPN,
    });
    let m = cm::CmMad {
        transaction_id: 0x0000_0001_2345_6780 | u64::from(!from_a),
        message,
    };
    s.payload = vec![0; mad::MAD_LEN];
    m.emit(&mut s.payload).expect("a valid MAD");
    s.name = format!("CM {} over IPv4 to QP1: {what}", m.message.name());
    s
}

/// An rdma_cm connection to port 7174 (rping's) set up and torn down (REQ, REP, RTU, DREQ,
/// DREP), a REQ for a port nobody listens on and its REJ, and a UD service resolved by SIDR.
pub fn cm_conversation() -> Vec<Sample> {
    let a4 = core::net::IpAddr::V4(core::net::Ipv4Addr::new(198, 18, 0, 1));
    let b4 = core::net::IpAddr::V4(core::net::Ipv4Addr::new(198, 18, 0, 2));
    let mapped = |ip: core::net::IpAddr| match ip {
        core::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        core::net::IpAddr::V6(v6) => v6.octets(),
    };
    let mut private = [0u8; cm::CmaHeader::LEN];
    cm::CmaHeader {
        src_port: 49152,
        src: a4,
        dst: b4,
    }
    .emit(&mut private)
    .expect("one family");
    let path = cm::CmPath {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: mapped(a4),
        remote_gid: mapped(b4),
        flow_label: 0,
        packet_rate: 3,
        traffic_class: 0,
        hop_limit: 64,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: 14,
    };
    let req = |service_id| cm::Req {
        local_comm_id: 0x0a0b_0c01,
        service_id,
        local_ca_guid: 0x0200_00ff_fe00_0001,
        local_qkey: 0,
        local_qpn: QP_A,
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: 20,
        transport: 0,
        end_to_end_flow_control: false,
        starting_psn: 0x00_1234,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport: 0,
        primary_path: path,
        alternate_path: cm::CmPath::default(),
        private_data: &private,
    };
    let ids = |from_a: bool| {
        let (a, b) = (0x0a0b_0c01, 0x0d0e_0f02);
        if from_a { (a, b) } else { (b, a) }
    };
    let (a, b) = (ids(true), ids(false));
    let service = cm::ip_service_id(cm::port_space::TCP, RPING_PORT);
    let udp_service = cm::ip_service_id(cm::port_space::UDP, RPING_PORT);
    vec![
        mad(
            true,
            0x10,
            "A asks for B's port 7174",
            cm::CmMessage::Req(req(service)),
        ),
        mad(
            false,
            0x20,
            "B accepts, with its QP",
            cm::CmMessage::Rep(cm::Rep {
                local_comm_id: b.0,
                remote_comm_id: b.1,
                local_qkey: 0,
                local_qpn: QP_B,
                starting_psn: 0x00_5678,
                responder_resources: 1,
                initiator_depth: 1,
                target_ack_delay: 15,
                failover_accepted: 0,
                end_to_end_flow_control: false,
                rnr_retry_count: 7,
                srq: false,
                local_ca_guid: 0x0200_00ff_fe00_0002,
                private_data: &[],
            }),
        ),
        mad(
            true,
            0x11,
            "A's QP is ready",
            cm::CmMessage::Rtu(cm::Ids {
                local_comm_id: a.0,
                remote_comm_id: a.1,
                private_data: &[],
            }),
        ),
        mad(
            true,
            0x12,
            "A disconnects",
            cm::CmMessage::Dreq(cm::Dreq {
                local_comm_id: a.0,
                remote_comm_id: a.1,
                remote_qpn: QP_B,
                private_data: &[],
            }),
        ),
        mad(
            false,
            0x21,
            "B agrees",
            cm::CmMessage::Drep(cm::Ids {
                local_comm_id: b.0,
                remote_comm_id: b.1,
                private_data: &[],
            }),
        ),
        mad(
            true,
            0x13,
            "A asks for port 7175, where nobody listens",
            cm::CmMessage::Req(req(cm::ip_service_id(cm::port_space::TCP, RPING_PORT + 1))),
        ),
        mad(
            false,
            0x22,
            "B refuses: invalid service ID",
            cm::CmMessage::Rej(cm::Rej {
                local_comm_id: 0,
                remote_comm_id: a.0,
                message_rejected: cm::about::REQ,
                reject_info_len: 0,
                reason: cm::rej_reason::INVALID_SERVICE_ID,
                ari: &[],
                private_data: &[],
            }),
        ),
        mad(
            true,
            0x14,
            "A asks which UD QP serves UDP port 7174",
            cm::CmMessage::SidrReq(cm::SidrReq {
                request_id: 0x0a0b_0c03,
                pkey: 0xffff,
                service_id: udp_service,
                private_data: &private,
            }),
        ),
        mad(
            false,
            0x23,
            "B's UD QP, with its Q_Key",
            cm::CmMessage::SidrRep(cm::SidrRep {
                request_id: 0x0a0b_0c03,
                status: 0,
                additional_info_len: 0,
                qpn: QP_B,
                service_id: udp_service,
                qkey: 0x0100_1c06,
                class_port_info: &[],
                private_data: &[],
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_parse_back() {
        for s in capture() {
            let frame = s.frame();
            let parsed = crate::frame::parse(&frame).unwrap_or_else(|e| panic!("{}: {e}", s.name));
            assert_eq!(parsed.repr, s.repr, "{}", s.name);
            assert_eq!(parsed.payload(), &s.payload[..], "{}", s.name);
        }
    }

    /// The capture holds every opcode over both IP versions, each frame under a name of its
    /// own, and each response at a PSN its request took, with the MSN its responder counted.
    #[test]
    fn the_capture_is_a_conversation_of_every_opcode() {
        let frames = capture();
        let names: std::collections::HashSet<&str> =
            frames.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names.len(), frames.len(), "names are unique");
        for info in TABLE {
            for v in ["IPv4", "IPv6"] {
                let name = format!("{} over {v}", info.name);
                assert!(names.contains(name.as_str()), "{name}");
            }
        }
        let read = |name: &str| frames.iter().find(|s| s.name == name).unwrap();
        let req = read("RC_RDMA_READ_REQUEST over IPv4");
        let resp = read("RC_RDMA_READ_RESPONSE_ONLY over IPv4");
        assert_eq!(req.repr.bth.psn, resp.repr.bth.psn);
        assert_eq!(
            req.repr.ext.reth.unwrap().dma_len as usize,
            resp.payload.len()
        );
        let big = read("RC_RDMA_READ_REQUEST over IPv4, of 600 bytes");
        let last = read("RC_RDMA_READ_RESPONSE_LAST over IPv4");
        assert_eq!(last.repr.bth.psn, big.repr.bth.psn + 2);
        let cnp = read("CNP over IPv4");
        let marked = read("RC_SEND_ONLY over IPv4, ECN CE (congestion experienced)");
        assert!(
            matches!(marked.repr.ip, IpRepr::V4 { ecn: 3, .. }) && !marked.repr.bth.fecn,
            "a RoCEv2 switch marks the IP ECN bits only"
        );
        assert!(cnp.repr.bth.becn, "a CNP sets BECN");
        assert_eq!(cnp.repr.bth.dest_qp, QP_A, "to the sender's QP");
        assert_eq!(
            cnp.repr.ip.addrs(),
            (marked.repr.ip.addrs().1, marked.repr.ip.addrs().0)
        );
        // The swap came before its answer.
        let at = |name: &str| frames.iter().position(|s| s.name == name).unwrap();
        assert!(at("RC_COMPARE_SWAP over IPv4") < at("RC_ATOMIC_ACKNOWLEDGE over IPv4"));
    }

    #[test]
    fn every_opcode_and_pad_count_is_covered() {
        let samples = every_opcode(Ip::V4);
        assert_eq!(samples.len(), TABLE.len());
        let pads: std::collections::BTreeSet<usize> = samples
            .iter()
            .map(|s| crate::frame::pad_for(s.payload.len()))
            .collect();
        assert_eq!(pads.len(), 4);
    }
}
