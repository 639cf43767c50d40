//! A dissector for teaching: every field of a RoCEv2 frame with its offset, raw bytes, value and
//! what it means, or one line per packet for following a conversation.
//!
//! It allocates freely (it is not on a hot path) and, like the parser, never panics: a frame that
//! does not parse is shown as a hex dump with the reason.

use crate::frame::{self, IpRepr, Layout, ParsedFrame};
use crate::opcode::Headers;
use crate::{Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Reth, Syndrome};
use core::fmt::{self, Write};

mod damaged;
mod mad;

pub use damaged::{dissect_captured, not_roce, summary_captured};

/// Bytes of hex per row before a field continues on the next row.
const HEX_PER_ROW: usize = 8;

struct Rows<'a, W: Write> {
    /// The frame as captured: a field past its end is "not captured".
    frame: &'a [u8],
    /// Fields to point at, with why.
    marks: &'a [Mark],
    out: &'a mut W,
}

/// A field the dissector points at (by its offset and name): it is wrong, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mark {
    at: usize,
    field: &'static str,
    note: String,
}

impl<W: Write> Rows<'_, W> {
    /// `len` bytes at `at`, with zeros for what the capture lacks (their fields say "not
    /// captured").
    fn padded(&self, at: usize, len: usize) -> Vec<u8> {
        let mut v = self.frame.get(at..).unwrap_or(&[]).to_vec();
        v.resize(len, 0);
        v
    }

    /// The big-endian 16 bits at `at`, 0 where not captured.
    fn be16(&self, at: usize) -> u16 {
        let b = self.padded(at, 2);
        u16::from_be_bytes([b[0], b[1]])
    }

    fn layer(&mut self, title: &str, start: usize, len: usize) -> fmt::Result {
        writeln!(
            self.out,
            "{title} [bytes {start}..{}, {len} bytes]",
            start + len
        )
    }

    /// One field: `at` and `len` locate its bytes in the frame.
    fn field(&mut self, at: usize, len: usize, name: &str, value: &str, note: &str) -> fmt::Result {
        let bytes = self.frame.get(at..).unwrap_or(&[]);
        let bytes = &bytes[..len.min(bytes.len())];
        let value = if bytes.len() < len {
            "(not captured)"
        } else {
            value
        };
        let mut chunks = bytes.chunks(HEX_PER_ROW);
        let first = hex(chunks.next().unwrap_or_default());
        write!(
            self.out,
            "  {at:4}  {first:<23}  {name:<16} {value:<26} {note}"
        )?;
        match self.marks.iter().find(|m| m.at == at && m.field == name) {
            Some(m) => writeln!(self.out, " <-- {}", m.note)?,
            None => writeln!(self.out)?,
        }
        for (i, chunk) in chunks.enumerate() {
            writeln!(
                self.out,
                "  {:4}  {}",
                at + (i + 1) * HEX_PER_ROW,
                hex(chunk)
            )?;
        }
        Ok(())
    }

    /// A field of some bits of the byte at `at`, shown as `1... ....`.
    fn bits(&mut self, at: usize, mask: u8, name: &str, value: &str, note: &str) -> fmt::Result {
        let byte = self.frame.get(at).copied().unwrap_or(0);
        let pattern: String = (0..8)
            .rev()
            .map(|bit| match (mask >> bit & 1, byte >> bit & 1) {
                (0, _) => '.',
                (_, 1) => '1',
                _ => '0',
            })
            .collect();
        let pattern = format!("{} {}", &pattern[..4], &pattern[4..]);
        self.field(at, 1, name, &format!("{pattern} = {value}"), note)
    }
}

/// Bytes as `0a 1b 2c`, padded as the format asks, without allocating (the dissector runs
/// on every frame of a capture and in the fuzz targets).
fn hex(bytes: &[u8]) -> Hex<'_> {
    Hex(bytes)
}

struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        // Up to 21 bytes fit a stack buffer and take the format's width and alignment; longer
        // runs are wider than any width the dissector asks for, so they stream unpadded.
        let mut buf = [b' '; 64];
        let short = self.0.len() * 3 <= buf.len() + 1;
        let mut n = 0;
        for (i, &b) in self.0.iter().enumerate() {
            if i > 0 {
                n += 1;
            }
            buf[n] = DIGITS[usize::from(b >> 4)];
            buf[n + 1] = DIGITS[usize::from(b & 15)];
            n += 2;
            if !short && n + 3 > buf.len() {
                f.write_str(core::str::from_utf8(&buf[..n]).map_err(|_| fmt::Error)?)?;
                buf = [b' '; 64];
                n = 0;
            }
        }
        let text = core::str::from_utf8(&buf[..n]).map_err(|_| fmt::Error)?;
        if short {
            f.pad(text)
        } else {
            f.write_str(text)
        }
    }
}

fn mac(addr: crate::EthernetAddress) -> String {
    let [a, b, c, d, e, f] = addr.0;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}")
}

fn yes(b: bool) -> &'static str {
    if b { "1" } else { "0" }
}

/// Writes every field of `frame`, layer by layer. A malformed frame shows its good headers and
/// points at the field that is wrong.
pub fn dissect<W: Write>(frame: &[u8], out: &mut W) -> fmt::Result {
    dissect_captured(frame, frame.len(), out)
}

/// Writes a classic 16-bytes-per-row hex dump.
pub fn hexdump<W: Write>(bytes: &[u8], out: &mut W) -> fmt::Result {
    for (i, row) in bytes.chunks(16).enumerate() {
        writeln!(out, "  {:04x}  {}", i * 16, hex(row))?;
    }
    Ok(())
}

/// Writes every layer of a parsed frame. `rows.frame` is the frame as captured: `p` may be a
/// repaired copy of it (see `damaged`), whose fields `rows.marks` points at.
fn dissect_parsed<W: Write>(p: &ParsedFrame<'_>, rows: &mut Rows<'_, W>) -> fmt::Result {
    let r = &p.repr;
    let l = &p.layout;
    let info = r.bth.opcode.info();
    outer(rows, &p.outer())?;
    bth(
        rows,
        l.bth,
        &format!("{:#04x} {}", info.opcode as u8, info.name),
    )?;
    dissect_ext(rows, info.operation, info.headers, l)?;
    body(p, rows)
}

/// The Ethernet layer, up to where the IP header starts at `ip`.
fn ethernet<W: Write>(rows: &mut Rows<'_, W>, eth: &frame::EthRepr, ip: usize) -> fmt::Result {
    rows.layer("Ethernet II", 0, ip)?;
    rows.field(0, 6, "Destination", &mac(eth.dst), "MAC of the next hop")?;
    rows.field(6, 6, "Source", &mac(eth.src), "MAC of the sender")?;
    if let Some(tag) = eth.vlan {
        rows.field(12, 2, "TPID", "0x8100", "an 802.1Q VLAN tag follows")?;
        rows.bits(
            14,
            0xe0,
            "PCP",
            &tag.pcp.to_string(),
            "priority: picks the PFC lossless class",
        )?;
        rows.bits(14, 0x10, "DEI", yes(tag.dei), "drop eligible")?;
        rows.field(
            14,
            2,
            "VID",
            &tag.vid.to_string(),
            "VLAN identifier (low 12 bits)",
        )?;
    }
    let ethertype = rows
        .frame
        .get(ip - 2..ip)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
    let name = match ethertype {
        0x0800 => "IPv4",
        0x86dd => "IPv6",
        _ => "not IP",
    };
    rows.field(
        ip - 2,
        2,
        "EtherType",
        &format!("{ethertype:#06x} ({name})"),
        "RoCEv2 rides on IP",
    )
}

/// The Ethernet, IP and UDP layers.
fn outer<W: Write>(rows: &mut Rows<'_, W>, o: &frame::Outer) -> fmt::Result {
    ethernet(rows, &o.eth, o.ip_at)?;
    let ip = o.ip_at;
    match o.ip {
        IpRepr::V4 {
            src,
            dst,
            dscp,
            ecn,
            ttl,
        } => {
            rows.layer("IPv4", ip, 20)?;
            rows.bits(ip, 0xf0, "Version", "4", "")?;
            rows.bits(ip, 0x0f, "IHL", "5 (20 bytes)", "no options")?;
            rows.bits(
                ip + 1,
                0xfc,
                "DSCP",
                &dscp.to_string(),
                "traffic class; masked in ICRC",
            )?;
            rows.bits(
                ip + 1,
                0x03,
                "ECN",
                ecn_name(ecn),
                "congestion marks; masked in ICRC",
            )?;
            let total = rows.be16(ip + 2);
            rows.field(
                ip + 2,
                2,
                "Total Length",
                &total.to_string(),
                "IP header to ICRC",
            )?;
            rows.field(ip + 4, 2, "Identification", "", "unused: never fragmented")?;
            rows.field(ip + 6, 2, "Flags/Fragment", "DF", "Don't Fragment")?;
            rows.field(
                ip + 8,
                1,
                "TTL",
                &ttl.to_string(),
                "hops left; masked in ICRC",
            )?;
            rows.field(ip + 9, 1, "Protocol", "17 (UDP)", "")?;
            let checksum = rows.be16(ip + 10);
            rows.field(
                ip + 10,
                2,
                "Header Checksum",
                &format!("{checksum:#06x}"),
                "IP header only; masked in ICRC",
            )?;
            rows.field(
                ip + 12,
                4,
                "Source",
                &src.to_string(),
                "sender; its GID is ::ffff:a.b.c.d",
            )?;
            rows.field(ip + 16, 4, "Destination", &dst.to_string(), "receiver")?;
        }
        IpRepr::V6 {
            src,
            dst,
            dscp,
            ecn,
            flow_label,
            hop_limit,
        } => {
            rows.layer("IPv6", ip, 40)?;
            rows.bits(ip, 0xf0, "Version", "6", "")?;
            rows.field(
                ip,
                2,
                "Traffic Class",
                &format!("DSCP {dscp}, ECN {}", ecn_name(ecn)),
                "masked in ICRC",
            )?;
            rows.field(
                ip + 1,
                3,
                "Flow Label",
                &format!("{flow_label:#07x}"),
                "ECMP hint; masked in ICRC",
            )?;
            let plen = rows.be16(ip + 4);
            rows.field(
                ip + 4,
                2,
                "Payload Length",
                &plen.to_string(),
                "UDP header to ICRC",
            )?;
            rows.field(ip + 6, 1, "Next Header", "17 (UDP)", "")?;
            rows.field(
                ip + 7,
                1,
                "Hop Limit",
                &hop_limit.to_string(),
                "masked in ICRC",
            )?;
            rows.field(
                ip + 8,
                16,
                "Source",
                &src.to_string(),
                "sender; also its GID",
            )?;
            rows.field(
                ip + 24,
                16,
                "Destination",
                &dst.to_string(),
                "receiver's GID",
            )?;
        }
    }

    let u = o.udp_at;
    rows.layer("UDP", u, 8)?;
    rows.field(
        u,
        2,
        "Source Port",
        &o.udp.src_port.to_string(),
        "per-QP entropy for ECMP",
    )?;
    rows.field(
        u + 2,
        2,
        "Destination Port",
        "4791",
        "IANA's port for RoCEv2",
    )?;
    rows.field(
        u + 4,
        2,
        "Length",
        &rows.be16(u + 4).to_string(),
        "UDP header to ICRC",
    )?;
    let checksum = match o.udp.checksum {
        frame::UdpChecksum::Zero => "0 (none)",
        frame::UdpChecksum::Computed => "present",
    };
    rows.field(
        u + 6,
        2,
        "Checksum",
        checksum,
        "not checked: ICRC covers data",
    )
}

/// The BTH at `b`, read from the frame's bytes; `op` names its opcode.
fn bth<W: Write>(rows: &mut Rows<'_, W>, b: usize, op: &str) -> fmt::Result {
    let raw = rows.padded(b, 12);
    let bth = Bth::new_unchecked(&raw[..]);
    rows.layer("BTH: Base Transport Header", b, 12)?;
    rows.field(
        b,
        1,
        "OpCode",
        op,
        "top 3 bits: transport; low 5: operation",
    )?;
    let byte = rows.padded(b, 1)[0];
    let transport = match byte >> 5 {
        0 => "RC",
        1 => "UC",
        2 => "RD",
        3 => "UD",
        4 => "CNP",
        5 => "XRC",
        _ => "reserved",
    };
    rows.bits(
        b,
        0xe0,
        "  transport",
        &format!("{} ({transport})", byte >> 5),
        "the service: RC, UC, RD, UD, CNP, XRC",
    )?;
    rows.bits(
        b,
        0x1f,
        "  operation",
        &format!("{:#04x}", byte & 0x1f),
        "what, and where in its message",
    )?;
    rows.bits(
        b + 1,
        0x80,
        "SE",
        yes(bth.solicited()),
        "solicited event: wake the receiver",
    )?;
    rows.bits(
        b + 1,
        0x40,
        "M",
        yes(bth.mig_req()),
        "MigReq: path migration state",
    )?;
    rows.bits(
        b + 1,
        0x30,
        "PadCnt",
        &bth.pad_count().to_string(),
        "pad bytes to a 4-byte boundary",
    )?;
    rows.bits(
        b + 1,
        0x0f,
        "TVer",
        &bth.tver().to_string(),
        "transport header version",
    )?;
    rows.field(
        b + 2,
        2,
        "P_Key",
        &format!("{:#06x}", bth.pkey()),
        "partition key (0xffff: default)",
    )?;
    rows.bits(
        b + 4,
        0x80,
        "FECN",
        yes(bth.fecn()),
        "forward congestion seen; masked in ICRC",
    )?;
    rows.bits(
        b + 4,
        0x40,
        "BECN",
        yes(bth.becn()),
        "backward congestion; set in CNPs",
    )?;
    rows.bits(
        b + 4,
        0x3f,
        "Reserved",
        &bth.reserved6().to_string(),
        "masked in ICRC",
    )?;
    rows.field(
        b + 5,
        3,
        "DestQP",
        &format!("{:#08x}", bth.dest_qp()),
        "receiving queue pair",
    )?;
    rows.bits(
        b + 8,
        0x80,
        "AckReq",
        yes(bth.ack_req()),
        "please acknowledge this packet",
    )?;
    rows.bits(b + 8, 0x7f, "Reserved", &bth.reserved7().to_string(), "")?;
    rows.field(
        b + 9,
        3,
        "PSN",
        &format!("{} ({:#08x})", bth.psn(), bth.psn()),
        "packet sequence number, 24 bits",
    )
}

/// The payload (or CM MAD), pad and ICRC of a parsed frame, and any Ethernet padding.
fn body<W: Write>(p: &ParsedFrame<'_>, rows: &mut Rows<'_, W>) -> fmt::Result {
    let (r, l) = (&p.repr, &p.layout);
    let info = r.bth.opcode.info();
    let payload = p.payload();
    // What the capture holds of it (the parsed frame may be a copy made whole).
    let captured = rows.frame.get(l.payload..l.pad.min(rows.frame.len()));
    let captured = captured.unwrap_or(&[]);
    if r.bth.dest_qp == crate::mad::GSI_QPN
        && r.ext.deth.is_some()
        && captured.len() == payload.len()
        && let Ok(m) = crate::cm::CmMad::parse(payload)
    {
        mad::dissect(rows, l.payload, &m)?;
    } else if info.allows_payload() {
        rows.layer("Payload", l.payload, payload.len())?;
        let preview: String = captured
            .iter()
            .take(24)
            .map(|&c| {
                if c.is_ascii_graphic() || c == b' ' {
                    c as char
                } else {
                    '.'
                }
            })
            .collect();
        let value = match captured.len() {
            n if n < payload.len() => format!("{} bytes, {n} captured", payload.len()),
            _ => format!("{} bytes", payload.len()),
        };
        rows.field(
            l.payload,
            payload.len().min(16).min(captured.len()),
            "Data",
            &value,
            &format!("\"{preview}\""),
        )?;
    }
    if p.pad_count() > 0 {
        rows.field(
            l.pad,
            p.pad_count().into(),
            "Pad",
            &format!("{} bytes", p.pad_count()),
            "zeros; PadCnt says how many",
        )?;
    }
    rows.layer("ICRC: Invariant CRC", l.icrc, 4)?;
    let icrc = p.icrc();
    // Over the bytes as captured: a repair of a length field is not the sender's.
    let status = match rows.frame.get(l.ip..l.icrc).map(crate::icrc::compute) {
        _ if rows.frame.len() < l.end => "cannot be checked: the frame is not all there".into(),
        Some(Ok(c)) if c == icrc => "correct".to_string(),
        Some(Ok(c)) => format!("WRONG: computed {c:#010x}"),
        _ => "cannot be computed".into(),
    };
    rows.field(
        l.icrc,
        4,
        "ICRC",
        &format!("{icrc:#010x}"),
        &format!("{status}; CRC-32, little-endian"),
    )?;
    if rows.frame.len() > l.end {
        let n = rows.frame.len() - l.end;
        rows.field(
            l.end,
            n,
            "Ethernet pad",
            &format!("{n} bytes"),
            "after the IP packet; ignored",
        )?;
    }
    Ok(())
}

fn dissect_ext<W: Write>(
    rows: &mut Rows<'_, W>,
    op: crate::Operation,
    headers: Headers,
    l: &Layout,
) -> fmt::Result {
    for (h, len) in Headers::WIRE_ORDER {
        let Some(off) = headers.offset_of(h) else {
            continue;
        };
        let at = l.ext + off;
        let bytes = &rows.padded(at, len);
        if h == Headers::XRCETH {
            let x = crate::XrcEth::new_unchecked(bytes);
            rows.layer("XRCETH: XRC Extended Transport Header", at, len)?;
            rows.field(at, 1, "Reserved", &x.reserved().to_string(), "")?;
            rows.field(
                at + 1,
                3,
                "XRC SRQ",
                &format!("{:#08x}", x.srq()),
                "the target's shared receive queue",
            )?;
        } else if h == Headers::DETH {
            let d = Deth::new_unchecked(bytes);
            rows.layer("DETH: Datagram Extended Transport Header", at, len)?;
            rows.field(
                at,
                4,
                "Q_Key",
                &format!("{:#010x}", d.qkey()),
                "must match the receiving UD QP's",
            )?;
            rows.field(at + 4, 1, "Reserved", &d.reserved().to_string(), "")?;
            rows.field(
                at + 5,
                3,
                "SrcQP",
                &format!("{:#08x}", d.src_qp()),
                "sender's QP, for the reply",
            )?;
        } else if h == Headers::FETH {
            let x = crate::Feth::new_unchecked(bytes);
            rows.layer("FETH: FLUSH Extended Transport Header", at, len)?;
            rows.field(
                at,
                3,
                "Reserved",
                &(x.reserved() >> 8).to_string(),
                "with bits 7-6 of the next byte",
            )?;
            rows.bits(
                at + 3,
                0x30,
                "Selectivity",
                &flush_level(x.level()),
                "the RETH's range, or the region",
            )?;
            rows.bits(
                at + 3,
                0x0f,
                "Placement Type",
                &flush_placement(x.placement()),
                "bit 0 visible, bit 1 persistent",
            )?;
        } else if h == Headers::RETH {
            let x = Reth::new_unchecked(bytes);
            rows.layer("RETH: RDMA Extended Transport Header", at, len)?;
            rows.field(
                at,
                8,
                "Virtual Address",
                &format!("{:#x}", x.va()),
                "where in the remote buffer",
            )?;
            rows.field(
                at + 8,
                4,
                "R_Key",
                &format!("{:#010x}", x.rkey()),
                "remote key granting access",
            )?;
            rows.field(
                at + 12,
                4,
                "DMA Length",
                &x.dma_len().to_string(),
                "bytes in the whole message",
            )?;
        } else if h == Headers::ATOMIC_ETH {
            let x = AtomicEth::new_unchecked(bytes);
            rows.layer("AtomicETH: Atomic Extended Transport Header", at, len)?;
            rows.field(
                at,
                8,
                "Virtual Address",
                &format!("{:#x}", x.va()),
                "8-byte aligned target",
            )?;
            rows.field(
                at + 8,
                4,
                "R_Key",
                &format!("{:#010x}", x.rkey()),
                "remote key",
            )?;
            let (swap_add, compare) = if op == crate::Operation::FetchAdd {
                ("added to the target", "unused by FETCH_ADD")
            } else {
                (
                    "stored if the compare matches",
                    "swap only if target equals this",
                )
            };
            rows.field(
                at + 12,
                8,
                "Swap/Add Data",
                &x.swap_add().to_string(),
                swap_add,
            )?;
            rows.field(
                at + 20,
                8,
                "Compare Data",
                &x.compare().to_string(),
                compare,
            )?;
        } else if h == Headers::AETH {
            let x = Aeth::new_unchecked(bytes);
            rows.layer("AETH: ACK Extended Transport Header", at, len)?;
            let syndrome = Syndrome::from_byte(x.syndrome());
            rows.field(
                at,
                1,
                "Syndrome",
                &format!("{:#04x}", x.syndrome()),
                &syndrome.to_string(),
            )?;
            let (kind, value) = match syndrome {
                Syndrome::Ack(c) => ("0 (ACK)", format!("{} (credit count)", c.code())),
                Syndrome::RnrNak(t) => (
                    "1 (RNR NAK)",
                    format!("{} (timer: {} µs)", t.code(), t.micros()),
                ),
                Syndrome::Nak(c) => ("3 (NAK)", format!("{} (NAK code)", c.code())),
                Syndrome::Reserved(_) => ("2 (reserved)", format!("{}", x.syndrome() & 0x1f)),
            };
            rows.bits(at, 0x60, "  kind", kind, "bits 6-5: ACK, RNR NAK or NAK")?;
            rows.bits(at, 0x1f, "  value", &value, "bits 4-0: what the kind says")?;
            rows.field(
                at + 1,
                3,
                "MSN",
                &x.msn().to_string(),
                "messages the responder completed",
            )?;
        } else if h == Headers::ATOMIC_ACK_ETH {
            let x = AtomicAckEth::new_unchecked(bytes);
            rows.layer(
                "AtomicAckETH: Atomic ACK Extended Transport Header",
                at,
                len,
            )?;
            rows.field(
                at,
                8,
                "Original Data",
                &x.orig().to_string(),
                "the target's value before",
            )?;
        } else if h == Headers::IMMDT {
            let v = crate::ImmDt::new_unchecked(bytes).value();
            rows.layer("ImmDt: Immediate Data", at, len)?;
            rows.field(
                at,
                4,
                "Immediate",
                &format!("{v:#010x}"),
                "handed to the receiver's completion",
            )?;
        } else if h == Headers::IETH {
            let v = crate::Ieth::new_unchecked(bytes).rkey();
            rows.layer("IETH: Invalidate Extended Transport Header", at, len)?;
            rows.field(
                at,
                4,
                "R_Key",
                &format!("{v:#010x}"),
                "the responder invalidates this key",
            )?;
        } else if h == Headers::CNP_RESERVED {
            rows.layer("CNP reserved", at, len)?;
            rows.field(at, 16, "Reserved", "", "16 bytes of zeros")?;
        }
    }
    Ok(())
}

fn flush_level(bits: u8) -> String {
    match crate::FlushLevel::from_bits(bits) {
        crate::FlushLevel::Range => "0 (range)".into(),
        crate::FlushLevel::Region => "1 (region)".into(),
        crate::FlushLevel::Reserved(b) => format!("{b} (reserved)"),
    }
}

fn flush_placement(bits: u8) -> String {
    let p = crate::FlushPlacement::from_bits_retain(bits);
    let names: Vec<&str> = [
        (crate::FlushPlacement::GLOBAL, "global"),
        (crate::FlushPlacement::PERSISTENT, "persistent"),
    ]
    .into_iter()
    .filter(|(f, _)| p.contains(*f))
    .map(|(_, name)| name)
    .chain((!(p - crate::FlushPlacement::all()).is_empty()).then_some("reserved"))
    .collect();
    match names.is_empty() {
        true => format!("{bits} (none)"),
        false => format!("{bits} ({})", names.join(", ")),
    }
}

fn ecn_name(ecn: u8) -> &'static str {
    match ecn & 3 {
        0 => "Not-ECT",
        1 => "ECT(1)",
        2 => "ECT(0)",
        _ => "CE",
    }
}

/// Writes the masked bytes the ICRC starts with (LRH stand-in, IP, UDP and BTH headers), one
/// header per row, to show which fields the ICRC leaves out.
pub fn icrc_prefix<W: Write>(frame: &[u8], out: &mut W) -> fmt::Result {
    let p = match frame::parse_unverified(frame) {
        Ok(p) => p,
        Err(e) => return writeln!(out, "malformed ({} bytes): {e}", frame.len()),
    };
    let mut prefix = [0u8; crate::icrc::MAX_PREFIX_LEN];
    let Ok(n) = crate::icrc::masked_prefix(p.l3(), &mut prefix) else {
        return writeln!(out, "no IP/UDP/BTH headers");
    };
    // The masked LRH stand-in, then the IP header, UDP and the BTH.
    let ip_len = n - crate::icrc::MASKED_LRH.len() - 8 - crate::bth::BthRepr::LEN;
    let (ip_note, ip_rows): (&str, &[usize]) = if ip_len == 20 {
        ("IPv4: ToS, TTL and checksum masked", &[20])
    } else {
        (
            "IPv6: Traffic Class, Flow Label and Hop Limit masked",
            &[8, 16, 16],
        )
    };
    let mut rows: Vec<(usize, &str)> = vec![(8, "the LRH stand-in: all ones")];
    for (i, &len) in ip_rows.iter().enumerate() {
        rows.push((len, if i == 0 { ip_note } else { "" }));
    }
    rows.push((8, "UDP: checksum masked"));
    rows.push((12, "BTH: byte 4 (FECN, BECN, reserved) masked"));
    let mut at = 0;
    for (len, note) in rows {
        let row = format!("{:<60} {note}", hex(&prefix[at..at + len]));
        writeln!(out, "{}", row.trim_end())?;
        at += len;
    }
    writeln!(
        out,
        "... then the extension headers, payload and pad as they are"
    )
}

/// One line for `frame`: `QPN PSN opcode len` and the flags and headers that matter.
pub fn summary(frame: &[u8]) -> String {
    summary_captured(frame, frame.len())
}

/// The summary of a parsed frame; `frame` is the frame as captured (`p` may be a repaired copy).
fn summary_parsed(p: &ParsedFrame<'_>, frame: &[u8]) -> String {
    let r = &p.repr;
    let (src, dst) = r.ip.addrs();
    // PSNs in hex, as perftest and the ibv_*_pingpong programs print them.
    let mut line = format!(
        "QPN {:#08x} PSN {:#08x} {:<34} len {:>4}",
        r.bth.dest_qp,
        r.bth.psn,
        r.bth.opcode.name(),
        p.payload().len()
    );
    for (on, flag) in [
        (r.bth.ack_req, "AckReq"),
        (r.bth.solicited, "SE"),
        (r.bth.fecn, "FECN"),
        (r.bth.becn, "BECN"),
        (r.ip.ecn() == 3, "CE"),
    ] {
        if on {
            line.push(' ');
            line.push_str(flag);
        }
    }
    let x = &r.ext;
    if let Some(v) = x.xrceth {
        let _ = write!(line, " xrcsrq={v:#x}");
    }
    if let Some(d) = x.deth {
        let _ = write!(line, " qkey={:#x} srcqp={:#x}", d.qkey, d.src_qp);
        if r.bth.dest_qp == crate::mad::GSI_QPN
            && let Ok(m) = crate::cm::CmMad::parse(p.payload())
        {
            let _ = write!(line, " {}", mad::summary(&m));
        }
    }
    if let Some(f) = x.feth {
        let _ = write!(
            line,
            " placement={:#x} level={}",
            f.placement.bits(),
            f.level.bits()
        );
    }
    if let Some(h) = x.reth {
        let _ = write!(
            line,
            " va={:#x} rkey={:#x} dmalen={}",
            h.va, h.rkey, h.dma_len
        );
    }
    if let Some(a) = x.atomic_eth {
        let _ = write!(
            line,
            " va={:#x} rkey={:#x} swap_add={} cmp={}",
            a.va, a.rkey, a.swap_add, a.compare
        );
    }
    if let Some(a) = x.aeth {
        let _ = write!(line, " msn={} [{}]", a.msn, a.syndrome);
    }
    if let Some(a) = x.atomic_ack_eth {
        let _ = write!(line, " orig={}", a.orig);
    }
    if let Some(v) = x.immdt {
        let _ = write!(line, " imm={v:#x}");
    }
    if let Some(v) = x.ieth {
        let _ = write!(line, " inv_rkey={v:#x}");
    }
    let l = &p.layout;
    let icrc = match frame.get(l.ip..l.icrc).map(crate::icrc::compute) {
        _ if frame.len() < l.end => "not captured",
        Some(Ok(c)) if c == p.icrc() => "ok",
        _ => "BAD",
    };
    let _ = write!(
        line,
        " | {src} > {dst} sport {} | ICRC {icrc}",
        r.udp.src_port
    );
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Opcode;
    use crate::sample::{self, Ip};

    #[test]
    fn hex_is_spaced_pairs_that_take_the_width() {
        for len in 0..100usize {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37) as u8).collect();
            let plain: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let plain = plain.join(" ");
            assert_eq!(hex(&bytes).to_string(), plain);
            assert_eq!(format!("{:<23}|", hex(&bytes)), format!("{plain:<23}|"));
            assert_eq!(format!("{:>60}|", hex(&bytes)), format!("{plain:>60}|"));
        }
    }

    fn dissected(frame: &[u8]) -> String {
        let mut s = String::new();
        dissect(frame, &mut s).unwrap();
        s
    }

    #[test]
    fn explains_every_layer_and_field() {
        let frame = sample::example(Opcode::RcWriteOnlyImm, Ip::V4, 7, 13).frame();
        let text = dissected(&frame);
        for want in [
            "Ethernet II [bytes 0..14",
            "IPv4 [bytes 14..34",
            "UDP [bytes 34..42",
            "BTH: Base Transport Header [bytes 42..54",
            "RETH: RDMA Extended Transport Header [bytes 54..70",
            "ImmDt: Immediate Data [bytes 70..74",
            "0x0b RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            "..11 .... = 3", // PadCnt 3 for a 13-byte payload
            "PSN              7 (0x000007)",
            "  transport      000. .... = 0 (RC)",
            "  operation      ...0 1011 = 0x0b",
            "0x12345678",
            "correct; CRC-32",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn a_flush_shows_its_feth_before_its_reth() {
        let frame = sample::example(Opcode::RcFlush, Ip::V4, 7, 0).frame();
        let text = dissected(&frame);
        for want in [
            "0x1c RC_FLUSH",
            "FETH: FLUSH Extended Transport Header [bytes 54..58",
            "..00 .... = 0 (range)",
            ".... 0001 = 1 (global)",
            "RETH: RDMA Extended Transport Header [bytes 58..74",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert!(summary(&frame).contains("RC_FLUSH"));
        assert!(summary(&frame).contains("placement=0x1 level=0 va="));
        let write = sample::example(Opcode::RcAtomicWrite, Ip::V4, 8, 0).frame();
        assert!(summary(&write).contains("RC_ATOMIC_WRITE"));
        assert!(summary(&write).contains("len    8"), "{}", summary(&write));
    }

    #[test]
    fn an_xrc_request_names_its_srq_first() {
        let frame = sample::example(Opcode::XrcWriteOnly, Ip::V4, 7, 16).frame();
        let text = dissected(&frame);
        for want in [
            "0xaa XRC_RDMA_WRITE_ONLY",
            "XRCETH: XRC Extended Transport Header [bytes 54..58",
            "XRC SRQ          0x000042",
            "RETH: RDMA Extended Transport Header [bytes 58..74",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert!(summary(&frame).contains(" xrcsrq=0x42 va="));
    }

    #[test]
    fn shows_a_bad_icrc_and_a_malformed_frame() {
        let mut frame = sample::example(Opcode::RcSendOnly, Ip::V6, 7, 4).frame();
        let n = frame.len();
        frame[n - 1] ^= 0xff;
        assert!(dissected(&frame).contains("WRONG: computed"));
        assert!(summary(&frame).ends_with("ICRC BAD"));
        frame[62] = 0x15; // the opcode (after 14 + 40 + 8 bytes): a reserved one
        let text = dissected(&frame);
        assert!(text.starts_with("Malformed frame"), "{text}");
        assert!(text.contains("unknown or reserved opcode 0x15"));
        // Its good headers are shown, and the bad field pointed at.
        assert!(text.contains("Source           fd00:5e::1"), "{text}");
        assert!(text.contains("Length           28 "), "{text}");
        assert!(
            text.contains("OpCode           0x15 unknown") && text.contains("<-- 0x15: unknown"),
            "{text}"
        );
        assert!(
            text.contains("Bytes 74..82:\n    74  52 6f 43 45"),
            "{text}"
        );
    }

    /// A frame cut by the snapshot length shows every header it holds, and says what is missing.
    #[test]
    fn a_cut_frame_decodes_as_far_as_it_goes() {
        let frame = sample::example(Opcode::RcWriteOnly, Ip::V4, 7, 100).frame();
        let mut text = String::new();
        dissect_captured(&frame[..80], frame.len(), &mut text).unwrap();
        for want in [
            "Cut by the capture's snapshot length: 80 of 174 bytes captured",
            "Total Length     160 ",
            "DMA Length       100 ",
            "Data             100 bytes, 10 captured",
            "\"RoCEv2 on \"",
            "ICRC             (not captured)",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert!(
            !text.contains("WRONG") && !text.contains("Malformed"),
            "{text}"
        );
        let line = summary_captured(&frame[..80], frame.len());
        assert!(line.contains("RC_RDMA_WRITE_ONLY") && line.ends_with("(cut: 80 of 174 bytes)"));
        // Cut inside the BTH: the IP and UDP headers are still there.
        let mut text = String::new();
        dissect_captured(&frame[..46], frame.len(), &mut text).unwrap();
        assert!(text.contains("Destination Port 4791"), "{text}");
        assert!(text.contains("PSN              (not captured)"), "{text}");
    }

    /// A header that is wrong is shown with the others, the field pointed at and what it should
    /// be; the frame is not called cut.
    #[test]
    fn a_wrong_field_is_pointed_at() {
        let good = sample::example(Opcode::RcSendOnly, Ip::V4, 7, 8).frame();
        let cases: [(usize, u8, &str); 5] = [
            (24, 0x01, "Header Checksum  0xaf27"),
            (17, 0x40, "Total Length     116 "),
            (17, 0x10, "Total Length     36 "),
            (39, 0x04, "Length           36 "),
            (43, 0x03, "TVer             .... 0011 = 3"),
        ];
        for (at, flip, field) in cases {
            let mut frame = good.clone();
            frame[at] ^= flip;
            let text = dissected(&frame);
            let line = text.lines().find(|l| l.contains(field));
            assert!(
                line.is_some_and(|l| l.contains("<-- WRONG")),
                "{field}: {text}"
            );
            assert!(
                text.contains("RC_SEND_ONLY") && !text.contains("Cut by"),
                "{text}"
            );
            assert!(
                summary(&frame).contains("RC_SEND_ONLY"),
                "{}",
                summary(&frame)
            );
        }
        // A wrong version: Ethernet is shown, then what is wrong and the bytes.
        let mut frame = good.clone();
        frame[14] = 0x55;
        let text = dissected(&frame);
        assert!(text.contains("EtherType        0x0800 (IPv4)"), "{text}");
        assert!(
            text.contains("Version (byte 14) is wrong: bad IP version 5"),
            "{text}"
        );
    }

    #[test]
    fn frames_that_are_not_roce_are_skipped() {
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(dissected(&arp), "Not RoCEv2 (ARP): skipped\n");
        let mut dns = sample::example(Opcode::RcSendOnly, Ip::V4, 7, 8).frame();
        dns[36..38].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(summary(&dns), "not RoCEv2 (DNS (UDP port 53)), skipped");
        let mut tcp = dns.clone();
        tcp[23] = 6;
        assert_eq!(not_roce(&tcp).as_deref(), Some("TCP over IPv4"));
        let v6 = sample::example(Opcode::RcSendOnly, Ip::V6, 7, 8).frame();
        assert_eq!(not_roce(&v6), None);
    }

    #[test]
    fn the_syndrome_is_drawn_bit_by_bit() {
        let mut s = sample::example(Opcode::RcAcknowledge, Ip::V4, 9, 0);
        s.repr.ext.aeth.as_mut().unwrap().syndrome =
            Syndrome::RnrNak(crate::RnrTimer::from_code(14));
        let text = dissected(&s.frame());
        assert!(
            text.contains("  kind           .01. .... = 1 (RNR NAK)"),
            "{text}"
        );
        assert!(
            text.contains("  value          ...0 1110 = 14 (timer: 1280 µs)"),
            "{text}"
        );
    }

    #[test]
    fn icrc_prefix_shows_the_masks() {
        let frame = sample::example(Opcode::RcSendOnly, Ip::V4, 7, 4).frame();
        let mut text = String::new();
        icrc_prefix(&frame, &mut text).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ff ff ff ff ff ff ff ff"));
        assert!(
            lines[1].starts_with("45 ff 00 30 00 00 40 00 ff 11 ff ff c6 12 00 01 c6 12 00 02"),
            "{text}"
        );
        assert!(lines[2].ends_with("UDP: checksum masked") && lines[2].contains(" ff ff "));
        assert!(lines[3].starts_with("04 c0 ff ff ff 00 00 12"), "{text}");
    }

    #[test]
    fn summary_is_one_line_with_the_essentials() {
        let frame = sample::example(Opcode::RcAcknowledge, Ip::V4, 9, 0).frame();
        let line = summary(&frame);
        assert!(!line.contains('\n'));
        assert!(
            line.starts_with("QPN 0x000011 PSN 0x000009 RC_ACKNOWLEDGE"),
            "{line}"
        );
        assert!(
            line.contains("msn=1 [ACK, credits not reported (code 31)]"),
            "{line}"
        );
        assert!(line.contains("| 198.18.0.2 > 198.18.0.1 sport "), "{line}");
        assert!(line.ends_with("| ICRC ok"), "{line}");
    }
}
