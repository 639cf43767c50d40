//! The daemon's control protocol: requests and replies over a Unix stream socket, each a
//! bincode message behind a 4-byte little-endian length. One connection is one device context
//! (as `ibv_open_device` gives one): the objects it creates belong to it and die with it.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use crate::shm::RingInfo;
use std::net::SocketAddr;

use softrnic_emu_core::{
    Access, AttrMask, Counters, Dcqcn, DeviceAttr, Event, Gid, MwType, PortAttr, QpAttr, QpCap,
    QpInit, QpState, QpType,
};

/// The system daemon's socket.
pub const SYSTEM_SOCKET: &str = "/run/softrnic.sock";

/// The socket path: `$SOFTRNIC_SOCKET`; else the system daemon's for root; else the user's own
/// (`$XDG_RUNTIME_DIR/softrnic.sock`, else /tmp/softrnic-UID.sock) if it exists, or the system
/// daemon's if this user may connect to it (a member of its group), or the user's own.
pub fn default_socket() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("SOFTRNIC_SOCKET") {
        return p.into();
    }
    let uid = softrnic_sys::uid();
    if uid == 0 {
        return SYSTEM_SOCKET.into();
    }
    let own: std::path::PathBuf = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => std::path::Path::new(&d).join("softrnic.sock"),
        None => format!("/tmp/softrnic-{uid}.sock").into(),
    };
    match own.exists() || !softrnic_sys::may_write(std::path::Path::new(SYSTEM_SOCKET)) {
        true => own,
        false => SYSTEM_SOCKET.into(),
    }
}

/// The protocol's version; a client and daemon of different versions refuse each other.
pub const VERSION: u32 = 7;

/// The longest message accepted.
pub const MAX_MESSAGE: usize = 16 << 20;

/// Which backend a device uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackendKind {
    /// AF_XDP in generic mode.
    XdpSkb,
    /// AF_XDP in native mode.
    XdpDrv,
    /// AF_PACKET.
    Packet,
    /// No wire: only devices of this daemon are reachable.
    Local,
}

/// What `softrnic up` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpRequest {
    /// The interface, or none for a local device.
    pub netdev: Option<String>,
    /// The backend; `None` picks the best that works (AF_XDP DRV, SKB, then AF_PACKET).
    pub backend: Option<BackendKind>,
    /// The network namespace the interface is in (a path such as /var/run/netns/NAME).
    pub netns: Option<String>,
}

/// The firmware version every device reports (`ibv_query_device`, and `fw_ver` in the sysfs
/// view `softrnic exec` gives programs).
pub const FW_VER: &str = "0.1.0";

/// A device as `softrnic status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Its name, e.g. `srnic0`.
    pub name: String,
    /// The interface it runs on, if any.
    pub netdev: Option<String>,
    /// The namespace, if not the daemon's own.
    pub netns: Option<String>,
    /// The backend in use.
    pub backend: BackendKind,
    /// Why that backend (e.g. which one failed first).
    pub backend_reason: String,
    /// Its MAC.
    pub mac: [u8; 6],
    /// Its GID table.
    pub gids: Vec<Gid>,
    /// Object counts: PDs, MRs, CQs, QPs.
    pub objects: [u32; 4],
    /// Contexts open on it.
    pub contexts: u32,
}

/// Pages of a region the program moved onto a memfd ([`Request::RegMr`]): the daemon takes
/// descriptor `fd` of the program (pidfd_getfd) and maps `len` bytes of it from `offset`, which
/// the program has at `addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedPages {
    /// The memfd, as the program numbers its descriptors.
    pub fd: i32,
    /// Where in it the pages start.
    pub offset: u64,
    /// Where the program has them.
    pub addr: u64,
    /// How many bytes (whole pages).
    pub len: u64,
}

/// A request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// The first message: the client's protocol version.
    Hello {
        /// [`VERSION`].
        version: u32,
    },
    /// Every device.
    ListDevices,
    /// Adds a device.
    Up(UpRequest),
    /// Removes a device (its contexts are closed).
    Down {
        /// Its name.
        name: String,
    },
    /// Makes this connection a context of the device. The reply carries three descriptors:
    /// the context's shared region (a memfd, see [`crate::shm`]), the pipe that wakes the
    /// daemon, and the read end of the async event pipe (a byte per event).
    Open {
        /// Its name.
        name: String,
    },
    /// `ibv_query_device`.
    QueryDevice,
    /// `ibv_query_port`.
    QueryPort,
    /// The GID table.
    QueryGids,
    /// The device's counters.
    Counters {
        /// Its name.
        name: String,
    },
    /// `ibv_alloc_pd`.
    AllocPd,
    /// `ibv_dealloc_pd`.
    DeallocPd(u32),
    /// `ibv_reg_mr` over the client's own memory.
    RegMr {
        /// The PD.
        pd: u32,
        /// Start address in the client.
        addr: u64,
        /// Length.
        len: u64,
        /// The address work requests and peers name the first byte by (`ibv_reg_mr_iova`).
        iova: u64,
        /// Access flags.
        access: Access,
        /// Its whole pages on a memfd the daemon may map (`SOFTRNIC_SHARED_MR`).
        shared: Option<SharedPages>,
    },
    /// `ibv_rereg_mr`: the region keeps its key; what is given changes.
    ReregMr {
        /// The region.
        key: u32,
        /// A new PD.
        pd: Option<u32>,
        /// New memory: start address in the client and length (named by its address).
        translation: Option<(u64, u64)>,
        /// New access flags.
        access: Option<Access>,
    },
    /// `ibv_dereg_mr`.
    DeregMr(u32),
    /// `ibv_create_cq`.
    CreateCq {
        /// Capacity.
        cqe: u32,
        /// The completion channel its notifications go to, if any.
        channel: Option<u32>,
    },
    /// `ibv_create_comp_channel`: the reply's Handle comes with the read end of the channel's
    /// pipe, which gets a byte each time an armed CQ on the channel gets a completion.
    CreateCompChannel,
    /// The CQs whose notifications reached this channel since the last call, one per byte
    /// written to its pipe (`ibv_get_cq_event`, after reading a byte).
    CqEvents {
        /// The channel.
        channel: u32,
    },
    /// `ibv_destroy_comp_channel` (EBUSY while a CQ uses it).
    DestroyCompChannel(u32),
    /// `ibv_destroy_cq`.
    DestroyCq(u32),
    /// `ibv_req_notify_cq`.
    ReqNotifyCq {
        /// The CQ.
        cq: u32,
        /// Only solicited completions.
        solicited: bool,
    },
    /// `ibv_create_qp`.
    CreateQp {
        /// The PD.
        pd: u32,
        /// The attributes.
        init: QpInit,
    },
    /// `ibv_modify_qp`.
    ModifyQp {
        /// The QP.
        qpn: u32,
        /// The attributes.
        attr: QpAttr,
        /// Which attributes.
        mask: AttrMask,
    },
    /// `ibv_query_qp`.
    QueryQp(u32),
    /// `ibv_destroy_qp`.
    DestroyQp(u32),
    /// `ibv_attach_mcast`.
    AttachMcast {
        /// The QP.
        qpn: u32,
        /// The multicast group.
        gid: Gid,
    },
    /// `ibv_detach_mcast`.
    DetachMcast {
        /// The QP.
        qpn: u32,
        /// The multicast group.
        gid: Gid,
    },
    /// `ibv_resize_cq`.
    ResizeCq {
        /// The CQ.
        cq: u32,
        /// The new capacity.
        cqe: u32,
    },
    /// `ibv_create_srq`.
    CreateSrq {
        /// The PD.
        pd: u32,
        /// Capacity.
        max_wr: u32,
        /// SGEs per WR.
        max_sge: u32,
    },
    /// `ibv_modify_srq` with IBV_SRQ_LIMIT.
    ModifySrq {
        /// The SRQ.
        srq: u32,
        /// The limit to arm (0 disarms).
        limit: u32,
    },
    /// `ibv_destroy_srq`.
    DestroySrq(u32),
    /// `ibv_open_xrcd`: a new XRC domain, or the one the daemon's programs opened with the
    /// same file.
    OpenXrcd {
        /// The file's device and inode (`fd` given), shared by every program that names it.
        file: Option<(u64, u64)>,
        /// `O_CREAT`: make the file's domain if there is none yet.
        create: bool,
        /// `O_EXCL`: the file must have no domain yet.
        exclusive: bool,
    },
    /// `ibv_close_xrcd`.
    CloseXrcd(u32),
    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: answered like [`Request::CreateSrq`], the
    /// handle being the SRQ number.
    CreateXrcSrq {
        /// The PD (its R_Keys serve requests to the SRQ).
        pd: u32,
        /// The XRC domain.
        xrcd: u32,
        /// Where its completions go.
        cq: u32,
        /// Capacity.
        max_wr: u32,
        /// SGEs per WR.
        max_sge: u32,
    },
    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: an XRC target QP, answered with its number.
    CreateXrcRecvQp {
        /// The XRC domain.
        xrcd: u32,
    },
    /// `ibv_open_qp`: another program's XRC target QP in a domain this one opened, to modify,
    /// query and close.
    OpenQp {
        /// The XRC domain.
        xrcd: u32,
        /// The QP.
        qpn: u32,
    },
    /// `ibv_alloc_mw`.
    AllocMw {
        /// The PD.
        pd: u32,
        /// Type 1 or 2.
        mw_type: MwType,
    },
    /// `ibv_dealloc_mw`.
    DeallocMw(u32),
    /// The asynchronous events of this context's objects, one per byte written to its async
    /// pipe (`ibv_get_async_event`, after reading a byte), including completion notifications
    /// of CQs without a channel.
    PollEvents,
    /// Makes this connection an RDMA CM event channel (as opening the kernel's rdma_cm device
    /// does): the reply carries the read end of its notification pipe, a byte per event.
    CmOpen,
    /// `rdma_create_id`: a new id on this channel.
    CmCreateId {
        /// The port space (RDMA_PS_*).
        ps: u16,
        /// The QP type its connections use.
        qp_type: QpType,
    },
    /// `rdma_destroy_id`; the reply is [`Reply::Handle`] with the number of events the program
    /// has read for the id, which the library waits to see acknowledged.
    CmDestroyId(u32),
    /// `rdma_bind_addr`.
    CmBind {
        /// The id.
        id: u32,
        /// The address (port 0: one is chosen).
        addr: SocketAddr,
    },
    /// `rdma_resolve_addr`: ADDR_RESOLVED or ADDR_ERROR follows.
    CmResolveAddr {
        /// The id.
        id: u32,
        /// The source, if the program names one.
        src: Option<SocketAddr>,
        /// The destination.
        dst: SocketAddr,
        /// How long the program allows.
        timeout_ms: u32,
    },
    /// `rdma_resolve_route`: ROUTE_RESOLVED or ROUTE_ERROR follows.
    CmResolveRoute(u32),
    /// The id's addresses and route (what the library copies into `rdma_cm_id`).
    CmQuery(u32),
    /// `rdma_listen`.
    CmListen {
        /// The id.
        id: u32,
        /// How many requests may wait for `rdma_get_cm_event` (0: the default).
        backlog: u32,
    },
    /// `rdma_connect`.
    CmConnect {
        /// The id.
        id: u32,
        /// The parameters.
        param: ConnParam,
    },
    /// `rdma_accept` on the passive side; on the active side, the RTU once the library has
    /// readied its QP (as the kernel's ACCEPT command is).
    CmAccept {
        /// The id.
        id: u32,
        /// The parameters.
        param: ConnParam,
    },
    /// `rdma_reject`.
    CmReject {
        /// The id.
        id: u32,
        /// Private data for the REJ.
        private_data: Vec<u8>,
    },
    /// `rdma_disconnect`.
    CmDisconnect(u32),
    /// `rdma_init_qp_attr`: the attributes that move the id's QP to a state.
    CmInitQpAttr {
        /// The id.
        id: u32,
        /// The state.
        state: QpState,
    },
    /// `rdma_notify` with IBV_EVENT_COMM_EST: the QP received before the RTU came.
    CmNotify(u32),
    /// `rdma_write_cm_event` (rdma-core 65): queue an event of the program's own on the id's
    /// channel (USER, or ADDRINFO_RESOLVED for the library's `rdma_resolve_addrinfo`).
    CmWriteEvent {
        /// The id.
        id: u32,
        /// `enum rdma_cm_event_type`.
        event: u32,
        /// The event's status.
        status: i32,
        /// The event's `param.arg`.
        arg: u64,
    },
    /// `rdma_set_option`.
    CmSetOption {
        /// The id.
        id: u32,
        /// The option.
        option: CmOption,
    },
    /// `rdma_migrate_id`: moves an id of this process to this channel; the reply is
    /// [`Reply::Handle`] with the number of its events the program has read.
    CmMigrate(u32),
    /// `rdma_join_multicast`: a handle for the join; MULTICAST_JOIN or MULTICAST_ERROR
    /// follows.
    CmJoin {
        /// The id.
        id: u32,
        /// The group.
        addr: SocketAddr,
    },
    /// `rdma_leave_multicast`, by the join's handle: how many of its events were read.
    CmLeave(u32),
    /// The next event of this channel (the library reads a notification byte first).
    CmGetEvent,
    /// Every listening rdma_cm id (`softrnic status`; any connection may ask).
    CmListeners,
    /// Turns this connection into a capture: every frame in and out of the device (or of every
    /// device), same-host frames included, follows as [`Reply::Frame`]s.
    Capture {
        /// One device, or all.
        device: Option<String>,
    },
    /// A device's congestion control parameters, set first if given (`softrnic dcqcn`).
    Dcqcn {
        /// Its name.
        name: String,
        /// The new parameters.
        set: Option<Dcqcn>,
    },
}

impl Request {
    /// Whether this is a request of an RDMA CM event channel (the daemon's rdma_cm serves
    /// it; `CmListeners` excepted, which any connection may ask).
    pub fn is_rdma_cm(&self) -> bool {
        matches!(
            self,
            Request::CmOpen
                | Request::CmCreateId { .. }
                | Request::CmDestroyId(_)
                | Request::CmBind { .. }
                | Request::CmResolveAddr { .. }
                | Request::CmResolveRoute(_)
                | Request::CmQuery(_)
                | Request::CmListen { .. }
                | Request::CmConnect { .. }
                | Request::CmAccept { .. }
                | Request::CmReject { .. }
                | Request::CmDisconnect(_)
                | Request::CmInitQpAttr { .. }
                | Request::CmNotify(_)
                | Request::CmWriteEvent { .. }
                | Request::CmSetOption { .. }
                | Request::CmMigrate(_)
                | Request::CmJoin { .. }
                | Request::CmLeave(_)
                | Request::CmGetEvent
        )
    }
}

/// A reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// Done.
    Ok,
    /// The call failed with this errno (as a provider returns it) and an explanation.
    Error {
        /// The errno.
        errno: i32,
        /// Why.
        message: String,
    },
    /// Hello back: the daemon's version and process id.
    Hello {
        /// [`VERSION`].
        version: u32,
        /// The daemon's pid (for `prctl(PR_SET_PTRACER)`).
        pid: u32,
    },
    /// A new object's handle (PD, MR key, window key).
    Handle(u32),
    /// A new QP: its number and its rings (no receive ring on an SRQ).
    QpCreated {
        /// The QP number.
        qpn: u32,
        /// Send work requests, program to daemon ([`crate::slot::SendSlot`]s).
        sq: RingInfo,
        /// Receive work requests, program to daemon ([`crate::slot::RecvSlot`]s).
        rq: Option<RingInfo>,
    },
    /// A new CQ and its ring of completions, daemon to program ([`crate::slot::CqeSlot`]s).
    CqCreated {
        /// The CQ.
        cq: u32,
        /// Its ring.
        ring: RingInfo,
    },
    /// A new SRQ and its ring of receive work requests, program to daemon.
    SrqCreated {
        /// The SRQ.
        srq: u32,
        /// Its ring.
        ring: RingInfo,
    },
    /// Devices.
    Devices(Vec<DeviceInfo>),
    /// Device attributes.
    Device(DeviceAttr),
    /// Port attributes.
    Port(PortAttr),
    /// GIDs.
    Gids(Vec<Gid>),
    /// Counters.
    Counters(Counters),
    /// A QP's attributes.
    Qp(QpAttr, QpCap),
    /// Events.
    Events(Vec<Event>),
    /// CQs that fired.
    Cqs(Vec<u32>),
    /// An id's addresses and route.
    CmRoute(CmRoute),
    /// An RDMA CM event.
    CmEvent(CmEvent),
    /// The listening rdma_cm ids.
    CmListeners(Vec<CmListener>),
    /// QP attributes and which of them to apply.
    QpAttr(QpAttr, AttrMask),
    /// A captured frame.
    Frame {
        /// The device it passed through.
        device: String,
        /// Sent by the device (else received).
        outbound: bool,
        /// When, in nanoseconds since the Unix epoch.
        unix_nanos: u64,
        /// Frames this capture lost before this one because it read too slowly.
        dropped: u64,
        /// The Ethernet frame.
        data: Vec<u8>,
    },
    /// A device's congestion control parameters.
    Dcqcn(Dcqcn),
}

/// What `rdma_conn_param` carries (and, for UD, the QP number and Q_Key the other side gave).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnParam {
    /// Private data (at most what the CM message holds after rdma_cm's header).
    pub private_data: Vec<u8>,
    /// READs/atomics the QP accepts at once.
    pub responder_resources: u8,
    /// READs/atomics the QP sends at once.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries.
    pub rnr_retry_count: u8,
    /// Whether the QP uses an SRQ.
    pub srq: bool,
    /// The QP number.
    pub qp_num: u32,
    /// The Q_Key (UD).
    pub qkey: u32,
}

/// An option of `rdma_set_option`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmOption {
    /// RDMA_OPTION_ID_TOS: the traffic class.
    Tos(u8),
    /// RDMA_OPTION_ID_REUSEADDR.
    ReuseAddr(bool),
    /// RDMA_OPTION_ID_AFONLY: an IPv6 wildcard does not take IPv4.
    AfOnly(bool),
    /// RDMA_OPTION_ID_ACK_TIMEOUT: the QP's local ACK timeout.
    AckTimeout(u8),
}

/// An id's addresses and, once resolved, its device and path (what the kernel's QUERY
/// commands give `rdma_cm_id.route`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmRoute {
    /// The local address (the wildcard until bound or resolved).
    pub src: Option<SocketAddr>,
    /// The remote address.
    pub dst: Option<SocketAddr>,
    /// The device the id is bound to.
    pub device: Option<String>,
    /// The local GID and its index.
    pub sgid: Gid,
    /// Its index in the device's GID table.
    pub sgid_index: u8,
    /// The remote GID.
    pub dgid: Gid,
    /// Whether a route is resolved (the path fields are valid).
    pub resolved: bool,
    /// Path MTU (IBA code).
    pub path_mtu: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
}

/// `enum rdma_cm_event_type`: the kinds of [`CmEvent`].
#[allow(missing_docs)]
pub mod cm_event {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const ROUTE_ERROR: u32 = 3;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_RESPONSE: u32 = 5;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
    pub const DEVICE_REMOVAL: u32 = 11;
    pub const MULTICAST_JOIN: u32 = 12;
    pub const MULTICAST_ERROR: u32 = 13;
    pub const ADDR_CHANGE: u32 = 14;
    pub const TIMEWAIT_EXIT: u32 = 15;
    /// rdma-core 65.
    pub const ADDRINFO_RESOLVED: u32 = 16;
    pub const ADDRINFO_ERROR: u32 = 17;
    pub const USER: u32 = 18;
}

/// A listening rdma_cm id, as `softrnic status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmListener {
    /// The port space (RDMA_PS_*).
    pub ps: u16,
    /// The address (a wildcard listens on every device).
    pub addr: SocketAddr,
    /// The program's process id.
    pub pid: u32,
}

/// An RDMA CM event, as the library turns it into `struct rdma_cm_event`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmEvent {
    /// The id (for CONNECT_REQUEST, the new one).
    pub id: u32,
    /// For CONNECT_REQUEST: the listening id.
    pub listen: Option<u32>,
    /// `enum rdma_cm_event_type`.
    pub event: u32,
    /// 0, or a negative errno (or, for REJECTED, the IBA reject reason).
    pub status: i32,
    /// The other side's parameters and private data.
    pub param: ConnParam,
    /// For UD: where the other side's QP is (for a multicast join, the group).
    pub ah: Option<softrnic_emu_core::AddressHandle>,
    /// For MULTICAST_JOIN and MULTICAST_ERROR: the join's handle.
    pub mc: Option<u32>,
    /// For USER: the program's `param.arg`.
    pub arg: u64,
}

/// Encodes a message without a length prefix (for a ring slot).
pub fn body<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    bincode::serialize(msg).map_err(io::Error::other)
}

/// Encodes a message with its length prefix.
pub fn encode<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    let body = body(msg)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Writes one message.
pub fn send<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    w.write_all(&encode(msg)?)
}

/// Reads one message; `None` at a clean end of stream.
pub fn recv<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message too long",
        ));
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    decode(&body).map(Some)
}

/// Decodes a message body, refusing trailing bytes and oversized collections.
pub fn decode<T: for<'de> Deserialize<'de>>(body: &[u8]) -> io::Result<T> {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_limit(MAX_MESSAGE as u64)
        .reject_trailing_bytes()
        .deserialize(body)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let req = Request::RegMr {
            pd: 1,
            addr: 0x1000,
            len: 64,
            iova: 0x1000,
            access: Access::LOCAL_WRITE,
            shared: Some(SharedPages {
                fd: 5,
                offset: 0,
                addr: 0x1000,
                len: 4096,
            }),
        };
        let mut buf = Vec::new();
        send(&mut buf, &req).unwrap();
        let back: Request = recv(&mut &buf[..]).unwrap().unwrap();
        assert_eq!(back, req);
        assert!(recv::<Request>(&mut &[][..]).unwrap().is_none());
        // A huge length is refused before allocating.
        let mut huge = u32::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(&[0; 8]);
        assert!(recv::<Request>(&mut &huge[..]).is_err());
        // Random bodies decode to an error or a value, never a panic.
        for seed in 0..2000u32 {
            let body: Vec<u8> = (0..(seed % 40))
                .map(|i| (seed.wrapping_mul(2_654_435_761) >> (i % 24)) as u8)
                .collect();
            let _ = decode::<Request>(&body);
        }
    }
}
