//! rdma_cm in the daemon, as the kernel's rdma_cm and rdma_ucm are: ids on event channels (a
//! channel is one client connection), IP addresses resolved to a device and its GIDs, ports
//! bound and listened on per port space, and connections made through each device's
//! Communication Manager on QP1 ([`softrnic_emu_core::cm`]).
//!
//! It never touches a QP: as with the kernel, the library moves the program's QP through its
//! states with the attributes `rdma_init_qp_attr` gives ([`Daemon::init_qp_attr`]).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};

use softrnic_emu_core::cm::{AcceptParams, CmEvent as Cm, ConnId, ConnectParams, Peer};
use softrnic_emu_core::{
    Access, AddressHandle, AttrMask, Gid, Instant, Mtu, QpAttr, QpState, QpType,
};
use softrnic_wire::EthernetAddress;
use softrnic_wire::cm::{CmPath, CmaHeader, ip_service, ip_service_id, port_space, rej_reason};

use super::Daemon;
use crate::proto::{
    CmEvent, CmListener, CmOption, CmRoute, ConnParam, Reply, Request, cm_event as event,
};
use crate::sys;

/// The Q_Key of RDMA_PS_UDP and RDMA_PS_IB ids (`RDMA_UDP_QKEY`).
pub const UDP_QKEY: u32 = 0x0123_4567;
/// Private data bytes a REQ and a SIDR_REQ leave after rdma_cm's header (92 and 216 less 36).
const REQ_USER_DATA: usize = 92 - CmaHeader::LEN;
const SIDR_REQ_USER_DATA: usize = 216 - CmaHeader::LEN;
/// Private data bytes of a REP, a REJ and a SIDR_REP.
const REP_DATA: usize = 196;
const REJ_DATA: usize = 148;
const SIDR_REP_DATA: usize = 136;
/// Connection requests that may wait unread on a listener when the program asks for none
/// (rdma_ucm's `max_backlog` default).
const MAX_BACKLOG: u32 = 1024;
/// Ephemeral ports (the kernel's default `ip_local_port_range`).
const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;
/// The local ACK timeout of connected QPs (4.096 µs × 2^n, about 67 ms), what the kernel's
/// rdma_cm writes into a RoCE path; `RDMA_OPTION_ID_ACK_TIMEOUT` changes it.
const ACK_TIMEOUT: u8 = 14;
/// The hop limit of RoCEv2 paths (the IPv4 TTL the kernel routes with).
const HOP_LIMIT: u8 = 64;

/// Where an id is (the kernel's `enum rdma_cm_state`, without its transient query states:
/// resolution here is immediate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    AddrBound,
    AddrResolved,
    RouteResolved,
    Listen,
    /// A connection is being made (REQ sent or received, REP sent or received).
    Connect,
    Established,
    Disconnect,
}

/// What the other side of a connection said about its QP.
#[derive(Debug, Clone, Copy, Default)]
struct Remote {
    qpn: u32,
    /// The PSN it receives from first: this side sends from it.
    psn: u32,
    qkey: u32,
    rnr_retry_count: u8,
}

/// One rdma_cm id.
#[derive(Debug)]
struct Id {
    /// The channel (context index) its events go to, and that process.
    channel: usize,
    pid: u32,
    ps: u16,
    qp_type: QpType,
    state: State,
    /// The device it is bound to, once its address is (or resolved).
    device: Option<usize>,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    sgid_index: u8,
    sgid: Gid,
    dgid: Gid,
    dmac: [u8; 6],
    path_mtu: Mtu,
    backlog: u32,
    /// Connection requests delivered to this listener and not yet taken by the program.
    waiting: u32,
    /// The listener a passive id came from (its backlog slot is freed once the request is
    /// read).
    listener: Option<u32>,
    conn: Option<ConnId>,
    /// The passive side of a SIDR request.
    sidr: bool,
    active: bool,
    /// The PSN the local QP receives from first (named in the REQ or REP), and the
    /// READ/atomic depths agreed.
    psn: u32,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    remote: Remote,
    tos: u8,
    reuse: bool,
    afonly: bool,
    ack_timeout: Option<u8>,
    /// Events the program has read.
    events: u32,
}

impl Id {
    fn new(channel: usize, pid: u32, ps: u16, qp_type: QpType) -> Id {
        Id {
            channel,
            pid,
            ps,
            qp_type,
            state: State::Idle,
            device: None,
            src: None,
            dst: None,
            sgid_index: 0,
            sgid: Gid::default(),
            dgid: Gid::default(),
            dmac: [0; 6],
            path_mtu: Mtu::M1024,
            backlog: 0,
            waiting: 0,
            listener: None,
            conn: None,
            sidr: false,
            active: false,
            psn: 0,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            remote: Remote::default(),
            tos: 0,
            reuse: false,
            afonly: false,
            ack_timeout: None,
            events: 0,
        }
    }

    fn port(&self) -> u16 {
        self.src.map_or(0, |a| a.port())
    }

    fn ud(&self) -> bool {
        self.qp_type == QpType::Ud
    }

    /// Whether this id, bound or listening, takes connections to `addr` (IBA-agnostic: the
    /// kernel's `cma_any_addr` / `cma_addr_cmp` rules, with `afonly` for IPv6 wildcards).
    fn covers(&self, addr: IpAddr) -> bool {
        let Some(mine) = self.src else { return false };
        match (mine.ip(), addr) {
            (IpAddr::V6(v6), IpAddr::V4(_)) if v6.is_unspecified() => !self.afonly,
            (IpAddr::V4(a), IpAddr::V4(_)) if a.is_unspecified() => true,
            (IpAddr::V6(a), IpAddr::V6(_)) if a.is_unspecified() => true,
            (a, b) => a == b || a.to_canonical() == b.to_canonical(),
        }
    }
}

/// One event channel.
#[derive(Debug)]
pub(super) struct Channel {
    /// The write end of its notification pipe: a byte per event.
    notify: OwnedFd,
    events: VecDeque<CmEvent>,
}

/// The ids of every channel, and the connections they have on each device.
#[derive(Debug, Default)]
pub(super) struct RdmaCm {
    ids: HashMap<u32, Id>,
    next: u32,
    /// Engine connections (device, communication ID) by id.
    conns: HashMap<(usize, ConnId), u32>,
    /// Services listened on each device, and how many ids listen there.
    services: HashMap<(usize, u64), u32>,
    /// Picks ephemeral ports and first PSNs.
    seed: u64,
}

impl RdmaCm {
    /// No ids yet; `seed` spreads the ports and PSNs it picks.
    pub fn seeded(seed: u64) -> RdmaCm {
        RdmaCm {
            seed,
            ..RdmaCm::default()
        }
    }

    fn random(&mut self) -> u64 {
        // splitmix64: enough to spread ports and PSNs; nothing here needs to be secret.
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Whether binding `addr` in port space `ps` clashes with another id (the kernel's
    /// `cma_check_port`: the same port, overlapping addresses, unless both allow reuse and
    /// neither listens). The ids a listener's requests made hold no port of their own, as
    /// accepted TCP sockets hold none.
    fn in_use(&self, me: u32, ps: u16, addr: SocketAddr, reuse: bool) -> bool {
        self.ids.iter().any(|(&n, o)| {
            n != me
                && o.listener.is_none()
                && o.ps == ps
                && o.port() == addr.port()
                && o.src.is_some()
                && (o.covers(addr.ip()) || addr_covers(addr.ip(), o.src.map(|s| s.ip())))
                && !(reuse && o.reuse && o.state != State::Listen)
        })
    }

    /// A free ephemeral port for `addr` in `ps`.
    fn ephemeral(&mut self, me: u32, ps: u16, addr: SocketAddr, reuse: bool) -> Option<u16> {
        let span = u64::from(EPHEMERAL.end() - EPHEMERAL.start()) + 1;
        let start = self.random() % span;
        (0..span)
            .map(|k| EPHEMERAL.start() + ((start + k) % span) as u16)
            .find(|&p| !self.in_use(me, ps, SocketAddr::new(addr.ip(), p), reuse))
    }
}

/// Whether wildcard-or-address `a` takes `b`.
fn addr_covers(a: IpAddr, b: Option<IpAddr>) -> bool {
    b.is_some_and(|b| a.is_unspecified() || a.to_canonical() == b.to_canonical())
}

fn error(errno: i32, message: impl Into<String>) -> Reply {
    Reply::Error {
        errno,
        message: message.into(),
    }
}

/// A refused call, before it becomes a [`Reply::Error`].
struct Refusal {
    errno: i32,
    message: String,
}

fn refuse(errno: i32, message: impl Into<String>) -> Refusal {
    Refusal {
        errno,
        message: message.into(),
    }
}

fn refused(r: Refusal) -> Reply {
    error(r.errno, r.message)
}

fn cm_error(e: softrnic_emu_core::cm::CmError) -> Reply {
    error(e.errno(), format!("{e:?}"))
}

fn event(id: u32, kind: u32, status: i32) -> CmEvent {
    CmEvent {
        id,
        listen: None,
        event: kind,
        status,
        param: ConnParam::default(),
        ah: None,
    }
}

/// `data` padded with zeros to the `len` bytes a CM message carries, as the kernel hands
/// private data to the program.
fn padded(data: &[u8], len: usize) -> Vec<u8> {
    let mut v = data.to_vec();
    v.resize(len, 0);
    v
}

impl Daemon {
    /// Answers an RDMA CM request of context `i` (an event channel).
    pub(super) fn rdma_cm(&mut self, i: usize, req: Request) -> Reply {
        let ctx = self.contexts[i].as_mut().expect("open");
        if let Request::CmOpen = req {
            if ctx.device.is_some() || ctx.cm.is_some() {
                return error(libc::EINVAL, "this connection is in use already");
            }
            let (read, write) = match sys::notify_pipe() {
                Ok(p) => p,
                Err(e) => return error(libc::EMFILE, format!("pipe: {e}")),
            };
            ctx.cm = Some(Channel {
                notify: write,
                events: VecDeque::new(),
            });
            ctx.send_fds = vec![read];
            return Reply::Ok;
        }
        if ctx.cm.is_none() {
            return error(libc::EINVAL, "not an RDMA CM event channel");
        }
        let pid = ctx.pid;
        let now = self.now();
        match req {
            Request::CmCreateId { ps, qp_type } => {
                if ip_service(ip_service_id(ps, 0)).is_none() {
                    return error(libc::EINVAL, format!("unknown port space {ps:#x}"));
                }
                let cm = &mut self.cm;
                cm.next = cm.next.wrapping_add(1).max(1);
                while cm.ids.contains_key(&cm.next) {
                    cm.next = cm.next.wrapping_add(1).max(1);
                }
                cm.ids.insert(cm.next, Id::new(i, pid, ps, qp_type));
                Reply::Handle(cm.next)
            }
            Request::CmGetEvent => {
                let ch = self.contexts[i].as_mut().and_then(|c| c.cm.as_mut());
                match ch.and_then(|c| c.events.pop_front()) {
                    Some(ev) => {
                        // rdma_destroy_id waits for the program to acknowledge what it read;
                        // a connection request counts for its listener, as in rdma_ucm.
                        if let Some(x) = self.cm.ids.get_mut(&ev.listen.unwrap_or(ev.id)) {
                            x.events += 1;
                        }
                        // A connection request read frees its listener's backlog slot.
                        if let Some(l) = ev.listen
                            && let Some(listener) = self.cm.ids.get_mut(&l)
                        {
                            listener.waiting = listener.waiting.saturating_sub(1);
                        }
                        Reply::CmEvent(ev)
                    }
                    None => error(libc::EAGAIN, "no event waits"),
                }
            }
            Request::CmMigrate(id) => match self.cm.ids.get_mut(&id) {
                Some(x) if x.pid == pid => {
                    // Its queued events move with it, as rdma_ucm's do.
                    let from = std::mem::replace(&mut x.channel, i);
                    let events = x.events;
                    if from != i {
                        let moved: VecDeque<_> = self.contexts[from]
                            .as_mut()
                            .and_then(|c| c.cm.as_mut())
                            .map(|c| {
                                let (mine, rest): (VecDeque<_>, VecDeque<_>) =
                                    c.events.drain(..).partition(|e| e.id == id);
                                c.events = rest;
                                mine
                            })
                            .unwrap_or_default();
                        for ev in moved {
                            self.push_event(i, ev);
                        }
                    }
                    Reply::Handle(events)
                }
                _ => error(libc::EINVAL, "no such id in this process"),
            },
            req => {
                let id = match &req {
                    Request::CmDestroyId(id)
                    | Request::CmResolveRoute(id)
                    | Request::CmQuery(id)
                    | Request::CmDisconnect(id)
                    | Request::CmNotify(id)
                    | Request::CmBind { id, .. }
                    | Request::CmResolveAddr { id, .. }
                    | Request::CmListen { id, .. }
                    | Request::CmConnect { id, .. }
                    | Request::CmAccept { id, .. }
                    | Request::CmReject { id, .. }
                    | Request::CmInitQpAttr { id, .. }
                    | Request::CmSetOption { id, .. } => *id,
                    _ => return error(libc::EINVAL, "not an RDMA CM request"),
                };
                if self.cm.ids.get(&id).is_none_or(|x| x.channel != i) {
                    return error(libc::EINVAL, "no such id on this channel");
                }
                self.id_request(now, id, req)
            }
        }
    }

    /// A request about id `id` (which the asking channel owns).
    fn id_request(&mut self, now: Instant, id: u32, req: Request) -> Reply {
        match req {
            Request::CmDestroyId(_) => {
                let events = self.destroy_id(now, id);
                Reply::Handle(events)
            }
            Request::CmBind { addr, .. } => match self.cm_bind(id, addr) {
                Ok(()) => Reply::Ok,
                Err(r) => refused(r),
            },
            Request::CmResolveAddr { src, dst, .. } => self.resolve_addr(id, src, dst),
            Request::CmResolveRoute(_) => {
                let x = &self.cm.ids[&id];
                if x.state != State::AddrResolved {
                    return error(libc::EINVAL, "resolve the address first");
                }
                self.cm.ids.get_mut(&id).expect("checked").state = State::RouteResolved;
                self.queue_event(id, event(id, event::ROUTE_RESOLVED, 0));
                Reply::Ok
            }
            Request::CmQuery(_) => Reply::CmRoute(self.route(id)),
            Request::CmListen { backlog, .. } => self.cm_listen(id, backlog),
            Request::CmConnect { param, .. } => self.cm_connect(now, id, param),
            Request::CmAccept { param, .. } => self.cm_accept(now, id, param),
            Request::CmReject { private_data, .. } => self.cm_reject(id, &private_data),
            Request::CmDisconnect(_) => {
                let x = &self.cm.ids[&id];
                let (Some(d), Some(conn)) = (x.device, x.conn) else {
                    return error(libc::EINVAL, "not connected");
                };
                if x.ud() {
                    return error(libc::EINVAL, "UD ids have no connection");
                }
                let r = self.devices[d]
                    .as_mut()
                    .map(|dev| dev.engine.cm().disconnect(now, conn));
                match r {
                    Some(Ok(())) => {
                        self.cm.ids.get_mut(&id).expect("checked").state = State::Disconnect;
                        Reply::Ok
                    }
                    Some(Err(e)) => cm_error(e),
                    None => error(libc::ENODEV, "the device is gone"),
                }
            }
            Request::CmNotify(_) => {
                let x = &self.cm.ids[&id];
                let (Some(d), Some(conn)) = (x.device, x.conn) else {
                    return error(libc::EINVAL, "not connected");
                };
                match self.devices[d]
                    .as_mut()
                    .map(|dev| dev.engine.cm().notify_established(conn))
                {
                    Some(Ok(())) => Reply::Ok,
                    Some(Err(e)) => cm_error(e),
                    None => error(libc::ENODEV, "the device is gone"),
                }
            }
            Request::CmInitQpAttr { state, .. } => match self.init_qp_attr(id, state) {
                Ok((attr, mask)) => Reply::QpAttr(attr, mask),
                Err(r) => refused(r),
            },
            Request::CmSetOption { option, .. } => {
                let x = self.cm.ids.get_mut(&id).expect("checked");
                match option {
                    CmOption::Tos(t) => x.tos = t,
                    CmOption::ReuseAddr(r) => {
                        // rdma_cm allows it only before the id has an address.
                        if x.state != State::Idle {
                            return error(libc::EINVAL, "the id is bound already");
                        }
                        x.reuse = r;
                    }
                    CmOption::AfOnly(a) => {
                        if x.state != State::Idle {
                            return error(libc::EINVAL, "the id is bound already");
                        }
                        x.afonly = a;
                    }
                    CmOption::AckTimeout(t) => {
                        if t > 31 {
                            return error(libc::EINVAL, "an ACK timeout is 5 bits");
                        }
                        x.ack_timeout = Some(t);
                    }
                }
                Reply::Ok
            }
            _ => error(libc::EINVAL, "not an RDMA CM request"),
        }
    }

    /// The device index and GID index of local address `ip`, if a device has it.
    fn local_gid(&self, ip: IpAddr) -> Option<(usize, u8)> {
        let gid = Gid::from_ip(ip);
        self.devices.iter().enumerate().find_map(|(d, dev)| {
            let i = dev.as_ref()?.info.gids.iter().position(|g| *g == gid)?;
            Some((d, i as u8))
        })
    }

    /// `rdma_bind_addr`.
    fn cm_bind(&mut self, id: u32, addr: SocketAddr) -> Result<(), Refusal> {
        let x = &self.cm.ids[&id];
        if x.state != State::Idle {
            return Err(refuse(libc::EINVAL, "the id is bound already"));
        }
        let (ps, reuse) = (x.ps, x.reuse);
        let device = if addr.ip().is_unspecified() {
            None
        } else {
            let (d, index) = self.local_gid(addr.ip()).ok_or_else(|| {
                refuse(
                    libc::EADDRNOTAVAIL,
                    format!("{} is not an address of a softrnic device", addr.ip()),
                )
            })?;
            Some((d, index))
        };
        let port = match addr.port() {
            0 => self
                .cm
                .ephemeral(id, ps, addr, reuse)
                .ok_or_else(|| refuse(libc::EADDRNOTAVAIL, "no ephemeral port is free"))?,
            p if self.cm.in_use(id, ps, addr, reuse) => {
                return Err(refuse(libc::EADDRINUSE, format!("port {p} is in use")));
            }
            p => p,
        };
        let gids = device.and_then(|(d, _)| self.devices[d].as_ref().map(|v| v.info.gids.clone()));
        let x = self.cm.ids.get_mut(&id).expect("checked");
        x.src = Some(SocketAddr::new(addr.ip(), port));
        x.state = State::AddrBound;
        if let (Some((d, index)), Some(gids)) = (device, gids) {
            x.device = Some(d);
            x.sgid_index = index;
            x.sgid = gids[usize::from(index)];
        }
        Ok(())
    }

    /// `rdma_resolve_addr`: binds the id if it is not yet (to `src`, or the wildcard), finds
    /// the device and source address that reach `dst` (the daemon's own devices first, then
    /// the route in each device's namespace) and the next hop's MAC; ADDR_RESOLVED or
    /// ADDR_ERROR follows.
    fn resolve_addr(&mut self, id: u32, src: Option<SocketAddr>, dst: SocketAddr) -> Reply {
        let x = &self.cm.ids[&id];
        if x.state == State::Idle {
            let any = match dst {
                SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            };
            if let Err(r) = self.cm_bind(id, src.unwrap_or(SocketAddr::new(any, 0))) {
                return refused(r);
            }
        } else if x.state != State::AddrBound {
            return error(libc::EINVAL, "the id's address is resolved already");
        }
        let x = &self.cm.ids[&id];
        let bound = x.src.expect("bound");
        // (device, source address, source GID index, destination GID)
        let found = if dst.ip().is_loopback()
            && (bound.ip().is_unspecified() || bound.ip().is_loopback())
        {
            // The kernel's `cma_bind_loopback`: the first device, to itself.
            self.loopback(dst.ip())
        } else if !bound.ip().is_unspecified() {
            self.local_gid(bound.ip())
                .map(|(d, index)| (d, bound.ip(), index, Gid::from_ip(dst.ip())))
        } else if let Some((d, index)) = self.local_gid(dst.ip()) {
            // To an address of this daemon: through the device that has it.
            Some((d, dst.ip(), index, Gid::from_ip(dst.ip())))
        } else {
            self.route_to(dst.ip()).map(|(d, src)| {
                let index = self.local_gid(src).map_or(0, |(_, i)| i);
                (d, src, index, Gid::from_ip(dst.ip()))
            })
        };
        let Some((d, src_ip, index, dgid)) = found else {
            self.queue_event(id, event(id, event::ADDR_ERROR, -libc::ENETUNREACH));
            return Reply::Ok;
        };
        let mac = match self.resolve(d, dgid) {
            Ok(mac) => mac,
            Err(e) => {
                tracing::debug!(%e, "rdma_resolve_addr: no neighbour");
                self.queue_event(id, event(id, event::ADDR_ERROR, -libc::EHOSTUNREACH));
                return Reply::Ok;
            }
        };
        let (gids, mtu) = {
            let dev = self.devices[d].as_ref().expect("found");
            (dev.info.gids.clone(), dev.engine.query_port().active_mtu)
        };
        let x = self.cm.ids.get_mut(&id).expect("checked");
        x.device = Some(d);
        x.sgid_index = index;
        x.sgid = gids.get(usize::from(index)).copied().unwrap_or_default();
        x.dgid = dgid;
        x.dmac = mac;
        x.path_mtu = mtu;
        x.src = Some(SocketAddr::new(src_ip, bound.port()));
        x.dst = Some(dst);
        x.state = State::AddrResolved;
        self.queue_event(id, event(id, event::ADDR_RESOLVED, 0));
        Reply::Ok
    }

    /// A loopback destination's device, addresses and GIDs: the first device with a GID of
    /// `dst`'s family, talking to itself.
    fn loopback(&self, dst: IpAddr) -> Option<(usize, IpAddr, u8, Gid)> {
        self.devices.iter().enumerate().find_map(|(d, dev)| {
            let gids = &dev.as_ref()?.info.gids;
            let index = gids
                .iter()
                .position(|g| g.to_ip().is_ipv4() == dst.is_ipv4())?;
            Some((d, dst, index as u8, gids[index]))
        })
    }

    /// The device and source address the kernel's routing picks for `dst`, looked up in each
    /// wire device's namespace.
    fn route_to(&self, dst: IpAddr) -> Option<(usize, IpAddr)> {
        self.devices.iter().enumerate().find_map(|(d, dev)| {
            let dev = dev.as_ref()?;
            if matches!(dev.wire, super::Wire::Local) {
                return None;
            }
            let src = super::in_netns(dev.info.netns.as_deref(), move || {
                let any: SocketAddr = match dst {
                    IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
                    IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
                };
                // A UDP connect sends nothing: it only asks the routing table.
                let s = std::net::UdpSocket::bind(any)?;
                s.connect((dst, 4791))?;
                Ok(s.local_addr()?.ip())
            })
            .ok()?;
            dev.info
                .gids
                .contains(&Gid::from_ip(src))
                .then_some((d, src))
        })
    }

    fn route(&self, id: u32) -> CmRoute {
        let x = &self.cm.ids[&id];
        let device = x
            .device
            .and_then(|d| self.devices[d].as_ref())
            .map(|d| d.info.name.clone());
        CmRoute {
            src: x.src,
            dst: x.dst,
            device,
            sgid: x.sgid,
            sgid_index: x.sgid_index,
            dgid: x.dgid,
            resolved: matches!(
                x.state,
                State::RouteResolved | State::Connect | State::Established | State::Disconnect
            ),
            path_mtu: x.path_mtu as u8,
            traffic_class: x.tos,
            hop_limit: HOP_LIMIT,
        }
    }

    /// `rdma_listen`: binds the wildcard if the id is not bound, and takes the service on
    /// its device (or every device).
    fn cm_listen(&mut self, id: u32, backlog: u32) -> Reply {
        let backlog = if backlog == 0 || backlog > MAX_BACKLOG {
            MAX_BACKLOG
        } else {
            backlog
        };
        let x = &self.cm.ids[&id];
        match x.state {
            State::Listen => {
                self.cm.ids.get_mut(&id).expect("checked").backlog = backlog;
                return Reply::Ok;
            }
            State::Idle => {
                let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
                if let Err(r) = self.cm_bind(id, any) {
                    return refused(r);
                }
            }
            State::AddrBound => {}
            _ => return error(libc::EINVAL, "the id is in use"),
        }
        let x = &self.cm.ids[&id];
        let (ps, src, reuse) = (x.ps, x.src.expect("bound"), x.reuse);
        // A listener does not share its port, reuse or not.
        let clash = self.cm.ids.iter().any(|(&n, o)| {
            n != id
                && o.ps == ps
                && o.state == State::Listen
                && o.port() == src.port()
                && (o.covers(src.ip()) || addr_covers(src.ip(), o.src.map(|s| s.ip())))
        });
        if clash || (reuse && self.cm.in_use(id, ps, src, false)) {
            return error(libc::EADDRINUSE, format!("port {} is in use", src.port()));
        }
        tracing::debug!(id, ps, %src, backlog, "rdma_cm: listening");
        let x = self.cm.ids.get_mut(&id).expect("checked");
        x.state = State::Listen;
        x.backlog = backlog;
        let service = ip_service_id(ps, src.port());
        let devices: Vec<usize> = match x.device {
            Some(d) => vec![d],
            None => (0..self.devices.len()).collect(),
        };
        for d in devices {
            self.take_service(d, service);
        }
        Reply::Ok
    }

    /// Every listening id.
    pub(super) fn cm_listeners(&self) -> Vec<CmListener> {
        let mut v: Vec<CmListener> = self
            .cm
            .ids
            .values()
            .filter(|x| x.state == State::Listen)
            .filter_map(|x| {
                Some(CmListener {
                    ps: x.ps,
                    addr: x.src?,
                    pid: x.pid,
                })
            })
            .collect();
        v.sort_by_key(|l| (l.addr.port(), l.ps));
        v
    }

    /// Listens for `service` on device `d` (once, however many ids listen there).
    fn take_service(&mut self, d: usize, service: u64) {
        let Some(dev) = self.devices[d].as_mut() else {
            return;
        };
        let n = self.cm.services.entry((d, service)).or_insert(0);
        if *n == 0 {
            let _ = dev.engine.cm().listen(service);
        }
        *n += 1;
    }

    /// A device added after wildcard listeners started: it listens for their services too.
    pub(super) fn listen_on_new_device(&mut self, d: usize) {
        let services: Vec<u64> = self
            .cm
            .ids
            .values()
            .filter(|x| x.state == State::Listen && x.device.is_none())
            .map(|x| ip_service_id(x.ps, x.port()))
            .collect();
        for s in services {
            self.take_service(d, s);
        }
    }

    fn drop_service(&mut self, d: usize, service: u64) {
        if let Some(n) = self.cm.services.get_mut(&(d, service)) {
            *n -= 1;
            if *n == 0 {
                self.cm.services.remove(&(d, service));
                if let Some(dev) = self.devices[d].as_mut() {
                    dev.engine.cm().unlisten(service);
                }
            }
        }
    }

    /// The CM path of a connection from `x`.
    fn path(x: &Id) -> CmPath {
        CmPath {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: x.sgid.0,
            remote_gid: x.dgid.0,
            traffic_class: x.tos,
            hop_limit: HOP_LIMIT,
            local_ack_timeout: x.ack_timeout.unwrap_or(ACK_TIMEOUT),
            ..CmPath::default()
        }
    }

    /// The peer as the device's CM addresses it.
    fn peer(x: &Id) -> Peer {
        Peer {
            gid: x.dgid,
            local: x.sgid,
            mac: x.dmac,
        }
    }

    /// rdma_cm's header, then the program's private data.
    fn with_header(x: &Id, user: &[u8], room: usize) -> Result<Vec<u8>, Refusal> {
        if user.len() > room {
            return Err(refuse(
                libc::EINVAL,
                format!("{} bytes of private data; at most {room} fit", user.len()),
            ));
        }
        let (src, dst) = (x.src.expect("resolved"), x.dst.expect("resolved"));
        let header = CmaHeader {
            src_port: src.port(),
            src: src.ip(),
            dst: dst.ip(),
        };
        let mut data = vec![0; CmaHeader::LEN];
        header
            .emit(&mut data)
            .map_err(|_| refuse(libc::EAFNOSUPPORT, "addresses of two families"))?;
        data.extend_from_slice(user);
        Ok(data)
    }

    /// `rdma_connect`: a REQ for a connected id, a SIDR_REQ for a UD one.
    fn cm_connect(&mut self, now: Instant, id: u32, param: ConnParam) -> Reply {
        let psn = (self.cm.random() & 0xff_ffff) as u32;
        let x = &self.cm.ids[&id];
        if x.state != State::RouteResolved {
            return error(libc::EINVAL, "resolve the route first");
        }
        let d = x.device.expect("resolved");
        let service = ip_service_id(x.ps, x.dst.expect("resolved").port());
        let room = if x.ud() {
            SIDR_REQ_USER_DATA
        } else {
            REQ_USER_DATA
        };
        let data = match Self::with_header(x, &param.private_data, room) {
            Ok(d) => d,
            Err(r) => return refused(r),
        };
        let peer = Self::peer(x);
        let connect = ConnectParams {
            transport: u8::from(x.qp_type == QpType::Uc),
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            retry_count: param.retry_count.min(7),
            rnr_retry_count: param.rnr_retry_count.min(7),
            path_mtu: x.path_mtu as u8,
            srq: param.srq,
            path: Self::path(x),
            private_data: data,
            ..ConnectParams::rc(peer, service, param.qp_num, psn)
        };
        let ud = x.ud();
        let Some(dev) = self.devices[d].as_mut() else {
            return error(libc::ENODEV, "the device is gone");
        };
        let conn = if ud {
            dev.engine
                .cm()
                .sidr_request(now, peer, service, &connect.private_data)
        } else {
            dev.engine.cm().connect(now, connect)
        };
        let conn = match conn {
            Ok(c) => c,
            Err(e) => return cm_error(e),
        };
        tracing::debug!(id, conn, service, ud, "rdma_cm: connecting");
        self.cm.conns.insert((d, conn), id);
        let x = self.cm.ids.get_mut(&id).expect("checked");
        x.conn = Some(conn);
        x.state = State::Connect;
        x.active = true;
        x.psn = psn;
        x.responder_resources = param.responder_resources;
        x.initiator_depth = param.initiator_depth;
        x.retry_count = param.retry_count.min(7);
        Reply::Ok
    }

    /// `rdma_accept` on a passive id (a REP, or a SIDR_REP with the QP), or the active side's
    /// RTU once its QP is ready.
    fn cm_accept(&mut self, now: Instant, id: u32, param: ConnParam) -> Reply {
        let x = &self.cm.ids[&id];
        // The PSN was chosen with the request: the program readied its QP with it.
        let psn = x.psn;
        let (Some(d), Some(conn), State::Connect) = (x.device, x.conn, x.state) else {
            return error(libc::EINVAL, "no connection request to accept");
        };
        let (active, sidr, ps) = (x.active, x.sidr, x.ps);
        let Some(dev) = self.devices[d].as_mut() else {
            return error(libc::ENODEV, "the device is gone");
        };
        let cm = dev.engine.cm();
        let done = if active {
            cm.ready_to_use(conn, &[])
        } else if sidr {
            if param.private_data.len() > SIDR_REP_DATA {
                return error(libc::EINVAL, "too much private data for a SIDR_REP");
            }
            let qkey = if ps == port_space::IPOIB {
                param.qkey
            } else {
                UDP_QKEY
            };
            cm.sidr_reply(conn, 0, param.qp_num, qkey, &param.private_data)
        } else {
            if param.private_data.len() > REP_DATA {
                return error(libc::EINVAL, "too much private data for a REP");
            }
            cm.accept(
                now,
                conn,
                AcceptParams {
                    qpn: param.qp_num,
                    starting_psn: psn,
                    responder_resources: param.responder_resources,
                    initiator_depth: param.initiator_depth,
                    rnr_retry_count: param.rnr_retry_count.min(7),
                    srq: param.srq,
                    private_data: param.private_data.clone(),
                },
            )
        };
        if let Err(e) = done {
            return cm_error(e);
        }
        let x = self.cm.ids.get_mut(&id).expect("checked");
        if active {
            x.state = State::Established;
        } else if sidr {
            // A SIDR request is answered and forgotten.
            self.cm.conns.remove(&(d, conn));
            x.conn = None;
            x.state = State::Established;
        } else {
            x.responder_resources = param.responder_resources;
            x.initiator_depth = param.initiator_depth;
        }
        Reply::Ok
    }

    /// `rdma_reject`: a REJ (consumer-defined) or a SIDR_REP that refuses.
    fn cm_reject(&mut self, id: u32, private_data: &[u8]) -> Reply {
        let x = &self.cm.ids[&id];
        let (Some(d), Some(conn)) = (x.device, x.conn) else {
            return error(libc::EINVAL, "no connection request to reject");
        };
        let sidr = x.sidr;
        let Some(dev) = self.devices[d].as_mut() else {
            return error(libc::ENODEV, "the device is gone");
        };
        let done = if sidr {
            // IBA 12.11.2: status 1, the service refuses.
            dev.engine.cm().sidr_reply(conn, 1, 0, 0, private_data)
        } else {
            if private_data.len() > REJ_DATA {
                return error(libc::EINVAL, "too much private data for a REJ");
            }
            dev.engine
                .cm()
                .reject(conn, rej_reason::CONSUMER, private_data)
        };
        if let Err(e) = done {
            return cm_error(e);
        }
        self.cm.conns.remove(&(d, conn));
        let x = self.cm.ids.get_mut(&id).expect("checked");
        x.conn = None;
        x.state = State::Disconnect;
        Reply::Ok
    }

    /// `rdma_init_qp_attr` (the kernel's `rdma_init_qp_attr` and `ib_cm_init_qp_attr`).
    fn init_qp_attr(&self, id: u32, state: QpState) -> Result<(QpAttr, AttrMask), Refusal> {
        let x = &self.cm.ids[&id];
        if x.device.is_none() {
            return Err(refuse(libc::EINVAL, "the id has no device yet"));
        }
        let mut a = QpAttr {
            qp_state: state,
            ..QpAttr::default()
        };
        let m = |masks: &[AttrMask]| masks.iter().fold(AttrMask(0), |m, &b| m.or(b));
        let mask = match (state, x.ud()) {
            (QpState::Init, true) => {
                a.qkey = UDP_QKEY;
                m(&[
                    AttrMask::STATE,
                    AttrMask::PKEY_INDEX,
                    AttrMask::PORT,
                    AttrMask::QKEY,
                ])
            }
            (QpState::Init, false) => {
                // Before a connection, no remote access; with one, WRITEs, and READs and
                // atomics if the QP takes any.
                a.qp_access_flags = if x.conn.is_none() {
                    Access::default()
                } else if x.responder_resources > 0 {
                    Access(Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0 | Access::REMOTE_ATOMIC.0)
                } else {
                    Access::REMOTE_WRITE
                };
                m(&[
                    AttrMask::STATE,
                    AttrMask::PKEY_INDEX,
                    AttrMask::PORT,
                    AttrMask::ACCESS_FLAGS,
                ])
            }
            (QpState::Rtr, true) | (QpState::Rts, true) => AttrMask::STATE,
            (QpState::Rtr, false) if x.conn.is_some() => {
                a.ah = Some(AddressHandle {
                    dgid: x.dgid,
                    sgid_index: x.sgid_index,
                    hop_limit: HOP_LIMIT,
                    traffic_class: x.tos,
                    flow_label: 0,
                    dmac: EthernetAddress(x.dmac),
                });
                a.path_mtu = x.path_mtu;
                a.dest_qp_num = x.remote.qpn;
                // The PSN this side named in its REQ or REP (the kernel's rdma_init_qp_attr
                // sets rq_psn to its own seq_num).
                a.rq_psn = x.psn;
                a.max_dest_rd_atomic = x.responder_resources;
                // ib_cm's value: 0 encodes the longest RNR NAK timer (655 ms).
                a.min_rnr_timer = 0;
                let mut mask = m(&[
                    AttrMask::STATE,
                    AttrMask::AV,
                    AttrMask::PATH_MTU,
                    AttrMask::DEST_QPN,
                    AttrMask::RQ_PSN,
                ]);
                if x.qp_type == QpType::Rc {
                    mask = mask
                        .or(AttrMask::MAX_DEST_RD_ATOMIC)
                        .or(AttrMask::MIN_RNR_TIMER);
                }
                mask
            }
            (QpState::Rts, false) if x.conn.is_some() => {
                // The PSN the other side named: ib_cm's sq_psn.
                a.sq_psn = x.remote.psn;
                a.timeout = x.ack_timeout.unwrap_or(ACK_TIMEOUT);
                a.retry_cnt = x.retry_count;
                a.rnr_retry = x.remote.rnr_retry_count;
                a.max_rd_atomic = x.initiator_depth;
                let mut mask = m(&[AttrMask::STATE, AttrMask::SQ_PSN]);
                if x.qp_type == QpType::Rc {
                    mask = mask.or(m(&[
                        AttrMask::TIMEOUT,
                        AttrMask::RETRY_CNT,
                        AttrMask::RNR_RETRY,
                        AttrMask::MAX_QP_RD_ATOMIC,
                    ]));
                }
                mask
            }
            _ => {
                return Err(refuse(
                    libc::EINVAL,
                    format!("no attributes for {state:?} yet"),
                ));
            }
        };
        Ok((a, mask))
    }

    /// Lets an id go; the number of events it had. An established connection is
    /// disconnected (the CM sends the DREQ), a listener stops listening.
    fn destroy_id(&mut self, now: Instant, id: u32) -> u32 {
        let Some(x) = self.cm.ids.remove(&id) else {
            return 0;
        };
        if let (Some(d), Some(conn)) = (x.device, x.conn) {
            self.cm.conns.remove(&(d, conn));
            if let Some(dev) = self.devices[d].as_mut() {
                let cm = dev.engine.cm();
                if x.sidr && x.state == State::Connect {
                    let _ = cm.sidr_reply(conn, 1, 0, 0, &[]);
                } else if x.state == State::Connect && !x.active {
                    // An unanswered request: refused, as the kernel does when the id goes.
                    let _ = cm.reject(conn, rej_reason::CONSUMER, &[]);
                }
                cm.destroy(now, conn);
            }
        }
        if x.state == State::Listen {
            let service = ip_service_id(x.ps, x.port());
            let devices: Vec<usize> = match x.device {
                Some(d) => vec![d],
                None => (0..self.devices.len()).collect(),
            };
            for d in devices {
                self.drop_service(d, service);
            }
        }
        // Its events not yet read go with it.
        if let Some(ch) = self.contexts[x.channel]
            .as_mut()
            .and_then(|c| c.cm.as_mut())
        {
            ch.events.retain(|e| e.id != id);
        }
        x.events
    }

    /// A channel closed (its program exited or crashed): its ids go, and their connections
    /// are torn down as the kernel does when an rdma_cm fd closes.
    pub(super) fn close_channel(&mut self, i: usize) {
        let now = self.now();
        let mine: Vec<u32> = self
            .cm
            .ids
            .iter()
            .filter(|(_, x)| x.channel == i)
            .map(|(&n, _)| n)
            .collect();
        for id in mine {
            self.destroy_id(now, id);
        }
    }

    /// Queues `ev` for id `id`'s channel.
    fn queue_event(&mut self, id: u32, ev: CmEvent) {
        let Some(x) = self.cm.ids.get(&id) else {
            return;
        };
        let ch = x.channel;
        self.push_event(ch, ev);
    }

    fn push_event(&mut self, channel: usize, ev: CmEvent) {
        if let Some(ch) = self.contexts[channel].as_mut().and_then(|c| c.cm.as_mut()) {
            ch.events.push_back(ev);
            sys::notify(ch.notify.as_raw_fd());
        }
    }

    /// Turns device `d`'s CM events into the programs' rdma_cm events.
    pub(super) fn cm_events(&mut self, d: usize) {
        loop {
            let Some(ev) = self.devices[d]
                .as_mut()
                .and_then(|x| x.engine.cm().poll_event())
            else {
                return;
            };
            self.cm_event(d, ev);
        }
    }

    fn cm_event(&mut self, d: usize, ev: Cm) {
        let conn = match &ev {
            Cm::ReqReceived { req, id } => return self.connect_request(d, *id, req.clone()),
            Cm::SidrReqReceived {
                id,
                peer,
                service_id,
                private_data,
            } => return self.sidr_request(d, *id, *peer, *service_id, private_data),
            Cm::RepReceived { id, .. }
            | Cm::Established { id }
            | Cm::Rejected { id, .. }
            | Cm::Unreachable { id }
            | Cm::Disconnected { id }
            | Cm::TimewaitExit { id }
            | Cm::SidrRepReceived { id, .. } => *id,
        };
        let Some(&id) = self.cm.conns.get(&(d, conn)) else {
            return;
        };
        let x = self.cm.ids.get_mut(&id).expect("mapped");
        let mut out = event(id, 0, 0);
        match ev {
            Cm::RepReceived {
                qpn,
                starting_psn,
                responder_resources,
                initiator_depth,
                rnr_retry_count,
                private_data,
                ..
            } => {
                // ib_cm's view: what the other side accepts at once we may send at once.
                x.remote.qpn = qpn;
                x.remote.psn = starting_psn;
                x.remote.rnr_retry_count = rnr_retry_count;
                x.initiator_depth = x.initiator_depth.min(responder_resources);
                x.responder_resources = x.responder_resources.min(initiator_depth);
                out.event = event::CONNECT_RESPONSE;
                out.param = ConnParam {
                    private_data: padded(&private_data, REP_DATA),
                    responder_resources: x.responder_resources,
                    initiator_depth: x.initiator_depth,
                    rnr_retry_count,
                    qp_num: qpn,
                    ..ConnParam::default()
                };
            }
            Cm::Established { .. } => {
                x.state = State::Established;
                // The active side's library turned CONNECT_RESPONSE into ESTABLISHED itself.
                if x.active {
                    return;
                }
                out.event = event::ESTABLISHED;
                out.param.qp_num = x.remote.qpn;
            }
            Cm::Rejected {
                reason,
                private_data,
                ..
            } => {
                self.cm.conns.remove(&(d, conn));
                x.conn = None;
                x.state = State::Disconnect;
                // rdma_cm reports the IB reject reason as the status.
                out.event = event::REJECTED;
                out.status = i32::from(reason);
                out.param.private_data = padded(&private_data, REJ_DATA);
            }
            Cm::Unreachable { .. } => {
                self.cm.conns.remove(&(d, conn));
                x.conn = None;
                x.state = State::Disconnect;
                out.event = event::UNREACHABLE;
                out.status = -libc::ETIMEDOUT;
            }
            Cm::Disconnected { .. } => {
                x.state = State::Disconnect;
                out.event = event::DISCONNECTED;
            }
            Cm::TimewaitExit { .. } => {
                self.cm.conns.remove(&(d, conn));
                x.conn = None;
                out.event = event::TIMEWAIT_EXIT;
            }
            Cm::SidrRepReceived {
                status,
                qpn,
                qkey,
                private_data,
                ..
            } => {
                self.cm.conns.remove(&(d, conn));
                x.conn = None;
                if status == 0 {
                    x.state = State::Established;
                    x.remote.qpn = qpn;
                    x.remote.qkey = qkey;
                    out.event = event::ESTABLISHED;
                    out.param = ConnParam {
                        private_data: padded(&private_data, SIDR_REP_DATA),
                        qp_num: qpn,
                        qkey,
                        ..ConnParam::default()
                    };
                    out.ah = Some(AddressHandle {
                        dgid: x.dgid,
                        sgid_index: x.sgid_index,
                        hop_limit: HOP_LIMIT,
                        traffic_class: x.tos,
                        flow_label: 0,
                        dmac: EthernetAddress(x.dmac),
                    });
                } else {
                    x.state = State::Disconnect;
                    out.event = event::UNREACHABLE;
                    out.status = i32::from(status);
                }
            }
            Cm::ReqReceived { .. } | Cm::SidrReqReceived { .. } => unreachable!("handled above"),
        }
        self.queue_event(id, out);
    }

    /// The listener a request for `service_id` to `dst` on device `d` is for, if its backlog
    /// has room.
    fn listener(&self, d: usize, service_id: u64, dst: IpAddr) -> Option<u32> {
        let (ps, port) = ip_service(service_id)?;
        let mut candidates: Vec<(&u32, &Id)> = self
            .cm
            .ids
            .iter()
            .filter(|(_, x)| {
                x.state == State::Listen
                    && x.ps == ps
                    && x.port() == port
                    && x.device.is_none_or(|xd| xd == d)
                    && x.covers(dst)
            })
            .collect();
        // A listener bound to the address wins over a wildcard one.
        candidates.sort_by_key(|(_, x)| x.src.is_some_and(|s| s.ip().is_unspecified()));
        candidates.first().map(|(n, _)| **n)
    }

    /// A new passive id for a request to listener `l`, as the kernel's `cma_ib_new_conn_id`
    /// makes it: the listener's channel, port space and QP type, the addresses from rdma_cm's
    /// header.
    fn passive_id(&mut self, l: u32, d: usize, peer: Peer, header: &CmaHeader) -> u32 {
        let listener = &self.cm.ids[&l];
        let mut x = Id::new(
            listener.channel,
            listener.pid,
            listener.ps,
            listener.qp_type,
        );
        x.tos = listener.tos;
        x.ack_timeout = listener.ack_timeout;
        let port = listener.port();
        x.listener = Some(l);
        x.device = Some(d);
        x.src = Some(SocketAddr::new(header.dst, port));
        x.dst = Some(SocketAddr::new(header.src, header.src_port));
        x.sgid = peer.local;
        x.dgid = peer.gid;
        x.dmac = peer.mac;
        if let Some(dev) = self.devices[d].as_ref() {
            x.sgid_index = dev
                .info
                .gids
                .iter()
                .position(|g| *g == peer.local)
                .unwrap_or(0) as u8;
            x.path_mtu = dev.engine.query_port().active_mtu;
        }
        x.state = State::Connect;
        x.psn = (self.cm.random() & 0xff_ffff) as u32;
        let cm = &mut self.cm;
        cm.next = cm.next.wrapping_add(1).max(1);
        while cm.ids.contains_key(&cm.next) {
            cm.next = cm.next.wrapping_add(1).max(1);
        }
        let id = cm.next;
        cm.ids.insert(id, x);
        if let Some(listener) = cm.ids.get_mut(&l) {
            listener.waiting += 1;
        }
        id
    }

    /// A REQ for a service listened on: a CONNECT_REQUEST on the listener's channel, or a REJ
    /// when no listener takes its address or the backlog is full.
    fn connect_request(&mut self, d: usize, conn: ConnId, req: ConnectParams) {
        let header = CmaHeader::parse(&req.private_data);
        let found = header
            .as_ref()
            .ok()
            .and_then(|h| self.listener(d, req.service_id, h.dst));
        let (Ok(header), Some(l)) = (header, found) else {
            tracing::debug!(
                service = req.service_id,
                ?header,
                "a REQ no listener takes: refused"
            );
            if let Some(dev) = self.devices[d].as_mut() {
                let _ = dev
                    .engine
                    .cm()
                    .reject(conn, rej_reason::INVALID_SERVICE_ID, &[]);
            }
            return;
        };
        let listener = &self.cm.ids[&l];
        if listener.waiting >= listener.backlog || listener.ud() {
            tracing::debug!(
                waiting = listener.waiting,
                "a REQ the listener has no room for: refused"
            );
            if let Some(dev) = self.devices[d].as_mut() {
                let _ = dev.engine.cm().reject(conn, rej_reason::CONSUMER, &[]);
            }
            return;
        }
        let id = self.passive_id(l, d, req.peer, &header);
        self.cm.conns.insert((d, conn), id);
        let port_mtu = self.cm.ids[&id].path_mtu;
        let x = self.cm.ids.get_mut(&id).expect("made");
        x.conn = Some(conn);
        x.path_mtu = mtu_min(port_mtu, req.path_mtu);
        x.retry_count = req.retry_count;
        x.ack_timeout = x.ack_timeout.or(Some(req.path.local_ack_timeout));
        x.remote = Remote {
            qpn: req.qpn,
            psn: req.starting_psn,
            qkey: 0,
            rnr_retry_count: req.rnr_retry_count,
        };
        x.responder_resources = req.initiator_depth;
        x.initiator_depth = req.responder_resources;
        // ib_cm's view from this side: what the requester sends at once we accept at once.
        let mut out = event(id, event::CONNECT_REQUEST, 0);
        out.listen = Some(l);
        out.param = ConnParam {
            private_data: padded(&req.private_data[CmaHeader::LEN..], REQ_USER_DATA),
            responder_resources: req.initiator_depth,
            initiator_depth: req.responder_resources,
            flow_control: 0,
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            srq: req.srq,
            qp_num: req.qpn,
            qkey: 0,
        };
        self.queue_event(id, out);
    }

    /// A SIDR_REQ: a CONNECT_REQUEST (UD) on the listener's channel, or a refusal.
    fn sidr_request(
        &mut self,
        d: usize,
        conn: ConnId,
        peer: Peer,
        service_id: u64,
        private_data: &[u8],
    ) {
        let header = CmaHeader::parse(private_data);
        let found = header
            .as_ref()
            .ok()
            .and_then(|h| self.listener(d, service_id, h.dst))
            .filter(|l| self.cm.ids[l].ud() && self.cm.ids[l].waiting < self.cm.ids[l].backlog);
        let (Ok(header), Some(l)) = (header, found) else {
            if let Some(dev) = self.devices[d].as_mut() {
                // IBA 12.11.2: status 1, no such service.
                let _ = dev.engine.cm().sidr_reply(conn, 1, 0, 0, &[]);
            }
            return;
        };
        let id = self.passive_id(l, d, peer, &header);
        self.cm.conns.insert((d, conn), id);
        let x = self.cm.ids.get_mut(&id).expect("made");
        x.conn = Some(conn);
        x.sidr = true;
        let mut out = event(id, event::CONNECT_REQUEST, 0);
        out.listen = Some(l);
        out.param.private_data = padded(&private_data[CmaHeader::LEN..], SIDR_REQ_USER_DATA);
        out.ah = Some(AddressHandle {
            dgid: peer.gid,
            sgid_index: x.sgid_index,
            hop_limit: HOP_LIMIT,
            traffic_class: x.tos,
            flow_label: 0,
            dmac: EthernetAddress(peer.mac),
        });
        self.queue_event(id, out);
    }
}

/// The smaller of a port's MTU and the IBA code a REQ carries.
fn mtu_min(port: Mtu, code: u8) -> Mtu {
    Mtu::from_ibv(code).map_or(port, |asked| asked.min(port))
}
