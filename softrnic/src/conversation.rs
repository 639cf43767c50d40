//! A capture read as conversations: which packet answers which, what each ACK covers, where
//! PSNs jump or repeat, which READ responses belong to which request. The ladder draws this, and
//! `dissect --analyse` prints it with each frame.
//!
//! It knows only what the capture shows. A frame seen leaving one device and arriving at
//! another (a same-host capture, or a lesson's, which captures every port) is one packet, and a
//! packet seen leaving but never arriving, where its receiver's port is captured too, was lost.
//! The PSN rules are IBA Vol 1 ch. 9.7: the responder expects one PSN after another (9.7.2);
//! a request it has already seen is a duplicate, answered again (9.7.5.1.2); a PSN beyond
//! the expected one is a sequence error, NAKed with the PSN it expected (9.7.5.1.1). A READ
//! takes one PSN per response packet (9.7.2). An ACK acknowledges every request up to its PSN
//! (coalesced, 9.7.5.1.3), and a response beyond a READ that still lacks responses is an
//! implied NAK of that READ (9.9.2.1).
//!
//! The sender's view (what is new, what is sent again) follows the order packets were sent in;
//! the responder's view (what it expects, what is beyond a gap, late or a duplicate) follows the
//! order they reached it in, with what its NAKs say it expects.

use crate::capture::{CapturedFrame, Direction};
use softrnic_wire::opcode::{Operation, Position};
use softrnic_wire::{NakCode, ParsedFrame, Syndrome, Transport, frame};
use std::collections::HashMap;

/// What a note says about a packet, for the ladder's marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mark {
    /// Sent, never arrived.
    Lost,
    /// Sent, and the capture ended before it could be seen arriving.
    Unseen,
    /// The receiver expected an earlier PSN.
    Gap,
    /// Overtaken on the way by a packet sent after it.
    Late,
    /// The same PSN sent again.
    Retransmission,
    /// A request the responder had already seen.
    Duplicate,
    /// What an ACK acknowledges.
    Covers,
    /// A NAK, and its cause.
    Nak,
    /// A receiver-not-ready NAK.
    RnrNak,
    /// A response tied to its request.
    Response,
    /// A response that shows an earlier READ lacks responses.
    ImpliedNak,
    /// An atomic answered again from the saved result.
    Replay,
    /// What a request asks for.
    Request,
    /// ECN and CNPs.
    Congestion,
    /// A wrong ICRC.
    BadIcrc,
}

impl Mark {
    /// Its name, as a CSS class in the HTML ladder.
    pub fn name(self) -> &'static str {
        match self {
            Mark::Lost => "lost",
            Mark::Unseen => "unseen",
            Mark::Gap => "gap",
            Mark::Late => "late",
            Mark::Retransmission => "retransmission",
            Mark::Duplicate => "duplicate",
            Mark::Covers => "covers",
            Mark::Nak => "nak",
            Mark::RnrNak => "rnr-nak",
            Mark::Response => "response",
            Mark::ImpliedNak => "implied-nak",
            Mark::Replay => "replay",
            Mark::Request => "request",
            Mark::Congestion => "congestion",
            Mark::BadIcrc => "bad-icrc",
        }
    }
}

/// One thing said about a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// What kind of thing.
    pub mark: Mark,
    /// The sentence.
    pub text: String,
}

/// One packet on the wire: a frame, with its arrival where the capture saw that too.
#[derive(Debug, Clone)]
pub struct Packet {
    /// The capture's frame number (from 1) of its first sighting.
    pub number: usize,
    /// The frame number of its arrival, when it was seen leaving and arriving.
    pub arrival: Option<usize>,
    /// When it was first seen, in seconds from the capture's first frame.
    pub at: f64,
    /// When it arrived, when that was seen.
    pub arrived_at: Option<f64>,
    /// Sender and receiver, as IP addresses.
    pub src: String,
    /// The receiver.
    pub dst: String,
    /// Whether it was seen leaving and never arriving, while the capture saw frames arrive at
    /// its receiver after it.
    pub lost: bool,
    /// Whether it was seen leaving and not arriving, where the capture shows its receiver's
    /// arrivals but none after it: in flight when the capture ended, lost or not.
    pub unseen: bool,
    /// A second arrival of a packet sent once: the network duplicated this one.
    pub duplicate_of: Option<usize>,
    /// It arrived marked ECN CE: a congested switch marked it on the way.
    pub arrived_ce: bool,
    /// The frame's bytes.
    pub bytes: Vec<u8>,
    /// Its length on the wire.
    pub original_len: usize,
    /// What the analysis says about it.
    pub notes: Vec<Note>,
}

impl Packet {
    /// The frame parsed (it parsed when the analysis took it in).
    pub fn parsed(&self) -> Option<ParsedFrame<'_>> {
        frame::parse_unverified(&self.bytes).ok()
    }

    /// Whether a note of this kind is on it.
    pub fn has(&self, mark: Mark) -> bool {
        self.notes.iter().any(|n| n.mark == mark)
    }
}

/// One end of a conversation: a host's address and its QP, where the capture shows which.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct End {
    /// The IP address.
    pub ip: String,
    /// The QP, unless no packet shows it (a UC sender's, whose peer never answers).
    pub qp: Option<u32>,
}

impl End {
    fn new(ip: &str, qp: u32) -> End {
        End {
            ip: ip.to_string(),
            qp: Some(qp),
        }
    }
}

/// The packets between two QPs, in the order they were sent: a request's destination QP, and
/// its source QP as the responses to it (or a datagram's DETH) show it.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// The two ends: the first is the one that sent first.
    pub ends: [End; 2],
    /// Indices into [`Analysis::packets`], each with whether it goes from the first end to
    /// the second.
    pub packets: Vec<(usize, bool)>,
}

/// A capture's conversations.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    /// Every RoCEv2 packet, in the order first seen.
    pub packets: Vec<Packet>,
    /// Packets by host pair.
    pub conversations: Vec<Conversation>,
    /// Frames that are not RoCEv2 or do not parse.
    pub skipped: usize,
    /// The path MTU used to count a READ's responses: given, or the largest FIRST or MIDDLE
    /// payload seen.
    pub mtu: Option<usize>,
}

/// PSNs are 24 bits and wrap (IBA 9.7.1): `a - b` in the window, as a signed distance.
fn psn_diff(a: u32, b: u32) -> i32 {
    let d = a.wrapping_sub(b) & 0xff_ffff;
    if d >= 0x80_0000 {
        d as i32 - 0x100_0000
    } else {
        d as i32
    }
}

fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & 0xff_ffff
}

/// A request outstanding at its requester.
#[derive(Debug, Clone)]
struct Outstanding {
    first: u32,
    last: u32,
    packet: usize,
    op: Operation,
    /// READ: the next response PSN it waits for.
    next_response: u32,
    /// Answered (ACKed, or its responses all in).
    done: bool,
}

/// A request flow: one QP's requests to another host's QP, as both ends see them.
#[derive(Debug, Default)]
struct Flow {
    /// The first PSN sent: the one the responder expects first.
    start: Option<u32>,
    /// The PSN the responder expects next (from the packets that reached it).
    expected: Option<u32>,
    /// The latest-sent packet that has reached the responder (its frame number): one sent
    /// before it and arriving after it came late.
    latest_arrived: usize,
    /// First packet of each PSN sent, for retransmissions.
    first_of: HashMap<u32, usize>,
    outstanding: Vec<Outstanding>,
}

type FlowKey = (String, String, u32);

/// What the reader of a capture knows besides its frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Known {
    /// The path MTU (else inferred from multi-packet messages).
    pub mtu: Option<usize>,
    /// The capture saw every port to the end (a lesson's does): a packet sent and never seen
    /// arriving was lost, even the last. Otherwise a packet is lost only if frames arrived at
    /// its receiver after it, since a capture that stops is not a loss.
    pub complete: bool,
}

/// Reads a capture's packets into conversations and notes.
pub fn analyse(frames: &[CapturedFrame], known: Known) -> Analysis {
    let mut a = Analysis::default();
    let start = frames.first().map(|f| f.timestamp).unwrap_or_default();
    // Sent frames that may yet be seen arriving, by their bytes.
    let mut awaiting: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
    // Packets seen arriving, by their bytes: a second arrival with no second sending is the
    // network's duplicate.
    let mut arrived: HashMap<Vec<u8>, usize> = HashMap::new();
    // Each host whose arrivals the capture shows, with the last frame that arrived there.
    let mut receivers: HashMap<String, usize> = HashMap::new();
    for (i, f) in frames.iter().enumerate() {
        let t = f.timestamp.saturating_sub(start).as_secs_f64();
        let Ok(p) = frame::parse_unverified(&f.data) else {
            a.skipped += 1;
            continue;
        };
        let (src, dst) = p.repr.ip.addrs();
        let (src, dst) = (src.to_string(), dst.to_string());
        let key = invariant(&p);
        if f.direction == Some(Direction::In) {
            receivers.insert(dst.clone(), i + 1);
            // The latest such frame sent: a retransmission has the bytes of the packet it
            // repeats, and arrives after it was sent, where the first copy may have been lost.
            let from = awaiting.get_mut(&key).and_then(|v| v.pop());
            if let Some(k) = from {
                a.packets[k].arrival = Some(i + 1);
                a.packets[k].arrived_at = Some(t);
                a.packets[k].arrived_ce = p.repr.ip.ecn() == 3;
                arrived.insert(key, k);
                continue;
            }
        }
        let duplicate_of = match f.direction {
            Some(Direction::In) => arrived.get(&key).map(|&k| a.packets[k].number),
            _ => None,
        };
        if f.direction == Some(Direction::Out) {
            awaiting.entry(key).or_default().push(a.packets.len());
        }
        a.packets.push(Packet {
            number: i + 1,
            arrival: None,
            at: t,
            arrived_at: None,
            src,
            dst,
            lost: false,
            unseen: false,
            duplicate_of,
            arrived_ce: false,
            bytes: f.data.clone(),
            original_len: f.original_len,
            notes: Vec::new(),
        });
    }
    // Lost: seen leaving, never arriving, though the capture saw frames arrive at its
    // receiver after it. A capture that stops is not a loss: a packet sent after the last
    // arrival it shows at its receiver is only not seen.
    for p in &mut a.packets {
        let missing = frames[p.number - 1].direction == Some(Direction::Out) && p.arrival.is_none();
        let last = receivers.get(&p.dst);
        // A capture of every port to the end knows, even where nothing at all arrived.
        p.lost = missing && (known.complete || last.is_some_and(|&last| last > p.number));
        p.unseen = missing && last.is_some() && !p.lost;
    }
    a.mtu = known.mtu.or_else(|| inferred_mtu(&a.packets));
    let peers = annotate(&mut a);
    a.conversations = conversations(&a.packets, &peers);
    a
}

/// What a packet keeps from port to port: the bytes its ICRC covers, with the fields that
/// change in flight masked as the ICRC masks them (ECN and DSCP, TTL, the checksums, the BTH's
/// FECN and BECN), so that a packet marked CE on the way is still the packet that was sent.
fn invariant(p: &ParsedFrame<'_>) -> Vec<u8> {
    let l3 = &p.bytes()[p.layout.ip..p.layout.end];
    let mut prefix = [0u8; softrnic_wire::icrc::MAX_PREFIX_LEN];
    match softrnic_wire::icrc::masked_prefix(l3, &mut prefix) {
        Ok(n) => {
            let headers = n - softrnic_wire::icrc::MASKED_LRH.len();
            let mut key = prefix[..n].to_vec();
            key.extend_from_slice(&l3[headers.min(l3.len())..]);
            key
        }
        Err(_) => l3.to_vec(),
    }
}

/// The largest payload of a FIRST or MIDDLE packet: every one is a full path MTU.
fn inferred_mtu(packets: &[Packet]) -> Option<usize> {
    packets
        .iter()
        .filter_map(|p| {
            let f = p.parsed()?;
            let info = f.repr.bth.opcode.info();
            matches!(info.position, Position::First | Position::Middle).then(|| f.payload().len())
        })
        .max()
}

fn note(p: &mut Packet, mark: Mark, text: String) {
    p.notes.push(Note { mark, text });
}

/// Frame numbers, as the notes name them: "frame 3" or "frames 3 to 7".
fn frames_named(numbers: &[usize]) -> String {
    match numbers {
        [] => String::new(),
        [n] => format!("frame {n}"),
        [first, .., last] => format!("frames {first} to {last}"),
    }
}

/// QP ends known to talk to each other: a responder's QP and the requester's it answers.
type Peers = HashMap<End, End>;

/// Walks the packets in order, keeping each request flow's state; returns the QP pairs that
/// its responses show.
fn annotate(a: &mut Analysis) -> Peers {
    let mtu = a.mtu;
    let mut flows: HashMap<FlowKey, Flow> = HashMap::new();
    // A response flow's request flow, once found.
    let mut answers: HashMap<FlowKey, FlowKey> = HashMap::new();
    // Each response flow's responses by (opcode, PSN), with the first frame of each.
    let mut sent_before: HashMap<FlowKey, HashMap<(u8, u32), usize>> = HashMap::new();
    // CE-marked packets not yet answered by a CNP: (from, to) -> frame.
    let mut marked: HashMap<(String, String), usize> = HashMap::new();
    // What happened at each responder, to be read in the order it happened there.
    // (The frame it happened at, then 0 for an arrival or 1 for what a NAK says after it.)
    let mut at_responder: Vec<((usize, u8), FlowKey, AtResponder)> = Vec::new();
    for i in 0..a.packets.len() {
        let Some(f) = a.packets[i].parsed() else {
            continue;
        };
        let repr = f.repr;
        let icrc_ok = f.verify_icrc().is_ok();
        let info = repr.bth.opcode.info();
        let p = &mut a.packets[i];
        let (src, dst) = (p.src.clone(), p.dst.clone());
        if !icrc_ok {
            note(p, Mark::BadIcrc, "ICRC wrong: the receiver drops it".into());
        }
        if p.lost {
            note(p, Mark::Lost, "lost: sent, never arrived".into());
        }
        if p.unseen {
            let text = "not seen (capture ends): in flight when the capture stopped, lost or not";
            note(p, Mark::Unseen, text.into());
        }
        if let Some(n) = p.duplicate_of {
            note(
                p,
                Mark::Duplicate,
                format!("arrived again: the network duplicated frame {n}, sent once"),
            );
        }
        if repr.ip.ecn() == 3 || p.arrived_ce {
            let text = if p.arrived_ce && repr.ip.ecn() != 3 {
                "ECN CE on arrival: a congested switch marked it on the way; the receiver tells the sender with a CNP (one per QP at most every few µs)"
            } else {
                "ECN CE: a congested switch marked it; the receiver tells the sender with a CNP (one per QP at most every few µs)"
            };
            note(p, Mark::Congestion, text.into());
            marked.entry((src.clone(), dst.clone())).or_insert(p.number);
        }
        if info.operation == Operation::Cnp {
            let text = match marked.remove(&(dst.clone(), src.clone())) {
                Some(n) => format!(
                    "CNP to QP {:#x}: answers the CE marks from frame {n} on; a sender with DCQCN slows down",
                    repr.bth.dest_qp
                ),
                None => format!(
                    "CNP to QP {:#x}: a sender with DCQCN slows down",
                    repr.bth.dest_qp
                ),
            };
            note(p, Mark::Congestion, text);
            continue;
        }
        let reliable = matches!(info.transport, Transport::Rc | Transport::Xrc);
        if !matches!(
            info.transport,
            Transport::Rc | Transport::Xrc | Transport::Uc
        ) {
            continue;
        }
        let psn = repr.bth.psn;
        if !info.operation.is_response() {
            let key = (src, dst, repr.bth.dest_qp);
            let flow = flows.entry(key.clone()).or_default();
            let last = request(p, flow, &repr, mtu, reliable);
            // What the responder saw: the packets that reached it intact, when they did.
            if !p.lost && !p.unseen && icrc_ok {
                let arrived = AtResponder::Arrived {
                    i,
                    psn,
                    last,
                    reliable,
                };
                at_responder.push(((p.arrival.unwrap_or(p.number), 0), key, arrived));
            }
            continue;
        }
        // A response: find the requests it answers.
        let rkey = (src.clone(), dst.clone(), repr.bth.dest_qp);
        let fkey = match answers.get(&rkey) {
            Some(k) => k.clone(),
            None => {
                let Some(k) = flows
                    .iter()
                    .filter(|((s, d, _), _)| *s == dst && *d == src)
                    // The flow whose latest request this PSN answers; else the nearest PSN.
                    .min_by_key(|(_, fl)| {
                        let latest = fl
                            .outstanding
                            .iter()
                            .filter(|o| {
                                !o.done && psn_diff(psn, o.first) >= 0 && psn_diff(o.last, psn) >= 0
                            })
                            .map(|o| o.packet)
                            .max();
                        let nearest = fl
                            .outstanding
                            .iter()
                            .map(|o| psn_diff(psn, o.first).unsigned_abs())
                            .min()
                            .unwrap_or(u32::MAX);
                        (latest.is_none(), std::cmp::Reverse(latest), nearest)
                    })
                    .map(|(k, _)| k.clone())
                else {
                    continue;
                };
                answers.insert(rkey.clone(), k.clone());
                k
            }
        };
        let Some(flow) = flows.get_mut(&fkey) else {
            continue;
        };
        // A response the responder sent before: it answers a duplicate request again.
        let again = sent_before.entry(rkey).or_default();
        let first = *again
            .entry((repr.bth.opcode as u8, psn))
            .or_insert(a.packets[i].number);
        // (ACKs repeat by nature: what one adds is said below.)
        if first != a.packets[i].number && info.operation != Operation::Acknowledge {
            let text = if info.operation == Operation::AtomicAcknowledge {
                format!(
                    "the responder answers the repeated atomic with the result it saved in frame {first}: it does not execute it twice (IBA 9.4.5)"
                )
            } else {
                format!(
                    "sent again (first in frame {first}): the responder answers the duplicate request again"
                )
            };
            let mark = if info.operation == Operation::AtomicAcknowledge {
                Mark::Replay
            } else {
                Mark::Retransmission
            };
            note(&mut a.packets[i], mark, text);
        }
        // A lost response tells the requester nothing: say only what it answered.
        let expects = if a.packets[i].lost {
            let mut copy = Flow {
                outstanding: flow.outstanding.clone(),
                ..Flow::default()
            };
            response(a, i, &mut copy, &repr, psn)
        } else {
            response(a, i, flow, &repr, psn)
        };
        // Sent or not seen arriving, a NAK says what its responder did. It may leave well
        // after the arrival it answers, behind other responses: an RNR NAK refused the latest
        // arrival of its PSN before it, and takes effect there.
        let nak = a.packets[i].number;
        let at = match expects {
            Some(Expects::Refused(psn)) => at_responder
                .iter()
                .filter(|(at, k, e)| {
                    *k == fkey
                        && at.0 < nak
                        && matches!(e, AtResponder::Arrived { psn: p, .. } if *p == psn)
                })
                .map(|&((at, _), _, _)| at)
                .max()
                .unwrap_or(nak),
            _ => nak,
        };
        if let Some(e) = expects {
            at_responder.push(((at, 1), fkey, AtResponder::Said(e)));
        }
    }
    at_responder.sort_by_key(|&(at, _, _)| at);
    for (_, key, what) in at_responder {
        let Some(flow) = flows.get_mut(&key) else {
            continue;
        };
        match what {
            AtResponder::Said(Expects::Refused(psn)) => flow.expected = Some(psn),
            // What the arrivals showed stands; a sequence NAK starts a view they did not.
            AtResponder::Said(Expects::Next(psn)) => {
                flow.expected.get_or_insert(psn);
            }
            AtResponder::Arrived {
                i,
                psn,
                last,
                reliable,
            } => arrive(&mut a.packets[i], flow, psn, last, reliable),
        }
    }
    let mut peers = Peers::new();
    for ((rs, rd, rq), (qs, qd, qq)) in answers {
        let (requester, responder) = (End::new(&rd, rq), End::new(&qd, qq));
        debug_assert!(rs == qd && qs == rd);
        peers.insert(requester.clone(), responder.clone());
        peers.insert(responder, requester);
    }
    peers
}

/// What a responder saw or said, for its view of a request flow.
enum AtResponder {
    /// A request (`a.packets[i]`, its PSNs `psn` to `last`) reached it.
    Arrived {
        i: usize,
        psn: u32,
        last: u32,
        reliable: bool,
    },
    /// What one of its NAKs says.
    Said(Expects),
}

/// What a NAK says the responder expects next.
#[derive(Debug, Clone, Copy)]
enum Expects {
    /// An RNR NAK: it did not take this PSN, and expects it again.
    Refused(u32),
    /// A sequence error NAK: this PSN.
    Next(u32),
}

/// A request as its sender sent it: what it asks, whether it is new or sent again. Returns
/// the last PSN it takes.
fn request(
    p: &mut Packet,
    flow: &mut Flow,
    repr: &softrnic_wire::FrameRepr,
    mtu: Option<usize>,
    reliable: bool,
) -> u32 {
    let info = repr.bth.opcode.info();
    let psn = repr.bth.psn;
    // PSNs it takes: one, or one per response packet for a READ (9.7.2).
    let reth_len = repr.ext.reth.map_or(0, |r| r.dma_len as usize);
    let span = match info.operation {
        Operation::RdmaReadRequest => match mtu {
            Some(m) if m > 0 => reth_len.div_ceil(m).max(1) as u32,
            _ => 1,
        },
        _ => 1,
    };
    let last = psn_add(psn, span - 1);
    if info.operation == Operation::RdmaReadRequest {
        let text = if span > 1 {
            format!(
                "READ of {reth_len} bytes: expects {span} responses, PSNs {psn:#08x} to {last:#08x}"
            )
        } else {
            format!("READ of {reth_len} bytes: expects one response, PSN {psn:#08x}")
        };
        note(p, Mark::Request, text);
    }
    // The sender's view: sent before? (Not for the network's copy of a packet.)
    match flow.first_of.get(&psn) {
        _ if p.duplicate_of.is_some() => {}
        Some(&n) if n != p.number => note(
            p,
            Mark::Retransmission,
            format!("retransmission of frame {n} (PSN {psn:#08x})"),
        ),
        _ => {
            flow.first_of.insert(psn, p.number);
        }
    }
    flow.start.get_or_insert(psn);
    if reliable && !flow.outstanding.iter().any(|o| o.first == psn) {
        flow.outstanding.push(Outstanding {
            first: psn,
            last,
            packet: p.number,
            op: info.operation,
            next_response: psn,
            done: false,
        });
    }
    last
}

/// A request as it reached the responder, in the order requests reached it: in sequence,
/// late (overtaken by one sent after it), beyond a gap, or a duplicate.
fn arrive(p: &mut Packet, flow: &mut Flow, psn: u32, last: u32, reliable: bool) {
    if p.number < flow.latest_arrived {
        let text = format!(
            "late: frame {} overtook it, sent after it and arriving before it",
            flow.latest_arrived
        );
        note(p, Mark::Late, text);
    }
    flow.latest_arrived = flow.latest_arrived.max(p.number);
    // The first PSN sent is the first expected, even if that packet never arrived.
    let expected = *flow.expected.get_or_insert(flow.start.unwrap_or(psn));
    match psn_diff(psn, expected) {
        0 => flow.expected = Some(psn_add(last, 1)),
        // RC's responder drops what is beyond a gap and waits for the missing PSN (9.7.5.1.1);
        // UC's has no resends to wait for, and takes up the sequence from here.
        d if d > 0 => {
            let missing = if d == 1 { " is" } else { "s are" };
            let then = if reliable {
                "it drops it (its NAK, sent once, asks for the missing PSN)"
            } else {
                flow.expected = Some(psn_add(last, 1));
                "UC resends nothing, so the message they belonged to is dropped"
            };
            let text = format!(
                "gap: the receiver expected PSN {expected:#08x}, {d} packet{missing} missing; {then}"
            );
            note(p, Mark::Gap, text);
        }
        _ if reliable => note(
            p,
            Mark::Duplicate,
            format!(
                "duplicate: the responder has it (it expects PSN {expected:#08x}) and answers it again"
            ),
        ),
        _ => note(
            p,
            Mark::Duplicate,
            format!("duplicate: the receiver expects PSN {expected:#08x}"),
        ),
    }
}

/// A response: what it answers, and what that means for the requester.
/// Returns what the responder says it expects next, where the response says (a NAK's).
fn response(
    a: &mut Analysis,
    i: usize,
    flow: &mut Flow,
    repr: &softrnic_wire::FrameRepr,
    psn: u32,
) -> Option<Expects> {
    let info = repr.bth.opcode.info();
    let aeth = repr.ext.aeth;
    let mut notes: Vec<Note> = Vec::new();
    let mut say = |mark, text: String| notes.push(Note { mark, text });
    let mut expects = None;
    // Requests a READ still lacks responses to, before this PSN: implied NAKs (9.9.2.1).
    let implied = |flow: &Flow, psn: u32| -> Option<(usize, u32)> {
        flow.outstanding.iter().find_map(|o| {
            (o.op == Operation::RdmaReadRequest && !o.done && psn_diff(psn, o.last) > 0)
                .then_some((o.packet, o.next_response))
        })
    };
    match info.operation {
        Operation::RdmaReadResponse | Operation::AtomicAcknowledge => {
            if let Some((n, from)) = implied(flow, psn) {
                say(
                    Mark::ImpliedNak,
                    format!(
                        "implied NAK: the READ in frame {n} still lacks its response at PSN {from:#08x}; the requester reads again from there"
                    ),
                );
            }
            let Some(o) = flow
                .outstanding
                .iter_mut()
                .find(|o| psn_diff(psn, o.first) >= 0 && psn_diff(o.last, psn) >= 0)
            else {
                say(
                    Mark::Response,
                    "answers no outstanding request (a ghost response)".into(),
                );
                attach(a, i, notes);
                return None;
            };
            if info.operation == Operation::AtomicAcknowledge {
                o.done = true;
                let orig = repr.ext.atomic_ack_eth.map_or(0, |x| x.orig);
                let what = if o.op == Operation::FetchAdd {
                    "FETCH_ADD"
                } else {
                    "COMPARE_SWAP"
                };
                say(
                    Mark::Response,
                    format!(
                        "answer to the {what} in frame {}: the target held {orig}",
                        o.packet
                    ),
                );
            } else {
                let total = psn_diff(o.last, o.first) + 1;
                let k = psn_diff(psn, o.first) + 1;
                let d = psn_diff(psn, o.next_response);
                if d > 0 {
                    say(
                        Mark::Gap,
                        format!(
                            "responses from PSN {:#08x} are missing before it",
                            o.next_response
                        ),
                    );
                }
                if o.op == Operation::RdmaReadRequest {
                    say(
                        Mark::Response,
                        format!("response {k} of {total} to the READ in frame {}", o.packet),
                    );
                } else {
                    let what = if o.op == Operation::Flush {
                        "FLUSH"
                    } else {
                        "ATOMIC WRITE"
                    };
                    say(
                        Mark::Response,
                        format!("answer to the {what} in frame {}", o.packet),
                    );
                }
                if d >= 0 {
                    o.next_response = psn_add(psn, 1);
                }
                if psn == o.last {
                    o.done = true;
                }
            }
            // Everything before the request it answers is acknowledged too (9.7.5.1.3).
            for o in flow.outstanding.iter_mut() {
                if psn_diff(psn, o.last) > 0
                    && !matches!(
                        o.op,
                        Operation::RdmaReadRequest | Operation::CompareSwap | Operation::FetchAdd
                    )
                {
                    o.done = true;
                }
            }
        }
        Operation::Acknowledge => {
            let Some(aeth) = aeth else {
                attach(a, i, notes);
                return None;
            };
            match aeth.syndrome {
                Syndrome::Ack(_) => {
                    if let Some((n, from)) = implied(flow, psn) {
                        say(
                            Mark::ImpliedNak,
                            format!(
                                "implied NAK: it acknowledges past the READ in frame {n}, which still lacks its response at PSN {from:#08x}; the requester reads again from there"
                            ),
                        );
                    }
                    let covered = cover(flow, |o| psn_diff(psn, o.last) >= 0);
                    if covered.is_empty() {
                        say(
                            Mark::Covers,
                            format!(
                                "acknowledges nothing new (a repeat for a duplicate): up to PSN {psn:#08x}"
                            ),
                        );
                    } else {
                        say(
                            Mark::Covers,
                            format!(
                                "acknowledges {} (up to PSN {psn:#08x}); MSN {}: messages the responder completed",
                                frames_named(&covered),
                                aeth.msn
                            ),
                        );
                    }
                }
                Syndrome::Nak(NakCode::PsnSequenceError) => {
                    // 9.7.5.1.1: its PSN is the one the responder expected; all before it is
                    // acknowledged.
                    let covered = cover(flow, |o| psn_diff(psn, o.last) > 0);
                    let mut text = format!(
                        "NAK, PSN sequence error: the responder expected PSN {psn:#08x}; the requester goes back and resends from there (go-back-N)"
                    );
                    if !covered.is_empty() {
                        text.push_str(&format!("; acknowledges {}", frames_named(&covered)));
                    }
                    say(Mark::Nak, text);
                    expects = Some(Expects::Next(psn));
                }
                Syndrome::RnrNak(t) => {
                    cover(flow, |o| psn_diff(psn, o.last) > 0);
                    // The responder did not take this PSN: it expects it again.
                    expects = Some(Expects::Refused(psn));
                    say(
                        Mark::RnrNak,
                        format!(
                            "RNR NAK: the responder had no receive buffer for PSN {psn:#08x}; the requester waits {} µs and resends from it",
                            t.micros()
                        ),
                    );
                }
                Syndrome::Nak(code) => {
                    let request = flow
                        .outstanding
                        .iter()
                        .find(|o| psn_diff(psn, o.first) >= 0 && psn_diff(o.last, psn) >= 0)
                        .map(|o| format!(" to the request in frame {}", o.packet))
                        .unwrap_or_default();
                    say(
                        Mark::Nak,
                        format!(
                            "NAK, {}{request} (PSN {psn:#08x}): the request fails, and the requester's QP goes to the error state",
                            nak_cause(code)
                        ),
                    );
                }
                Syndrome::Reserved(b) => say(Mark::Nak, format!("reserved syndrome {b:#04x}")),
            }
        }
        _ => {}
    }
    attach(a, i, notes);
    expects
}

fn attach(a: &mut Analysis, i: usize, notes: Vec<Note>) {
    a.packets[i].notes.extend(notes);
}

/// Marks done the outstanding requests `covered` picks (not READs and atomics, which only
/// their responses complete); returns their frame numbers.
fn cover(flow: &mut Flow, covered: impl Fn(&Outstanding) -> bool) -> Vec<usize> {
    let mut numbers = Vec::new();
    for o in flow.outstanding.iter_mut().filter(|o| !o.done) {
        let needs_response = matches!(
            o.op,
            Operation::RdmaReadRequest | Operation::CompareSwap | Operation::FetchAdd
        );
        if covered(o) && !needs_response {
            o.done = true;
            numbers.push(o.packet);
        }
    }
    numbers
}

fn nak_cause(code: NakCode) -> &'static str {
    match code {
        NakCode::PsnSequenceError => "PSN sequence error",
        NakCode::InvalidRequest => "invalid request (an opcode or length the QP does not take)",
        NakCode::RemoteAccessError => "remote access error (a bad R_Key, range or access right)",
        NakCode::RemoteOperationalError => "remote operational error (the responder failed)",
        NakCode::InvalidRdRequest => "invalid RD request",
        NakCode::Reserved(_) => "reserved NAK code",
    }
}

/// Packets grouped by QP pair, each group in the order sent.
fn conversations(packets: &[Packet], peers: &Peers) -> Vec<Conversation> {
    let mut out: Vec<Conversation> = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        let Some(f) = p.parsed() else { continue };
        let to = End::new(&p.dst, f.repr.bth.dest_qp);
        let from = match (f.repr.ext.deth, peers.get(&to)) {
            (Some(d), _) => End::new(&p.src, d.src_qp),
            (None, Some(peer)) if peer.ip == p.src => peer.clone(),
            _ => End {
                ip: p.src.clone(),
                qp: None,
            },
        };
        match out.iter_mut().find(|c| {
            (c.ends[0] == from && c.ends[1] == to) || (c.ends[0] == to && c.ends[1] == from)
        }) {
            Some(c) => {
                let rightward = c.ends[1] == to;
                c.packets.push((i, rightward));
            }
            None => out.push(Conversation {
                ends: [from, to],
                packets: vec![(i, true)],
            }),
        }
    }
    out
}

/// Each packet's notes by the frame number it was first seen at, for `dissect`.
pub fn notes_by_frame(a: &Analysis) -> HashMap<usize, Vec<String>> {
    a.packets
        .iter()
        .filter(|p| !p.notes.is_empty())
        .map(|p| (p.number, p.notes.iter().map(|n| n.text.clone()).collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two QPs of one device talk to each other through `lo`: both ends have one address, so
    /// the ends are told apart by QP, each frame is seen leaving and arriving on the same
    /// device, and each appears once.
    #[test]
    fn same_host_qps_are_one_conversation_of_two_ends() {
        use softrnic_wire::sample::{Ip, example};
        use softrnic_wire::{IpRepr, Ipv4Address, Opcode};
        let lo = Ipv4Address::new(127, 0, 0, 1);
        let frame = |op: Opcode, dest_qp: u32, psn: u32| {
            let mut s = example(op, Ip::V4, psn, 8);
            s.repr.ip = IpRepr::v4(lo, lo);
            s.repr.bth.dest_qp = dest_qp;
            s.frame()
        };
        let packets = [
            frame(Opcode::RcSendOnly, 0x12, 0x100),
            frame(Opcode::RcAcknowledge, 0x11, 0x100),
            frame(Opcode::RcSendOnly, 0x11, 0x500),
            frame(Opcode::RcAcknowledge, 0x12, 0x500),
        ];
        let mut frames = Vec::new();
        for (i, data) in packets.iter().enumerate() {
            for direction in [Direction::Out, Direction::In] {
                frames.push(CapturedFrame {
                    direction: Some(direction),
                    interface: Some("srnic0".into()),
                    ..CapturedFrame::new(std::time::Duration::from_micros(i as u64), data.clone())
                });
            }
        }
        let a = analyse(&frames, Known::default());
        assert_eq!(a.packets.len(), 4, "each frame once");
        assert!(
            a.packets
                .iter()
                .all(|p| p.arrival == Some(p.number + 1) && !p.lost)
        );
        assert_eq!(a.conversations.len(), 1);
        let c = &a.conversations[0];
        let qps: Vec<Option<u32>> = c.ends.iter().map(|e| e.qp).collect();
        assert_eq!(qps, [Some(0x11), Some(0x12)]);
        let ways: Vec<bool> = c.packets.iter().map(|&(_, right)| right).collect();
        assert_eq!(ways, [true, false, false, true]);
        assert!(
            a.packets[1].notes[0]
                .text
                .starts_with("acknowledges frame 1 ")
        );
        assert!(
            a.packets[3].notes[0]
                .text
                .starts_with("acknowledges frame 5 ")
        );
    }

    /// A capture that stops while a packet is in flight: the packet sent after the last arrival
    /// the capture shows at its receiver is not seen arriving, which is not a loss; one sent
    /// before an arrival it shows, and never seen arriving, is lost.
    #[test]
    fn a_packet_in_flight_when_the_capture_ends_is_not_seen_not_lost() {
        use softrnic_wire::Opcode;
        use softrnic_wire::sample::{Ip, example};
        let send = |psn: u32| example(Opcode::RcSendOnly, Ip::V4, psn, 8).frame();
        let at = |us: u64, direction: Direction, data: Vec<u8>| CapturedFrame {
            direction: Some(direction),
            ..CapturedFrame::new(std::time::Duration::from_micros(us), data)
        };
        // PSN 1 is lost (PSN 2 arrives after it); PSN 3 leaves as the capture ends.
        let frames = [
            at(0, Direction::Out, send(1)),
            at(1, Direction::Out, send(2)),
            at(2, Direction::In, send(2)),
            at(3, Direction::Out, send(3)),
        ];
        let a = analyse(&frames, Known::default());
        let fates: Vec<(bool, bool)> = a.packets.iter().map(|p| (p.lost, p.unseen)).collect();
        assert_eq!(fates, [(true, false), (false, false), (false, true)]);
        let last = &a.packets[2];
        assert!(
            last.notes
                .iter()
                .any(|n| n.mark == Mark::Unseen && n.text.starts_with("not seen (capture ends)")),
            "{:?}",
            last.notes
        );
        assert!(!last.notes.iter().any(|n| n.mark == Mark::Lost));
        let ladder = crate::ladder::text(&a);
        let row = ladder
            .lines()
            .find(|l| l.trim_start().starts_with("4 "))
            .expect("frame 4");
        assert!(row.contains("SEND_ONLY 000003 A ---?"), "{ladder}");
        // A capture that saw every port to the end (a lesson's) knows it was lost, even when
        // nothing at all arrived.
        let complete = Known {
            complete: true,
            ..Known::default()
        };
        let a = analyse(&frames, complete);
        assert!(a.packets[2].lost && !a.packets[2].unseen);
        let none_arrived: Vec<CapturedFrame> = frames
            .iter()
            .filter(|f| f.direction == Some(Direction::Out))
            .cloned()
            .collect();
        let a = analyse(&none_arrived, complete);
        assert!(a.packets.iter().all(|p| p.lost), "everything lost");
        assert!(
            a.packets
                .iter()
                .all(|p| !p.notes.iter().any(|n| n.mark == Mark::Duplicate))
        );
    }

    #[test]
    fn psn_distance_wraps() {
        assert_eq!(psn_diff(5, 3), 2);
        assert_eq!(psn_diff(3, 5), -2);
        assert_eq!(psn_diff(1, 0xff_fffe), 3);
        assert_eq!(psn_diff(0xff_fffe, 1), -3);
        assert_eq!(psn_add(0xff_ffff, 1), 0);
    }
}
