//! A device context: one client connection, the objects it owns, its events and completion
//! channels, and what is waiting to be sent to it. [`crate::requests`] answers what it asks.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use softrnic_emu_core::{Engine, Event, Space};

use crate::ProcessMemory;
use crate::rings::Rings;
use softrnic_client::proto::{self, Reply, Request};
use softrnic_sys as sys;

/// Objects a context created that have no rings (those that have are its rings' keys).
#[derive(Debug, Default)]
pub(super) struct Owned {
    pub pds: BTreeSet<u32>,
    /// Memory regions, with the bytes each registers.
    pub mrs: BTreeMap<u32, u64>,
    pub mws: BTreeSet<u32>,
    /// XRC domains, with how many times this context opened each.
    pub xrcds: BTreeMap<u32, u32>,
    /// XRC target QPs it created, and those of others it opened (`ibv_open_qp`).
    pub xrc_qps: BTreeSet<u32>,
    pub opened_qps: BTreeSet<u32>,
}

impl Owned {
    /// Whether the context may modify and query the QP: one it created (those with a send
    /// ring are in `rings`), or an XRC target QP it created or opened.
    pub fn has_qp(&self, rings: &Rings, qpn: u32) -> bool {
        rings.sqs.contains_key(&qpn)
            || self.xrc_qps.contains(&qpn)
            || self.opened_qps.contains(&qpn)
    }
}

/// One connection, as the control thread serves it.
pub(super) struct Context {
    pub stream: UnixStream,
    pub inbuf: Vec<u8>,
    /// Replies and captured frames not yet taken by the socket.
    pub outbuf: Vec<u8>,
    /// A capture: which device (`Some(None)`: every one), and frames lost since the last sent.
    pub capture: Option<Option<usize>>,
    pub dropped: u64,
    /// The stream is out of step (a length beyond the limit): close after the reply.
    pub broken: bool,
    /// Descriptors to send with the next reply (the Open and CreateCompChannel replies).
    pub send_fds: Vec<OwnedFd>,
    pub pid: u32,
    pub uid: u32,
    /// Its supplementary groups when it connected (SO_PEERGROUPS).
    pub groups: Vec<u32>,
    pub space: Space,
    /// The device opened, by index; what the context has there is its [`Port`].
    pub device: Option<usize>,
    pub hello: bool,
    /// An RDMA CM event channel's events (a connection is a device context or a channel).
    pub cm: Option<crate::rdma_cm::Channel>,
}

/// A context's side of the device it opened, which the device's worker serves: its rings, the
/// objects it owns, and where their events go.
pub(super) struct Port {
    pub space: Space,
    /// Its program's process, whose memory its regions are in.
    pub peer: Arc<sys::Peer>,
    /// The shared region and its rings.
    pub rings: Rings,
    pub owned: Owned,
    /// Events for this context's objects, until it asks for them.
    pub events: VecDeque<Event>,
    /// Completion channels: each the write end of its notification pipe (a byte per
    /// notification) and the CQs that fired since it was last asked; and which channel each CQ
    /// notifies.
    pub channels: BTreeMap<u32, (OwnedFd, Vec<u32>)>,
    pub cq_channel: BTreeMap<u32, u32>,
    /// The write end of the async event pipe: a byte per event in `events`.
    pub async_notify: OwnedFd,
}

impl Context {
    pub fn new(stream: UnixStream, pid: u32, uid: u32, space: Space) -> Context {
        let groups = sys::peer_groups(stream.as_raw_fd()).unwrap_or_default();
        Context {
            stream,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            capture: None,
            dropped: 0,
            broken: false,
            send_fds: Vec::new(),
            pid,
            uid,
            groups,
            space,
            device: None,
            hello: false,
            cm: None,
        }
    }

    /// The next whole request in the input buffer, if one has arrived.
    pub fn next_message(&mut self) -> Option<io::Result<Request>> {
        if self.broken {
            return None;
        }
        let len = u32::from_le_bytes(self.inbuf.get(..4)?.try_into().ok()?) as usize;
        if len > proto::MAX_MESSAGE {
            // The stream cannot be followed past this: answer, then close the connection.
            self.inbuf.clear();
            self.broken = true;
            return Some(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message too long",
            )));
        }
        let body = self.inbuf.get(4..4 + len)?;
        let req = proto::decode(body);
        self.inbuf.drain(..4 + len);
        Some(req)
    }

    /// Queues a message for the socket; the Open reply goes at once, with the region's memfd
    /// and the pipes.
    pub fn queue(&mut self, msg: &Reply) {
        let Ok(bytes) = proto::encode(msg) else {
            return;
        };
        if !self.send_fds.is_empty() {
            let fds: Vec<_> = std::mem::take(&mut self.send_fds);
            let raw: Vec<_> = fds.iter().map(AsRawFd::as_raw_fd).collect();
            while !self.outbuf.is_empty() && self.flush().is_ok() {
                std::thread::yield_now();
            }
            let _ = sys::send_fds(self.stream.as_raw_fd(), &bytes, &raw);
            return;
        }
        self.outbuf.extend_from_slice(&bytes);
    }

    /// Writes what the socket takes now, without blocking. Err when the peer has gone.
    pub fn flush(&mut self) -> io::Result<()> {
        use std::io::Write;
        while !self.outbuf.is_empty() {
            match self.stream.write(&self.outbuf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.outbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Port {
    pub fn new(space: Space, peer: Arc<sys::Peer>, rings: Rings, async_notify: OwnedFd) -> Port {
        Port {
            space,
            peer,
            rings,
            owned: Owned::default(),
            events: VecDeque::new(),
            channels: BTreeMap::new(),
            cq_channel: BTreeMap::new(),
            async_notify,
        }
    }

    /// Takes an event about one of its objects: a completion notification goes to the CQ's
    /// channel (a byte in its pipe; a CQ without a channel has nowhere to notify, as in
    /// verbs), the rest to the async events (a byte in the async pipe).
    pub fn notify(&mut self, event: Event) {
        if let Event::Completion { cq } = event {
            if let Some((fd, fired)) = self
                .cq_channel
                .get(&cq)
                .and_then(|c| self.channels.get_mut(c))
            {
                fired.push(cq);
                sys::notify(fd.as_raw_fd());
            }
            return;
        }
        self.events.push_back(event);
        sys::notify(self.async_notify.as_raw_fd());
    }

    /// Whether the event is about one of this context's objects.
    pub fn owns(&self, event: &Event) -> bool {
        let r = &self.rings;
        match *event {
            Event::Completion { cq } | Event::CqError { cq } => r.cqs.contains_key(&cq),
            Event::SrqLimitReached { srq } => r.srqs.contains_key(&srq),
            Event::CommEstablished { qpn }
            | Event::SqDrained { qpn }
            | Event::LastWqeReached { qpn }
            | Event::QpFatal { qpn } => {
                r.sqs.contains_key(&qpn) || self.owned.xrc_qps.contains(&qpn)
            }
        }
    }

    /// Frees everything the context owns, QPs first (their WRs are flushed), then windows,
    /// regions, SRQs, CQs and PDs.
    pub fn release(&self, engine: &mut Engine<ProcessMemory>) {
        for &qpn in self.rings.sqs.keys().chain(&self.owned.xrc_qps) {
            let _ = engine.destroy_qp(qpn);
        }
        for &key in &self.owned.mws {
            let _ = engine.dealloc_mw(key);
        }
        for &key in self.owned.mrs.keys() {
            let _ = engine.dereg_mr(key);
        }
        for &srq in self.rings.srqs.keys() {
            let _ = engine.destroy_srq(srq);
        }
        for &cq in self.rings.cqs.keys() {
            let _ = engine.destroy_cq(cq);
        }
        for &pd in &self.owned.pds {
            let _ = engine.dealloc_pd(pd);
        }
    }

    /// PDs, MRs, CQs and QPs held.
    pub fn counts(&self) -> [u32; 4] {
        let (o, r) = (&self.owned, &self.rings);
        let qps = r.sqs.len() + o.xrc_qps.len();
        [o.pds.len(), o.mrs.len(), r.cqs.len(), qps].map(|n| n as u32)
    }

    /// What it holds of what users are limited in: QPs, MRs, registered bytes.
    pub fn usage(&self) -> [u64; 3] {
        let [_, mrs, _, qps] = self.counts().map(u64::from);
        [qps, mrs, self.owned.mrs.values().sum()]
    }
}
