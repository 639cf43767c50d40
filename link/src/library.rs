//! Library mode: a device made of the engine, memory the program owns, and any frame link,
//! driven in the program's own process. The driver reads the clock; the engine it drives
//! does not.
//!
//! The [`Loopback`](crate::local::Loopback) link hands every frame back to the device that sent it, so two QPs of one
//! device talk to each other with no privileges at all; [`Channel::pair`](crate::local::Channel::pair) joins two devices,
//! which may live on different threads.
//!
//! ```
//! use softrnic_link::library::Device;
//! use softrnic_link::local::Loopback;
//! use softrnic_emu_core::{Access, QpType, SendOp, SendWr, Sge, SendFlags, WcStatus};
//!
//! let mut dev = Device::new(Loopback::default(), Device::<Loopback>::config(1, [198, 18, 0, 1]));
//! let pd = dev.engine().alloc_pd(0).unwrap();
//! let cq = dev.engine().create_cq(16).unwrap();
//! let (a, b) = (dev.create_qp(pd, QpType::Rc, cq).unwrap(), dev.create_qp(pd, QpType::Rc, cq).unwrap());
//! let (ea, eb) = (dev.endpoint(a), dev.endpoint(b));
//! dev.connect(a, &eb).unwrap();
//! dev.connect(b, &ea).unwrap();
//!
//! let src = dev.alloc(5);
//! let dst = dev.alloc(5);
//! dev.write(src, b"hello");
//! let access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);
//! let lkey = dev.engine().reg_mr(pd, src, 5, access).unwrap();
//! let rkey = dev.engine().reg_mr(pd, dst, 5, access).unwrap();
//! let sgl = vec![Sge { addr: src, length: 5, lkey }];
//! let op = SendOp::Write(softrnic_emu_core::Remote { addr: dst, rkey });
//! dev.engine().post_send(a, SendWr { wr_id: 1, op, sgl, flags: SendFlags::SIGNALED, ud: None, xrc_srqn: None }).unwrap();
//! let wc = dev.wait(cq, 1, std::time::Duration::from_secs(5));
//! assert_eq!(wc[0].status, WcStatus::Success);
//! assert_eq!(dev.read(dst, 5), b"hello");
//! ```

use std::time::Duration;

use softrnic_emu_core::{
    Access, AddressHandle, Config, DeviceAttr, Engine, Gid, HeapMemory, Instant, Lane, Mtu, QpAttr,
    QpCap, QpInit, QpType, Result, VerbsError, Wc, WcOpcode, WcStatus, bring_up, psn,
};
use softrnic_wire::EthernetAddress;

use crate::Link;

/// Frames [`Device::progress`] sends before it takes in what arrived.
const BURST: usize = 16;

/// What a peer needs to connect to a QP: exchange these out of band, as RDMA programs do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The QP's GID.
    pub gid: Gid,
    /// The device's MAC.
    pub mac: EthernetAddress,
    /// The QP number.
    pub qpn: u32,
    /// The first PSN it sends.
    pub psn: u32,
}

/// A device in library mode: the engine over a link, with memory the program owns.
pub struct Device<L> {
    engine: Engine<HeapMemory>,
    link: L,
    epoch: std::time::Instant,
    mac: EthernetAddress,
    ack_timeout: u8,
    path_mtu: Mtu,
}

impl<L: Link> Device<L> {
    /// A configuration for device number `n` at IPv4 address `ip`, with a 4096-byte path MTU
    /// available (a 9000-byte Ethernet MTU).
    pub fn config(n: u8, ip: [u8; 4]) -> Config {
        Config {
            seed: n as u64,
            key_secret: n as u64,
            mac: EthernetAddress([0x02, 0, 0, 0, 0, n]),
            gids: vec![Gid::from(core::net::Ipv4Addr::from(ip))],
            eth_mtu: 9000,
            device: DeviceAttr::default(),
            lane: Lane::ONLY,
        }
    }

    /// A device over `link`.
    pub fn new(link: L, config: Config) -> Device<L> {
        let mac = config.mac;
        Device {
            engine: Engine::new(config, HeapMemory::new()),
            link,
            epoch: std::time::Instant::now(),
            mac,
            ack_timeout: 14,
            path_mtu: Mtu::M4096,
        }
    }

    /// The local ACK timeout exponent [`connect`](Self::connect) sets (14, 67 ms, by default).
    pub fn set_ack_timeout(&mut self, timeout: u8) {
        self.ack_timeout = timeout;
    }

    /// The path MTU [`connect`](Self::connect) sets (4096 by default).
    pub fn set_path_mtu(&mut self, mtu: Mtu) {
        self.path_mtu = mtu;
    }

    /// The link, for frames that bypass the engine.
    pub fn link_mut(&mut self) -> &mut L {
        &mut self.link
    }

    /// The engine, for every verbs call.
    pub fn engine(&mut self) -> &mut Engine<HeapMemory> {
        &mut self.engine
    }

    /// Allocates `len` bytes of device-reachable memory and returns its address.
    pub fn alloc(&mut self, len: usize) -> u64 {
        self.engine.memory_mut().alloc(len)
    }

    /// Writes bytes at `addr` (which must be allocated).
    pub fn write(&mut self, addr: u64, data: &[u8]) {
        self.engine
            .memory_mut()
            .slice_mut(addr, data.len())
            .expect("write to unallocated memory")
            .copy_from_slice(data);
    }

    /// Reads `len` bytes at `addr`.
    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        self.engine
            .memory()
            .slice(addr, len)
            .expect("read of unallocated memory")
            .to_vec()
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Moves frames until nothing more happens ([`drive::pass`](crate::drive::pass) until no
    /// frame moves). Returns whether anything moved.
    pub fn progress(&mut self) -> bool {
        let now = self.now();
        let mut moved = false;
        // A few frames out at a time: over a loopback they come back in while still in the
        // cache, and a burst still shares one ACK.
        while crate::drive::pass(&mut self.engine, now, &mut self.link, BURST) {
            moved = true;
        }
        moved
    }

    /// Waits up to `timeout` for `count` completions on `cq`, driving the device meanwhile.
    pub fn wait(&mut self, cq: u32, count: usize, timeout: Duration) -> Vec<Wc> {
        let deadline = std::time::Instant::now() + timeout;
        let mut out = Vec::with_capacity(count);
        let mut slots = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0); 16];
        while out.len() < count && std::time::Instant::now() < deadline {
            let moved = self.progress();
            let want = (count - out.len()).min(slots.len());
            let n = self.engine.poll_cq(cq, &mut slots[..want]).unwrap_or(0);
            out.extend_from_slice(&slots[..n]);
            if !moved && n == 0 {
                std::thread::yield_now();
            }
        }
        out
    }

    /// Creates a QP with room for 256 WRs each way, 4 SGEs and 64 inline bytes, both queues
    /// on `cq`.
    pub fn create_qp(&mut self, pd: u32, qp_type: QpType, cq: u32) -> Result<u32> {
        let init = QpInit::new(qp_type, cq, QpCap::new(256, 4, 64));
        self.engine.create_qp(pd, init)
    }

    /// This QP's endpoint, for the peer's [`connect`](Self::connect). The first PSN is derived
    /// from the QP number, so both sides agree without another exchange.
    pub fn endpoint(&self, qpn: u32) -> Endpoint {
        Endpoint {
            gid: self.engine.gids()[0],
            mac: self.mac,
            qpn,
            psn: qpn.wrapping_mul(0x9e37) & psn::MASK,
        }
    }

    /// Takes a QP from RESET to RTS towards `peer`, with the settings perftest uses: path MTU
    /// 4096 (see [`set_path_mtu`](Self::set_path_mtu); UD uses the port's), ACK timeout 14 (see [`set_ack_timeout`](Self::set_ack_timeout)),
    /// 7 retries, 16 outstanding READs/atomics each way, and every remote access allowed. UD QPs
    /// get Q_Key 0x11111111.
    pub fn connect(&mut self, qpn: u32, peer: &Endpoint) -> Result<()> {
        let (attr, _) = self.engine.query_qp(qpn)?;
        let qp_type = self.qp_type(qpn)?;
        let own = self.endpoint(qpn);
        let ah = AddressHandle::to(peer.gid, 0).via(peer.mac);
        let base = QpAttr {
            qp_access_flags: Access::LOCAL_WRITE
                .union(Access::REMOTE_WRITE)
                .union(Access::REMOTE_READ)
                .union(Access::REMOTE_ATOMIC),
            qkey: 0x1111_1111,
            ah: Some(ah),
            path_mtu: self.path_mtu,
            timeout: self.ack_timeout,
            retry_cnt: 7,
            rnr_retry: 7,
            rq_psn: peer.psn,
            sq_psn: own.psn,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 12,
            dest_qp_num: peer.qpn,
            ..attr
        };
        for (state, mask) in bring_up(qp_type) {
            let attr = QpAttr {
                qp_state: state,
                ..base
            };
            self.engine.modify_qp(qpn, &attr, mask)?;
        }
        Ok(())
    }

    fn qp_type(&self, qpn: u32) -> Result<QpType> {
        self.engine
            .qp_type(qpn)
            .ok_or(VerbsError::Invalid("no such QP"))
    }
}
