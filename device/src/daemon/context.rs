//! A device context: one client connection, the objects it owns, and the requests it makes.
//! Every handle a request names must be one this context created (EINVAL otherwise), so no
//! program reaches another's objects; and every remote access goes through the engine's key
//! and PD checks, so none reaches another's memory.

use std::collections::{BTreeSet, VecDeque};
use std::io;
use std::os::unix::net::UnixStream;

use softrnic_emu_core::{AttrMask, Engine, Event, Space, VerbsError, Wc, WcOpcode, WcStatus};

use super::{Daemon, ProcessMemory};
use crate::proto::{self, Reply, Request};
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
    pub pid: u32,
    pub uid: u32,
    pub space: Space,
    /// The device opened, by index.
    pub device: Option<usize>,
    hello: bool,
    owned: Owned,
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
            pid,
            uid,
            space,
            device: None,
            hello: false,
            owned: Owned::default(),
        }
    }

    /// The next whole request in the input buffer, if one has arrived.
    pub fn next_message(&mut self) -> Option<io::Result<Request>> {
        let len = u32::from_le_bytes(self.inbuf.get(..4)?.try_into().ok()?) as usize;
        if len > proto::MAX_MESSAGE {
            self.inbuf.clear();
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

    /// Queues a message for the socket.
    pub fn queue(&mut self, msg: &Reply) {
        if let Ok(bytes) = proto::encode(msg) {
            self.outbuf.extend_from_slice(&bytes);
        }
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
                    if c != i
                        && self.contexts[c]
                            .as_ref()
                            .is_some_and(|x| x.device == Some(d))
                    {
                        self.close(c);
                    }
                }
                if self.contexts[i]
                    .as_ref()
                    .is_some_and(|x| x.device == Some(d))
                {
                    self.close(i);
                }
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
            Request::Open { name } => {
                let Some(d) = self.device_index(&name) else {
                    return error(libc::ENODEV, format!("no device {name}"));
                };
                let ctx = self.contexts[i].as_mut().expect("open");
                if ctx.device.is_some() {
                    return error(libc::EINVAL, "this connection has a device open already");
                }
                ctx.device = Some(d);
                let (space, pid) = (ctx.space, ctx.pid);
                let dev = self.devices[d].as_mut().expect("found");
                dev.engine.memory_mut().attach(space, pid);
                dev.info.contexts += 1;
                Reply::Ok
            }
            req => self.verb(i, req),
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
        if let Request::PostSend { wrs, .. } = &mut req {
            for wr in wrs.iter_mut() {
                if let Some(ud) = wr.ud.as_mut() {
                    match self.resolve(d, ud.ah.dgid) {
                        Ok(mac) => ud.ah.dmac = softrnic_wire::EthernetAddress(mac),
                        Err(e) => return error(libc::EHOSTUNREACH, e.to_string()),
                    }
                }
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
            Request::CreateCq { cqe } => handle_or(engine.create_cq(cqe), |cq| {
                o.cqs.insert(cq);
                Reply::Handle(cq)
            }),
            Request::DestroyCq(cq) if o.cqs.contains(&cq) => {
                handle_or(engine.destroy_cq(cq), |()| {
                    o.cqs.remove(&cq);
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
                    o.qps.insert(qpn);
                    Reply::Handle(qpn)
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
                    Reply::Ok
                })
            }
            Request::PostSend { qpn, wrs } if o.qps.contains(&qpn) => {
                for (n, wr) in wrs.into_iter().enumerate() {
                    if let Err(e) = engine.post_send(qpn, wr) {
                        return Reply::Posted {
                            accepted: n as u32,
                            errno: e.errno(),
                        };
                    }
                }
                Reply::Ok
            }
            Request::PostRecv { qpn, wrs } if o.qps.contains(&qpn) => {
                for (n, wr) in wrs.into_iter().enumerate() {
                    if let Err(e) = engine.post_recv(qpn, wr) {
                        return Reply::Posted {
                            accepted: n as u32,
                            errno: e.errno(),
                        };
                    }
                }
                Reply::Ok
            }
            Request::PollCq { cq, max } if o.cqs.contains(&cq) => {
                let mut out =
                    vec![Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); max.min(4096) as usize];
                handle_or(engine.poll_cq(cq, &mut out), |n| {
                    out.truncate(n);
                    Reply::Completions(out)
                })
            }
            Request::ResizeCq { cq, cqe } if o.cqs.contains(&cq) => {
                handle_or(engine.resize_cq(cq, cqe), |()| Reply::Ok)
            }
            Request::CreateSrq {
                pd,
                max_wr,
                max_sge,
            } if o.pds.contains(&pd) => handle_or(engine.create_srq(pd, max_wr, max_sge), |srq| {
                o.srqs.insert(srq);
                Reply::Handle(srq)
            }),
            Request::ModifySrq { srq, limit } if o.srqs.contains(&srq) => {
                handle_or(engine.modify_srq_limit(srq, limit), |()| Reply::Ok)
            }
            Request::DestroySrq(srq) if o.srqs.contains(&srq) => {
                handle_or(engine.destroy_srq(srq), |()| {
                    o.srqs.remove(&srq);
                    Reply::Ok
                })
            }
            Request::PostSrqRecv { srq, wrs } if o.srqs.contains(&srq) => {
                for (n, wr) in wrs.into_iter().enumerate() {
                    if let Err(e) = engine.post_srq_recv(srq, wr) {
                        return Reply::Posted {
                            accepted: n as u32,
                            errno: e.errno(),
                        };
                    }
                }
                Reply::Ok
            }
            Request::AllocMw { pd, mw_type } if o.pds.contains(&pd) => {
                handle_or(engine.alloc_mw(pd, mw_type), |key| {
                    o.mws.insert(key);
                    Reply::Handle(key)
                })
            }
            Request::DeallocMw(key) if o.mws.contains(&key) => {
                handle_or(engine.dealloc_mw(key), |()| {
                    o.mws.remove(&key);
                    Reply::Ok
                })
            }
            Request::PollEvents => Reply::Events(ctx.events.drain(..).collect()),
            _ => error(libc::EINVAL, NOT_OURS),
        }
    }
}
