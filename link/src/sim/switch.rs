//! A switch between the simulator's hosts, for congestion: one output queue per port, drained
//! at the link's rate, that drops a frame it has no room for (tail drop), marks ECN-capable
//! frames CE as they leave with RED's probabilities (Kmin, Kmax, Pmax: the switch set-up of
//! DCQCN's paper), and with PFC (IEEE 802.1Qbb) pauses the ports feeding a queue over XOFF
//! until it drains to XON.

use std::collections::VecDeque;

use softrnic_emu_core::Rng;

/// How the switch is set up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwitchSpec {
    /// Bytes each output queue holds.
    pub buffer: u64,
    /// ECN marking, if any.
    pub red: Option<Red>,
    /// PFC, if any.
    pub pfc: Option<Pfc>,
}

/// RED's ECN marking: below `kmin` bytes queued nothing is marked, from `kmin` to `kmax` a
/// leaving frame is marked with a probability rising to `pmax`, above `kmax` every one is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Red {
    /// Bytes queued where marking starts.
    pub kmin: u64,
    /// Bytes queued above which every frame is marked.
    pub kmax: u64,
    /// The marking probability at `kmax`.
    pub pmax: f64,
}

impl Red {
    /// The probability that a frame leaving a queue of `queued` bytes is marked.
    pub fn probability(&self, queued: u64) -> f64 {
        if queued <= self.kmin {
            0.0
        } else if queued > self.kmax {
            1.0
        } else {
            self.pmax * (queued - self.kmin) as f64 / (self.kmax - self.kmin).max(1) as f64
        }
    }
}

/// PFC's thresholds: a queue above `xoff` bytes pauses the ports whose frames reach it; they
/// resume once it is at or below `xon`. Frames already on the wire still arrive (the headroom
/// the buffer keeps above XOFF is for them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pfc {
    /// Pause above this many bytes queued.
    pub xoff: u64,
    /// Resume at or below this many.
    pub xon: u64,
}

/// What one output port did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// The most bytes ever queued.
    pub peak: u64,
    /// Frames dropped for want of room.
    pub dropped: u64,
    /// Frames marked CE.
    pub marked: u64,
    /// PAUSEs sent to the ports feeding it.
    pub pauses: u64,
}

/// A frame leaving the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Egress {
    /// When it started to leave, in nanoseconds.
    pub at: u64,
    /// The port it came in on, and the one it leaves by.
    pub from: usize,
    /// The output port.
    pub to: usize,
    /// Its bytes.
    pub bytes: u64,
    /// Bytes queued at that port as it left (itself included).
    pub queued: u64,
}

#[derive(Debug, Default)]
struct Queue {
    frames: VecDeque<(usize, Vec<u8>)>,
    bytes: u64,
}

/// The switch's state.
#[derive(Debug)]
pub struct Switch {
    /// Its set-up.
    pub spec: SwitchSpec,
    /// Per output port.
    pub stats: Vec<PortStats>,
    /// Every frame that left, in order.
    pub log: Vec<Egress>,
    queues: Vec<Queue>,
    /// For each port, the output queue that paused it.
    paused_by: Vec<Option<usize>>,
}

impl Switch {
    /// A switch with `ports` ports.
    pub fn new(spec: SwitchSpec, ports: usize) -> Switch {
        Switch {
            spec,
            stats: vec![PortStats::default(); ports],
            log: Vec::new(),
            queues: (0..ports).map(|_| Queue::default()).collect(),
            paused_by: vec![None; ports],
        }
    }

    /// Whether port `port` may not send (PFC).
    pub fn paused(&self, port: usize) -> bool {
        self.paused_by[port].is_some()
    }

    /// A frame from port `from` for port `to` has arrived. Returns whether the output port was
    /// idle, so that the caller starts sending it; false when it waits or was dropped.
    pub fn enqueue(&mut self, from: usize, to: usize, frame: Vec<u8>) -> bool {
        let q = &mut self.queues[to];
        let len = frame.len() as u64;
        if q.bytes + len > self.spec.buffer {
            self.stats[to].dropped += 1;
            return false;
        }
        q.bytes += len;
        q.frames.push_back((from, frame));
        let stats = &mut self.stats[to];
        stats.peak = stats.peak.max(q.bytes);
        if let Some(pfc) = self.spec.pfc
            && q.bytes > pfc.xoff
            && self.paused_by[from].is_none()
        {
            self.paused_by[from] = Some(to);
            stats.pauses += 1;
        }
        q.frames.len() == 1
    }

    /// The frame at the head of output `to`'s queue starts to leave at `at`: whether RED marks
    /// it is drawn from `rng`. Returns the frame and whether to mark it; `None` when the queue
    /// is empty.
    pub fn head(&mut self, to: usize, at: u64, rng: &mut Rng) -> Option<(&mut Vec<u8>, bool)> {
        let q = &mut self.queues[to];
        let (from, frame) = q.frames.front_mut()?;
        let mark = self
            .spec
            .red
            .is_some_and(|red| rng.chance(red.probability(q.bytes)));
        self.log.push(Egress {
            at,
            from: *from,
            to,
            bytes: frame.len() as u64,
            queued: q.bytes,
        });
        Some((frame, mark))
    }

    /// The head of output `to`'s queue has left: it is taken off, and the ports it paused
    /// resume once it is at or below XON. Returns whether another frame waits.
    pub fn sent(&mut self, to: usize) -> bool {
        let q = &mut self.queues[to];
        if let Some((_, frame)) = q.frames.pop_front() {
            q.bytes -= frame.len() as u64;
        }
        if self.spec.pfc.is_some_and(|pfc| q.bytes <= pfc.xon) {
            for p in self.paused_by.iter_mut().filter(|p| **p == Some(to)) {
                *p = None;
            }
        }
        !q.frames.is_empty()
    }

    /// A frame was marked as it left output `to`.
    pub fn count_mark(&mut self, to: usize) {
        self.stats[to].marked += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SwitchSpec {
        SwitchSpec {
            buffer: 3000,
            red: Some(Red {
                kmin: 1000,
                kmax: 2000,
                pmax: 0.5,
            }),
            pfc: None,
        }
    }

    #[test]
    fn red_marks_nothing_below_kmin_some_between_and_all_above_kmax() {
        let red = spec().red.unwrap();
        assert_eq!(red.probability(1000), 0.0);
        assert!((red.probability(1500) - 0.25).abs() < 1e-9);
        assert_eq!(red.probability(2001), 1.0);
    }

    #[test]
    fn a_full_queue_drops_and_the_head_leaves_first() {
        let mut s = Switch::new(spec(), 2);
        assert!(s.enqueue(0, 1, vec![1; 1000]));
        assert!(!s.enqueue(0, 1, vec![2; 1500]));
        assert!(!s.enqueue(0, 1, vec![3; 1000]), "no room: dropped");
        assert_eq!((s.stats[1].dropped, s.stats[1].peak), (1, 2500));
        let mut rng = Rng::new(1);
        let (f, mark) = s.head(1, 0, &mut rng).unwrap();
        assert_eq!((f[0], mark), (1, true), "2500 bytes queued: above Kmax");
        assert!(s.sent(1));
        let (f, _) = s.head(1, 10, &mut rng).unwrap();
        assert_eq!(f[0], 2);
        assert!(!s.sent(1));
        assert!(s.head(1, 20, &mut rng).is_none());
        assert_eq!(s.log.len(), 2);
        assert_eq!((s.log[0].queued, s.log[1].queued), (2500, 1500));
    }

    #[test]
    fn pfc_pauses_the_feeding_port_above_xoff_until_xon() {
        let mut s = Switch::new(
            SwitchSpec {
                pfc: Some(Pfc {
                    xoff: 1500,
                    xon: 500,
                }),
                ..spec()
            },
            3,
        );
        s.enqueue(0, 2, vec![0; 1000]);
        assert!(!s.paused(0));
        s.enqueue(1, 2, vec![0; 1000]);
        assert!(
            s.paused(1) && !s.paused(0),
            "the port whose frame went over"
        );
        s.enqueue(0, 2, vec![0; 900]);
        assert!(s.paused(0));
        assert_eq!(s.stats[2].pauses, 2);
        s.sent(2);
        s.sent(2);
        assert!(s.paused(0) && s.paused(1), "900 bytes: above XON");
        s.sent(2);
        assert!(!s.paused(0) && !s.paused(1), "empty: both resume");
    }
}
