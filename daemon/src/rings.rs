//! A context's side of the shared region: the rings the daemon consumes work requests from and
//! produces completions into, and the doorbell and sleep protocol around them (see
//! [`softrnic_client::shm`]).

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use softrnic_emu_core::{Engine, RecvWr, Wc, WcOpcode, WcStatus, WorkQueue};

use crate::ProcessMemory;
use softrnic_client::proto::{self, SqEntry};
use softrnic_client::shm::{Allocator, Region, Ring, RingInfo};
use softrnic_sys as sys;

/// A work request the program posted.
pub enum Posted {
    /// Into a QP's send queue.
    Send(u32, SqEntry),
    /// Into a QP's receive queue.
    Recv(u32, RecvWr),
    /// Into an SRQ.
    SrqRecv(u32, RecvWr),
}

/// The rings of one context.
#[derive(Default)]
pub struct Rings {
    region: Option<Arc<Region>>,
    wake: Option<OwnedFd>,
    alloc: Allocator,
    /// Send rings by QP, receive rings by QP, SRQ rings, CQ rings.
    pub sqs: BTreeMap<u32, Ring>,
    pub rqs: BTreeMap<u32, Ring>,
    pub srqs: BTreeMap<u32, Ring>,
    pub cqs: BTreeMap<u32, Ring>,
    /// The doorbell count last acted on.
    bell: u32,
    /// Work left in a ring because its queue was full.
    backlog: bool,
    /// Slots that did not decode (a buggy or hostile program), for the log.
    pub garbage: u64,
}

impl Rings {
    /// The rings of a region, with the socket the program writes to to wake the daemon.
    pub fn new(region: Arc<Region>, wake: OwnedFd) -> Rings {
        Rings {
            region: Some(region),
            wake: Some(wake),
            ..Rings::default()
        }
    }

    /// The wake-up socket, for poll(2).
    pub fn wake_fd(&self) -> Option<RawFd> {
        self.wake.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Room for a new ring of `entries` slots.
    pub fn new_ring(&mut self, entries: u32, slot_size: u32) -> io::Result<(RingInfo, Ring)> {
        let region = self.region.as_ref().ok_or(io::ErrorKind::NotConnected)?;
        let info = self.alloc.ring(entries, slot_size)?;
        Ok((info, Ring::new(region, info)?))
    }

    /// Whether the program rang the doorbell since the daemon last took its work.
    pub fn rung(&self) -> bool {
        self.region
            .as_ref()
            .is_some_and(|r| r.doorbell() != self.bell)
    }

    /// The work posted since the doorbell was last acted on, in ring order, as much of it as
    /// `room` says each queue takes. The rest stays in its ring (the program sees it full, and
    /// gets ENOMEM as from a full queue) and is taken on a later call, once there is room.
    pub fn take_posted(&mut self, room: impl Fn(WorkQueue) -> usize) -> Vec<Posted> {
        let Some(region) = &self.region else {
            return Vec::new();
        };
        let bell = region.doorbell();
        if bell == self.bell && !self.backlog {
            return Vec::new();
        }
        // Read the count first: work posted after this rings again.
        self.bell = bell;
        self.backlog = false;
        let mut out = Vec::new();
        let mut buf = Vec::new();
        let rings = (self.sqs.iter_mut().map(|(&q, r)| (WorkQueue::Send(q), r)))
            .chain(self.rqs.iter_mut().map(|(&q, r)| (WorkQueue::Recv(q), r)))
            .chain(self.srqs.iter_mut().map(|(&q, r)| (WorkQueue::Srq(q), r)));
        for (queue, ring) in rings {
            for _ in 0..room(queue) {
                if !ring.pop(&mut buf) {
                    break;
                }
                let posted = match queue {
                    WorkQueue::Send(q) => proto::decode(&buf).map(|e| Posted::Send(q, e)),
                    WorkQueue::Recv(q) => proto::decode(&buf).map(|wr| Posted::Recv(q, wr)),
                    WorkQueue::Srq(q) => proto::decode(&buf).map(|wr| Posted::SrqRecv(q, wr)),
                };
                match posted {
                    Ok(p) => out.push(p),
                    Err(_) => self.garbage += 1,
                }
            }
            self.backlog |= ring.has_message();
        }
        out
    }

    /// Moves completions from the engine's CQs into the CQ rings while they have room.
    pub fn fill_cqs(&mut self, engine: &mut Engine<ProcessMemory>) -> bool {
        let mut any = false;
        let mut one = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0)];
        for (&cq, ring) in &mut self.cqs {
            while ring.has_room() && engine.poll_cq(cq, &mut one).unwrap_or(0) == 1 {
                if let Ok(body) = proto::body(&one[0]) {
                    ring.push(&body);
                }
                any = true;
            }
        }
        any
    }

    /// The daemon is about to sleep (`true`) or awake again.
    pub fn set_sleeping(&self, sleeping: bool) {
        if let Some(r) = &self.region {
            r.set_sleeping(sleeping);
        }
        if !sleeping && let Some(w) = &self.wake {
            sys::drain(w);
        }
    }
}
