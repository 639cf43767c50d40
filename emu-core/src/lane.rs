//! QPN lanes: a device whose QPs are spread over several engines (one per worker thread) gives
//! each engine the QP numbers of one lane, so that a frame finds its engine by its BTH
//! destination QP alone, with no table to share between threads.

use softrnic_wire::MULTICAST_QPN;
use softrnic_wire::mad::GSI_QPN;

/// The first number a QP may have: 0 and 1 are the special QPs, and, as rxe
/// numbers its QPs, those up to 0x10 are left unused.
const FIRST_QPN: u32 = 0x11;

/// Lane `index` of `count`: the QP numbers `n` with `n % count == index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane {
    index: u32,
    count: u32,
}

/// Which engines of a device take a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lanes {
    /// The engine of lane `n` (0 for QP1: the CM, and the GSI, live in the first engine).
    One(u32),
    /// Every engine: a multicast datagram reaches every member QP (IBA 10.5).
    All,
}

impl Lanes {
    /// Whether lane `index` takes the frame.
    pub fn includes(self, index: u32) -> bool {
        match self {
            Lanes::One(k) => k == index,
            Lanes::All => true,
        }
    }
}

impl Lane {
    /// The one lane of a device with one engine: every number.
    pub const ONLY: Lane = Lane { index: 0, count: 1 };

    /// Lane `index` of `count`, if there is one.
    pub fn new(index: u32, count: u32) -> Option<Lane> {
        (index < count).then_some(Lane { index, count })
    }

    /// Which lane it is, from 0.
    pub fn index(self) -> u32 {
        self.index
    }

    /// How many lanes its device has.
    pub fn count(self) -> u32 {
        self.count
    }

    /// Where a frame to `qpn` goes among `count` lanes.
    pub fn of(qpn: u32, count: u32) -> Lanes {
        match qpn {
            MULTICAST_QPN => Lanes::All,
            GSI_QPN | 0 => Lanes::One(0),
            n => Lanes::One(n % count.max(1)),
        }
    }

    /// The first number of this lane at or after `qpn` (which must leave room below the
    /// multicast QPN, as every number an engine starts from does).
    pub(crate) fn at_or_after(self, qpn: u32) -> u32 {
        let qpn = qpn.max(FIRST_QPN);
        qpn + (self.index + self.count - qpn % self.count) % self.count
    }

    /// The number this lane gives after `qpn`: the next of the lane, or, past the last, its
    /// first again (0xFFFFFF, the multicast QPN, is never a QP's: IBA 10.5).
    pub(crate) fn after(self, qpn: u32) -> u32 {
        match qpn + self.count {
            n if n >= MULTICAST_QPN => self.at_or_after(FIRST_QPN),
            n => n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every number a lane gives is its own, never a special QP's or the multicast QPN,
        /// and frames to it are routed to that lane.
        #[test]
        fn a_lane_gives_only_its_own_numbers(
            count in 1u32..9,
            index in 0u32..9,
            start in 0u32..MULTICAST_QPN - 16,
        ) {
            let Some(lane) = Lane::new(index % count, count) else { unreachable!() };
            let mut qpn = lane.at_or_after(start);
            for _ in 0..3 {
                prop_assert!((FIRST_QPN..MULTICAST_QPN).contains(&qpn));
                prop_assert_eq!(Lane::of(qpn, count), Lanes::One(lane.index()));
                qpn = lane.after(qpn);
            }
        }
    }

    #[test]
    fn a_lane_wraps_to_its_first_number_and_special_qps_have_fixed_lanes() {
        let lane = Lane::new(1, 2).unwrap();
        assert_eq!(lane.at_or_after(0), 0x11);
        assert_eq!(lane.after(MULTICAST_QPN - 2), 0x11);
        let last = Lane::new(0, 2).unwrap();
        assert_eq!(last.at_or_after(0x11), 0x12);
        assert_eq!(last.after(MULTICAST_QPN - 1), 0x12);
        assert_eq!(Lane::of(1, 4), Lanes::One(0));
        assert_eq!(Lane::of(MULTICAST_QPN, 4), Lanes::All);
        assert_eq!(Lane::of(0x13, 1), Lanes::One(0));
        assert_eq!(Lane::new(2, 2), None);
        assert!(Lanes::One(1).includes(1) && !Lanes::One(1).includes(0));
        assert!(Lanes::All.includes(0) && Lanes::All.includes(3));
    }
}
