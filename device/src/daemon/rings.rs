//! A context's side of the shared region: the rings the daemon consumes work requests from and
//! produces completions into, and the doorbell and sleep protocol around them (see
//! [`crate::shm`]).

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use softrnic_emu_core::{Engine, RecvWr, Wc, WcOpcode, WcStatus};

use super::ProcessMemory;
use crate::proto::{self, SqEntry};
use crate::shm::{Allocator, Region, Ring, RingInfo};
use crate::sys;

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
    /// Slots that did not decode (a buggy or hostile program), for the log.
    pub garbage: u64,
}

impl Rings {
    /// The rings of a region, with the eventfd the program writes to wake the daemon.
    pub fn new(region: Arc<Region>, wake: OwnedFd) -> Rings {
        Rings {
            region: Some(region),
            wake: Some(wake),
            ..Rings::default()
        }
    }

    /// The wake-up eventfd, for poll(2).
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

    /// The work posted since the doorbell was last acted on, in ring order.
    pub fn take_posted(&mut self) -> Vec<Posted> {
        let Some(region) = &self.region else {
            return Vec::new();
        };
        let bell = region.doorbell();
        if bell == self.bell {
            return Vec::new();
        }
        // Read the count first: work posted after this rings again.
        self.bell = bell;
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for (&qpn, ring) in &mut self.sqs {
            while ring.pop(&mut buf) {
                match proto::decode::<SqEntry>(&buf) {
                    Ok(e) => out.push(Posted::Send(qpn, e)),
                    Err(_) => self.garbage += 1,
                }
            }
        }
        for (kind, rings) in [(false, &mut self.rqs), (true, &mut self.srqs)] {
            for (&id, ring) in rings.iter_mut() {
                while ring.pop(&mut buf) {
                    match proto::decode::<RecvWr>(&buf) {
                        Ok(wr) if kind => out.push(Posted::SrqRecv(id, wr)),
                        Ok(wr) => out.push(Posted::Recv(id, wr)),
                        Err(_) => self.garbage += 1,
                    }
                }
            }
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
            sys::clear_event(w.as_raw_fd());
        }
    }
}
