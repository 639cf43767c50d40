//! rdma_cm in the daemon, as the kernel's rdma_cm and rdma_ucm are: ids on event channels (a
//! channel is one client connection), IP addresses resolved to a device and its GIDs, ports
//! bound and listened on per port space, and connections made through each device's
//! Communication Manager on QP1 ([`softrnic_emu_core::cm`]).
//!
//! It never touches a QP: as with the kernel, the library moves the program's QP through its
//! states with the attributes `rdma_init_qp_attr` gives. This module holds the ids and serves
//! the requests; [`address`] binds, resolves and listens, [`connection`] makes and ends
//! connections, and [`events`] turns each device CM's events into the programs' events.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};

use softrnic_emu_core::cm::ConnId;
use softrnic_emu_core::{AddressHandle, Gid, Instant, Mtu, QpType, Rng};
use softrnic_wire::EthernetAddress;
use softrnic_wire::cm::{CmaHeader, ip_service, ip_service_id, rej_reason};

use crate::{Daemon, device_at};
use softrnic_client::proto::{CmEvent, CmOption, ConnParam, Reply, Request, cm_event as event};
use softrnic_sys as sys;

mod address;
mod connection;
mod events;
mod multicast;

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
    /// `RDMA_OPTION_ID_AFONLY` as set; unset, the kernel takes IPv4 ids as AF-only and IPv6
    /// ones as `net.ipv6.bindv6only` says (0 by default).
    afonly: Option<bool>,
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
            afonly: None,
            ack_timeout: None,
            events: 0,
        }
    }

    /// Where the other side is, as an address handle (UD events, and an RC QP's RTR).
    fn address(&self) -> AddressHandle {
        AddressHandle {
            dgid: self.dgid,
            sgid_index: self.sgid_index,
            hop_limit: HOP_LIMIT,
            traffic_class: self.tos,
            flow_label: 0,
            dmac: EthernetAddress(self.dmac),
        }
    }

    fn port(&self) -> u16 {
        self.src.map_or(0, |a| a.port())
    }

    fn ud(&self) -> bool {
        self.qp_type == QpType::Ud
    }

    fn afonly(&self) -> bool {
        self.afonly
            .unwrap_or_else(|| self.src.is_some_and(|s| s.is_ipv4()))
    }

    /// Whether this id, bound or listening, takes connections to `addr` (IBA-agnostic: the
    /// kernel's `cma_any_addr` / `cma_addr_cmp` rules, with `afonly` for IPv6 wildcards).
    fn covers(&self, addr: IpAddr) -> bool {
        let Some(mine) = self.src else { return false };
        match (mine.ip(), addr) {
            (IpAddr::V6(v6), IpAddr::V4(_)) if v6.is_unspecified() => !self.afonly(),
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
#[derive(Debug)]
pub(super) struct RdmaCm {
    ids: HashMap<u32, Id>,
    next: u32,
    /// Engine connections (device, communication ID) by id.
    conns: HashMap<(usize, ConnId), u32>,
    /// Services listened on each device, and how many ids listen there.
    services: HashMap<(usize, u64), u32>,
    /// Multicast joins by handle.
    joins: HashMap<u32, multicast::Join>,
    next_mc: u32,
    /// Picks ephemeral ports and first PSNs.
    rng: Rng,
}

impl RdmaCm {
    /// No ids yet; `seed` spreads the ports and PSNs it picks.
    pub fn seeded(seed: u64) -> RdmaCm {
        RdmaCm {
            ids: HashMap::new(),
            next: 0,
            conns: HashMap::new(),
            services: HashMap::new(),
            joins: HashMap::new(),
            next_mc: 0,
            rng: Rng::new(seed),
        }
    }

    fn random(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// The errno binding `addr` in port space `ps` gets from the ids holding its port, as the
    /// kernel's `cma_check_port` gives it: none when both allow reuse or both are AF-only
    /// and of different families, `EADDRNOTAVAIL` when either is a wildcard or loopback
    /// (`cma_any_addr`), `EADDRINUSE`
    /// for equal addresses. The newest holder answers, as the kernel's owner list is newest
    /// first. The ids a listener's requests made hold no port of their own, as accepted
    /// TCP sockets hold none.
    fn port_clash(&self, me: u32, ps: u16, addr: SocketAddr, reuse: bool) -> Option<i32> {
        let afonly = self.ids[&me].afonly.unwrap_or(addr.is_ipv4());
        let mut holders: Vec<(u32, &Id)> = (self.ids.iter())
            .map(|(&n, o)| (n, o))
            .filter(|&(n, o)| n != me && o.listener.is_none() && o.ps == ps)
            .filter(|(_, o)| o.src.is_some_and(|s| s.port() == addr.port()))
            .collect();
        holders.sort_unstable_by_key(|&(n, _)| std::cmp::Reverse(n));
        holders.into_iter().find_map(|(_, o)| {
            let held = o.src.expect("filtered");
            if (reuse && o.reuse) || (afonly && o.afonly() && addr.is_ipv4() != held.is_ipv4()) {
                None
            } else if any_addr(addr.ip()) || any_addr(held.ip()) {
                Some(libc::EADDRNOTAVAIL)
            } else {
                (addr.ip() == held.ip()).then_some(libc::EADDRINUSE)
            }
        })
    }

    /// A free ephemeral port for `addr` in `ps`.
    fn ephemeral(&mut self, me: u32, ps: u16, addr: SocketAddr, reuse: bool) -> Option<u16> {
        let span = u64::from(EPHEMERAL.end() - EPHEMERAL.start()) + 1;
        let start = self.random() % span;
        (0..span)
            .map(|k| EPHEMERAL.start() + ((start + k) % span) as u16)
            .find(|&p| (self.port_clash(me, ps, SocketAddr::new(addr.ip(), p), reuse)).is_none())
    }
}

/// The kernel's `cma_any_addr`: a wildcard, or a loopback address.
fn any_addr(ip: IpAddr) -> bool {
    ip.is_unspecified() || ip.is_loopback()
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
        mc: None,
        arg: 0,
    }
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
                        // A join's events count for it too: rdma_leave_multicast waits.
                        if let Some(join) = ev.mc.and_then(|mc| self.cm.joins.get_mut(&mc)) {
                            join.events += 1;
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
            Request::CmLeave(mc) => self.cm_leave(i, mc),
            req => {
                let id = match &req {
                    Request::CmDestroyId(id)
                    | Request::CmResolveRoute(id)
                    | Request::CmQuery(id)
                    | Request::CmDisconnect(id)
                    | Request::CmNotify(id)
                    | Request::CmWriteEvent { id, .. }
                    | Request::CmBind { id, .. }
                    | Request::CmResolveAddr { id, .. }
                    | Request::CmListen { id, .. }
                    | Request::CmConnect { id, .. }
                    | Request::CmAccept { id, .. }
                    | Request::CmReject { id, .. }
                    | Request::CmInitQpAttr { id, .. }
                    | Request::CmJoin { id, .. }
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
    pub(super) fn id_request(&mut self, now: Instant, id: u32, req: Request) -> Reply {
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
            // As the kernel's `ucma_write_cm_event`: only the events a program may make.
            Request::CmWriteEvent {
                event: kind @ (event::USER | event::ADDRINFO_RESOLVED),
                status,
                arg,
                ..
            } => {
                self.queue_event(
                    id,
                    CmEvent {
                        arg,
                        ..event(id, kind, status)
                    },
                );
                Reply::Ok
            }
            Request::CmWriteEvent { .. } => error(libc::EINVAL, "not an event a program writes"),
            Request::CmJoin { addr, .. } => self.cm_join(id, addr),
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
                let r = device_at(&self.devices, d)
                    .map(|mut dev| dev.engine.cm().disconnect(now, conn));
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
                match device_at(&self.devices, d)
                    .map(|mut dev| dev.engine.cm().notify_established(conn))
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
                        // The kernel's rdma_set_reuseaddr: turned on in any state but
                        // listening, off only before the id has an address.
                        if !(r && x.state != State::Listen || x.state == State::Idle) {
                            return error(libc::EINVAL, "the id listens or is bound already");
                        }
                        x.reuse = r;
                    }
                    CmOption::AfOnly(a) => {
                        // rdma_set_afonly: before the id resolves or listens.
                        if !matches!(x.state, State::Idle | State::AddrBound) {
                            return error(libc::EINVAL, "the id is in use");
                        }
                        x.afonly = Some(a);
                    }
                    CmOption::AckTimeout(t) => {
                        // rdma_set_ack_timeout takes any value for a connected id; the
                        // REQ's and the QP's field is 5 bits, so a larger one is the longest.
                        if x.qp_type != QpType::Rc {
                            return error(libc::EINVAL, "an ACK timeout is for an RC id");
                        }
                        x.ack_timeout = Some(t.min(31));
                    }
                }
                Reply::Ok
            }
            _ => error(libc::EINVAL, "not an RDMA CM request"),
        }
    }

    /// Lets an id go; the number of events it had. An established connection is
    /// disconnected (the CM sends the DREQ), a listener stops listening.
    pub(super) fn destroy_id(&mut self, now: Instant, id: u32) -> u32 {
        let Some(x) = self.cm.ids.remove(&id) else {
            return 0;
        };
        if let (Some(d), Some(conn)) = (x.device, x.conn) {
            self.cm.conns.remove(&(d, conn));
            if let Some(mut dev) = device_at(&self.devices, d) {
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
                None => self.heads(),
            };
            for d in devices {
                self.drop_service(d, service);
            }
        }
        // So do its multicast joins, and its events not yet read.
        self.cm.joins.retain(|_, j| j.id != id);
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

    /// Device `d` is going away (`softrnic down`): each id on it gets DEVICE_REMOVAL, as the
    /// kernel's rdma_cm reports a removed device, and its connection is forgotten; the program
    /// destroys the id.
    pub(crate) fn cm_device_removed(&mut self, d: usize) {
        self.cm.conns.retain(|(dev, _), _| *dev != d);
        self.cm.services.retain(|(dev, _), _| *dev != d);
        let gone: Vec<u32> = self
            .cm
            .ids
            .iter_mut()
            .filter(|(_, x)| x.device == Some(d))
            .map(|(&n, x)| {
                x.conn = None;
                x.state = State::Disconnect;
                n
            })
            .collect();
        for id in gone {
            self.queue_event(id, event(id, event::DEVICE_REMOVAL, 0));
        }
    }

    /// Device `d`'s interface has a new MAC (as when a bond fails over): each id bound to it
    /// gets ADDR_CHANGE, as the kernel's `cma_netdev_change` sends, so the program can
    /// resolve again.
    pub(crate) fn cm_addr_changed(&mut self, d: usize) {
        let bound: Vec<u32> = self
            .cm
            .ids
            .iter()
            .filter(|(_, x)| x.device == Some(d))
            .map(|(&n, _)| n)
            .collect();
        for id in bound {
            self.queue_event(id, event(id, event::ADDR_CHANGE, 0));
        }
    }

    /// Queues `ev` for id `id`'s channel.
    pub(super) fn queue_event(&mut self, id: u32, ev: CmEvent) {
        let Some(x) = self.cm.ids.get(&id) else {
            return;
        };
        let ch = x.channel;
        self.push_event(ch, ev);
    }

    pub(super) fn push_event(&mut self, channel: usize, ev: CmEvent) {
        if let Some(ch) = self.contexts[channel].as_mut().and_then(|c| c.cm.as_mut()) {
            ch.events.push_back(ev);
            sys::notify(ch.notify.as_raw_fd());
        }
    }
}
