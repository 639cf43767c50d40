//! The rsocket protocol as rdma-core's librdmacm speaks it, so that an rsocket here talks to one
//! on any host: the connection data in the CM private data, and the messages each RDMA WRITE
//! WITH IMMEDIATE carries in its immediate data.
//!
//! A stream rsocket is an RC QP. Each side has a receive buffer whose halves it lends to the
//! other, one at a time: the peer RDMA WRITEs data into the lent half, and says how many bytes
//! in the immediate data (`Op::Data`). Once the receiver has taken half of its buffer's bytes, it
//! lends the half back with an `Op::Sgl` message: an RDMA WRITE of the half's address and key
//! into the peer's target SGL, whose immediate data also grants receive credits.

/// The immediate data: bits 31-29 the operation, bits 28-0 its data.
pub const fn msg(op: u32, data: u32) -> u32 {
    (op << 29) | data
}

pub const fn msg_op(imm: u32) -> u32 {
    imm >> 29
}

pub const fn msg_data(imm: u32) -> u32 {
    imm & 0x1fff_ffff
}

/// Data written into the lent half of the peer's buffer: data is the length.
pub const OP_DATA: u32 = 0;
/// A direct write into a mapped buffer (`riowrite`): never on the wire, only in the local
/// work request ID.
pub const OP_WRITE: u32 = 2;
/// A half of the sender's buffer lent back (or only credits): data is the receive sequence
/// number up to which the sender may send.
pub const OP_SGL: u32 = 4;
/// A mapped buffer's entry was written into the peer's iomap table: data is its index.
pub const OP_IOMAP_SGL: u32 = 6;
/// A control message: data is one of the `CTRL_` values.
pub const OP_CTRL: u32 = 7;

pub const CTRL_DISCONNECT: u32 = 0;
pub const CTRL_SHUTDOWN: u32 = 2;

/// Entries of the target SGL (the halves of a buffer in flight).
pub const SGL_SIZE: usize = 2;
/// Control messages a side may have outstanding.
pub const QP_CTRL_SIZE: u32 = 4;

/// `struct rs_sge`: where, which key and how long, in the sender's byte order (the connection
/// data says which; both are little-endian on x86).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub key: u32,
    pub length: u32,
}

impl Sge {
    pub const LEN: usize = 16;

    /// The bytes, swapped to the other byte order if `swap`.
    pub fn to_bytes(self, swap: bool) -> [u8; 16] {
        let s = if swap { self.swapped() } else { self };
        let mut b = [0; 16];
        b[..8].copy_from_slice(&s.addr.to_ne_bytes());
        b[8..12].copy_from_slice(&s.key.to_ne_bytes());
        b[12..].copy_from_slice(&s.length.to_ne_bytes());
        b
    }

    /// An SGE the peer wrote (in this side's byte order: the peer swaps if needed).
    pub fn from_bytes(b: &[u8; 16]) -> Sge {
        Sge {
            addr: u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")),
            key: u32::from_ne_bytes(b[8..12].try_into().expect("4 bytes")),
            length: u32::from_ne_bytes(b[12..].try_into().expect("4 bytes")),
        }
    }

    fn swapped(self) -> Sge {
        Sge {
            addr: self.addr.swap_bytes(),
            key: self.key.swap_bytes(),
            length: self.length.swap_bytes(),
        }
    }
}

/// `struct rs_iomap`: a buffer the peer mapped with `riomap`, at `offset` in its space.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Iomap {
    pub offset: u64,
    pub sge: Sge,
}

impl Iomap {
    pub const LEN: usize = 24;

    pub fn to_bytes(self, swap: bool) -> [u8; 24] {
        let offset = if swap {
            self.offset.swap_bytes()
        } else {
            self.offset
        };
        let mut b = [0; 24];
        b[..8].copy_from_slice(&offset.to_ne_bytes());
        b[8..].copy_from_slice(&self.sge.to_bytes(swap));
        b
    }

    pub fn from_bytes(b: &[u8; 24]) -> Iomap {
        Iomap {
            offset: u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")),
            sge: Sge::from_bytes(b[8..].try_into().expect("16 bytes")),
        }
    }
}

/// The connection data says the sender is big-endian.
pub const FLAG_NET: u8 = 1;
/// The sender has an iomap table (for `riowrite`).
pub const FLAG_IOMAP: u8 = 2;

/// `struct rs_conn_data`, the private data of the REQ and the REP (40 bytes). Its SGEs are
/// big-endian.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnData {
    pub version: u8,
    pub flags: u8,
    /// Receive credits: the sender's receive queue size.
    pub credits: u16,
    /// The sender's iomap table size, scaled ([`value_to_scale`]).
    pub target_iomap_size: u8,
    /// The sender's target SGL (which the peer writes lent halves into): its length is the
    /// number of entries.
    pub target_sgl: Sge,
    /// The first half of the sender's receive buffer, lent at once.
    pub data_buf: Sge,
}

impl ConnData {
    pub const LEN: usize = 40;

    pub fn to_bytes(self) -> [u8; 40] {
        let mut b = [0; 40];
        b[0] = self.version;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        b[7] = self.target_iomap_size;
        for (at, s) in [(8, self.target_sgl), (24, self.data_buf)] {
            b[at..at + 8].copy_from_slice(&s.addr.to_be_bytes());
            b[at + 8..at + 12].copy_from_slice(&s.key.to_be_bytes());
            b[at + 12..at + 16].copy_from_slice(&s.length.to_be_bytes());
        }
        b
    }

    /// The connection data in `b`, if it is long enough and version 1.
    pub fn parse(b: &[u8]) -> Option<ConnData> {
        if b.len() < Self::LEN || b[0] != 1 {
            return None;
        }
        let sge = |at: usize| Sge {
            addr: u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes")),
            key: u32::from_be_bytes(b[at + 8..at + 12].try_into().expect("4 bytes")),
            length: u32::from_be_bytes(b[at + 12..at + 16].try_into().expect("4 bytes")),
        };
        Some(ConnData {
            version: b[0],
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            target_iomap_size: b[7],
            target_sgl: sge(8),
            data_buf: sge(24),
        })
    }
}

/// rdma-core's `rs_value_to_scale`: values above 2^(bits-1) keep their high bits only.
pub fn value_to_scale(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (1 << (bits - 1)) | (value >> bits)
    }
}

/// rdma-core's `rs_scale_to_value`.
pub fn scale_to_value(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (value & !(1 << (bits - 1))) << bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immediate_data_carries_op_and_data() {
        let m = msg(OP_SGL, 0x1234);
        assert_eq!(m, 0x8000_1234);
        assert_eq!((msg_op(m), msg_data(m)), (OP_SGL, 0x1234));
        assert_eq!(msg(OP_CTRL, CTRL_DISCONNECT), 0xe000_0000);
    }

    #[test]
    fn connection_data_is_rdma_cores_layout() {
        let c = ConnData {
            version: 1,
            flags: FLAG_IOMAP,
            credits: 384,
            target_iomap_size: 0,
            target_sgl: Sge {
                addr: 0x1122_3344_5566_7788,
                key: 0xaabb_ccdd,
                length: 2,
            },
            data_buf: Sge {
                addr: 0x10,
                key: 7,
                length: 65536,
            },
        };
        let b = c.to_bytes();
        assert_eq!(&b[..8], &[1, 2, 0x01, 0x80, 0, 0, 0, 0]);
        assert_eq!(&b[8..16], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(&b[16..24], &[0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 2]);
        assert_eq!(ConnData::parse(&b), Some(c));
        assert_eq!(ConnData::parse(&b[..39]), None);
        let mut v2 = b;
        v2[0] = 2;
        assert_eq!(ConnData::parse(&v2), None);
    }

    #[test]
    fn sges_swap_for_a_peer_of_the_other_byte_order() {
        let s = Sge {
            addr: 1,
            key: 2,
            length: 3,
        };
        assert_eq!(Sge::from_bytes(&s.to_bytes(false)), s);
        let swapped = s.to_bytes(true);
        assert_eq!(&swapped[..8], &1u64.to_be_bytes());
        assert_eq!(&swapped[8..], &[0, 0, 0, 2, 0, 0, 0, 3]);
    }

    #[test]
    fn scales_round_as_rdma_core() {
        assert_eq!(value_to_scale(100, 8), 100);
        assert_eq!(scale_to_value(100, 8), 100);
        assert_eq!(value_to_scale(512, 8), 0x82);
        assert_eq!(scale_to_value(0x82, 8), 512);
    }
}
