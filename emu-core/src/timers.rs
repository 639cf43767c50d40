//! Every QP timer of the engine in one place: each QP has at most one of each [`Timer`], and
//! the next one due is found without walking the QPs.

use std::collections::{BTreeSet, HashMap};

use crate::time::Instant;

/// A QP's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Timer {
    /// The local ACK timer (IBA 9.7.6.1.3): a response is overdue, resend or give up.
    Ack,
    /// An RNR NAK's wait (IBA 9.7.5.2.8): the requester sends nothing before it ends.
    RnrWait,
}

/// The armed timers, by deadline.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    due: BTreeSet<(Instant, u32, Timer)>,
    armed: HashMap<(u32, Timer), Instant>,
}

impl Timers {
    /// Arms `timer` of QP `qpn` for `at`, replacing its deadline if it was armed.
    pub fn arm(&mut self, qpn: u32, timer: Timer, at: Instant) {
        self.stop(qpn, timer);
        self.armed.insert((qpn, timer), at);
        self.due.insert((at, qpn, timer));
    }

    /// Arms `timer` for `at` unless it is armed already.
    pub fn arm_if_idle(&mut self, qpn: u32, timer: Timer, at: Instant) {
        if self.deadline(qpn, timer).is_none() {
            self.arm(qpn, timer, at);
        }
    }

    /// Stops `timer` of QP `qpn`, if it was armed.
    pub fn stop(&mut self, qpn: u32, timer: Timer) {
        if let Some(at) = self.armed.remove(&(qpn, timer)) {
            self.due.remove(&(at, qpn, timer));
        }
    }

    /// Stops every timer of QP `qpn` (it is reset, in error or destroyed).
    pub fn stop_all(&mut self, qpn: u32) {
        self.stop(qpn, Timer::Ack);
        self.stop(qpn, Timer::RnrWait);
    }

    /// When `timer` of QP `qpn` is due, if it is armed.
    pub fn deadline(&self, qpn: u32, timer: Timer) -> Option<Instant> {
        self.armed.get(&(qpn, timer)).copied()
    }

    /// When the next timer is due.
    pub fn next(&self) -> Option<Instant> {
        self.due.first().map(|&(at, ..)| at)
    }

    /// The next timer due at `now`, disarmed.
    pub fn pop_due(&mut self, now: Instant) -> Option<(u32, Timer)> {
        let &(at, qpn, timer) = self.due.first()?;
        if at > now {
            return None;
        }
        self.stop(qpn, timer);
        Some((qpn, timer))
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
        assert_eq!(t.next(), Some(at(20)));
        assert_eq!(t.pop_due(at(19)), None);
        assert_eq!(t.pop_due(at(100)), Some((1, Timer::RnrWait)));
        assert_eq!(t.pop_due(at(100)), Some((1, Timer::Ack)));
        assert_eq!(t.deadline(1, Timer::Ack), None);
        assert_eq!(t.pop_due(at(100)), Some((2, Timer::Ack)));
        assert_eq!((t.pop_due(at(100)), t.next()), (None, None));
    }

    #[test]
    fn a_stopped_qp_has_no_timer_left() {
        let mut t = Timers::default();
        t.arm(7, Timer::Ack, at(1));
        t.arm(7, Timer::RnrWait, at(2));
        t.arm(8, Timer::Ack, at(3));
        t.stop_all(7);
        assert_eq!(t.pop_due(at(10)), Some((8, Timer::Ack)));
        assert_eq!(t.next(), None);
    }
}
