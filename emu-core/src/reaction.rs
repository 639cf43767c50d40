//! The reaction point of RoCEv2 congestion control: DCQCN (Zhu et al., SIGCOMM 2015), as
//! ConnectX NICs run it, with their parameter names. A QP that receives a CNP lowers its send
//! rate and paces its requests to it; the rate climbs back in fast recovery, additive and hyper
//! increase, driven by a timer and a byte counter. A QP that never got a CNP has no limiter
//! and pays nothing; one whose rate is back at the line rate drops it.
//!
//! Time is an input, as everywhere in the engine: the alpha and rate-increase timers are not
//! armed but worked out from the elapsed time when the QP next sends or hears a CNP.

use core::time::Duration;

use crate::qp::{Qp, Shared};
use crate::time::Instant;
use crate::timers::Timer;

/// Whether `qp`, held to a rate since a CNP, must wait before its next data packet (a request,
/// or a READ response: the QP is the data's sender either way); if so its pace timer wakes it.
pub(crate) fn held<M>(qp: &mut Qp, sh: &mut Shared<M>, now: Instant) -> bool {
    let Some(wake) = qp.rp.as_mut().and_then(|l| l.wait(&sh.dcqcn, now)) else {
        return false;
    };
    sh.timers.arm_if_idle(qp.qpn, Timer::Pace, wake);
    true
}

/// A data packet of `bytes` left `qp` at `now`: its limiter counts it, and goes once the rate
/// is back at the line rate.
pub(crate) fn sent<M>(qp: &mut Qp, sh: &Shared<M>, now: Instant, bytes: usize) {
    if let Some(l) = qp.rp.as_mut()
        && l.sent(&sh.dcqcn, now, bytes)
    {
        qp.rp = None;
    }
}

/// DCQCN's parameters, per device, named as mlx5 names them (`/sys/class/net/IF/ecn/roce_np`
/// and `roce_rp`), with its defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Dcqcn {
    /// `roce_np/enable`: whether CE-marked packets are answered with CNPs.
    pub np_enabled: bool,
    /// `roce_np/cnp_dscp`: the DSCP of the CNPs sent.
    pub cnp_dscp: u8,
    /// `roce_np/min_time_between_cnps`: the least time between two CNPs of one QP.
    pub min_time_between_cnps: Duration,
    /// `roce_rp/enable`: whether QPs react to CNPs at all. A QP that does sends its packets
    /// ECN-capable (ECT(0)), so that a congested switch marks them instead of dropping them.
    pub rp_enabled: bool,
    /// The rate a QP starts from and returns to, in Mb/s.
    pub line_rate_mbps: f64,
    /// `rpg_time_reset`: the rate-increase timer's period.
    pub time_reset: Duration,
    /// `rpg_byte_reset`: bytes sent per byte-counter increase event.
    pub byte_reset: u64,
    /// `rpg_threshold` (F): increase events of one kind before the next stage.
    pub threshold: u32,
    /// `rpg_ai_rate`: the target rate's step in additive increase, Mb/s.
    pub ai_rate_mbps: f64,
    /// `rpg_hai_rate`: the target rate's step in hyper increase, Mb/s.
    pub hai_rate_mbps: f64,
    /// `rpg_min_dec_fac`: one decrease leaves at least this share of the rate, in percent.
    pub min_dec_fac: u32,
    /// `rpg_min_rate`: the rate never goes below this, Mb/s.
    pub min_rate_mbps: f64,
    /// `dce_tcp_g`: alpha's averaging weight, out of 1024.
    pub dce_tcp_g: u32,
    /// `dce_tcp_rtt`: alpha's update period.
    pub dce_tcp_rtt: Duration,
    /// `rate_reduce_monitor_period`: the least time between two decreases.
    pub rate_reduce_monitor_period: Duration,
    /// `initial_alpha_value`: alpha at a QP's first CNP, out of 1024.
    pub initial_alpha: u32,
    /// `rpg_gd`: a decrease multiplies the rate by 1 - alpha / 2^(gd - 10).
    pub gd: u32,
}

impl Default for Dcqcn {
    /// ConnectX-4 and later's defaults (NVIDIA's DCQCN parameters); the line rate is a 100 Gb/s
    /// port's.
    fn default() -> Dcqcn {
        Dcqcn {
            np_enabled: true,
            cnp_dscp: 48,
            min_time_between_cnps: Duration::from_micros(4),
            rp_enabled: true,
            line_rate_mbps: 100_000.0,
            time_reset: Duration::from_micros(300),
            byte_reset: 32767,
            threshold: 1,
            ai_rate_mbps: 5.0,
            hai_rate_mbps: 50.0,
            min_dec_fac: 50,
            min_rate_mbps: 1.0,
            dce_tcp_g: 1019,
            dce_tcp_rtt: Duration::from_micros(1),
            rate_reduce_monitor_period: Duration::from_micros(4),
            initial_alpha: 1023,
            gd: 11,
        }
    }
}

/// How a parameter is written: a flag (0 or 1), a count, a rate in Mb/s or a time in µs.
#[derive(Clone, Copy)]
enum Unit {
    Flag,
    Count,
    Mbps,
    Micros,
}

/// Each parameter's mlx5 name (`roce_np/NAME` or `roce_rp/NAME`), its unit and its field.
macro_rules! params {
    ($($name:literal, $unit:ident, $field:ident;)*) => {
        /// Every parameter's name, as `softrnic dcqcn` shows and sets them.
        pub const NAMES: &'static [&'static str] = &[$($name),*];

        /// The parameter `name`'s value, written as mlx5's sysfs writes it.
        pub fn get(&self, name: &str) -> Option<String> {
            match name {
                $($name => Some(show(Unit::$unit, param!(get self.$field, $unit))),)*
                _ => None,
            }
        }

        /// Sets parameter `name` from `value` (as [`get`](Self::get) writes it); a value out
        /// of range changes nothing.
        pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
            let mut next = *self;
            match name {
                $($name => {
                    let v = parse(Unit::$unit, value).ok_or_else(|| {
                        format!("{name}: {value:?} is not {}", what(Unit::$unit))
                    })?;
                    param!(set next.$field, $unit, v);
                })*
                _ => return Err(format!("no DCQCN parameter {name:?} (see `softrnic dcqcn DEVICE`)")),
            }
            next.check()?;
            *self = next;
            Ok(())
        }
    };
}

/// A field read as, or written from, a number in its unit.
macro_rules! param {
    (get $f:expr, Flag) => {
        f64::from(u8::from($f))
    };
    // From whole nanoseconds, so that 21 ns shows as 0.021, not 0.020999999999999998.
    (get $f:expr, Micros) => {
        $f.as_nanos() as f64 / 1000.0
    };
    (get $f:expr, $unit:ident) => {
        $f as f64
    };
    (set $f:expr, Flag, $v:expr) => {
        $f = $v != 0.0
    };
    (set $f:expr, Micros, $v:expr) => {
        $f = Duration::from_nanos(($v * 1000.0).round() as u64)
    };
    (set $f:expr, Mbps, $v:expr) => {
        $f = $v
    };
    (set $f:expr, Count, $v:expr) => {
        $f = $v as _
    };
}

fn show(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Mbps | Unit::Micros if v.fract() != 0.0 => format!("{v}"),
        _ => format!("{}", v as u64),
    }
}

fn parse(unit: Unit, s: &str) -> Option<f64> {
    let v: f64 = s.trim().parse().ok()?;
    let whole = v.fract() == 0.0;
    let ok = match unit {
        Unit::Flag => v == 0.0 || v == 1.0,
        Unit::Count => whole && (0.0..=f64::from(u32::MAX)).contains(&v),
        Unit::Mbps => v.is_finite() && v >= 0.0,
        // mlx5 keeps its times as 32-bit counts of µs.
        Unit::Micros => (0.0..=f64::from(u32::MAX)).contains(&v),
    };
    ok.then_some(v)
}

fn what(unit: Unit) -> &'static str {
    match unit {
        Unit::Flag => "0 or 1",
        Unit::Count => "a whole number",
        Unit::Mbps => "a rate in Mb/s",
        Unit::Micros => "a time in µs",
    }
}

impl Dcqcn {
    params! {
        "np_enable", Flag, np_enabled;
        "cnp_dscp", Count, cnp_dscp;
        "min_time_between_cnps", Micros, min_time_between_cnps;
        "rp_enable", Flag, rp_enabled;
        "line_rate", Mbps, line_rate_mbps;
        "rpg_time_reset", Micros, time_reset;
        "rpg_byte_reset", Count, byte_reset;
        "rpg_threshold", Count, threshold;
        "rpg_ai_rate", Mbps, ai_rate_mbps;
        "rpg_hai_rate", Mbps, hai_rate_mbps;
        "rpg_min_dec_fac", Count, min_dec_fac;
        "rpg_min_rate", Mbps, min_rate_mbps;
        "dce_tcp_g", Count, dce_tcp_g;
        "dce_tcp_rtt", Micros, dce_tcp_rtt;
        "rate_reduce_monitor_period", Micros, rate_reduce_monitor_period;
        "initial_alpha_value", Count, initial_alpha;
        "rpg_gd", Count, gd;
    }

    /// Whether every parameter is in the range mlx5 accepts: a DSCP has 6 bits, alpha and g
    /// are out of 1024, a decrease factor is a percentage, and rates are positive.
    pub fn check(&self) -> Result<(), String> {
        let fail = |what: &str| Err(format!("DCQCN: {what}"));
        if self.cnp_dscp > 63 {
            return fail("cnp_dscp is 0 to 63");
        }
        if self.dce_tcp_g > 1024 || self.initial_alpha > 1024 {
            return fail("dce_tcp_g and initial_alpha_value are 0 to 1024");
        }
        if self.min_dec_fac > 100 {
            return fail("rpg_min_dec_fac is a percentage, 0 to 100");
        }
        if self.gd > 20 {
            return fail("rpg_gd is 0 to 20");
        }
        if !(self.line_rate_mbps.is_finite()
            && self.line_rate_mbps > 0.0
            && self.min_rate_mbps > 0.0)
        {
            return fail("line_rate and rpg_min_rate are above 0");
        }
        if ![self.ai_rate_mbps, self.hai_rate_mbps]
            .iter()
            .all(|r| r.is_finite() && *r >= 0.0)
        {
            return fail("rpg_ai_rate and rpg_hai_rate are rates, 0 or more");
        }
        if self.min_rate_mbps > self.line_rate_mbps {
            return fail("rpg_min_rate is at most line_rate");
        }
        Ok(())
    }
}

/// A QP's rate limiter, from its first CNP until its rate is back at the line rate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limiter {
    /// The current rate (DCQCN's RC), Mb/s.
    pub current: f64,
    /// The target rate (RT), Mb/s.
    target: f64,
    /// Alpha, 0 to 1: how congested the path has looked.
    alpha: f64,
    /// When alpha was last updated, and whether a CNP came since.
    alpha_at: Instant,
    cnp_since_alpha: bool,
    /// When the rate was last cut.
    decreased_at: Option<Instant>,
    /// Whether the rate went up since the last cut (the target is taken from the current rate
    /// only then: `clamp_tgt_rate` 0).
    increased: bool,
    /// Increase events since the last cut: from the timer (T), from the byte counter (BC).
    timer_events: u32,
    byte_events: u32,
    /// When the increase timer last fired, and the bytes sent since the counter last did.
    timer_at: Instant,
    bytes: u64,
    /// When the last packet left (or was due to, if it left early), and its bytes: the next
    /// may leave once those have had their time at the current rate, whatever the rate was
    /// when it left.
    sent_at: Instant,
    sent_bytes: u64,
}

/// Alpha after `periods` update periods without a CNP: α ← (g/1024)·α each.
fn decayed(alpha: f64, g: u32, periods: u64) -> f64 {
    alpha * (f64::from(g) / 1024.0).powi(periods.min(i32::MAX as u64) as i32)
}

impl Limiter {
    /// A QP's first CNP: alpha starts at its initial value, the rates at the line rate, and the
    /// first cut follows.
    pub fn new(p: &Dcqcn, now: Instant) -> Limiter {
        Limiter {
            current: p.line_rate_mbps,
            target: p.line_rate_mbps,
            alpha: f64::from(p.initial_alpha) / 1024.0,
            alpha_at: now,
            cnp_since_alpha: false,
            decreased_at: None,
            increased: true,
            timer_events: 0,
            byte_events: 0,
            timer_at: now,
            bytes: 0,
            sent_at: now,
            sent_bytes: 0,
        }
    }

    /// When the next packet may leave at the current rate.
    fn due(&self, p: &Dcqcn) -> Instant {
        let ns = self.sent_bytes as f64 * 8000.0 / self.current.max(p.min_rate_mbps.max(0.001));
        self.sent_at + Duration::from_nanos(ns as u64)
    }

    /// At `now`: `None` if the next packet may leave, else when to look again: when it may
    /// leave at the current rate, or at the next rate increase if that comes first.
    pub fn wait(&mut self, p: &Dcqcn, now: Instant) -> Option<Instant> {
        self.advance(p, now);
        let due = self.due(p);
        let increase = self.timer_at + p.time_reset.max(Duration::from_nanos(1));
        (due > now).then(|| due.min(increase))
    }

    /// Brings alpha and the increase timer up to `now`.
    fn advance(&mut self, p: &Dcqcn, now: Instant) {
        let period = p.dce_tcp_rtt.as_nanos().max(1) as u64;
        let periods = now.saturating_since(self.alpha_at).as_nanos() as u64 / period;
        if periods > 0 {
            // The first period ending now saw the CNPs since the last update, if any:
            // α ← (g/1024)·α + (1 - g/1024); the rest saw none.
            let g = f64::from(p.dce_tcp_g) / 1024.0;
            if self.cnp_since_alpha {
                self.alpha = g * self.alpha + (1.0 - g);
                self.alpha = decayed(self.alpha, p.dce_tcp_g, periods - 1);
            } else {
                self.alpha = decayed(self.alpha, p.dce_tcp_g, periods);
            }
            self.cnp_since_alpha = false;
            self.alpha_at = self.alpha_at + Duration::from_nanos(periods * period);
        }
        let reset = p.time_reset.as_nanos().max(1) as u64;
        let fired = now.saturating_since(self.timer_at).as_nanos() as u64 / reset;
        // Every period the timer fired while the QP was idle counts; once the rate is back at
        // the line rate the rest change nothing.
        for _ in 0..fired {
            if self.recovered(p) {
                break;
            }
            self.timer_events += 1;
            self.increase(p);
        }
        if fired > 0 {
            self.timer_at = self.timer_at + Duration::from_nanos(fired * reset);
        }
    }

    /// One increase event: fast recovery while both counters are below the threshold,
    /// additive increase once one reaches it, hyper increase once both pass it.
    fn increase(&mut self, p: &Dcqcn) {
        let f = p.threshold;
        if self.timer_events > f && self.byte_events > f {
            self.target += p.hai_rate_mbps;
        } else if self.timer_events >= f || self.byte_events >= f {
            self.target += p.ai_rate_mbps;
        }
        self.target = self.target.min(p.line_rate_mbps);
        self.current = ((self.target + self.current) / 2.0).min(p.line_rate_mbps);
        self.increased = true;
    }

    /// A CNP at `now`: the rate is cut, at most once per monitor period.
    pub fn cnp(&mut self, p: &Dcqcn, now: Instant) {
        self.advance(p, now);
        self.cnp_since_alpha = true;
        if self
            .decreased_at
            .is_some_and(|t| now.saturating_since(t) < p.rate_reduce_monitor_period)
        {
            return;
        }
        if self.increased {
            self.target = self.current;
        }
        let cut = self.alpha * 1024.0 / f64::from(1u32 << p.gd.min(20));
        let floor = self.current * f64::from(p.min_dec_fac.min(100)) / 100.0;
        self.current = (self.current * (1.0 - cut)).max(floor).max(p.min_rate_mbps);
        self.decreased_at = Some(now);
        self.increased = false;
        self.timer_events = 0;
        self.byte_events = 0;
        self.timer_at = now;
        self.bytes = 0;
    }

    /// A packet of `bytes` left at `now`: the byte counter counts it, and the next may leave
    /// once it has had its time at the current rate. Returns whether the QP is back at the line
    /// rate, so that the limiter can go.
    pub fn sent(&mut self, p: &Dcqcn, now: Instant, bytes: usize) -> bool {
        self.advance(p, now);
        self.sent_at = self.due(p).max(now);
        self.sent_bytes = bytes as u64;
        self.bytes += bytes as u64;
        while self.bytes >= p.byte_reset.max(1) {
            self.bytes -= p.byte_reset.max(1);
            self.byte_events += 1;
            self.increase(p);
        }
        self.recovered(p)
    }

    /// Whether the rate is back at the line rate: halving the distance to it gets within a
    /// millionth of it, and that is it.
    fn recovered(&self, p: &Dcqcn) -> bool {
        self.current >= p.line_rate_mbps * (1.0 - 1e-6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> Instant {
        Instant::from_nanos(us * 1000)
    }

    #[test]
    fn a_cnp_halves_the_rate_and_one_per_monitor_period_counts() {
        let p = Dcqcn::default();
        let mut l = Limiter::new(&p, at(0));
        l.cnp(&p, at(0));
        // alpha 1023/1024 at the first CNP: the rate times 1 - alpha/2.
        let first = 100_000.0 * (1.0 - 1023.0 / 2048.0);
        assert!((l.current - first).abs() < 1e-6, "{}", l.current);
        assert_eq!(l.target, 100_000.0);
        // Within 4 µs a second CNP cuts nothing.
        l.cnp(&p, at(2));
        assert!((l.current - first).abs() < 1e-6);
        // After the period it cuts again, by the smaller alpha.
        l.cnp(&p, at(10));
        assert!(
            l.current < first && l.current >= first / 2.0,
            "{}",
            l.current
        );
    }

    #[test]
    fn the_rate_recovers_to_the_line_rate_and_the_limiter_goes() {
        let p = Dcqcn {
            line_rate_mbps: 10_000.0,
            ..Dcqcn::default()
        };
        let mut l = Limiter::new(&p, at(0));
        l.cnp(&p, at(0));
        let cut = l.current;
        // Fast recovery halves the distance to the target each timer period (300 µs).
        l.sent(&p, at(300), 100);
        assert!(l.current > cut && l.current < p.line_rate_mbps);
        let mut t = 300;
        let mut back = false;
        while !back && t < 1_000_000 {
            t += 300;
            back = l.sent(&p, at(t), 4096);
        }
        assert!(back, "back at the line rate at {t} µs: {}", l.current);
    }

    #[test]
    fn packets_are_paced_at_the_current_rate() {
        let p = Dcqcn {
            line_rate_mbps: 8_000.0,
            ..Dcqcn::default()
        };
        let mut l = Limiter::new(&p, at(0));
        l.cnp(&p, at(0));
        // About 4000 Mb/s: 1000 bytes take about 2 µs.
        let ns = (1000.0 * 8000.0 / l.current) as u64;
        l.sent(&p, at(0), 1000);
        assert_eq!(l.wait(&p, at(1)), Some(Instant::from_nanos(ns)));
        assert!(ns.abs_diff(2000) < 5);
        // One sent before its time leaves the next its full time after.
        l.sent(&p, at(1), 1000);
        assert_eq!(l.wait(&p, at(1)), Some(Instant::from_nanos(2 * ns)));
        assert_eq!(l.wait(&p, Instant::from_nanos(2 * ns)), None);
    }

    #[test]
    fn a_rate_increase_lets_a_packet_held_at_a_low_rate_go_sooner() {
        let p = Dcqcn {
            line_rate_mbps: 10_000.0,
            ..Dcqcn::default()
        };
        let mut l = Limiter::new(&p, at(0));
        // Cut after cut, 4 µs apart, down to a few Mb/s.
        for k in 0..12 {
            l.cnp(&p, at(4 * k));
        }
        assert!(l.current < 10.0, "{}", l.current);
        l.sent(&p, at(48), 4096);
        // At that rate the next would wait milliseconds; the timer's increase, 300 µs after
        // the last cut, comes first, and then the packet may go.
        assert_eq!(l.wait(&p, at(50)), Some(at(344)));
        assert_eq!(l.wait(&p, at(344)), None, "{}", l.current);
    }

    #[test]
    fn parameters_are_read_and_set_by_their_mlx5_names() {
        let mut p = Dcqcn::default();
        assert_eq!(p.get("rpg_time_reset").as_deref(), Some("300"));
        assert_eq!(p.get("cnp_dscp").as_deref(), Some("48"));
        assert_eq!(p.get("rp_enable").as_deref(), Some("1"));
        assert_eq!(p.get("line_rate").as_deref(), Some("100000"));
        for name in Dcqcn::NAMES {
            let v = p.get(name).unwrap();
            p.set(name, &v).unwrap();
        }
        assert_eq!(p, Dcqcn::default(), "every value reads back as it was");
        p.set("rpg_time_reset", "55").unwrap();
        p.set("rp_enable", "0").unwrap();
        p.set("line_rate", "10000").unwrap();
        p.set("rpg_min_rate", "0.5").unwrap();
        assert_eq!(p.time_reset, Duration::from_micros(55));
        assert!(!p.rp_enabled);
        assert_eq!((p.line_rate_mbps, p.min_rate_mbps), (10_000.0, 0.5));
        assert!(p.set("rp_enable", "2").unwrap_err().contains("0 or 1"));
        assert!(p.set("rpg_threshold", "1.5").unwrap_err().contains("whole"));
        assert!(p.set("cnp_dscp", "64").unwrap_err().contains("0 to 63"));
        assert_eq!(p.cnp_dscp, 48, "unchanged");
        assert!(p.set("rpg_min_dec_fac", "101").is_err());
        // Times to the nanosecond: what is shown sets the same time again.
        for ns in [1, 21, 25, 999, 123_456_789] {
            p.dce_tcp_rtt = Duration::from_nanos(ns);
            let shown = p.get("dce_tcp_rtt").unwrap();
            p.set("dce_tcp_rtt", &shown).unwrap();
            assert_eq!(p.dce_tcp_rtt, Duration::from_nanos(ns), "{shown}");
        }
        assert_eq!(p.get("dce_tcp_rtt").as_deref(), Some("123456.789"));
        assert!(
            p.set("dce_tcp_rtt", "4294967296")
                .unwrap_err()
                .contains("µs")
        );
        assert!(p.set("line_rate", "0").is_err());
        assert!(
            p.set("rpg_ai", "5")
                .unwrap_err()
                .contains("no DCQCN parameter")
        );
    }

    #[test]
    fn alpha_decays_without_cnps() {
        let p = Dcqcn::default();
        let mut l = Limiter::new(&p, at(0));
        let a0 = l.alpha;
        l.advance(&p, at(100));
        assert!((l.alpha - a0 * (1019.0f64 / 1024.0).powi(100)).abs() < 1e-9);
    }
}
