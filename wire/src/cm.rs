//! Communication Management messages (IBA Vol 1 chapter 12): how two RC or UC QPs are connected
//! (REQ, REP, RTU), refused (REJ), given more time (MRA) and disconnected (DREQ, DREP), and how
//! a UD service is resolved (SIDR_REQ, SIDR_REP, 12.11). Each is a MAD of management class 0x07,
//! class version 2, method SEND, sent to QP1; its attribute ID says which message it is, and
//! its 232 bytes after the [MAD header](crate::mad) are laid out below, every field big-endian
//! at the byte and bit IBA 12.6 gives it. Private data is the users' (for rdma_cm, a
//! [`CmaHeader`] first), zero-filled to its fixed size.
//!
//! RoCE (Annex A16/A17) keeps the messages as they are: the path's GIDs are the IP-based GIDs,
//! and the LIDs carry no meaning.

use crate::mad::{MAD_LEN, METHOD_SEND, MadHeader, MadRepr};
use crate::view::{read_be, write_be};
use crate::{Error, Result};

/// The Communication Management class (IBA 13.4.4).
pub const CM_CLASS: u8 = 0x07;
/// The CM class version these messages have (IBA 12.6: 2).
pub const CM_CLASS_VERSION: u8 = 2;
/// The bytes of a CM message after the MAD header.
pub const CM_DATA_LEN: usize = MAD_LEN - 24;

/// CM attribute IDs (IBA 12.6.x, table "CM attributes").
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// Connection request.
    pub const REQ: u16 = 0x0010;
    /// Message receipt acknowledgement.
    pub const MRA: u16 = 0x0011;
    /// Reject.
    pub const REJ: u16 = 0x0012;
    /// Reply to a request.
    pub const REP: u16 = 0x0013;
    /// Ready to use.
    pub const RTU: u16 = 0x0014;
    /// Disconnect request.
    pub const DREQ: u16 = 0x0015;
    /// Disconnect reply.
    pub const DREP: u16 = 0x0016;
    /// Service ID resolution request.
    pub const SIDR_REQ: u16 = 0x0017;
    /// Service ID resolution reply.
    pub const SIDR_REP: u16 = 0x0018;
    /// Load alternate path.
    pub const LAP: u16 = 0x0019;
    /// Alternate path response.
    pub const APR: u16 = 0x001a;
}

/// Where a field of a CM message is: its byte offset after the MAD header, its length in
/// bytes, and for a field of some bits of one byte, which bits (`shift` up from the least
/// significant bit, `width` wide). A 24-bit field (QPN, PSN) is the top of a 32-bit word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    /// Byte offset in the message body.
    pub at: usize,
    /// Length in bytes (for bits, 1).
    pub len: usize,
    /// For a bit field: (shift, width).
    pub bits: Option<(u32, u32)>,
}

impl Loc {
    /// Whole bytes.
    pub const fn bytes(at: usize, len: usize) -> Loc {
        Loc {
            at,
            len,
            bits: None,
        }
    }
    /// Some bits of the byte at `at`.
    pub const fn bits(at: usize, shift: u32, width: u32) -> Loc {
        Loc {
            at,
            len: 1,
            bits: Some((shift, width)),
        }
    }
    /// The mask of the bits in their byte (0xff for whole bytes).
    pub fn mask(&self) -> u8 {
        self.bits.map_or(0xff, |(shift, width)| {
            (((1u16 << width) - 1) << shift) as u8
        })
    }
    /// Reads the field from a message body (24-bit fields: 3 bytes).
    pub fn read(&self, body: &[u8]) -> u64 {
        let v = read_be(&body[self.at..self.at + self.len]);
        match self.bits {
            Some((shift, width)) => (v >> shift) & ((1 << width) - 1),
            None => v,
        }
    }
    /// Writes the field (the body starts zeroed: bits are ored in).
    fn write(&self, body: &mut [u8], value: u64) {
        match self.bits {
            Some((shift, width)) => body[self.at] |= ((value & ((1 << width) - 1)) as u8) << shift,
            None => write_be(&mut body[self.at..self.at + self.len], value),
        }
    }
}

/// The fields of each message (IBA 12.6.5 to 12.6.11, 12.11; the kernel's cm_msgs.h agrees),
/// named as IBA names them.
#[allow(missing_docs)]
pub mod field {
    use super::Loc;
    /// Every connection message starts with the sender's and the receiver's IDs.
    pub const LOCAL_COMM_ID: Loc = Loc::bytes(0, 4);
    /// The receiver's communication ID.
    pub const REMOTE_COMM_ID: Loc = Loc::bytes(4, 4);
    /// REQ (12.6.5).
    pub mod req {
        use super::Loc;
        pub const SERVICE_ID: Loc = Loc::bytes(8, 8);
        pub const LOCAL_CA_GUID: Loc = Loc::bytes(16, 8);
        pub const LOCAL_QKEY: Loc = Loc::bytes(28, 4);
        pub const LOCAL_QPN: Loc = Loc::bytes(32, 3);
        pub const RESPONDER_RESOURCES: Loc = Loc::bytes(35, 1);
        pub const LOCAL_EECN: Loc = Loc::bytes(36, 3);
        pub const INITIATOR_DEPTH: Loc = Loc::bytes(39, 1);
        pub const REMOTE_EECN: Loc = Loc::bytes(40, 3);
        pub const REMOTE_CM_RESPONSE_TIMEOUT: Loc = Loc::bits(43, 3, 5);
        pub const TRANSPORT: Loc = Loc::bits(43, 1, 2);
        pub const END_TO_END_FLOW_CONTROL: Loc = Loc::bits(43, 0, 1);
        pub const STARTING_PSN: Loc = Loc::bytes(44, 3);
        pub const LOCAL_CM_RESPONSE_TIMEOUT: Loc = Loc::bits(47, 3, 5);
        pub const RETRY_COUNT: Loc = Loc::bits(47, 0, 3);
        pub const PKEY: Loc = Loc::bytes(48, 2);
        pub const PATH_MTU: Loc = Loc::bits(50, 4, 4);
        pub const RDC_EXISTS: Loc = Loc::bits(50, 3, 1);
        pub const RNR_RETRY_COUNT: Loc = Loc::bits(50, 0, 3);
        pub const MAX_CM_RETRIES: Loc = Loc::bits(51, 4, 4);
        pub const SRQ: Loc = Loc::bits(51, 3, 1);
        pub const EXTENDED_TRANSPORT: Loc = Loc::bits(51, 0, 3);
        pub const PRIMARY_PATH: usize = 52;
        pub const ALTERNATE_PATH: usize = 96;
        pub const PRIVATE_DATA: Loc = Loc::bytes(140, 92);
    }
    /// A path in a REQ, relative to the path's start.
    pub mod path {
        use super::Loc;
        pub const LOCAL_LID: Loc = Loc::bytes(0, 2);
        pub const REMOTE_LID: Loc = Loc::bytes(2, 2);
        pub const LOCAL_GID: Loc = Loc::bytes(4, 16);
        pub const REMOTE_GID: Loc = Loc::bytes(20, 16);
        pub const FLOW_LABEL: Loc = Loc::bytes(36, 3);
        pub const PACKET_RATE: Loc = Loc::bits(39, 0, 6);
        pub const TRAFFIC_CLASS: Loc = Loc::bytes(40, 1);
        pub const HOP_LIMIT: Loc = Loc::bytes(41, 1);
        pub const SL: Loc = Loc::bits(42, 4, 4);
        pub const SUBNET_LOCAL: Loc = Loc::bits(42, 3, 1);
        pub const LOCAL_ACK_TIMEOUT: Loc = Loc::bits(43, 3, 5);
    }
    /// MRA (12.6.6).
    pub mod mra {
        use super::Loc;
        pub const MESSAGE_MRAED: Loc = Loc::bits(8, 6, 2);
        pub const SERVICE_TIMEOUT: Loc = Loc::bits(9, 3, 5);
        pub const PRIVATE_DATA: Loc = Loc::bytes(10, 222);
    }
    /// REJ (12.6.7).
    pub mod rej {
        use super::Loc;
        pub const MESSAGE_REJECTED: Loc = Loc::bits(8, 6, 2);
        pub const REJECT_INFO_LEN: Loc = Loc::bits(9, 1, 7);
        pub const REASON: Loc = Loc::bytes(10, 2);
        pub const ARI: Loc = Loc::bytes(12, 72);
        pub const PRIVATE_DATA: Loc = Loc::bytes(84, 148);
    }
    /// REP (12.6.8).
    pub mod rep {
        use super::Loc;
        pub const LOCAL_QKEY: Loc = Loc::bytes(8, 4);
        pub const LOCAL_QPN: Loc = Loc::bytes(12, 3);
        pub const LOCAL_EECN: Loc = Loc::bytes(16, 3);
        pub const STARTING_PSN: Loc = Loc::bytes(20, 3);
        pub const RESPONDER_RESOURCES: Loc = Loc::bytes(24, 1);
        pub const INITIATOR_DEPTH: Loc = Loc::bytes(25, 1);
        pub const TARGET_ACK_DELAY: Loc = Loc::bits(26, 3, 5);
        pub const FAILOVER_ACCEPTED: Loc = Loc::bits(26, 1, 2);
        pub const END_TO_END_FLOW_CONTROL: Loc = Loc::bits(26, 0, 1);
        pub const RNR_RETRY_COUNT: Loc = Loc::bits(27, 5, 3);
        pub const SRQ: Loc = Loc::bits(27, 4, 1);
        pub const LOCAL_CA_GUID: Loc = Loc::bytes(28, 8);
        pub const PRIVATE_DATA: Loc = Loc::bytes(36, 196);
    }
    /// RTU (12.6.9) and DREP (12.6.11).
    pub mod ids {
        use super::Loc;
        pub const PRIVATE_DATA: Loc = Loc::bytes(8, 224);
    }
    /// DREQ (12.6.10).
    pub mod dreq {
        use super::Loc;
        pub const REMOTE_QPN: Loc = Loc::bytes(8, 3);
        pub const PRIVATE_DATA: Loc = Loc::bytes(12, 220);
    }
    /// SIDR_REQ (12.11.1).
    pub mod sidr_req {
        use super::Loc;
        pub const REQUEST_ID: Loc = Loc::bytes(0, 4);
        pub const PKEY: Loc = Loc::bytes(4, 2);
        pub const SERVICE_ID: Loc = Loc::bytes(8, 8);
        pub const PRIVATE_DATA: Loc = Loc::bytes(16, 216);
    }
    /// SIDR_REP (12.11.2).
    pub mod sidr_rep {
        use super::Loc;
        pub const REQUEST_ID: Loc = Loc::bytes(0, 4);
        pub const STATUS: Loc = Loc::bytes(4, 1);
        pub const ADDITIONAL_INFO_LEN: Loc = Loc::bytes(5, 1);
        pub const QPN: Loc = Loc::bytes(8, 3);
        pub const SERVICE_ID: Loc = Loc::bytes(12, 8);
        pub const QKEY: Loc = Loc::bytes(20, 4);
        pub const CLASS_PORT_INFO: Loc = Loc::bytes(24, 72);
        pub const PRIVATE_DATA: Loc = Loc::bytes(96, 136);
    }
}

/// A message body being read: its fields by [`Loc`], relative to `base` (a path's start).
struct Body<'b> {
    bytes: &'b [u8],
    base: usize,
}

impl<'b> Body<'b> {
    fn at(&self, base: usize) -> Body<'b> {
        Body {
            bytes: self.bytes,
            base,
        }
    }
    fn shifted(&self, loc: Loc) -> Loc {
        Loc {
            at: loc.at + self.base,
            ..loc
        }
    }
    fn get(&self, loc: Loc) -> u64 {
        self.shifted(loc).read(self.bytes)
    }
    fn u8(&self, loc: Loc) -> u8 {
        self.get(loc) as u8
    }
    fn u16(&self, loc: Loc) -> u16 {
        self.get(loc) as u16
    }
    fn u32(&self, loc: Loc) -> u32 {
        self.get(loc) as u32
    }
    fn flag(&self, loc: Loc) -> bool {
        self.get(loc) == 1
    }
    fn slice(&self, loc: Loc) -> &'b [u8] {
        let l = self.shifted(loc);
        &self.bytes[l.at..l.at + l.len]
    }
    fn gid(&self, loc: Loc) -> [u8; 16] {
        self.slice(loc).try_into().expect("16 bytes")
    }
}

/// A message body being written (it starts zeroed).
struct BodyMut<'b> {
    bytes: &'b mut [u8],
    base: usize,
}

impl BodyMut<'_> {
    fn put(&mut self, loc: Loc, value: impl Into<u64>) {
        let loc = Loc {
            at: loc.at + self.base,
            ..loc
        };
        loc.write(self.bytes, value.into());
    }
    /// Bytes into a field's area (private data, GIDs); longer data is refused.
    fn fill(&mut self, loc: Loc, data: &[u8]) -> Result<()> {
        if data.len() > loc.len {
            return Err(Error::PrivateDataTooLong);
        }
        let at = loc.at + self.base;
        self.bytes[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }
}

/// A path as a REQ describes it (IBA 12.6.5, 44 bytes: the primary path at 52, the alternate
/// at 96). On RoCE the GIDs are the IP addresses' GIDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmPath {
    /// The requester's port LID (permissive on RoCE).
    pub local_lid: u16,
    /// The responder's port LID.
    pub remote_lid: u16,
    /// The requester's GID.
    pub local_gid: [u8; 16],
    /// The responder's GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits, IBA's encoding).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Whether the path stays in the subnet.
    pub subnet_local: bool,
    /// The local ACK timeout (5 bits: 4.096 µs × 2^n).
    pub local_ack_timeout: u8,
}

impl CmPath {
    fn parse(b: &Body) -> CmPath {
        use field::path::*;
        CmPath {
            local_lid: b.u16(LOCAL_LID),
            remote_lid: b.u16(REMOTE_LID),
            local_gid: b.gid(LOCAL_GID),
            remote_gid: b.gid(REMOTE_GID),
            flow_label: b.u32(FLOW_LABEL) >> 4,
            packet_rate: b.u8(PACKET_RATE),
            traffic_class: b.u8(TRAFFIC_CLASS),
            hop_limit: b.u8(HOP_LIMIT),
            sl: b.u8(SL),
            subnet_local: b.flag(SUBNET_LOCAL),
            local_ack_timeout: b.u8(LOCAL_ACK_TIMEOUT),
        }
    }

    fn emit(&self, b: &mut BodyMut) {
        use field::path::*;
        b.put(LOCAL_LID, self.local_lid);
        b.put(REMOTE_LID, self.remote_lid);
        b.fill(LOCAL_GID, &self.local_gid).expect("16 bytes");
        b.fill(REMOTE_GID, &self.remote_gid).expect("16 bytes");
        // The flow label is the top 20 bits of its 3 bytes.
        b.put(FLOW_LABEL, (self.flow_label & 0xf_ffff) << 4);
        b.put(PACKET_RATE, self.packet_rate);
        b.put(TRAFFIC_CLASS, self.traffic_class);
        b.put(HOP_LIMIT, self.hop_limit);
        b.put(SL, self.sl);
        b.put(SUBNET_LOCAL, self.subnet_local);
        b.put(LOCAL_ACK_TIMEOUT, self.local_ack_timeout);
    }
}

/// REQ (IBA 12.6.5): the active side asks to connect its QP to a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Req<'a> {
    /// The requester's communication ID for this connection.
    pub local_comm_id: u32,
    /// The service asked for (rdma_cm: port space and port).
    pub service_id: u64,
    /// The requester's CA GUID.
    pub local_ca_guid: u64,
    /// The requester's Q_Key (RD only).
    pub local_qkey: u32,
    /// The requester's QP number.
    pub local_qpn: u32,
    /// RDMA READs and atomics the requester accepts at once (its max_dest_rd_atomic).
    pub responder_resources: u8,
    /// RDMA READs and atomics the requester sends at once (its max_rd_atomic).
    pub initiator_depth: u8,
    /// How long the responder waits for the requester's CM answers (5 bits, 4.096 µs × 2^n).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (2 bits): 0 RC, 1 UC, 2 RD.
    pub transport: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// The PSN the requester sends from.
    pub starting_psn: u32,
    /// How long the requester waits for the responder's answers (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU (4 bits: 1 is 256 bytes ... 5 is 4096).
    pub path_mtu: u8,
    /// Whether an RD channel exists (RD only).
    pub rdc_exists: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// How many times the requester resends a CM message unanswered (4 bits).
    pub max_cm_retries: u8,
    /// Whether the requester's QP uses an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits; XRC).
    pub extended_transport: u8,
    /// The primary path.
    pub primary_path: CmPath,
    /// The alternate path (all zeros when there is none).
    pub alternate_path: CmPath,
    /// Private data (at most 92 bytes).
    pub private_data: &'a [u8],
}

/// REP (IBA 12.6.8): the passive side accepts, naming its QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rep<'a> {
    /// The responder's communication ID.
    pub local_comm_id: u32,
    /// The requester's communication ID, from the REQ.
    pub remote_comm_id: u32,
    /// The responder's Q_Key (RD only).
    pub local_qkey: u32,
    /// The responder's QP number.
    pub local_qpn: u32,
    /// The PSN the responder sends from.
    pub starting_psn: u32,
    /// RDMA READs and atomics the responder accepts at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics the responder sends at once.
    pub initiator_depth: u8,
    /// The responder's ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits: 0 accepted, 1 unsupported, 2 rejected).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// Whether the responder's QP uses an SRQ.
    pub srq: bool,
    /// The responder's CA GUID.
    pub local_ca_guid: u64,
    /// Private data (at most 196 bytes).
    pub private_data: &'a [u8],
}

/// Which message a REJ or an MRA is about (2 bits).
pub mod about {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// Another message (a LAP, for an MRA).
    pub const OTHER: u8 = 2;
}

/// REJ (IBA 12.6.7): a refusal, with its reason and the data that explains it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rej<'a> {
    /// The sender's communication ID (0 when it has none yet).
    pub local_comm_id: u32,
    /// The other side's communication ID.
    pub remote_comm_id: u32,
    /// The message refused ([`about`]).
    pub message_rejected: u8,
    /// How many bytes of `ari` are meaningful (7 bits).
    pub reject_info_len: u8,
    /// The reason ([`rej_reason`]).
    pub reason: u16,
    /// Additional rejection information (72 bytes).
    pub ari: &'a [u8],
    /// Private data (at most 148 bytes).
    pub private_data: &'a [u8],
}

/// REJ reasons (IBA 12.6.7.2), the ones a CM without LIDs or RD meets.
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No resources.
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout: the REP was not answered by an RTU.
    pub const TIMEOUT: u16 = 4;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 5;
    /// Stale connection: the QP is still in use (TIMEWAIT) or the REQ is a ghost.
    pub const STALE_CONN: u16 = 10;
    /// Invalid service ID: nobody listens.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Rejected by the consumer (rdma_reject).
    pub const CONSUMER: u16 = 28;
    /// Invalid GID.
    pub const INVALID_GID: u16 = 12;
    /// Port redirection (not used on RoCE).
    pub const PORT_REDIRECT: u16 = 11;
    /// Invalid MTU.
    pub const INVALID_MTU: u16 = 26;
    /// Duplicate local communication ID.
    pub const DUPLICATE_COMM_ID: u16 = 30;
}

/// MRA (IBA 12.6.6): "received; give me more time".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mra<'a> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The other side's communication ID.
    pub remote_comm_id: u32,
    /// The message acknowledged ([`about`]).
    pub message_mraed: u8,
    /// How long the sender needs (5 bits, 4.096 µs × 2^n).
    pub service_timeout: u8,
    /// Private data (at most 222 bytes).
    pub private_data: &'a [u8],
}

/// RTU (IBA 12.6.9), DREP (12.6.11): just the two communication IDs and private data (224
/// bytes at most).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ids<'a> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The other side's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: &'a [u8],
}

/// DREQ (IBA 12.6.10): a disconnect request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dreq<'a> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The other side's communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QP number.
    pub remote_qpn: u32,
    /// Private data (at most 220 bytes).
    pub private_data: &'a [u8],
}

/// SIDR_REQ (IBA 12.11.1): which UD QP serves a service ID?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrReq<'a> {
    /// The requester's ID for this request.
    pub request_id: u32,
    /// Partition key.
    pub pkey: u16,
    /// The service.
    pub service_id: u64,
    /// Private data (at most 216 bytes).
    pub private_data: &'a [u8],
}

/// SIDR_REP (IBA 12.11.2): the answer, with the QP and its Q_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrRep<'a> {
    /// The request's ID.
    pub request_id: u32,
    /// 0: the QP is valid; 1 no such service; 2 rejected; 3 no QP; 4 redirect; 5 version.
    pub status: u8,
    /// How many bytes of `class_port_info` are meaningful.
    pub additional_info_len: u8,
    /// The service's QP number.
    pub qpn: u32,
    /// The service.
    pub service_id: u64,
    /// The QP's Q_Key.
    pub qkey: u32,
    /// ClassPortInfo, for a redirect (72 bytes).
    pub class_port_info: &'a [u8],
    /// Private data (at most 136 bytes).
    pub private_data: &'a [u8],
}

/// A CM message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage<'a> {
    /// Connection request.
    Req(Req<'a>),
    /// More time, please.
    Mra(Mra<'a>),
    /// Rejected.
    Rej(Rej<'a>),
    /// Accepted.
    Rep(Rep<'a>),
    /// Ready to use.
    Rtu(Ids<'a>),
    /// Disconnect request.
    Dreq(Dreq<'a>),
    /// Disconnect reply.
    Drep(Ids<'a>),
    /// Service ID resolution request.
    SidrReq(SidrReq<'a>),
    /// Service ID resolution reply.
    SidrRep(SidrRep<'a>),
}

impl CmMessage<'_> {
    /// The message's attribute ID.
    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// The message's name as IBA writes it.
    pub fn name(&self) -> &'static str {
        attribute_name(self.attribute_id()).unwrap_or("?")
    }
}

/// The name of a CM attribute ID, if it is one.
pub fn attribute_name(id: u16) -> Option<&'static str> {
    Some(match id {
        attr::CLASS_PORT_INFO => "ClassPortInfo",
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        attr::SIDR_REQ => "SIDR_REQ",
        attr::SIDR_REP => "SIDR_REP",
        attr::LAP => "LAP",
        attr::APR => "APR",
        _ => return None,
    })
}

/// A whole CM MAD: its transaction ID and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMad<'a> {
    /// The transaction ID (the sender's, kept by retransmissions of the same message).
    pub transaction_id: u64,
    /// The message.
    pub message: CmMessage<'a>,
}

impl<'a> CmMad<'a> {
    /// Parses a CM MAD (a UD payload to QP1): exactly what IBA lays out, class 0x07 version 2,
    /// method SEND, a message this crate knows. Anything else is an error, never a panic.
    pub fn parse(mad: &'a [u8]) -> Result<CmMad<'a>> {
        if mad.len() < MAD_LEN {
            return Err(Error::Truncated);
        }
        let h = MadRepr::parse(&MadHeader::new_checked(mad)?)?;
        if h.mgmt_class != CM_CLASS || h.class_version != CM_CLASS_VERSION {
            return Err(Error::BadMad);
        }
        if h.method != METHOD_SEND {
            return Err(Error::BadMad);
        }
        let b = Body {
            bytes: &mad[24..MAD_LEN],
            base: 0,
        };
        let (local, remote) = (b.u32(field::LOCAL_COMM_ID), b.u32(field::REMOTE_COMM_ID));
        let ids = || Ids {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: b.slice(field::ids::PRIVATE_DATA),
        };
        let message = match h.attribute_id {
            attr::REQ => {
                use field::req::*;
                CmMessage::Req(Req {
                    local_comm_id: local,
                    service_id: b.get(SERVICE_ID),
                    local_ca_guid: b.get(LOCAL_CA_GUID),
                    local_qkey: b.u32(LOCAL_QKEY),
                    local_qpn: b.u32(LOCAL_QPN),
                    responder_resources: b.u8(RESPONDER_RESOURCES),
                    initiator_depth: b.u8(INITIATOR_DEPTH),
                    remote_cm_response_timeout: b.u8(REMOTE_CM_RESPONSE_TIMEOUT),
                    transport: b.u8(TRANSPORT),
                    end_to_end_flow_control: b.flag(END_TO_END_FLOW_CONTROL),
                    starting_psn: b.u32(STARTING_PSN),
                    local_cm_response_timeout: b.u8(LOCAL_CM_RESPONSE_TIMEOUT),
                    retry_count: b.u8(RETRY_COUNT),
                    pkey: b.u16(PKEY),
                    path_mtu: b.u8(PATH_MTU),
                    rdc_exists: b.flag(RDC_EXISTS),
                    rnr_retry_count: b.u8(RNR_RETRY_COUNT),
                    max_cm_retries: b.u8(MAX_CM_RETRIES),
                    srq: b.flag(SRQ),
                    extended_transport: b.u8(EXTENDED_TRANSPORT),
                    primary_path: CmPath::parse(&b.at(PRIMARY_PATH)),
                    alternate_path: CmPath::parse(&b.at(ALTERNATE_PATH)),
                    private_data: b.slice(PRIVATE_DATA),
                })
            }
            attr::MRA => {
                use field::mra::*;
                CmMessage::Mra(Mra {
                    local_comm_id: local,
                    remote_comm_id: remote,
                    message_mraed: b.u8(MESSAGE_MRAED),
                    service_timeout: b.u8(SERVICE_TIMEOUT),
                    private_data: b.slice(PRIVATE_DATA),
                })
            }
            attr::REJ => {
                use field::rej::*;
                CmMessage::Rej(Rej {
                    local_comm_id: local,
                    remote_comm_id: remote,
                    message_rejected: b.u8(MESSAGE_REJECTED),
                    reject_info_len: b.u8(REJECT_INFO_LEN),
                    reason: b.u16(REASON),
                    ari: b.slice(ARI),
                    private_data: b.slice(PRIVATE_DATA),
                })
            }
            attr::REP => {
                use field::rep::*;
                CmMessage::Rep(Rep {
                    local_comm_id: local,
                    remote_comm_id: remote,
                    local_qkey: b.u32(LOCAL_QKEY),
                    local_qpn: b.u32(LOCAL_QPN),
                    starting_psn: b.u32(STARTING_PSN),
                    responder_resources: b.u8(RESPONDER_RESOURCES),
                    initiator_depth: b.u8(INITIATOR_DEPTH),
                    target_ack_delay: b.u8(TARGET_ACK_DELAY),
                    failover_accepted: b.u8(FAILOVER_ACCEPTED),
                    end_to_end_flow_control: b.flag(END_TO_END_FLOW_CONTROL),
                    rnr_retry_count: b.u8(RNR_RETRY_COUNT),
                    srq: b.flag(SRQ),
                    local_ca_guid: b.get(LOCAL_CA_GUID),
                    private_data: b.slice(PRIVATE_DATA),
                })
            }
            attr::RTU => CmMessage::Rtu(ids()),
            attr::DREQ => {
                use field::dreq::*;
                CmMessage::Dreq(Dreq {
                    local_comm_id: local,
                    remote_comm_id: remote,
                    remote_qpn: b.u32(REMOTE_QPN),
                    private_data: b.slice(PRIVATE_DATA),
                })
            }
            attr::DREP => CmMessage::Drep(ids()),
            attr::SIDR_REQ => {
                use field::sidr_req::*;
                CmMessage::SidrReq(SidrReq {
                    request_id: b.u32(REQUEST_ID),
                    pkey: b.u16(PKEY),
                    service_id: b.get(SERVICE_ID),
                    private_data: b.slice(PRIVATE_DATA),
                })
            }
            attr::SIDR_REP => {
                use field::sidr_rep::*;
                CmMessage::SidrRep(SidrRep {
                    request_id: b.u32(REQUEST_ID),
                    status: b.u8(STATUS),
                    additional_info_len: b.u8(ADDITIONAL_INFO_LEN),
                    qpn: b.u32(QPN),
                    service_id: b.get(SERVICE_ID),
                    qkey: b.u32(QKEY),
                    class_port_info: b.slice(CLASS_PORT_INFO),
                    private_data: b.slice(PRIVATE_DATA),
                })
            }
            _ => return Err(Error::BadMad),
        };
        Ok(CmMad {
            transaction_id: h.transaction_id,
            message,
        })
    }

    /// Writes the MAD into the first 256 bytes of `buf` (reserved fields and unused private
    /// data as zeros). Refuses private data longer than the message's area, and a short buffer.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mad = buf.get_mut(..MAD_LEN).ok_or(Error::BufferTooSmall)?;
        MadRepr {
            mgmt_class: CM_CLASS,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            transaction_id: self.transaction_id,
            attribute_id: self.message.attribute_id(),
            attribute_modifier: 0,
        }
        .emit(mad);
        let body = &mut mad[24..];
        body.fill(0);
        let mut b = BodyMut {
            bytes: body,
            base: 0,
        };
        let ids = |b: &mut BodyMut, local: u32, remote: u32| {
            b.put(field::LOCAL_COMM_ID, local);
            b.put(field::REMOTE_COMM_ID, remote);
        };
        match &self.message {
            CmMessage::Req(m) => {
                use field::req::*;
                b.put(field::LOCAL_COMM_ID, m.local_comm_id);
                b.put(SERVICE_ID, m.service_id);
                b.put(LOCAL_CA_GUID, m.local_ca_guid);
                b.put(LOCAL_QKEY, m.local_qkey);
                b.put(LOCAL_QPN, m.local_qpn & 0xff_ffff);
                b.put(RESPONDER_RESOURCES, m.responder_resources);
                b.put(INITIATOR_DEPTH, m.initiator_depth);
                b.put(REMOTE_CM_RESPONSE_TIMEOUT, m.remote_cm_response_timeout);
                b.put(TRANSPORT, m.transport);
                b.put(END_TO_END_FLOW_CONTROL, m.end_to_end_flow_control);
                b.put(STARTING_PSN, m.starting_psn & 0xff_ffff);
                b.put(LOCAL_CM_RESPONSE_TIMEOUT, m.local_cm_response_timeout);
                b.put(RETRY_COUNT, m.retry_count);
                b.put(PKEY, m.pkey);
                b.put(PATH_MTU, m.path_mtu);
                b.put(RDC_EXISTS, m.rdc_exists);
                b.put(RNR_RETRY_COUNT, m.rnr_retry_count);
                b.put(MAX_CM_RETRIES, m.max_cm_retries);
                b.put(SRQ, m.srq);
                b.put(EXTENDED_TRANSPORT, m.extended_transport);
                for (base, path) in [
                    (PRIMARY_PATH, &m.primary_path),
                    (ALTERNATE_PATH, &m.alternate_path),
                ] {
                    path.emit(&mut BodyMut {
                        bytes: b.bytes,
                        base,
                    });
                }
                b.fill(PRIVATE_DATA, m.private_data)?;
            }
            CmMessage::Mra(m) => {
                use field::mra::*;
                ids(&mut b, m.local_comm_id, m.remote_comm_id);
                b.put(MESSAGE_MRAED, m.message_mraed);
                b.put(SERVICE_TIMEOUT, m.service_timeout);
                b.fill(PRIVATE_DATA, m.private_data)?;
            }
            CmMessage::Rej(m) => {
                use field::rej::*;
                ids(&mut b, m.local_comm_id, m.remote_comm_id);
                b.put(MESSAGE_REJECTED, m.message_rejected);
                b.put(REJECT_INFO_LEN, m.reject_info_len);
                b.put(REASON, m.reason);
                b.fill(ARI, m.ari)?;
                b.fill(PRIVATE_DATA, m.private_data)?;
            }
            CmMessage::Rep(m) => {
                use field::rep::*;
                ids(&mut b, m.local_comm_id, m.remote_comm_id);
                b.put(LOCAL_QKEY, m.local_qkey);
                b.put(LOCAL_QPN, m.local_qpn & 0xff_ffff);
                b.put(STARTING_PSN, m.starting_psn & 0xff_ffff);
                b.put(RESPONDER_RESOURCES, m.responder_resources);
                b.put(INITIATOR_DEPTH, m.initiator_depth);
                b.put(TARGET_ACK_DELAY, m.target_ack_delay);
                b.put(FAILOVER_ACCEPTED, m.failover_accepted);
                b.put(END_TO_END_FLOW_CONTROL, m.end_to_end_flow_control);
                b.put(RNR_RETRY_COUNT, m.rnr_retry_count);
                b.put(SRQ, m.srq);
                b.put(LOCAL_CA_GUID, m.local_ca_guid);
                b.fill(PRIVATE_DATA, m.private_data)?;
            }
            CmMessage::Rtu(m) | CmMessage::Drep(m) => {
                ids(&mut b, m.local_comm_id, m.remote_comm_id);
                b.fill(field::ids::PRIVATE_DATA, m.private_data)?;
            }
            CmMessage::Dreq(m) => {
                use field::dreq::*;
                ids(&mut b, m.local_comm_id, m.remote_comm_id);
                b.put(REMOTE_QPN, m.remote_qpn & 0xff_ffff);
                b.fill(PRIVATE_DATA, m.private_data)?;
            }
            CmMessage::SidrReq(m) => {
                use field::sidr_req::*;
                b.put(REQUEST_ID, m.request_id);
                b.put(PKEY, m.pkey);
                b.put(SERVICE_ID, m.service_id);
                b.fill(PRIVATE_DATA, m.private_data)?;
            }
            CmMessage::SidrRep(m) => {
                use field::sidr_rep::*;
                b.put(REQUEST_ID, m.request_id);
                b.put(STATUS, m.status);
                b.put(ADDITIONAL_INFO_LEN, m.additional_info_len);
                b.put(QPN, m.qpn & 0xff_ffff);
                b.put(SERVICE_ID, m.service_id);
                b.put(QKEY, m.qkey);
                b.fill(CLASS_PORT_INFO, m.class_port_info)?;
                b.fill(PRIVATE_DATA, m.private_data)?;
            }
        }
        Ok(MAD_LEN)
    }
}

/// rdma_cm's port spaces (`enum rdma_ucm_port_space`): the service ID of an IP-addressed
/// connection is `0x0000_0000_01PP_pppp`-shaped, the port space above the 16-bit port.
pub mod port_space {
    /// RDMA_PS_IPOIB.
    pub const IPOIB: u16 = 0x0002;
    /// RDMA_PS_IB.
    pub const IB: u16 = 0x013f;
    /// RDMA_PS_TCP (connected QPs).
    pub const TCP: u16 = 0x0106;
    /// RDMA_PS_UDP (UD QPs, resolved with SIDR).
    pub const UDP: u16 = 0x0111;
}

/// The service ID rdma_cm uses for `port` in `space` (the kernel's `rdma_get_service_id`).
pub fn ip_service_id(space: u16, port: u16) -> u64 {
    (u64::from(space) << 16) | u64::from(port)
}

/// The port space and port of an rdma_cm service ID, if it is one.
pub fn ip_service(service_id: u64) -> Option<(u16, u16)> {
    let space = (service_id >> 16) as u16;
    let known = [
        port_space::IPOIB,
        port_space::IB,
        port_space::TCP,
        port_space::UDP,
    ];
    (service_id >> 32 == 0 && known.contains(&space)).then_some((space, service_id as u16))
}

/// The header rdma_cm puts first in a REQ's or SIDR_REQ's private data (the kernel's `struct
/// cma_hdr`, 36 bytes): the IP addresses and the source port of the connection, so the passive
/// side knows them (the destination port is in the service ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHeader {
    /// The source port.
    pub src_port: u16,
    /// The source address.
    pub src: core::net::IpAddr,
    /// The destination address.
    pub dst: core::net::IpAddr,
}

impl CmaHeader {
    /// Its length.
    pub const LEN: usize = 36;
    /// The version rdma_cm writes (CMA_VERSION).
    pub const VERSION: u8 = 0;

    /// Parses the header at the start of `private_data`.
    pub fn parse(private_data: &[u8]) -> Result<CmaHeader> {
        let h = private_data.get(..Self::LEN).ok_or(Error::Truncated)?;
        if h[0] != Self::VERSION {
            return Err(Error::BadMad);
        }
        let addr = |a: &[u8]| -> Result<core::net::IpAddr> {
            let a: [u8; 16] = a.try_into().expect("16 bytes");
            Ok(match h[1] >> 4 {
                4 => core::net::Ipv4Addr::new(a[12], a[13], a[14], a[15]).into(),
                6 => core::net::Ipv6Addr::from(a).into(),
                _ => return Err(Error::BadMad),
            })
        };
        Ok(CmaHeader {
            src_port: read_be(&h[2..4]) as u16,
            src: addr(&h[4..20])?,
            dst: addr(&h[20..36])?,
        })
    }

    /// Writes the header into the first 36 bytes of `buf`; both addresses must be of one
    /// family.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let h = buf.get_mut(..Self::LEN).ok_or(Error::BufferTooSmall)?;
        h.fill(0);
        h[0] = Self::VERSION;
        write_be(&mut h[2..4], self.src_port.into());
        let mut put = |at: usize, a: core::net::IpAddr| match a {
            core::net::IpAddr::V4(v4) => {
                h[at + 12..at + 16].copy_from_slice(&v4.octets());
                4
            }
            core::net::IpAddr::V6(v6) => {
                h[at..at + 16].copy_from_slice(&v6.octets());
                6
            }
        };
        let (s, d) = (put(4, self.src), put(20, self.dst));
        if s != d {
            return Err(Error::BadMad);
        }
        h[1] = s << 4;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(n: u8) -> CmPath {
        CmPath {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: [n; 16],
            remote_gid: [n + 1; 16],
            flow_label: 0xa_bcde,
            packet_rate: 0x3f,
            traffic_class: 0x68,
            hop_limit: 64,
            sl: 0xf,
            subnet_local: true,
            local_ack_timeout: 0x1f,
        }
    }

    fn req<'a>(private: &'a [u8]) -> Req<'a> {
        Req {
            local_comm_id: 0x1234_5678,
            service_id: ip_service_id(port_space::TCP, 7471),
            local_ca_guid: 0x0253_52ff_fe4e_0000,
            local_qkey: 0,
            local_qpn: 0xab_cdef,
            responder_resources: 16,
            initiator_depth: 4,
            remote_cm_response_timeout: 20,
            transport: 1,
            end_to_end_flow_control: true,
            starting_psn: 0x12_3456,
            local_cm_response_timeout: 20,
            retry_count: 7,
            pkey: 0xffff,
            path_mtu: 3,
            rdc_exists: false,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            srq: true,
            extended_transport: 0,
            primary_path: path(1),
            alternate_path: CmPath::default(),
            private_data: private,
        }
    }

    /// Every message, with every field away from zero where it can be.
    fn messages<'a>(p: &'a [u8], ari: &'a [u8]) -> Vec<CmMessage<'a>> {
        vec![
            CmMessage::Req(req(p)),
            CmMessage::Req(Req {
                alternate_path: path(9),
                ..req(p)
            }),
            CmMessage::Mra(Mra {
                local_comm_id: 1,
                remote_comm_id: 2,
                message_mraed: about::REP,
                service_timeout: 0x1f,
                private_data: p,
            }),
            CmMessage::Rej(Rej {
                local_comm_id: 3,
                remote_comm_id: 4,
                message_rejected: about::OTHER,
                reject_info_len: 0x7f,
                reason: rej_reason::INVALID_SERVICE_ID,
                ari,
                private_data: p,
            }),
            CmMessage::Rep(Rep {
                local_comm_id: 5,
                remote_comm_id: 6,
                local_qkey: 0x8001_0000,
                local_qpn: 0xff_ffff,
                starting_psn: 0xff_fffe,
                responder_resources: 255,
                initiator_depth: 254,
                target_ack_delay: 0x1f,
                failover_accepted: 3,
                end_to_end_flow_control: true,
                rnr_retry_count: 7,
                srq: true,
                local_ca_guid: u64::MAX,
                private_data: p,
            }),
            CmMessage::Rtu(Ids {
                local_comm_id: 7,
                remote_comm_id: 8,
                private_data: p,
            }),
            CmMessage::Dreq(Dreq {
                local_comm_id: 9,
                remote_comm_id: 10,
                remote_qpn: 0x11,
                private_data: p,
            }),
            CmMessage::Drep(Ids {
                local_comm_id: 11,
                remote_comm_id: 12,
                private_data: p,
            }),
            CmMessage::SidrReq(SidrReq {
                request_id: 13,
                pkey: 0xffff,
                service_id: ip_service_id(port_space::UDP, 7174),
                private_data: p,
            }),
            CmMessage::SidrRep(SidrRep {
                request_id: 14,
                status: 0,
                additional_info_len: 0,
                qpn: 0x12,
                service_id: ip_service_id(port_space::UDP, 7174),
                qkey: 0x1234_5678,
                class_port_info: ari,
                private_data: p,
            }),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        let private = [0x5a; 92];
        let ari = [0xa5; 72];
        for m in messages(&private, &ari) {
            let mad = CmMad {
                transaction_id: 0x1122_3344_5566_7788,
                message: m,
            };
            let mut buf = [0xffu8; MAD_LEN];
            assert_eq!(mad.emit(&mut buf), Ok(MAD_LEN));
            let parsed = CmMad::parse(&buf).unwrap();
            assert_eq!(parsed.transaction_id, mad.transaction_id, "{}", m.name());
            // Parsed private data is the whole area: what was given, then zeros.
            let mut again = [0u8; MAD_LEN];
            parsed.emit(&mut again).unwrap();
            assert_eq!(again, buf, "{}", m.name());
            assert_eq!(parsed.message.attribute_id(), m.attribute_id());
        }
    }

    #[test]
    fn a_req_is_where_iba_puts_it() {
        let mad = CmMad {
            transaction_id: 1,
            message: CmMessage::Req(req(b"hi")),
        };
        let mut buf = [0u8; MAD_LEN];
        mad.emit(&mut buf).unwrap();
        let b = &buf[24..];
        assert_eq!(&buf[..4], [1, 0x07, 2, 0x03]);
        assert_eq!(&buf[16..18], [0x00, 0x10]);
        assert_eq!(&b[0..4], [0x12, 0x34, 0x56, 0x78]);
        assert_eq!(&b[8..16], [0, 0, 0, 0, 0x01, 0x06, 0x1d, 0x2f]);
        // Local QPN then responder resources; local EECN (0) then initiator depth.
        assert_eq!(&b[32..40], [0xab, 0xcd, 0xef, 16, 0, 0, 0, 4]);
        // Remote CM response timeout 20 | transport UC (1) | flow control.
        assert_eq!(b[43], (20 << 3) | (1 << 1) | 1);
        assert_eq!(&b[44..48], [0x12, 0x34, 0x56, (20 << 3) | 7]);
        assert_eq!(&b[48..52], [0xff, 0xff, (3 << 4) | 7, (15 << 4) | (1 << 3)]);
        // The primary path's flow label, rate, class, hop limit, SL, ACK timeout.
        assert_eq!(&b[88..96], [0xab, 0xcd, 0xe0, 0x3f, 0x68, 64, 0xf8, 0xf8]);
        assert_eq!(&b[140..143], b"hi\0");
    }

    #[test]
    fn bad_mads_are_errors() {
        let mut buf = [0u8; MAD_LEN];
        let rtu = CmMad {
            transaction_id: 1,
            message: CmMessage::Rtu(Ids {
                local_comm_id: 1,
                remote_comm_id: 2,
                private_data: &[],
            }),
        };
        rtu.emit(&mut buf).unwrap();
        assert_eq!(CmMad::parse(&buf[..255]), Err(Error::Truncated));
        for (at, value) in [(0, 2), (1, 0x81), (2, 1), (3, 0x83), (17, 0x1b)] {
            let mut bad = buf;
            bad[at] = value;
            assert_eq!(CmMad::parse(&bad), Err(Error::BadMad), "byte {at}");
        }
        let long = [0u8; 225];
        let too_long = CmMad {
            message: CmMessage::Rtu(Ids {
                local_comm_id: 1,
                remote_comm_id: 2,
                private_data: &long,
            }),
            ..rtu
        };
        assert_eq!(too_long.emit(&mut buf), Err(Error::PrivateDataTooLong));
        assert_eq!(rtu.emit(&mut [0u8; 255]), Err(Error::BufferTooSmall));
    }

    #[test]
    fn cma_header_both_families() {
        for (src, dst) in [("198.18.0.1", "198.18.0.2"), ("fe80::1", "2001:db8::2")] {
            let h = CmaHeader {
                src_port: 50000,
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
            };
            let mut buf = [0xffu8; 40];
            h.emit(&mut buf).unwrap();
            assert_eq!(CmaHeader::parse(&buf), Ok(h));
            if h.src.is_ipv4() {
                assert_eq!(buf[1], 0x40);
                assert_eq!(
                    &buf[4..20],
                    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 198, 18, 0, 1]
                );
            }
        }
        let mixed = CmaHeader {
            src_port: 1,
            src: "198.18.0.1".parse().unwrap(),
            dst: "::1".parse().unwrap(),
        };
        assert_eq!(mixed.emit(&mut [0u8; 36]), Err(Error::BadMad));
        assert_eq!(CmaHeader::parse(&[0u8; 35]), Err(Error::Truncated));
    }

    #[test]
    fn service_ids() {
        let id = ip_service_id(port_space::TCP, 7471);
        assert_eq!(id, 0x0000_0000_0106_1d2f);
        assert_eq!(ip_service(id), Some((port_space::TCP, 7471)));
        assert_eq!(ip_service(0x1000_0000_0106_1d2f), None);
        assert_eq!(ip_service(0x0000_0000_0999_0001), None);
    }
}
