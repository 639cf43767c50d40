//! The project's one model of a lossy network: each frame's [`Fate`] drawn from [`Faults`] and
//! a seeded [`Rng`], so a run replays exactly. [`Faulty`] applies it to any link in real time;
//! the simulator applies it in virtual time (a reordered frame is delayed there, held back
//! behind the next frame here).

use softrnic_emu_core::{MAX_FRAME, Rng};

use crate::Link;

/// Random faults on every frame, as probabilities.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// The frame is lost.
    pub loss: f64,
    /// The frame arrives twice.
    pub duplicate: f64,
    /// The frame arrives after frames sent later.
    pub reorder: f64,
    /// One bit of the frame (from the IP header on) is flipped.
    pub corrupt: f64,
}

/// What happens to a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Delivered.
    Delivered,
    /// Lost.
    Dropped,
    /// Delivered twice.
    Duplicated,
    /// Delivered with a bit flipped.
    Corrupted,
    /// Delivered behind later frames.
    Reordered,
}

impl Faults {
    /// No faults: every frame is delivered.
    pub const NONE: Faults = Faults {
        loss: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        corrupt: 0.0,
    };

    /// One frame's fate: each fault in turn, the first drawn wins.
    pub fn fate(&self, rng: &mut Rng) -> Fate {
        if rng.chance(self.loss) {
            Fate::Dropped
        } else if rng.chance(self.duplicate) {
            Fate::Duplicated
        } else if rng.chance(self.reorder) {
            Fate::Reordered
        } else if rng.chance(self.corrupt) {
            Fate::Corrupted
        } else {
            Fate::Delivered
        }
    }
}

/// Flips one bit of `frame` past its Ethernet header, so that the frame still reaches its host
/// and the receiver's checks (IP, UDP, ICRC) are what must catch it.
pub fn corrupt(frame: &mut [u8], rng: &mut Rng) {
    const IP_AT: usize = 14;
    if frame.len() > IP_AT {
        let bit = rng.below(((frame.len() - IP_AT) * 8) as u64) as usize;
        frame[IP_AT + bit / 8] ^= 1 << (bit % 8);
    }
}

/// A link that applies [`Faults`] to the frames another link sends: for tests over any link
/// (where the kernel has no netem, for instance). A reordered frame is held back until the
/// next frame is sent, or until nothing arrives.
#[derive(Debug)]
pub struct Faulty<L> {
    inner: L,
    faults: Faults,
    rng: Rng,
    held: Option<Vec<u8>>,
    scratch: Vec<u8>,
    /// How many frames met each fate that is not [`Fate::Delivered`]: dropped, duplicated,
    /// corrupted, reordered.
    pub injected: [u64; 4],
}

impl<L: Link> Faulty<L> {
    /// Wraps `inner`.
    pub fn new(inner: L, seed: u64, faults: Faults) -> Self {
        Faulty {
            inner,
            faults,
            rng: Rng::new(seed),
            held: None,
            scratch: vec![0; MAX_FRAME],
            injected: [0; 4],
        }
    }

    fn send(&mut self, n: usize) {
        let frame = &self.scratch[..n];
        self.inner.transmit(&mut |buf: &mut [u8]| {
            buf[..frame.len()].copy_from_slice(frame);
            Some(frame.len())
        });
    }

    fn release_held(&mut self) {
        if let Some(held) = self.held.take() {
            self.inner.transmit(&mut |buf: &mut [u8]| {
                buf[..held.len()].copy_from_slice(&held);
                Some(held.len())
            });
        }
    }
}

impl<L: Link> Link for Faulty<L> {
    fn transmit(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool {
        let Some(n) = fill(&mut self.scratch) else {
            return false;
        };
        let fate = match self.faults.fate(&mut self.rng) {
            // One frame held at a time: a second is sent in order.
            Fate::Reordered if self.held.is_some() => Fate::Delivered,
            fate => fate,
        };
        match fate {
            Fate::Delivered => self.send(n),
            Fate::Dropped => self.injected[0] += 1,
            Fate::Duplicated => {
                self.injected[1] += 1;
                self.send(n);
                self.send(n);
            }
            Fate::Corrupted => {
                self.injected[2] += 1;
                corrupt(&mut self.scratch[..n], &mut self.rng);
                self.send(n);
            }
            Fate::Reordered => {
                self.injected[3] += 1;
                self.held = Some(self.scratch[..n].to_vec());
                return true;
            }
        }
        self.release_held();
        true
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool {
        if self.inner.receive(deliver) {
            return true;
        }
        // Nothing arrives: release a frame held back, so it is late but not lost.
        self.release_held();
        false
    }

    fn flush(&mut self) {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::Loopback;

    fn frames(link: &mut impl Link) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while link.receive(&mut |f| out.push(f.to_vec())) {}
        out
    }

    fn send(link: &mut impl Link, byte: u8) {
        assert!(link.transmit(&mut |buf| {
            buf[..20].fill(byte);
            Some(20)
        }));
    }

    #[test]
    fn every_fate_does_what_it_says() {
        let all = |f: fn(&mut Faults)| {
            let mut faults = Faults::default();
            f(&mut faults);
            Faulty::new(Loopback::default(), 1, faults)
        };
        let mut lossy = all(|f| f.loss = 1.0);
        send(&mut lossy, 1);
        assert!(frames(&mut lossy).is_empty());
        assert_eq!(lossy.injected, [1, 0, 0, 0]);

        let mut twice = all(|f| f.duplicate = 1.0);
        send(&mut twice, 1);
        assert_eq!(frames(&mut twice), vec![vec![1; 20], vec![1; 20]]);

        let mut flipped = all(|f| f.corrupt = 1.0);
        send(&mut flipped, 0);
        let got = frames(&mut flipped);
        let ones: u32 = got[0].iter().map(|b| b.count_ones()).sum();
        assert_eq!((got.len(), ones, &got[0][..14]), (1, 1, &[0u8; 14][..]));

        // The first frame waits behind the second; the third is held until nothing arrives.
        let mut late = all(|f| f.reorder = 1.0);
        for b in 1..=3 {
            send(&mut late, b);
        }
        assert_eq!(frames(&mut late), vec![vec![2; 20], vec![1; 20]]);
        assert_eq!(frames(&mut late), vec![vec![3; 20]]);
    }

    #[test]
    fn a_seed_replays_the_same_fates() {
        let faults = Faults {
            loss: 0.2,
            duplicate: 0.2,
            reorder: 0.2,
            corrupt: 0.2,
        };
        let draw = |seed| {
            let mut rng = Rng::new(seed);
            (0..64).map(|_| faults.fate(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }
}
