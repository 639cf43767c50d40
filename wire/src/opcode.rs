//! The opcode table: for every opcode, which extension headers follow the BTH, whether a payload
//! may follow them, and the packet's position in its message (IBA Vol 1 9.2 table 35 and 9.3;
//! RoCEv2 Annex A17.9.3 for the CNP). Parsing and the engine's sequence checks read this table
//! rather than matching opcodes (the shape of Linux rxe's `rxe_opcode.c`).

use crate::{Error, Result};

bitflags::bitflags! {
    /// A set of extension headers, in wire order: XRCETH, DETH, FETH, RETH, AtomicETH, AETH,
    /// AtomicAckETH, ImmDt, IETH, and the CNP's 16 reserved bytes.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Headers: u16 {
        /// XRC Extended Transport Header (XRC requests), 4 bytes.
        const XRCETH = 1 << 0;
        /// Datagram Extended Transport Header (UD), 8 bytes.
        const DETH = 1 << 1;
        /// FLUSH Extended Transport Header, 4 bytes (before the FLUSH's RETH).
        const FETH = 1 << 2;
        /// RDMA Extended Transport Header, 16 bytes.
        const RETH = 1 << 3;
        /// Atomic Extended Transport Header, 28 bytes.
        const ATOMIC_ETH = 1 << 4;
        /// ACK Extended Transport Header, 4 bytes.
        const AETH = 1 << 5;
        /// Atomic ACK Extended Transport Header, 8 bytes.
        const ATOMIC_ACK_ETH = 1 << 6;
        /// Immediate data, 4 bytes.
        const IMMDT = 1 << 7;
        /// Invalidate Extended Transport Header, 4 bytes.
        const IETH = 1 << 8;
        /// The 16 reserved bytes after a CNP's BTH.
        const CNP_RESERVED = 1 << 9;
    }
}

impl Headers {
    /// Each header with its length, in the order they appear on the wire.
    pub const WIRE_ORDER: [(Headers, usize); 10] = [
        (Headers::XRCETH, 4),
        (Headers::DETH, 8),
        (Headers::FETH, 4),
        (Headers::RETH, 16),
        (Headers::ATOMIC_ETH, 28),
        (Headers::AETH, 4),
        (Headers::ATOMIC_ACK_ETH, 8),
        (Headers::IMMDT, 4),
        (Headers::IETH, 4),
        (Headers::CNP_RESERVED, 16),
    ];

    /// The total length of the headers in this set (empty: `is_empty`).
    #[inline]
    #[allow(clippy::len_without_is_empty, reason = "bitflags gives is_empty")]
    pub const fn len(self) -> usize {
        LEN_OF[self.bits() as usize] as usize
    }

    /// The offset of `header` (a single header) from the end of the BTH, if it is in this set:
    /// the length of the headers before it, which are the lower bits.
    #[inline]
    pub const fn offset_of(self, header: Headers) -> Option<usize> {
        if header.bits().count_ones() != 1 || !self.contains(header) {
            return None;
        }
        Some(Headers::from_bits_retain(self.bits() & (header.bits() - 1)).len())
    }
}

/// Sets of headers: every combination of the [`Headers::WIRE_ORDER`] bits.
const SETS: usize = 1 << Headers::WIRE_ORDER.len();

/// The length of every set of headers, indexed by its bits, so that lengths and offsets are
/// table lookups on the receive path.
static LEN_OF: [u8; SETS] = {
    let mut table = [0u8; SETS];
    let mut set = 0;
    while set < SETS {
        let mut i = 0;
        while i < Headers::WIRE_ORDER.len() {
            let (h, len) = Headers::WIRE_ORDER[i];
            if set & h.bits() as usize != 0 {
                table[set] += len as u8;
            }
            i += 1;
        }
        set += 1;
    }
    table
};

/// The transport service an opcode belongs to: the top three bits of the opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected, 0x00-0x1f.
    Rc,
    /// Unreliable Connected, 0x20-0x3f.
    Uc,
    /// Unreliable Datagram, 0x60-0x7f.
    Ud,
    /// Congestion Notification Packet (RoCEv2), 0x81.
    Cnp,
    /// Extended Reliable Connected (IBA Annex A14), 0xa0-0xbf.
    Xrc,
}

/// Where a packet sits in its message (IBA 9.3: FIRST, MIDDLE, LAST and ONLY packets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// The first packet of a multi-packet message.
    First,
    /// A packet between the first and the last.
    Middle,
    /// The last packet of a multi-packet message.
    Last,
    /// A message of one packet.
    Only,
}

impl Position {
    /// The position of a packet that is (or is not) the first and the last of its message.
    pub const fn of(first: bool, last: bool) -> Position {
        match (first, last) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        }
    }

    /// Whether the packet starts its message (FIRST or ONLY).
    pub const fn is_first(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    /// Whether the packet ends its message (LAST or ONLY).
    pub const fn is_last(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// What the last packet of a message carries besides its operation's headers: nothing, an
/// immediate (ImmDt) or an rkey to invalidate (IETH).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum With {
    /// Neither.
    Nothing,
    /// "WITH_IMMEDIATE" opcodes.
    Immediate,
    /// "WITH_INVALIDATE" opcodes.
    Invalidate,
}

/// What an opcode does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND: consumes a receive WQE at the responder.
    Send,
    /// RDMA WRITE into the responder's memory.
    RdmaWrite,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response data.
    RdmaReadResponse,
    /// ACK or NAK.
    Acknowledge,
    /// The response to an atomic, carrying the original remote value.
    AtomicAcknowledge,
    /// Atomic compare and swap.
    CompareSwap,
    /// Atomic fetch and add.
    FetchAdd,
    /// Congestion notification (DCQCN).
    Cnp,
    /// FLUSH: make earlier writes to a range or region visible or persistent (IBA 1.5).
    Flush,
    /// ATOMIC WRITE: an 8-byte payload stored at once, after earlier requests (IBA 1.5).
    AtomicWrite,
}

impl Operation {
    /// Whether packets of this operation may carry a payload.
    pub const fn allows_payload(self) -> bool {
        matches!(
            self,
            Operation::Send
                | Operation::RdmaWrite
                | Operation::RdmaReadResponse
                | Operation::AtomicWrite
        )
    }

    /// Whether the packet is sent by a responder (ACKs, read responses) rather than a requester.
    pub const fn is_response(self) -> bool {
        matches!(
            self,
            Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    }
}

/// One row of the opcode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode.
    pub opcode: Opcode,
    /// Its name as the IBA spells it, e.g. `RC_SEND_ONLY`.
    pub name: &'static str,
    /// The transport service.
    pub transport: Transport,
    /// What it does.
    pub operation: Operation,
    /// Its position in the message.
    pub position: Position,
    /// The extension headers that follow the BTH.
    pub headers: Headers,
}

impl OpcodeInfo {
    /// Whether a payload may follow the headers.
    pub const fn allows_payload(&self) -> bool {
        self.operation.allows_payload()
    }
}

macro_rules! opcodes {
    ($($variant:ident = $value:literal, $name:literal, $transport:ident, $op:ident, $pos:ident,
       [$($h:ident),*];)*) => {
        /// A known BTH opcode. Construct it from a byte with [`Opcode::from_u8`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        #[allow(missing_docs)]
        pub enum Opcode {
            $($variant = $value,)*
        }

        /// Every known opcode's row, in opcode order.
        pub static TABLE: &[OpcodeInfo] = &[
            $(OpcodeInfo {
                opcode: Opcode::$variant,
                name: $name,
                transport: Transport::$transport,
                operation: Operation::$op,
                position: Position::$pos,
                headers: Headers::empty() $(.union(Headers::$h))*,
            },)*
        ];
    };
}

opcodes! {
    RcSendFirst = 0x00, "RC_SEND_FIRST", Rc, Send, First, [];
    RcSendMiddle = 0x01, "RC_SEND_MIDDLE", Rc, Send, Middle, [];
    RcSendLast = 0x02, "RC_SEND_LAST", Rc, Send, Last, [];
    RcSendLastImm = 0x03, "RC_SEND_LAST_WITH_IMMEDIATE", Rc, Send, Last, [IMMDT];
    RcSendOnly = 0x04, "RC_SEND_ONLY", Rc, Send, Only, [];
    RcSendOnlyImm = 0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", Rc, Send, Only, [IMMDT];
    RcWriteFirst = 0x06, "RC_RDMA_WRITE_FIRST", Rc, RdmaWrite, First, [RETH];
    RcWriteMiddle = 0x07, "RC_RDMA_WRITE_MIDDLE", Rc, RdmaWrite, Middle, [];
    RcWriteLast = 0x08, "RC_RDMA_WRITE_LAST", Rc, RdmaWrite, Last, [];
    RcWriteLastImm = 0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", Rc, RdmaWrite, Last, [IMMDT];
    RcWriteOnly = 0x0a, "RC_RDMA_WRITE_ONLY", Rc, RdmaWrite, Only, [RETH];
    RcWriteOnlyImm = 0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", Rc, RdmaWrite, Only, [RETH, IMMDT];
    RcReadRequest = 0x0c, "RC_RDMA_READ_REQUEST", Rc, RdmaReadRequest, Only, [RETH];
    RcReadResponseFirst = 0x0d, "RC_RDMA_READ_RESPONSE_FIRST", Rc, RdmaReadResponse, First, [AETH];
    RcReadResponseMiddle = 0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", Rc, RdmaReadResponse, Middle, [];
    RcReadResponseLast = 0x0f, "RC_RDMA_READ_RESPONSE_LAST", Rc, RdmaReadResponse, Last, [AETH];
    RcReadResponseOnly = 0x10, "RC_RDMA_READ_RESPONSE_ONLY", Rc, RdmaReadResponse, Only, [AETH];
    RcAcknowledge = 0x11, "RC_ACKNOWLEDGE", Rc, Acknowledge, Only, [AETH];
    RcAtomicAcknowledge = 0x12, "RC_ATOMIC_ACKNOWLEDGE", Rc, AtomicAcknowledge, Only, [AETH, ATOMIC_ACK_ETH];
    RcCompareSwap = 0x13, "RC_COMPARE_SWAP", Rc, CompareSwap, Only, [ATOMIC_ETH];
    RcFetchAdd = 0x14, "RC_FETCH_ADD", Rc, FetchAdd, Only, [ATOMIC_ETH];
    RcSendLastInv = 0x16, "RC_SEND_LAST_WITH_INVALIDATE", Rc, Send, Last, [IETH];
    RcSendOnlyInv = 0x17, "RC_SEND_ONLY_WITH_INVALIDATE", Rc, Send, Only, [IETH];
    RcFlush = 0x1c, "RC_FLUSH", Rc, Flush, Only, [FETH, RETH];
    RcAtomicWrite = 0x1d, "RC_ATOMIC_WRITE", Rc, AtomicWrite, Only, [RETH];
    UcSendFirst = 0x20, "UC_SEND_FIRST", Uc, Send, First, [];
    UcSendMiddle = 0x21, "UC_SEND_MIDDLE", Uc, Send, Middle, [];
    UcSendLast = 0x22, "UC_SEND_LAST", Uc, Send, Last, [];
    UcSendLastImm = 0x23, "UC_SEND_LAST_WITH_IMMEDIATE", Uc, Send, Last, [IMMDT];
    UcSendOnly = 0x24, "UC_SEND_ONLY", Uc, Send, Only, [];
    UcSendOnlyImm = 0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", Uc, Send, Only, [IMMDT];
    UcWriteFirst = 0x26, "UC_RDMA_WRITE_FIRST", Uc, RdmaWrite, First, [RETH];
    UcWriteMiddle = 0x27, "UC_RDMA_WRITE_MIDDLE", Uc, RdmaWrite, Middle, [];
    UcWriteLast = 0x28, "UC_RDMA_WRITE_LAST", Uc, RdmaWrite, Last, [];
    UcWriteLastImm = 0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", Uc, RdmaWrite, Last, [IMMDT];
    UcWriteOnly = 0x2a, "UC_RDMA_WRITE_ONLY", Uc, RdmaWrite, Only, [RETH];
    UcWriteOnlyImm = 0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", Uc, RdmaWrite, Only, [RETH, IMMDT];
    UdSendOnly = 0x64, "UD_SEND_ONLY", Ud, Send, Only, [DETH];
    UdSendOnlyImm = 0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", Ud, Send, Only, [DETH, IMMDT];
    Cnp = 0x81, "CNP", Cnp, Cnp, Only, [CNP_RESERVED];
    XrcSendFirst = 0xa0, "XRC_SEND_FIRST", Xrc, Send, First, [XRCETH];
    XrcSendMiddle = 0xa1, "XRC_SEND_MIDDLE", Xrc, Send, Middle, [XRCETH];
    XrcSendLast = 0xa2, "XRC_SEND_LAST", Xrc, Send, Last, [XRCETH];
    XrcSendLastImm = 0xa3, "XRC_SEND_LAST_WITH_IMMEDIATE", Xrc, Send, Last, [XRCETH, IMMDT];
    XrcSendOnly = 0xa4, "XRC_SEND_ONLY", Xrc, Send, Only, [XRCETH];
    XrcSendOnlyImm = 0xa5, "XRC_SEND_ONLY_WITH_IMMEDIATE", Xrc, Send, Only, [XRCETH, IMMDT];
    XrcWriteFirst = 0xa6, "XRC_RDMA_WRITE_FIRST", Xrc, RdmaWrite, First, [XRCETH, RETH];
    XrcWriteMiddle = 0xa7, "XRC_RDMA_WRITE_MIDDLE", Xrc, RdmaWrite, Middle, [XRCETH];
    XrcWriteLast = 0xa8, "XRC_RDMA_WRITE_LAST", Xrc, RdmaWrite, Last, [XRCETH];
    XrcWriteLastImm = 0xa9, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE", Xrc, RdmaWrite, Last, [XRCETH, IMMDT];
    XrcWriteOnly = 0xaa, "XRC_RDMA_WRITE_ONLY", Xrc, RdmaWrite, Only, [XRCETH, RETH];
    XrcWriteOnlyImm = 0xab, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", Xrc, RdmaWrite, Only, [XRCETH, RETH, IMMDT];
    XrcReadRequest = 0xac, "XRC_RDMA_READ_REQUEST", Xrc, RdmaReadRequest, Only, [XRCETH, RETH];
    XrcReadResponseFirst = 0xad, "XRC_RDMA_READ_RESPONSE_FIRST", Xrc, RdmaReadResponse, First, [AETH];
    XrcReadResponseMiddle = 0xae, "XRC_RDMA_READ_RESPONSE_MIDDLE", Xrc, RdmaReadResponse, Middle, [];
    XrcReadResponseLast = 0xaf, "XRC_RDMA_READ_RESPONSE_LAST", Xrc, RdmaReadResponse, Last, [AETH];
    XrcReadResponseOnly = 0xb0, "XRC_RDMA_READ_RESPONSE_ONLY", Xrc, RdmaReadResponse, Only, [AETH];
    XrcAcknowledge = 0xb1, "XRC_ACKNOWLEDGE", Xrc, Acknowledge, Only, [AETH];
    XrcAtomicAcknowledge = 0xb2, "XRC_ATOMIC_ACKNOWLEDGE", Xrc, AtomicAcknowledge, Only, [AETH, ATOMIC_ACK_ETH];
    XrcCompareSwap = 0xb3, "XRC_COMPARE_SWAP", Xrc, CompareSwap, Only, [XRCETH, ATOMIC_ETH];
    XrcFetchAdd = 0xb4, "XRC_FETCH_ADD", Xrc, FetchAdd, Only, [XRCETH, ATOMIC_ETH];
    XrcSendLastInv = 0xb6, "XRC_SEND_LAST_WITH_INVALIDATE", Xrc, Send, Last, [XRCETH, IETH];
    XrcSendOnlyInv = 0xb7, "XRC_SEND_ONLY_WITH_INVALIDATE", Xrc, Send, Only, [XRCETH, IETH];
}

/// For each byte, its row in [`TABLE`] plus one, or 0 if the opcode is unknown.
static INDEX: [u8; 256] = {
    let mut index = [0u8; 256];
    let mut i = 0;
    while i < TABLE.len() {
        index[TABLE[i].opcode as usize] = i as u8 + 1;
        i += 1;
    }
    index
};

/// How many transports there are (the last one's index plus one).
const TRANSPORTS: usize = Transport::Xrc as usize + 1;

/// How many operations there are (the last one's index plus one).
const OPERATIONS: usize = Operation::AtomicWrite as usize + 1;

/// The slot of (transport, operation, position, with) in [`BUILD`].
const fn build_slot(t: Transport, o: Operation, p: Position, w: With) -> usize {
    ((t as usize * OPERATIONS + o as usize) * 4 + p as usize) * 3 + w as usize
}

/// For each (transport, operation, position, with), its row in [`TABLE`] plus one, or 0 if no
/// opcode is that: the table read the other way, for building packets.
static BUILD: [u8; TRANSPORTS * OPERATIONS * 4 * 3] = {
    let mut build = [0u8; TRANSPORTS * OPERATIONS * 4 * 3];
    let mut i = 0;
    while i < TABLE.len() {
        let r = &TABLE[i];
        let with = if r.headers.contains(Headers::IMMDT) {
            With::Immediate
        } else if r.headers.contains(Headers::IETH) {
            With::Invalidate
        } else {
            With::Nothing
        };
        build[build_slot(r.transport, r.operation, r.position, with)] = i as u8 + 1;
        i += 1;
    }
    build
};

impl Opcode {
    /// The opcode of a packet of `operation` over `transport` at `position` in its message,
    /// carrying `with` (the table of IBA 9.2, read the other way); `None` if the IBA has none
    /// (a WRITE with invalidate, a multi-packet UD message, ...).
    #[inline]
    pub fn build(
        transport: Transport,
        operation: Operation,
        position: Position,
        with: With,
    ) -> Option<Opcode> {
        match BUILD[build_slot(transport, operation, position, with)] {
            0 => None,
            row => Some(TABLE[row as usize - 1].opcode),
        }
    }

    /// The opcode for a byte, or [`Error::UnknownOpcode`] for reserved and unsupported ones
    /// (RD and vendor opcodes).
    #[inline]
    pub fn from_u8(value: u8) -> Result<Opcode> {
        match INDEX[value as usize] {
            0 => Err(Error::UnknownOpcode(value)),
            row => Ok(TABLE[row as usize - 1].opcode),
        }
    }

    /// This opcode's row in the table.
    #[inline]
    pub fn info(self) -> &'static OpcodeInfo {
        &TABLE[INDEX[self as usize] as usize - 1]
    }

    /// The IBA name, e.g. `RC_SEND_ONLY`.
    pub fn name(self) -> &'static str {
        self.info().name
    }
}

impl core::fmt::Display for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_is_known_or_a_clear_error() {
        let known: Vec<u8> = (0..=255u8)
            .filter(|&b| Opcode::from_u8(b).is_ok())
            .collect();
        assert_eq!(known.len(), 63);
        for b in 0..=255u8 {
            match Opcode::from_u8(b) {
                Ok(op) => assert_eq!(op as u8, b),
                Err(e) => assert_eq!(e, Error::UnknownOpcode(b)),
            }
        }
        // Reserved RC 0x15 and 0x18, RD, reserved XRC 0xb5 and 0xb8, vendor range.
        for b in [
            0x15, 0x18, 0x1e, 0x2c, 0x40, 0x4c, 0x60, 0x80, 0xb5, 0xb8, 0xc0, 0xff,
        ] {
            assert_eq!(Opcode::from_u8(b), Err(Error::UnknownOpcode(b)));
        }
    }

    #[test]
    fn transport_is_the_top_three_bits() {
        for info in TABLE {
            let expected = match info.opcode as u8 >> 5 {
                0 => Transport::Rc,
                1 => Transport::Uc,
                3 => Transport::Ud,
                4 => Transport::Cnp,
                5 => Transport::Xrc,
                other => panic!("unexpected transport bits {other}"),
            };
            assert_eq!(info.transport, expected, "{}", info.name);
            assert!(info.name.starts_with(match expected {
                Transport::Rc => "RC_",
                Transport::Uc => "UC_",
                Transport::Ud => "UD_",
                Transport::Cnp => "CNP",
                Transport::Xrc => "XRC_",
            }));
        }
    }

    #[test]
    fn header_layouts_match_iba_table_35() {
        use Opcode::*;
        let cases: &[(Opcode, Headers, usize)] = &[
            (RcSendOnly, Headers::empty(), 0),
            (RcSendOnlyImm, Headers::IMMDT, 4),
            (RcWriteOnlyImm, Headers::RETH.union(Headers::IMMDT), 20),
            (RcReadRequest, Headers::RETH, 16),
            (RcReadResponseMiddle, Headers::empty(), 0),
            (RcReadResponseFirst, Headers::AETH, 4),
            (
                RcAtomicAcknowledge,
                Headers::AETH.union(Headers::ATOMIC_ACK_ETH),
                12,
            ),
            (RcCompareSwap, Headers::ATOMIC_ETH, 28),
            (RcSendOnlyInv, Headers::IETH, 4),
            (UdSendOnlyImm, Headers::DETH.union(Headers::IMMDT), 12),
            (Cnp, Headers::CNP_RESERVED, 16),
            // IBA 1.5 9.3.8: the FETH comes before the FLUSH's RETH.
            (RcFlush, Headers::FETH.union(Headers::RETH), 20),
            (RcAtomicWrite, Headers::RETH, 16),
            // IBA A14: the XRCETH leads every XRC request; responses are RC's.
            (
                XrcWriteOnlyImm,
                Headers::XRCETH | Headers::RETH | Headers::IMMDT,
                24,
            ),
            (XrcFetchAdd, Headers::XRCETH | Headers::ATOMIC_ETH, 32),
            (XrcAcknowledge, Headers::AETH, 4),
        ];
        for &(op, headers, len) in cases {
            assert_eq!(op.info().headers, headers, "{op}");
            assert_eq!(headers.len(), len, "{op}");
        }
        let h = Headers::RETH.union(Headers::IMMDT);
        assert_eq!(h.offset_of(Headers::RETH), Some(0));
        assert_eq!(h.offset_of(Headers::IMMDT), Some(16));
        assert_eq!(h.offset_of(Headers::AETH), None);
        assert_eq!(h.offset_of(h), None, "not a single header");
        let flush = Opcode::RcFlush.info().headers;
        assert_eq!(flush.offset_of(Headers::FETH), Some(0));
        assert_eq!(flush.offset_of(Headers::RETH), Some(4));
        let all = Headers::all();
        assert_eq!(all.len(), 4 + 8 + 4 + 16 + 28 + 4 + 8 + 4 + 4 + 16);
        assert_eq!(all.offset_of(Headers::CNP_RESERVED), Some(80));
        let h = Headers::DETH.union(Headers::IMMDT);
        assert_eq!(h.offset_of(Headers::IMMDT), Some(8));
    }

    #[test]
    fn every_opcode_is_built_from_its_row_and_nothing_else_is() {
        let withs = [With::Nothing, With::Immediate, With::Invalidate];
        for info in TABLE {
            let with = withs
                .into_iter()
                .filter(|&w| {
                    Opcode::build(info.transport, info.operation, info.position, w)
                        == Some(info.opcode)
                })
                .count();
            assert_eq!(with, 1, "{}", info.name);
        }
        use Operation::*;
        use Transport::*;
        let built = |t, o, p, w| Opcode::build(t, o, p, w);
        assert_eq!(
            built(Rc, Send, Position::Last, With::Invalidate),
            Some(Opcode::RcSendLastInv)
        );
        assert_eq!(built(Uc, Send, Position::Last, With::Invalidate), None);
        assert_eq!(built(Rc, RdmaWrite, Position::Only, With::Invalidate), None);
        assert_eq!(built(Ud, Send, Position::First, With::Nothing), None);
        assert_eq!(
            built(Rc, RdmaWrite, Position::Middle, With::Immediate),
            None
        );
        assert_eq!(
            built(
                Rc,
                RdmaReadResponse,
                Position::of(false, true),
                With::Nothing
            ),
            Some(Opcode::RcReadResponseLast)
        );
    }

    #[test]
    fn xrc_has_every_rc_opcode_of_ibas_first_release_at_0xa0_on() {
        for info in TABLE.iter().filter(|i| i.transport == Transport::Xrc) {
            let rc = Opcode::from_u8(info.opcode as u8 - 0xa0).expect("an RC twin");
            let rc = rc.info();
            assert_eq!(&info.name[4..], &rc.name[3..]);
            assert_eq!((info.operation, info.position), (rc.operation, rc.position));
            let xrceth = !info.operation.is_response();
            assert_eq!(
                info.headers.contains(Headers::XRCETH),
                xrceth,
                "{}",
                info.name
            );
            assert_eq!(info.headers - Headers::XRCETH, rc.headers, "{}", info.name);
        }
    }

    #[test]
    fn positions_say_where_a_message_starts_and_ends() {
        for (first, last) in [(true, true), (true, false), (false, true), (false, false)] {
            let p = Position::of(first, last);
            assert_eq!((p.is_first(), p.is_last()), (first, last), "{p:?}");
        }
    }

    #[test]
    fn payload_rules() {
        for info in TABLE {
            let expect = !matches!(
                info.operation,
                Operation::RdmaReadRequest
                    | Operation::Acknowledge
                    | Operation::AtomicAcknowledge
                    | Operation::CompareSwap
                    | Operation::FetchAdd
                    | Operation::Cnp
                    | Operation::Flush
            );
            assert_eq!(info.allows_payload(), expect, "{}", info.name);
        }
    }

    #[test]
    fn positions_follow_names() {
        for info in TABLE {
            let n = info.name;
            let expected = if n.contains("_FIRST") {
                Position::First
            } else if n.contains("_MIDDLE") {
                Position::Middle
            } else if n.contains("_LAST") {
                Position::Last
            } else {
                Position::Only
            };
            assert_eq!(info.position, expected, "{n}");
        }
    }
}
