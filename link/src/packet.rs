//! The AF_PACKET backend: a raw socket on one interface, with a classic BPF filter so only
//! RoCEv2 frames arrive, batched receives (recvmmsg), and UDP port 4791 held open so the
//! kernel does not answer RoCEv2 frames with ICMP port unreachable.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::Link;
use softrnic_emu_core::MAX_FRAME;

use crate::backend::{Backend, Interface};
use crate::filter;
use softrnic_sys as sys;

/// Frames taken per recvmmsg call.
const BATCH: usize = 32;
/// Room per received frame: a 9000-byte jumbo frame and its headers.
const RX_BUF: usize = 9216;
/// PACKET_IGNORE_OUTGOING (Linux 4.20): do not hand our own transmissions back to us.
const PACKET_IGNORE_OUTGOING: i32 = 23;

/// What the backend counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketStats {
    /// Frames sent.
    pub tx: u64,
    /// Frames the kernel refused to send (queue full).
    pub tx_dropped: u64,
    /// Frames received.
    pub rx: u64,
    /// Frames longer than the receive buffer, dropped.
    pub rx_truncated: u64,
}

/// An AF_PACKET link on one interface.
pub struct AfPacket {
    fd: OwnedFd,
    interface: Interface,
    rx: Vec<Vec<u8>>,
    rx_len: Vec<usize>,
    rx_at: usize,
    rx_count: usize,
    /// Frames waiting to go in one sendmmsg, and how many.
    tx: Vec<Vec<u8>>,
    tx_len: Vec<usize>,
    tx_count: usize,
    _port_guard: Option<UdpSocket>,
    /// Counters.
    pub stats: PacketStats,
}

fn context(e: io::Error, what: &str) -> io::Error {
    let hint = if e.kind() == io::ErrorKind::PermissionDenied {
        " (raw sockets need CAP_NET_RAW: run as root or grant the capability)"
    } else {
        ""
    };
    io::Error::new(e.kind(), format!("{what}: {e}{hint}"))
}

/// Holds UDP port 4791 open in this namespace, with a filter that drops what it receives, so
/// the kernel neither answers RoCEv2 frames with ICMP port unreachable nor queues them. `None`
/// if the port is taken already (by another softrnic, or by kernel rxe, which holds it too).
fn hold_port() -> Option<UdpSocket> {
    let sock = UdpSocket::bind(("::", softrnic_wire::ROCEV2_UDP_PORT))
        .or_else(|_| UdpSocket::bind(("0.0.0.0", softrnic_wire::ROCEV2_UDP_PORT)))
        .ok()?;
    sys::attach_filter(sock.as_raw_fd(), &filter::DROP_ALL).ok()?;
    Some(sock)
}

impl AfPacket {
    /// Opens the interface `ifname` in the calling thread's network namespace.
    pub fn open(ifname: &str) -> io::Result<AfPacket> {
        let ifindex = sys::if_index(ifname).map_err(|e| context(e, ifname))?;
        let fd = sys::packet_socket().map_err(|e| context(e, "AF_PACKET socket"))?;
        // Filter before binding, so no stray frame is queued in between.
        sys::attach_filter(fd.as_raw_fd(), &filter::ROCE_ONLY)
            .map_err(|e| context(e, "attach the RoCEv2 filter"))?;
        sys::set_int_option(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            .map_err(|e| context(e, "PACKET_IGNORE_OUTGOING"))?;
        // 4 MiB each way, past net.core.rmem_max/wmem_max where CAP_NET_ADMIN allows (the
        // plain options are capped there, about 200 KiB: fewer than 50 full-size frames, which
        // one burst of a large message overflows).
        for (forced, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            sys::set_int_option(fd.as_raw_fd(), libc::SOL_SOCKET, forced, 4 << 20)
                .or_else(|_| sys::set_int_option(fd.as_raw_fd(), libc::SOL_SOCKET, plain, 4 << 20))
                .map_err(|e| context(e, "socket buffer size"))?;
        }
        sys::bind_packet(&fd, ifindex).map_err(|e| context(e, ifname))?;
        let interface = Interface::query(&fd, ifname).map_err(|e| context(e, ifname))?;
        Ok(AfPacket {
            fd,
            interface,
            rx: vec![vec![0; RX_BUF]; BATCH],
            rx_len: vec![0; BATCH],
            rx_at: 0,
            rx_count: 0,
            tx: vec![vec![0; MAX_FRAME]; BATCH],
            tx_len: vec![0; BATCH],
            tx_count: 0,
            _port_guard: hold_port(),
            stats: PacketStats::default(),
        })
    }
}

impl Backend for AfPacket {
    fn interface(&self) -> Interface {
        self.interface
    }

    fn poll_fds(&self, fds: &mut Vec<RawFd>) {
        fds.push(self.fd.as_raw_fd());
    }
}

impl Link for AfPacket {
    fn transmit(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool {
        let Some(n) = fill(&mut self.tx[self.tx_count]) else {
            return false;
        };
        self.tx_len[self.tx_count] = n;
        self.tx_count += 1;
        // Sent in batches: when the batch is full, or when the caller next looks for received
        // frames (the end of its burst).
        if self.tx_count == BATCH {
            self.flush();
        }
        true
    }

    /// Sends the frames waiting, in one call.
    fn flush(&mut self) {
        if self.tx_count == 0 {
            return;
        }
        let frames: Vec<&[u8]> = self.tx[..self.tx_count]
            .iter()
            .zip(&self.tx_len)
            .map(|(b, &n)| &b[..n])
            .collect();
        let sent = sys::send_batch(&self.fd, &frames).unwrap_or(0);
        // Frames the kernel did not take are lost, as on a wire: the transport recovers them.
        self.stats.tx += sent as u64;
        self.stats.tx_dropped += (self.tx_count - sent) as u64;
        self.tx_count = 0;
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool {
        self.flush();
        loop {
            if self.rx_at == self.rx_count {
                self.rx_at = 0;
                self.rx_count =
                    sys::recv_batch(&self.fd, &mut self.rx, &mut self.rx_len).unwrap_or(0);
                if self.rx_count == 0 {
                    return false;
                }
            }
            let i = self.rx_at;
            self.rx_at += 1;
            let len = self.rx_len[i];
            if len > RX_BUF {
                self.stats.rx_truncated += 1;
                continue;
            }
            self.stats.rx += 1;
            deliver(&self.rx[i][..len]);
            return true;
        }
    }
}
