//! Completion queues (the classic `ibv_poll_cq` and the extended `ibv_start_poll` API) and
//! completion channels.

use std::ffi::{c_int, c_uint, c_void};
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr;

use softrnic_client::client::Object;
use softrnic_emu_core::{Wc, WcOpcode, WcStatus};

use crate::abi::*;
use crate::context::Context;
use crate::{convert, free_after, or_null, set_errno};

/// How many completions one fetch from the ring takes at most.
const BATCH: usize = 32;
/// A completion to overwrite.
const BLANK: Wc = Wc::new(0, WcStatus::Success, WcOpcode::Send, 0);

/// A CQ. `ibv_cq_ex` comes first and begins with `ibv_cq`'s layout, so both of the program's
/// pointers lead here.
#[repr(C)]
pub struct Cq {
    /// What the program reads.
    pub ex: ibv_cq_ex,
    id: u32,
    /// The completion the extended API is reading.
    current: Option<Wc>,
}

/// A completion channel: its C structure, the daemon's name for it, and its fd.
#[repr(C)]
pub struct Channel {
    /// What the program reads.
    pub ch: ibv_comp_channel,
    id: u32,
    _fd: OwnedFd,
}

/// The extended-API completion flags softrnic fills (rxe's standard set).
const WC_EX_SUPPORTED: u64 = (IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS) as u64;

impl Cq {
    fn ctx(&self) -> &Context {
        // SAFETY: a CQ lives within its context.
        unsafe { Context::from_ibv(self.ex.context) }
    }

    /// Up to `out.len()` completions, straight from the ring.
    fn poll(&self, out: &mut [Wc]) -> Result<usize, c_int> {
        let id = self.id;
        self.ctx().call("ibv_poll_cq", |c| c.poll_cq_into(id, out))
    }
}

/// A program spinning on an empty CQ would keep the daemon, which produces its completions,
/// off the CPU on a machine with few cores: give way once per empty poll.
fn found_none() {
    std::thread::yield_now();
}

unsafe fn cq<'a>(p: *mut ibv_cq) -> &'a mut Cq {
    &mut *p.cast::<Cq>()
}

/// Makes a CQ (both creation calls).
unsafe fn create(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> Result<*mut Cq, c_int> {
    if context.is_null() || cqe < 1 || comp_vector != 0 {
        return Err(libc::EINVAL);
    }
    let ctx = Context::from_ibv(context);
    let chan = if channel.is_null() {
        None
    } else {
        Some((*channel.cast::<Channel>()).id)
    };
    let id = ctx.call("ibv_create_cq", |c| c.create_cq_on(cqe as u32, chan))?;
    // SAFETY: ibv_cq_ex is plain data; a zeroed pthread mutex/cond is their initializer.
    let mut ex: ibv_cq_ex = std::mem::zeroed();
    ex.context = context;
    ex.channel = channel;
    ex.cq_context = cq_context;
    ex.handle = id;
    ex.cqe = cqe;
    ex.start_poll = Some(start_poll);
    ex.next_poll = Some(next_poll);
    ex.end_poll = Some(end_poll);
    ex.read_opcode = Some(read_opcode);
    ex.read_vendor_err = Some(read_vendor_err);
    ex.read_byte_len = Some(read_byte_len);
    ex.read_imm_data = Some(read_imm_data);
    ex.read_qp_num = Some(read_qp_num);
    ex.read_src_qp = Some(read_src_qp);
    ex.read_wc_flags = Some(read_wc_flags);
    ex.read_slid = Some(read_slid);
    ex.read_sl = Some(read_sl);
    ex.read_dlid_path_bits = Some(read_dlid_path_bits);
    let p = Box::into_raw(Box::new(Cq {
        ex,
        id,
        current: None,
    }));
    ctx.lock().client.set_owner(Object::Cq(id), p as usize);
    Ok(p)
}

/// `verbs_context.create_cq_ex`: completion fields beyond rxe's standard set (timestamps,
/// VLAN, flow tag, tag matching) and parent domains are EOPNOTSUPP.
pub unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    if attr.is_null() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    let a = &*attr;
    if a.wc_flags & !WC_EX_SUPPORTED != 0
        || a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0
        || (a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
            && a.flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0)
    {
        return or_null(Err(libc::EOPNOTSUPP));
    }
    let cq = create(
        context,
        a.cqe as c_int,
        a.cq_context,
        a.channel,
        a.comp_vector as c_int,
    );
    or_null(cq.map(|p| p.cast()))
}

/// `ops.poll_cq`: up to `n` completions; a negative count on error.
pub unsafe extern "C" fn poll_cq(cq_: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    if n < 0 || (n > 0 && wc.is_null()) {
        return -libc::EINVAL;
    }
    // Shared: several threads may poll one CQ (the context's lock orders them).
    let cq = &*cq_.cast::<Cq>();
    let mut batch = [BLANK; BATCH];
    let mut got = 0;
    while got < n as usize {
        let want = (n as usize - got).min(BATCH);
        match cq.poll(&mut batch[..want]) {
            Ok(k) => {
                for (i, w) in batch[..k].iter().enumerate() {
                    wc.add(got + i).write(convert::wc(w));
                }
                got += k;
                if k < want {
                    break;
                }
            }
            Err(e) if got == 0 => return -e,
            Err(_) => break,
        }
    }
    if got == 0 {
        found_none();
    }
    got as c_int
}

/// `ops.req_notify_cq`.
pub unsafe extern "C" fn req_notify_cq(cq_: *mut ibv_cq, solicited_only: c_int) -> c_int {
    let cq = cq(cq_);
    let id = cq.id;
    cq.ctx()
        .call("ibv_req_notify_cq", |c| {
            c.req_notify_cq(id, solicited_only != 0)
        })
        .err()
        .unwrap_or(0)
}

unsafe fn ex<'a>(p: *mut ibv_cq_ex) -> &'a mut Cq {
    &mut *p.cast::<Cq>()
}

/// Makes the next completion current: ENOENT when there is none.
unsafe fn advance(p: *mut ibv_cq_ex) -> c_int {
    let cq = ex(p);
    let mut one = [BLANK];
    match cq.poll(&mut one) {
        Ok(1) => {
            let [w] = one;
            cq.ex.wr_id = w.wr_id;
            cq.ex.status = w.status as u32;
            cq.current = Some(w);
            0
        }
        Ok(_) => {
            found_none();
            cq.current = None;
            libc::ENOENT
        }
        Err(e) => e,
    }
}

unsafe extern "C" fn start_poll(p: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    if !attr.is_null() && (*attr).comp_mask != 0 {
        return libc::EINVAL;
    }
    advance(p)
}

unsafe extern "C" fn next_poll(p: *mut ibv_cq_ex) -> c_int {
    advance(p)
}

unsafe extern "C" fn end_poll(p: *mut ibv_cq_ex) {
    ex(p).current = None;
}

/// The current completion, in its C form (zeros when there is none: a program bug).
unsafe fn current(p: *mut ibv_cq_ex) -> ibv_wc {
    ex(p)
        .current
        .as_ref()
        .map_or_else(|| std::mem::zeroed(), convert::wc)
}

unsafe extern "C" fn read_opcode(p: *mut ibv_cq_ex) -> u32 {
    current(p).opcode
}

unsafe extern "C" fn read_vendor_err(_: *mut ibv_cq_ex) -> u32 {
    0
}

unsafe extern "C" fn read_byte_len(p: *mut ibv_cq_ex) -> u32 {
    current(p).byte_len
}

unsafe extern "C" fn read_imm_data(p: *mut ibv_cq_ex) -> u32 {
    current(p).imm.imm_data
}

unsafe extern "C" fn read_qp_num(p: *mut ibv_cq_ex) -> u32 {
    current(p).qp_num
}

unsafe extern "C" fn read_src_qp(p: *mut ibv_cq_ex) -> u32 {
    current(p).src_qp
}

unsafe extern "C" fn read_wc_flags(p: *mut ibv_cq_ex) -> c_uint {
    current(p).wc_flags
}

unsafe extern "C" fn read_slid(_: *mut ibv_cq_ex) -> u32 {
    0
}

unsafe extern "C" fn read_sl(p: *mut ibv_cq_ex) -> u8 {
    current(p).sl
}

unsafe extern "C" fn read_dlid_path_bits(_: *mut ibv_cq_ex) -> u8 {
    0
}

exported! {
    /// `ibv_create_cq`.
    fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq {
        or_null(create(context, cqe, cq_context, channel, comp_vector).map(|p| p.cast()))
    }

    /// `ibv_resize_cq`.
    fn ibv_resize_cq(cq_: *mut ibv_cq, cqe: c_int) -> c_int {
        if cq_.is_null() || cqe < 1 {
            return libc::EINVAL;
        }
        let cq = cq(cq_);
        let id = cq.id;
        match cq.ctx().call("ibv_resize_cq", |c| c.resize_cq(id, cqe as u32)) {
            Ok(()) => {
                cq.ex.cqe = cqe;
                0
            }
            Err(e) => e,
        }
    }

    /// `ibv_destroy_cq`: EBUSY while a QP uses it.
    fn ibv_destroy_cq(cq_: *mut ibv_cq) -> c_int {
        if cq_.is_null() {
            return libc::EINVAL;
        }
        let cq = cq_.cast::<Cq>();
        let id = (*cq).id;
        (*cq).ctx().destroy("ibv_destroy_cq", cq, |s| {
            s.client.destroy_cq(id)
        })
    }

    /// `ibv_create_comp_channel`.
    fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel {
        if context.is_null() {
            return or_null(Err(libc::EINVAL));
        }
        let ctx = Context::from_ibv(context);
        let made = ctx.call("ibv_create_comp_channel", |c| c.create_comp_channel());
        or_null(made.map(|(id, fd)| {
            let ch = ibv_comp_channel {
                context,
                fd: fd.as_raw_fd(),
                refcnt: 0,
            };
            Box::into_raw(Box::new(Channel { ch, id, _fd: fd })).cast()
        }))
    }

    /// `ibv_destroy_comp_channel`: EBUSY while a CQ uses it.
    fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
        if channel.is_null() {
            return libc::EINVAL;
        }
        let ch = channel.cast::<Channel>();
        let ctx = Context::from_ibv((*channel).context);
        let released = ctx.call("ibv_destroy_comp_channel", |c| c.destroy_comp_channel((*ch).id));
        free_after(released, ch)
    }

    /// `ibv_get_cq_event`: blocks on the channel's fd (unless the program made it
    /// non-blocking: then -1 with EAGAIN) until an armed CQ on it gets a completion.
    fn ibv_get_cq_event(channel: *mut ibv_comp_channel, cq_out: *mut *mut ibv_cq, cq_context: *mut *mut c_void) -> c_int {
        if channel.is_null() || cq_out.is_null() || cq_context.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        let ctx = Context::from_ibv((*channel).context);
        let id = (*channel.cast::<Channel>()).id;
        loop {
            // A channel whose daemon is gone fails, as one of a removed device does.
            match crate::take_notification((*channel).fd) {
                Ok(true) => {}
                Ok(false) => {
                    set_errno(libc::EIO);
                    return -1;
                }
                Err(e) => {
                    set_errno(e);
                    return -1;
                }
            }
            let mut state = ctx.lock();
            let cq = match state.client.cq_event(id) {
                Ok(cq) => cq,
                Err(e) => {
                    set_errno(crate::fail("ibv_get_cq_event", &e));
                    return -1;
                }
            };
            // A notification for a CQ destroyed since is dropped.
            if let Some(p) = state.client.owner(Object::Cq(cq)) {
                let p = p as *mut Cq;
                *cq_out = p.cast();
                *cq_context = (*p).ex.cq_context;
                return 0;
            }
        }
    }

    /// `ibv_ack_cq_events`.
    fn ibv_ack_cq_events(cq_: *mut ibv_cq, nevents: c_uint) {
        if !cq_.is_null() {
            let cq = cq(cq_);
            cq.ex.comp_events_completed = cq.ex.comp_events_completed.wrapping_add(nevents);
        }
    }
}
