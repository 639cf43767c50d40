//! Frames as a capture holds them: cut short by its snapshot length, not RoCEv2 at all, or
//! RoCEv2 with a field that is wrong. The dissector shows every header that is good, says which
//! field is not and why, and shows a cut frame as far as it goes.
//!
//! A frame that does not parse is repaired in a copy, one error at a time (the snapshot's missing
//! bytes as zeros, a wrong IP checksum or length set right), each repair recorded as a [`Mark`]
//! on the field; the copy is parsed, and the original's bytes are shown with the marks.

use super::{Mark, Rows, bth, dissect_parsed, ethernet, hexdump, outer};
use crate::frame;
use crate::{Error, ROCEV2_UDP_PORT};
use core::fmt::{self, Write};
use smoltcp::wire::Ipv4Packet;

const ETH_LEN: usize = 14;
/// Repairs tried before the frame is shown as malformed: more than one error of each kind.
const MAX_REPAIRS: usize = 6;

/// Why a frame is not RoCEv2 (and so is skipped), or `None` if it is one, as far as its bytes
/// go: an Ethernet frame to UDP port 4791.
pub fn not_roce(frame: &[u8]) -> Option<String> {
    let be16 = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let mut ip = ETH_LEN;
    let mut ethertype = be16(12)?;
    if ethertype == crate::vlan::TPID {
        ethertype = be16(16)?;
        ip += 4;
    }
    let (proto, udp) = match ethertype {
        0x0800 => (
            *frame.get(ip + 9)?,
            ip + usize::from(frame.get(ip)? & 0xf) * 4,
        ),
        0x86dd => (*frame.get(ip + 6)?, ip + 40),
        0x0806 => return Some("ARP".into()),
        0x8915 => return Some("RoCE v1 (EtherType 0x8915), not v2".into()),
        0x88cc => return Some("LLDP".into()),
        t => return Some(format!("EtherType {t:#06x}, not IP")),
    };
    let family = if ethertype == 0x0800 { "IPv4" } else { "IPv6" };
    match proto {
        17 => {}
        6 => return Some(format!("TCP over {family}")),
        1 | 58 => return Some(format!("ICMP over {family}")),
        p => return Some(format!("IP protocol {p} over {family}")),
    }
    match be16(udp + 2)? {
        ROCEV2_UDP_PORT => None,
        53 => Some("DNS (UDP port 53)".into()),
        p => Some(format!("UDP to port {p}, not 4791")),
    }
}

/// Writes every field of a frame from a capture. `original_len` is its length on the wire (more
/// than `frame.len()` when the snapshot length cut it): the missing fields say "not captured".
pub fn dissect_captured<W: Write>(frame: &[u8], original_len: usize, out: &mut W) -> fmt::Result {
    if let Some(why) = not_roce(frame) {
        return writeln!(out, "Not RoCEv2 ({why}): skipped");
    }
    if original_len > frame.len() {
        writeln!(
            out,
            "Cut by the capture's snapshot length: {} of {original_len} bytes captured",
            frame.len()
        )?;
    }
    let mut copy = frame.to_vec();
    copy.resize(original_len.max(frame.len()), 0);
    let mut marks = Vec::new();
    let error = match repaired(&mut copy, frame, &mut marks) {
        Ok(()) => {
            // Parsed at the last repair, so it parses now.
            let Ok(p) = frame::parse_unverified(&copy) else {
                return Ok(());
            };
            return dissect_parsed(&p, &mut rows(frame, &marks, out));
        }
        Err(e) => e,
    };
    writeln!(out, "Malformed frame ({} bytes): {error}", frame.len())?;
    malformed(&copy, frame, error, &mut marks, out)
}

fn rows<'a, W: Write>(frame: &'a [u8], marks: &'a [Mark], out: &'a mut W) -> Rows<'a, W> {
    Rows { frame, marks, out }
}

/// Repairs `copy` until it parses, or returns the error no repair mends.
fn repaired(copy: &mut [u8], frame: &[u8], marks: &mut Vec<Mark>) -> Result<(), Error> {
    for _ in 0..MAX_REPAIRS {
        let e = match frame::parse_unverified(copy) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        if !repair(copy, frame, e, marks) {
            return Err(e);
        }
    }
    frame::parse_unverified(copy).map(|_| ())
}

/// Where the IP header starts: after Ethernet and any 802.1Q tag.
fn ip_at(frame: &[u8]) -> usize {
    match frame.get(12..14) {
        Some([0x81, 0x00]) => ETH_LEN + 4,
        _ => ETH_LEN,
    }
}

fn put16(copy: &mut [u8], at: usize, v: u16) {
    if let Some(b) = copy.get_mut(at..at + 2) {
        b.copy_from_slice(&v.to_be_bytes());
    }
}

/// Mends one error in `copy`, marking the field of `frame` that is wrong; false if it cannot.
fn repair(copy: &mut [u8], frame: &[u8], e: Error, marks: &mut Vec<Mark>) -> bool {
    let ip = ip_at(copy);
    let v4 = copy.get(ip).is_some_and(|b| b >> 4 == 4);
    let ip_len = if v4 { 20 } else { 40 };
    let mark =
        |marks: &mut Vec<Mark>, at, field, note: String| marks.push(Mark { at, field, note });
    match e {
        Error::BadIpChecksum if copy.get(ip..ip + 1) == Some(&[0x45]) && copy.len() >= ip + 20 => {
            let mut p = Ipv4Packet::new_unchecked(&mut copy[ip..]);
            p.fill_checksum();
            let right = p.checksum();
            mark(
                marks,
                ip + 10,
                "Header Checksum",
                format!("WRONG: should be {right:#06x}"),
            );
            true
        }
        Error::BadIpLength if copy.len() >= ip + ip_len => {
            // An IHL below 5 is a bad length too: only 20-byte headers reach here mended.
            if v4 && copy[ip] & 0xf != 5 {
                return false;
            }
            let have = copy.len() - ip - if v4 { 0 } else { 40 };
            let Ok(right) = u16::try_from(have) else {
                return false;
            };
            set_ip_length(copy, frame, marks, right, |says| {
                format!("WRONG: the frame holds {right} (it says {says})")
            });
            true
        }
        Error::BadUdpLength => {
            let udp = ip + ip_len;
            let says = be16(copy, udp + 4);
            // A UDP length that reaches the end of the frame says the IP length is the wrong one.
            if udp + usize::from(says) == copy.len() {
                let Some(right) = says.checked_add(if v4 { 20 } else { 0 }) else {
                    return false;
                };
                set_ip_length(copy, frame, marks, right, |ip_says| {
                    format!("WRONG: UDP and the frame say {right} (it says {ip_says})")
                });
                return true;
            }
            let end = if v4 {
                ip + usize::from(be16(copy, ip + 2))
            } else {
                ip + 40 + usize::from(be16(copy, ip + 4))
            };
            let Some(right) = end.checked_sub(udp).and_then(|n| u16::try_from(n).ok()) else {
                return false;
            };
            mark(
                marks,
                udp + 4,
                "Length",
                format!("WRONG: the IP packet leaves {right} (it says {says})"),
            );
            put16(copy, udp + 4, right);
            true
        }
        Error::BadTver(v) => {
            let b = ip + ip_len + 8 + 1;
            let Some(byte) = copy.get_mut(b) else {
                return false;
            };
            *byte &= 0xf0;
            mark(
                marks,
                b,
                "TVer",
                format!("WRONG: {v}, and IBA 9.2 allows only 0"),
            );
            true
        }
        _ => false,
    }
}

/// Sets the IP header's length field (IPv4 Total Length, IPv6 Payload Length) in `copy` to
/// `right`, marking it with `why(what it said)`, and keeps an IPv4 checksum that was right for
/// the header as sent right for the mended one (else it is marked wrong in its turn).
fn set_ip_length(
    copy: &mut [u8],
    frame: &[u8],
    marks: &mut Vec<Mark>,
    right: u16,
    why: impl Fn(u16) -> String,
) {
    let ip = ip_at(copy);
    let v4 = copy.get(ip).is_some_and(|b| b >> 4 == 4);
    let (at, field) = if v4 {
        (ip + 2, "Total Length")
    } else {
        (ip + 4, "Payload Length")
    };
    let note = why(be16(copy, at));
    marks.push(Mark { at, field, note });
    put16(copy, at, right);
    mend_checksum(copy, frame, ip, v4);
}

/// After a length is mended in `copy`, keeps its IPv4 checksum right if the sender's was right
/// for the header as sent (else the checksum is marked wrong in its turn).
fn mend_checksum(copy: &mut [u8], frame: &[u8], ip: usize, v4: bool) {
    // smoltcp's checksum reads IHL words: only 20-byte headers come here, but check.
    let twenty = |h: &[u8]| h.len() >= 20 && h[0] == 0x45;
    let good = frame
        .get(ip..)
        .is_some_and(|h| twenty(h) && Ipv4Packet::new_unchecked(h).verify_checksum());
    if v4 && good && copy.get(ip..).is_some_and(twenty) {
        Ipv4Packet::new_unchecked(&mut copy[ip..]).fill_checksum();
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map_or(0, |x| u16::from_be_bytes([x[0], x[1]]))
}

/// Shows what is good of a frame that no repair made parse, and points at what is not.
fn malformed<W: Write>(
    copy: &[u8],
    frame: &[u8],
    e: Error,
    marks: &mut Vec<Mark>,
    out: &mut W,
) -> fmt::Result {
    let ip = ip_at(copy);
    let Ok(o) = frame::parse_outer(copy) else {
        // Wrong in IP: Ethernet is good, the rest is bytes.
        if frame.len() < ip {
            return hexdump(frame, out);
        }
        let (at, field) = match e {
            Error::BadIpVersion(_) => (ip, "Version"),
            Error::Ipv4Options | Error::BadIpLength => (ip, "IHL"),
            Error::IpFragment => (ip + 6, "Flags/Fragment"),
            _ => (ip, "the header"),
        };
        let eth = crate::EthRepr {
            dst: crate::EthernetAddress::from_bytes(&frame[0..6]),
            src: crate::EthernetAddress::from_bytes(&frame[6..12]),
            vlan: (ip > ETH_LEN).then(|| crate::VlanTag::from_tci(be16(frame, 14))),
        };
        ethernet(&mut rows(frame, marks, out), &eth, ip)?;
        writeln!(out, "IP [bytes {ip}..]: {field} (byte {at}) is wrong: {e}")?;
        return hexdump_from(frame, ip, out);
    };
    // Wrong in the transport: the outer headers are good, then the BTH, pointing at the field.
    let b = o.udp_at + 8;
    let (at, field, note) = match e {
        Error::UnknownOpcode(op) => (b, "OpCode", format!("{op:#04x}: unknown or reserved")),
        Error::PadInconsistent => (
            b + 1,
            "PadCnt",
            "WRONG: the payload is not a multiple of 4, or shorter than the pad".into(),
        ),
        Error::PayloadNotAllowed => (b, "OpCode", "this opcode carries no payload".into()),
        _ => (b, "", String::new()),
    };
    marks.push(Mark { at, field, note });
    let mut r = rows(frame, marks, out);
    outer(&mut r, &o)?;
    if frame.len() < b + crate::BthRepr::LEN {
        writeln!(r.out, "BTH [bytes {b}..]: the frame ends inside it")?;
        return hexdump_from(frame, b, r.out);
    }
    let op = crate::Opcode::from_u8(frame[b]).map_or("unknown", |op| op.name());
    bth(&mut r, b, &format!("{:#04x} {op}", frame[b]))?;
    if e == Error::Truncated {
        writeln!(
            r.out,
            "The transport ends before the headers its opcode needs"
        )?;
    }
    hexdump_from(frame, b + crate::BthRepr::LEN, r.out)
}

/// A hex dump of the bytes from `at` on, with their offsets in the frame.
fn hexdump_from<W: Write>(frame: &[u8], at: usize, out: &mut W) -> fmt::Result {
    let rest = frame.get(at..).unwrap_or(&[]);
    if rest.is_empty() {
        return Ok(());
    }
    writeln!(out, "Bytes {at}..{}:", frame.len())?;
    for (i, row) in rest.chunks(16).enumerate() {
        writeln!(out, "  {:4}  {}", at + i * 16, super::hex(row))?;
    }
    Ok(())
}

/// One line for a frame from a capture, as [`super::summary`] gives for a whole one: a frame
/// that is not RoCEv2 says so, and a cut one is summed up as far as it goes.
pub fn summary_captured(frame: &[u8], original_len: usize) -> String {
    if let Some(why) = not_roce(frame) {
        return format!("not RoCEv2 ({why}), skipped");
    }
    let mut copy = frame.to_vec();
    copy.resize(original_len.max(frame.len()), 0);
    let mut marks = Vec::new();
    match repaired(&mut copy, frame, &mut marks) {
        Ok(()) => {}
        Err(e) => return format!("malformed ({} bytes): {e}", frame.len()),
    }
    let Ok(p) = frame::parse_unverified(&copy) else {
        return format!("malformed ({} bytes)", frame.len());
    };
    let mut line = super::summary_parsed(&p, frame);
    if original_len > frame.len() {
        line.push_str(&format!(" (cut: {} of {original_len} bytes)", frame.len()));
    }
    for m in &marks {
        line.push_str(&format!(" [{} {}]", m.field, m.note));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample;
    use proptest::prelude::*;

    proptest! {
        /// Any sample frame, with any bytes changed and cut anywhere, is shown without a panic;
        /// a RoCEv2 frame is never called skipped, and a cut one says so.
        #[test]
        fn damaged_frames_never_panic(
            which in 0usize..200,
            changes in proptest::collection::vec((0usize..200, any::<u8>()), 0..4),
            cut in 0usize..200,
        ) {
            let all = sample::capture();
            let mut frame = all[which % all.len()].frame();
            for (at, b) in changes {
                let n = frame.len();
                frame[at % n] = b;
            }
            let cut = cut.min(frame.len());
            let mut text = String::new();
            dissect_captured(&frame[..cut], frame.len(), &mut text).unwrap();
            let line = summary_captured(&frame[..cut], frame.len());
            prop_assert!(!text.is_empty() && !line.is_empty());
            if cut < frame.len() && not_roce(&frame[..cut]).is_none() {
                prop_assert!(text.starts_with("Cut by"), "{}", text);
            }
        }
    }
}
