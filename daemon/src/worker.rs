//! The data path's threads. Each worker runs the devices whose index it is given (device `d`
//! goes to worker `d % workers`): the work programs post, frames in and out, timers, events
//! and completions. It polls while there is work, spins briefly after it, then sleeps in
//! poll(2) until a wire, a program or another thread wakes it, or its next timer is due.
//!
//! Same-host frames for a device of another worker go to that worker in a batch over a
//! channel, as do frames a shard's wire brought for another shard of its device. What only the control thread does (rdma_cm's events, captures) it is told with its
//! bell.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant as StdInstant};

use crossbeam_channel::{Receiver, Sender};
use softrnic_emu_core::Instant;
use softrnic_sys as sys;

use crate::device::{Device, Out, Outgoing};
use crate::switch::{Frames, Origin, Station, Switch, Tap};

/// How long a thread keeps polling after its last work before it sleeps.
pub(crate) const SPIN: Duration = Duration::from_micros(200);
/// The longest sleep, so a stop is seen.
pub(crate) const MAX_SLEEP_MS: i32 = 50;

/// A device behind its lock. Its worker takes the lock again as soon as a pass ends, so a
/// verbs call could wait for it for long under load; the control thread says it waits, and
/// the worker lets it go first.
pub(crate) struct Locked {
    device: Mutex<Device>,
    /// Control-thread callers waiting for the lock.
    wanted: AtomicU32,
}

impl Locked {
    pub fn new(device: Device) -> Locked {
        Locked {
            device: Mutex::new(device),
            wanted: AtomicU32::new(0),
        }
    }

    /// The worker's lock. A thread that panicked holding it took the daemon down already.
    fn lock(&self) -> MutexGuard<'_, Device> {
        self.device.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The control thread's lock, ahead of the worker's next pass.
    pub fn lock_ahead(&self) -> MutexGuard<'_, Device> {
        self.wanted.fetch_add(1, Ordering::SeqCst);
        let guard = self.lock();
        self.wanted.fetch_sub(1, Ordering::SeqCst);
        guard
    }

    /// Whether the control thread waits for the lock.
    fn wanted(&self) -> bool {
        self.wanted.load(Ordering::SeqCst) > 0
    }
}

/// How one thread wakes another that may sleep in poll(2): a flag that says there is
/// something to look at, and a socket written only when the thread sleeps.
pub(crate) struct Bell {
    ours: OwnedFd,
    theirs: OwnedFd,
    mail: AtomicBool,
    asleep: AtomicBool,
    /// When the thread wakes by itself (ns of [`Shared::now`]); `u64::MAX` while it is awake
    /// or working out when.
    until: AtomicU64,
}

impl Bell {
    pub fn new() -> std::io::Result<Bell> {
        let (ours, theirs) = sys::wake_pair()?;
        Ok(Bell {
            ours,
            theirs,
            mail: AtomicBool::new(false),
            asleep: AtomicBool::new(false),
            until: AtomicU64::new(u64::MAX),
        })
    }

    /// There is something for the thread: it looks in its next pass, woken if it sleeps.
    pub fn ring(&self) {
        // With `sleep`'s order, either the thread sees the mail before it sleeps or this sees
        // it asleep.
        self.mail.store(true, Ordering::SeqCst);
        if self.asleep.load(Ordering::SeqCst) {
            sys::wake(self.theirs.as_raw_fd());
        }
    }

    /// The start of a pass: what was rung so far is looked at in it. Whether it rang.
    pub fn open(&self) -> bool {
        self.mail.swap(false, Ordering::SeqCst)
    }

    /// About to sleep: `false` (and awake again) if the bell rang meanwhile.
    pub fn may_sleep(&self) -> bool {
        self.asleep.store(true, Ordering::SeqCst);
        if self.mail.load(Ordering::SeqCst) {
            self.asleep.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// The descriptor to sleep on.
    pub fn fd(&self) -> i32 {
        self.ours.as_raw_fd()
    }

    /// Awake again.
    pub fn woken(&self) {
        self.until.store(u64::MAX, Ordering::SeqCst);
        self.asleep.store(false, Ordering::SeqCst);
        sys::drain(&self.ours);
    }

    /// Something is due at `at`: rings if the thread would sleep past it. The thread says
    /// when it wakes only after it has looked at its timers (and `until` is `u64::MAX` while
    /// it looks), so a timer armed meanwhile is either seen or rung for.
    fn due(&self, at: Instant) {
        if at.as_nanos() < self.until.load(Ordering::SeqCst) {
            self.ring();
        }
    }
}

/// What the control thread and the workers share.
pub(crate) struct Shared {
    /// Every device, by index.
    devices: RwLock<Vec<Option<Arc<Locked>>>>,
    /// Changes whenever a device is added or removed, so workers know to look again.
    generation: AtomicU64,
    pub switch: Switch,
    inboxes: Vec<Sender<Frames>>,
    bells: Vec<Bell>,
    /// The control thread's bell: rdma_cm events, captured frames or a moved MAC wait.
    pub control: Bell,
    /// Frames captured since the control thread last took them.
    pub taps: Mutex<Vec<Tap>>,
    pub capturing: AtomicBool,
    /// The daemon is stopping (or a thread of it died).
    pub halted: AtomicBool,
    epoch: StdInstant,
}

impl Shared {
    /// For `workers` workers (at least one): the state, and each worker's inbox.
    pub fn new(workers: usize) -> std::io::Result<(Shared, Vec<Receiver<Frames>>)> {
        let (inboxes, receivers) = (0..workers.max(1))
            .map(|_| crossbeam_channel::unbounded())
            .unzip();
        let shared = Shared {
            devices: RwLock::default(),
            generation: AtomicU64::new(0),
            switch: Switch::default(),
            inboxes,
            bells: (0..workers.max(1))
                .map(|_| Bell::new())
                .collect::<std::io::Result<_>>()?,
            control: Bell::new()?,
            taps: Mutex::default(),
            capturing: AtomicBool::new(false),
            halted: AtomicBool::new(false),
            epoch: StdInstant::now(),
        };
        Ok((shared, receivers))
    }

    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    pub fn workers(&self) -> usize {
        self.bells.len()
    }

    fn worker_of(&self, d: usize) -> usize {
        d % self.bells.len()
    }

    /// Device `d` is `dev` (a new device) or gone (`None`).
    pub fn set_device(&self, d: usize, dev: Option<Arc<Locked>>) {
        {
            let mut devices = self.devices.write().unwrap_or_else(|e| e.into_inner());
            if devices.len() <= d {
                devices.resize(d + 1, None);
            }
            devices[d] = dev;
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.ring_worker(d);
    }

    /// Wakes the worker of device `d` (its engine has new work or timers).
    pub fn ring_worker(&self, d: usize) {
        self.bells[self.worker_of(d)].ring();
    }

    /// Wakes every worker.
    pub fn ring_workers(&self) {
        self.bells.iter().for_each(Bell::ring);
    }
}

/// A pass's scratch space, kept between passes to reuse its allocations: same-host frames
/// (for the pass's devices, then for each worker's), each device's station, captured frames.
pub(crate) struct Pass {
    frames: Frames,
    away: Vec<Frames>,
    stations: Vec<Option<Station>>,
    taps: Vec<Tap>,
}

impl Pass {
    pub fn new(shared: &Shared) -> Pass {
        Pass {
            frames: Frames::default(),
            away: (0..shared.workers()).map(|_| Frames::default()).collect(),
            stations: Vec::new(),
            taps: Vec::new(),
        }
    }

    /// One pass over `devices`, locked throughout (so a verbs call on one of them, or another
    /// pass, comes wholly before or after it): the work posted, frames from the wires and (in
    /// `inbox`) from other threads, due timers, then everything the engines send. A device's
    /// collected writes to program memory are made before it sends anything (an ACK must not
    /// overtake the data it acknowledges), and before completions reach the rings. Same-host
    /// frames are handed over after every device has sent, so their writes are collected
    /// too; then the responses to them go out in the same pass, so that, as on a hardware
    /// RNIC, an ACK leaves no later than the completion it acknowledges reaches the program
    /// (which may exit at once and take its QP with it). Frames for other devices go to their
    /// workers before the locks are let go. Whether there was any work.
    pub fn run(
        &mut self,
        shared: &Shared,
        devices: &mut [(usize, MutexGuard<'_, Device>)],
        inbox: Option<&Receiver<Frames>>,
    ) -> bool {
        let now = shared.now();
        let capturing = shared.capturing.load(Ordering::Relaxed);
        shared.switch.stations(&mut self.stations);
        let stations = std::mem::take(&mut self.stations);
        let out = Out {
            now,
            capturing,
            stations: &stations,
        };
        let mut any = false;
        for (d, dev) in devices.iter_mut() {
            any |= dev.take_posted(&shared.switch);
            let (taps, frames) = (&mut self.taps, &mut self.frames);
            any |= dev.receive(*d, &out, &shared.switch, taps, frames);
        }
        // Frames the wire brought for other shards of their devices.
        any |= self.deliver(shared, &out, devices);
        while let Some(batch) = inbox.and_then(|i| i.try_recv().ok()) {
            self.frames = batch;
            any |= self.deliver(shared, &out, devices);
        }
        for (d, dev) in devices.iter_mut() {
            any |= dev.transmit(*d, Outgoing::All, &out, &mut self.taps, &mut self.frames);
        }
        // Responses do not call for responses: the second round of deliveries is the last.
        while self.deliver(shared, &out, devices) {
            any = true;
            for (d, dev) in devices.iter_mut() {
                let (taps, frames) = (&mut self.taps, &mut self.frames);
                dev.transmit(*d, Outgoing::Responses, &out, taps, frames);
            }
        }
        for (w, batch) in self.away.iter_mut().enumerate() {
            if !batch.is_empty() && shared.inboxes[w].send(std::mem::take(batch)).is_ok() {
                shared.bells[w].ring();
            }
        }
        let mut tell = false;
        for (d, dev) in devices.iter_mut() {
            dev.finish();
            dev.route_events();
            any |= dev.fill_cqs();
            tell |= dev.moved || dev.engine.cm().has_events();
            // A pass another thread runs (a verbs call's) may arm a timer the device's worker,
            // asleep, does not know of.
            if inbox.is_none()
                && let Some(at) = dev.engine.poll_timeout()
            {
                shared.bells[shared.worker_of(*d)].due(at);
            }
        }
        if !self.taps.is_empty() {
            shared
                .taps
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .append(&mut self.taps);
            tell = true;
        }
        if tell {
            shared.control.ring();
        }
        self.stations = stations;
        any
    }

    /// Hands the same-host frames in `frames` to the engines of `devices`, and puts aside
    /// those for other devices, for their workers. Whether there were any.
    fn deliver(
        &mut self,
        shared: &Shared,
        out: &Out,
        devices: &mut [(usize, MutexGuard<'_, Device>)],
    ) -> bool {
        if self.frames.is_empty() {
            return false;
        }
        let frames = std::mem::take(&mut self.frames);
        for (to, frame, origin) in frames.iter() {
            let Some((_, target)) = devices.iter_mut().find(|x| x.0 == to) else {
                self.away[shared.worker_of(to)].push(to, frame, origin);
                continue;
            };
            // A frame from another worker may have been built before this capture began.
            if let (true, Origin::Built(sealed)) = (out.capturing, origin) {
                self.taps.push(Tap::arriving(to, frame, sealed));
            }
            target.engine.handle_trusted_packet(out.now, frame);
        }
        self.frames = frames;
        self.frames.clear();
        true
    }
}

/// A worker's state between passes.
struct Worker<'a> {
    id: usize,
    shared: &'a Shared,
    inbox: Receiver<Frames>,
    /// Its devices, as of `generation`.
    devices: Vec<(usize, Arc<Locked>)>,
    generation: u64,
    pass: Pass,
    /// Descriptors to sleep on.
    fds: Vec<i32>,
}

/// Runs worker `id` until the daemon halts.
pub(crate) fn work(id: usize, shared: &Shared, inbox: Receiver<Frames>) {
    // A worker that panics stops the daemon rather than leaving its devices dead.
    struct Halt<'a>(&'a Shared);
    impl Drop for Halt<'_> {
        fn drop(&mut self) {
            self.0.halted.store(true, Ordering::SeqCst);
            self.0.control.ring();
        }
    }
    let _halt = Halt(shared);
    let mut w = Worker {
        id,
        shared,
        inbox,
        devices: Vec::new(),
        generation: u64::MAX,
        pass: Pass::new(shared),
        fds: Vec::new(),
    };
    let bell = &shared.bells[id];
    let mut last_work = StdInstant::now();
    while !shared.halted.load(Ordering::Relaxed) {
        bell.open();
        w.refresh();
        let mut devices: Vec<_> = w.devices.iter().map(|(d, m)| (*d, m.lock())).collect();
        let busy = w.pass.run(shared, &mut devices, Some(&w.inbox));
        drop(devices);
        // A verbs call waiting for a device goes before the next pass.
        while w.devices.iter().any(|(_, m)| m.wanted()) {
            std::thread::yield_now();
        }
        if busy {
            last_work = StdInstant::now();
            continue;
        }
        if last_work.elapsed() < SPIN {
            std::thread::yield_now();
            continue;
        }
        w.sleep(bell);
    }
}

impl Worker<'_> {
    /// Looks again at which devices are its own, if that changed.
    fn refresh(&mut self) {
        let generation = self.shared.generation.load(Ordering::SeqCst);
        if generation == self.generation {
            return;
        }
        self.generation = generation;
        let devices = self
            .shared
            .devices
            .read()
            .unwrap_or_else(|e| e.into_inner());
        self.devices = (devices.iter().enumerate())
            .filter(|&(d, _)| self.shared.worker_of(d) == self.id)
            .filter_map(|(d, dev)| Some((d, Arc::clone(dev.as_ref()?))))
            .collect();
    }

    /// Sleeps until a wire, a program or another thread has something, or the next timer of
    /// its engines is due. It says so in every program's region first, then looks once more,
    /// so work posted in between is not left waiting (its program saw the flag and wrote the
    /// wake-up socket, or the doorbell is seen now).
    fn sleep(&mut self, bell: &Bell) {
        let now = self.shared.now();
        let mut next = None;
        let mut rung = !bell.may_sleep();
        self.fds.clear();
        self.fds.push(bell.fd());
        for (_, dev) in &self.devices {
            let dev = dev.lock();
            for port in dev.ports.values() {
                port.rings.set_sleeping(true);
                rung |= port.rings.rung();
            }
            dev.fds(&mut self.fds);
            if let Some(t) = dev.engine.poll_timeout() {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        }
        let longest = now + Duration::from_millis(MAX_SLEEP_MS as u64);
        let until = next.map_or(longest, |t| t.min(longest));
        bell.until.store(until.as_nanos(), Ordering::SeqCst);
        rung |= bell.mail.load(Ordering::SeqCst);
        if !rung {
            let wait = until.saturating_since(now).as_micros().div_ceil(1000) as i32;
            if let Err(err) = sys::poll_readable(&self.fds, wait) {
                tracing::error!(%err, "poll");
            }
        }
        bell.woken();
        for (_, dev) in &self.devices {
            for port in dev.lock().ports.values() {
                port.rings.set_sleeping(false);
            }
        }
    }
}
