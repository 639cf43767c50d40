//! A link that keeps every frame it passes, each way, and sends frames given whole: the
//! fuzzer's view of its conversation, and its way to say what the engine would not.

use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use softrnic_link::Link;

/// A frame that passed.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When, since the Unix epoch.
    pub at: Duration,
    /// Sent (by the engine or injected) rather than received.
    pub outbound: bool,
    /// Injected: a mutation, not the engine's.
    pub injected: bool,
    /// The frame.
    pub data: Vec<u8>,
}

/// `L`, with every frame kept.
pub struct Tapped<L> {
    inner: L,
    /// What passed, in order.
    pub seen: Vec<Seen>,
}

fn now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

impl<L: Link> Tapped<L> {
    /// Keeps what passes over `inner`.
    pub fn new(inner: L) -> Tapped<L> {
        Tapped {
            inner,
            seen: Vec::new(),
        }
    }

    /// Sends `frame` as it is.
    pub fn inject(&mut self, frame: &[u8]) -> io::Result<()> {
        // A full ring drains as the kernel sends: try a few times, as the daemon does.
        for _ in 0..64 {
            let mut fits = true;
            let sent = self.inner.transmit(&mut |room| {
                fits = room.len() >= frame.len();
                let to = room.get_mut(..frame.len())?;
                to.copy_from_slice(frame);
                Some(frame.len())
            });
            if sent {
                self.inner.flush();
                self.seen.push(Seen {
                    at: now(),
                    outbound: true,
                    injected: true,
                    data: frame.to_vec(),
                });
                return Ok(());
            }
            if !fits {
                return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
            }
            std::thread::yield_now();
        }
        Err(io::Error::from_raw_os_error(libc::ENOBUFS))
    }
}

impl<L: Link> Link for Tapped<L> {
    fn transmit(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool {
        let seen = &mut self.seen;
        self.inner.transmit(&mut |buf: &mut [u8]| {
            let n = fill(buf)?;
            seen.push(Seen {
                at: now(),
                outbound: true,
                injected: false,
                data: buf[..n].to_vec(),
            });
            Some(n)
        })
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(&[u8])) -> bool {
        let seen = &mut self.seen;
        self.inner.receive(&mut |f: &[u8]| {
            seen.push(Seen {
                at: now(),
                outbound: false,
                injected: false,
                data: f.to_vec(),
            });
            deliver(f)
        })
    }

    fn flush(&mut self) {
        self.inner.flush()
    }
}
