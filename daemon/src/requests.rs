//! What the daemon answers on a client connection: administration (devices up and down,
//! status, captures), opening a device, and the verbs calls on its objects; rdma_cm's requests
//! go to [`crate::rdma_cm`]. Every handle a request names must be one its context created
//! (EINVAL otherwise), so no program reaches another's objects; and every remote access goes
//! through the engine's key and PD checks, so none reaches another's memory.

use std::io;
use std::os::fd::AsRawFd;

use softrnic_emu_core::{Access, AttrMask, Counters, QpType, Span, VerbsError, key_index};

use crate::context::{Context, Port};
use crate::rings::Rings;
use crate::{Daemon, device_at};
use softrnic_client::proto::{self, Reply, Request, SharedPages};
use softrnic_client::shm::Region;
use softrnic_client::slot;
use softrnic_sys as sys;

pub(crate) fn error(errno: i32, message: impl Into<String>) -> Reply {
    Reply::Error {
        errno,
        message: message.into(),
    }
}

pub(crate) fn verbs(e: VerbsError) -> Reply {
    error(e.errno(), e.to_string())
}

pub(crate) fn handle_or<T>(r: softrnic_emu_core::Result<T>, f: impl FnOnce(T) -> Reply) -> Reply {
    r.map_or_else(verbs, f)
}

const NOT_OURS: &str = "no such object in this context";

const ADMIN: &str =
    "only root, the daemon's user or its admin group may do this (devices, DCQCN, captures)";

impl Daemon {
    /// Whether context `i` may administer the daemon: root, the daemon's own user, or a
    /// member of the admin group.
    fn is_admin(&self, i: usize) -> bool {
        let ctx = self.contexts[i].as_ref().expect("open");
        ctx.uid == 0
            || ctx.uid == self.uid
            || self
                .sharing
                .admin_group
                .is_some_and(|g| ctx.groups.contains(&g))
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
        match req {
            Request::Hello { .. } => error(libc::EPROTO, "Hello was said already"),
            Request::ListDevices => Reply::Devices(self.device_infos()),
            Request::Up(up) => {
                if !self.is_admin(i) {
                    return error(libc::EPERM, ADMIN);
                }
                // Keys no program or peer can guess from the keys it has seen.
                match self.up(&up, [sys::random_u64(), sys::random_u64()]) {
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
                if !self.is_admin(i) {
                    return error(libc::EPERM, ADMIN);
                }
                let Some(d) = self.device_index(&name) else {
                    return error(libc::ENODEV, format!("no device {name}"));
                };
                let shards = self.shards(d);
                for c in 0..self.contexts.len() {
                    let on = |x: &&mut Context| x.device.is_some_and(|s| shards.contains(&s));
                    let Some(x) = self.contexts[c].as_mut().filter(on) else {
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
                self.shared.switch.remove(d);
                for s in shards {
                    self.devices[s] = None;
                    self.shared.set_device(s, None);
                }
                tracing::info!(device = %name, "device down");
                Reply::Ok
            }
            Request::Counters { name } => match self.device_index(&name) {
                Some(d) => {
                    let mut sum = Counters::default();
                    for s in self.shards(d) {
                        if let Some(dev) = device_at(&self.devices, s) {
                            sum.add(dev.engine.counters());
                        }
                    }
                    Reply::Counters(sum)
                }
                None => error(libc::ENODEV, format!("no device {name}")),
            },
            Request::Dcqcn { name, set } => {
                if set.is_some() && !self.is_admin(i) {
                    return error(libc::EPERM, ADMIN);
                }
                let Some(d) = self.device_index(&name) else {
                    return error(libc::ENODEV, format!("no device {name}"));
                };
                if let Some(p) = set {
                    if let Err(e) = p.check() {
                        return error(libc::EINVAL, e);
                    }
                    for s in self.shards(d) {
                        if let Some(mut dev) = device_at(&self.devices, s) {
                            dev.engine.set_dcqcn(p);
                        }
                    }
                    tracing::info!(device = %name, "DCQCN parameters set");
                }
                let dev = device_at(&self.devices, d).expect("found");
                Reply::Dcqcn(*dev.engine.dcqcn())
            }
            // A capture shows every program's frames, other users' too.
            Request::Capture { device } => {
                if !self.is_admin(i) {
                    return error(libc::EPERM, ADMIN);
                }
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
            req if req.is_rdma_cm() => {
                let reply = self.rdma_cm(i, req);
                // The MADs it made go now, and what they bring back (a connection between
                // two ids of one device is made within the pass) reaches the channels.
                self.pass_all();
                self.route_cm();
                reply
            }
            Request::Open { name } => {
                let Some(d) = self.device_index(&name) else {
                    return error(libc::ENODEV, format!("no device {name}"));
                };
                let d = self.shard_for(i, d);
                let ctx = self.contexts[i].as_mut().expect("open");
                if ctx.device.is_some() || ctx.cm.is_some() {
                    return error(libc::EINVAL, "this connection is in use already");
                }
                // Its process, pinned now: the program has let the daemon reach its memory
                // (PR_SET_PTRACER, for Yama) before it opens a device.
                let peer = match sys::Peer::of_socket(ctx.stream.as_raw_fd()) {
                    Ok(p) => std::sync::Arc::new(p),
                    Err(e) => {
                        let why = format!("the daemon cannot reach this program's memory: {e}");
                        return error(libc::EACCES, why);
                    }
                };
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
                ctx.send_fds = vec![memfd, wake_write, async_read];
                ctx.device = Some(d);
                let space = ctx.space;
                let rings = Rings::new(region, wake);
                let port = Port::new(space, peer.clone(), rings, async_write);
                let mut dev = device_at(&self.devices, d).expect("found");
                dev.ports.insert(i, port);
                dev.engine.memory_mut().attach(space, peer);
                dev.info.contexts += 1;
                // Its worker sleeps on the new program's wake-up socket from now on.
                self.shared.ring_worker(d);
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
                let d = self.contexts[i].as_ref().and_then(|c| c.device);
                if let (true, Some(mut dev)) = (groups, d.and_then(|d| device_at(&self.devices, d)))
                {
                    dev.sync_multicast();
                }
                reply
            }
        }
    }

    /// The refusal of a request that would take its user past a limit (root has none), with
    /// the kernel's errno: EAGAIN past an rdma cgroup's count of objects, ENOMEM past
    /// RLIMIT_MEMLOCK.
    fn over_limit(&self, i: usize, req: &Request) -> Option<Reply> {
        let uid = self.contexts[i].as_ref()?.uid;
        let l = self.sharing.limits;
        let limits = [l.qps, l.mrs, l.registered];
        if uid == 0 || limits.iter().all(Option::is_none) {
            return None;
        }
        let more = match *req {
            Request::CreateQp { .. } | Request::CreateXrcRecvQp { .. } => [1, 0, 0],
            Request::RegMr { len, .. } => [0, 1, len],
            Request::ReregMr {
                translation: Some((_, len)),
                ..
            } => [0, 0, len],
            _ => return None,
        };
        // What the user holds now, over all their contexts (a region registered again counts
        // with its new length only).
        let mut held = [0u64; 3];
        for (c, x) in self.contexts.iter().enumerate() {
            let Some(x) = x.as_ref().filter(|x| x.uid == uid) else {
                continue;
            };
            let Some(dev) = x.device.and_then(|d| device_at(&self.devices, d)) else {
                continue;
            };
            let Some(port) = dev.ports.get(&c) else {
                continue;
            };
            for (h, u) in held.iter_mut().zip(port.usage()) {
                *h += u;
            }
            if let (true, Request::ReregMr { key, .. }) = (c == i, req) {
                held[2] = held[2].saturating_sub(port.owned.mrs.get(key).copied().unwrap_or(0));
            }
        }
        let what = ["queue pairs", "memory regions", "registered bytes"];
        (0..3).find_map(|k| {
            let max = limits[k].filter(|&max| more[k] > 0 && held[k] + more[k] > max)?;
            let errno = if k == 2 { libc::ENOMEM } else { libc::EAGAIN };
            Some(error(
                errno,
                format!(
                    "user {uid} would hold {} {}: the daemon allows each user {max}",
                    held[k] + more[k],
                    what[k]
                ),
            ))
        })
    }

    /// Each device, with the objects and contexts of all its shards.
    fn device_infos(&self) -> Vec<proto::DeviceInfo> {
        let mut infos = Vec::new();
        for d in self.heads() {
            let mut info = device_at(&self.devices, d).expect("a head").info.clone();
            info.contexts = 0;
            for s in self.shards(d) {
                let Some(dev) = device_at(&self.devices, s) else {
                    continue;
                };
                info.contexts += dev.info.contexts;
                for port in dev.ports.values() {
                    for (sum, n) in info.objects.iter_mut().zip(port.counts()) {
                        *sum += n;
                    }
                }
            }
            infos.push(info);
        }
        infos
    }

    /// The shard of device `d` that context `i` goes to: that of another context of its
    /// process (an XRC domain is shared within a shard), or the one with the fewest contexts.
    fn shard_for(&self, i: usize, d: usize) -> usize {
        let shards = self.shards(d);
        let pid = self.contexts[i].as_ref().expect("open").pid;
        let sibling = (self.contexts.iter().flatten())
            .filter(|c| c.pid == pid)
            .find_map(|c| c.device.filter(|s| shards.contains(s)));
        sibling.unwrap_or_else(|| {
            shards
                .min_by_key(|&s| device_at(&self.devices, s).map_or(usize::MAX, |x| x.ports.len()))
                .unwrap_or(d)
        })
    }

    /// A verbs call on the context's open device.
    fn verb(&mut self, i: usize, mut req: Request) -> Reply {
        let Some(d) = self.contexts[i].as_ref().and_then(|c| c.device) else {
            return error(libc::EINVAL, "open a device first");
        };
        if let Some(refused) = self.over_limit(i, &req) {
            return refused;
        }
        if let Request::OpenXrcd { file: Some(f), .. } = req
            && let Some(refused) = self.xrcd_elsewhere(d, f)
        {
            return refused;
        }
        // The work the program posted before this call goes through the engine first (a pass
        // on the device, run here), as a kernel provider's posts are done when they return:
        // the call sees it (a CQ resized below the completions of sends posted before it is
        // refused, for one). Its events and completions reach the program before the call is
        // answered, as in every pass: a CQ armed now must find in its ring every completion
        // made before the arming, or the program's poll after arming would miss one that
        // raises no event.
        let mut devices = [(d, device_at(&self.devices, d).expect("open"))];
        self.pass.run(&self.shared, &mut devices, None);
        let [(_, mut dev)] = devices;
        // Address handles name a GID; the device resolves its MAC (ARP/ND) before the engine
        // sees it.
        if let Request::ModifyQp { attr, mask, .. } = &mut req
            && mask.contains(AttrMask::AV)
            && let Some(ah) = attr.ah.as_mut()
        {
            match dev.resolve(&self.shared.switch, ah.dgid) {
                Ok(mac) => ah.dmac = softrnic_wire::EthernetAddress(mac),
                Err(e) => return error(libc::EHOSTUNREACH, e.to_string()),
            }
        }
        let dev = &mut *dev;
        match req {
            Request::OpenXrcd {
                file,
                create,
                exclusive,
            } => return crate::xrc::open(dev, i, file, create, exclusive),
            Request::CloseXrcd(xrcd) => return crate::xrc::close(dev, i, xrcd),
            _ => {}
        }
        let send_fds = &mut self.contexts[i].as_mut().expect("open").send_fds;
        let engine = &mut dev.engine;
        let ctx = dev.ports.get_mut(&i).expect("opened");
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
                iova,
                access,
                shared,
            } if o.pds.contains(&pd) => {
                if let Some(refused) = unreachable(&ctx.peer, addr, len, access) {
                    return refused;
                }
                let region = Span { addr, iova, len };
                handle_or(engine.reg_mr_iova(pd, region, access), |key| {
                    o.mrs.insert(key, len);
                    if let Some(pages) = shared {
                        match map_shared(&ctx.peer, (addr, len), pages) {
                            Ok(map) => {
                                tracing::debug!(
                                    pid = ctx.peer.pid(),
                                    key,
                                    len = pages.len,
                                    "pages shared"
                                );
                                engine.memory_mut().share(ctx.space, key, pages.addr, map);
                            }
                            // The region works without: through system calls.
                            Err(e) => {
                                tracing::info!(pid = ctx.peer.pid(), %e, "shared pages refused")
                            }
                        }
                    }
                    Reply::Handle(key)
                })
            }
            Request::ReregMr {
                key,
                pd,
                translation,
                access,
            } if o.mrs.contains_key(&key) && pd.is_none_or(|pd| o.pds.contains(&pd)) => {
                // The memory as it will be, checked as a new registration is.
                let Some((now, now_access)) = engine.mr(key) else {
                    return error(libc::EINVAL, NOT_OURS);
                };
                let (addr, len) = translation.unwrap_or((now.addr, now.len));
                if (translation.is_some() || access.is_some())
                    && let Some(refused) =
                        unreachable(&ctx.peer, addr, len, access.unwrap_or(now_access))
                {
                    return refused;
                }
                let region = translation.map(|(addr, len)| Span::at(addr, len));
                handle_or(engine.rereg_mr(key, pd, region, access), |()| {
                    o.mrs.insert(key, len);
                    if translation.is_some() {
                        engine.memory_mut().unshare(ctx.space, key);
                    }
                    Reply::Ok
                })
            }
            Request::DeregMr(key) if o.mrs.contains_key(&key) => {
                handle_or(engine.dereg_mr(key), |()| {
                    o.mrs.remove(&key);
                    engine.memory_mut().unshare(ctx.space, key);
                    Reply::Ok
                })
            }
            Request::CreateCq { cqe, channel } => {
                if channel.is_some_and(|c| !ctx.channels.contains_key(&c)) {
                    return error(libc::EINVAL, NOT_OURS);
                }
                handle_or(engine.create_cq(cqe), |cq| {
                    match ctx.rings.new_ring(cqe, slot::CQE_SLOT) {
                        Ok((info, ring)) => {
                            if let Some(c) = channel {
                                ctx.cq_channel.insert(cq, c);
                            }
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
                    *send_fds = vec![read];
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
            Request::DestroyCq(cq) if ctx.rings.cqs.contains_key(&cq) => {
                handle_or(engine.destroy_cq(cq), |()| {
                    let ring = ctx.rings.cqs.remove(&cq);
                    ctx.rings.free(ring);
                    ctx.cq_channel.remove(&cq);
                    Reply::Ok
                })
            }
            Request::ReqNotifyCq { cq, solicited } if ctx.rings.cqs.contains_key(&cq) => {
                handle_or(engine.req_notify_cq(cq, solicited), |()| Reply::Ok)
            }
            Request::CreateQp { pd, init }
                if o.pds.contains(&pd)
                    && ctx.rings.cqs.contains_key(&init.send_cq)
                    && ctx.rings.cqs.contains_key(&init.recv_cq)
                    && init.srq.is_none_or(|s| ctx.rings.srqs.contains_key(&s)) =>
            {
                handle_or(engine.create_qp(pd, init), |qpn| {
                    let rings = ctx
                        .rings
                        .new_ring(init.cap.max_send_wr, slot::send_slot_size(&init.cap))
                        .and_then(|sq| {
                            // No receive ring on an SRQ, nor for an XRC initiator.
                            let rq = match (init.srq, init.qp_type) {
                                (Some(_), _) | (_, QpType::XrcSend) => None,
                                (None, _) => match ctx.rings.new_ring(
                                    init.cap.max_recv_wr,
                                    slot::recv_slot_size(init.cap.max_recv_sge),
                                ) {
                                    Ok(rq) => Some(rq),
                                    Err(e) => {
                                        ctx.rings.free([sq.1]);
                                        return Err(e);
                                    }
                                },
                            };
                            Ok((sq, rq))
                        });
                    match rings {
                        Ok(((sq_info, sq), rq)) => {
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
            Request::ModifyQp { qpn, attr, mask } if o.has_qp(&ctx.rings, qpn) => {
                handle_or(engine.modify_qp(qpn, &attr, mask), |()| Reply::Ok)
            }
            Request::QueryQp(qpn) if o.has_qp(&ctx.rings, qpn) => {
                handle_or(engine.query_qp(qpn), |(a, c)| Reply::Qp(a, c))
            }
            // Closing an opened XRC target QP leaves it to its creator.
            Request::DestroyQp(qpn) if o.opened_qps.contains(&qpn) => {
                o.opened_qps.remove(&qpn);
                Reply::Ok
            }
            Request::DestroyQp(qpn) if o.xrc_qps.contains(&qpn) => {
                handle_or(engine.destroy_qp(qpn), |()| {
                    o.xrc_qps.remove(&qpn);
                    Reply::Ok
                })
            }
            Request::CreateXrcRecvQp { xrcd } if o.xrcds.contains_key(&xrcd) => {
                handle_or(engine.create_xrc_recv_qp(xrcd), |qpn| {
                    o.xrc_qps.insert(qpn);
                    Reply::Handle(qpn)
                })
            }
            Request::OpenQp { xrcd, qpn } if o.xrcds.contains_key(&xrcd) => {
                if engine.xrcd_of(qpn) != Some(xrcd) {
                    return error(
                        libc::EINVAL,
                        "no XRC target QP of that number in the domain",
                    );
                }
                o.opened_qps.insert(qpn);
                Reply::Ok
            }
            Request::DestroyQp(qpn) if ctx.rings.sqs.contains_key(&qpn) => {
                handle_or(engine.destroy_qp(qpn), |()| {
                    let sq = ctx.rings.sqs.remove(&qpn);
                    let rq = ctx.rings.rqs.remove(&qpn);
                    ctx.rings.free(sq.into_iter().chain(rq));
                    Reply::Ok
                })
            }
            Request::AttachMcast { qpn, gid } if ctx.rings.sqs.contains_key(&qpn) => {
                handle_or(engine.attach_mcast(qpn, gid), |()| Reply::Ok)
            }
            Request::DetachMcast { qpn, gid } if ctx.rings.sqs.contains_key(&qpn) => {
                handle_or(engine.detach_mcast(qpn, gid), |()| Reply::Ok)
            }
            Request::ResizeCq { cq, cqe } if ctx.rings.cqs.contains_key(&cq) => {
                // Completions the program has not taken must all fit (as rxe: EINVAL).
                let waiting = ctx.rings.cqs.get(&cq).map_or(0, |r| r.unconsumed().len());
                if waiting + engine.cq_len(cq).unwrap_or(0) > cqe as usize {
                    return error(libc::EINVAL, "fewer entries than completions waiting");
                }
                handle_or(engine.resize_cq(cq, cqe), |()| {
                    // A new ring, holding the completions the program has not taken yet.
                    match ctx.rings.new_ring(cqe, slot::CQE_SLOT) {
                        Ok((info, mut ring)) => {
                            if let Some(old) = ctx.rings.cqs.get(&cq) {
                                for wc in old.unconsumed() {
                                    ring.push(&wc);
                                }
                            }
                            let old = ctx.rings.cqs.insert(cq, ring);
                            ctx.rings.free(old);
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
            } if o.pds.contains(&pd) => {
                let made = engine.create_srq(pd, max_wr, max_sge);
                srq_with_ring(engine, ctx, made, max_wr, max_sge)
            }
            Request::CreateXrcSrq {
                pd,
                xrcd,
                cq,
                max_wr,
                max_sge,
            } if o.pds.contains(&pd)
                && o.xrcds.contains_key(&xrcd)
                && ctx.rings.cqs.contains_key(&cq) =>
            {
                let made = engine.create_xrc_srq(pd, xrcd, cq, max_wr, max_sge);
                srq_with_ring(engine, ctx, made, max_wr, max_sge)
            }
            Request::ModifySrq { srq, limit } if ctx.rings.srqs.contains_key(&srq) => {
                handle_or(engine.modify_srq_limit(srq, limit), |()| Reply::Ok)
            }
            Request::DestroySrq(srq) if ctx.rings.srqs.contains_key(&srq) => {
                handle_or(engine.destroy_srq(srq), |()| {
                    let ring = ctx.rings.srqs.remove(&srq);
                    ctx.rings.free(ring);
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

/// The reply to an SRQ made in the engine: its receive ring, or ENOMEM (and no SRQ).
fn srq_with_ring(
    engine: &mut softrnic_emu_core::Engine<crate::ProcessMemory>,
    ctx: &mut Port,
    made: softrnic_emu_core::Result<u32>,
    max_wr: u32,
    max_sge: u32,
) -> Reply {
    handle_or(made, |srq| {
        match ctx.rings.new_ring(max_wr, slot::recv_slot_size(max_sge)) {
            Ok((info, ring)) => {
                ctx.rings.srqs.insert(srq, ring);
                Reply::SrqCreated { srq, ring: info }
            }
            Err(e) => {
                let _ = engine.destroy_srq(srq);
                error(libc::ENOMEM, e.to_string())
            }
        }
    })
}

/// Why the program cannot reach `len` bytes at `addr` itself as `access` needs them, if it
/// cannot: like a kernel provider pinning the pages (writable ones for an access that lets the
/// device write, as `ib_access_writable` says), a region over an unmapped or read-only range is
/// EFAULT when registered, not a fault at the first access.
fn unreachable(peer: &sys::Peer, addr: u64, len: u64, access: Access) -> Option<Reply> {
    let write = access.intersects(
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC | Access::MW_BIND,
    );
    match peer.mapped(addr, len, write) {
        Ok(true) => None,
        Ok(false) if write => Some(error(
            libc::EFAULT,
            "the range is not mapped writable in the program",
        )),
        Ok(false) => Some(error(
            libc::EFAULT,
            "the range is not mapped in the program",
        )),
        Err(e) => Some(error(libc::EFAULT, format!("the program's mappings: {e}"))),
    }
}

/// Maps the pages a program shares of its region `[addr, addr + len)` (the client's `share`):
/// whole pages inside the region, of a memfd the program holds open for reading and writing
/// and has sealed against shrinking ([`sys::Mmap::of_sealed`]). A program that names other
/// pages than it has at that address only gets its own memory wrong.
fn map_shared(peer: &sys::Peer, (addr, len): (u64, u64), p: SharedPages) -> io::Result<sys::Mmap> {
    const PAGE: u64 = 4096;
    let inside = p.addr >= addr && p.addr.checked_add(p.len).is_some_and(|e| e <= addr + len);
    if !inside || p.len == 0 || !(p.addr | p.len | p.offset).is_multiple_of(PAGE) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not whole pages of the region",
        ));
    }
    let fd = peer.take_fd(p.fd)?;
    sys::Mmap::of_sealed(&fd, p.offset, p.len as usize)
}
