//! The AF_XDP backend: an XDP program sends RoCEv2 frames to an AF_XDP socket, which hands them
//! to us through shared-memory rings; everything else stays with the kernel.
//!
//! Copy mode (`XDP_COPY`, the mode veth and most drivers give) with `XDP_USE_NEED_WAKEUP`, and
//! multi-buffer (`XDP_USE_SG`, a program loaded with `BPF_F_XDP_HAS_FRAGS`): a frame longer
//! than a UMEM chunk spans several descriptors, each but the last marked `XDP_PKT_CONTD`, so
//! 4096-byte path MTUs (9000-byte interfaces) work.

mod bpf;
mod ring;

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use crate::Link;

use crate::backend::{Backend, Interface};
pub use bpf::Mode;
use ring::Ring;
use softrnic_sys::Mmap;

use softrnic_sys as sys;

/// Bytes per UMEM chunk.
const CHUNK: u32 = 4096;
/// Chunks in a queue's UMEM: half receive, half transmit. Up to four queues each have this
/// many (a QP's frames all arrive on one queue, and a READ's responses come in a burst that a
/// smaller receive half drops); more share four times as many, down to `MIN_CHUNKS` each.
const CHUNKS: u32 = 4096;
const MIN_CHUNKS: u32 = 512;
/// Entries per ring.
const RING: u32 = 2048;
/// The largest frame: a 9000-byte MTU and its Ethernet header and VLAN tag.
pub const MAX_FRAME: usize = 9000 + 18;
/// A frame to send is built in place in a slot of adjacent chunks that holds the largest,
/// and goes out as one descriptor per chunk.
const SLOT: u64 = (MAX_FRAME.div_ceil(CHUNK as usize) * CHUNK as usize) as u64;

/// What the backend counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Frames sent.
    pub tx: u64,
    /// Frames received.
    pub rx: u64,
    /// Frames longer than [`MAX_FRAME`], dropped.
    pub rx_too_long: u64,
}

/// AF_XDP sockets on the receive queues of one interface (every queue, or a share of them:
/// [`AfXdp::open_split`]), with the program that sends each queue's RoCEv2 frames to its
/// socket attached.
pub struct AfXdp {
    /// One per receive queue it serves, in queue order.
    sockets: Vec<Socket>,
    /// The socket `receive` looks at first (they take turns).
    next_rx: usize,
    /// The queue the last frame went out on: the next is built in its UMEM, since it is
    /// likely of the same QP (a frame of another queue's is copied there).
    last_tx: usize,
    interface: Interface,
    /// The program, attached while any share of the interface's queues is open.
    _attached: Arc<Attached>,
}

/// The XDP program on an interface, and its map of the queues' sockets.
struct Attached {
    // The link detaches the program on drop; the map and program live as long.
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
}

/// The socket of one queue: its UMEM and four rings.
struct Socket {
    fd: OwnedFd,
    umem: Mmap,
    fill: Ring<u64>,
    completion: Ring<u64>,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    /// Slots free for transmitting, by their first chunk.
    free: Vec<u64>,
    /// Where the slots start.
    tx_base: u64,
    /// Received chunks to give back through the fill ring (it is consumed lazily).
    refill: Vec<u64>,
    /// Frames pushed to the TX ring since the last kick.
    unkicked: u32,
    /// A frame being assembled from several RX descriptors.
    rx_frame: Vec<u8>,
    stats: XdpStats,
}

fn setsockopt<T>(fd: &OwnedFd, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: `value` outlives the call and its size is passed.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            (value as *const T).cast(),
            size_of::<T>() as u32,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn err(e: io::Error, what: &str) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) => " (AF_XDP needs CAP_NET_ADMIN and CAP_NET_RAW: run as root)",
        Some(libc::ENOBUFS) | Some(libc::ENOMEM) => {
            " (the UMEM counts against RLIMIT_MEMLOCK without CAP_IPC_LOCK: raise it with \
             `ulimit -l unlimited` or run as root)"
        }
        Some(libc::EOPNOTSUPP) => " (the driver does not support this XDP mode)",
        _ => "",
    };
    io::Error::new(e.kind(), format!("{what}: {e}{hint}"))
}

impl AfXdp {
    /// Opens interface `ifname` (in the calling thread's namespace), binds a socket to each
    /// of its receive queues, and attaches the program in `mode`.
    pub fn open(ifname: &str, mode: Mode) -> io::Result<AfXdp> {
        let mut parts = AfXdp::open_split(ifname, mode, 1)?;
        Ok(parts.remove(0))
    }

    /// As [`open`](Self::open), with the queues dealt out to `parts` backends (queue `q` to
    /// part `q % parts`), so that each runs on its own thread: as many parts as asked, or as
    /// the interface has queues if fewer. Each sends on its own queues only.
    pub fn open_split(ifname: &str, mode: Mode, parts: usize) -> io::Result<Vec<AfXdp>> {
        let ifindex = sys::if_index(ifname).map_err(|e| err(e, ifname))?;
        let probe = sys::packet_socket().map_err(|e| err(e, "query the interface"))?;
        let interface = Interface::query(&probe, ifname).map_err(|e| err(e, ifname))?;
        let queues = sys::if_rx_queues(&probe, ifname).map_err(|e| err(e, ifname))?;
        let chunks = (CHUNKS * 4 / queues).clamp(MIN_CHUNKS, CHUNKS);
        let sockets = (0..queues)
            .map(|q| Socket::open(ifindex, q, chunks))
            .collect::<io::Result<Vec<_>>>()?;
        let xskmap = bpf::xskmap(queues).map_err(|e| err(e, "create the XSKMAP"))?;
        for (q, socket) in sockets.iter().enumerate() {
            bpf::map_set(&xskmap, q as u32, socket.fd.as_raw_fd())
                .map_err(|e| err(e, "fill the XSKMAP"))?;
        }
        let prog = bpf::load(&xskmap).map_err(|e| err(e, "load the XDP program"))?;
        let link =
            bpf::attach(&prog, ifindex, mode).map_err(|e| err(e, "attach the XDP program"))?;
        let attached = Arc::new(Attached {
            _link: link,
            _prog: prog,
            _map: xskmap,
        });
        let parts = parts.clamp(1, sockets.len());
        let mut shares: Vec<Vec<Socket>> = (0..parts).map(|_| Vec::new()).collect();
        for (q, socket) in sockets.into_iter().enumerate() {
            shares[q % parts].push(socket);
        }
        Ok(shares
            .into_iter()
            .map(|sockets| AfXdp {
                sockets,
                next_rx: 0,
                last_tx: 0,
                interface,
                _attached: Arc::clone(&attached),
            })
            .collect())
    }

    /// Its counters, summed over the queues, and each queue's frames received.
    pub fn stats(&self) -> (XdpStats, Vec<u64>) {
        let mut sum = XdpStats::default();
        for s in &self.sockets {
            sum.tx += s.stats.tx;
            sum.rx += s.stats.rx;
            sum.rx_too_long += s.stats.rx_too_long;
        }
        (sum, self.sockets.iter().map(|s| s.stats.rx).collect())
    }
}

/// The queue a frame is sent on: by its UDP source port, which RoCEv2 sets per QP (the flow's
/// entropy, Annex A17.5.1.1), so a QP's frames keep their order and QPs spread over the queues as the peer's
/// receive side hashes them. Queue 0 for anything else.
fn queue_of(frame: &[u8], queues: usize) -> usize {
    if queues == 1 {
        return 0;
    }
    let at = |i: usize| frame.get(i).copied().map_or(0, usize::from);
    let mut l3 = 14;
    let mut ethertype = at(12) << 8 | at(13);
    if ethertype == 0x8100 {
        l3 += 4;
        ethertype = at(16) << 8 | at(17);
    }
    let udp = match ethertype {
        0x0800 => l3 + (at(l3) & 0xf) * 4,
        0x86dd => l3 + 40,
        _ => return 0,
    };
    (at(udp) << 8 | at(udp + 1)) % queues
}

impl Socket {
    /// A socket bound to queue `queue` of interface `ifindex`, with a UMEM of `chunks` chunks.
    fn open(ifindex: u32, queue: u32, chunks: u32) -> io::Result<Socket> {
        // SAFETY: no pointers; the descriptor is owned below.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(err(io::Error::last_os_error(), "AF_XDP socket"));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let umem = Mmap::new((CHUNK * chunks) as usize, None).map_err(|e| err(e, "UMEM"))?;
        // Zeroed in full: kernels from 6.8 read tx_metadata_len.
        // SAFETY: xdp_umem_reg is plain data; all-zero is valid.
        let mut reg: libc::xdp_umem_reg = unsafe { std::mem::zeroed() };
        reg.addr = umem.as_ptr() as u64;
        reg.len = umem.len() as u64;
        reg.chunk_size = CHUNK;
        reg.headroom = 0;
        setsockopt(&fd, libc::XDP_UMEM_REG, &reg).map_err(|e| err(e, "register the UMEM"))?;
        for name in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            setsockopt(&fd, name, &RING).map_err(|e| err(e, "ring size"))?;
        }
        // SAFETY: xdp_mmap_offsets is plain data; all-zero is valid.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::xdp_mmap_offsets>() as u32;
        // SAFETY: `off` and `len` outlive the call and `len` is its size.
        let ret = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                (&raw mut off).cast(),
                &raw mut len,
            )
        };
        if ret < 0 {
            return Err(err(io::Error::last_os_error(), "ring offsets"));
        }
        let map = |e| err(e, "map a ring");
        let mut fill =
            Ring::map(&fd, libc::XDP_UMEM_PGOFF_FILL_RING, &off.fr, RING).map_err(map)?;
        let completion =
            Ring::map(&fd, libc::XDP_UMEM_PGOFF_COMPLETION_RING, &off.cr, RING).map_err(map)?;
        let rx = Ring::map(&fd, libc::XDP_PGOFF_RX_RING as u64, &off.rx, RING).map_err(map)?;
        let tx = Ring::map(&fd, libc::XDP_PGOFF_TX_RING as u64, &off.tx, RING).map_err(map)?;

        // Half the chunks wait in the fill ring for received frames; half are slots to send.
        for i in 0..chunks / 2 {
            fill.push(u64::from(i * CHUNK));
        }
        let tx_base = u64::from(chunks / 2 * CHUNK);
        let free = (tx_base..u64::from(chunks * CHUNK) - SLOT + 1)
            .step_by(SLOT as usize)
            .collect();

        // SAFETY: sockaddr_xdp is plain data; all-zero is valid.
        let mut sa: libc::sockaddr_xdp = unsafe { std::mem::zeroed() };
        sa.sxdp_family = libc::AF_XDP as u16;
        sa.sxdp_flags = libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP | libc::XDP_USE_SG;
        sa.sxdp_ifindex = ifindex;
        sa.sxdp_queue_id = queue;
        let bind = || {
            // SAFETY: `sa` outlives the call and its size is passed.
            let ret = unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&raw const sa).cast(),
                    size_of::<libc::sockaddr_xdp>() as u32,
                )
            };
            if ret < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        // Rebinding right after another socket on the queue closed can be EBUSY for a moment.
        bind()
            .or_else(|e| {
                if e.raw_os_error() == Some(libc::EBUSY) {
                    std::thread::sleep(Duration::from_millis(10));
                    bind()
                } else {
                    Err(e)
                }
            })
            .map_err(|e| err(e, &format!("bind the AF_XDP socket of queue {queue}")))?;
        Ok(Socket {
            fd,
            umem,
            fill,
            completion,
            rx,
            tx,
            free,
            tx_base,
            refill: Vec::new(),
            unkicked: 0,
            rx_frame: Vec::with_capacity(MAX_FRAME),
            stats: XdpStats::default(),
        })
    }

    fn chunk(&mut self, addr: u64, len: usize) -> &mut [u8] {
        assert!(addr as usize + len <= self.umem.len());
        // SAFETY: the chunk lies inside the UMEM, and we own it now: it is in no ring the
        // kernel reads or writes (taken from the free list or from the RX ring).
        unsafe { std::slice::from_raw_parts_mut(self.umem.as_ptr().add(addr as usize), len) }
    }

    fn kick(&mut self) {
        self.unkicked = 0;
        // SAFETY: an empty sendto on our socket: the kernel only looks at the TX ring.
        unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
    }

    fn reclaim(&mut self) {
        // A frame's descriptors complete together; its first names its slot.
        while let Some(addr) = self.completion.pop() {
            if addr
                .checked_sub(self.tx_base)
                .is_some_and(|at| at.is_multiple_of(SLOT))
            {
                self.free.push(addr);
            }
        }
        while let Some(&addr) = self.refill.last() {
            if !self.fill.push(addr) {
                break;
            }
            self.refill.pop();
        }
    }
}

impl Socket {
    /// Whether the TX ring and the free slots have room for the longest frame; if not, the
    /// kernel is asked to drain the ring.
    fn room(&mut self) -> bool {
        self.reclaim();
        if self.tx.free() < (SLOT / u64::from(CHUNK)) as u32 || self.free.is_empty() {
            self.kick();
            return false;
        }
        true
    }

    /// The slot the next frame is built in, which [`room`](Self::room) made room for.
    fn slot(&mut self) -> &mut [u8] {
        let addr = *self.free.last().expect("room made");
        self.chunk(addr, MAX_FRAME)
    }

    /// Queues a copy of `frame`, which [`room`](Self::room) made room for.
    fn push(&mut self, frame: &[u8]) {
        self.slot()[..frame.len()].copy_from_slice(frame);
        self.send_slot(frame.len());
    }

    /// Queues the frame of `len` bytes built in [`slot`](Self::slot).
    fn send_slot(&mut self, len: usize) {
        let slot = self.free.pop().expect("room made");
        // One descriptor per chunk; all but the last say the frame continues.
        let chunk = CHUNK as usize;
        let pieces = len.div_ceil(chunk);
        for i in 0..pieces {
            let options = if i + 1 < pieces {
                libc::XDP_PKT_CONTD
            } else {
                0
            };
            self.tx.push(libc::xdp_desc {
                addr: slot + (i * chunk) as u64,
                len: (len - i * chunk).min(chunk) as u32,
                options,
            });
        }
        // Copy mode sends only on a kick, which sends at most 32 frames: kick every 32, and
        // when the caller next looks for received frames (end of a burst).
        self.unkicked += 1;
        if self.unkicked >= 32 {
            self.kick();
        }
        self.stats.tx += 1;
    }

    fn flush(&mut self) {
        if self.unkicked > 0 {
            self.kick();
        }
    }

    /// Calls `deliver` with the next whole frame received, if there is one.
    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool {
        // Frames the kernel has not taken yet (it takes at most 32 per kick) get another kick.
        if self.tx.free() < RING {
            self.kick();
        }
        self.reclaim();
        loop {
            let Some(desc) = self.rx.pop() else {
                if self.fill.needs_wakeup() {
                    // SAFETY: an empty, non-blocking receive only wakes the kernel's RX side.
                    unsafe {
                        libc::recvfrom(
                            self.fd.as_raw_fd(),
                            std::ptr::null_mut(),
                            0,
                            libc::MSG_DONTWAIT,
                            std::ptr::null_mut(),
                            std::ptr::null_mut(),
                        )
                    };
                }
                // A frame's descriptors arrive together; a partial one waits for the rest.
                return false;
            };
            let piece_len = desc.len as usize;
            let chunk = desc.addr & !u64::from(CHUNK - 1);
            if self.rx_frame.is_empty() && desc.options & libc::XDP_PKT_CONTD == 0 {
                // A frame in one chunk is delivered where the kernel put it (the chunk goes
                // back to the fill ring only at the next `reclaim`).
                self.refill.push(chunk);
                deliver(self.chunk(desc.addr, piece_len));
                self.stats.rx += 1;
                return true;
            }
            let mut frame = std::mem::take(&mut self.rx_frame);
            if frame.len() + piece_len <= MAX_FRAME {
                frame.extend_from_slice(self.chunk(desc.addr, piece_len));
            } else {
                // Too long: marked by overflowing the limit, dropped at its last piece.
                frame.resize(MAX_FRAME + 1, 0);
            }
            self.rx_frame = frame;
            self.refill.push(chunk);
            if desc.options & libc::XDP_PKT_CONTD != 0 {
                continue;
            }
            let frame = std::mem::take(&mut self.rx_frame);
            let whole = frame.len() <= MAX_FRAME;
            if whole {
                deliver(&frame);
                self.stats.rx += 1;
            } else {
                self.stats.rx_too_long += 1;
            }
            self.rx_frame = frame;
            self.rx_frame.clear();
            if whole {
                return true;
            }
        }
    }
}

impl Backend for AfXdp {
    fn interface(&self) -> Interface {
        self.interface
    }

    fn poll_fds(&self, fds: &mut Vec<RawFd>) {
        fds.extend(self.sockets.iter().map(|s| s.fd.as_raw_fd()));
    }

    fn queues(&self) -> usize {
        self.sockets.len()
    }
}

impl Link for AfXdp {
    fn transmit(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool {
        // Room for the longest frame on every queue, so the frame's own queue has it.
        if !self.sockets.iter_mut().all(Socket::room) {
            return false;
        }
        let (at, queues) = (self.last_tx, self.sockets.len());
        let Some(n) = fill(self.sockets[at].slot()) else {
            return false;
        };
        let q = queue_of(&self.sockets[at].slot()[..n], queues);
        if q == at {
            self.sockets[q].send_slot(n);
        } else {
            let [built, to] = self.sockets.get_disjoint_mut([at, q]).expect("two queues");
            to.push(&built.slot()[..n]);
            self.last_tx = q;
        }
        true
    }

    fn flush(&mut self) {
        self.sockets.iter_mut().for_each(Socket::flush);
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool {
        // The queues take turns, so a busy one does not starve the others.
        let n = self.sockets.len();
        for i in 0..n {
            let q = (self.next_rx + i) % n;
            if self.sockets[q].receive(deliver) {
                self.next_rx = (q + 1) % n;
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RoCEv2 frame's first 48 bytes, with UDP source port `port`, over IPv4 (`v6` false)
    /// or IPv6, maybe VLAN-tagged.
    fn frame(port: u16, v6: bool, vlan: bool) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend([0x81, 0x00, 0, 5]);
        }
        if v6 {
            f.extend([0x86, 0xdd]);
            f.extend([0x60; 40]);
        } else {
            f.extend([0x08, 0x00, 0x45]);
            f.extend([0; 19]);
        }
        f.extend(port.to_be_bytes());
        f.extend([0x12, 0xb7]);
        f
    }

    #[test]
    fn a_frame_goes_to_the_queue_its_udp_source_port_names() {
        for (v6, vlan) in [(false, false), (true, false), (false, true), (true, true)] {
            for port in [0xc000u16, 0xc001, 0xc002, 0xffff] {
                let f = frame(port, v6, vlan);
                assert_eq!(queue_of(&f, 4), usize::from(port) % 4, "{v6} {vlan} {port}");
                assert_eq!(queue_of(&f, 1), 0);
            }
        }
        // Not IP, or cut short: queue 0, no panic.
        assert_eq!(queue_of(&[0u8; 14], 4), 0);
        assert_eq!(queue_of(&frame(7, false, false)[..20], 4), 0);
    }
}
