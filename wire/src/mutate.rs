//! Structure-aware mutation of RoCEv2 frames, for fuzzing other implementations.
//!
//! A [`Mutator`] takes a well-formed frame from a live conversation (a template: a request the
//! fuzzer's side sent, so its addresses, QPN, PSN and keys are ones the peer accepts) and makes
//! a variant of one [`Class`]: another opcode, a PSN around the window or across the 24-bit wrap,
//! a wrong length or pad count, another key or address, odd atomics, the frame twice, a cut, a
//! bad ICRC or checksum, or a forged ACK/NAK toward the peer's requester. Everything but the
//! field under test is kept valid (the ICRC is recomputed unless it is the target), so each
//! variant reaches the check it aims at. The same seed gives the same variants.

use core::fmt::{self, Write as _};

use crate::aeth::{AethRepr, CreditCount, NakCode, RnrTimer, Syndrome};
use crate::atomic::{AtomicAckEthRepr, AtomicEthRepr};
use crate::bth::MASK_24;
use crate::deth::DethRepr;
use crate::feth::{FethRepr, FlushLevel, FlushPlacement};
use crate::frame::{FrameRepr, IpRepr, ParsedFrame, UdpChecksum, pad_for};
use crate::opcode::{Headers, Opcode, OpcodeInfo, TABLE};
use crate::reth::RethRepr;
use crate::{ExtRepr, icrc};

/// What a mutation changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// Another opcode of the table, in or out of the message's sequence, with the headers it
    /// requires.
    Opcode,
    /// The PSN moved: just behind or ahead of the expected one, at the edges of the 2^23 window
    /// (IBA 9.7.2: a PSN in the half behind is a duplicate, ahead is out of sequence), or far.
    Psn,
    /// The payload made shorter or longer, or the RETH's DMA length other than the payload's.
    Length,
    /// The BTH pad count other than the payload needs (IBA 9.2: PadCnt).
    Pad,
    /// The R_Key, Q_Key or invalidated key changed: one bit of the index, the key byte, 0, all ones.
    Key,
    /// The virtual address moved: past the region, before it, near 2^64.
    Address,
    /// An atomic's address unaligned (IBA 9.4.5: 8-byte aligned) or its operands at extremes.
    Atomic,
    /// The BTH's destination QP, partition key, transport version or reserved bits changed.
    Header,
    /// The same frame sent twice.
    Duplicate,
    /// The frame cut short, with IP and UDP lengths and the ICRC made consistent with the cut.
    Truncate,
    /// One ICRC byte flipped (Annex A17: the packet is dropped).
    Icrc,
    /// The IPv4 header checksum or a non-zero UDP checksum made wrong.
    Checksum,
    /// An ACKNOWLEDGE toward the peer's requester: an ACK, an RNR NAK or a NAK of each code,
    /// at PSNs around the peer's.
    ForgedAck,
}

impl Class {
    /// Every class.
    pub const ALL: [Class; 13] = [
        Class::Opcode,
        Class::Psn,
        Class::Length,
        Class::Pad,
        Class::Key,
        Class::Address,
        Class::Atomic,
        Class::Header,
        Class::Duplicate,
        Class::Truncate,
        Class::Icrc,
        Class::Checksum,
        Class::ForgedAck,
    ];

    /// The name used on the command line and in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Class::Opcode => "opcode",
            Class::Psn => "psn",
            Class::Length => "length",
            Class::Pad => "pad",
            Class::Key => "key",
            Class::Address => "address",
            Class::Atomic => "atomic",
            Class::Header => "header",
            Class::Duplicate => "duplicate",
            Class::Truncate => "truncate",
            Class::Icrc => "icrc",
            Class::Checksum => "checksum",
            Class::ForgedAck => "forged-ack",
        }
    }

    /// The class named `name`.
    pub fn from_name(name: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == name)
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One mutation: its class and what exactly it changed, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutation {
    /// What kind of change.
    pub class: Class,
    /// The change, e.g. `PSN 0x000010 -> 0x80000f (+2^23-1)`.
    pub what: String,
    /// IBA requires the receiver to drop it without a reply: a bad ICRC or checksum, an
    /// unknown destination QP, a P_Key that does not match, a TVer other than 0 (9.6, C9-3), or
    /// a frame cut inside its headers.
    pub silent: bool,
}

/// A deterministic source of mutations (SplitMix64: tiny, and the same everywhere).
#[derive(Debug, Clone)]
pub struct Mutator {
    state: u64,
}

impl Mutator {
    /// A mutator whose choices follow from `seed`.
    pub const fn new(seed: u64) -> Mutator {
        Mutator { state: seed }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// A mutation of a class chosen at random; see [`mutate_as`](Self::mutate_as).
    pub fn mutate(
        &mut self,
        template: &ParsedFrame<'_>,
        peer_psn: u32,
        out: &mut Vec<Vec<u8>>,
    ) -> Mutation {
        self.mutate_among(&Class::ALL, template, peer_psn, out)
    }

    /// A mutation of one of `classes` (not empty), chosen at random.
    pub fn mutate_among(
        &mut self,
        classes: &[Class],
        template: &ParsedFrame<'_>,
        peer_psn: u32,
        out: &mut Vec<Vec<u8>>,
    ) -> Mutation {
        let class = self.pick(classes);
        self.mutate_as(class, template, peer_psn, out)
    }

    /// Appends to `out` the frames of one mutation of `class` of `template` (two for
    /// [`Class::Duplicate`], one otherwise) and says what it changed. `peer_psn` is the PSN of
    /// the peer's latest request, around which [`Class::ForgedAck`] forges its ACKs; pass the
    /// template's own PSN when the peer sends no requests.
    pub fn mutate_as(
        &mut self,
        class: Class,
        template: &ParsedFrame<'_>,
        peer_psn: u32,
        out: &mut Vec<Vec<u8>>,
    ) -> Mutation {
        let mut repr = template.repr;
        let mut payload = template.payload().to_vec();
        let mut what = String::new();
        let mut then = Then::Nothing;
        let mut silent = matches!(class, Class::Icrc | Class::Checksum);
        match class {
            Class::Opcode => {
                let to = self.pick(TABLE).opcode;
                let _ = write!(what, "opcode {} -> {to}", repr.bth.opcode);
                self.retarget(&mut repr, to);
            }
            Class::Psn => {
                let (delta, why) = self.pick(&PSN_DELTAS);
                let to = repr.bth.psn.wrapping_add(delta) & MASK_24;
                let _ = write!(what, "PSN {:#08x} -> {to:#08x} ({why})", repr.bth.psn);
                repr.bth.psn = to;
            }
            Class::Length => then = self.length(&mut repr, &mut payload, &mut what),
            Class::Pad => {
                let right = pad_for(payload.len()) as u8;
                let wrong = (right + 1 + self.below(3) as u8) % 4;
                let _ = write!(what, "pad count {right} -> {wrong}");
                // PadCnt is bits 4-5 of the BTH's second byte.
                then = Then::Flip(Place::Bth(1), (right ^ wrong) << 4);
            }
            Class::Key => self.key(&mut repr, &mut what),
            Class::Address => self.address(&mut repr, &mut what),
            Class::Atomic => self.atomic(&mut repr, &mut what),
            Class::Header => {
                (then, silent) = self.header(&mut repr, &mut what);
            }
            Class::Duplicate => what.push_str("the same frame twice"),
            Class::Truncate => {
                let full = template.layout.end;
                let cut = template.layout.ip + 1 + self.below(full - template.layout.ip - 1);
                let _ = write!(what, "cut at byte {cut} of {full}");
                silent = cut < template.layout.payload;
                then = Then::Cut(cut);
            }
            Class::Icrc => {
                let byte = self.below(4);
                let _ = write!(what, "ICRC byte {byte} flipped");
                then = Then::Flip(Place::Icrc(byte), 0xff);
            }
            Class::Checksum => match repr.ip {
                IpRepr::V4 { .. }
                    if repr.udp.checksum == UdpChecksum::Zero || self.below(2) == 0 =>
                {
                    what.push_str("IPv4 header checksum wrong");
                    then = Then::Flip(Place::Ipv4Checksum, 0x01);
                }
                _ => {
                    what.push_str("UDP checksum wrong");
                    repr.udp.checksum = UdpChecksum::Computed;
                    then = Then::Flip(Place::UdpChecksum, 0x01);
                }
            },
            Class::ForgedAck => self.forge_ack(&mut repr, peer_psn, &mut what),
        }
        // A class that changed the opcode to one without a payload drops it.
        if !repr.bth.opcode.info().allows_payload() {
            payload.clear();
        }
        let mut frame = vec![0; repr.frame_len(payload.len())];
        if repr.emit(&payload, &mut frame).is_err() {
            // Only a payload too long for IP fails here (headers follow the opcode): send
            // the template's payload cut to fit instead.
            payload.truncate(MAX_PAYLOAD);
            frame = vec![0; repr.frame_len(payload.len())];
            repr.emit(&payload, &mut frame).expect("fits");
        }
        let l = crate::frame::parse_unverified(&frame)
            .expect("an emitted frame parses")
            .layout;
        match then {
            Then::Nothing => {}
            // The ICRC covers the BTH, so a changed BTH gets a fresh one: only the field under
            // test is wrong.
            Then::Flip(Place::Bth(at), mask) => {
                frame[l.bth + at] ^= mask;
                reseal(&mut frame, l.ip);
            }
            Then::Flip(place, mask) => {
                let at = match place {
                    Place::Icrc(byte) => l.icrc + byte,
                    Place::Ipv4Checksum => l.ip + 10,
                    _ => l.udp + 6,
                };
                frame[at] ^= mask;
            }
            Then::Cut(at) => {
                frame.truncate(at);
                reseal(&mut frame, l.ip);
            }
            Then::Extend(n) => {
                frame.splice(l.pad..l.pad, core::iter::repeat_n(0x5a, n));
                reseal(&mut frame, l.ip);
            }
        }
        if class == Class::Duplicate {
            out.push(frame.clone());
        }
        out.push(frame);
        Mutation {
            class,
            what,
            silent,
        }
    }

    /// Gives `repr` the opcode `to` and exactly the headers `to` requires, keeping the values
    /// of those it already had.
    fn retarget(&mut self, repr: &mut FrameRepr, to: Opcode) {
        let old = repr.ext;
        let need = to.info().headers;
        let (va, rkey) = old
            .reth
            .map(|r| (r.va, r.rkey))
            .or(old.atomic_eth.map(|a| (a.va, a.rkey)))
            .unwrap_or((0, 0));
        let has = |h| need.contains(h);
        repr.ext = ExtRepr {
            xrceth: has(Headers::XRCETH).then(|| old.xrceth.unwrap_or(1)),
            deth: has(Headers::DETH).then(|| old.deth.unwrap_or(DethRepr { qkey: 0, src_qp: 1 })),
            feth: has(Headers::FETH).then(|| {
                old.feth.unwrap_or(FethRepr {
                    placement: FlushPlacement::GLOBAL,
                    level: FlushLevel::Range,
                })
            }),
            reth: has(Headers::RETH).then(|| {
                old.reth.unwrap_or(RethRepr {
                    va,
                    rkey,
                    dma_len: 8,
                })
            }),
            atomic_eth: has(Headers::ATOMIC_ETH).then(|| AtomicEthRepr {
                va,
                rkey,
                swap_add: self.next(),
                compare: self.next(),
            }),
            aeth: has(Headers::AETH).then(|| {
                old.aeth.unwrap_or(AethRepr {
                    syndrome: Syndrome::Ack(CreditCount::INVALID),
                    msn: 0,
                })
            }),
            atomic_ack_eth: has(Headers::ATOMIC_ACK_ETH)
                .then(|| AtomicAckEthRepr { orig: self.next() }),
            immdt: has(Headers::IMMDT).then(|| old.immdt.unwrap_or(self.next() as u32)),
            ieth: has(Headers::IETH).then(|| old.ieth.unwrap_or(rkey)),
        };
        repr.bth.opcode = to;
    }

    fn length(&mut self, repr: &mut FrameRepr, payload: &mut Vec<u8>, what: &mut String) -> Then {
        let len = payload.len();
        if let Some(reth) = repr.ext.reth.as_mut().filter(|_| self.below(2) == 0) {
            let to = self.pick(&[
                0,
                1,
                (len as u32).wrapping_sub(1),
                len as u32 + 1,
                reth.dma_len.wrapping_mul(2),
                1 << 31,
                u32::MAX,
            ]);
            let _ = write!(what, "RETH DMA length {} -> {to}", reth.dma_len);
            reth.dma_len = to;
            return Then::Nothing;
        }
        if !repr.bth.opcode.info().allows_payload() {
            // Bytes after the headers of an opcode that carries none: the frame is longer than
            // its opcode says.
            let n = self.pick(&[1, 4, 8, 64]);
            let _ = write!(what, "{n} bytes after the headers of {}", repr.bth.opcode);
            return Then::Extend(n);
        }
        let to = self.pick(&[
            0,
            1,
            len.saturating_sub(1),
            len + 1,
            len + 4,
            len * 2,
            257,
            1025,
            4097,
            MAX_PAYLOAD,
        ]);
        let _ = write!(what, "payload {len} -> {to} bytes");
        let fill = payload.last().copied().unwrap_or(0x5a);
        payload.resize(to, fill);
        Then::Nothing
    }

    fn key(&mut self, repr: &mut FrameRepr, what: &mut String) {
        let change = |m: &mut Mutator, key: u32| -> u32 {
            match m.below(4) {
                0 => key ^ (1 << (8 + m.below(24))),
                1 => key ^ (1 + m.below(255) as u32),
                2 => 0,
                _ => u32::MAX,
            }
        };
        let ext = &repr.ext;
        if ext.reth.is_none()
            && ext.atomic_eth.is_none()
            && ext.ieth.is_none()
            && ext.deth.is_none()
        {
            // No key in this frame: give it one by making it a WRITE.
            let to = self.write_of(repr.bth.opcode);
            self.retarget(repr, to);
            let _ = write!(what, "as {to}, ");
        }
        let ext = &mut repr.ext;
        let (name, key): (&str, &mut u32) = if let Some(r) = ext.reth.as_mut() {
            ("R_Key", &mut r.rkey)
        } else if let Some(a) = ext.atomic_eth.as_mut() {
            ("R_Key", &mut a.rkey)
        } else if let Some(k) = ext.ieth.as_mut() {
            ("invalidated R_Key", k)
        } else {
            let d = ext.deth.as_mut().expect("given one above");
            ("Q_Key", &mut d.qkey)
        };
        let to = change(self, *key);
        let _ = write!(what, "{name} {:#010x} -> {to:#010x}", *key);
        *key = to;
    }

    /// The WRITE ONLY of `of`'s transport (or RC's).
    fn write_of(&self, of: Opcode) -> Opcode {
        use crate::opcode::{Operation, Position};
        like(of, |r| {
            r.operation == Operation::RdmaWrite && r.position == Position::Only
        })[0]
    }

    fn address(&mut self, repr: &mut FrameRepr, what: &mut String) {
        if repr.ext.reth.is_none() && repr.ext.atomic_eth.is_none() {
            let to = self.write_of(repr.bth.opcode);
            self.retarget(repr, to);
            let _ = write!(what, "as {to}, ");
        }
        let salt = self.next();
        let (va, len) = match (repr.ext.reth.as_mut(), repr.ext.atomic_eth.as_mut()) {
            (Some(r), _) => (&mut r.va, u64::from(r.dma_len)),
            (None, Some(a)) => (&mut a.va, 8),
            (None, None) => unreachable!("given one above"),
        };
        let to = match salt % 6 {
            0 => va.wrapping_add(len.max(1)),
            1 => va.wrapping_sub(1),
            2 => va.wrapping_add(4096 << ((salt >> 8) % 20)),
            3 => u64::MAX - (salt >> 8) % 64,
            4 => 0,
            _ => salt.rotate_left(17),
        };
        let _ = write!(what, "VA {:#x} -> {to:#x}", *va);
        *va = to;
    }

    fn atomic(&mut self, repr: &mut FrameRepr, what: &mut String) {
        if repr.ext.atomic_eth.is_none() {
            // An atomic of the template's transport reaches the atomic checks; another
            // transport's is dropped before them (IBA 9.6).
            let to = self.pick(&like(repr.bth.opcode, |r| {
                r.headers.contains(Headers::ATOMIC_ETH)
            }));
            let _ = write!(what, "as {to}, ");
            self.retarget(repr, to);
        }
        let a = repr.ext.atomic_eth.as_mut().expect("set above");
        if self.below(2) == 0 {
            let by = 1 + self.below(7) as u64;
            let _ = write!(what, "VA {:#x} + {by} (unaligned)", a.va);
            a.va = a.va.wrapping_add(by);
        } else {
            let v = self.pick(&[0, 1, u64::MAX, 1 << 63, (1 << 63) - 1]);
            let _ = write!(what, "operands {v:#x}");
            a.swap_add = v;
            a.compare = v.rotate_left(self.below(64) as u32);
        }
    }

    /// Changes a BTH field; says whether IBA then requires silence.
    fn header(&mut self, repr: &mut FrameRepr, what: &mut String) -> (Then, bool) {
        let bth = &mut repr.bth;
        match self.below(5) {
            0 => {
                let to = (bth.dest_qp ^ (1 + self.below(0xff_ffff) as u32)) & MASK_24;
                let _ = write!(what, "destination QP {:#08x} -> {to:#08x}", bth.dest_qp);
                bth.dest_qp = to;
                (Then::Nothing, true)
            }
            1 => {
                // None matches the default key 0xffff: the low 15 bits differ (IBA 10.9).
                let to = self.pick(&[0, 0x8000, 0x7ffe, bth.pkey ^ 1]);
                let _ = write!(what, "P_Key {:#06x} -> {to:#06x}", bth.pkey);
                bth.pkey = to;
                (Then::Nothing, true)
            }
            2 => {
                // TVer is the low nibble of the BTH's second byte (IBA C9-3: must be 0).
                let v = 1 + self.below(15) as u8;
                let _ = write!(what, "TVer 0 -> {v}");
                (Then::Flip(Place::Bth(1), v), true)
            }
            3 => {
                // Reserved: the 6 bits after BECN (byte 4) and the 7 after AckReq (byte 8).
                let (at, mask) = self.pick(&[(4, 0x3f), (8, 0x7f)]);
                let _ = write!(what, "reserved bits of BTH byte {at} set");
                (Then::Flip(Place::Bth(at), mask), false)
            }
            _ => {
                bth.ack_req = !bth.ack_req;
                bth.solicited = !bth.solicited;
                bth.mig_req = !bth.mig_req;
                what.push_str("AckReq, SE and MigReq flipped");
                (Then::Nothing, false)
            }
        }
    }

    fn forge_ack(&mut self, repr: &mut FrameRepr, peer_psn: u32, what: &mut String) {
        let acknowledge = TABLE
            .iter()
            .find(|r| {
                r.transport == repr.bth.opcode.info().transport
                    && r.operation == crate::opcode::Operation::Acknowledge
            })
            .map_or(Opcode::RcAcknowledge, |r| r.opcode);
        self.retarget(repr, acknowledge);
        let syndrome = match self.below(4) {
            0 => Syndrome::Ack(CreditCount::from_code(self.below(32) as u8)),
            1 => Syndrome::RnrNak(RnrTimer::from_code(self.below(32) as u8)),
            2 => Syndrome::Nak(NakCode::from_code(self.below(5) as u8)),
            _ => Syndrome::from_byte(self.next() as u8),
        };
        let (delta, why) = self.pick(&PSN_DELTAS);
        let psn = peer_psn.wrapping_add(delta) & MASK_24;
        let msn = self.next() as u32 & MASK_24;
        let _ = write!(
            what,
            "{acknowledge} {syndrome}, MSN {msn}, PSN {psn:#08x} (peer's {why})"
        );
        repr.bth.psn = psn;
        repr.ext.aeth = Some(AethRepr { syndrome, msn });
    }
}

/// What is done to the emitted frame.
enum Then {
    Nothing,
    /// Xor a byte.
    Flip(Place, u8),
    /// Cut it to this many bytes.
    Cut(usize),
    /// Insert bytes between the payload and the pad.
    Extend(usize),
}

/// A byte of an emitted frame.
enum Place {
    /// At this offset in the BTH.
    Bth(usize),
    /// This byte of the ICRC.
    Icrc(usize),
    /// The IPv4 header checksum's first byte.
    Ipv4Checksum,
    /// The UDP checksum's first byte.
    UdpChecksum,
}

/// The largest payload a frame of one IP packet carries, with room for every header.
const MAX_PAYLOAD: usize = 9000;

/// PSN moves: the neighbours, the window's edges (IBA 9.7.2: 2^23 behind is still a
/// duplicate, 2^23 ahead is invalid), the wrap, and far.
const PSN_DELTAS: [(u32, &str); 9] = [
    (1, "+1"),
    (2, "+2"),
    (u32::MAX, "-1"),
    (0u32.wrapping_sub(2), "-2"),
    ((1 << 23) - 1, "+2^23-1"),
    (1 << 23, "+2^23"),
    (0u32.wrapping_sub(1 << 23), "-2^23"),
    (1 << 12, "+4096"),
    (0u32.wrapping_sub(1 << 12), "-4096"),
];

/// The opcodes `keep` selects, of `of`'s transport where it has any (else of every transport).
fn like(of: Opcode, keep: impl Fn(&OpcodeInfo) -> bool) -> Vec<Opcode> {
    let t = of.info().transport;
    let of_all = |same: bool| -> Vec<Opcode> {
        TABLE
            .iter()
            .filter(|r| keep(r) && (!same || r.transport == t))
            .map(|r| r.opcode)
            .collect()
    };
    let same = of_all(true);
    if same.is_empty() { of_all(false) } else { same }
}

/// Makes a changed frame consistent again: IP and UDP lengths, the IPv4 checksum, the ICRC in
/// its last four bytes (where a BTH is left), and a UDP checksum if it had one.
fn reseal(frame: &mut [u8], ip: usize) {
    let len = frame.len();
    let (addrs, ip_len) = match frame.get(ip).map(|b| b >> 4) {
        Some(4) if len >= ip + 20 => (ip + 12..ip + 20, 20),
        Some(6) if len >= ip + 40 => (ip + 8..ip + 40, 40),
        _ => return,
    };
    if ip_len == 20 {
        frame[ip + 2..ip + 4].copy_from_slice(&((len - ip) as u16).to_be_bytes());
        frame[ip + 10..ip + 12].fill(0);
        let sum = !fold(sum16(&frame[ip..ip + 20]));
        frame[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
    } else {
        frame[ip + 4..ip + 6].copy_from_slice(&((len - ip - 40) as u16).to_be_bytes());
    }
    let udp = ip + ip_len;
    if len < udp + 8 {
        return;
    }
    let udp_len = (len - udp) as u16;
    frame[udp + 4..udp + 6].copy_from_slice(&udp_len.to_be_bytes());
    let had_checksum = frame[udp + 6..udp + 8] != [0, 0];
    frame[udp + 6..udp + 8].fill(0);
    if let Ok(crc) = icrc::compute(&frame[ip..len - 4]) {
        frame[len - 4..].copy_from_slice(&icrc::to_bytes(crc));
    }
    // Last, as the builder does: the UDP checksum covers the ICRC (RFC 768 pseudo-header).
    if had_checksum {
        let sum = sum16(&frame[addrs]) + 17 + u32::from(udp_len) + sum16(&frame[udp..]);
        let sum = match !fold(sum) {
            0 => 0xffff,
            s => s,
        };
        frame[udp + 6..udp + 8].copy_from_slice(&sum.to_be_bytes());
    }
}

/// The Internet checksum's sum of 16-bit words, not yet folded.
fn sum16(bytes: &[u8]) -> u32 {
    bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

/// Folds the carries of a one's-complement sum.
fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{self, parse, parse_unverified};
    use crate::opcode::{Operation, Transport};
    use crate::sample::{Ip, every_opcode};
    use crate::{BthRepr, Error, UdpRepr};

    /// Every sample frame (every opcode, IPv4 and IPv6, some with a UDP checksum).
    fn templates() -> Vec<Vec<u8>> {
        let mut all: Vec<_> = every_opcode(Ip::V4)
            .into_iter()
            .chain(every_opcode(Ip::V6))
            .collect();
        for s in every_opcode(Ip::V4).into_iter().step_by(3) {
            let mut s = s;
            s.repr.udp = UdpRepr {
                checksum: UdpChecksum::Computed,
                ..s.repr.udp
            };
            all.push(s);
        }
        all.iter().map(|s| s.frame()).collect()
    }

    fn one(seed: u64, class: Class, template: &[u8], peer_psn: u32) -> (Mutation, Vec<Vec<u8>>) {
        let t = parse(template).expect("samples parse");
        let mut out = Vec::new();
        let m = Mutator::new(seed).mutate_as(class, &t, peer_psn, &mut out);
        (m, out)
    }

    fn udp_checksum_ok(frame: &[u8]) -> bool {
        use smoltcp::wire::UdpPacket;
        let p = parse_unverified(frame).unwrap();
        let (src, dst) = p.repr.ip.addrs();
        UdpPacket::new_unchecked(&frame[p.layout.udp..p.layout.end]).verify_checksum(&src, &dst)
    }

    #[test]
    fn the_same_seed_gives_the_same_mutations() {
        let t = templates();
        for seed in 0..50 {
            let run = || {
                let mut m = Mutator::new(seed);
                let mut out = Vec::new();
                let what: Vec<_> = t
                    .iter()
                    .map(|f| m.mutate(&parse(f).unwrap(), 7, &mut out))
                    .collect();
                (what, out)
            };
            assert_eq!(run(), run());
        }
    }

    /// Each class changes what it says and keeps the rest valid: the ICRC is right unless it is
    /// the target, and the UDP checksum too where the template had one.
    #[test]
    fn each_class_breaks_only_its_field() {
        for (n, template) in templates().iter().enumerate() {
            let t = parse(template).unwrap();
            for seed in 0..40u64 {
                for class in Class::ALL {
                    let (m, out) = one(seed * 131 + n as u64, class, template, 0x00_0100);
                    assert!(!m.what.is_empty());
                    assert_eq!(out.len(), if class == Class::Duplicate { 2 } else { 1 });
                    let f = &out[0];
                    let parsed = parse_unverified(f);
                    match class {
                        Class::Icrc => {
                            let p = parsed.unwrap();
                            assert_eq!(p.repr, t.repr);
                            assert!(matches!(p.verify_icrc(), Err(Error::BadIcrc { .. })));
                        }
                        Class::Checksum => match parse(f) {
                            Err(Error::BadIpChecksum) => {}
                            Ok(p) => {
                                assert_eq!(p.repr.udp.checksum, UdpChecksum::Computed, "{m:?}");
                                assert!(!udp_checksum_ok(f), "{m:?}");
                            }
                            Err(e) => panic!("{m:?}: {e}"),
                        },
                        Class::Truncate => {
                            assert!(f.len() < template.len());
                            assert!(parse(f).is_err() || f.len() >= t.layout.payload, "{m:?}");
                        }
                        Class::Header if m.what.starts_with("TVer") => {
                            assert!(matches!(parse(f), Err(Error::BadTver(_))), "{m:?}");
                        }
                        Class::Length if m.what.contains("after the headers") => {
                            assert!(f.len() > template.len());
                        }
                        Class::Pad => {
                            if let Ok(p) = parse(f) {
                                assert_ne!(p.pad_count(), t.pad_count(), "{m:?}");
                            }
                        }
                        _ => {
                            let p = parse(f).unwrap_or_else(|e| panic!("{m:?}: {e}"));
                            if t.repr.udp.checksum == UdpChecksum::Computed {
                                assert!(udp_checksum_ok(f), "{m:?}");
                            }
                            if class == Class::Duplicate {
                                assert_eq!(out[1], *f);
                                assert_eq!(f, template);
                            }
                            if class == Class::ForgedAck {
                                let info = p.repr.bth.opcode.info();
                                assert_eq!(info.operation, Operation::Acknowledge);
                                let behind = 0x100u32.wrapping_sub(p.repr.bth.psn) & MASK_24;
                                let ahead = p.repr.bth.psn.wrapping_sub(0x100) & MASK_24;
                                assert!(behind.min(ahead) <= 1 << 23, "{m:?}");
                            }
                            let (from, to) = (t.repr.bth.opcode.info(), p.repr.bth.opcode.info());
                            if matches!(class, Class::Atomic | Class::Address | Class::Key)
                                && matches!(from.transport, Transport::Rc | Transport::Xrc)
                            {
                                assert_eq!(to.transport, from.transport, "{m:?}");
                            }
                            if class == Class::Psn {
                                assert_ne!(p.repr.bth.psn, t.repr.bth.psn);
                                let same = FrameRepr {
                                    bth: BthRepr {
                                        psn: t.repr.bth.psn,
                                        ..p.repr.bth
                                    },
                                    ..p.repr
                                };
                                assert_eq!(same, t.repr);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_cut_frame_has_its_lengths_and_icrc_made_consistent() {
        let template = crate::sample::example(Opcode::RcSendOnly, Ip::V4, 5, 64).frame();
        let t = parse(&template).unwrap();
        // Cut in the payload: the frame parses again, with the ICRC over what is left.
        let mut f = template[..t.layout.payload + 20].to_vec();
        reseal(&mut f, t.layout.ip);
        let p = parse(&f).expect("resealed");
        assert_eq!(p.payload(), &t.payload()[..16 - usize::from(p.pad_count())]);
        assert_eq!(frame::parse_outer(&f).unwrap().end, f.len());
    }

    #[test]
    fn classes_have_names() {
        for c in Class::ALL {
            assert_eq!(Class::from_name(c.name()), Some(c));
        }
        assert_eq!(Class::from_name("nope"), None);
    }
}
