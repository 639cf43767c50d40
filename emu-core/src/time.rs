//! Time as the engine sees it: an input, never read from a clock.

use core::ops::{Add, Sub};
use core::time::Duration;

/// A point in time, in nanoseconds since an epoch the caller chooses (a simulation starts at 0;
/// the device daemon uses its monotonic clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);

    /// The instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant(nanos)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_since(earlier)
    }
}

/// The local ACK timeout for the 5-bit `timeout` attribute: 4.096 µs × 2^timeout (IBA 9.7.6.1.3);
/// 0 means the timer is disabled (infinite).
pub fn ack_timeout(timeout: u8) -> Option<Duration> {
    match timeout & 0x1f {
        0 => None,
        t => Some(Duration::from_nanos(4096u64 << t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeout_follows_the_formula() {
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(1), Some(Duration::from_nanos(8192)));
        // 14 is what perftest uses: 4.096 µs × 16384 = 67.1 ms.
        assert_eq!(ack_timeout(14), Some(Duration::from_nanos(67_108_864)));
        assert_eq!(ack_timeout(31), Some(Duration::from_nanos(4096u64 << 31)));
    }

    #[test]
    fn instants_add_and_subtract() {
        let t = Instant::from_nanos(10) + Duration::from_nanos(5);
        assert_eq!(t.as_nanos(), 15);
        assert_eq!(t - Instant::from_nanos(20), Duration::ZERO);
        assert_eq!(t - Instant::from_nanos(5), Duration::from_nanos(10));
    }
}
