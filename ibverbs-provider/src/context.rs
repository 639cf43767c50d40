//! A device context: `ibv_open_device` connects to the daemon and opens the device on that
//! connection; the queries; async events.

use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use softrnic_client::client::{Client, Error, Object};
use softrnic_client::proto::default_socket;
use softrnic_emu_core::{DeviceAttr, Event, Gid};

use crate::abi::*;
use crate::device::Device;
use crate::{cq, memory, qp, set_errno, xrc};

/// What the context's calls share, behind its lock.
pub struct State {
    /// The connection to the daemon; it keeps the address of each QP, SRQ and CQ's C
    /// structure with the object ([`Object`]), for the events that name it.
    pub client: Client,
    /// Whether IBV_EVENT_DEVICE_FATAL was given (once the daemon is gone).
    pub fatal_reported: bool,
    /// The SGE list of the work request being posted, kept for the next.
    pub sgl: Vec<softrnic_emu_core::Sge>,
}

/// A device context. `verbs_context` comes first, and `ibv_context` is its last member, so the
/// pointer programs hold leads back here.
#[repr(C)]
pub struct Context {
    /// What the program and libibverbs' inline functions read.
    pub vctx: verbs_context,
    /// The device.
    pub device: *mut Device,
    /// The device's attributes (fixed for its life).
    pub attr: DeviceAttr,
    state: Mutex<State>,
    /// Threads in `ibv_get_async_event`, which `ibv_close_device` wakes and waits out before
    /// it frees the context.
    waiting: AtomicUsize,
    closing: AtomicBool,
}

impl Context {
    /// The context behind a program's `ibv_context` pointer.
    ///
    /// # Safety
    /// `ctx` must come from [`ibv_open_device`] and not be closed.
    pub unsafe fn from_ibv<'a>(ctx: *mut ibv_context) -> &'a Context {
        &*ctx
            .cast::<u8>()
            .sub(offset_of!(verbs_context, context))
            .cast::<Context>()
    }

    /// The program's pointer.
    pub fn ibv(&self) -> *mut ibv_context {
        ptr::addr_of!(self.vctx.context).cast_mut()
    }

    /// The shared state; a thread that panicked while holding it left nothing half-done that
    /// matters more than going on.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs a call on the client, mapping a refusal to its errno (logged with `SOFTRNIC_DEBUG`).
    pub fn call<T>(
        &self,
        name: &str,
        f: impl FnOnce(&mut Client) -> Result<T, Error>,
    ) -> Result<T, c_int> {
        f(&mut self.lock().client).map_err(|e| crate::fail(name, &e))
    }

    /// Destroys an object: `release` tells the daemon (and forgets the object's handle), then
    /// its C structure is freed. 0, or the errno.
    ///
    /// # Safety
    /// `object` must come from `Box::into_raw` and not be used again after success.
    pub unsafe fn destroy<T>(
        &self,
        name: &str,
        object: *mut T,
        release: impl FnOnce(&mut State) -> Result<(), Error>,
    ) -> c_int {
        let released = release(&mut self.lock()).map_err(|e| crate::fail(name, &e));
        crate::free_after(released, object)
    }

    /// The GID table.
    pub fn gids(&self) -> Result<Vec<Gid>, c_int> {
        self.call("query_gid", Client::gids)
    }
}

/// Opens `device`: a new connection to the daemon, and the permission for the daemon to reach
/// this process's memory.
fn open(device: *mut Device) -> Result<*mut Context, Error> {
    // SAFETY: programs pass devices from ibv_get_device_list, which are never freed.
    let name = unsafe { (*device).name() };
    let mut client = Client::connect(&default_socket())?;
    // Under Yama's ptrace_scope 1, the daemon's opening of /proc/PID/mem when the device opens
    // (and its process_vm_readv) needs this; without Yama the call fails with EINVAL and
    // nothing is needed.
    // SAFETY: no pointers.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, client.daemon_pid() as libc::c_ulong) };
    client.open(&name)?;
    let attr = client.query_device()?;
    let cmd_fd = client.socket_fd();
    let async_fd = client.async_fd().unwrap_or(-1);
    let ctx = Box::into_raw(Box::new(Context {
        // SAFETY: verbs_context is plain data: integers, pointers and nullable function
        // pointers; an all-zero pthread mutex is PTHREAD_MUTEX_INITIALIZER in glibc.
        vctx: unsafe { std::mem::zeroed() },
        device,
        attr,
        state: Mutex::new(State {
            client,
            fatal_reported: false,
            sgl: Vec::new(),
        }),
        waiting: AtomicUsize::new(0),
        closing: AtomicBool::new(false),
    }));
    // SAFETY: just allocated.
    let v = unsafe { &mut (*ctx).vctx };
    v.sz = size_of::<verbs_context>();
    v.query_port = Some(query_port_ex);
    v.query_device_ex = Some(query_device_ex);
    v.create_cq_ex = Some(cq::create_cq_ex);
    v.create_qp_ex = Some(qp::create_qp_ex);
    v.open_xrcd = Some(xrc::open_xrcd);
    v.close_xrcd = Some(xrc::close_xrcd);
    v.create_srq_ex = Some(xrc::create_srq_ex);
    v.get_srq_num = Some(xrc::get_srq_num);
    v.open_qp = Some(xrc::open_qp);
    let c = &mut v.context;
    c.device = device.cast();
    c.cmd_fd = cmd_fd;
    c.async_fd = async_fd;
    c.num_comp_vectors = 1;
    c.abi_compat = VERBS_ABI_IS_EXTENDED as *mut c_void;
    c.ops.poll_cq = Some(cq::poll_cq);
    c.ops.req_notify_cq = Some(cq::req_notify_cq);
    c.ops.post_send = Some(qp::post_send);
    c.ops.post_recv = Some(qp::post_recv);
    c.ops.post_srq_recv = Some(qp::post_srq_recv);
    c.ops.alloc_mw = Some(memory::alloc_mw);
    c.ops.dealloc_mw = Some(memory::dealloc_mw);
    c.ops.bind_mw = Some(memory::bind_mw);
    Ok(ctx)
}

/// The port attributes: rxe's for a RoCE port.
fn port_attr(ctx: &Context) -> Result<ibv_port_attr, c_int> {
    let p = ctx.call("query_port", Client::query_port)?;
    // SAFETY: plain data.
    let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
    a.state = p.state as u32;
    a.max_mtu = p.max_mtu as u32;
    a.active_mtu = p.active_mtu as u32;
    a.gid_tbl_len = p.gid_tbl_len as c_int;
    a.port_cap_flags = IBV_PORT_CM_SUP;
    a.max_msg_sz = p.max_msg_sz;
    a.pkey_tbl_len = p.pkey_tbl_len;
    a.max_vl_num = 1;
    a.active_width = 1; // 1X
    a.active_speed = 1; // 2.5 Gb/s, as rxe reports
    a.phys_state = if p.state as u32 == IBV_PORT_ACTIVE {
        5 // LinkUp
    } else {
        3 // Disabled
    };
    a.link_layer = IBV_LINK_LAYER_ETHERNET;
    // RoCE has no LIDs: address vectors need a GRH (rdma-core reads this flag).
    a.flags = IBV_QPF_GRH_REQUIRED as u8;
    Ok(a)
}

/// `verbs_context.query_port`: `size` is the program's `sizeof(struct ibv_port_attr)`, shorter
/// from an older header, longer from a newer one (`active_speed_ex`, and members to come,
/// which read as zero).
unsafe extern "C" fn query_port_ex(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    size: usize,
) -> c_int {
    if port_num != 1 || port_attr.is_null() {
        return libc::EINVAL;
    }
    match self::port_attr(Context::from_ibv(context)) {
        Ok(attr) => {
            let a = ibv_port_attr_newer {
                active_speed_ex: u32::from(attr.active_speed),
                attr,
            };
            fill(port_attr.cast(), size, &a);
            0
        }
        Err(e) => e,
    }
}

/// Copies `value` into the program's `size`-byte structure at `dst`: as much of it as fits,
/// and zeros in whatever a newer header has beyond it.
unsafe fn fill<T: Copy>(dst: *mut u8, size: usize, value: &T) {
    ptr::write_bytes(dst, 0, size);
    let n = size.min(size_of::<T>());
    ptr::copy_nonoverlapping(ptr::from_ref(value).cast::<u8>(), dst, n);
}

/// The device attributes, rxe's flags.
fn device_attr(ctx: &Context) -> ibv_device_attr {
    let d = &ctx.attr;
    // SAFETY: plain data.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    let fw = softrnic_client::proto::FW_VER.bytes().chain([0]);
    for (dst, b) in a.fw_ver.iter_mut().zip(fw) {
        *dst = b as _;
    }
    // SAFETY: the device outlives every context.
    let guid = unsafe { (*ctx.device).guid };
    a.node_guid = guid;
    a.sys_image_guid = guid;
    a.max_mr_size = d.max_mr_size;
    a.page_size_cap = d.page_size_cap;
    a.vendor_id = d.vendor_id;
    a.hw_ver = d.hw_ver;
    a.max_qp = d.max_qp as c_int;
    a.max_qp_wr = d.max_qp_wr as c_int;
    a.device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR
        | IBV_DEVICE_BAD_QKEY_CNTR
        | IBV_DEVICE_AUTO_PATH_MIG
        | IBV_DEVICE_CHANGE_PHY_PORT
        | IBV_DEVICE_UD_AV_PORT_ENFORCE
        | IBV_DEVICE_PORT_ACTIVE_EVENT
        | IBV_DEVICE_SYS_IMAGE_GUID
        | IBV_DEVICE_RC_RNR_NAK_GEN
        | IBV_DEVICE_MEM_WINDOW
        | IBV_DEVICE_MEM_MGT_EXTENSIONS
        | IBV_DEVICE_MEM_WINDOW_TYPE_2B
        | IBV_DEVICE_XRC;
    a.max_sge = d.max_sge as c_int;
    a.max_sge_rd = d.max_sge as c_int;
    a.max_cq = d.max_cq as c_int;
    a.max_cqe = d.max_cqe as c_int;
    a.max_mr = d.max_mr as c_int;
    a.max_pd = d.max_pd as c_int;
    a.max_qp_rd_atom = d.max_qp_rd_atom as c_int;
    a.max_res_rd_atom = (d.max_qp_rd_atom * d.max_qp) as c_int;
    a.max_qp_init_rd_atom = d.max_qp_init_rd_atom as c_int;
    a.atomic_cap = d.atomic_cap;
    a.max_mw = d.max_mw as c_int;
    a.max_ah = d.max_qp as c_int;
    a.max_srq = d.max_srq as c_int;
    a.max_srq_wr = d.max_srq_wr as c_int;
    a.max_srq_sge = d.max_srq_sge as c_int;
    a.max_mcast_grp = d.max_mcast_grp as c_int;
    a.max_mcast_qp_attach = d.max_mcast_qp_attach as c_int;
    a.max_total_mcast_qp_attach = d.max_total_mcast_qp_attach as c_int;
    a.max_pkeys = d.max_pkeys;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = d.phys_port_cnt;
    a
}

/// `verbs_context.query_device_ex`.
unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    size: usize,
) -> c_int {
    if attr.is_null() || (!input.is_null() && (*input).comp_mask != 0) {
        return libc::EINVAL;
    }
    let ctx = Context::from_ibv(context);
    // SAFETY: plain data.
    let mut a: ibv_device_attr_ex = std::mem::zeroed();
    a.orig_attr = device_attr(ctx);
    a.phys_port_cnt_ex = u32::from(a.orig_attr.phys_port_cnt);
    // As the kernel reports them: every flag, the classic ones in the low 32 bits. Persistent
    // flushes are not offered: no region here is persistent memory.
    a.device_cap_flags_ex = u64::from(a.orig_attr.device_cap_flags)
        | IB_UVERBS_DEVICE_FLUSH_GLOBAL
        | IB_UVERBS_DEVICE_ATOMIC_WRITE;
    fill(attr.cast(), size, &a);
    0
}

/// The `ibv_async_event` for an engine event, if its object still exists.
fn async_event(c: &Client, e: Event) -> Option<ibv_async_event> {
    // SAFETY: plain data.
    let mut out: ibv_async_event = unsafe { std::mem::zeroed() };
    let qp = |qpn| c.owner(Object::Qp(qpn)).map(|p| p as *mut ibv_qp);
    match e {
        Event::Completion { .. } => return None,
        Event::CqError { cq } => {
            out.element.cq = c.owner(Object::Cq(cq))? as *mut ibv_cq;
            out.event_type = IBV_EVENT_CQ_ERR;
        }
        Event::CommEstablished { qpn } => {
            out.element.qp = qp(qpn)?;
            out.event_type = IBV_EVENT_COMM_EST;
        }
        Event::SqDrained { qpn } => {
            out.element.qp = qp(qpn)?;
            out.event_type = IBV_EVENT_SQ_DRAINED;
        }
        Event::LastWqeReached { qpn } => {
            out.element.qp = qp(qpn)?;
            out.event_type = IBV_EVENT_QP_LAST_WQE_REACHED;
        }
        Event::QpFatal { qpn } => {
            out.element.qp = qp(qpn)?;
            out.event_type = IBV_EVENT_QP_FATAL;
        }
        Event::SrqLimitReached { srq } => {
            let p = c.owner(Object::Srq(srq))? as *mut qp::Srq;
            // SAFETY: SRQs in the table are alive; the limit disarmed when it fired.
            unsafe { (*p).limit = 0 };
            out.element.srq = p.cast();
            out.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
        }
    }
    Some(out)
}

exported! {
    /// `ibv_open_device`.
    fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
        if device.is_null() {
            set_errno(libc::EINVAL);
            return ptr::null_mut();
        }
        match open(device.cast()) {
            // SAFETY: just made.
            Ok(ctx) => (*ctx).ibv(),
            Err(e) => crate::fail_null("ibv_open_device", &e),
        }
    }

    /// `ibv_close_device`: the connection closes, and the daemon frees what is left.
    fn ibv_close_device(context: *mut ibv_context) -> c_int {
        if context.is_null() {
            return libc::EINVAL;
        }
        let c = Context::from_ibv(context);
        // A thread blocked in ibv_get_async_event must leave before the context goes: the
        // daemon, hung up on, closes the async pipe's write end, and the wait ends with EIO.
        // (rdma-core's wait would read on and then use the freed context.)
        c.closing.store(true, Ordering::SeqCst);
        if c.waiting.load(Ordering::SeqCst) > 0 {
            c.lock().client.hang_up();
            while c.waiting.load(Ordering::SeqCst) > 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let ctx = (c as *const Context).cast_mut();
        drop(Box::from_raw(ctx));
        0
    }

    /// `ibv_query_device`.
    fn ibv_query_device(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int {
        if context.is_null() || device_attr.is_null() {
            return libc::EINVAL;
        }
        *device_attr = self::device_attr(Context::from_ibv(context));
        0
    }

    /// `ibv_query_port` as linked (programs compiled against rdma-core call the
    /// `verbs_context` entry instead): the layout before `port_cap_flags2`.
    fn ibv_query_port(context: *mut ibv_context, port_num: u8, port_attr: *mut ibv_port_attr) -> c_int {
        query_port_ex(context, port_num, port_attr, offset_of!(ibv_port_attr, port_cap_flags2))
    }

    /// `ibv_query_gid`: an empty entry reads as zeros; -1 on failure, as rdma-core.
    fn ibv_query_gid(context: *mut ibv_context, port_num: u8, index: c_int, gid: *mut ibv_gid) -> c_int {
        if context.is_null() || gid.is_null() || port_num != 1 || index < 0 {
            return -1;
        }
        let ctx = Context::from_ibv(context);
        if index as u32 >= port_attr(ctx).map_or(0, |a| a.gid_tbl_len as u32) {
            return -1;
        }
        match ctx.gids() {
            Ok(gids) => {
                (*gid).raw = gids.get(index as usize).map_or([0; 16], |g| g.0);
                0
            }
            Err(_) => -1,
        }
    }

    /// `ibv_query_gid_ex`: a RoCE v2 entry on the device's interface; ENODATA for an empty one.
    fn _ibv_query_gid_ex(
        context: *mut ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> c_int {
        if context.is_null() || entry.is_null() || flags != 0 || port_num != 1
            || entry_size < size_of::<ibv_gid_entry>()
        {
            return libc::EINVAL;
        }
        let ctx = Context::from_ibv(context);
        let gids = match ctx.gids() {
            Ok(g) => g,
            Err(e) => return e,
        };
        match gids.get(gid_index as usize) {
            Some(g) => {
                *entry = gid_entry(ctx, gid_index, *g);
                0
            }
            None if (gid_index as usize) < 1024 => libc::ENODATA,
            None => libc::EINVAL,
        }
    }

    /// `ibv_query_gid_table`: the valid entries; returns how many.
    fn _ibv_query_gid_table(
        context: *mut ibv_context,
        entries: *mut ibv_gid_entry,
        max_entries: usize,
        flags: u32,
        entry_size: usize,
    ) -> isize {
        if context.is_null() || (entries.is_null() && max_entries > 0) || flags != 0
            || entry_size < size_of::<ibv_gid_entry>()
        {
            return -(libc::EINVAL as isize);
        }
        let ctx = Context::from_ibv(context);
        let gids = match ctx.gids() {
            Ok(g) => g,
            Err(e) => return -(e as isize),
        };
        if gids.len() > max_entries {
            return -(libc::EINVAL as isize);
        }
        for (i, g) in gids.iter().enumerate() {
            entries.cast::<u8>().add(i * entry_size).cast::<ibv_gid_entry>()
                .write(gid_entry(ctx, i as u32, *g));
        }
        gids.len() as isize
    }

    /// `ibv_query_pkey`: the one default P_Key.
    fn ibv_query_pkey(context: *mut ibv_context, port_num: u8, index: c_int, pkey: *mut u16) -> c_int {
        if context.is_null() || pkey.is_null() || port_num != 1 || index != 0 {
            return -1;
        }
        *pkey = 0xffffu16.to_be();
        0
    }

    /// `ibv_get_pkey_index`.
    fn ibv_get_pkey_index(context: *mut ibv_context, port_num: u8, pkey: u16) -> c_int {
        if context.is_null() || port_num != 1 || u16::from_be(pkey) != 0xffff {
            return -1;
        }
        0
    }

    /// `ibv_get_async_event`: blocks (unless the program made `async_fd` non-blocking, when it
    /// fails with EAGAIN) until an event comes. When the daemon is gone (the device is lost)
    /// it gives IBV_EVENT_DEVICE_FATAL once, then fails with EIO.
    fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int {
        if context.is_null() || event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        let ctx = Context::from_ibv(context);
        ctx.waiting.fetch_add(1, Ordering::SeqCst);
        let r = next_async_event(ctx, event);
        ctx.waiting.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// `ibv_ack_async_event`: nothing waits on acknowledgements here.
    fn ibv_ack_async_event(event: *mut ibv_async_event) {
        let _ = event;
    }
}

/// `ibv_get_async_event`'s wait: the next event, IBV_EVENT_DEVICE_FATAL once the daemon is
/// gone, EIO after that or once the context is being closed.
///
/// # Safety
/// `event` must be writable; `ctx` open, or closing and waiting for this call to return.
unsafe fn next_async_event(ctx: &Context, event: *mut ibv_async_event) -> c_int {
    loop {
        let open = match crate::take_notification((*ctx.ibv()).async_fd) {
            Ok(open) => open,
            Err(e) => {
                set_errno(e);
                return -1;
            }
        };
        if ctx.closing.load(Ordering::SeqCst) {
            set_errno(libc::EIO);
            return -1;
        }
        let mut state = ctx.lock();
        if open {
            match state.client.async_event() {
                // An event for an object already destroyed is dropped.
                Ok(e) => match async_event(&state.client, e) {
                    Some(ev) => {
                        *event = ev;
                        return 0;
                    }
                    None => continue,
                },
                Err(_) if state.client.lost() => {}
                Err(e) => {
                    set_errno(crate::fail("ibv_get_async_event", &e));
                    return -1;
                }
            }
        }
        if std::mem::replace(&mut state.fatal_reported, true) {
            set_errno(libc::EIO);
            return -1;
        }
        // SAFETY: plain data.
        *event = std::mem::zeroed();
        (*event).event_type = IBV_EVENT_DEVICE_FATAL;
        return 0;
    }
}

/// A GID table entry: RoCE v2, on the device's interface.
fn gid_entry(ctx: &Context, index: u32, gid: Gid) -> ibv_gid_entry {
    // SAFETY: plain data.
    let mut e: ibv_gid_entry = unsafe { std::mem::zeroed() };
    e.gid.raw = gid.0;
    e.gid_index = index;
    e.port_num = 1;
    e.gid_type = IBV_GID_TYPE_ROCE_V2;
    // SAFETY: the device outlives every context.
    e.ndev_ifindex = unsafe { (*ctx.device).ifindex };
    e
}
