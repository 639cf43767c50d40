//! rdma_cm ids: each mirrors an id in the daemon (its handle), lives on an event channel (its
//! own, for a synchronous id created without one, whose calls then wait for their event as
//! rdma-core's do), and carries the route the daemon resolved. Events are turned into
//! `struct rdma_cm_event` here, with the library's share of the work done first.

use core::ffi::{c_int, c_void};
use std::collections::HashMap;
use std::sync::{Condvar, Mutex};

use softrnic_client::proto::{CmEvent, CmOption, ConnParam, Request};
use softrnic_emu_core::QpType;
use softrnic_verbs_abi::abi::*;
use softrnic_verbs_abi::convert;

use crate::abi::*;
use crate::channel::{self, client};
use crate::{device, errno_of, fail, qp, sockaddr};

/// An id: the C structure first, so a `*mut rdma_cm_id` is one of these.
#[repr(C)]
pub(crate) struct IdPriv {
    pub id: rdma_cm_id,
    pub handle: u32,
    /// Made without a channel: it has its own, and its calls wait for their events.
    pub sync: bool,
    /// A connection response failed here (the QP could not be readied): what the daemon
    /// says after it about the connection is not passed on.
    connect_error: bool,
    /// The READ/atomic depths the QP gets, and the device's limits.
    pub responder_resources: u8,
    pub initiator_depth: u8,
    max_responder_resources: u8,
    max_initiator_depth: u8,
    /// What `rdma_get_request` gives each new connection's QP (from `rdma_create_ep`).
    pub qp_init_attr: Option<Box<ibv_qp_init_attr>>,
    path: ibv_sa_path_rec,
    local_ece: ibv_ece,
    /// Multicast groups joined.
    pub mcs: Mutex<Vec<crate::multicast::Mc>>,
    /// Events the program has acknowledged, for `rdma_destroy_id` and `rdma_leave_multicast`
    /// to wait on.
    completed: Mutex<Acked>,
    acked: Condvar,
    /// `rdma_resolve_addrinfo`'s state.
    pub addrinfo: Mutex<Resolving>,
}

/// An `rdma_resolve_addrinfo` under way (`busy`), and its result until `rdma_query_addrinfo`
/// takes it.
#[derive(Default)]
pub(crate) struct Resolving {
    pub busy: bool,
    pub ai: Option<std::ptr::NonNull<rdma_addrinfo>>,
}

/// Events acknowledged: of the id, and of each multicast join (by handle).
#[derive(Default)]
struct Acked {
    events: u32,
    joins: HashMap<u32, u32>,
}

/// A handed-out event: the C structure first; private data points into `private_data`.
#[repr(C)]
struct EventPriv {
    event: rdma_cm_event,
    private_data: [u8; 256],
    id: *mut IdPriv,
    /// The multicast join the event is about.
    mc: Option<u32>,
}

/// Every id, by its daemon handle (as addresses: raw pointers are not `Send`).
static IDS: Mutex<Option<HashMap<u32, usize>>> = Mutex::new(None);

fn register(handle: u32, id: *mut IdPriv) {
    let mut ids = IDS.lock().unwrap_or_else(|e| e.into_inner());
    ids.get_or_insert_with(HashMap::new)
        .insert(handle, id as usize);
}

fn lookup(handle: u32) -> Option<*mut IdPriv> {
    let ids = IDS.lock().unwrap_or_else(|e| e.into_inner());
    ids.as_ref()?.get(&handle).map(|&p| p as *mut IdPriv)
}

fn unregister(handle: u32) {
    let mut ids = IDS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(ids) = ids.as_mut() {
        ids.remove(&handle);
    }
}

/// The private side of a program's id.
///
/// # Safety
/// `id` must be an id this library made and has not destroyed.
pub(crate) unsafe fn private<'a>(id: *mut rdma_cm_id) -> &'a mut IdPriv {
    &mut *id.cast::<IdPriv>()
}

fn qp_type_of(t: ibv_qp_type) -> Result<QpType, c_int> {
    convert::qp_type(t)
}

/// A new id on `channel` (a channel of its own if NULL) for the daemon's id `handle`, or a
/// new daemon id if `handle` is `None`.
unsafe fn make(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: rdma_port_space,
    qp_type: ibv_qp_type,
    handle: Option<u32>,
) -> Result<*mut IdPriv, c_int> {
    let t = qp_type_of(qp_type)?;
    let (channel, sync) = if channel.is_null() {
        (channel::open()?, true)
    } else {
        (channel, false)
    };
    let made = match handle {
        Some(h) => Ok(h),
        None => client(channel)
            .cm_create_id(ps as u16, t)
            .map_err(|e| errno_of("rdma_create_id", &e)),
    };
    let handle = match made {
        Ok(h) => h,
        Err(e) => {
            if sync {
                channel::close(channel);
            }
            return Err(e);
        }
    };
    let mut id: rdma_cm_id = std::mem::zeroed();
    id.channel = channel;
    id.context = context;
    id.ps = ps;
    id.qp_type = qp_type;
    let p = Box::into_raw(Box::new(IdPriv {
        id,
        handle,
        sync,
        connect_error: false,
        responder_resources: RDMA_MAX_RESP_RES,
        initiator_depth: RDMA_MAX_INIT_DEPTH,
        max_responder_resources: 0,
        max_initiator_depth: 0,
        qp_init_attr: None,
        path: std::mem::zeroed(),
        local_ece: std::mem::zeroed(),
        mcs: Mutex::new(Vec::new()),
        completed: Mutex::new(Acked::default()),
        acked: Condvar::new(),
        addrinfo: Mutex::new(Resolving::default()),
    }));
    register(handle, p);
    Ok(p)
}

/// `rdma_create_id` with an explicit QP type (`rdma_create_ep` uses the addrinfo's).
pub(crate) unsafe fn create(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: rdma_port_space,
    qp_type: ibv_qp_type,
) -> Result<*mut rdma_cm_id, c_int> {
    device::init()?;
    make(channel, context, ps, qp_type, None).map(|p| p.cast())
}

/// Sends an id's request, answered by Ok.
unsafe fn call(id: *mut rdma_cm_id, what: &str, req: Request) -> Result<(), c_int> {
    if !channel::is_open((*id).channel) {
        return Err(libc::EBADF);
    }
    client((*id).channel)
        .cm(req)
        .map_err(|e| errno_of(what, &e))
}

/// Copies the daemon's view of the id's addresses and route into `rdma_cm_id`, and binds it
/// to its device's context once it has one (rdma-core's `ucma_query_route`).
pub(crate) unsafe fn query_route(id: *mut rdma_cm_id) -> Result<(), c_int> {
    let p = private(id);
    let r = client((*id).channel)
        .cm_query(p.handle)
        .map_err(|e| errno_of("rdma_cm query", &e))?;
    let route = &mut p.id.route;
    if let Some(src) = r.src {
        route.addr.src.src_storage = sockaddr::write(src).0;
    }
    if let Some(dst) = r.dst {
        route.addr.dst.dst_storage = sockaddr::write(dst).0;
    }
    let ib = &mut route.addr.addr.ibaddr;
    ib.sgid.raw = r.sgid.0;
    ib.dgid.raw = r.dgid.0;
    ib.pkey = 0xffffu16.to_be();
    if let Some(name) = &r.device
        && p.id.verbs.is_null()
    {
        let (verbs, pd, max_resp, max_init) = device::by_name(name)?;
        p.id.verbs = verbs;
        p.id.pd = pd;
        p.id.port_num = 1;
        p.max_responder_resources = max_resp;
        p.max_initiator_depth = max_init;
    }
    if r.resolved {
        let path = &mut p.path;
        path.dgid.raw = r.dgid.0;
        path.sgid.raw = r.sgid.0;
        path.hop_limit = r.hop_limit;
        path.traffic_class = r.traffic_class;
        path.pkey = 0xffffu16.to_be();
        path.mtu = r.path_mtu;
        path.mtu_selector = 2; // exactly
        path.reversible = 1;
        path.numb_path = 1;
        path.rate = 3; // 10 Gb/s, what the kernel reports for RoCE over an unknown speed
        path.rate_selector = 2;
        path.packet_life_time = 16; // the kernel's CMA_IBOE_PACKET_LIFETIME
        path.packet_life_time_selector = 2;
        route.path_rec = &raw mut p.path;
        route.num_paths = 1;
    }
    Ok(())
}

/// For a synchronous id, waits for the event its call caused and keeps it in `id.event`;
/// its status is the call's (rdma-core's `ucma_complete`).
pub(crate) unsafe fn complete(id: *mut rdma_cm_id) -> Result<(), c_int> {
    let p = private(id);
    if !p.sync {
        return Ok(());
    }
    if !p.id.event.is_null() {
        ack(p.id.event);
        p.id.event = std::ptr::null_mut();
    }
    let event = channel::get_event(p.id.channel)?;
    p.id.event = event;
    let e = &*event;
    if e.status != 0 && std::env::var_os("SOFTRNIC_DEBUG").is_some() {
        eprintln!("softrnic: rdma_cm event {} status {}", e.event, e.status);
    }
    match e.status {
        0 => Ok(()),
        _ if e.event == RDMA_CM_EVENT_REJECTED => Err(libc::ECONNREFUSED),
        s => Err(s.abs()),
    }
}

/// Queues an event of the library's or the program's own on the id's channel.
pub(crate) unsafe fn write_event(
    id: *mut rdma_cm_id,
    event: rdma_cm_event_type,
    status: c_int,
    arg: u64,
) -> Result<(), c_int> {
    let handle = private(id).handle;
    let req = Request::CmWriteEvent {
        id: handle,
        event,
        status,
        arg,
    };
    call(id, "rdma_write_cm_event", req)
}

/// Moves the id's QP to the error state, if it has one.
unsafe fn qp_error(id: *mut rdma_cm_id) {
    let _ = qp::modify_err(id);
}

/// The daemon's connection parameters from `rdma_conn_param` (rdma-core's
/// `ucma_copy_conn_param_to_kern`).
unsafe fn to_daemon(
    p: &IdPriv,
    param: *const rdma_conn_param,
    qp_num: u32,
    srq: bool,
) -> ConnParam {
    let mut c = ConnParam {
        qp_num,
        srq,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    };
    if let Some(param) = param.as_ref() {
        c.flow_control = param.flow_control;
        c.retry_count = param.retry_count;
        c.rnr_retry_count = param.rnr_retry_count;
        if !param.private_data.is_null() && param.private_data_len > 0 {
            c.private_data = std::slice::from_raw_parts(
                param.private_data.cast::<u8>(),
                usize::from(param.private_data_len),
            )
            .to_vec();
        }
    }
    c
}

/// EINVAL for depths beyond the device's (rdma-core's `ucma_valid_param`, for RDMA_PS_TCP).
unsafe fn valid_param(p: &IdPriv, param: *const rdma_conn_param) -> Result<(), c_int> {
    if p.id.ps != RDMA_PS_TCP {
        return Ok(());
    }
    let Some(param) = param.as_ref() else {
        return if p.id.qp.is_null() {
            Err(libc::EINVAL)
        } else {
            Ok(())
        };
    };
    let too_deep = |v: u8, max: u8, all: u8| v != all && v > max;
    if too_deep(
        param.responder_resources,
        p.max_responder_resources,
        RDMA_MAX_RESP_RES,
    ) || too_deep(
        param.initiator_depth,
        p.max_initiator_depth,
        RDMA_MAX_INIT_DEPTH,
    ) {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// The READ/atomic depths a connection gets: those `param` names, else the defaults given
/// (0xff in `rdma_conn_param` means "the most").
unsafe fn set_depths(p: &mut IdPriv, param: *const rdma_conn_param, depth: u8, resources: u8) {
    let param = param.as_ref();
    p.initiator_depth = match param {
        Some(c) if c.initiator_depth != RDMA_MAX_INIT_DEPTH => c.initiator_depth,
        _ => depth,
    };
    p.responder_resources = match param {
        Some(c) if c.responder_resources != RDMA_MAX_RESP_RES => c.responder_resources,
        _ => resources,
    };
}

/// The QP number and SRQ flag a connection names: the id's QP, else the program's.
unsafe fn qp_of(id: &rdma_cm_id, param: *const rdma_conn_param) -> (u32, bool) {
    match (id.qp.as_ref(), param.as_ref()) {
        (Some(qp), _) => (qp.qp_num, !qp.srq.is_null()),
        (None, Some(p)) => (p.qp_num, p.srq != 0),
        (None, None) => (0, false),
    }
}

/// The active side got its REP: its QP to RTR and RTS, then the RTU (rdma-core's
/// `ucma_process_conn_resp`). On failure the QP goes to the error state.
unsafe fn process_conn_resp(id: *mut rdma_cm_id) -> Result<(), c_int> {
    let p = private(id);
    let done = qp::modify_rtr(id, RDMA_MAX_RESP_RES)
        .and_then(|()| qp::modify_rts(id, RDMA_MAX_INIT_DEPTH))
        .and_then(|()| {
            call(
                id,
                "rdma_connect (RTU)",
                Request::CmAccept {
                    id: p.handle,
                    param: ConnParam::default(),
                },
            )
        });
    if done.is_err() {
        qp_error(id);
    }
    done
}

/// Turns a daemon event into the program's, doing the library's share first; `None` for one
/// the program does not see.
pub(crate) unsafe fn event(ev: CmEvent) -> Result<Option<*mut rdma_cm_event>, c_int> {
    let listen = ev.listen.and_then(lookup);
    let target = match (ev.event, listen) {
        (RDMA_CM_EVENT_CONNECT_REQUEST, Some(l)) => {
            // A new id for the new connection, on the listener's channel.
            let l = &*l;
            make(
                l.id.channel,
                l.id.context,
                l.id.ps,
                l.id.qp_type,
                Some(ev.id),
            )?
        }
        (RDMA_CM_EVENT_CONNECT_REQUEST, None) => return Ok(None),
        _ => match lookup(ev.id) {
            Some(p) => p,
            // An id destroyed while its event was on the way.
            None => return Ok(None),
        },
    };
    let id = target.cast::<rdma_cm_id>();
    let p = &mut *target;
    // A connection request is acknowledged for its listener (rdma_ucm counts it there).
    let e = Box::into_raw(Box::new(EventPriv {
        event: std::mem::zeroed(),
        private_data: [0; 256],
        id: listen.unwrap_or(target),
        mc: ev.mc,
    }));
    let out = &mut *e;
    out.event.id = id;
    out.event.event = ev.event;
    out.event.status = ev.status;
    let n = ev.param.private_data.len().min(out.private_data.len());
    out.private_data[..n].copy_from_slice(&ev.param.private_data[..n]);
    let data = if n > 0 {
        out.private_data.as_ptr().cast()
    } else {
        std::ptr::null()
    };
    let ud = p.id.qp_type == IBV_QPT_UD;
    if ud {
        let u = &mut out.event.param.ud;
        u.private_data = data;
        u.private_data_len = n as u8;
        if let Some(ah) = &ev.ah {
            u.ah_attr = convert::ah_attr(ah);
        }
        u.qp_num = ev.param.qp_num;
        u.qkey = ev.param.qkey;
    } else {
        let c = &mut out.event.param.conn;
        c.private_data = data;
        c.private_data_len = n as u8;
        c.responder_resources = ev.param.responder_resources;
        c.initiator_depth = ev.param.initiator_depth;
        c.flow_control = ev.param.flow_control;
        c.retry_count = ev.param.retry_count;
        c.rnr_retry_count = ev.param.rnr_retry_count;
        c.srq = u8::from(ev.param.srq);
        c.qp_num = ev.param.qp_num;
    }
    let skip = match ev.event {
        RDMA_CM_EVENT_ADDR_RESOLVED | RDMA_CM_EVENT_ROUTE_RESOLVED => {
            query_route(id).map(|()| false).unwrap_or_else(|errno| {
                out.event.event = if ev.event == RDMA_CM_EVENT_ADDR_RESOLVED {
                    RDMA_CM_EVENT_ADDR_ERROR
                } else {
                    RDMA_CM_EVENT_ROUTE_ERROR
                };
                out.event.status = -errno;
                false
            })
        }
        RDMA_CM_EVENT_CONNECT_REQUEST => {
            out.event.listen_id = listen.expect("checked").cast();
            p.responder_resources = ev.param.responder_resources;
            p.initiator_depth = ev.param.initiator_depth;
            let l = &*listen.expect("checked");
            let moved = if l.sync {
                // A synchronous listener's requests get channels of their own.
                migrate(id, std::ptr::null_mut())
            } else {
                Ok(())
            };
            if moved.and_then(|()| query_route(id)).is_err() {
                // As rdma-core's `ucma_process_conn_req`: the new id goes, and the program
                // waits for the next event. The request is acknowledged for the listener,
                // whose destroy waits for it.
                destroy(id);
                ack(&raw mut out.event);
                return Ok(None);
            }
            false
        }
        RDMA_CM_EVENT_CONNECT_RESPONSE => {
            p.responder_resources = ev.param.responder_resources;
            p.initiator_depth = ev.param.initiator_depth;
            if !p.id.qp.is_null() {
                match process_conn_resp(id) {
                    Ok(()) => out.event.event = RDMA_CM_EVENT_ESTABLISHED,
                    Err(errno) => {
                        out.event.event = RDMA_CM_EVENT_CONNECT_ERROR;
                        out.event.status = -errno;
                        p.connect_error = true;
                    }
                }
            }
            false
        }
        RDMA_CM_EVENT_MULTICAST_JOIN | RDMA_CM_EVENT_MULTICAST_ERROR => {
            crate::multicast::process(id, &mut out.event, ev.mc)
        }
        RDMA_CM_EVENT_USER => {
            out.event.param.arg = ev.arg;
            false
        }
        RDMA_CM_EVENT_REJECTED | RDMA_CM_EVENT_DISCONNECTED if p.connect_error => true,
        RDMA_CM_EVENT_REJECTED => {
            qp_error(id);
            false
        }
        _ => false,
    };
    // The daemon counted the event as read: an absorbed one is acknowledged here.
    if skip {
        ack(&raw mut out.event);
        return Ok(None);
    }
    Ok(Some(&raw mut out.event))
}

/// `rdma_ack_cm_event`: frees the event and counts it for its id.
pub(crate) unsafe fn ack(event: *mut rdma_cm_event) {
    let e = Box::from_raw(event.cast::<EventPriv>());
    let p = &*e.id;
    let mut done = p.completed.lock().unwrap_or_else(|x| x.into_inner());
    done.events += 1;
    if let Some(mc) = e.mc {
        *done.joins.entry(mc).or_default() += 1;
    }
    p.acked.notify_all();
}

/// Waits until the program has acknowledged `reported` events of the id.
unsafe fn wait_acked(p: &IdPriv, reported: u32) {
    let mut done = p.completed.lock().unwrap_or_else(|x| x.into_inner());
    while done.events < reported {
        done = p.acked.wait(done).unwrap_or_else(|x| x.into_inner());
    }
}

/// Waits until the program has acknowledged `reported` events of multicast join `mc`, and
/// forgets the join.
pub(crate) unsafe fn wait_acked_join(p: &IdPriv, mc: u32, reported: u32) {
    let mut done = p.completed.lock().unwrap_or_else(|x| x.into_inner());
    while done.joins.get(&mc).copied().unwrap_or(0) < reported {
        done = p.acked.wait(done).unwrap_or_else(|x| x.into_inner());
    }
    done.joins.remove(&mc);
}

/// Lets the id go in the daemon and here (rdma-core's `rdma_destroy_id`).
pub(crate) unsafe fn destroy(id: *mut rdma_cm_id) -> c_int {
    let p = private(id);
    // rdma-core's rdma_destroy_id writes to the channel's fd: with the channel closed it
    // fails with EBADF, and the id is lost.
    if !channel::is_open(p.id.channel) {
        return fail(libc::EBADF);
    }
    let reported = match client(p.id.channel).cm_destroy_id(p.handle) {
        Ok(n) => n,
        Err(e) => return fail(errno_of("rdma_destroy_id", &e)),
    };
    if !p.id.event.is_null() {
        ack(p.id.event);
        p.id.event = std::ptr::null_mut();
    }
    // The id stays findable until the events the daemon handed out are acknowledged, as
    // rdma-core's id stays valid: another thread may have read one and be about to look its
    // id up (it would drop the event, unacknowledged, and this wait would never end).
    wait_acked(p, reported);
    unregister(p.handle);
    let resolved = p
        .addrinfo
        .get_mut()
        .unwrap_or_else(|x| x.into_inner())
        .ai
        .take();
    if let Some(ai) = resolved {
        crate::addrinfo::rdma_freeaddrinfo(ai.as_ptr());
    }
    if p.sync {
        channel::close(p.id.channel);
    }
    drop(Box::from_raw(id.cast::<IdPriv>()));
    0
}

/// Moves the id to `channel`, or to a new channel of its own (NULL): rdma-core's
/// `rdma_migrate_id`.
pub(crate) unsafe fn migrate(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> Result<(), c_int> {
    let p = private(id);
    if p.sync && channel.is_null() {
        return Err(libc::EINVAL);
    }
    let sync = channel.is_null();
    let channel = if sync { channel::open()? } else { channel };
    // The connection is let go first: closing the channel waits for it.
    let migrated = client(channel).cm_migrate(p.handle);
    let reported = match migrated {
        Ok(n) => n,
        Err(e) => {
            if sync {
                channel::close(channel);
            }
            return Err(errno_of("rdma_migrate_id", &e));
        }
    };
    if p.sync {
        if !p.id.event.is_null() {
            ack(p.id.event);
            p.id.event = std::ptr::null_mut();
        }
        channel::close(p.id.channel);
    }
    p.sync = sync;
    p.id.channel = channel;
    wait_acked(p, reported);
    Ok(())
}

/// 0, or -1 with errno.
fn result(r: Result<(), c_int>) -> c_int {
    r.map_or_else(fail, |()| 0)
}

exported! {
    /// `rdma_create_id`: RDMA_PS_UDP and RDMA_PS_IPOIB ids are UD, the others RC.
    fn rdma_create_id(
        channel: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: rdma_port_space,
    ) -> c_int {
        if id.is_null() {
            return fail(libc::EINVAL);
        }
        let qp_type = if ps == RDMA_PS_IPOIB || ps == RDMA_PS_UDP {
            IBV_QPT_UD
        } else {
            IBV_QPT_RC
        };
        match create(channel, context, ps, qp_type) {
            Ok(made) => {
                *id = made;
                0
            }
            Err(e) => fail(e),
        }
    }

    /// `rdma_destroy_id`: waits until the program has acknowledged the id's events.
    fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
        if id.is_null() {
            return fail(libc::EINVAL);
        }
        destroy(id)
    }

    /// `rdma_bind_addr`.
    fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
        let addr = match sockaddr::read(addr) {
            Ok(a) => a,
            Err(e) => return fail(e),
        };
        let handle = private(id).handle;
        result(
            call(id, "rdma_bind_addr", Request::CmBind { id: handle, addr })
                .and_then(|()| query_route(id)),
        )
    }

    /// `rdma_resolve_addr`.
    fn rdma_resolve_addr(
        id: *mut rdma_cm_id,
        src_addr: *mut libc::sockaddr,
        dst_addr: *mut libc::sockaddr,
        timeout_ms: c_int,
    ) -> c_int {
        let dst = match sockaddr::read(dst_addr) {
            Ok(a) => a,
            Err(_) => return fail(libc::EINVAL),
        };
        let src = if src_addr.is_null() {
            None
        } else {
            match sockaddr::read(src_addr) {
                Ok(a) => Some(a),
                Err(_) => return fail(libc::EINVAL),
            }
        };
        let p = private(id);
        p.id.route.addr.dst.dst_storage = sockaddr::write(dst).0;
        let req = Request::CmResolveAddr {
            id: p.handle,
            src,
            dst,
            timeout_ms: timeout_ms.max(0) as u32,
        };
        result(call(id, "rdma_resolve_addr", req).and_then(|()| complete(id)))
    }

    /// `rdma_resolve_route`.
    fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
        let _ = timeout_ms;
        let handle = private(id).handle;
        result(
            call(id, "rdma_resolve_route", Request::CmResolveRoute(handle))
                .and_then(|()| complete(id)),
        )
    }

    /// `rdma_listen`.
    fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
        let handle = private(id).handle;
        let req = Request::CmListen {
            id: handle,
            backlog: backlog.max(0) as u32,
        };
        result(call(id, "rdma_listen", req).and_then(|()| query_route(id)))
    }

    /// `rdma_get_request`: the next connection request of a synchronous listener, with a QP
    /// made for it if `rdma_create_ep` was given QP attributes.
    fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
        let l = private(listen);
        if !l.sync {
            return fail(libc::EINVAL);
        }
        if !l.id.event.is_null() {
            ack(l.id.event);
            l.id.event = std::ptr::null_mut();
        }
        let event = match channel::get_event(l.id.channel) {
            Ok(e) => e,
            Err(e) => return fail(e),
        };
        let e = &*event;
        let refused = if e.event == RDMA_CM_EVENT_REJECTED {
            Some(libc::ECONNREFUSED)
        } else if e.status != 0 {
            Some(e.status.abs())
        } else if e.event != RDMA_CM_EVENT_CONNECT_REQUEST {
            Some(libc::EINVAL)
        } else {
            None
        };
        if let Some(errno) = refused {
            l.id.event = event;
            return fail(errno);
        }
        if let Some(attr) = l.qp_init_attr.as_deref() {
            let mut attr = *attr;
            if crate::qp::rdma_create_qp(e.id, l.id.pd, &mut attr) != 0 {
                l.id.event = event;
                return -1;
            }
        }
        *id = e.id;
        (*e.id).event = event;
        0
    }

    /// `rdma_connect`.
    fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
        let p = private(id);
        if let Err(e) = valid_param(p, conn_param) {
            return fail(e);
        }
        // Unless named, the device's most (rdma-core's `rdma_connect`).
        set_depths(p, conn_param, p.max_initiator_depth, p.max_responder_resources);
        let (qp_num, srq) = qp_of(&p.id, conn_param);
        let param = to_daemon(p, conn_param, qp_num, srq);
        let req = Request::CmConnect { id: p.handle, param };
        result(call(id, "rdma_connect", req).and_then(|()| complete(id)))
    }

    /// `rdma_accept`: the QP to RTR and RTS first (not UD), then the REP (or SIDR_REP).
    fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
        let p = private(id);
        if let Err(e) = valid_param(p, conn_param) {
            return fail(e);
        }
        // Unless named, what the request asked for, within the device's limits.
        let depth = p.initiator_depth.min(p.max_initiator_depth);
        let resources = p.responder_resources.min(p.max_responder_resources);
        set_depths(p, conn_param, depth, resources);
        let ud = p.id.qp_type == IBV_QPT_UD;
        if !ud {
            let ready = qp::modify_rtr(id, p.responder_resources)
                .and_then(|()| qp::modify_rts(id, p.initiator_depth));
            if let Err(e) = ready {
                return fail(e);
            }
        }
        let (qp_num, srq) = qp_of(&p.id, conn_param);
        let mut param = to_daemon(p, conn_param, qp_num, srq);
        if ud {
            param.qkey = RDMA_UDP_QKEY;
        }
        let req = Request::CmAccept { id: p.handle, param };
        if let Err(e) = call(id, "rdma_accept", req) {
            qp_error(id);
            return fail(e);
        }
        if ud {
            if p.sync && !p.id.event.is_null() {
                ack(p.id.event);
                p.id.event = std::ptr::null_mut();
            }
            return 0;
        }
        result(complete(id))
    }

    /// `rdma_reject`.
    fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int {
        let p = private(id);
        let data = if private_data.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(private_data.cast::<u8>(), usize::from(private_data_len))
                .to_vec()
        };
        let req = Request::CmReject {
            id: p.handle,
            private_data: data,
        };
        result(call(id, "rdma_reject", req))
    }

    /// `rdma_reject_ece`: as `rdma_reject` (softrnic's QPs have no ECE options to refuse).
    fn rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int {
        rdma_reject(id, private_data, private_data_len)
    }

    /// `rdma_notify`: IBV_EVENT_COMM_EST establishes a connection whose RTU is late.
    fn rdma_notify(id: *mut rdma_cm_id, event: ibv_event_type) -> c_int {
        if event != IBV_EVENT_COMM_EST {
            return 0;
        }
        let handle = private(id).handle;
        result(call(id, "rdma_notify", Request::CmNotify(handle)))
    }

    /// `rdma_write_cm_event` (rdma-core 65): a USER event, with `status` and `arg`, on the id's
    /// channel (EINVAL for any other kind).
    fn rdma_write_cm_event(id: *mut rdma_cm_id, event: rdma_cm_event_type, status: c_int, arg: u64) -> c_int {
        if id.is_null() || event != RDMA_CM_EVENT_USER {
            return fail(libc::EINVAL);
        }
        result(write_event(id, event, status, arg))
    }

    /// `rdma_disconnect`: the QP to the error state, then the DREQ (or the DREP).
    fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
        qp_error(id);
        let handle = private(id).handle;
        result(call(id, "rdma_disconnect", Request::CmDisconnect(handle)).and_then(|()| complete(id)))
    }

    /// `rdma_establish`: the RTU, for an active id without a QP (after CONNECT_RESPONSE).
    fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
        if !(*id).qp.is_null() {
            return fail(libc::EINVAL);
        }
        result(process_conn_resp(id))
    }

    /// `rdma_migrate_id`.
    fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
        result(migrate(id, channel))
    }

    /// `rdma_set_option`: TOS, REUSEADDR, AFONLY and ACK timeout; IB paths are for AF_IB.
    fn rdma_set_option(
        id: *mut rdma_cm_id,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: usize,
    ) -> c_int {
        if optval.is_null() {
            return fail(libc::EINVAL);
        }
        let int = || (optlen == size_of::<c_int>()).then(|| *optval.cast::<c_int>());
        let byte = || (optlen == 1).then(|| *optval.cast::<u8>());
        let option = match (level, optname) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => byte().map(CmOption::Tos),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => int().map(|v| CmOption::ReuseAddr(v != 0)),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => int().map(|v| CmOption::AfOnly(v != 0)),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => byte().map(CmOption::AckTimeout),
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => return fail(libc::ENOSYS),
            _ => return fail(libc::ENOSYS),
        };
        let Some(option) = option else {
            return fail(libc::EINVAL);
        };
        let handle = private(id).handle;
        result(call(id, "rdma_set_option", Request::CmSetOption { id: handle, option }))
    }

    /// `rdma_get_src_port`: the local port, in network order.
    fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
        port(&(*id).route.addr.src.src_storage)
    }

    /// `rdma_get_dst_port`.
    fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
        port(&(*id).route.addr.dst.dst_storage)
    }

    /// `rdma_init_qp_attr`.
    fn rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut ibv_qp_attr, qp_attr_mask: *mut c_int) -> c_int {
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return fail(libc::EINVAL);
        }
        match qp::init_attr(id, (*qp_attr).qp_state) {
            Ok((attr, mask)) => {
                *qp_attr = attr;
                *qp_attr_mask = mask;
                0
            }
            Err(e) => fail(e),
        }
    }

    /// `rdma_set_local_ece`: kept for the connection (softrnic's QPs have no ECE options).
    fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
        if id.is_null() || !(*id).qp.is_null() || ece.is_null() || (*ece).vendor_id == 0 || (*ece).comp_mask != 0 {
            return fail(libc::EINVAL);
        }
        private(id).local_ece = *ece;
        0
    }

    /// `rdma_get_remote_ece`: the peer sent none (softrnic's CM carries no ECE).
    fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
        if id.is_null() || ece.is_null() {
            return fail(libc::EINVAL);
        }
        *ece = std::mem::zeroed();
        0
    }
}

/// The port of a socket address, in network order (0 for another family).
fn port(s: &libc::sockaddr_storage) -> u16 {
    // SAFETY: a storage holds any address; only its own family's fields are read.
    unsafe { sockaddr::read((s as *const libc::sockaddr_storage).cast()) }
        .map_or(0, |a| a.port().to_be())
}
