//! The Communication Manager (IBA Vol 1 chapter 12), sans-IO: connections set up, refused and
//! torn down with REQ, REP, RTU, REJ, MRA, DREQ and DREP, and UD services resolved with SIDR.
//! Its inputs are MADs received on QP1 (with the sender's address), the consumer's calls
//! (listen, connect, accept, reject, ready to use, disconnect) and time; its outputs are MADs to
//! send, events for the consumer and the next timeout. It never touches a QP: the consumer (the
//! device daemon, for rdma_cm) moves QPs through their states when the events say so.
//!
//! Every message the CM sends and waits an answer for is resent after its response timeout, at
//! most `max_cm_retries` times (12.9.2); a duplicate of a message already answered gets the same
//! answer again (12.9.8.1); a connection leaves TIMEWAIT only after a delay, so its QP is not
//! reused while stray packets may still arrive (12.9.8.3).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use softrnic_wire::cm::{
    CmMad, CmMessage, CmPath, Dreq, Ids, Mra, Rej, Rep, Req, SidrRep, SidrReq, about, rej_reason,
};
use softrnic_wire::mad::MAD_LEN;

use crate::gid::Gid;
use crate::rng::Rng;
use crate::time::Instant;

/// Where a MAD goes, or came from: the other port's GID, the local GID that talks to it, and
/// the MAC of the next hop towards it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The other port's GID.
    pub gid: Gid,
    /// The local GID (the one a REQ was sent to, or the path's source).
    pub local: Gid,
    /// The next hop's MAC.
    pub mac: [u8; 6],
}

/// A MAD to send to a peer's QP1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The destination.
    pub to: Peer,
    /// The MAD.
    pub mad: [u8; MAD_LEN],
}

/// A connection, by its local communication ID.
pub type ConnId = u32;

/// What the active side asks for (the REQ's content that the consumer chooses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The passive side.
    pub peer: Peer,
    /// The service (rdma_cm: port space and port).
    pub service_id: u64,
    /// The local QP.
    pub qpn: u32,
    /// The PSN it receives from first: the passive side sends from it. (IBA's Starting PSN
    /// is the one the other side starts at, as the kernel's ib_cm uses it: each side's REQ or
    /// REP names its own receive PSN.)
    pub starting_psn: u32,
    /// RC (0) or UC (1).
    pub transport: u8,
    /// READs/atomics the local QP accepts at once, and sends at once.
    pub responder_resources: u8,
    /// READs/atomics the local QP sends at once.
    pub initiator_depth: u8,
    /// Transport and RNR retry counts for the QPs.
    pub retry_count: u8,
    /// RNR retry count.
    pub rnr_retry_count: u8,
    /// Path MTU (IBA code).
    pub path_mtu: u8,
    /// Whether the local QP uses an SRQ.
    pub srq: bool,
    /// The path (GIDs, traffic class, hop limit, ACK timeout).
    pub path: CmPath,
    /// Private data (rdma_cm's header first), at most 92 bytes.
    pub private_data: Vec<u8>,
}

impl ConnectParams {
    /// An RC connection of `qpn` (receiving from `starting_psn`) to `service_id` at `peer`, with
    /// rdma_cm's defaults: one READ/atomic each way, 7 transport and RNR retries (7 RNR
    /// retries: forever), a 1024-byte path MTU, no SRQ, a default path and no private data.
    pub fn rc(peer: Peer, service_id: u64, qpn: u32, starting_psn: u32) -> ConnectParams {
        ConnectParams {
            peer,
            service_id,
            qpn,
            starting_psn,
            transport: 0,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: 3,
            srq: false,
            path: CmPath::default(),
            private_data: Vec::new(),
        }
    }
}

/// What the passive side answers (the REP's content that the consumer chooses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    /// The local QP.
    pub qpn: u32,
    /// The PSN it receives from first: the active side sends from it.
    pub starting_psn: u32,
    /// READs/atomics the local QP accepts at once.
    pub responder_resources: u8,
    /// READs/atomics the local QP sends at once.
    pub initiator_depth: u8,
    /// RNR retry count.
    pub rnr_retry_count: u8,
    /// Whether the local QP uses an SRQ.
    pub srq: bool,
    /// Private data, at most 196 bytes.
    pub private_data: Vec<u8>,
}

/// What the CM tells its consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a service listened on: a new passive connection, to accept or reject.
    ReqReceived {
        /// The new connection.
        id: ConnId,
        /// What the REQ says, as the requester chose it (`peer` is the requester).
        req: ConnectParams,
    },
    /// The passive side accepted: move the QP to RTR and RTS, then call `ready_to_use`.
    RepReceived {
        /// The connection.
        id: ConnId,
        /// The passive side's QP number.
        qpn: u32,
        /// The PSN it receives from first: the active side sends from it.
        starting_psn: u32,
        /// READs/atomics it accepts at once.
        responder_resources: u8,
        /// READs/atomics it sends at once.
        initiator_depth: u8,
        /// How often the active side retries a send its receiver is not ready for.
        rnr_retry_count: u8,
        /// Its private data.
        private_data: Vec<u8>,
    },
    /// The connection is established (RTU received, or sent).
    Established {
        /// The connection.
        id: ConnId,
    },
    /// The other side refused (or no one listens).
    Rejected {
        /// The connection.
        id: ConnId,
        /// IBA's reason code.
        reason: u16,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// The other side never answered: every retry timed out.
    Unreachable {
        /// The connection.
        id: ConnId,
    },
    /// The other side disconnects (DREQ received), or a DREQ sent was answered or timed out:
    /// the connection is over; TIMEWAIT follows.
    Disconnected {
        /// The connection.
        id: ConnId,
    },
    /// TIMEWAIT is over: the QP may be reused.
    TimewaitExit {
        /// The connection.
        id: ConnId,
    },
    /// A SIDR_REQ for a service listened on.
    SidrReqReceived {
        /// The request, to answer with `sidr_reply`.
        id: ConnId,
        /// Who asks.
        peer: Peer,
        /// The service.
        service_id: u64,
        /// Its private data.
        private_data: Vec<u8>,
    },
    /// The answer to a SIDR_REQ (status 0: the QP and Q_Key are valid).
    SidrRepReceived {
        /// The request.
        id: ConnId,
        /// IBA's status.
        status: u8,
        /// The service's QP.
        qpn: u32,
        /// Its Q_Key.
        qkey: u32,
        /// Its private data.
        private_data: Vec<u8>,
    },
}

/// Where a connection is (IBA 12.9.6, figures 159 and 160).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Active: REQ sent, waiting for REP (an MRA extends the wait).
    ReqSent,
    /// Active: REP received, the consumer readies its QP.
    RepReceived,
    /// Passive: REQ received, the consumer decides.
    ReqReceived,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received, the consumer has not disconnected yet.
    DreqReceived,
    TimeWait,
    /// SIDR_REQ sent.
    SidrReqSent,
    /// SIDR_REQ received.
    SidrReqReceived,
}

/// One connection (or SIDR request).
#[derive(Debug)]
#[cfg_attr(feature = "fuzz", derive(Clone))]
struct Conn {
    state: State,
    peer: Peer,
    /// The other side's communication ID (0 until known), CA GUID and QP.
    remote_id: u32,
    remote_guid: u64,
    remote_qpn: u32,
    /// The local QP (0 until known; none for SIDR).
    local_qpn: u32,
    /// The last message sent that waits for an answer, and the last answer sent (for
    /// duplicates): resent as they are.
    pending: Option<[u8; MAD_LEN]>,
    last_sent: Option<[u8; MAD_LEN]>,
    transaction_id: u64,
    /// When `pending` is resent, how long to wait each time, and how many more times.
    deadline: Option<Instant>,
    wait: Duration,
    retries_left: u8,
    service_id: u64,
    /// The consumer is gone: what is in flight finishes, nothing more is reported.
    detached: bool,
}

/// What is found among the connections without looking at each (the daemon asks for the next
/// timer in every pass; every REQ looks for a duplicate and a stale connection): their
/// deadlines in order, the local QPs they hold, and who the other side is. It follows every
/// connection added or removed and every change of those fields.
#[derive(Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "fuzz", derive(Clone))]
struct Index {
    deadlines: BTreeSet<(Instant, ConnId)>,
    /// Local QPN → how many connections hold it.
    qpns: HashMap<u32, u32>,
    /// (remote CA GUID, remote communication ID) → the connections that have them.
    remote_ids: HashMap<(u64, u32), BTreeSet<ConnId>>,
    /// (remote CA GUID, remote QPN) → how many connections are with that QP.
    remote_qpns: HashMap<(u64, u32), u32>,
}

/// One more (`up`) or one fewer of `key`, forgotten at none.
fn count<K: std::hash::Hash + Eq + Copy>(counts: &mut HashMap<K, u32>, key: K, up: bool) {
    let n = counts.entry(key).or_default();
    if up {
        *n += 1;
    } else {
        *n = n.saturating_sub(1);
    }
    if *n == 0 {
        counts.remove(&key);
    }
}

impl Index {
    fn add(&mut self, id: ConnId, c: &Conn) {
        self.update(id, c, true);
    }

    fn remove(&mut self, id: ConnId, c: &Conn) {
        self.update(id, c, false);
    }

    fn update(&mut self, id: ConnId, c: &Conn, add: bool) {
        if let Some(at) = c.deadline {
            match add {
                true => self.deadlines.insert((at, id)),
                false => self.deadlines.remove(&(at, id)),
            };
        }
        if c.local_qpn != 0 {
            count(&mut self.qpns, c.local_qpn, add);
        }
        if c.remote_qpn != 0 {
            count(&mut self.remote_qpns, (c.remote_guid, c.remote_qpn), add);
        }
        let key = (c.remote_guid, c.remote_id);
        let ids = self.remote_ids.entry(key).or_default();
        match add {
            true => ids.insert(id),
            false => ids.remove(&id),
        };
        if ids.is_empty() {
            self.remote_ids.remove(&key);
        }
    }

    /// Connection `id` (`c`) waits until `at`, or for nothing.
    fn set_deadline(&mut self, id: ConnId, c: &mut Conn, at: Option<Instant>) {
        self.remove(id, c);
        c.deadline = at;
        self.add(id, c);
    }

    /// Connection `id` (`c`) is of local QP `qpn`.
    fn set_local_qpn(&mut self, id: ConnId, c: &mut Conn, qpn: u32) {
        self.remove(id, c);
        c.local_qpn = qpn;
        self.add(id, c);
    }

    /// Connection `id` (`c`) is with communication ID `remote_id` and QP `qpn` of CA `guid`.
    fn set_remote(&mut self, id: ConnId, c: &mut Conn, guid: u64, remote_id: u32, qpn: u32) {
        self.remove(id, c);
        (c.remote_guid, c.remote_id, c.remote_qpn) = (guid, remote_id, qpn);
        self.add(id, c);
    }
}

/// The Communication Manager of one port.
#[derive(Debug)]
#[cfg_attr(feature = "fuzz", derive(Clone))]
pub struct Cm {
    ca_guid: u64,
    next_id: u32,
    rng: Rng,
    conns: HashMap<ConnId, Conn>,
    index: Index,
    listening: Vec<u64>,
    out: VecDeque<Outgoing>,
    events: VecDeque<CmEvent>,
    /// How long TIMEWAIT lasts.
    timewait: Duration,
    /// How many times a message is resent unanswered.
    max_retries: u8,
    /// MADs dropped as malformed or not for the CM.
    pub dropped: u64,
}

/// The CM response timeout the REQs and REPs carry (IBA's 5-bit code: 4.096 µs × 2^n): 20 is
/// about 4.3 s, the kernel's default for rdma_cm.
pub const CM_RESPONSE_TIMEOUT: u8 = 20;
/// How many times a message is resent unanswered (rdma_cm's default, CMA_MAX_CM_RETRIES).
pub const MAX_CM_RETRIES: u8 = 15;

/// 4.096 µs × 2^code.
fn cm_timeout(code: u8) -> Duration {
    Duration::from_nanos(4096u64 << (code & 0x1f))
}

impl Cm {
    /// A CM for the port of CA `ca_guid`; `seed` makes its communication IDs unpredictable.
    pub fn new(ca_guid: u64, seed: u64) -> Cm {
        let mut rng = Rng::new(seed);
        let next_id = rng.next_u32() | 1;
        Cm {
            ca_guid,
            next_id,
            rng,
            conns: HashMap::new(),
            index: Index::default(),
            listening: Vec::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            timewait: Duration::from_secs(1),
            max_retries: MAX_CM_RETRIES,
            dropped: 0,
        }
    }

    /// Sets how long TIMEWAIT lasts and how often a message is resent (tests shorten them).
    pub fn set_timing(&mut self, timewait: Duration, max_retries: u8) {
        self.timewait = timewait;
        self.max_retries = max_retries;
    }

    fn insert(&mut self, id: ConnId, c: Conn) {
        self.index.add(id, &c);
        self.conns.insert(id, c);
    }

    fn remove(&mut self, id: ConnId) -> Option<Conn> {
        let c = self.conns.remove(&id)?;
        self.index.remove(id, &c);
        Some(c)
    }

    /// Panics unless the index says what the connections say.
    #[cfg(test)]
    fn check_index(&self) {
        let mut index = Index::default();
        for (&id, c) in &self.conns {
            index.add(id, c);
        }
        assert_eq!(index, self.index);
    }

    fn new_id(&mut self) -> ConnId {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    /// Accepts REQs (and SIDR_REQs) for `service_id`.
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if self.listening.contains(&service_id) {
            return Err(CmError::InUse);
        }
        self.listening.push(service_id);
        Ok(())
    }

    /// Stops accepting new REQs for `service_id`.
    pub fn unlisten(&mut self, service_id: u64) {
        self.listening.retain(|&s| s != service_id);
    }

    /// Whether local QP `qpn` belongs to a connection that is not over: one being made,
    /// established, being torn down, or waiting out TIMEWAIT. Its number must not go to a new
    /// QP before then, or stray packets of the old connection could reach it (IBA 12.9.8.3).
    pub fn holds_qpn(&self, qpn: u32) -> bool {
        qpn != 0 && self.index.qpns.contains_key(&qpn)
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// The next event for the consumer.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// Whether an event waits for the consumer.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// When `handle_timeout` is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.index.deadlines.first().map(|&(at, _)| at)
    }

    fn send(&mut self, to: Peer, mad: CmMad) -> [u8; MAD_LEN] {
        let mut bytes = [0u8; MAD_LEN];
        // The messages are built here within their sizes: emit cannot fail.
        mad.emit(&mut bytes).expect("a well-formed CM message");
        self.out.push_back(Outgoing { to, mad: bytes });
        bytes
    }

    /// Sends `mad` for connection `id` and waits `wait` for its answer, resending it.
    fn send_and_wait(&mut self, now: Instant, id: ConnId, mad: CmMad, wait: Duration) {
        let Some(peer) = self.conns.get(&id).map(|c| c.peer) else {
            return;
        };
        let bytes = self.send(peer, mad);
        let retries = self.max_retries;
        if let Some(c) = self.conns.get_mut(&id) {
            c.pending = Some(bytes);
            c.last_sent = Some(bytes);
            c.wait = wait;
            c.retries_left = retries;
            self.index.set_deadline(id, c, Some(now + wait));
        }
    }

    /// Sends an answer that expects none (it is kept for duplicates).
    fn answer(&mut self, id: ConnId, mad: CmMad) {
        let Some(peer) = self.conns.get(&id).map(|c| c.peer) else {
            return;
        };
        let bytes = self.send(peer, mad);
        if let Some(c) = self.conns.get_mut(&id) {
            c.pending = None;
            self.index.set_deadline(id, c, None);
            c.last_sent = Some(bytes);
        }
    }

    fn transaction_id(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// Starts a connection: sends a REQ (IBA 12.6.5).
    pub fn connect(&mut self, now: Instant, p: ConnectParams) -> Result<ConnId, CmError> {
        if p.private_data.len() > 92 {
            return Err(CmError::PrivateDataTooLong);
        }
        let id = self.new_id();
        let tid = self.transaction_id();
        let mut conn = Conn::new(State::ReqSent, p.peer, tid, p.service_id);
        conn.local_qpn = p.qpn;
        self.insert(id, conn);
        let req = Req {
            local_comm_id: id,
            service_id: p.service_id,
            local_ca_guid: self.ca_guid,
            local_qkey: 0,
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            remote_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            transport: p.transport,
            end_to_end_flow_control: false,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            retry_count: p.retry_count,
            pkey: 0xffff,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: self.max_retries.min(15),
            srq: p.srq,
            extended_transport: 0,
            primary_path: p.path,
            alternate_path: CmPath::default(),
            private_data: &p.private_data,
        };
        let mad = CmMad {
            transaction_id: tid,
            message: CmMessage::Req(req),
        };
        self.send_and_wait(now, id, mad, cm_timeout(CM_RESPONSE_TIMEOUT));
        Ok(id)
    }

    /// Accepts a connection request: sends a REP and waits for the RTU (IBA 12.6.8).
    pub fn accept(&mut self, now: Instant, id: ConnId, p: AcceptParams) -> Result<(), CmError> {
        if p.private_data.len() > 196 {
            return Err(CmError::PrivateDataTooLong);
        }
        let c = self.conns.get_mut(&id).ok_or(CmError::NoSuchConnection)?;
        if c.state != State::ReqReceived {
            return Err(CmError::WrongState);
        }
        c.state = State::RepSent;
        self.index.set_local_qpn(id, c, p.qpn);
        let (remote, tid) = (c.remote_id, c.transaction_id);
        let rep = Rep {
            local_comm_id: id,
            remote_comm_id: remote,
            local_qkey: 0,
            local_qpn: p.qpn,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: 15,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: self.ca_guid,
            private_data: &p.private_data,
        };
        let mad = CmMad {
            transaction_id: tid,
            message: CmMessage::Rep(rep),
        };
        self.send_and_wait(now, id, mad, cm_timeout(CM_RESPONSE_TIMEOUT));
        Ok(())
    }

    /// Refuses a connection request (or a REP, on the active side) with `reason`.
    pub fn reject(&mut self, id: ConnId, reason: u16, private_data: &[u8]) -> Result<(), CmError> {
        if private_data.len() > 148 {
            return Err(CmError::PrivateDataTooLong);
        }
        let c = self.remove(id).ok_or(CmError::NoSuchConnection)?;
        let which = match c.state {
            State::ReqReceived => about::REQ,
            State::RepReceived => about::REP,
            _ => {
                self.insert(id, c);
                return Err(CmError::WrongState);
            }
        };
        let rej = Rej {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            message_rejected: which,
            reject_info_len: 0,
            reason,
            ari: &[],
            private_data,
        };
        self.send(
            c.peer,
            CmMad {
                transaction_id: c.transaction_id,
                message: CmMessage::Rej(rej),
            },
        );
        Ok(())
    }

    /// The active side's QP is ready: sends the RTU; the connection is established.
    pub fn ready_to_use(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        if private_data.len() > 224 {
            return Err(CmError::PrivateDataTooLong);
        }
        let c = self.conns.get_mut(&id).ok_or(CmError::NoSuchConnection)?;
        if c.state != State::RepReceived {
            return Err(CmError::WrongState);
        }
        c.state = State::Established;
        let (remote, tid) = (c.remote_id, c.transaction_id);
        let rtu = Ids {
            local_comm_id: id,
            remote_comm_id: remote,
            private_data,
        };
        self.answer(
            id,
            CmMad {
                transaction_id: tid,
                message: CmMessage::Rtu(rtu),
            },
        );
        self.events.push_back(CmEvent::Established { id });
        Ok(())
    }

    /// The passive side's QP received a packet before the RTU came (the engine's COMM_EST
    /// event): the connection is established as if it had (IBA 12.9.6; the kernel's
    /// `ib_cm_notify`), and the REP is no longer resent. A late RTU changes nothing.
    pub fn notify_established(&mut self, id: ConnId) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id).ok_or(CmError::NoSuchConnection)?;
        match c.state {
            State::RepSent => {
                c.state = State::Established;
                c.pending = None;
                self.index.set_deadline(id, c, None);
                self.report(id, CmEvent::Established { id });
                Ok(())
            }
            State::Established => Ok(()),
            _ => Err(CmError::WrongState),
        }
    }

    /// Disconnects: sends a DREQ, or the DREP to one received (IBA 12.6.10, 12.6.11).
    pub fn disconnect(&mut self, now: Instant, id: ConnId) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id).ok_or(CmError::NoSuchConnection)?;
        let (remote, remote_qpn) = (c.remote_id, c.remote_qpn);
        let tid = c.transaction_id;
        match c.state {
            State::Established | State::RepSent => {
                c.state = State::DreqSent;
                let dreq = Dreq {
                    local_comm_id: id,
                    remote_comm_id: remote,
                    remote_qpn,
                    private_data: &[],
                };
                let mad = CmMad {
                    transaction_id: tid,
                    message: CmMessage::Dreq(dreq),
                };
                self.send_and_wait(now, id, mad, cm_timeout(CM_RESPONSE_TIMEOUT));
                Ok(())
            }
            State::DreqReceived => {
                let drep = Ids {
                    local_comm_id: id,
                    remote_comm_id: remote,
                    private_data: &[],
                };
                self.answer(
                    id,
                    CmMad {
                        transaction_id: tid,
                        message: CmMessage::Drep(drep),
                    },
                );
                self.enter_timewait(now, id);
                Ok(())
            }
            State::DreqSent | State::TimeWait => Ok(()),
            _ => Err(CmError::WrongState),
        }
    }

    /// The consumer lets a connection go (rdma_destroy_id, or its program ended): an
    /// established one is disconnected first, as the kernel does when an rdma_cm fd closes,
    /// and a disconnect in progress finishes; nothing more is reported.
    pub fn destroy(&mut self, now: Instant, id: ConnId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.detached = true;
        if matches!(c.state, State::Established | State::DreqReceived) {
            let _ = self.disconnect(now, id);
        }
        if self
            .conns
            .get(&id)
            .is_some_and(|c| !matches!(c.state, State::DreqSent | State::TimeWait))
        {
            self.remove(id);
        }
    }

    /// Asks which UD QP serves `service_id` (IBA 12.11.1).
    pub fn sidr_request(
        &mut self,
        now: Instant,
        peer: Peer,
        service_id: u64,
        private_data: &[u8],
    ) -> Result<ConnId, CmError> {
        if private_data.len() > 216 {
            return Err(CmError::PrivateDataTooLong);
        }
        let id = self.new_id();
        let tid = self.transaction_id();
        self.insert(id, Conn::new(State::SidrReqSent, peer, tid, service_id));
        let req = SidrReq {
            request_id: id,
            pkey: 0xffff,
            service_id,
            private_data,
        };
        let mad = CmMad {
            transaction_id: tid,
            message: CmMessage::SidrReq(req),
        };
        self.send_and_wait(now, id, mad, cm_timeout(CM_RESPONSE_TIMEOUT));
        Ok(id)
    }

    /// Answers a SIDR_REQ (status 0 with the QP, or a refusal) and forgets it.
    pub fn sidr_reply(
        &mut self,
        id: ConnId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > 136 {
            return Err(CmError::PrivateDataTooLong);
        }
        let c = self.remove(id).ok_or(CmError::NoSuchConnection)?;
        if c.state != State::SidrReqReceived {
            self.insert(id, c);
            return Err(CmError::WrongState);
        }
        let rep = SidrRep {
            request_id: c.remote_id,
            status,
            additional_info_len: 0,
            qpn,
            service_id: c.service_id,
            qkey,
            class_port_info: &[],
            private_data,
        };
        self.send(
            c.peer,
            CmMad {
                transaction_id: c.transaction_id,
                message: CmMessage::SidrRep(rep),
            },
        );
        Ok(())
    }

    fn enter_timewait(&mut self, now: Instant, id: ConnId) {
        let wait = self.timewait;
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = State::TimeWait;
            c.pending = None;
            self.index.set_deadline(id, c, Some(now + wait));
        }
    }

    /// Reports an event of a connection whose consumer is still there.
    fn report(&mut self, id: ConnId, event: CmEvent) {
        if self.conns.get(&id).is_some_and(|c| !c.detached) {
            self.events.push_back(event);
        }
    }

    /// Resends what waits for an answer and gives up on what waited too often; ends TIMEWAIT.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<ConnId> = (self.index.deadlines.iter())
            .take_while(|&&(at, _)| at <= now)
            .map(|&(_, id)| id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            if c.state == State::TimeWait {
                self.report(id, CmEvent::TimewaitExit { id });
                self.remove(id);
                continue;
            }
            if c.retries_left > 0 {
                c.retries_left -= 1;
                let at = now + c.wait;
                self.index.set_deadline(id, c, Some(at));
                if let Some(mad) = c.pending {
                    let to = c.peer;
                    self.out.push_back(Outgoing { to, mad });
                }
                continue;
            }
            // Out of retries (12.9.2): a connection attempt fails, a DREQ counts as answered.
            match c.state {
                State::DreqSent => {
                    self.report(id, CmEvent::Disconnected { id });
                    self.enter_timewait(now, id);
                }
                State::ReqSent | State::RepSent => {
                    let (peer, remote, tid) = (c.peer, c.remote_id, c.transaction_id);
                    let which = if c.state == State::ReqSent {
                        about::REQ
                    } else {
                        about::REP
                    };
                    self.report(id, CmEvent::Unreachable { id });
                    self.remove(id);
                    // The other side is told, in case only its answers were lost.
                    let rej = Rej {
                        local_comm_id: id,
                        remote_comm_id: remote,
                        message_rejected: which,
                        reject_info_len: 0,
                        reason: rej_reason::TIMEOUT,
                        ari: &[],
                        private_data: &[],
                    };
                    self.send(
                        peer,
                        CmMad {
                            transaction_id: tid,
                            message: CmMessage::Rej(rej),
                        },
                    );
                }
                _ => {
                    self.report(id, CmEvent::Unreachable { id });
                    self.remove(id);
                }
            }
        }
    }

    /// Handles a MAD received on QP1 from `from`. Anything malformed or not for the CM is
    /// dropped and counted.
    pub fn handle_mad(&mut self, now: Instant, from: Peer, mad: &[u8]) {
        let Ok(m) = CmMad::parse(mad) else {
            self.dropped += 1;
            return;
        };
        match m.message {
            CmMessage::Req(r) => self.on_req(from, m.transaction_id, &r),
            CmMessage::Rep(r) => self.on_rep(from, m.transaction_id, &r),
            CmMessage::Rtu(r) => self.on_rtu(&r),
            CmMessage::Rej(r) => self.on_rej(&r),
            CmMessage::Mra(r) => self.on_mra(now, &r),
            CmMessage::Dreq(r) => self.on_dreq(now, from, m.transaction_id, &r),
            CmMessage::Drep(r) => self.on_drep(now, &r),
            CmMessage::SidrReq(r) => self.on_sidr_req(from, m.transaction_id, &r),
            CmMessage::SidrRep(r) => self.on_sidr_rep(&r),
        }
    }

    /// The connection the other side names as `remote_id` of CA `guid`, if known.
    fn by_remote(&self, guid: u64, remote_id: u32) -> Option<ConnId> {
        let ids = self.index.remote_ids.get(&(guid, remote_id))?;
        ids.first().copied()
    }

    /// A REJ for a message this CM has no connection for.
    fn refuse(&mut self, to: Peer, tid: u64, remote_id: u32, about: u8, reason: u16) {
        let rej = Rej {
            local_comm_id: 0,
            remote_comm_id: remote_id,
            message_rejected: about,
            reject_info_len: 0,
            reason,
            ari: &[],
            private_data: &[],
        };
        self.send(
            to,
            CmMad {
                transaction_id: tid,
                message: CmMessage::Rej(rej),
            },
        );
    }

    fn on_req(&mut self, from: Peer, tid: u64, r: &Req) {
        // A duplicate (12.9.8.1): the REP again, or an MRA while the consumer decides.
        if let Some(id) = self.by_remote(r.local_ca_guid, r.local_comm_id) {
            let c = &self.conns[&id];
            match (c.state, c.last_sent) {
                (State::RepSent, Some(rep)) => self.out.push_back(Outgoing {
                    to: c.peer,
                    mad: rep,
                }),
                (State::ReqReceived, _) => {
                    let mra = Mra {
                        local_comm_id: id,
                        remote_comm_id: r.local_comm_id,
                        message_mraed: about::REQ,
                        service_timeout: CM_RESPONSE_TIMEOUT,
                        private_data: &[],
                    };
                    let to = c.peer;
                    self.send(
                        to,
                        CmMad {
                            transaction_id: tid,
                            message: CmMessage::Mra(mra),
                        },
                    );
                }
                _ => {}
            }
            return;
        }
        // A stale connection (12.9.8.3): that remote QP is still connected here under another
        // ID, or waits out its TIMEWAIT.
        let stale = (self.index.remote_qpns).contains_key(&(r.local_ca_guid, r.local_qpn));
        if stale {
            return self.refuse(
                from,
                tid,
                r.local_comm_id,
                about::REQ,
                rej_reason::STALE_CONN,
            );
        }
        if !self.listening.contains(&r.service_id) {
            return self.refuse(
                from,
                tid,
                r.local_comm_id,
                about::REQ,
                rej_reason::INVALID_SERVICE_ID,
            );
        }
        let id = self.new_id();
        let mut c = Conn::new(State::ReqReceived, from, tid, r.service_id);
        c.remote_id = r.local_comm_id;
        c.remote_guid = r.local_ca_guid;
        c.remote_qpn = r.local_qpn;
        // The active side's answer delay bounds how long to wait for its RTU.
        c.wait = cm_timeout(r.local_cm_response_timeout);
        self.insert(id, c);
        self.events.push_back(CmEvent::ReqReceived {
            id,
            req: ConnectParams {
                peer: from,
                service_id: r.service_id,
                qpn: r.local_qpn,
                starting_psn: r.starting_psn,
                transport: r.transport,
                responder_resources: r.responder_resources,
                initiator_depth: r.initiator_depth,
                retry_count: r.retry_count,
                rnr_retry_count: r.rnr_retry_count,
                path_mtu: r.path_mtu,
                srq: r.srq,
                path: r.primary_path,
                private_data: r.private_data.to_vec(),
            },
        });
    }

    fn on_rep(&mut self, from: Peer, tid: u64, r: &Rep) {
        let Some(c) = self.conns.get_mut(&r.remote_comm_id) else {
            // A REP for no connection of ours (12.9.8.2).
            return self.refuse(
                from,
                tid,
                r.local_comm_id,
                about::REP,
                rej_reason::INVALID_COMM_ID,
            );
        };
        match c.state {
            State::ReqSent => {
                c.state = State::RepReceived;
                c.pending = None;
                let id = r.remote_comm_id;
                let (guid, remote_id, qpn) = (r.local_ca_guid, r.local_comm_id, r.local_qpn);
                self.index.set_remote(id, c, guid, remote_id, qpn);
                self.index.set_deadline(id, c, None);
                self.report(
                    id,
                    CmEvent::RepReceived {
                        id,
                        qpn: r.local_qpn,
                        starting_psn: r.starting_psn,
                        responder_resources: r.responder_resources,
                        initiator_depth: r.initiator_depth,
                        rnr_retry_count: r.rnr_retry_count,
                        private_data: r.private_data.to_vec(),
                    },
                );
            }
            // A duplicate REP: the RTU it asks for again.
            State::Established => {
                if let Some(rtu) = c.last_sent {
                    self.out.push_back(Outgoing {
                        to: c.peer,
                        mad: rtu,
                    });
                }
            }
            _ => {}
        }
    }

    fn on_rtu(&mut self, r: &Ids) {
        if let Some(c) = self.conns.get_mut(&r.remote_comm_id)
            && c.state == State::RepSent
            && c.remote_id == r.local_comm_id
        {
            c.state = State::Established;
            c.pending = None;
            let id = r.remote_comm_id;
            self.index.set_deadline(id, c, None);
            self.report(id, CmEvent::Established { id });
        }
    }

    fn on_rej(&mut self, r: &Rej) {
        let Some(c) = self.conns.get(&r.remote_comm_id) else {
            return;
        };
        // A REJ names the connection by our ID; one for a REQ may come before we know theirs.
        if c.remote_id != 0 && r.local_comm_id != 0 && c.remote_id != r.local_comm_id {
            return;
        }
        if !matches!(
            c.state,
            State::ReqSent | State::RepReceived | State::RepSent | State::ReqReceived
        ) {
            return;
        }
        let id = r.remote_comm_id;
        let event = CmEvent::Rejected {
            id,
            reason: r.reason,
            private_data: r.private_data.to_vec(),
        };
        self.report(id, event);
        self.remove(id);
    }

    fn on_mra(&mut self, now: Instant, r: &Mra) {
        if let Some(c) = self.conns.get_mut(&r.remote_comm_id)
            && matches!(c.state, State::ReqSent | State::RepSent)
        {
            // The other side needs more time (12.6.6): each wait grows by what it asks for.
            c.wait += cm_timeout(r.service_timeout);
            let at = now + c.wait;
            self.index.set_deadline(r.remote_comm_id, c, Some(at));
        }
    }

    fn on_dreq(&mut self, now: Instant, from: Peer, tid: u64, r: &Dreq) {
        let Some(c) = self.conns.get_mut(&r.remote_comm_id) else {
            // Long gone: a DREP all the same, so the other side stops asking (12.9.8.4).
            let drep = Ids {
                local_comm_id: 0,
                remote_comm_id: r.local_comm_id,
                private_data: &[],
            };
            self.send(
                from,
                CmMad {
                    transaction_id: tid,
                    message: CmMessage::Drep(drep),
                },
            );
            return;
        };
        match c.state {
            State::Established | State::RepSent | State::RepReceived => {
                c.state = State::DreqReceived;
                c.pending = None;
                self.index.set_deadline(r.remote_comm_id, c, None);
                c.transaction_id = tid;
                let id = r.remote_comm_id;
                self.report(id, CmEvent::Disconnected { id });
                // A consumer that was destroyed answers at once.
                if self.conns.get(&id).is_some_and(|c| c.detached) {
                    let _ = self.disconnect(now, id);
                }
            }
            // Both sides disconnected at once: answer, and the own DREQ's answer ends it.
            State::DreqSent => {
                let drep = Ids {
                    local_comm_id: r.remote_comm_id,
                    remote_comm_id: r.local_comm_id,
                    private_data: &[],
                };
                let to = c.peer;
                self.send(
                    to,
                    CmMad {
                        transaction_id: tid,
                        message: CmMessage::Drep(drep),
                    },
                );
            }
            // A duplicate: the DREP again.
            State::TimeWait => {
                if let Some(drep) = c.last_sent {
                    self.out.push_back(Outgoing {
                        to: c.peer,
                        mad: drep,
                    });
                }
            }
            _ => {}
        }
    }

    fn on_drep(&mut self, now: Instant, r: &Ids) {
        if self
            .conns
            .get(&r.remote_comm_id)
            .is_some_and(|c| c.state == State::DreqSent)
        {
            let id = r.remote_comm_id;
            self.report(id, CmEvent::Disconnected { id });
            self.enter_timewait(now, id);
        }
    }

    fn on_sidr_req(&mut self, from: Peer, tid: u64, r: &SidrReq) {
        if !self.listening.contains(&r.service_id) {
            let rep = SidrRep {
                request_id: r.request_id,
                status: 1,
                additional_info_len: 0,
                qpn: 0,
                service_id: r.service_id,
                qkey: 0,
                class_port_info: &[],
                private_data: &[],
            };
            self.send(
                from,
                CmMad {
                    transaction_id: tid,
                    message: CmMessage::SidrRep(rep),
                },
            );
            return;
        }
        let id = self.new_id();
        let mut c = Conn::new(State::SidrReqReceived, from, tid, r.service_id);
        c.remote_id = r.request_id;
        self.insert(id, c);
        self.events.push_back(CmEvent::SidrReqReceived {
            id,
            peer: from,
            service_id: r.service_id,
            private_data: r.private_data.to_vec(),
        });
    }

    fn on_sidr_rep(&mut self, r: &SidrRep) {
        if self
            .conns
            .get(&r.request_id)
            .is_some_and(|c| c.state == State::SidrReqSent)
        {
            let id = r.request_id;
            self.report(
                id,
                CmEvent::SidrRepReceived {
                    id,
                    status: r.status,
                    qpn: r.qpn,
                    qkey: r.qkey,
                    private_data: r.private_data.to_vec(),
                },
            );
            self.remove(id);
        }
    }
}

impl Conn {
    fn new(state: State, peer: Peer, transaction_id: u64, service_id: u64) -> Conn {
        Conn {
            state,
            peer,
            remote_id: 0,
            remote_guid: 0,
            remote_qpn: 0,
            local_qpn: 0,
            pending: None,
            last_sent: None,
            transaction_id,
            deadline: None,
            wait: cm_timeout(CM_RESPONSE_TIMEOUT),
            retries_left: 0,
            service_id,
            detached: false,
        }
    }
}

/// Why a CM call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmError {
    /// Someone listens on that service already (EADDRINUSE).
    InUse,
    /// No such connection (EINVAL).
    NoSuchConnection,
    /// The call does not fit the connection's state (EINVAL).
    WrongState,
    /// Private data longer than the message allows (EINVAL).
    PrivateDataTooLong,
}

impl CmError {
    /// The errno rdma_cm gives.
    pub fn errno(self) -> i32 {
        match self {
            CmError::InUse => 98,
            _ => 22,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_wire::cm::{ip_service_id, port_space};

    const SERVICE: u64 = 0x0106_1c06;

    /// Two CMs, A (active) and B (passive), and what travels between them.
    struct Pair {
        cm: [Cm; 2],
        now: Instant,
        /// Whether each side's next MADs are lost.
        lose: [bool; 2],
        sent: Vec<(usize, u16)>,
    }

    impl Pair {
        fn new() -> Pair {
            let mut cm = [Cm::new(0xa, 1), Cm::new(0xb, 2)];
            for c in &mut cm {
                c.set_timing(Duration::from_millis(100), 3);
            }
            Pair {
                cm,
                now: Instant::ZERO,
                lose: [false; 2],
                sent: Vec::new(),
            }
        }

        /// Side `of` as the other side sees it.
        fn peer(&self, of: usize) -> Peer {
            let n = of as u8 + 1;
            Peer {
                gid: Gid([n; 16]),
                local: Gid([3 - n; 16]),
                mac: [2, 0, 0, 0, 0, n],
            }
        }

        /// Delivers what both sides sent until nothing moves.
        fn run(&mut self) {
            self.cm.iter().for_each(Cm::check_index);
            loop {
                let mut moved = false;
                for from in 0..2 {
                    while let Some(o) = self.cm[from].poll_transmit() {
                        moved = true;
                        let id = u16::from_be_bytes([o.mad[16], o.mad[17]]);
                        self.sent.push((from, id));
                        assert_eq!(o.to, self.peer(1 - from));
                        if !self.lose[from] {
                            let me = self.peer(from);
                            self.cm[1 - from].handle_mad(self.now, me, &o.mad);
                        }
                    }
                }
                if !moved {
                    self.cm.iter().for_each(Cm::check_index);
                    return;
                }
            }
        }

        /// Lets time pass to each side's next timeout, `n` times.
        fn tick(&mut self, n: usize) {
            for _ in 0..n {
                let next = self.cm.iter().filter_map(Cm::poll_timeout).min();
                let Some(t) = next else { return };
                self.now = t;
                for c in &mut self.cm {
                    c.handle_timeout(t);
                }
                self.run();
            }
        }

        fn events(&mut self, side: usize) -> Vec<CmEvent> {
            std::iter::from_fn(|| self.cm[side].poll_event()).collect()
        }

        fn count(&self, from: usize, attr: u16) -> usize {
            self.sent.iter().filter(|&&s| s == (from, attr)).count()
        }

        fn connect(&mut self) -> ConnId {
            let p = ConnectParams {
                private_data: b"hello".to_vec(),
                ..ConnectParams::rc(self.peer(1), SERVICE, 0x11, 100)
            };
            let id = self.cm[0].connect(self.now, p).unwrap();
            self.run();
            id
        }

        fn accept(&mut self, id: ConnId) {
            let p = AcceptParams {
                qpn: 0x12,
                starting_psn: 200,
                responder_resources: 2,
                initiator_depth: 2,
                rnr_retry_count: 7,
                srq: false,
                private_data: b"welcome".to_vec(),
            };
            self.cm[1].accept(self.now, id, p).unwrap();
            self.run();
        }

        /// A connection established both ways: (A's ID, B's ID).
        fn established(&mut self) -> (ConnId, ConnId) {
            self.cm[1].listen(SERVICE).unwrap();
            let a = self.connect();
            let b = match self.events(1).as_slice() {
                [CmEvent::ReqReceived { id, req, .. }] => {
                    assert_eq!((req.qpn, req.starting_psn), (0x11, 100));
                    assert_eq!(&req.private_data[..5], b"hello");
                    *id
                }
                e => panic!("{e:?}"),
            };
            self.accept(b);
            match self.events(0).as_slice() {
                [
                    CmEvent::RepReceived {
                        id,
                        qpn,
                        starting_psn,
                        private_data,
                        ..
                    },
                ] => {
                    assert_eq!((*id, *qpn, *starting_psn), (a, 0x12, 200));
                    assert_eq!(&private_data[..7], b"welcome");
                }
                e => panic!("{e:?}"),
            }
            self.cm[0].ready_to_use(a, &[]).unwrap();
            self.run();
            assert_eq!(self.events(0), [CmEvent::Established { id: a }]);
            assert_eq!(self.events(1), [CmEvent::Established { id: b }]);
            (a, b)
        }
    }

    use softrnic_wire::cm::attr;

    #[test]
    fn req_rep_rtu_establish_both_sides() {
        let mut p = Pair::new();
        p.established();
        assert_eq!(p.sent, [(0, attr::REQ), (1, attr::REP), (0, attr::RTU)]);
        assert_eq!(p.cm[0].poll_timeout(), None);
        assert_eq!(p.cm[1].poll_timeout(), None);
    }

    #[test]
    fn a_req_for_a_service_nobody_listens_on_is_rejected() {
        let mut p = Pair::new();
        let a = p.connect();
        assert_eq!(
            p.events(0),
            [CmEvent::Rejected {
                id: a,
                reason: rej_reason::INVALID_SERVICE_ID,
                private_data: vec![0; 148],
            }]
        );
        assert!(p.events(1).is_empty());
        assert_eq!(p.cm[0].poll_timeout(), None, "nothing left to resend");
    }

    #[test]
    fn a_peer_that_never_answers_is_unreachable_after_the_retries() {
        let mut p = Pair::new();
        p.lose[0] = true;
        let a = p.connect();
        p.tick(10);
        // The REQ and its 3 retries, then a REJ (timeout) in case only the answers were lost.
        assert_eq!(p.count(0, attr::REQ), 4);
        assert_eq!(p.count(0, attr::REJ), 1);
        assert_eq!(p.events(0), [CmEvent::Unreachable { id: a }]);
        // Each wait is the REQ's response timeout.
        assert_eq!(p.now, Instant::ZERO + cm_timeout(CM_RESPONSE_TIMEOUT) * 4);
    }

    #[test]
    fn a_duplicate_req_makes_no_second_connection() {
        let mut p = Pair::new();
        p.cm[1].listen(SERVICE).unwrap();
        // B's answers are lost, so A resends its REQ: B asks for time (MRA) the first time,
        // and once it has accepted, sends the same REP again.
        p.lose[1] = true;
        let a = p.connect();
        p.tick(1);
        let b = match p.events(1).as_slice() {
            [CmEvent::ReqReceived { id, .. }] => *id,
            e => panic!("{e:?}"),
        };
        assert_eq!(p.count(1, attr::MRA), 1);
        p.accept(b);
        p.lose[1] = false;
        p.tick(1);
        assert!(p.count(1, attr::REP) >= 2);
        assert!(matches!(p.events(0).as_slice(), [CmEvent::RepReceived { id, .. }] if *id == a));
        assert!(p.events(1).is_empty(), "one connection only");
    }

    #[test]
    fn a_lost_rep_is_sent_again_and_a_lost_rtu_answered_again() {
        let mut p = Pair::new();
        p.cm[1].listen(SERVICE).unwrap();
        let a = p.connect();
        let b = match p.events(1).as_slice() {
            [CmEvent::ReqReceived { id, .. }] => *id,
            e => panic!("{e:?}"),
        };
        p.lose[1] = true;
        p.accept(b);
        p.lose[1] = false;
        // A's REQ wait and B's REP wait end together; B resends its REP, A its REQ (which B
        // answers with the REP again).
        p.tick(1);
        assert!(matches!(
            p.events(0).as_slice(),
            [CmEvent::RepReceived { .. }]
        ));
        p.lose[0] = true;
        p.cm[0].ready_to_use(a, &[]).unwrap();
        p.run();
        p.lose[0] = false;
        // B resends its REP; A answers with the RTU again.
        p.tick(1);
        assert_eq!(p.count(0, attr::RTU), 2);
        assert_eq!(p.events(1), [CmEvent::Established { id: b }]);
    }

    #[test]
    fn a_packet_before_the_rtu_establishes_the_passive_side() {
        let mut p = Pair::new();
        p.cm[1].listen(SERVICE).unwrap();
        let a = p.connect();
        let b = match p.events(1).as_slice() {
            [CmEvent::ReqReceived { id, .. }] => *id,
            e => panic!("{e:?}"),
        };
        p.accept(b);
        assert!(matches!(
            p.events(0).as_slice(),
            [CmEvent::RepReceived { .. }]
        ));
        // The RTU is lost; the active side's first SEND reaches B's QP (COMM_EST).
        p.lose[0] = true;
        p.cm[0].ready_to_use(a, &[]).unwrap();
        p.run();
        p.lose[0] = false;
        assert_eq!(p.cm[1].notify_established(b), Ok(()));
        assert_eq!(p.events(1), [CmEvent::Established { id: b }]);
        // The REP is not resent, and a late RTU (or a second notice) changes nothing.
        assert_eq!(p.cm[1].poll_timeout(), None);
        assert_eq!(p.cm[1].notify_established(b), Ok(()));
        assert!(p.events(1).is_empty());
        assert_eq!(
            p.cm[1].notify_established(12345),
            Err(CmError::NoSuchConnection)
        );
    }

    #[test]
    fn a_rep_for_an_unknown_connection_is_rejected() {
        let mut p = Pair::new();
        let rep = CmMad {
            transaction_id: 9,
            message: CmMessage::Rep(Rep {
                local_comm_id: 77,
                remote_comm_id: 12345,
                local_qkey: 0,
                local_qpn: 0x12,
                starting_psn: 0,
                responder_resources: 0,
                initiator_depth: 0,
                target_ack_delay: 0,
                failover_accepted: 0,
                end_to_end_flow_control: false,
                rnr_retry_count: 0,
                srq: false,
                local_ca_guid: 0xb,
                private_data: &[],
            }),
        };
        let mut bytes = [0u8; MAD_LEN];
        rep.emit(&mut bytes).unwrap();
        p.cm[0].handle_mad(p.now, p.peer(1), &bytes);
        let out = p.cm[0].poll_transmit().expect("a REJ");
        match CmMad::parse(&out.mad).unwrap().message {
            CmMessage::Rej(r) => {
                assert_eq!(
                    (r.remote_comm_id, r.reason),
                    (77, rej_reason::INVALID_COMM_ID)
                );
                assert_eq!(r.message_rejected, about::REP);
            }
            m => panic!("{m:?}"),
        }
        assert!(p.events(0).is_empty());
    }

    #[test]
    fn malformed_mads_are_dropped_and_counted() {
        let mut p = Pair::new();
        p.cm[1].listen(SERVICE).unwrap();
        for bad in [&[0u8; 10][..], &[0u8; MAD_LEN][..], &[0xffu8; MAD_LEN][..]] {
            p.cm[1].handle_mad(p.now, p.peer(0), bad);
        }
        assert_eq!(p.cm[1].dropped, 3);
        assert!(p.cm[1].poll_transmit().is_none());
        assert!(p.events(1).is_empty());
    }

    #[test]
    fn dreq_drep_then_timewait_on_both_sides() {
        let mut p = Pair::new();
        let (a, b) = p.established();
        p.cm[0].disconnect(p.now, a).unwrap();
        p.run();
        assert_eq!(p.events(1), [CmEvent::Disconnected { id: b }]);
        p.cm[1].disconnect(p.now, b).unwrap();
        p.run();
        assert_eq!(p.events(0), [CmEvent::Disconnected { id: a }]);
        // Nothing is resent once answered; TIMEWAIT ends on both sides.
        let drep_count = p.count(1, attr::DREP);
        p.tick(2);
        assert_eq!(p.events(0), [CmEvent::TimewaitExit { id: a }]);
        assert_eq!(p.events(1), [CmEvent::TimewaitExit { id: b }]);
        assert_eq!(p.count(1, attr::DREP), drep_count);
        assert_eq!(p.now, Instant::ZERO + Duration::from_millis(100));
    }

    #[test]
    fn a_qp_number_stays_taken_until_timewait_ends() {
        let mut p = Pair::new();
        let (a, b) = p.established();
        // Pair connects QP 0x11 to QP 0x12.
        assert!(p.cm[0].holds_qpn(0x11) && p.cm[1].holds_qpn(0x12));
        assert!(!p.cm[0].holds_qpn(0x12));
        p.cm[0].disconnect(p.now, a).unwrap();
        p.run();
        p.cm[1].disconnect(p.now, b).unwrap();
        p.run();
        assert!(p.cm[0].holds_qpn(0x11), "in TIMEWAIT");
        p.tick(2);
        assert_eq!(p.events(0).last(), Some(&CmEvent::TimewaitExit { id: a }));
        assert!(!p.cm[0].holds_qpn(0x11) && !p.cm[1].holds_qpn(0x12));
    }

    #[test]
    fn a_dreq_nobody_answers_still_ends_the_connection() {
        let mut p = Pair::new();
        let (a, _) = p.established();
        p.lose[0] = true;
        p.cm[0].disconnect(p.now, a).unwrap();
        p.run();
        p.tick(4);
        assert_eq!(p.count(0, attr::DREQ), 4);
        assert_eq!(p.events(0), [CmEvent::Disconnected { id: a }]);
        p.tick(1);
        assert_eq!(p.events(0), [CmEvent::TimewaitExit { id: a }]);
    }

    #[test]
    fn destroying_an_established_connection_disconnects_it() {
        let mut p = Pair::new();
        let (a, b) = p.established();
        p.cm[0].destroy(p.now, a);
        p.run();
        assert_eq!(p.events(1), [CmEvent::Disconnected { id: b }]);
        p.cm[1].destroy(p.now, b);
        p.run();
        p.tick(3);
        // The destroyed side hears nothing more; the DREP was sent for it.
        assert!(p.events(0).is_empty());
        assert!(p.events(1).is_empty());
        assert_eq!(p.count(1, attr::DREP), 1);
        assert_eq!(p.cm[0].poll_timeout(), None);
    }

    #[test]
    fn a_req_from_a_qp_still_connected_is_stale() {
        let mut p = Pair::new();
        p.established();
        // The same remote QP asks again under a new communication ID.
        p.connect();
        match p.events(0).as_slice() {
            [CmEvent::Rejected { reason, .. }] => assert_eq!(*reason, rej_reason::STALE_CONN),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn sidr_resolves_a_ud_service() {
        let mut p = Pair::new();
        let udp = ip_service_id(port_space::UDP, 7174);
        p.cm[1].listen(udp).unwrap();
        let a = p.cm[0].sidr_request(p.now, p.peer(1), udp, b"hi").unwrap();
        p.run();
        let b = match p.events(1).as_slice() {
            [CmEvent::SidrReqReceived { id, service_id, .. }] if *service_id == udp => *id,
            e => panic!("{e:?}"),
        };
        p.cm[1].sidr_reply(b, 0, 0x12, 0x1234, b"here").unwrap();
        p.run();
        match p.events(0).as_slice() {
            [
                CmEvent::SidrRepReceived {
                    id,
                    status: 0,
                    qpn: 0x12,
                    qkey: 0x1234,
                    private_data,
                },
            ] => {
                assert_eq!(*id, a);
                assert_eq!(&private_data[..4], b"here");
            }
            e => panic!("{e:?}"),
        }
        // Nobody listens: status 1.
        let none = ip_service_id(port_space::UDP, 1);
        p.cm[0].sidr_request(p.now, p.peer(1), none, &[]).unwrap();
        p.run();
        assert!(matches!(
            p.events(0).as_slice(),
            [CmEvent::SidrRepReceived { status: 1, .. }]
        ));
    }

    #[test]
    fn calls_out_of_turn_are_refused() {
        let mut p = Pair::new();
        assert_eq!(p.cm[1].listen(SERVICE), Ok(()));
        assert_eq!(p.cm[1].listen(SERVICE), Err(CmError::InUse));
        assert_eq!(CmError::InUse.errno(), 98);
        assert_eq!(p.cm[0].ready_to_use(5, &[]), Err(CmError::NoSuchConnection));
        let a = p.connect();
        assert_eq!(p.cm[0].ready_to_use(a, &[]), Err(CmError::WrongState));
        assert_eq!(p.cm[0].reject(a, 28, &[]), Err(CmError::WrongState));
        let long = ConnectParams {
            private_data: vec![0; 93],
            ..ConnectParams::rc(p.peer(1), SERVICE, 1, 0)
        };
        assert_eq!(
            p.cm[0].connect(p.now, long),
            Err(CmError::PrivateDataTooLong)
        );
    }

    #[test]
    fn a_consumer_reject_carries_its_reason_and_data() {
        let mut p = Pair::new();
        p.cm[1].listen(SERVICE).unwrap();
        let a = p.connect();
        let b = match p.events(1).as_slice() {
            [CmEvent::ReqReceived { id, .. }] => *id,
            e => panic!("{e:?}"),
        };
        p.cm[1].reject(b, rej_reason::CONSUMER, b"no").unwrap();
        p.run();
        match p.events(0).as_slice() {
            [
                CmEvent::Rejected {
                    id,
                    reason,
                    private_data,
                },
            ] => {
                assert_eq!((*id, *reason), (a, rej_reason::CONSUMER));
                assert_eq!(&private_data[..2], b"no");
            }
            e => panic!("{e:?}"),
        }
    }
}
