//! Capture files: reading pcap and pcapng, writing pcap, and dissecting what they hold.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, PcapError};
use softrnic_wire::dissect;
use std::fmt;
use std::io::{self, Write};
use std::time::Duration;

/// One frame from a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFrame {
    /// When it was captured, since the Unix epoch.
    pub timestamp: Duration,
    /// The frame, starting at the Ethernet header.
    pub data: Vec<u8>,
}

/// Why a capture could not be read.
#[derive(Debug)]
pub enum CaptureError {
    /// Neither pcap nor pcapng.
    UnknownFormat,
    /// The file is damaged.
    Damaged(PcapError),
    /// The capture's link type is not Ethernet (e.g. Linux cooked capture from `-i any`).
    NotEthernet(DataLink),
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::UnknownFormat => write!(f, "not a pcap or pcapng file"),
            CaptureError::Damaged(e) => write!(f, "damaged capture: {e}"),
            CaptureError::NotEthernet(l) => write!(
                f,
                "link type {l:?} is not Ethernet (capture on the interface itself, not `any`)"
            ),
        }
    }
}

impl std::error::Error for CaptureError {}

const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// Reads every frame of a pcap or pcapng capture held in memory.
pub fn read(bytes: &[u8]) -> Result<Vec<CapturedFrame>, CaptureError> {
    if bytes.starts_with(&PCAPNG_MAGIC) {
        read_pcapng(bytes)
    } else {
        read_pcap(bytes)
    }
}

fn read_pcap(bytes: &[u8]) -> Result<Vec<CapturedFrame>, CaptureError> {
    let mut reader = PcapReader::new(bytes).map_err(|_| CaptureError::UnknownFormat)?;
    let link = reader.header().datalink;
    if link != DataLink::ETHERNET {
        return Err(CaptureError::NotEthernet(link));
    }
    let mut frames = Vec::new();
    while let Some(packet) = reader.next_packet() {
        let packet = packet.map_err(CaptureError::Damaged)?;
        frames.push(CapturedFrame {
            timestamp: packet.timestamp,
            data: packet.data.into_owned(),
        });
    }
    Ok(frames)
}

fn read_pcapng(bytes: &[u8]) -> Result<Vec<CapturedFrame>, CaptureError> {
    let mut reader = PcapNgReader::new(bytes).map_err(CaptureError::Damaged)?;
    let mut frames = Vec::new();
    while let Some(block) = reader.next_block() {
        let (interface, timestamp, data) = match block.map_err(CaptureError::Damaged)? {
            Block::EnhancedPacket(p) => (p.interface_id, p.timestamp, p.data.into_owned()),
            Block::SimplePacket(p) => (0, Duration::ZERO, p.data.into_owned()),
            _ => continue,
        };
        let link = reader
            .interfaces()
            .get(interface as usize)
            .map(|i| i.linktype);
        if link != Some(DataLink::ETHERNET) {
            return Err(CaptureError::NotEthernet(link.unwrap_or(DataLink::NULL)));
        }
        frames.push(CapturedFrame { timestamp, data });
    }
    Ok(frames)
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

/// How much to print per frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Every field, with offsets, raw bytes and explanations.
    Full,
    /// One line per frame.
    Compact,
}

/// Prints each frame. Frames that are not RoCEv2 are shown with the reason.
pub fn dissect_frames<W: Write>(
    frames: &[CapturedFrame],
    detail: Detail,
    mut out: W,
) -> io::Result<()> {
    let start = frames.first().map(|f| f.timestamp).unwrap_or_default();
    for (i, f) in frames.iter().enumerate() {
        let t = f.timestamp.saturating_sub(start).as_secs_f64();
        match detail {
            Detail::Compact => {
                writeln!(out, "{:>4} {t:>10.6}  {}", i + 1, dissect::summary(&f.data))?;
            }
            Detail::Full => {
                let mut text = String::new();
                // Writing into a String cannot fail.
                let _ = dissect::dissect(&f.data, &mut text);
                writeln!(out, "Frame {} at {t:.6} s, {} bytes", i + 1, f.data.len())?;
                writeln!(out, "{text}")?;
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
        .map(|(i, s)| CapturedFrame {
            timestamp: Duration::from_secs(START) + Duration::from_millis(i as u64),
            data: s.frame(),
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
        let header = PcapHeader {
            datalink: DataLink::LINUX_SLL,
            ..PcapHeader::default()
        };
        let mut file = Vec::new();
        PcapWriter::with_header(&mut file, header).unwrap();
        let err = read(&file).unwrap_err();
        assert!(err.to_string().contains("not Ethernet"), "{err}");
    }

    #[test]
    fn compact_is_one_line_per_frame() {
        let frames = sample_frames();
        let mut out = Vec::new();
        dissect_frames(&frames, Detail::Compact, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), frames.len());
        assert!(text.lines().all(|l| l.ends_with("ICRC ok")));
    }
}
