//! A device context: one client connection, the objects it owns, and the requests it makes.
//! Every handle a request names must be one this context created (EINVAL otherwise), so no
//! program reaches another's objects; and every remote access goes through the engine's key
//! and PD checks, so none reaches another's memory.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use softrnic_emu_core::{AttrMask, Engine, Event, Space, VerbsError, key_index};

use super::rings::Rings;
use super::{Daemon, ProcessMemory};
use crate::proto::{self, Reply, Request};
use crate::shm::Region;
use crate::sys;

/// Objects a context created.
#[derive(Debug, Default)]
struct Owned {
    pds: BTreeSet<u32>,
    mrs: BTreeSet<u32>,
    mws: BTreeSet<u32>,
    cqs: BTreeSet<u32>,
    srqs: BTreeSet<u32>,
    qps: BTreeSet<u32>,
}

/// One connection.
pub(super) struct Context {
    pub stream: UnixStream,
    pub inbuf: Vec<u8>,
    /// Replies and captured frames not yet taken by the socket.
    pub outbuf: Vec<u8>,
    /// A capture: which device (`Some(None)`: every one), and frames lost since the last sent.
    pub capture: Option<Option<usize>>,
    pub dropped: u64,
    /// Events for this context's objects, until it asks for them.
    pub events: VecDeque<Event>,
    /// The stream is out of step (a length beyond the limit): close after the reply.
    pub broken: bool,
    /// The shared region and its rings (empty until a device is opened).
    pub rings: Rings,
    /// Descriptors to send with the next reply (the Open and CreateCompChannel replies).
    pub send_fds: Vec<OwnedFd>,
    /// Completion channels: each the write end of its notification pipe (a byte per
    /// notification) and the CQs that fired since it was last asked; and which channel each CQ
    /// notifies.
    channels: BTreeMap<u32, (OwnedFd, Vec<u32>)>,
    /// The write end of the async event pipe: a byte per event in `events`.
    async_notify: Option<OwnedFd>,
    cq_channel: BTreeMap<u32, u32>,
    pub pid: u32,
    pub uid: u32,
    pub space: Space,
    /// The device opened, by index.
    pub device: Option<usize>,
    hello: bool,
    owned: Owned,
    /// An RDMA CM event channel's events (a connection is a device context or a channel).
    pub cm: Option<super::rdma_cm::Channel>,
}

fn error(errno: i32, message: impl Into<String>) -> Reply {
    Reply::Error {
        errno,
        message: message.into(),
    }
}

fn verbs(e: VerbsError) -> Reply {
    error(e.errno(), e.to_string())
}

fn handle_or<T>(r: softrnic_emu_core::Result<T>, f: impl FnOnce(T) -> Reply) -> Reply {
    r.map_or_else(verbs, f)
}

const NOT_OURS: &str = "no such object in this context";

impl Context {
    pub fn new(stream: UnixStream, pid: u32, uid: u32, space: Space) -> Context {
        Context {
            stream,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            capture: None,
            dropped: 0,
            events: VecDeque::new(),
            broken: false,
            rings: Rings::default(),
            send_fds: Vec::new(),
            channels: BTreeMap::new(),
            cq_channel: BTreeMap::new(),
            async_notify: None,
            pid,
            uid,
            space,
            device: None,
            hello: false,
            owned: Owned::default(),
            cm: None,
        }
    }

    /// The next whole request in the input buffer, if one has arrived.
    pub fn next_message(&mut self) -> Option<io::Result<Request>> {
        if self.broken {
            return None;
        }
        let len = u32::from_le_bytes(self.inbuf.get(..4)?.try_into().ok()?) as usize;
        if len > proto::MAX_MESSAGE {
            // The stream cannot be followed past this: answer, then close the connection.
            self.inbuf.clear();
            self.broken = true;
            return Some(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message too long",
            )));
        }
        let body = self.inbuf.get(4..4 + len)?;
        let req = proto::decode(body);
        self.inbuf.drain(..4 + len);
        Some(req)
    }

    /// Takes an event about one of its objects: a completion notification goes to the CQ's
    /// channel (a byte in its pipe; a CQ without a channel has nowhere to notify, as in
    /// verbs), the rest to the async events (a byte in the async pipe).
    pub fn notify(&mut self, event: Event) {
        if let Event::Completion { cq } = event {
            if let Some((fd, fired)) = self
                .cq_channel
                .get(&cq)
                .and_then(|c| self.channels.get_mut(c))
            {
                fired.push(cq);
                sys::notify(fd.as_raw_fd());
            }
            return;
        }
        self.events.push_back(event);
        if let Some(fd) = &self.async_notify {
            sys::notify(fd.as_raw_fd());
        }
    }

    /// Whether the event is about one of this context's objects.
    pub fn owns(&self, event: &Event) -> bool {
        let o = &self.owned;
        match *event {
            Event::Completion { cq } | Event::CqError { cq } => o.cqs.contains(&cq),
            Event::SrqLimitReached { srq } => o.srqs.contains(&srq),
            Event::CommEstablished { qpn }
            | Event::SqDrained { qpn }
            | Event::LastWqeReached { qpn }
            | Event::QpFatal { qpn } => o.qps.contains(&qpn),
        }
    }

    /// Frees everything the context owns, QPs first (their WRs are flushed), then windows,
    /// regions, SRQs, CQs and PDs.
    pub fn release(&self, engine: &mut Engine<ProcessMemory>) {
        for &qpn in &self.owned.qps {
            let _ = engine.destroy_qp(qpn);
        }
        for &key in &self.owned.mws {
            let _ = engine.dealloc_mw(key);
        }
        for &key in &self.owned.mrs {
            let _ = engine.dereg_mr(key);
        }
        for &srq in &self.owned.srqs {
            let _ = engine.destroy_srq(srq);
        }
        for &cq in &self.owned.cqs {
            let _ = engine.destroy_cq(cq);
        }
        for &pd in &self.owned.pds {
            let _ = engine.dealloc_pd(pd);
        }
    }

    /// Queues a message for the socket; the Open reply goes at once, with the region's memfd
    /// and the pipes.
    pub fn queue(&mut self, msg: &Reply) {
        let Ok(bytes) = proto::encode(msg) else {
            return;
        };
        if !self.send_fds.is_empty() {
            let fds: Vec<_> = std::mem::take(&mut self.send_fds);
            let raw: Vec<_> = fds.iter().map(AsRawFd::as_raw_fd).collect();
            while !self.outbuf.is_empty() && self.flush().is_ok() {
                std::thread::yield_now();
            }
            let _ = sys::send_fds(self.stream.as_raw_fd(), &bytes, &raw);
            return;
        }
        self.outbuf.extend_from_slice(&bytes);
    }

    /// Writes what the socket takes now, without blocking. Err when the peer has gone.
    pub fn flush(&mut self) -> io::Result<()> {
        use std::io::Write;
        while !self.outbuf.is_empty() {
            match self.stream.write(&self.outbuf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.outbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// PDs, MRs, CQs and QPs held.
    pub fn counts(&self) -> [u32; 4] {
        let o = &self.owned;
        [o.pds.len(), o.mrs.len(), o.cqs.len(), o.qps.len()].map(|n| n as u32)
    }
}

impl Daemon {
    fn is_admin(&self, uid: u32) -> bool {
        uid == 0 || uid == self.uid
    }

    /// Answers one request of context `i`.
    pub(super) fn handle(&mut self, i: usize, req: Request) -> Reply {
        let ctx = self.contexts[i].as_mut().expect("open");
        if !ctx.hello {
            return match req {
                Request::Hello { version } if version == proto::VERSION => {
                    ctx.hello = true;
                    Reply::Hello {
                        version: proto::VERSION,
                        pid: std::process::id(),
                    }
                }
                Request::Hello { version } => error(
                    libc::EPROTO,
                    format!(
                        "protocol version {version}; this daemon speaks {}",
                        proto::VERSION
                    ),
                ),
                _ => error(libc::EPROTO, "the first request must be Hello"),
            };
        }
        let uid = ctx.uid;
        match req {
            Request::Hello { .. } => error(libc::EPROTO, "Hello was said already"),
            Request::ListDevices => Reply::Devices(self.device_infos()),
            Request::Up(up) => {
                if !self.is_admin(uid) {
                    return error(libc::EPERM, "only root or the daemon's user adds devices");
                }
                match self.up(&up) {
                    Ok(name) => Reply::Devices(
                        self.device_infos()
                            .into_iter()
                            .filter(|d| d.name == name)
                            .collect(),
                    ),
                    Err(e) => error(e.raw_os_error().unwrap_or(libc::EINVAL), e.to_string()),
                }
            }
            Request::Down { name } => {
                if !self.is_admin(uid) {
                    return error(
                        libc::EPERM,
                        "only root or the daemon's user removes devices",
                    );
                }
                let Some(d) = self.device_index(&name) else {
                    return error(libc::ENODEV, format!("no device {name}"));
                };
                for c in 0..self.contexts.len() {
                    let Some(x) = self.contexts[c].as_mut().filter(|x| x.device == Some(d)) else {
                        continue;
                    };
                    if c == i {
                        // The asker has it open too: it gets its reply, then is closed.
                        x.broken = true;
                    } else {
                        self.close(c);
                    }
                }
                self.cm_device_removed(d);
                self.devices[d] = None;
                tracing::info!(device = %name, "device down");
                Reply::Ok
            }
            Request::Counters { name } => match self.device_index(&name) {
                Some(d) => Reply::Counters(
                    self.devices[d]
                        .as_ref()
                        .expect("found")
                        .engine
                        .counters()
                        .clone(),
                ),
                None => error(libc::ENODEV, format!("no device {name}")),
            },
            Request::Capture { device } => {
                let filter = match device {
                    None => None,
                    Some(name) => match self.device_index(&name) {
                        Some(d) => Some(d),
                        None => return error(libc::ENODEV, format!("no device {name}")),
                    },
                };
                self.contexts[i].as_mut().expect("open").capture = Some(filter);
                Reply::Ok
            }
            Request::CmListeners => Reply::CmListeners(self.cm_listeners()),
            req if req.is_rdma_cm() => self.rdma_cm(i, req),
            Request::Open { name } => {
                let Some(d) = self.device_index(&name) else {
                    return error(libc::ENODEV, format!("no device {name}"));
                };
                let ctx = self.contexts[i].as_mut().expect("open");
                if ctx.device.is_some() || ctx.cm.is_some() {
                    return error(libc::EINVAL, "this connection is in use already");
                }
                let (region, memfd) = match Region::create() {
                    Ok(r) => r,
                    Err(e) => return error(libc::ENOMEM, format!("shared region: {e}")),
                };
                // The program writes a byte to wake the daemon; the daemon reads the other end.
                let (wake, wake_write) = match sys::wake_pair() {
                    Ok(p) => p,
                    Err(e) => return error(libc::EMFILE, format!("socketpair: {e}")),
                };
                let (async_read, async_write) = match sys::notify_pipe() {
                    Ok(p) => p,
                    Err(e) => return error(libc::EMFILE, format!("pipe: {e}")),
                };
                ctx.rings = Rings::new(region, wake);
                ctx.async_notify = Some(async_write);
                ctx.send_fds = vec![memfd, wake_write, async_read];
                ctx.device = Some(d);
                let (space, pid) = (ctx.space, ctx.pid);
                let dev = self.devices[d].as_mut().expect("found");
                dev.engine.memory_mut().attach(space, pid);
                dev.info.contexts += 1;
                Reply::Ok
            }
            req => {
                let groups = matches!(
                    req,
                    Request::AttachMcast { .. }
                        | Request::DetachMcast { .. }
                        | Request::DestroyQp(_)
                );
                let reply = self.verb(i, req);
                if let (true, Some(d)) = (groups, self.contexts[i].as_ref().and_then(|c| c.device))
                {
                    self.sync_multicast(d);
                }
                reply
            }
        }
    }

    fn device_infos(&self) -> Vec<proto::DeviceInfo> {
        self.devices
            .iter()
            .enumerate()
            .filter_map(|(d, dev)| {
                let mut info = dev.as_ref()?.info.clone();
                for ctx in self
                    .contexts
                    .iter()
                    .flatten()
                    .filter(|c| c.device == Some(d))
                {
                    for (sum, n) in info.objects.iter_mut().zip(ctx.counts()) {
                        *sum += n;
                    }
                }
                Some(info)
            })
            .collect()
    }

    /// A verbs call on the context's open device.
    fn verb(&mut self, i: usize, mut req: Request) -> Reply {
        let Some(d) = self.contexts[i].as_ref().and_then(|c| c.device) else {
            return error(libc::EINVAL, "open a device first");
        };
        // Address handles name a GID; the device resolves its MAC (ARP/ND) before the engine
        // sees it.
        if let Request::ModifyQp { attr, mask, .. } = &mut req
            && mask.contains(AttrMask::AV)
            && let Some(ah) = attr.ah.as_mut()
        {
            match self.resolve(d, ah.dgid) {
                Ok(mac) => ah.dmac = softrnic_wire::EthernetAddress(mac),
                Err(e) => return error(libc::EHOSTUNREACH, e.to_string()),
            }
        }
        let ctx = self.contexts[i].as_mut().expect("open");
        let engine = &mut self.devices[d].as_mut().expect("open").engine;
        let o = &mut ctx.owned;
        match req {
            Request::QueryDevice => Reply::Device(engine.query_device().clone()),
            Request::QueryPort => Reply::Port(engine.query_port().clone()),
            Request::QueryGids => Reply::Gids(engine.gids().to_vec()),
            Request::AllocPd => handle_or(engine.alloc_pd(ctx.space), |pd| {
                o.pds.insert(pd);
                Reply::Handle(pd)
            }),
            Request::DeallocPd(pd) if o.pds.contains(&pd) => {
                handle_or(engine.dealloc_pd(pd), |()| {
                    o.pds.remove(&pd);
                    Reply::Ok
                })
            }
            Request::RegMr {
                pd,
                addr,
                len,
                access,
            } if o.pds.contains(&pd) => {
                // Like a kernel provider pinning the pages: an unmapped range is EFAULT now,
                // not a fault at the first access.
                let mut probe = [0u8; 1];
                let ends = [addr, addr.saturating_add(len.saturating_sub(1))];
                if len > 0
                    && ends
                        .iter()
                        .any(|&a| sys::vm_read(ctx.pid, a, &mut probe).is_err())
                {
                    return error(libc::EFAULT, "the range is not mapped in the program");
                }
                handle_or(engine.reg_mr(pd, addr, len, access), |key| {
                    o.mrs.insert(key);
                    Reply::Handle(key)
                })
            }
            Request::DeregMr(key) if o.mrs.contains(&key) => {
                handle_or(engine.dereg_mr(key), |()| {
                    o.mrs.remove(&key);
                    Reply::Ok
                })
            }
            Request::CreateCq { cqe, channel } => {
                if channel.is_some_and(|c| !ctx.channels.contains_key(&c)) {
                    return error(libc::EINVAL, NOT_OURS);
                }
                handle_or(engine.create_cq(cqe), |cq| {
                    match ctx.rings.new_ring(cqe, proto::CQ_SLOT) {
                        Ok((info, ring)) => {
                            if let Some(c) = channel {
                                ctx.cq_channel.insert(cq, c);
                            }
                            o.cqs.insert(cq);
                            ctx.rings.cqs.insert(cq, ring);
                            Reply::CqCreated { cq, ring: info }
                        }
                        Err(e) => {
                            let _ = engine.destroy_cq(cq);
                            error(libc::ENOMEM, e.to_string())
                        }
                    }
                })
            }
            Request::CreateCompChannel => match sys::notify_pipe() {
                Ok((read, write)) => {
                    let id = ctx.channels.keys().next_back().map_or(1, |k| k + 1);
                    ctx.channels.insert(id, (write, Vec::new()));
                    ctx.send_fds = vec![read];
                    Reply::Handle(id)
                }
                Err(e) => error(libc::EMFILE, format!("pipe: {e}")),
            },
            Request::DestroyCompChannel(channel) => {
                if !ctx.channels.contains_key(&channel) {
                    error(libc::EINVAL, NOT_OURS)
                } else if ctx.cq_channel.values().any(|&c| c == channel) {
                    error(libc::EBUSY, "CQs still use this completion channel")
                } else {
                    ctx.channels.remove(&channel);
                    Reply::Ok
                }
            }
            Request::CqEvents { channel } => match ctx.channels.get_mut(&channel) {
                Some((_, fired)) => Reply::Cqs(std::mem::take(fired)),
                None => error(libc::EINVAL, NOT_OURS),
            },
            Request::DestroyCq(cq) if o.cqs.contains(&cq) => {
                handle_or(engine.destroy_cq(cq), |()| {
                    o.cqs.remove(&cq);
                    ctx.rings.cqs.remove(&cq);
                    ctx.cq_channel.remove(&cq);
                    Reply::Ok
                })
            }
            Request::ReqNotifyCq { cq, solicited } if o.cqs.contains(&cq) => {
                handle_or(engine.req_notify_cq(cq, solicited), |()| Reply::Ok)
            }
            Request::CreateQp { pd, init }
                if o.pds.contains(&pd)
                    && o.cqs.contains(&init.send_cq)
                    && o.cqs.contains(&init.recv_cq)
                    && init.srq.is_none_or(|s| o.srqs.contains(&s)) =>
            {
                handle_or(engine.create_qp(pd, init), |qpn| {
                    let rings = ctx
                        .rings
                        .new_ring(init.cap.max_send_wr, proto::SQ_SLOT)
                        .and_then(|sq| {
                            let rq = match init.srq {
                                Some(_) => None,
                                None => {
                                    Some(ctx.rings.new_ring(init.cap.max_recv_wr, proto::RQ_SLOT)?)
                                }
                            };
                            Ok((sq, rq))
                        });
                    match rings {
                        Ok(((sq_info, sq), rq)) => {
                            o.qps.insert(qpn);
                            ctx.rings.sqs.insert(qpn, sq);
                            let rq_info = rq.map(|(info, ring)| {
                                ctx.rings.rqs.insert(qpn, ring);
                                info
                            });
                            Reply::QpCreated {
                                qpn,
                                sq: sq_info,
                                rq: rq_info,
                            }
                        }
                        Err(e) => {
                            let _ = engine.destroy_qp(qpn);
                            error(libc::ENOMEM, e.to_string())
                        }
                    }
                })
            }
            Request::ModifyQp { qpn, attr, mask } if o.qps.contains(&qpn) => {
                handle_or(engine.modify_qp(qpn, &attr, mask), |()| Reply::Ok)
            }
            Request::QueryQp(qpn) if o.qps.contains(&qpn) => {
                handle_or(engine.query_qp(qpn), |(a, c)| Reply::Qp(a, c))
            }
            Request::DestroyQp(qpn) if o.qps.contains(&qpn) => {
                handle_or(engine.destroy_qp(qpn), |()| {
                    o.qps.remove(&qpn);
                    ctx.rings.sqs.remove(&qpn);
                    ctx.rings.rqs.remove(&qpn);
                    Reply::Ok
                })
            }
            Request::AttachMcast { qpn, gid } if o.qps.contains(&qpn) => {
                handle_or(engine.attach_mcast(qpn, gid), |()| Reply::Ok)
            }
            Request::DetachMcast { qpn, gid } if o.qps.contains(&qpn) => {
                handle_or(engine.detach_mcast(qpn, gid), |()| Reply::Ok)
            }
            Request::ResizeCq { cq, cqe } if o.cqs.contains(&cq) => {
                // Completions the program has not taken must all fit (as rxe: EINVAL).
                let waiting = ctx.rings.cqs.get(&cq).map_or(0, |r| r.unconsumed().len());
                if waiting + engine.cq_len(cq).unwrap_or(0) > cqe as usize {
                    return error(libc::EINVAL, "fewer entries than completions waiting");
                }
                handle_or(engine.resize_cq(cq, cqe), |()| {
                    // A new ring, holding the completions the program has not taken yet.
                    match ctx.rings.new_ring(cqe, proto::CQ_SLOT) {
                        Ok((info, mut ring)) => {
                            if let Some(old) = ctx.rings.cqs.get(&cq) {
                                for wc in old.unconsumed() {
                                    ring.push(&wc);
                                }
                            }
                            ctx.rings.cqs.insert(cq, ring);
                            Reply::CqCreated { cq, ring: info }
                        }
                        Err(e) => error(libc::ENOMEM, e.to_string()),
                    }
                })
            }
            Request::CreateSrq {
                pd,
                max_wr,
                max_sge,
            } if o.pds.contains(&pd) => handle_or(engine.create_srq(pd, max_wr, max_sge), |srq| {
                match ctx.rings.new_ring(max_wr, proto::RQ_SLOT) {
                    Ok((info, ring)) => {
                        o.srqs.insert(srq);
                        ctx.rings.srqs.insert(srq, ring);
                        Reply::SrqCreated { srq, ring: info }
                    }
                    Err(e) => {
                        let _ = engine.destroy_srq(srq);
                        error(libc::ENOMEM, e.to_string())
                    }
                }
            }),
            Request::ModifySrq { srq, limit } if o.srqs.contains(&srq) => {
                handle_or(engine.modify_srq_limit(srq, limit), |()| Reply::Ok)
            }
            Request::DestroySrq(srq) if o.srqs.contains(&srq) => {
                handle_or(engine.destroy_srq(srq), |()| {
                    o.srqs.remove(&srq);
                    ctx.rings.srqs.remove(&srq);
                    Reply::Ok
                })
            }
            Request::AllocMw { pd, mw_type } if o.pds.contains(&pd) => {
                handle_or(engine.alloc_mw(pd, mw_type), |key| {
                    o.mws.insert(key);
                    Reply::Handle(key)
                })
            }
            // A window is owned by its index: its key byte changes with each bind.
            Request::DeallocMw(key) if o.mws.iter().any(|&k| key_index(k) == key_index(key)) => {
                handle_or(engine.dealloc_mw(key), |()| {
                    o.mws.retain(|&k| key_index(k) != key_index(key));
                    Reply::Ok
                })
            }
            Request::PollEvents => Reply::Events(ctx.events.drain(..).collect()),
            _ => error(libc::EINVAL, NOT_OURS),
        }
    }
}
