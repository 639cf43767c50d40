//! Every QP timer of the engine in one place: each QP has at most one of each [`Timer`], and
//! the next one due is found without walking the QPs.
//!
//! The packet path re-arms the ACK timer on every ACK that makes progress. So that it does
//! not reorder the set each time, a timer moved later keeps its place in the queue and is moved
//! when that place comes up: [`Timers::next`] is never late, and at worst early, which costs a
//! driver one call of `handle_timeout` that finds nothing due.

use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasherDefault;

use crate::engine::IdHasher;
use crate::time::Instant;

/// A QP's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Timer {
    /// The local ACK timer (IBA 9.7.6.1.3): a response is overdue, resend or give up.
    Ack,
    /// An RNR NAK's wait (IBA 9.7.5.2.8): the requester sends nothing before it ends.
    RnrWait,
    /// A rate-limited QP's next packet may leave (DCQCN's pacing).
    Pace,
}

/// One timer of one QP.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// When it fires, if it is armed.
    deadline: Option<Instant>,
    /// Where it stands in the queue: at or before `deadline`.
    queued: Option<Instant>,
}

/// The armed timers, by deadline.
#[derive(Debug, Default)]
#[cfg_attr(feature = "fuzz", derive(Clone))]
pub(crate) struct Timers {
    queue: BTreeSet<(Instant, u32, Timer)>,
    slots: HashMap<u32, Slot, BuildHasherDefault<IdHasher>>,
}

/// A QP's timer as one number (QPNs are 24 bits), for a cheap hash on the packet path.
fn key(qpn: u32, timer: Timer) -> u32 {
    qpn << 2 | timer as u32
}

impl Timers {
    /// Arms `timer` of QP `qpn` for `at`, replacing its deadline if it was armed.
    pub fn arm(&mut self, qpn: u32, timer: Timer, at: Instant) {
        let slot = self.slots.entry(key(qpn, timer)).or_default();
        slot.deadline = Some(at);
        match slot.queued {
            // Its place comes first; it is moved then.
            Some(q) if q <= at => {}
            Some(q) => {
                self.queue.remove(&(q, qpn, timer));
                self.queue.insert((at, qpn, timer));
                slot.queued = Some(at);
            }
            None => {
                self.queue.insert((at, qpn, timer));
                slot.queued = Some(at);
            }
        }
    }

    /// Arms `timer` for `at` unless it is armed already.
    pub fn arm_if_idle(&mut self, qpn: u32, timer: Timer, at: Instant) {
        if self.deadline(qpn, timer).is_none() {
            self.arm(qpn, timer, at);
        }
    }

    /// Stops `timer` of QP `qpn`, if it was armed (its place in the queue goes when it comes
    /// up).
    pub fn stop(&mut self, qpn: u32, timer: Timer) {
        if let Some(slot) = self.slots.get_mut(&key(qpn, timer)) {
            slot.deadline = None;
        }
    }

    /// Stops every timer of QP `qpn` and forgets it (it is reset, in error or destroyed).
    pub fn stop_all(&mut self, qpn: u32) {
        for timer in [Timer::Ack, Timer::RnrWait, Timer::Pace] {
            if let Some(Slot {
                queued: Some(q), ..
            }) = self.slots.remove(&key(qpn, timer))
            {
                self.queue.remove(&(q, qpn, timer));
            }
        }
    }

    /// When `timer` of QP `qpn` is due, if it is armed.
    pub fn deadline(&self, qpn: u32, timer: Timer) -> Option<Instant> {
        self.slots.get(&key(qpn, timer)).and_then(|s| s.deadline)
    }

    /// When to look for due timers next: never after the next deadline.
    pub fn next(&self) -> Option<Instant> {
        self.queue.first().map(|&(at, ..)| at)
    }

    /// The next timer due at `now`, disarmed. Places in the queue that come up for a timer
    /// armed later move to its deadline; those of stopped timers go.
    pub fn pop_due(&mut self, now: Instant) -> Option<(u32, Timer)> {
        while let Some(&(at, qpn, timer)) = self.queue.first() {
            if at > now {
                return None;
            }
            self.queue.pop_first();
            let k = key(qpn, timer);
            match self.slots.get(&k).and_then(|s| s.deadline) {
                Some(deadline) if deadline <= now => {
                    self.slots.remove(&k);
                    return Some((qpn, timer));
                }
                Some(deadline) => {
                    self.queue.insert((deadline, qpn, timer));
                    if let Some(slot) = self.slots.get_mut(&k) {
                        slot.queued = Some(deadline);
                    }
                }
                None => {
                    self.slots.remove(&k);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    #[test]
    fn timers_fire_in_deadline_order_once_each() {
        let mut t = Timers::default();
        t.arm(1, Timer::Ack, at(30));
        t.arm(2, Timer::Ack, at(10));
        t.arm(1, Timer::RnrWait, at(20));
        // Re-arming moves a deadline; arming an armed timer "if idle" does not.
        t.arm(2, Timer::Ack, at(40));
        t.arm_if_idle(1, Timer::Ack, at(5));
        assert_eq!(t.deadline(2, Timer::Ack), Some(at(40)));
        // The moved timer's old place comes up early and finds nothing due.
        assert_eq!(t.next(), Some(at(10)));
        assert_eq!(t.pop_due(at(19)), None);
        assert_eq!(t.next(), Some(at(20)));
        assert_eq!(t.pop_due(at(100)), Some((1, Timer::RnrWait)));
        assert_eq!(t.pop_due(at(100)), Some((1, Timer::Ack)));
        assert_eq!(t.deadline(1, Timer::Ack), None);
        assert_eq!(t.pop_due(at(100)), Some((2, Timer::Ack)));
        assert_eq!((t.pop_due(at(100)), t.next()), (None, None));
    }

    #[test]
    fn a_timer_moved_earlier_fires_at_its_new_deadline() {
        let mut t = Timers::default();
        t.arm(3, Timer::Ack, at(50));
        t.arm(3, Timer::Ack, at(20));
        assert_eq!(t.next(), Some(at(20)));
        assert_eq!(t.pop_due(at(20)), Some((3, Timer::Ack)));
        assert_eq!(t.next(), None);
    }

    #[test]
    fn a_stopped_timer_never_fires_and_a_stopped_qp_has_none_left() {
        let mut t = Timers::default();
        t.arm(7, Timer::Ack, at(1));
        t.arm(7, Timer::RnrWait, at(2));
        t.arm(8, Timer::Ack, at(3));
        t.arm(9, Timer::Ack, at(4));
        t.stop(9, Timer::Ack);
        assert_eq!(t.deadline(9, Timer::Ack), None);
        t.stop_all(7);
        assert_eq!(t.pop_due(at(10)), Some((8, Timer::Ack)));
        assert_eq!(t.pop_due(at(10)), None);
        assert_eq!(t.next(), None);
        assert!(t.slots.is_empty());
    }
}
