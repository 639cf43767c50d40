//! The AF_XDP backend: an XDP program sends RoCEv2 frames to an AF_XDP socket, which hands them
//! to us through shared-memory rings; everything else stays with the kernel.
//!
//! Copy mode (`XDP_COPY`, the mode veth and most drivers give) with `XDP_USE_NEED_WAKEUP`. A
//! frame fits one UMEM chunk of 4096 bytes, less the kernel's 256-byte headroom: path MTUs up
//! to 2048 (4096-MTU frames need multi-buffer descriptors, not yet here).

mod bpf;
mod ring;

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use softrnic_emu_core::native::Link;

pub use bpf::Mode;
use ring::{Mmap, Ring};

use crate::sys;

/// Bytes per UMEM chunk.
const CHUNK: u32 = 4096;
/// Chunks in the UMEM: half receive, half transmit.
const CHUNKS: u32 = 4096;
/// Entries per ring.
const RING: u32 = 2048;
/// The kernel's headroom before a received frame (XDP_PACKET_HEADROOM).
const HEADROOM: u32 = 256;
/// The largest frame a chunk holds.
pub const MAX_FRAME: usize = (CHUNK - HEADROOM) as usize;

/// What the backend counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Frames sent.
    pub tx: u64,
    /// Frames received.
    pub rx: u64,
}

/// An AF_XDP socket on queue 0 of one interface, with its program attached.
pub struct AfXdp {
    fd: OwnedFd,
    umem: Mmap,
    fill: Ring<u64>,
    completion: Ring<u64>,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    /// Chunks free for transmitting.
    free: Vec<u64>,
    /// Received chunks to give back through the fill ring (it is consumed lazily).
    refill: Vec<u64>,
    mac: [u8; 6],
    mtu: u32,
    mode: Mode,
    // The link detaches the program on drop; the map and program live as long.
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    /// Counters.
    pub stats: XdpStats,
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
    /// Opens interface `ifname` (in the calling thread's namespace), attaches the program in
    /// `mode`, and binds a socket to queue 0.
    pub fn open(ifname: &str, mode: Mode) -> io::Result<AfXdp> {
        let ifindex = sys::if_index(ifname).map_err(|e| err(e, ifname))?;
        // SAFETY: no pointers; the descriptor is owned below.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(err(io::Error::last_os_error(), "AF_XDP socket"));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let umem = Mmap::new((CHUNK * CHUNKS) as usize, None).map_err(|e| err(e, "UMEM"))?;
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

        // Half the chunks wait in the fill ring for received frames; half are for sending.
        for i in 0..CHUNKS / 2 {
            fill.push(u64::from(i * CHUNK));
        }
        let free = (CHUNKS / 2..CHUNKS).map(|i| u64::from(i * CHUNK)).collect();

        // SAFETY: sockaddr_xdp is plain data; all-zero is valid.
        let mut sa: libc::sockaddr_xdp = unsafe { std::mem::zeroed() };
        sa.sxdp_family = libc::AF_XDP as u16;
        sa.sxdp_flags = libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP;
        sa.sxdp_ifindex = ifindex;
        sa.sxdp_queue_id = 0;
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
            .map_err(|e| err(e, "bind the AF_XDP socket"))?;

        let xskmap = bpf::xskmap(1).map_err(|e| err(e, "create the XSKMAP"))?;
        bpf::map_set(&xskmap, 0, fd.as_raw_fd()).map_err(|e| err(e, "fill the XSKMAP"))?;
        let prog = bpf::load(&xskmap).map_err(|e| err(e, "load the XDP program"))?;
        let link =
            bpf::attach(&prog, ifindex, mode).map_err(|e| err(e, "attach the XDP program"))?;

        let probe = sys::packet_socket().map_err(|e| err(e, "query the interface"))?;
        let mac = sys::if_hwaddr(&probe, ifname).map_err(|e| err(e, ifname))?;
        let mtu = sys::if_mtu(&probe, ifname).map_err(|e| err(e, ifname))?;
        Ok(AfXdp {
            fd,
            umem,
            fill,
            completion,
            rx,
            tx,
            free,
            refill: Vec::new(),
            mac,
            mtu,
            mode,
            _link: link,
            _prog: prog,
            _map: xskmap,
            stats: XdpStats::default(),
        })
    }

    /// The interface's MAC.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The MTU frames may use: the interface's, capped by what a chunk holds.
    pub fn mtu(&self) -> u32 {
        self.mtu.min(MAX_FRAME as u32 - 14)
    }

    /// The XDP mode in use.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    fn chunk(&mut self, addr: u64, len: usize) -> &mut [u8] {
        assert!(addr as usize + len <= self.umem.len());
        // SAFETY: the chunk lies inside the UMEM, and we own it now: it is in no ring the
        // kernel reads or writes (taken from the free list or from the RX ring).
        unsafe { std::slice::from_raw_parts_mut(self.umem.as_ptr().add(addr as usize), len) }
    }

    fn kick(&self) {
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
        while let Some(addr) = self.completion.pop() {
            self.free.push(addr & !u64::from(CHUNK - 1));
        }
        while let Some(&addr) = self.refill.last() {
            if !self.fill.push(addr) {
                break;
            }
            self.refill.pop();
        }
    }
}

impl Link for AfXdp {
    fn transmit(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool {
        self.reclaim();
        if self.tx.free() == 0 {
            // Let the kernel drain the TX ring first.
            self.kick();
            return false;
        }
        let Some(addr) = self.free.pop() else {
            self.kick();
            return false;
        };
        // The engine writes the frame straight into the chunk.
        let Some(n) = fill(self.chunk(addr, MAX_FRAME)) else {
            self.free.push(addr);
            return false;
        };
        let desc = libc::xdp_desc {
            addr,
            len: n as u32,
            options: 0,
        };
        self.tx.push(desc);
        // Copy mode sends only on a kick (at most 32 frames per call).
        self.kick();
        self.stats.tx += 1;
        true
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool {
        self.reclaim();
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
            return false;
        };
        let frame = self.chunk(desc.addr, desc.len as usize);
        deliver(frame);
        self.stats.rx += 1;
        self.refill.push(desc.addr & !u64::from(CHUNK - 1));
        true
    }
}
