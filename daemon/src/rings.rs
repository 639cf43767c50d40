//! A context's side of the shared region: the rings the daemon consumes work requests from and
//! produces completions into, and the doorbell and sleep protocol around them (see
//! [`softrnic_client::shm`]).

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use softrnic_emu_core::{Engine, RecvWr, SendWr, Sge, Wc, WcOpcode, WcStatus, WorkQueue};

use crate::ProcessMemory;
use softrnic_client::shm::{Allocator, Notices, Region, Ring, RingInfo};
use softrnic_client::slot;
use softrnic_sys as sys;

/// A work request the program posted.
pub enum Posted {
    /// Into a QP's send queue, with the inline bytes the program took at post time.
    Send(u32, SendWr, Option<Vec<u8>>),
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
    /// Send rings by QP, receive rings by QP, SRQ rings, CQ rings: their keys are the
    /// context's QPs, SRQs and CQs.
    pub sqs: BTreeMap<u32, Ring>,
    pub rqs: BTreeMap<u32, Ring>,
    pub srqs: BTreeMap<u32, Ring>,
    pub cqs: BTreeMap<u32, Ring>,
    /// Which rings the program announced new work in.
    notices: Option<Notices>,
    /// The doorbell count last acted on.
    bell: u32,
    /// Queues whose ring still holds work because the engine's queue was full.
    waiting: Vec<WorkQueue>,
    /// Slots that did not decode (a buggy or hostile program), for the log.
    pub garbage: u64,
    /// What `take_posted` works in, kept from call to call: the queues it looks at, a slot.
    queues: Vec<WorkQueue>,
    buf: Vec<u8>,
}

impl Rings {
    /// The rings of a region, with the socket the program writes to to wake the daemon.
    pub fn new(region: Arc<Region>, wake: OwnedFd) -> Rings {
        Rings {
            notices: Some(Notices::new(&region)),
            region: Some(region),
            wake: Some(wake),
            ..Rings::default()
        }
    }

    /// The wake-up socket, for poll(2).
    pub fn wake_fd(&self) -> Option<RawFd> {
        self.wake.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Room for a new, empty ring of `entries` slots.
    pub fn new_ring(&mut self, entries: u32, slot_size: u32) -> io::Result<(RingInfo, Ring)> {
        let region = self.region.as_ref().ok_or(io::ErrorKind::NotConnected)?;
        let info = self.alloc.ring(entries, slot_size)?;
        let mut ring = Ring::new(region, info)?;
        ring.reset();
        Ok((info, ring))
    }

    /// The rings of a destroyed object (or a CQ's ring replaced by a resize): their places may
    /// be given again.
    pub fn free(&mut self, rings: impl IntoIterator<Item = Ring>) {
        for ring in rings {
            self.alloc.free(ring.info());
        }
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
    /// Only the rings the program announced are looked at (all of them if its notices
    /// overflowed), so the cost follows the work, not the number of QPs.
    /// Each WR's SGEs are decoded into a list from `spare` where there is one.
    pub fn take_posted(
        &mut self,
        room: impl Fn(WorkQueue) -> usize,
        spare: &mut Vec<Vec<Sge>>,
        out: &mut Vec<Posted>,
    ) {
        let (Some(region), Some(notices)) = (&self.region, &mut self.notices) else {
            return;
        };
        let bell = region.doorbell();
        if bell == self.bell && self.waiting.is_empty() {
            return;
        }
        // Read the count first: work posted after this rings again.
        self.bell = bell;
        let mut queues = std::mem::take(&mut self.queues);
        queues.append(&mut self.waiting);
        let buf = &mut self.buf;
        if region.take_overflow() {
            queues.extend(self.sqs.keys().map(|&q| WorkQueue::Send(q)));
            queues.extend(self.rqs.keys().map(|&q| WorkQueue::Recv(q)));
            queues.extend(self.srqs.keys().map(|&q| WorkQueue::Srq(q)));
        }
        while let Some(q) = notices.next(buf) {
            queues.push(q);
        }
        queues.sort_unstable();
        queues.dedup();
        for &queue in &queues {
            // A notice for a queue that is not this context's is ignored.
            let Some(ring) = (match queue {
                WorkQueue::Send(q) => self.sqs.get_mut(&q),
                WorkQueue::Recv(q) => self.rqs.get_mut(&q),
                WorkQueue::Srq(q) => self.srqs.get_mut(&q),
            }) else {
                continue;
            };
            ring.clear_announced();
            for _ in 0..room(queue) {
                if !ring.pop(buf) {
                    break;
                }
                let sgl = spare.pop().unwrap_or_default();
                let posted = match queue {
                    WorkQueue::Send(q) => {
                        slot::decode_send(buf, sgl).map(|(wr, inline)| Posted::Send(q, wr, inline))
                    }
                    WorkQueue::Recv(q) => slot::decode_recv(buf, sgl).map(|wr| Posted::Recv(q, wr)),
                    WorkQueue::Srq(q) => {
                        slot::decode_recv(buf, sgl).map(|wr| Posted::SrqRecv(q, wr))
                    }
                };
                match posted {
                    Some(p) => out.push(p),
                    None => self.garbage += 1,
                }
            }
            if ring.has_message() {
                self.waiting.push(queue);
            }
        }
        queues.clear();
        self.queues = queues;
    }

    /// Moves completions from the engine's CQs of `cqs` that are this context's into their
    /// rings while they have room; a CQ whose ring filled first goes into `left`.
    pub fn fill_cqs(
        &mut self,
        engine: &mut Engine<ProcessMemory>,
        cqs: &[u32],
        left: &mut Vec<u32>,
    ) -> bool {
        let mut any = false;
        let mut one = [Wc::new(0, WcStatus::Success, WcOpcode::Send, 0)];
        for &cq in cqs {
            let Some(ring) = self.cqs.get_mut(&cq) else {
                continue;
            };
            while ring.has_room() && engine.poll_cq(cq, &mut one).unwrap_or(0) == 1 {
                ring.push(slot::encode_wc(&one[0]).as_bytes());
                any = true;
            }
            if !ring.has_room() && engine.cq_len(cq).is_ok_and(|n| n > 0) {
                left.push(cq);
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

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_emu_core::{QpCap, SendFlags, SendOp, Sge};

    /// A context's rings, the program's mapping of its region, and the program's end of the
    /// wake-up socket (kept open).
    fn context() -> (Rings, Arc<Region>, OwnedFd) {
        let (region, fd) = Region::create().unwrap();
        let program = Region::open(&fd).unwrap();
        let (wake, theirs) = sys::wake_pair().unwrap();
        (Rings::new(region, wake), program, theirs)
    }

    #[test]
    fn garbage_a_program_writes_into_its_rings_is_counted_and_skipped() {
        let (mut rings, program, _theirs) = context();
        let cap = QpCap::new(4, 1, 0);
        let slot_size = slot::send_slot_size(&cap) as usize;
        let (sq_info, sq) = rings.new_ring(4, slot::send_slot_size(&cap)).unwrap();
        let (rq_info, rq) = rings.new_ring(4, slot::recv_slot_size(1)).unwrap();
        rings.sqs.insert(7, sq);
        rings.rqs.insert(7, rq);
        let mut sq = Ring::new(&program, sq_info).unwrap();
        let mut rq = Ring::new(&program, rq_info).unwrap();
        let mut notices = Notices::new(&program);
        // An opcode no WR has, more SGEs than a slot holds, then one good WR each.
        let mut bad = vec![0xffu8; slot_size];
        bad[8..12].copy_from_slice(&42u32.to_le_bytes());
        assert!(sq.push(&bad));
        let mut huge = [0u8; 32];
        huge[8..12].copy_from_slice(&1000u32.to_le_bytes());
        assert!(rq.push(&huge));
        let wr = SendWr {
            wr_id: 5,
            op: SendOp::Send,
            sgl: vec![Sge::default()],
            flags: SendFlags::SIGNALED,
            ud: None,
            xrc_srqn: None,
        };
        let mut buf = vec![0u8; slot_size];
        let n = slot::encode_send(&wr, None, &mut buf).unwrap();
        assert!(sq.push(&buf[..n]));
        let recv = RecvWr {
            wr_id: 6,
            sgl: vec![Sge::default()],
        };
        let n = slot::encode_recv(&recv, &mut buf).unwrap();
        assert!(rq.push(&buf[..n]));
        notices.announce(&sq, WorkQueue::Send(7));
        notices.announce(&rq, WorkQueue::Recv(7));
        // A notice for a queue that is not the context's is ignored.
        let (stray, _) = rings.new_ring(1, slot::recv_slot_size(1)).unwrap();
        notices.announce(&Ring::new(&program, stray).unwrap(), WorkQueue::Srq(7));
        program.ring_doorbell();
        let posted = taken(&mut rings, 4);
        assert_eq!(rings.garbage, 2);
        assert!(
            matches!(&posted[..], [Posted::Send(7, w, None), Posted::Recv(7, r)] if *w == wr && *r == recv)
        );
    }

    /// What `take_posted` takes with room for `room` in every queue.
    fn taken(rings: &mut Rings, room: usize) -> Vec<Posted> {
        let mut out = Vec::new();
        rings.take_posted(|_| room, &mut Vec::new(), &mut out);
        out
    }

    /// Posts `count` receives (IDs from 0) of `sgl` into a new receive ring of QP 3, as the
    /// program would: each announced, then the doorbell rung.
    fn receives(rings: &mut Rings, program: &Arc<Region>, count: u64, sgl: &[Sge]) {
        let size = slot::recv_slot_size(sgl.len().max(1) as u32);
        let (info, ring) = rings.new_ring(4, size).unwrap();
        rings.rqs.insert(3, ring);
        let mut rq = Ring::new(program, info).unwrap();
        let mut notices = Notices::new(program);
        let mut buf = vec![0u8; size as usize];
        for wr_id in 0..count {
            let wr = RecvWr {
                wr_id,
                sgl: sgl.to_vec(),
            };
            let n = slot::encode_recv(&wr, &mut buf).unwrap();
            assert!(rq.push(&buf[..n]));
            notices.announce(&rq, WorkQueue::Recv(3));
        }
        program.ring_doorbell();
    }

    #[test]
    fn work_left_for_want_of_room_is_taken_later_without_a_new_notice() {
        let (mut rings, program, _theirs) = context();
        receives(&mut rings, &program, 3, &[]);
        assert_eq!(taken(&mut rings, 2).len(), 2, "room for two");
        assert_eq!(taken(&mut rings, 2).len(), 1, "the third, with no doorbell");
        assert!(taken(&mut rings, 2).is_empty());
    }

    #[test]
    fn posted_work_is_decoded_into_spare_sge_lists() {
        let (mut rings, program, _theirs) = context();
        let sgl = vec![Sge::default(); 2];
        receives(&mut rings, &program, 2, &sgl);
        // A spare list is used as it is found (emptied of what it held); then new ones.
        let mut spare = vec![vec![Sge::default(); 5]];
        spare[0].reserve_exact(2);
        let capacity = spare[0].capacity();
        let mut out = Vec::new();
        rings.take_posted(|_| 4, &mut spare, &mut out);
        assert!(spare.is_empty());
        let [Posted::Recv(3, a), Posted::Recv(3, b)] = &out[..] else {
            panic!("two receives: {}", out.len());
        };
        assert_eq!((a.wr_id, &a.sgl, a.sgl.capacity()), (0, &sgl, capacity));
        assert_eq!((b.wr_id, &b.sgl), (1, &sgl));
    }

    #[test]
    fn the_place_of_a_destroyed_ring_is_given_again_empty() {
        let (mut rings, program, _theirs) = context();
        let size = slot::recv_slot_size(1);
        let (info, ring) = rings.new_ring(4, size).unwrap();
        let mut rq = Ring::new(&program, info).unwrap();
        assert!(rq.push(&[0; 32]));
        rings.free([ring]);
        let (again, ring) = rings.new_ring(4, size).unwrap();
        assert_eq!(again, info);
        assert!(!ring.has_message(), "what the old ring held is gone");
    }
}
