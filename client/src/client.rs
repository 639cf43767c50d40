//! A client of the daemon: one connection, one device context. The `softrnic` command and the
//! tests use it; the ibverbs provider speaks the same protocol.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;

use softrnic_emu_core::{
    Access, AttrMask, Counters, Dcqcn, DeviceAttr, Event, Gid, MwType, PortAttr, QpAttr, QpCap,
    QpInit, QpState, QpType, RecvWr, SendWr, Sge, VerbsError, Wc, WcOpcode, WcStatus, WorkQueue,
};

use crate::objects::Table;
use crate::proto::{self, CmEvent, CmRoute, DeviceInfo, Reply, Request, UpRequest};
use crate::share::{self, Registrations};
use crate::shm::{Notices, Region, Ring, RingInfo};
use crate::slot;
use softrnic_sys as sys;

/// A refused call: the errno a provider would return, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The errno.
    pub errno: i32,
    /// The daemon's explanation.
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (errno {})", self.message, self.errno)
    }
}

impl std::error::Error for Error {}

impl From<VerbsError> for Error {
    fn from(e: VerbsError) -> Error {
        Error {
            errno: e.errno(),
            message: e.to_string(),
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            message: format!("talking to the softrnic daemon: {e}"),
        }
    }
}

/// The result of a call.
pub type Result<T> = std::result::Result<T, Error>;

/// What every call gives once the daemon is gone: EIO, as the kernel's verbs give once a
/// device is removed or fails.
fn gone() -> Error {
    Error {
        errno: libc::EIO,
        message: "the softrnic daemon is gone (it stopped, or the device was taken down)".into(),
    }
}

/// Whether an error on the connection means the daemon closed it.
fn closed(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(
        e.kind(),
        UnexpectedEof | BrokenPipe | ConnectionReset | ConnectionAborted | NotConnected
    )
}

/// How many empty polls of a CQ pass between looks at whether the daemon is still there.
const LIVENESS_EVERY: u32 = 64;

/// A frame a capture saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The device it passed through.
    pub device: String,
    /// Sent by the device (else received).
    pub outbound: bool,
    /// When, in nanoseconds since the Unix epoch.
    pub unix_nanos: u64,
    /// Frames lost before this one because the capture read too slowly.
    pub dropped: u64,
    /// The Ethernet frame.
    pub data: Vec<u8>,
}

/// An object of the context that events name, by its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    /// A QP, by its number.
    Qp(u32),
    /// An SRQ.
    Srq(u32),
    /// A CQ.
    Cq(u32),
}

/// A QP's rings: its send ring and its receive ring, which a QP on an SRQ and an XRC
/// initiator (which receives nothing) do not have.
struct QpRings {
    sq: SendQueue,
    rq: Option<RecvQueue>,
}

/// A QP's send ring, with what `ibv_post_send` checks against.
struct SendQueue {
    ring: Ring,
    qp_type: QpType,
    cap: QpCap,
    /// The state this program last moved the QP to. The daemon may move it to error on its
    /// own, where posting is still allowed (the WR is flushed).
    state: QpState,
}

/// A receive ring (a QP's or an SRQ's), with what `ibv_post_recv` checks against.
struct RecvQueue {
    ring: Ring,
    max_wr: u32,
    max_sge: u32,
    /// Work requests posted and not yet completed: a queue holds `max_wr` of them, as the
    /// receive queue of a hardware QP does, however much room its ring has.
    outstanding: u32,
}

impl RecvQueue {
    fn new(ring: Ring, max_wr: u32, max_sge: u32) -> RecvQueue {
        RecvQueue {
            ring,
            max_wr,
            max_sge,
            outstanding: 0,
        }
    }

    /// Puts a receive work request into the ring.
    fn push(&mut self, wr: &RecvWr) -> Result<()> {
        if wr.sgl.len() > self.max_sge as usize {
            return Err(Error {
                errno: libc::EINVAL,
                message: "too many SGEs".into(),
            });
        }
        let full = Error {
            errno: libc::ENOMEM,
            message: "the queue is full".into(),
        };
        if self.outstanding >= self.max_wr {
            return Err(full);
        }
        let pushed = self.ring.push_in_place(|slot| {
            slot::encode_recv(wr, slot).map(drop).ok_or(Error {
                errno: libc::EINVAL,
                message: "too many SGEs for the ring".into(),
            })
        })?;
        if !pushed {
            return Err(full);
        }
        self.outstanding += 1;
        Ok(())
    }
}

/// A connection to the daemon.
pub struct Client {
    stream: UnixStream,
    daemon_pid: u32,
    /// The open context's shared region and the pipe that wakes the daemon.
    region: Option<(Arc<Region>, OwnedFd)>,
    /// The region's notice ring: which queues have new work.
    notices: Option<Notices>,
    /// The read end of the async event pipe (a byte per event), and events read ahead of
    /// their bytes.
    async_fd: Option<OwnedFd>,
    async_events: VecDeque<Event>,
    /// Per completion channel, CQs that fired and were fetched ahead of their bytes.
    cq_events: HashMap<u32, VecDeque<u32>>,
    /// QPs, SRQs and CQs: their rings (with a QP's capabilities, for checks at post time)
    /// and their owners.
    qps: Table<QpRings>,
    srqs: Table<RecvQueue>,
    cqs: Table<Ring>,
    /// Set once the daemon has gone (it died, or closed this context): calls fail with EIO,
    /// destroys succeed, and completions already in the rings can still be polled.
    lost: bool,
    /// Empty polls since the daemon was last seen to be there.
    idle_polls: u32,
    /// Its memory registrations, some with pages shared with the daemon.
    regs: Registrations,
}

fn unexpected(r: Reply) -> Error {
    match r {
        Reply::Error { errno, message } => Error { errno, message },
        other => Error {
            errno: libc::EPROTO,
            message: format!("unexpected reply {other:?}"),
        },
    }
}

impl Client {
    /// Connects to the daemon at `path`.
    pub fn connect(path: &Path) -> Result<Client> {
        let stream = UnixStream::connect(path).map_err(|e| {
            let errno = e.raw_os_error().unwrap_or(libc::ENOENT);
            let message = match errno {
                libc::EACCES => format!(
                    "the softrnic daemon at {} does not serve this user ({e}): a shared \
                     daemon serves the members of its group",
                    path.display()
                ),
                _ => format!(
                    "no softrnic daemon at {} ({e}); start one with `softrnic up`",
                    path.display()
                ),
            };
            Error { errno, message }
        })?;
        let mut c = Client {
            stream,
            daemon_pid: 0,
            region: None,
            notices: None,
            async_fd: None,
            async_events: VecDeque::new(),
            cq_events: HashMap::new(),
            qps: Table::new(),
            srqs: Table::new(),
            cqs: Table::new(),
            lost: false,
            idle_polls: 0,
            regs: Registrations::new(),
        };
        match c.call(Request::Hello {
            version: proto::VERSION,
        })? {
            Reply::Hello { pid, .. } => c.daemon_pid = pid,
            r => return Err(unexpected(r)),
        }
        Ok(c)
    }

    /// The daemon's process id.
    pub fn daemon_pid(&self) -> u32 {
        self.daemon_pid
    }

    /// The connection's socket (`ibv_context.cmd_fd`).
    pub fn socket_fd(&self) -> std::os::fd::RawFd {
        self.stream.as_raw_fd()
    }

    /// Ends the connection now, as dropping the client would: the daemon releases the context,
    /// and its async event pipe reads as closed, which wakes a thread blocked on it.
    pub fn hang_up(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    /// Whether the daemon has gone: the device is lost to this context for good.
    pub fn lost(&self) -> bool {
        self.lost
    }

    /// An error talking to the daemon; one that says it closed the connection marks the
    /// device lost.
    fn broken(&mut self, e: io::Error) -> Error {
        if closed(&e) {
            self.lost = true;
            return gone();
        }
        e.into()
    }

    /// Sends one request (none once the daemon is gone).
    fn send(&mut self, req: &Request) -> Result<()> {
        if self.lost {
            return Err(gone());
        }
        proto::send(&mut self.stream, req).map_err(|e| self.broken(e))
    }

    /// Sends one request and waits for its reply.
    pub fn call(&mut self, req: Request) -> Result<Reply> {
        self.send(&req)?;
        match proto::recv(&mut self.stream) {
            Ok(Some(Reply::Error { errno, message })) => Err(Error { errno, message }),
            Ok(Some(r)) => Ok(r),
            Ok(None) => {
                self.lost = true;
                Err(gone())
            }
            Err(e) => Err(self.broken(e)),
        }
    }

    /// Sends one request whose reply carries up to `max_fds` descriptors, and reads it.
    fn call_with_fds(&mut self, req: Request, max_fds: usize) -> Result<(Reply, Vec<OwnedFd>)> {
        self.send(&req)?;
        self.reply_with_fds(max_fds)
    }

    fn ok(&mut self, req: Request) -> Result<()> {
        match self.call(req)? {
            Reply::Ok => Ok(()),
            r => Err(unexpected(r)),
        }
    }

    /// A destroy. Once the daemon is gone its objects went with it, so the destroy succeeds
    /// and the program can clean up (rdma-core takes a destroy's EIO after a device was
    /// removed as success).
    fn release(&mut self, req: Request) -> Result<()> {
        match self.ok(req) {
            Err(_) if self.lost => Ok(()),
            r => r,
        }
    }

    fn handle(&mut self, req: Request) -> Result<u32> {
        match self.call(req)? {
            Reply::Handle(h) => Ok(h),
            r => Err(unexpected(r)),
        }
    }

    /// Every device.
    pub fn devices(&mut self) -> Result<Vec<DeviceInfo>> {
        match self.call(Request::ListDevices)? {
            Reply::Devices(d) => Ok(d),
            r => Err(unexpected(r)),
        }
    }

    /// Adds a device and returns it.
    pub fn up(&mut self, req: UpRequest) -> Result<DeviceInfo> {
        match self.call(Request::Up(req))? {
            Reply::Devices(mut d) if d.len() == 1 => Ok(d.remove(0)),
            r => Err(unexpected(r)),
        }
    }

    /// Removes a device.
    pub fn down(&mut self, name: &str) -> Result<()> {
        self.ok(Request::Down { name: name.into() })
    }

    /// A device's counters.
    pub fn counters(&mut self, name: &str) -> Result<Counters> {
        match self.call(Request::Counters { name: name.into() })? {
            Reply::Counters(c) => Ok(c),
            r => Err(unexpected(r)),
        }
    }

    /// Device `name`'s congestion control parameters, after setting them to `set` if given.
    pub fn dcqcn(&mut self, name: &str, set: Option<Dcqcn>) -> Result<Dcqcn> {
        match self.call(Request::Dcqcn {
            name: name.into(),
            set,
        })? {
            Reply::Dcqcn(p) => Ok(p),
            r => Err(unexpected(r)),
        }
    }

    /// Makes this connection a context of device `name`, and maps the region its work
    /// requests and completions travel through.
    pub fn open(&mut self, name: &str) -> Result<()> {
        // The reply carries the region's memfd, the wake-up socket and the async event pipe.
        let (reply, fds) = self.call_with_fds(Request::Open { name: name.into() }, 3)?;
        match reply {
            Reply::Ok if fds.len() == 3 => {
                let [memfd, wake, async_fd] = <[OwnedFd; 3]>::try_from(fds).expect("three");
                let region = Region::open(&memfd)?;
                self.notices = Some(Notices::new(&region));
                self.region = Some((region, wake));
                self.async_fd = Some(async_fd);
                Ok(())
            }
            r => Err(unexpected(r)),
        }
    }

    /// Reads a reply whose first bytes carry up to `max_fds` descriptors.
    fn reply_with_fds(&mut self, max_fds: usize) -> Result<(Reply, Vec<OwnedFd>)> {
        let mut buf = vec![0u8; 4096];
        let (n, fds) = match sys::recv_fds(self.stream.as_raw_fd(), &mut buf, max_fds) {
            Ok((0, _)) => return Err(self.broken(io::ErrorKind::UnexpectedEof.into())),
            Ok(got) => got,
            Err(e) => return Err(self.broken(e)),
        };
        buf.truncate(n);
        if buf.len() < 4 {
            let mut rest = vec![0u8; 4 - buf.len()];
            if let Err(e) = self.stream.read_exact(&mut rest) {
                return Err(self.broken(e));
            }
            buf.extend_from_slice(&rest);
        }
        let len = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
        if len > proto::MAX_MESSAGE {
            return Err(Error {
                errno: libc::EPROTO,
                message: "reply too long".into(),
            });
        }
        let mut rest = vec![0u8; (4 + len).saturating_sub(buf.len())];
        if let Err(e) = self.stream.read_exact(&mut rest) {
            return Err(self.broken(e));
        }
        buf.extend_from_slice(&rest);
        match proto::decode::<Reply>(&buf[4..])? {
            Reply::Error { errno, message } => Err(Error { errno, message }),
            r => Ok((r, fds)),
        }
    }

    fn region(&self) -> Result<&Arc<Region>> {
        self.region.as_ref().map(|(r, _)| r).ok_or(Error {
            errno: libc::EINVAL,
            message: "open a device first".into(),
        })
    }

    fn ring(&self, info: RingInfo) -> Result<Ring> {
        Ok(Ring::new(self.region()?, info)?)
    }

    /// Tells the daemon work was posted: a doorbell count, and a wake-up only if it sleeps.
    /// A wake-up that finds the daemon gone marks the device lost: EIO, as nothing posted
    /// will be done.
    pub fn doorbell(&mut self) -> Result<()> {
        if let Some((region, wake)) = &self.region {
            region.ring_doorbell();
            if region.sleeping() && !sys::wake(wake.as_raw_fd()) {
                self.lost = true;
                return Err(gone());
            }
        }
        Ok(())
    }

    /// `ibv_query_device`.
    pub fn query_device(&mut self) -> Result<DeviceAttr> {
        match self.call(Request::QueryDevice)? {
            Reply::Device(d) => Ok(d),
            r => Err(unexpected(r)),
        }
    }

    /// `ibv_query_port`.
    pub fn query_port(&mut self) -> Result<PortAttr> {
        match self.call(Request::QueryPort)? {
            Reply::Port(p) => Ok(p),
            r => Err(unexpected(r)),
        }
    }

    /// The GID table.
    pub fn gids(&mut self) -> Result<Vec<Gid>> {
        match self.call(Request::QueryGids)? {
            Reply::Gids(g) => Ok(g),
            r => Err(unexpected(r)),
        }
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> Result<u32> {
        self.handle(Request::AllocPd)
    }

    /// `ibv_dealloc_pd`.
    pub fn dealloc_pd(&mut self, pd: u32) -> Result<()> {
        self.release(Request::DeallocPd(pd))
    }

    /// `ibv_reg_mr` of `len` bytes at `addr` in this process.
    pub fn reg_mr(&mut self, pd: u32, addr: u64, len: u64, access: Access) -> Result<u32> {
        self.reg_mr_iova(pd, addr, len, addr, access)
    }

    /// `ibv_reg_mr_iova`: `len` bytes at `addr`, which work requests and peers name from
    /// `iova` on.
    pub fn reg_mr_iova(
        &mut self,
        pd: u32,
        addr: u64,
        len: u64,
        iova: u64,
        access: Access,
    ) -> Result<u32> {
        share::register(self.regs.id(), (addr, len), |shared| {
            self.handle(Request::RegMr {
                pd,
                addr,
                len,
                iova,
                access,
                shared,
            })
        })
    }

    /// `ibv_rereg_mr`: region `key` moves to PD `pd`, to `len` bytes at `addr`
    /// (`translation`), to `access`, each if given; its key stays.
    pub fn rereg_mr(
        &mut self,
        key: u32,
        pd: Option<u32>,
        translation: Option<(u64, u64)>,
        access: Option<Access>,
    ) -> Result<()> {
        share::reregister(self.regs.id(), key, translation, || {
            self.ok(Request::ReregMr {
                key,
                pd,
                translation,
                access,
            })
        })
    }

    /// `ibv_dereg_mr`.
    pub fn dereg_mr(&mut self, key: u32) -> Result<()> {
        share::deregister(self.regs.id(), key, || self.release(Request::DeregMr(key)))
    }

    /// `ibv_create_cq`.
    pub fn create_cq(&mut self, cqe: u32) -> Result<u32> {
        self.create_cq_on(cqe, None)
    }

    /// `ibv_create_cq` with a completion channel.
    pub fn create_cq_on(&mut self, cqe: u32, channel: Option<u32>) -> Result<u32> {
        match self.call(Request::CreateCq { cqe, channel })? {
            Reply::CqCreated { cq, ring } => {
                let ring = self.ring(ring)?;
                self.cqs.set_queues(cq, ring);
                Ok(cq)
            }
            r => Err(unexpected(r)),
        }
    }

    /// Keeps `owner` with `object` until the object is destroyed: the provider keeps its C
    /// structure's address there, for the events that name the object.
    pub fn set_owner(&mut self, object: Object, owner: usize) {
        match object {
            Object::Qp(qpn) => self.qps.set_owner(qpn, owner),
            Object::Srq(srq) => self.srqs.set_owner(srq, owner),
            Object::Cq(cq) => self.cqs.set_owner(cq, owner),
        }
    }

    /// What [`set_owner`](Self::set_owner) kept with `object`, if it still exists.
    pub fn owner(&self, object: Object) -> Option<usize> {
        match object {
            Object::Qp(qpn) => self.qps.owner(qpn),
            Object::Srq(srq) => self.srqs.owner(srq),
            Object::Cq(cq) => self.cqs.owner(cq),
        }
    }

    /// `ibv_destroy_cq`.
    pub fn destroy_cq(&mut self, cq: u32) -> Result<()> {
        self.release(Request::DestroyCq(cq))?;
        self.cqs.remove(cq);
        Ok(())
    }

    /// `ibv_create_qp`; returns the QP number.
    pub fn create_qp(&mut self, pd: u32, init: QpInit) -> Result<u32> {
        match self.call(Request::CreateQp { pd, init })? {
            Reply::QpCreated { qpn, sq, rq } => {
                let sq = SendQueue {
                    ring: self.ring(sq)?,
                    qp_type: init.qp_type,
                    cap: init.cap,
                    state: QpState::Reset,
                };
                let rq = match (init.srq, rq) {
                    (Some(_), _) => None,
                    (None, None) if init.qp_type == QpType::XrcSend => None,
                    (None, Some(rq)) => Some(RecvQueue::new(
                        self.ring(rq)?,
                        init.cap.max_recv_wr,
                        init.cap.max_recv_sge,
                    )),
                    (None, None) => {
                        return Err(Error {
                            errno: libc::EPROTO,
                            message: "the daemon gave a QP without an SRQ no receive ring".into(),
                        });
                    }
                };
                self.qps.set_queues(qpn, QpRings { sq, rq });
                Ok(qpn)
            }
            r => Err(unexpected(r)),
        }
    }

    /// `ibv_modify_qp` (the daemon resolves the address handle's MAC).
    pub fn modify_qp(&mut self, qpn: u32, attr: QpAttr, mask: AttrMask) -> Result<()> {
        self.ok(Request::ModifyQp { qpn, attr, mask })?;
        if mask.contains(AttrMask::STATE)
            && let Some(q) = self.qps.queues_mut(qpn)
        {
            q.sq.state = attr.qp_state;
        }
        if mask.contains(AttrMask::STATE) && attr.qp_state == QpState::Reset {
            // The daemon dropped the QP's completions it still held; those already in the
            // rings go too (what a QP restarted from RESET polls is new).
            for ring in self.cqs.all_queues() {
                ring.drop_waiting(|s| slot::decode_wc(s).is_some_and(|w| w.qp_num == qpn));
            }
            // Its receives went without completions (IBA 10.3.1): the queue is empty.
            if let Some(QpRings { rq: Some(r), .. }) = self.qps.queues_mut(qpn) {
                r.outstanding = 0;
            }
        }
        Ok(())
    }

    /// `ibv_query_qp`.
    pub fn query_qp(&mut self, qpn: u32) -> Result<(QpAttr, QpCap)> {
        match self.call(Request::QueryQp(qpn))? {
            Reply::Qp(a, c) => Ok((a, c)),
            r => Err(unexpected(r)),
        }
    }

    /// `ibv_destroy_qp`.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<()> {
        self.release(Request::DestroyQp(qpn))?;
        self.qps.remove(qpn);
        Ok(())
    }

    /// `ibv_attach_mcast`.
    pub fn attach_mcast(&mut self, qpn: u32, gid: Gid) -> Result<()> {
        self.ok(Request::AttachMcast { qpn, gid })
    }

    /// `ibv_detach_mcast`.
    pub fn detach_mcast(&mut self, qpn: u32, gid: Gid) -> Result<()> {
        self.ok(Request::DetachMcast { qpn, gid })
    }

    /// `ibv_post_send`: each work request goes into the QP's send ring; no message, and a
    /// syscall only to wake a sleeping daemon. Refused with the errno rxe gives: EINVAL for a
    /// WR the QP cannot carry (its state, type or capabilities), ENOMEM when the queue is full
    /// (the daemon leaves WRs in the ring while the QP's queue has no room).
    pub fn post_send(&mut self, qpn: u32, wrs: Vec<SendWr>) -> Result<()> {
        let result = push_all(wrs, |wr| self.push_send(qpn, &wr, None));
        let rung = self.doorbell();
        result.and(rung)
    }

    /// Puts one send work request into the QP's ring, with `post_send`'s checks; the caller
    /// rings the doorbell after a batch. An inline WR's bytes are `taken` by the caller, or
    /// read here from the SGEs (a bad address is then EINVAL, not a fault).
    pub fn push_send(&mut self, qpn: u32, wr: &SendWr, taken: Option<&[u8]>) -> Result<()> {
        let einval = |m: &str| Error {
            errno: libc::EINVAL,
            message: m.into(),
        };
        if self.lost {
            return Err(gone());
        }
        let sq = &self.qps.queues(qpn).ok_or_else(|| einval("no such QP"))?.sq;
        // What the engine would refuse is refused here, at post time, as rxe does: the daemon
        // takes the WR later, when the program can no longer be told.
        if sq.state < QpState::Rts && sq.state != QpState::Err {
            return Err(einval("the QP is not ready to send"));
        }
        let len = wr.check(sq.qp_type, &sq.cap)? as usize;
        let read;
        let inline = match taken {
            _ if !wr.is_inline() => None,
            Some(bytes) if bytes.len() == len => Some(bytes),
            Some(_) => return Err(einval("inline data of the wrong length")),
            // Inline bytes are taken now, at post time (IBA 10.8.2.2).
            None => {
                read = self.read_inline(&wr.sgl, len)?;
                Some(&read[..])
            }
        };
        let sq = &mut self.qps.queues_mut(qpn).expect("checked").sq;
        let pushed = sq.ring.push_in_place(|slot| {
            slot::encode_send(wr, inline, slot)
                .map(drop)
                .ok_or_else(|| einval("the work request does not fit the QP's capabilities"))
        })?;
        if !pushed {
            return Err(Error {
                errno: libc::ENOMEM,
                message: "the send queue is full".into(),
            });
        }
        announce(&mut self.notices, &sq.ring, WorkQueue::Send(qpn));
        Ok(())
    }

    /// The bytes of an inline WR's SGEs, read from this process safely.
    fn read_inline(&self, sgl: &[Sge], len: usize) -> Result<Vec<u8>> {
        let mut data = vec![0u8; len];
        let mut at = 0;
        for sge in sgl {
            let end = at + sge.length as usize;
            sys::vm_read(std::process::id(), sge.addr, &mut data[at..end]).map_err(|_| Error {
                errno: libc::EINVAL,
                message: "inline data address not readable".into(),
            })?;
            at = end;
        }
        Ok(data)
    }

    /// `ibv_post_recv`, through the QP's receive ring.
    pub fn post_recv(&mut self, qpn: u32, wrs: Vec<RecvWr>) -> Result<()> {
        let result = push_all(wrs, |wr| self.push_recv(qpn, &wr));
        let rung = self.doorbell();
        result.and(rung)
    }

    /// Puts one receive work request into the QP's ring; the caller rings the doorbell.
    pub fn push_recv(&mut self, qpn: u32, wr: &RecvWr) -> Result<()> {
        if self.lost {
            return Err(gone());
        }
        // Receives may be posted from INIT on, not in RESET (IBA 10.8.2.2; rxe: EINVAL).
        if self
            .qps
            .queues(qpn)
            .is_some_and(|q| q.sq.state == QpState::Reset)
        {
            return Err(Error {
                errno: libc::EINVAL,
                message: "the QP is in RESET".into(),
            });
        }
        let q = queue(self.qps.queues_mut(qpn).and_then(|q| q.rq.as_mut()))?;
        q.push(wr)?;
        announce(&mut self.notices, &q.ring, WorkQueue::Recv(qpn));
        Ok(())
    }

    /// Up to `max` completions from the CQ's ring, in a new vector (tests and tools).
    pub fn poll_cq(&mut self, cq: u32, max: u32) -> Result<Vec<Wc>> {
        let mut out = vec![Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); max as usize];
        let n = self.poll_cq_into(cq, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// `ibv_poll_cq` into `out`: up to `out.len()` completions, with no syscall and no
    /// allocation; how many.
    pub fn poll_cq_into(&mut self, cq: u32, out: &mut [Wc]) -> Result<usize> {
        let ring = self.cqs.queues_mut(cq).ok_or(Error {
            errno: libc::EINVAL,
            message: "no such CQ".into(),
        })?;
        // Completions that found the ring full wait in the daemon: room made here must wake
        // it, or they wait for its next timeout.
        let was_full = ring.is_full();
        let mut got = 0;
        while got < out.len() {
            let Some(wc) = ring.pop_in_place(slot::decode_wc) else {
                break;
            };
            match wc {
                Some(wc) => out[got] = wc,
                // The program wrote over its own ring: EIO, after the completions before it.
                None if got == 0 => {
                    return Err(Error {
                        errno: libc::EIO,
                        message: "a completion slot the daemon did not write".into(),
                    });
                }
                None => break,
            }
            got += 1;
        }
        if was_full && got > 0 {
            // A daemon gone is found below, when the ring is empty.
            let _ = self.doorbell();
        }
        if got == 0 {
            // Completions already in the ring are the program's even after the daemon has
            // gone; then polls fail, as on a device that was removed. A program spinning here
            // makes no other call, so it is looked for every few polls.
            self.idle_polls += 1;
            if self.idle_polls.is_multiple_of(LIVENESS_EVERY)
                && sys::hung_up(self.stream.as_raw_fd())
            {
                self.lost = true;
            }
            if self.lost {
                return Err(gone());
            }
        }
        // A receive completion frees its work request's place in the queue.
        for wc in out[..got].iter().filter(|w| w.opcode as u8 & 0x80 != 0) {
            let queue = match wc.srq {
                // An XRC SRQ's completions name target QPs this program may not know.
                Some(srq) => self.srqs.queues_mut(srq),
                None => self.qps.queues_mut(wc.qp_num).and_then(|q| q.rq.as_mut()),
            };
            if let Some(q) = queue {
                q.outstanding = q.outstanding.saturating_sub(1);
            }
        }
        Ok(got)
    }

    /// `ibv_create_comp_channel`: the channel and its fd, which gets a byte each time an armed
    /// CQ on it gets a completion.
    pub fn create_comp_channel(&mut self) -> Result<(u32, OwnedFd)> {
        let (reply, mut fds) = self.call_with_fds(Request::CreateCompChannel, 1)?;
        match (reply, fds.pop()) {
            (Reply::Handle(id), Some(fd)) => {
                self.cq_events.insert(id, VecDeque::new());
                Ok((id, fd))
            }
            (r, _) => Err(unexpected(r)),
        }
    }

    /// The CQ of the next notification on `channel`, once the caller has read its byte from
    /// the channel's fd (`ibv_get_cq_event`; the read may block, so it is the caller's, outside
    /// any lock).
    pub fn cq_event(&mut self, channel: u32) -> Result<u32> {
        let queued = self.cq_events.get_mut(&channel).ok_or(Error {
            errno: libc::EINVAL,
            message: "no such completion channel".into(),
        })?;
        if queued.is_empty() {
            let fired = match self.call(Request::CqEvents { channel })? {
                Reply::Cqs(c) => c,
                r => return Err(unexpected(r)),
            };
            self.cq_events
                .get_mut(&channel)
                .expect("checked")
                .extend(fired);
        }
        self.cq_events
            .get_mut(&channel)
            .and_then(VecDeque::pop_front)
            .ok_or(Error {
                errno: libc::EAGAIN,
                message: "no notification behind that byte".into(),
            })
    }

    /// `ibv_destroy_comp_channel`.
    pub fn destroy_comp_channel(&mut self, channel: u32) -> Result<()> {
        self.release(Request::DestroyCompChannel(channel))?;
        self.cq_events.remove(&channel);
        Ok(())
    }

    /// The async event pipe's read end: readable while events wait (`ibv_context.async_fd`).
    pub fn async_fd(&self) -> Option<std::os::fd::RawFd> {
        self.async_fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// The next async event, once the caller has read its byte from [`async_fd`](Self::async_fd)
    /// (`ibv_get_async_event`).
    pub fn async_event(&mut self) -> Result<Event> {
        if self.async_events.is_empty() {
            let events = self.events()?;
            self.async_events.extend(events);
        }
        self.async_events.pop_front().ok_or(Error {
            errno: libc::EAGAIN,
            message: "no event behind that byte".into(),
        })
    }

    /// Makes this connection an RDMA CM event channel; its fd gets a byte per event.
    pub fn cm_open(&mut self) -> Result<OwnedFd> {
        let (reply, mut fds) = self.call_with_fds(Request::CmOpen, 1)?;
        match (reply, fds.pop()) {
            (Reply::Ok, Some(fd)) => Ok(fd),
            (r, _) => Err(unexpected(r)),
        }
    }

    /// An RDMA CM request answered by Ok (bind, resolve, listen, connect, accept, reject,
    /// disconnect, notify, set option).
    pub fn cm(&mut self, req: Request) -> Result<()> {
        self.ok(req)
    }

    /// Every listening rdma_cm id of the daemon.
    pub fn cm_listeners(&mut self) -> Result<Vec<proto::CmListener>> {
        match self.call(Request::CmListeners)? {
            Reply::CmListeners(l) => Ok(l),
            r => Err(unexpected(r)),
        }
    }

    /// `rdma_create_id` on this channel: the id's handle.
    pub fn cm_create_id(&mut self, ps: u16, qp_type: QpType) -> Result<u32> {
        self.handle(Request::CmCreateId { ps, qp_type })
    }

    /// `rdma_destroy_id`: the number of its events the program read. Once the daemon is gone,
    /// its ids went with it: 0.
    pub fn cm_destroy_id(&mut self, id: u32) -> Result<u32> {
        match self.handle(Request::CmDestroyId(id)) {
            Err(_) if self.lost => Ok(0),
            r => r,
        }
    }

    /// `rdma_migrate_id` to this channel: the number of its events the program read.
    pub fn cm_migrate(&mut self, id: u32) -> Result<u32> {
        self.handle(Request::CmMigrate(id))
    }

    /// `rdma_join_multicast`: the join's handle.
    pub fn cm_join(&mut self, id: u32, addr: std::net::SocketAddr) -> Result<u32> {
        self.handle(Request::CmJoin { id, addr })
    }

    /// `rdma_leave_multicast`: the number of the join's events the program read.
    pub fn cm_leave(&mut self, mc: u32) -> Result<u32> {
        match self.handle(Request::CmLeave(mc)) {
            Err(_) if self.lost => Ok(0),
            r => r,
        }
    }

    /// An id's addresses and route.
    pub fn cm_query(&mut self, id: u32) -> Result<CmRoute> {
        match self.call(Request::CmQuery(id))? {
            Reply::CmRoute(r) => Ok(r),
            r => Err(unexpected(r)),
        }
    }

    /// `rdma_init_qp_attr`.
    pub fn cm_init_qp_attr(&mut self, id: u32, state: QpState) -> Result<(QpAttr, AttrMask)> {
        match self.call(Request::CmInitQpAttr { id, state })? {
            Reply::QpAttr(a, m) => Ok((a, m)),
            r => Err(unexpected(r)),
        }
    }

    /// The next event of this channel, once the caller has read its byte.
    pub fn cm_event(&mut self) -> Result<CmEvent> {
        match self.call(Request::CmGetEvent)? {
            Reply::CmEvent(e) => Ok(e),
            r => Err(unexpected(r)),
        }
    }

    /// `ibv_req_notify_cq`.
    pub fn req_notify_cq(&mut self, cq: u32, solicited: bool) -> Result<()> {
        self.ok(Request::ReqNotifyCq { cq, solicited })
    }

    /// `ibv_create_srq`.
    pub fn create_srq(&mut self, pd: u32, max_wr: u32, max_sge: u32) -> Result<u32> {
        let req = Request::CreateSrq {
            pd,
            max_wr,
            max_sge,
        };
        self.srq_with_ring(req, max_wr, max_sge)
    }

    /// An SRQ the daemon made, with its ring mapped.
    fn srq_with_ring(&mut self, req: Request, max_wr: u32, max_sge: u32) -> Result<u32> {
        match self.call(req)? {
            Reply::SrqCreated { srq, ring } => {
                let ring = self.ring(ring)?;
                self.srqs
                    .set_queues(srq, RecvQueue::new(ring, max_wr, max_sge));
                Ok(srq)
            }
            r => Err(unexpected(r)),
        }
    }

    /// `ibv_open_xrcd`: a new XRC domain, or (`file`: the device and inode of the file the
    /// program named) the one the daemon's programs share for that file.
    pub fn open_xrcd(
        &mut self,
        file: Option<(u64, u64)>,
        create: bool,
        exclusive: bool,
    ) -> Result<u32> {
        self.handle(Request::OpenXrcd {
            file,
            create,
            exclusive,
        })
    }

    /// `ibv_close_xrcd`.
    pub fn close_xrcd(&mut self, xrcd: u32) -> Result<()> {
        self.release(Request::CloseXrcd(xrcd))
    }

    /// `ibv_create_srq_ex` for an XRC SRQ; its handle is its number.
    pub fn create_xrc_srq(
        &mut self,
        pd: u32,
        xrcd: u32,
        cq: u32,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<u32> {
        let req = Request::CreateXrcSrq {
            pd,
            xrcd,
            cq,
            max_wr,
            max_sge,
        };
        self.srq_with_ring(req, max_wr, max_sge)
    }

    /// An XRC target QP (`IBV_QPT_XRC_RECV`): no rings, as it has no queues of its own.
    pub fn create_xrc_recv_qp(&mut self, xrcd: u32) -> Result<u32> {
        self.handle(Request::CreateXrcRecvQp { xrcd })
    }

    /// `ibv_open_qp`: an XRC target QP of domain `xrcd`.
    pub fn open_qp(&mut self, xrcd: u32, qpn: u32) -> Result<()> {
        self.ok(Request::OpenQp { xrcd, qpn })
    }

    /// `ibv_post_srq_recv`, through the SRQ's ring.
    pub fn post_srq_recv(&mut self, srq: u32, wrs: Vec<RecvWr>) -> Result<()> {
        let result = push_all(wrs, |wr| self.push_srq_recv(srq, &wr));
        let rung = self.doorbell();
        result.and(rung)
    }

    /// Puts one receive work request into the SRQ's ring; the caller rings the doorbell.
    pub fn push_srq_recv(&mut self, srq: u32, wr: &RecvWr) -> Result<()> {
        if self.lost {
            return Err(gone());
        }
        let q = queue(self.srqs.queues_mut(srq))?;
        q.push(wr)?;
        announce(&mut self.notices, &q.ring, WorkQueue::Srq(srq));
        Ok(())
    }

    /// Arms an SRQ's limit (`ibv_modify_srq`).
    pub fn modify_srq(&mut self, srq: u32, limit: u32) -> Result<()> {
        self.ok(Request::ModifySrq { srq, limit })
    }

    /// `ibv_alloc_mw`.
    pub fn alloc_mw(&mut self, pd: u32, mw_type: MwType) -> Result<u32> {
        self.handle(Request::AllocMw { pd, mw_type })
    }

    /// `ibv_dealloc_mw`.
    pub fn dealloc_mw(&mut self, key: u32) -> Result<()> {
        self.release(Request::DeallocMw(key))
    }

    /// `ibv_destroy_srq`.
    pub fn destroy_srq(&mut self, srq: u32) -> Result<()> {
        self.release(Request::DestroySrq(srq))?;
        self.srqs.remove(srq);
        Ok(())
    }

    /// `ibv_resize_cq`.
    pub fn resize_cq(&mut self, cq: u32, cqe: u32) -> Result<()> {
        match self.call(Request::ResizeCq { cq, cqe })? {
            Reply::CqCreated { ring, .. } => {
                let ring = self.ring(ring)?;
                self.cqs.set_queues(cq, ring);
                Ok(())
            }
            r => Err(unexpected(r)),
        }
    }

    /// The context's events not yet fetched, without reading their bytes from the async pipe
    /// (for a client that does not use it).
    pub fn events(&mut self) -> Result<Vec<Event>> {
        match self.call(Request::PollEvents)? {
            Reply::Events(e) => Ok(e),
            r => Err(unexpected(r)),
        }
    }

    /// Turns this connection into a capture of `device` (or of every device); then read the
    /// frames with [`next_frame`](Self::next_frame).
    pub fn capture(&mut self, device: Option<&str>) -> Result<()> {
        self.ok(Request::Capture {
            device: device.map(str::to_owned),
        })
    }

    /// Whether a message is waiting, after waiting up to `timeout_ms`.
    pub fn readable(&self, timeout_ms: i32) -> bool {
        use std::os::fd::AsRawFd;
        softrnic_sys::poll_readable(&[self.stream.as_raw_fd()], timeout_ms).unwrap_or(0) > 0
    }

    /// The next captured frame; blocks until one comes. `None` if the daemon went away.
    pub fn next_frame(&mut self) -> Result<Option<Frame>> {
        match proto::recv(&mut self.stream)? {
            Some(Reply::Frame {
                device,
                outbound,
                unix_nanos,
                dropped,
                data,
            }) => Ok(Some(Frame {
                device,
                outbound,
                unix_nanos,
                dropped,
                data,
            })),
            Some(r) => Err(unexpected(r)),
            None => Ok(None),
        }
    }

    /// Polls `cq` until `n` completions arrived or `timeout` passed.
    pub fn wait(&mut self, cq: u32, n: usize, timeout: std::time::Duration) -> Result<Vec<Wc>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut out = Vec::new();
        while out.len() < n && std::time::Instant::now() < deadline {
            let got = self.poll_cq(cq, (n - out.len()) as u32)?;
            if got.is_empty() {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            out.extend(got);
        }
        Ok(out)
    }
}

/// A receive queue that exists, or EINVAL.
/// Tells the daemon that `ring` has new work (the caller rings the doorbell after a batch).
fn announce(notices: &mut Option<Notices>, ring: &Ring, queue: WorkQueue) {
    if let Some(n) = notices {
        n.announce(ring, queue);
    }
}

fn queue(q: Option<&mut RecvQueue>) -> Result<&mut RecvQueue> {
    q.ok_or(Error {
        errno: libc::EINVAL,
        message: "no such queue".into(),
    })
}

/// Runs `push` on each work request, stopping at the first refusal (named by its position).
fn push_all<T>(wrs: Vec<T>, mut push: impl FnMut(T) -> Result<()>) -> Result<()> {
    for (n, wr) in wrs.into_iter().enumerate() {
        push(wr).map_err(|e| Error {
            errno: e.errno,
            message: format!("work request {n}: {}", e.message),
        })?;
    }
    Ok(())
}
