//! Links that are plain memory: frames wait in a queue, with a pool of buffers so the data
//! path does not allocate.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use softrnic_emu_core::MAX_FRAME;

use crate::Link;

/// Frames waiting, with a pool of buffers so the data path does not allocate.
#[derive(Debug, Default)]
struct Queue {
    frames: VecDeque<(Vec<u8>, usize)>,
    pool: Vec<Vec<u8>>,
}

impl Queue {
    fn transmit(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool {
        let mut buf = self.pool.pop().unwrap_or_else(|| vec![0; MAX_FRAME]);
        match fill(&mut buf) {
            Some(n) => {
                self.frames.push_back((buf, n));
                true
            }
            None => {
                self.pool.push(buf);
                false
            }
        }
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool {
        let Some((buf, n)) = self.frames.pop_front() else {
            return false;
        };
        deliver(&buf[..n]);
        self.pool.push(buf);
        true
    }
}

/// A link whose frames come straight back: the device talks to itself.
#[derive(Debug, Default)]
pub struct Loopback(Queue);

impl Link for Loopback {
    fn transmit(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool {
        self.0.transmit(fill)
    }
    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool {
        self.0.receive(deliver)
    }
}

/// One end of a point-to-point link between two devices, usable across threads.
#[derive(Debug, Clone)]
pub struct Channel {
    out: Arc<Mutex<Queue>>,
    inn: Arc<Mutex<Queue>>,
}

impl Channel {
    /// The two ends of a new link.
    pub fn pair() -> (Channel, Channel) {
        let (a, b) = (Arc::default(), Arc::default());
        (
            Channel {
                out: Arc::clone(&a),
                inn: Arc::clone(&b),
            },
            Channel { out: b, inn: a },
        )
    }
}

impl Link for Channel {
    fn transmit(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool {
        self.out.lock().expect("link poisoned").transmit(fill)
    }
    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool {
        // Take the frame out under the lock, deliver it outside.
        let frame = self.inn.lock().expect("link poisoned").frames.pop_front();
        let Some((buf, n)) = frame else {
            return false;
        };
        deliver(&buf[..n]);
        self.inn.lock().expect("link poisoned").pool.push(buf);
        true
    }
}
