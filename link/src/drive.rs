//! The drive loop's pass, the same for every driver that runs an engine over a [`Link`]:
//! library mode (in real time) and the simulator (in virtual time). The daemon runs the same
//! steps in its own loop, because it is also a switch between its devices (same-host delivery,
//! multicast loopback, captures).

use softrnic_emu_core::{Engine, Instant, Memory};

use crate::Link;

/// One pass at `now`: the frames that arrived, then the timers that are due (a response and a
/// timeout at the same instant: the response wins, as it got there first), then up to `burst`
/// frames out. Returns whether any frame moved.
pub fn pass<M: Memory>(
    engine: &mut Engine<M>,
    now: Instant,
    link: &mut (impl Link + ?Sized),
    burst: usize,
) -> bool {
    let mut moved = false;
    while link.receive(&mut |f| engine.handle_packet(now, f)) {
        moved = true;
    }
    if engine.poll_timeout().is_some_and(|t| t <= now) {
        engine.handle_timeout(now);
    }
    for _ in 0..burst {
        if !link.transmit(&mut |buf| engine.poll_transmit(now, buf)) {
            break;
        }
        moved = true;
    }
    moved
}
