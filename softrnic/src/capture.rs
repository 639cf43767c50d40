//! Capture files: reading pcap and pcapng, writing pcap, and dissecting what they hold.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapParser, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{DataLink, PcapError};
use softrnic_wire::dissect;
use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};
use std::time::Duration;

/// One frame from a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFrame {
    /// When it was captured, since the Unix epoch.
    pub timestamp: Duration,
    /// The frame, starting at the Ethernet header (rebuilt for a Linux cooked capture).
    pub data: Vec<u8>,
    /// Its length on the wire: more than `data` holds when the snapshot length cut it.
    pub original_len: usize,
    /// Which way it went, where the capture says (pcapng's EPB flags, the cooked header).
    pub direction: Option<Direction>,
    /// The interface it passed, where the capture names it.
    pub interface: Option<String>,
}

impl CapturedFrame {
    /// A whole frame, with no direction or interface.
    pub fn new(timestamp: Duration, data: Vec<u8>) -> CapturedFrame {
        CapturedFrame {
            timestamp,
            original_len: data.len(),
            data,
            direction: None,
            interface: None,
        }
    }
}

/// Which way a captured frame went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Received.
    In,
    /// Sent.
    Out,
}

/// Every frame a capture file holds, and where it is damaged if it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    /// The frames read, up to any damage.
    pub frames: Vec<CapturedFrame>,
    /// Where the file stops making sense (a capture cut short, a damaged block), and why.
    pub damage: Option<Damage>,
}

/// Where a capture file is damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The byte offset in the file of the first record that cannot be read.
    pub offset: usize,
    /// Why.
    pub reason: String,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "damaged at byte {}: {}", self.offset, self.reason)
    }
}

/// Why a capture could not be read.
#[derive(Debug)]
pub enum CaptureError {
    /// Neither pcap nor pcapng.
    UnknownFormat,
    /// The file is damaged.
    Damaged(Damage),
    /// A link type other than Ethernet and Linux cooked capture.
    UnsupportedLink(DataLink),
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::UnknownFormat => write!(f, "not a pcap or pcapng file"),
            CaptureError::Damaged(d) => write!(f, "{d}"),
            CaptureError::UnsupportedLink(l) => write!(
                f,
                "link type {l:?} is neither Ethernet nor Linux cooked capture (SLL, SLL2)"
            ),
        }
    }
}

impl std::error::Error for CaptureError {}

const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// Reads every frame of a pcap or pcapng capture held in memory; any damage is an error.
pub fn read(bytes: &[u8]) -> Result<Vec<CapturedFrame>, CaptureError> {
    let c = read_capture(bytes)?;
    match c.damage {
        Some(d) => Err(CaptureError::Damaged(d)),
        None => Ok(c.frames),
    }
}

/// Reads the frames of a pcap or pcapng capture up to any damage, and says where that is.
/// Fails only if the file is not a capture at all or its link type is one it cannot read.
pub fn read_capture(bytes: &[u8]) -> Result<Capture, CaptureError> {
    if bytes.starts_with(&PCAPNG_MAGIC) {
        read_pcapng(bytes)
    } else {
        read_pcap(bytes)
    }
}

fn damage(bytes: &[u8], rest: &[u8], e: PcapError) -> Damage {
    let reason = match e {
        PcapError::IncompleteBuffer => "the file ends inside a record (cut short?)".to_string(),
        e => e.to_string(),
    };
    Damage {
        offset: bytes.len() - rest.len(),
        reason,
    }
}

fn read_pcap(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let (mut rest, parser) = PcapParser::new(bytes).map_err(|_| CaptureError::UnknownFormat)?;
    let link = parser.header().datalink;
    if !matches!(
        link,
        DataLink::ETHERNET | DataLink::LINUX_SLL | DataLink::LINUX_SLL2
    ) {
        return Err(CaptureError::UnsupportedLink(link));
    }
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let packet = match parser.next_packet(rest) {
            Ok((next, p)) => {
                rest = next;
                p
            }
            Err(e) => {
                let damage = Some(damage(bytes, rest, e));
                return Ok(Capture { frames, damage });
            }
        };
        frames.push(frame(
            link,
            packet.timestamp,
            &packet.data,
            packet.orig_len as usize,
            None,
            None,
        )?);
    }
    Ok(Capture {
        frames,
        damage: None,
    })
}

fn read_pcapng(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let (mut rest, mut parser) = PcapNgParser::new(bytes).map_err(|e| {
        CaptureError::Damaged(Damage {
            offset: 0,
            reason: e.to_string(),
        })
    })?;
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let block = match parser.next_block(rest) {
            Ok((next, b)) => {
                rest = next;
                b
            }
            Err(e) => {
                let damage = Some(damage(bytes, rest, e));
                return Ok(Capture { frames, damage });
            }
        };
        let (interface, timestamp, data, original_len, flags) = match block {
            Block::EnhancedPacket(p) => {
                let flags = p.options.iter().find_map(|o| match o {
                    pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption::Flags(f) => {
                        Some(*f)
                    }
                    _ => None,
                });
                let len = p.original_len as usize;
                (p.interface_id, p.timestamp, p.data, len, flags)
            }
            Block::SimplePacket(p) => {
                let len = p.original_len as usize;
                (0, Duration::ZERO, p.data, len, None)
            }
            _ => continue,
        };
        let idb = parser.interfaces().get(interface as usize);
        let link = idb.map_or(DataLink::NULL, |i| i.linktype);
        let name = idb.and_then(|i| {
            i.options.iter().find_map(|o| match o {
                pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption::IfName(n) => {
                    Some(n.to_string())
                }
                _ => None,
            })
        });
        // EPB flags bits 0-1: 1 inbound, 2 outbound.
        let direction = match flags.map(|f| f & 3) {
            Some(1) => Some(Direction::In),
            Some(2) => Some(Direction::Out),
            _ => None,
        };
        frames.push(frame(
            link,
            timestamp,
            &data,
            original_len,
            direction,
            name,
        )?);
    }
    Ok(Capture {
        frames,
        damage: None,
    })
}

/// A captured frame of link type `link`, as an Ethernet frame.
fn frame(
    link: DataLink,
    timestamp: Duration,
    data: &[u8],
    original_len: usize,
    direction: Option<Direction>,
    interface: Option<String>,
) -> Result<CapturedFrame, CaptureError> {
    let original_len = original_len.max(data.len());
    let whole = |data: Vec<u8>, original_len, direction| CapturedFrame {
        timestamp,
        data,
        original_len,
        direction,
        interface: interface.clone(),
    };
    match link {
        DataLink::ETHERNET => Ok(whole(data.to_vec(), original_len, direction)),
        DataLink::LINUX_SLL | DataLink::LINUX_SLL2 => {
            let c = cooked(link, data);
            let grown = c.data.len() as isize - data.len() as isize;
            let original_len = (original_len as isize + grown).max(0) as usize;
            Ok(whole(c.data, original_len, c.direction.or(direction)))
        }
        other => Err(CaptureError::UnsupportedLink(other)),
    }
}

/// A Linux cooked frame made an Ethernet one.
struct Cooked {
    data: Vec<u8>,
    direction: Option<Direction>,
}

/// Rebuilds the Ethernet header of a Linux cooked capture (`tcpdump -i any`): SLL's 16-byte or
/// SLL2's 20-byte header holds the EtherType, the sender's link address and the packet type,
/// not the destination, which is left zero.
fn cooked(link: DataLink, data: &[u8]) -> Cooked {
    let sll2 = link == DataLink::LINUX_SLL2;
    let header = if sll2 { 20 } else { 16 };
    let Some(h) = data.get(..header) else {
        // Too short for its header: kept as it is, the dissector says what it can.
        return Cooked {
            data: data.to_vec(),
            direction: None,
        };
    };
    let (protocol, packet_type, addr_len, addr) = if sll2 {
        (&h[0..2], h[10], h[11], &h[12..20])
    } else {
        (&h[14..16], h[1], h[5], &h[6..14])
    };
    let mut eth = vec![0u8; 14];
    if addr_len == 6 {
        eth[6..12].copy_from_slice(&addr[..6]);
    }
    eth[12..14].copy_from_slice(protocol);
    eth.extend_from_slice(&data[header..]);
    // Packet types: 0 to this host, 1 broadcast, 2 multicast, 3 to another host, 4 sent.
    let direction = match packet_type {
        4 => Some(Direction::Out),
        0..=3 => Some(Direction::In),
        _ => None,
    };
    Cooked {
        data: eth,
        direction,
    }
}

/// Writes frames as a pcap capture with Ethernet link type and nanosecond timestamps.
pub fn write_pcap<W: Write>(frames: &[CapturedFrame], out: W) -> Result<(), PcapError> {
    let header = PcapHeader {
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        ..PcapHeader::default()
    };
    let mut writer = PcapWriter::with_header(out, header)?;
    for f in frames {
        writer.write_packet(&PcapPacket::new(f.timestamp, f.data.len() as u32, &f.data))?;
    }
    Ok(())
}

/// Writes frames as a pcapng capture: an interface for each one they name (`wire` where none
/// is), and each frame's direction where it has one.
pub fn write_pcapng<W: Write>(frames: &[CapturedFrame], out: W) -> Result<(), PcapError> {
    let mut w = LiveWriter::new(out)?;
    for f in frames {
        let outbound = f.direction == Some(Direction::Out);
        let interface = f.interface.as_deref().unwrap_or("wire");
        w.write(
            interface,
            outbound,
            f.timestamp.as_nanos() as u64,
            0,
            &f.data,
        )?;
    }
    w.flush().map_err(PcapError::IoError)
}

/// How much to print per frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Every field, with offsets, raw bytes and explanations.
    Full,
    /// One line per frame.
    Compact,
}

/// How `dissect_frames` shows a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Show {
    /// How much per frame.
    pub detail: Detail,
    /// Leave out frames that are not RoCEv2 instead of saying each is skipped.
    pub roce_only: bool,
    /// Also show, for each frame, the bytes its ICRC hashes with the masked fields.
    pub icrc: bool,
}

/// Prints each frame: its number, time, direction and interface where the capture says, and
/// what it is and what it does in its conversation. A received frame that is one seen leaving
/// before (a same-host frame, captured leaving and arriving) says which, so it does not pass
/// for a retransmission.
pub fn dissect_frames<W: Write>(
    frames: &[CapturedFrame],
    show: Show,
    mut out: W,
) -> io::Result<()> {
    let start = frames.first().map(|f| f.timestamp).unwrap_or_default();
    // What the conversation says of each frame: which it repeats, what it answers or covers,
    // which sent frame an arrival is.
    let analysis = crate::conversation::analyse(frames, Default::default());
    let notes = crate::conversation::notes_by_frame(&analysis);
    let arrivals: HashMap<usize, usize> = analysis
        .packets
        .iter()
        .filter_map(|p| Some((p.arrival?, p.number)))
        .collect();
    for (i, f) in frames.iter().enumerate() {
        let n = i + 1;
        if show.roce_only && dissect::not_roce(&f.data).is_some() {
            continue;
        }
        let t = f.timestamp.saturating_sub(start).as_secs_f64();
        let interface = f.interface.as_deref();
        let arrival = arrivals.get(&n);
        let way = match (f.direction, interface) {
            (Some(Direction::In), Some(i)) => format!("{i} in "),
            (Some(Direction::Out), Some(i)) => format!("{i} out"),
            (Some(Direction::In), None) => "in ".into(),
            (Some(Direction::Out), None) => "out".into(),
            (None, Some(i)) => i.to_string(),
            (None, None) => String::new(),
        };
        let same = arrival
            .map(|m| format!(" (frame {m} arriving)"))
            .unwrap_or_default();
        match show.detail {
            Detail::Compact => {
                let way = if way.is_empty() {
                    way
                } else {
                    format!(" {way:<10}")
                };
                let summary = dissect::summary_captured(&f.data, f.original_len);
                let said = notes
                    .get(&n)
                    .map(|v| format!(" -- {}", v.join("; ")))
                    .unwrap_or_default();
                writeln!(out, "{n:>4} {t:>10.6}{way}  {summary}{same}{said}")?;
            }
            Detail::Full => {
                let mut text = String::new();
                // Writing into a String cannot fail.
                let _ = dissect::dissect_captured(&f.data, f.original_len, &mut text);
                let way = if way.is_empty() {
                    way
                } else {
                    format!(", {}", way.trim_end())
                };
                writeln!(
                    out,
                    "Frame {n} at {t:.6} s, {} bytes{way}{same}",
                    f.original_len
                )?;
                for note in notes.get(&n).into_iter().flatten() {
                    writeln!(out, "  >> {note}")?;
                }
                writeln!(out, "{text}")?;
                if show.icrc {
                    let mut prefix = String::new();
                    let _ = dissect::icrc_prefix(&f.data, &mut prefix);
                    writeln!(out, "What the ICRC hashes (masked fields as ff):\n{prefix}")?;
                }
            }
        }
    }
    Ok(())
}

/// The frames of the shipped sample capture, one millisecond apart.
pub fn sample_frames() -> Vec<CapturedFrame> {
    // 2026-01-01T00:00:00Z: fixed, so the file is the same on every run.
    const START: u64 = 1_767_225_600;
    softrnic_wire::sample::capture()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let at = Duration::from_secs(START) + Duration::from_millis(i as u64);
            CapturedFrame::new(at, s.frame())
        })
        .collect()
}

/// A pcapng file being written live: one interface per device, nanosecond timestamps, and each
/// packet's direction (EPB flags), so Wireshark shows which way it went. Each block reaches
/// `out` in one write, so what has been flushed is always a readable capture.
pub struct LiveWriter<W: Write> {
    /// Blocks are made here, then moved to `out` whole.
    staging: pcap_file::pcapng::PcapNgWriter<Vec<u8>>,
    out: W,
    interfaces: Vec<String>,
}

impl<W: Write> LiveWriter<W> {
    /// Starts the file (its section header).
    pub fn new(out: W) -> Result<LiveWriter<W>, PcapError> {
        let mut w = LiveWriter {
            staging: pcap_file::pcapng::PcapNgWriter::new(Vec::new())?,
            out,
            interfaces: Vec::new(),
        };
        w.pass_on()?;
        Ok(w)
    }

    /// Moves the blocks made so far to `out`, in one write.
    fn pass_on(&mut self) -> Result<(), PcapError> {
        let staged = self.staging.get_mut();
        self.out.write_all(staged).map_err(PcapError::IoError)?;
        staged.clear();
        Ok(())
    }

    /// Adds a frame that passed through `device`.
    pub fn write(
        &mut self,
        device: &str,
        outbound: bool,
        unix_nanos: u64,
        dropped: u64,
        data: &[u8],
    ) -> Result<(), PcapError> {
        use pcap_file::pcapng::blocks::enhanced_packet::{
            EnhancedPacketBlock, EnhancedPacketOption,
        };
        use pcap_file::pcapng::blocks::interface_description::{
            InterfaceDescriptionBlock, InterfaceDescriptionOption,
        };
        let id = match self.interfaces.iter().position(|d| d == device) {
            Some(i) => i,
            None => {
                let mut idb = InterfaceDescriptionBlock::new(DataLink::ETHERNET, 0);
                idb.options = vec![
                    InterfaceDescriptionOption::IfName(device.to_owned().into()),
                    InterfaceDescriptionOption::IfTsResol(9),
                ];
                self.staging.write_pcapng_block(idb)?;
                self.interfaces.push(device.to_owned());
                self.interfaces.len() - 1
            }
        };
        // EPB flags bits 0-1: 1 inbound, 2 outbound.
        let mut options = vec![EnhancedPacketOption::Flags(if outbound { 2 } else { 1 })];
        if dropped > 0 {
            options.push(EnhancedPacketOption::DropCount(dropped));
        }
        let epb = EnhancedPacketBlock {
            interface_id: id as u32,
            timestamp: Duration::from_nanos(unix_nanos),
            original_len: data.len() as u32,
            data: data.into(),
            options,
        };
        self.staging.write_pcapng_block(epb)?;
        self.pass_on()
    }

    /// Flushes the file: everything written so far is in it, as whole blocks.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compact(frames: &[CapturedFrame], roce_only: bool) -> String {
        let mut out = Vec::new();
        let show = Show {
            detail: Detail::Compact,
            roce_only,
            icrc: false,
        };
        dissect_frames(frames, show, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn pcap(link: DataLink, packets: &[(Vec<u8>, u32)]) -> Vec<u8> {
        let header = PcapHeader {
            datalink: link,
            ..PcapHeader::default()
        };
        let mut file = Vec::new();
        let mut w = PcapWriter::with_header(&mut file, header).unwrap();
        for (data, orig_len) in packets {
            w.write_packet(&PcapPacket::new(Duration::ZERO, *orig_len, data))
                .unwrap();
        }
        file
    }

    #[test]
    fn pcap_round_trip() {
        let frames = sample_frames();
        let mut file = Vec::new();
        write_pcap(&frames, &mut file).unwrap();
        assert_eq!(read(&file).unwrap(), frames);
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        assert!(matches!(
            read(b"not a capture at all"),
            Err(CaptureError::UnknownFormat)
        ));
        let err = read_capture(&pcap(DataLink::IEEE802_11, &[])).unwrap_err();
        assert!(
            err.to_string()
                .contains("neither Ethernet nor Linux cooked"),
            "{err}"
        );
    }

    #[test]
    fn compact_is_one_line_per_frame() {
        let frames = sample_frames();
        let text = compact(&frames, false);
        assert_eq!(text.lines().count(), frames.len());
        assert!(text.lines().all(|l| l.contains("| ICRC ok")));
    }

    /// A capture cut short gives the frames before the cut, and the offset of the record that
    /// is not whole.
    #[test]
    fn a_capture_cut_short_keeps_what_came_before() {
        let frames = sample_frames();
        let mut file = Vec::new();
        write_pcap(&frames, &mut file).unwrap();
        // A pcap file: a 24-byte header, then 16 bytes before each frame.
        let at: usize = 24
            + frames[..84]
                .iter()
                .map(|f| 16 + f.data.len())
                .sum::<usize>();
        let c = read_capture(&file[..at + 30]).unwrap();
        assert_eq!(c.frames, frames[..84]);
        let d = c.damage.unwrap();
        assert_eq!(d.offset, at);
        assert!(
            d.to_string()
                .contains(&format!("damaged at byte {at}: the file ends"))
        );
        assert!(matches!(
            read(&file[..at + 30]),
            Err(CaptureError::Damaged(_))
        ));
        // pcapng too: each frame is a block.
        let mut ng = Vec::new();
        let mut w = LiveWriter::new(&mut ng).unwrap();
        for f in &frames[..3] {
            w.write("srnic0", true, 0, 0, &f.data).unwrap();
        }
        let whole = ng.len();
        let c = read_capture(&ng[..whole - 5]).unwrap();
        assert_eq!(c.frames.len(), 2);
        assert!(c.damage.unwrap().offset < whole - 5);
    }

    /// pcapng's direction flags and interface names are read, and a same-host frame seen
    /// leaving one device and arriving at another is shown as one frame arriving, not a repeat.
    #[test]
    fn directions_and_same_host_arrivals_are_shown() {
        let frames = sample_frames();
        let mut ng = Vec::new();
        let mut w = LiveWriter::new(&mut ng).unwrap();
        w.write("srnic0", true, 1_000, 0, &frames[0].data).unwrap();
        w.write("srnic1", false, 2_000, 0, &frames[0].data).unwrap();
        w.write("srnic1", false, 3_000, 0, &frames[1].data).unwrap();
        let read = read(&ng).unwrap();
        assert_eq!(read[0].direction, Some(Direction::Out));
        assert_eq!(read[1].direction, Some(Direction::In));
        assert_eq!(read[1].interface.as_deref(), Some("srnic1"));
        let text = compact(&read, false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains(" srnic0 out ") && lines[0].contains("ICRC ok"),
            "{text}"
        );
        assert!(lines[1].contains(" srnic1 in  ") && lines[1].ends_with("(frame 1 arriving)"));
        assert!(!lines[2].contains("arriving"), "{text}");
    }

    /// `tcpdump -i any` writes Linux cooked frames (SLL, or SLL2): their EtherType, sender and
    /// direction become an Ethernet frame the dissector reads.
    #[test]
    fn linux_cooked_captures_are_read() {
        let eth = sample_frames()[0].data.clone();
        let mut sll = vec![0, 4, 0, 1, 0, 6];
        sll.extend_from_slice(&eth[6..12]);
        sll.extend_from_slice(&[0, 0]);
        sll.extend_from_slice(&eth[12..]);
        let mut sll2 = eth[12..14].to_vec();
        sll2.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 0, 6]);
        sll2.extend_from_slice(&eth[6..12]);
        sll2.extend_from_slice(&[0, 0]);
        sll2.extend_from_slice(&eth[14..]);
        for (link, data) in [(DataLink::LINUX_SLL, sll), (DataLink::LINUX_SLL2, sll2)] {
            let len = data.len() as u32;
            let frames = read(&pcap(link, &[(data, len)])).unwrap();
            let f = &frames[0];
            assert_eq!(f.data[6..], eth[6..], "{link:?}");
            assert_eq!(
                f.data[..6],
                [0; 6],
                "{link:?}: the destination is not in it"
            );
            assert_eq!(f.original_len, eth.len());
            let want = if link == DataLink::LINUX_SLL {
                Direction::Out
            } else {
                Direction::In
            };
            assert_eq!(f.direction, Some(want));
            assert!(compact(&frames, false).trim_end().ends_with("ICRC ok"));
        }
    }

    /// dissect says what each frame is in its conversation, and with `icrc` what its ICRC
    /// hashes: here the shipped capture of a loss.
    #[test]
    fn each_frame_is_placed_in_its_conversation() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/samples/go-back-n.pcapng"
        );
        let frames = read(&std::fs::read(path).unwrap()).unwrap();
        let text = compact(&frames, false);
        let line = |n: usize| text.lines().nth(n - 1).unwrap();
        assert!(line(2).ends_with("-- lost: sent, never arrived"), "{text}");
        assert!(
            line(3).contains("-- gap: the receiver expected PSN 0x000001"),
            "{text}"
        );
        assert!(
            line(8).ends_with("-- retransmission of frame 2 (PSN 0x000001)"),
            "{text}"
        );
        let mut out = Vec::new();
        let show = Show {
            detail: Detail::Full,
            roce_only: false,
            icrc: true,
        };
        dissect_frames(&frames, show, &mut out).unwrap();
        let full = String::from_utf8(out).unwrap();
        assert!(
            full.contains("Frame 2 at 0.000001 s, 1082 bytes, A out\n  >> lost"),
            "{full}"
        );
        assert!(
            full.contains("What the ICRC hashes (masked fields as ff):\nff ff ff ff ff ff ff ff")
        );
    }

    /// A frame cut by the snapshot length keeps its length on the wire; frames that are not
    /// RoCEv2 are said to be skipped, or left out with `roce_only`.
    #[test]
    fn cut_and_other_frames() {
        let eth = sample_frames()[5].data.clone();
        let mut arp = vec![0xff; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.resize(42, 0);
        let file = pcap(
            DataLink::ETHERNET,
            &[(eth[..60].to_vec(), eth.len() as u32), (arp, 42)],
        );
        let frames = read(&file).unwrap();
        assert_eq!(frames[0].original_len, eth.len());
        let text = compact(&frames, false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].ends_with(&format!("(cut: 60 of {} bytes)", eth.len())),
            "{text}"
        );
        assert!(lines[1].ends_with("not RoCEv2 (ARP), skipped"), "{text}");
        assert_eq!(compact(&frames, true).lines().count(), 1);
    }
}
