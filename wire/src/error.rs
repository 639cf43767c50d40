use core::fmt;

/// Why a frame or header could not be parsed or emitted. Every malformed input has its own
/// variant, so a dropped frame can be counted and explained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer ends before a header or the ICRC does.
    Truncated,
    /// The EtherType (after any 802.1Q tag) is neither IPv4 nor IPv6.
    NotIp(u16),
    /// The IP version nibble disagrees with the EtherType.
    BadIpVersion(u8),
    /// An IPv4 header with options: RoCEv2 frames carry none, and the ICRC covers exactly 20 bytes.
    Ipv4Options,
    /// An IPv4 fragment: RoCEv2 frames are never fragmented.
    IpFragment,
    /// The IPv4 header checksum is wrong.
    BadIpChecksum,
    /// The IP total/payload length disagrees with the frame.
    BadIpLength,
    /// The IP payload is not UDP (the protocol or next header number).
    NotUdp(u8),
    /// The UDP length disagrees with the IP length.
    BadUdpLength,
    /// The UDP destination port is not 4791.
    NotRoce(u16),
    /// The BTH transport header version is not 0 (IBA 9.2: TVer must be 0).
    BadTver(u8),
    /// The opcode is reserved or not one softrnic knows (RC, UC, UD and CNP are supported).
    UnknownOpcode(u8),
    /// The pad count is larger than the payload, or the packet is not a multiple of 4 bytes.
    PadInconsistent,
    /// A payload follows an opcode that allows none (READ request, ACK, atomics, CNP).
    PayloadNotAllowed,
    /// The ICRC in the frame is not the one computed over it.
    BadIcrc {
        /// The ICRC computed over the frame.
        computed: u32,
        /// The ICRC the frame carries.
        received: u32,
    },
    /// Emit: the extension headers given do not match the ones the opcode requires.
    HeadersMismatch,
    /// Emit: the payload is too long for one IP packet.
    PayloadTooLong,
    /// Emit: the caller's buffer is smaller than the frame.
    BufferTooSmall,
    /// A management datagram that is not one this crate reads: another base version, class,
    /// class version, method or attribute than the CM's, or a malformed rdma_cm header.
    BadMad,
    /// Emit: private data longer than the CM message's area for it.
    PrivateDataTooLong,
}

/// The result of parsing or emitting.
pub type Result<T> = core::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated => write!(f, "truncated: the frame ends inside a header"),
            Error::NotIp(t) => write!(f, "not IP: EtherType {t:#06x}"),
            Error::BadIpVersion(v) => write!(f, "bad IP version {v}"),
            Error::Ipv4Options => {
                write!(f, "IPv4 header has options (RoCEv2 uses a 20-byte header)")
            }
            Error::IpFragment => write!(f, "IPv4 fragment (RoCEv2 is never fragmented)"),
            Error::BadIpChecksum => write!(f, "bad IPv4 header checksum"),
            Error::BadIpLength => write!(f, "bad IP length: it disagrees with the frame"),
            Error::NotUdp(p) => write!(f, "not UDP: IP protocol {p}"),
            Error::BadUdpLength => write!(f, "bad UDP length: it disagrees with the IP length"),
            Error::NotRoce(p) => write!(f, "not RoCEv2: UDP destination port {p}, not 4791"),
            Error::BadTver(v) => write!(f, "bad BTH TVer {v} (must be 0)"),
            Error::UnknownOpcode(op) => write!(f, "unknown or reserved opcode {op:#04x}"),
            Error::PadInconsistent => {
                write!(f, "pad count inconsistent with the packet length")
            }
            Error::PayloadNotAllowed => write!(f, "payload on an opcode that allows none"),
            Error::BadIcrc { computed, received } => {
                write!(
                    f,
                    "bad ICRC: frame has {received:#010x}, computed {computed:#010x}"
                )
            }
            Error::HeadersMismatch => {
                write!(f, "extension headers do not match the opcode's")
            }
            Error::PayloadTooLong => write!(f, "payload too long for one IP packet"),
            Error::BufferTooSmall => write!(f, "buffer too small for the frame"),
            Error::BadMad => write!(f, "not a CM MAD this implementation reads"),
            Error::PrivateDataTooLong => {
                write!(f, "private data longer than the CM message allows")
            }
        }
    }
}

impl std::error::Error for Error {}
