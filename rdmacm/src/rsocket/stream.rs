//! A stream rsocket's connection: its QP, buffers and credits, and the protocol of
//! [`super::proto`] over them, as rdma-core's `rsocket.c` runs it (so the two interoperate).
//! Data moves by RDMA WRITE WITH IMMEDIATE into the half of the peer's receive buffer it lent;
//! every send completes (the QP signals all), which frees send buffer space and queue entries.

use core::ffi::{c_int, c_void};
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr;

use softrnic_verbs_abi::abi::*;

use super::proto::{self, ConnData, Iomap, Sge};
use crate::abi::*;
use crate::verbs::*;

/// rdma-core's `enum rs_state`: passive, opening, connected and closed states as bits.
pub mod state {
    pub const INIT: u32 = 0;
    pub const BOUND: u32 = 0x0001;
    pub const LISTENING: u32 = 0x0002;
    pub const OPENING: u32 = 0x0004;
    pub const RESOLVING_ADDR: u32 = OPENING | 0x0010;
    pub const RESOLVING_ROUTE: u32 = OPENING | 0x0020;
    pub const CONNECTING: u32 = OPENING | 0x0040;
    pub const ACCEPTING: u32 = OPENING | 0x0080;
    pub const CONNECTED: u32 = 0x0100;
    pub const WRITABLE: u32 = 0x0200;
    pub const READABLE: u32 = 0x0400;
    pub const CONNECT_RDWR: u32 = CONNECTED | READABLE | WRITABLE;
    pub const CONNECT_ERROR: u32 = 0x0800;
    pub const DISCONNECTED: u32 = 0x1000;
    pub const ERROR: u32 = 0x2000;
}

/// Low water mark of the send buffer: below it, a send waits.
const SNDLOWAT: u32 = 2048;
/// The largest RDMA WRITE a send makes, and the first one (doubling up to the largest).
const MAX_TRANSFER: u32 = 65536;
const OLAP_START: u32 = 2048;
/// Queue sizes are clamped to these.
const QP_MIN_SIZE: u16 = 16;
const QP_MAX_SIZE: u16 = 0xfffe;
/// Work request IDs: receives have the top bit; sends carry their message.
const WR_ID_RECV: u64 = 1 << 63;

/// rdma-core's defaults (`rs_configure` without configuration files).
pub const DEF_INLINE: u16 = 64;
pub const DEF_SQSIZE: u16 = 384;
pub const DEF_RQSIZE: u16 = 384;
pub const DEF_MEM: u32 = 1 << 17;
pub const DEF_WMEM: u32 = 1 << 17;

/// A registered buffer: its memory stays where it is (the peer writes into it by RDMA).
struct Region {
    ptr: *mut u8,
    len: usize,
    mr: *mut ibv_mr,
}

impl Region {
    unsafe fn new(pd: *mut ibv_pd, len: usize, access: c_int) -> Result<Region, c_int> {
        let layout = Layout::from_size_align(len.max(1), 4096).map_err(|_| libc::ENOMEM)?;
        let ptr = alloc_zeroed(layout);
        if ptr.is_null() {
            return Err(libc::ENOMEM);
        }
        let mr = ibv_reg_mr(pd, ptr.cast(), len, access);
        if mr.is_null() {
            dealloc(ptr, layout);
            return Err(errno());
        }
        Ok(Region { ptr, len, mr })
    }

    fn addr(&self, offset: usize) -> u64 {
        self.ptr as u64 + offset as u64
    }

    fn lkey(&self) -> u32 {
        // SAFETY: a registered MR lives as long as the region.
        unsafe { (*self.mr).lkey }
    }

    fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: made by `new` with this layout; deregistered before it is freed.
        unsafe {
            ibv_dereg_mr(self.mr);
            dealloc(
                self.ptr,
                Layout::from_size_align(self.len.max(1), 4096).expect("made before"),
            );
        }
    }
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A program buffer mapped with `riomap` for the peer to `riowrite` into.
pub struct IoMap {
    pub offset: u64,
    pub mr: *mut ibv_mr,
    /// Its entry in the peer's iomap table; `None` for a mapping the peer is not told of.
    pub index: Option<usize>,
}

/// The connection of a stream rsocket.
pub struct Stream {
    pub id: *mut rdma_cm_id,
    pub state: u32,
    pub err: c_int,
    /// The peer's byte order differs: SGEs sent to it are swapped.
    swap: bool,
    pub sbuf_size: u32,
    pub rbuf_size: u32,
    pub sq_size: u16,
    pub rq_size: u16,
    pub sq_inline: u16,
    pub target_iomap_size: u16,

    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    sseq_no: u16,
    sseq_comp: u16,
    rseq_no: u16,
    rseq_comp: u16,
    /// The peer's target SGL (where this side lends halves of its buffer) and iomap table.
    remote_sge: u32,
    remote_sgl: Sge,
    remote_iomap: Sge,
    /// This side's target SGL and iomap table, which the peer writes.
    target: Option<Region>,
    target_sge: usize,

    /// Data messages received and not yet read: (op, length).
    rmsg: Vec<(u32, u32)>,
    rmsg_head: usize,
    rmsg_tail: usize,
    rbuf: Option<Region>,
    rbuf_offset: u32,
    rbuf_free_offset: u32,
    rbuf_bytes_avail: u32,
    sbuf: Option<Region>,
    sbuf_bytes_avail: u32,
    /// The staging cursor in the send buffer (a ring), and a second SGE for a wrap.
    ssgl: [ibv_sge; 2],
    sqe_avail: i32,
    pub cq_armed: bool,
    unack_cqe: u32,

    /// `riomap`s: every mapping, those the peer has been told of, and those waiting to be told.
    pub iomaps: Vec<IoMap>,
    iomap_queue: Vec<usize>,
    remote_slots: Vec<bool>,
}

// SAFETY: the raw pointers are verbs objects and registered memory, used under the socket's
// lock.
unsafe impl Send for Stream {}

impl Stream {
    /// A stream on `id`, sized as `inherit` (a listener's) or with rdma-core's defaults.
    pub fn new(id: *mut rdma_cm_id, inherit: Option<&Stream>) -> Stream {
        let (sbuf_size, rbuf_size, sq_size, rq_size, sq_inline, target_iomap_size) = match inherit {
            Some(l) => (
                l.sbuf_size,
                l.rbuf_size,
                l.sq_size,
                l.rq_size,
                l.sq_inline,
                l.target_iomap_size,
            ),
            None => (DEF_WMEM, DEF_MEM, DEF_SQSIZE, DEF_RQSIZE, DEF_INLINE, 0),
        };
        Stream {
            id,
            state: state::INIT,
            err: 0,
            swap: false,
            sbuf_size,
            rbuf_size,
            sq_size,
            rq_size,
            sq_inline,
            target_iomap_size,
            ctrl_seqno: 0,
            ctrl_max_seqno: proto::QP_CTRL_SIZE,
            sseq_no: 0,
            sseq_comp: 0,
            rseq_no: 0,
            rseq_comp: 0,
            remote_sge: 0,
            remote_sgl: Sge::default(),
            remote_iomap: Sge::default(),
            target: None,
            target_sge: 0,
            rmsg: Vec::new(),
            rmsg_head: 0,
            rmsg_tail: 0,
            rbuf: None,
            rbuf_offset: 0,
            rbuf_free_offset: 0,
            rbuf_bytes_avail: 0,
            sbuf: None,
            sbuf_bytes_avail: 0,
            ssgl: [ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }; 2],
            sqe_avail: 0,
            cq_armed: false,
            unack_cqe: 0,
            iomaps: Vec::new(),
            iomap_queue: Vec::new(),
            remote_slots: Vec::new(),
        }
    }

    pub fn has_buffers(&self) -> bool {
        self.rbuf.is_some()
    }

    /// The CQ (with its completion channel), the RC QP, the buffers, and every receive posted
    /// (rdma-core's `rs_create_ep`).
    pub unsafe fn create_ep(&mut self) -> Result<(), c_int> {
        let id = &mut *self.id;
        let mut attr: ibv_device_attr = std::mem::zeroed();
        let max = match ibv_query_device(id.verbs, &mut attr) {
            0 => (attr.max_qp_wr.max(0) as u32).min(u32::from(QP_MAX_SIZE)) as u16,
            _ => QP_MAX_SIZE,
        };
        self.sq_size = self.sq_size.clamp(QP_MIN_SIZE, max);
        self.rq_size = self.rq_size.clamp(QP_MIN_SIZE, max);
        id.recv_cq_channel = ibv_create_comp_channel(id.verbs);
        if id.recv_cq_channel.is_null() {
            return Err(errno());
        }
        let cqe = c_int::from(self.sq_size) + c_int::from(self.rq_size);
        id.recv_cq = ibv_create_cq(id.verbs, cqe, self.id.cast(), id.recv_cq_channel, 0);
        if id.recv_cq.is_null() {
            return Err(errno());
        }
        req_notify_cq(id.recv_cq);
        id.send_cq_channel = id.recv_cq_channel;
        id.send_cq = id.recv_cq;
        let mut qp: ibv_qp_init_attr = std::mem::zeroed();
        qp.send_cq = id.send_cq;
        qp.recv_cq = id.recv_cq;
        qp.qp_type = IBV_QPT_RC;
        qp.sq_sig_all = 1;
        qp.cap.max_send_wr = u32::from(self.sq_size);
        qp.cap.max_recv_wr = u32::from(self.rq_size);
        qp.cap.max_send_sge = 2;
        qp.cap.max_recv_sge = 1;
        qp.cap.max_inline_data = u32::from(self.sq_inline);
        if crate::qp::rdma_create_qp(self.id, ptr::null_mut(), &mut qp) != 0 {
            return Err(errno());
        }
        self.sq_inline = qp.cap.max_inline_data.min(u32::from(u16::MAX)) as u16;
        self.init_bufs()?;
        for _ in 0..self.rq_size {
            self.post_recv()?;
        }
        Ok(())
    }

    /// rdma-core's `rs_init_bufs`.
    unsafe fn init_bufs(&mut self) -> Result<(), c_int> {
        let pd = (*self.id).pd;
        self.rmsg = vec![(0, 0); usize::from(self.rq_size) + 1];
        let mut sbuf_len = self.sbuf_size as usize;
        if usize::from(self.sq_inline) < Sge::LEN {
            sbuf_len += Sge::LEN * proto::QP_CTRL_SIZE as usize;
        }
        let sbuf = Region::new(pd, sbuf_len, IBV_ACCESS_LOCAL_WRITE as c_int)?;
        let write = (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) as c_int;
        let target_len =
            Sge::LEN * proto::SGL_SIZE + Iomap::LEN * usize::from(self.target_iomap_size);
        let target = Region::new(pd, target_len, write)?;
        let rbuf = Region::new(pd, self.rbuf_size as usize, write)?;
        self.ssgl = [ibv_sge {
            addr: sbuf.addr(0),
            length: 0,
            lkey: sbuf.lkey(),
        }; 2];
        self.sbuf = Some(sbuf);
        self.target = Some(target);
        self.rbuf = Some(rbuf);
        self.sbuf_bytes_avail = self.sbuf_size;
        self.rbuf_free_offset = self.rbuf_size >> 1;
        self.rbuf_bytes_avail = self.rbuf_size >> 1;
        self.sqe_avail = i32::from(self.sq_size) - self.ctrl_max_seqno as i32;
        self.rseq_comp = self.rq_size >> 1;
        Ok(())
    }

    /// The connection data this side sends (rdma-core's `rs_format_conn_data`).
    pub fn conn_data(&self) -> ConnData {
        let (target, rbuf) = (self.target.as_ref(), self.rbuf.as_ref());
        ConnData {
            version: 1,
            flags: proto::FLAG_IOMAP
                | if cfg!(target_endian = "big") {
                    proto::FLAG_NET
                } else {
                    0
                },
            credits: self.rq_size,
            target_iomap_size: proto::value_to_scale(u32::from(self.target_iomap_size), 8) as u8,
            target_sgl: Sge {
                addr: target.map_or(0, |t| t.addr(0)),
                key: target.map_or(0, Region::rkey),
                length: proto::SGL_SIZE as u32,
            },
            data_buf: Sge {
                addr: rbuf.map_or(0, |r| r.addr(0)),
                key: rbuf.map_or(0, Region::rkey),
                length: self.rbuf_size >> 1,
            },
        }
    }

    /// Takes the peer's connection data (rdma-core's `rs_save_conn_data`).
    pub fn save_conn_data(&mut self, c: &ConnData) {
        self.remote_sgl = c.target_sgl;
        self.remote_sge = 1;
        let peer_big = c.flags & proto::FLAG_NET != 0;
        self.swap = peer_big != cfg!(target_endian = "big");
        if c.flags & proto::FLAG_IOMAP != 0 {
            self.remote_iomap = Sge {
                addr: c.target_sgl.addr + (Sge::LEN as u64) * u64::from(c.target_sgl.length),
                key: c.target_sgl.key,
                length: proto::scale_to_value(u32::from(c.target_iomap_size), 8),
            };
        }
        self.set_target(0, c.data_buf);
        self.sseq_comp = c.credits;
    }

    // --- The target SGL, which the peer writes -----------------------------------------

    fn target_ptr(&self, i: usize) -> *mut [u8; 16] {
        let t = self.target.as_ref().expect("buffers");
        // SAFETY: `i` < SGL_SIZE entries of 16 bytes at the start of the region.
        unsafe { t.ptr.add(i * Sge::LEN).cast() }
    }

    fn target(&self, i: usize) -> Sge {
        // SAFETY: the peer may write it at any time: a volatile read of the entry.
        Sge::from_bytes(&unsafe { ptr::read_volatile(self.target_ptr(i)) })
    }

    fn set_target(&mut self, i: usize, s: Sge) {
        // SAFETY: as above.
        unsafe { ptr::write_volatile(self.target_ptr(i), s.to_bytes(false)) }
    }

    /// The peer's iomap table entries.
    fn target_iomap(&self, i: usize) -> Iomap {
        let t = self.target.as_ref().expect("buffers");
        // SAFETY: entry `i` < target_iomap_size, after the SGL.
        let p = unsafe { t.ptr.add(Sge::LEN * proto::SGL_SIZE + i * Iomap::LEN) };
        Iomap::from_bytes(&unsafe { ptr::read_volatile(p.cast::<[u8; 24]>()) })
    }

    // --- Posting ------------------------------------------------------------------------

    unsafe fn post_recv(&mut self) -> Result<(), c_int> {
        let mut wr = ibv_recv_wr {
            wr_id: WR_ID_RECV,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: 0,
        };
        let qp = (*self.id).qp;
        let mut bad = ptr::null_mut();
        match ((*(*qp).context).ops.post_recv.expect("post_recv"))(qp, &mut wr, &mut bad) {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// Posts an RDMA WRITE of `sgl` to `addr`/`rkey`, with `msg` as immediate data if given;
    /// `wr_data` identifies the completion.
    unsafe fn post_write(
        &mut self,
        sgl: &mut [ibv_sge],
        wr_data: u32,
        imm: bool,
        flags: u32,
        addr: u64,
        rkey: u32,
    ) -> Result<(), c_int> {
        let mut wr: ibv_send_wr = std::mem::zeroed();
        wr.wr_id = u64::from(wr_data);
        wr.sg_list = if sgl.is_empty() {
            ptr::null_mut()
        } else {
            sgl.as_mut_ptr()
        };
        wr.num_sge = sgl.len() as c_int;
        wr.opcode = if imm {
            IBV_WR_RDMA_WRITE_WITH_IMM
        } else {
            IBV_WR_RDMA_WRITE
        };
        wr.send_flags = flags;
        if imm {
            wr.imm.imm_data = wr_data.to_be();
        }
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: addr,
            rkey,
        };
        let qp = (*self.id).qp;
        let mut bad = ptr::null_mut();
        match ((*(*qp).context).ops.post_send.expect("post_send"))(qp, &mut wr, &mut bad) {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// A message with no data (credits, control).
    unsafe fn post_msg(&mut self, msg: u32) -> Result<(), c_int> {
        self.post_write(&mut [], msg, true, 0, 0, 0)
    }

    /// Data into the half of the peer's buffer it lent (rdma-core's `rs_write_data`).
    unsafe fn write_data(
        &mut self,
        sgl: &mut [ibv_sge],
        len: u32,
        flags: u32,
    ) -> Result<(), c_int> {
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        let mut t = self.target(self.target_sge);
        let (addr, rkey) = (t.addr, t.key);
        t.addr += u64::from(len);
        t.length -= len;
        self.set_target(self.target_sge, t);
        if t.length == 0 {
            self.target_sge = (self.target_sge + 1) % proto::SGL_SIZE;
        }
        self.post_write(
            sgl,
            proto::msg(proto::OP_DATA, len),
            true,
            flags,
            addr,
            rkey,
        )
    }

    /// Data straight into a buffer the peer mapped (rdma-core's `rs_write_direct`).
    unsafe fn write_direct(
        &mut self,
        iom: Iomap,
        offset: u64,
        sgl: &mut [ibv_sge],
        len: u32,
        flags: u32,
    ) -> Result<(), c_int> {
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        let addr = iom.sge.addr + offset - iom.offset;
        let wr = proto::msg(proto::OP_WRITE, len);
        self.post_write(sgl, wr, false, flags, addr, iom.sge.key)
    }

    /// How many bytes the send buffer has from the staging cursor to its end.
    fn sbuf_left(&self) -> u32 {
        let s = self.sbuf.as_ref().expect("buffers");
        (s.addr(self.sbuf_size as usize) - self.ssgl[0].addr) as u32
    }

    /// Stages `data` in the send buffer (wrapping around its end) and calls `post` with the
    /// one or two SGEs it fills, or with `data` itself when it fits inline.
    unsafe fn staged(
        &mut self,
        data: *const u8,
        len: u32,
        post: impl FnOnce(&mut Self, &mut [ibv_sge], u32) -> Result<(), c_int>,
    ) -> Result<(), c_int> {
        if len <= u32::from(self.sq_inline) {
            let mut sge = [ibv_sge {
                addr: data as u64,
                length: len,
                lkey: 0,
            }];
            return post(self, &mut sge, IBV_SEND_INLINE);
        }
        let sbuf = self.sbuf.as_ref().expect("buffers").ptr;
        let left = self.sbuf_left();
        let mut ssgl = self.ssgl;
        let n = if len <= left {
            ptr::copy_nonoverlapping(data, ssgl[0].addr as *mut u8, len as usize);
            ssgl[0].length = len;
            self.ssgl[0].addr = if len < left {
                ssgl[0].addr + u64::from(len)
            } else {
                sbuf as u64
            };
            1
        } else {
            ptr::copy_nonoverlapping(data, ssgl[0].addr as *mut u8, left as usize);
            ssgl[0].length = left;
            ssgl[1].addr = sbuf as u64;
            ssgl[1].length = len - left;
            ptr::copy_nonoverlapping(data.add(left as usize), sbuf, (len - left) as usize);
            self.ssgl[0].addr = sbuf as u64 + u64::from(len - left);
            2
        };
        post(self, &mut ssgl[..n], 0)
    }

    // --- Credits ------------------------------------------------------------------------

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    /// Lends the free half of the receive buffer back (or grants credits only), rdma-core's
    /// `rs_send_credits`.
    unsafe fn send_credits(&mut self) {
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.rseq_comp = self.rseq_no.wrapping_add(self.rq_size >> 1);
        let credits = proto::msg(
            proto::OP_SGL,
            u32::from(self.rseq_no.wrapping_add(self.rq_size)),
        );
        let half = self.rbuf_size >> 1;
        if self.rbuf_bytes_avail < half {
            let _ = self.post_msg(credits);
            return;
        }
        let rbuf = self.rbuf.as_ref().expect("buffers");
        let sge = Sge {
            addr: rbuf.addr(self.rbuf_free_offset as usize),
            key: rbuf.rkey(),
            length: half,
        };
        let bytes = sge.to_bytes(self.swap);
        let (mut ib, flags) = if usize::from(self.sq_inline) < Sge::LEN {
            // Not inline: through one of the control slots after the send buffer.
            let slot = (self.ctrl_seqno & (proto::QP_CTRL_SIZE - 1)) as usize;
            let s = self.sbuf.as_ref().expect("buffers");
            let at = self.sbuf_size as usize + Sge::LEN * slot;
            ptr::copy_nonoverlapping(bytes.as_ptr(), s.ptr.add(at), Sge::LEN);
            let sge = ibv_sge {
                addr: s.addr(at),
                length: Sge::LEN as u32,
                lkey: s.lkey(),
            };
            (sge, 0)
        } else {
            let sge = ibv_sge {
                addr: bytes.as_ptr() as u64,
                length: Sge::LEN as u32,
                lkey: 0,
            };
            (sge, IBV_SEND_INLINE)
        };
        let addr = self.remote_sgl.addr + u64::from(self.remote_sge) * Sge::LEN as u64;
        let key = self.remote_sgl.key;
        let _ = self.post_write(
            std::slice::from_mut(&mut ib),
            credits,
            true,
            flags,
            addr,
            key,
        );
        self.rbuf_bytes_avail -= half;
        self.rbuf_free_offset += half;
        if self.rbuf_free_offset >= self.rbuf_size {
            self.rbuf_free_offset = 0;
        }
        self.remote_sge += 1;
        if self.remote_sge == self.remote_sgl.length {
            self.remote_sge = 0;
        }
    }

    fn give_credits(&self) -> bool {
        (self.rbuf_bytes_avail >= self.rbuf_size >> 1
            || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0)
            && self.ctrl_avail()
            && self.state & state::CONNECTED != 0
    }

    pub unsafe fn update_credits(&mut self) {
        if self.give_credits() {
            self.send_credits();
        }
    }

    // --- Completions --------------------------------------------------------------------

    /// Takes every completion (rdma-core's `rs_poll_cq`) and reposts the receives used.
    pub unsafe fn poll_cq(&mut self) -> Result<(), c_int> {
        let cq = (*self.id).recv_cq;
        let poll = (*(*cq).context).ops.poll_cq.expect("poll_cq");
        let mut wc: ibv_wc = std::mem::zeroed();
        let mut received = 0;
        let ret = loop {
            let n = poll(cq, 1, &mut wc);
            if n <= 0 {
                break n;
            }
            if wc.wr_id & WR_ID_RECV != 0 {
                if wc.status != IBV_WC_SUCCESS {
                    continue;
                }
                received += 1;
                let msg = if wc.wc_flags & IBV_WC_WITH_IMM != 0 {
                    u32::from_be(wc.imm.imm_data)
                } else {
                    0
                };
                match proto::msg_op(msg) {
                    proto::OP_SGL => self.sseq_comp = proto::msg_data(msg) as u16,
                    // The peer's iomap table changed: read when writing.
                    proto::OP_IOMAP_SGL | proto::OP_WRITE => {}
                    proto::OP_CTRL => match proto::msg_data(msg) {
                        proto::CTRL_DISCONNECT => {
                            self.state = state::DISCONNECTED;
                            return Ok(());
                        }
                        proto::CTRL_SHUTDOWN => {
                            if self.state & state::WRITABLE != 0 {
                                self.state &= !state::READABLE;
                            } else {
                                self.state = state::DISCONNECTED;
                                return Ok(());
                            }
                        }
                        _ => {}
                    },
                    op => {
                        self.rmsg[self.rmsg_tail] = (op, proto::msg_data(msg));
                        self.rmsg_tail = (self.rmsg_tail + 1) % self.rmsg.len();
                    }
                }
            } else {
                let data = wc.wr_id as u32;
                match proto::msg_op(data) {
                    proto::OP_SGL => self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1),
                    proto::OP_CTRL => {
                        self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1);
                        if proto::msg_data(data) == proto::CTRL_DISCONNECT {
                            self.state = state::DISCONNECTED;
                        }
                    }
                    proto::OP_IOMAP_SGL => {
                        self.sqe_avail += 1;
                        self.sbuf_bytes_avail += Iomap::LEN as u32;
                    }
                    _ => {
                        self.sqe_avail += 1;
                        self.sbuf_bytes_avail += proto::msg_data(data);
                    }
                }
                if wc.status != IBV_WC_SUCCESS && self.state & state::CONNECTED != 0 {
                    self.state = state::ERROR;
                    self.err = libc::EIO;
                }
            }
        };
        if self.state & state::CONNECTED != 0 {
            for _ in 0..received {
                if let Err(e) = self.post_recv() {
                    self.state = state::ERROR;
                    self.err = e;
                    return Err(e);
                }
            }
        }
        if ret < 0 { Err(libc::EIO) } else { Ok(()) }
    }

    /// Takes the completion channel's event after a wakeup.
    pub unsafe fn take_cq_event(&mut self) {
        if !self.cq_armed {
            return;
        }
        let id = &*self.id;
        let (mut cq, mut ctx) = (ptr::null_mut(), ptr::null_mut::<c_void>());
        if ibv_get_cq_event(id.recv_cq_channel, &mut cq, &mut ctx) == 0 {
            self.unack_cqe += 1;
            if self.unack_cqe >= u32::from(self.sq_size) + u32::from(self.rq_size) {
                ibv_ack_cq_events(id.recv_cq, self.unack_cqe);
                self.unack_cqe = 0;
            }
            self.cq_armed = false;
        }
    }

    pub unsafe fn arm(&mut self) {
        req_notify_cq((*self.id).recv_cq);
        self.cq_armed = true;
    }

    // --- What a caller waits for ---------------------------------------------------------

    /// Room to send: a queue entry, send buffer above the low water mark, a receive credit
    /// and lent space at the peer (rdma-core's `rs_can_send`).
    pub fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target(self.target_sge).length != 0
    }

    pub fn conn_can_send(&self) -> bool {
        self.can_send() || self.state & state::WRITABLE == 0
    }

    pub fn conn_can_send_ctrl(&self) -> bool {
        self.ctrl_avail() || self.state & state::CONNECTED == 0
    }

    pub fn have_rdata(&self) -> bool {
        self.rmsg_head != self.rmsg_tail
    }

    pub fn conn_have_rdata(&self) -> bool {
        self.have_rdata() || self.state & state::READABLE == 0
    }

    pub fn conn_all_sends_done(&self) -> bool {
        (self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno) as i32 + self.sqe_avail
            == i32::from(self.sq_size))
            || self.state & state::CONNECTED == 0
    }

    // --- Data ---------------------------------------------------------------------------

    /// Copies received data into `buf` (up to its length); with `peek`, leaves it. How many
    /// bytes.
    pub unsafe fn take(&mut self, buf: *mut u8, len: usize, peek: bool) -> usize {
        let rbuf = self.rbuf.as_ref().expect("buffers").ptr;
        let (mut head, mut offset) = (self.rmsg_head, self.rbuf_offset);
        let mut left = len;
        let mut out = buf;
        while left > 0 && head != self.rmsg_tail {
            let avail = self.rmsg[head].1 as usize;
            let mut size = if left < avail {
                if !peek {
                    self.rmsg[head].1 -= left as u32;
                }
                left
            } else {
                if !peek {
                    self.rseq_no = self.rseq_no.wrapping_add(1);
                }
                head = (head + 1) % self.rmsg.len();
                avail
            };
            left -= size;
            let end = (self.rbuf_size - offset) as usize;
            if size > end {
                ptr::copy_nonoverlapping(rbuf.add(offset as usize), out, end);
                out = out.add(end);
                size -= end;
                offset = 0;
                if !peek {
                    self.rbuf_bytes_avail += end as u32;
                }
            }
            ptr::copy_nonoverlapping(rbuf.add(offset as usize), out, size);
            out = out.add(size);
            offset += size as u32;
            if !peek {
                self.rbuf_bytes_avail += size as u32;
            }
        }
        if !peek {
            self.rmsg_head = head;
            self.rbuf_offset = offset;
        }
        len - left
    }

    /// Sends what fits now of `len` bytes at `data`, starting with a transfer of `*olen`
    /// (doubled per transfer up to 64 KiB, as rdma-core does); the bytes sent.
    pub unsafe fn put(
        &mut self,
        data: *const u8,
        len: usize,
        olen: &mut u32,
    ) -> Result<usize, c_int> {
        let mut sent = 0;
        while sent < len && self.can_send() {
            let xfer = next_transfer(olen, len - sent)
                .min(self.sbuf_bytes_avail)
                .min(self.target(self.target_sge).length);
            self.staged(data.add(sent), xfer, |s, sgl, flags| {
                s.write_data(sgl, xfer, flags)
            })?;
            sent += xfer as usize;
        }
        Ok(sent)
    }

    pub fn olap_start() -> u32 {
        OLAP_START
    }

    /// Writes what fits now of `len` bytes at `data` into the peer's mapping at `offset`
    /// (`riowrite`); the bytes written, or `None` when no mapping of the peer holds `offset`.
    pub unsafe fn put_direct(
        &mut self,
        data: *const u8,
        len: usize,
        offset: u64,
        olen: &mut u32,
    ) -> Result<Option<usize>, c_int> {
        let mut sent = 0;
        while sent < len && self.can_send() {
            let at = offset + sent as u64;
            let Some(iom) = (0..usize::from(self.target_iomap_size))
                .map(|i| self.target_iomap(i))
                .find(|m| at >= m.offset && at < m.offset + u64::from(m.sge.length))
            else {
                return Ok(if sent == 0 { None } else { Some(sent) });
            };
            let xfer = next_transfer(olen, len - sent)
                .min(self.sbuf_bytes_avail)
                .min((iom.offset + u64::from(iom.sge.length) - at) as u32);
            self.staged(data.add(sent), xfer, |s, sgl, flags| {
                s.write_direct(iom, at, sgl, xfer, flags)
            })?;
            sent += xfer as usize;
        }
        Ok(Some(sent))
    }

    /// Sends a control message (shutdown, disconnect).
    pub unsafe fn send_ctrl(&mut self, ctrl: u32) -> Result<(), c_int> {
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.post_msg(proto::msg(proto::OP_CTRL, ctrl))
    }

    pub fn ctrl_ready(&self) -> bool {
        self.ctrl_avail()
    }

    // --- riomap ---------------------------------------------------------------------------

    /// Maps `len` bytes at `buf` at `offset` for the peer to write (`PROT_WRITE`), or only
    /// registers them. The peer learns of a writable mapping with the next send.
    pub unsafe fn map(
        &mut self,
        buf: *mut c_void,
        len: usize,
        writable: bool,
        offset: u64,
    ) -> Result<u64, c_int> {
        let index = if writable {
            if self.remote_slots.is_empty() {
                self.remote_slots = vec![false; self.remote_iomap.length as usize];
            }
            let Some(i) = self.remote_slots.iter().position(|used| !used) else {
                return Err(libc::ENOMEM);
            };
            Some(i)
        } else {
            None
        };
        let mut access = IBV_ACCESS_LOCAL_WRITE;
        if writable {
            access |= IBV_ACCESS_REMOTE_WRITE;
        }
        let mr = ibv_reg_mr((*self.id).pd, buf, len, access as c_int);
        if mr.is_null() {
            return Err(errno());
        }
        if let Some(i) = index {
            self.remote_slots[i] = true;
            self.iomap_queue.push(self.iomaps.len());
        }
        self.iomaps.push(IoMap { offset, mr, index });
        Ok(offset)
    }

    /// Unmaps the mapping of exactly `buf`/`len`: false if there is none.
    pub unsafe fn unmap(&mut self, buf: *mut c_void, len: usize) -> bool {
        let Some(at) = self
            .iomaps
            .iter()
            .position(|m| (*m.mr).addr == buf && (*m.mr).length == len)
        else {
            return false;
        };
        let m = self.iomaps.remove(at);
        if let Some(i) = m.index {
            self.remote_slots[i] = false;
        }
        self.iomap_queue.retain(|&q| q != at);
        for q in &mut self.iomap_queue {
            if *q > at {
                *q -= 1;
            }
        }
        ibv_dereg_mr(m.mr);
        true
    }

    pub fn iomap_pending(&self) -> bool {
        !self.iomap_queue.is_empty()
    }

    /// Tells the peer of the next waiting mapping (an RDMA WRITE into its iomap table).
    pub unsafe fn send_next_iomap(&mut self) -> Result<(), c_int> {
        let which = self.iomap_queue.remove(0);
        let m = &self.iomaps[which];
        let index = m.index.expect("writable mappings wait");
        let entry = Iomap {
            offset: m.offset,
            sge: Sge {
                addr: (*m.mr).addr as u64,
                key: (*m.mr).rkey,
                length: (*m.mr).length as u32,
            },
        };
        let bytes = entry.to_bytes(self.swap);
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= Iomap::LEN as u32;
        let addr = self.remote_iomap.addr + (index * Iomap::LEN) as u64;
        let key = self.remote_iomap.key;
        let msg = proto::msg(proto::OP_IOMAP_SGL, index as u32);
        self.staged(bytes.as_ptr(), Iomap::LEN as u32, |s, sgl, flags| {
            s.post_write(sgl, msg, true, flags, addr, key)
        })
    }

    /// Frees the connection's verbs objects (rdma-core's `rs_free`, before the id goes).
    pub unsafe fn release(&mut self) {
        for m in self.iomaps.drain(..) {
            ibv_dereg_mr(m.mr);
        }
        self.sbuf = None;
        self.rbuf = None;
        self.target = None;
        let id = &mut *self.id;
        if !id.qp.is_null() {
            if self.unack_cqe > 0 {
                ibv_ack_cq_events(id.recv_cq, self.unack_cqe);
                self.unack_cqe = 0;
            }
            crate::qp::rdma_destroy_qp(self.id);
        }
    }
}

/// The size of the next RDMA WRITE of a send with `left` bytes to go: `*olen`, doubled for the
/// next one up to 64 KiB, or what is left (rdma-core's overlap sizing).
fn next_transfer(olen: &mut u32, left: usize) -> u32 {
    if (*olen as usize) < left {
        let x = *olen;
        if *olen < MAX_TRANSFER {
            *olen <<= 1;
        }
        x
    } else {
        left as u32
    }
}

unsafe fn req_notify_cq(cq: *mut ibv_cq) {
    ((*(*cq).context).ops.req_notify_cq.expect("req_notify_cq"))(cq, 0);
}
