//! Event channels: each is a connection to the daemon made an rdma_cm channel, whose
//! notification pipe (a byte per event) is the pollable `fd` programs see; and the events read
//! from them.

use core::ffi::{c_char, c_int};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use softrnic_client::client::Client;
use softrnic_client::proto::default_socket;

use crate::abi::*;
use crate::{device, errno_of, fail, id};

/// A channel: the C structure first, so a `*mut rdma_event_channel` is one of these.
#[repr(C)]
pub(crate) struct ChannelPriv {
    pub ch: rdma_event_channel,
    pub client: Mutex<Client>,
    /// Which channel this is, never reused (an address can be).
    serial: u64,
    _fd: OwnedFd,
}

/// The channels not yet destroyed, by address, with their serials (an address can be reused):
/// tells a reader whether the channel it was given, or the one it waits in, was destroyed
/// under it, and whether the end of its notification pipe means the daemon went away instead.
static OPEN: Mutex<BTreeMap<usize, u64>> = Mutex::new(BTreeMap::new());
static SERIAL: AtomicU64 = AtomicU64::new(0);

fn open_set() -> MutexGuard<'static, BTreeMap<usize, u64>> {
    OPEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new channel, as `rdma_create_event_channel` makes it.
pub(crate) fn open() -> Result<*mut rdma_event_channel, c_int> {
    device::init()?;
    let mut client = Client::connect(&default_socket()).map_err(|e| e.errno)?;
    let fd = client.cm_open().map_err(|e| e.errno)?;
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let ch = Box::into_raw(Box::new(ChannelPriv {
        ch: rdma_event_channel { fd: fd.as_raw_fd() },
        client: Mutex::new(client),
        serial,
        _fd: fd,
    }));
    open_set().insert(ch as usize, serial);
    Ok(ch.cast())
}

/// The daemon connection of channel `ch`.
///
/// # Safety
/// `ch` must be a channel this library made and has not destroyed.
pub(crate) unsafe fn client<'a>(ch: *mut rdma_event_channel) -> MutexGuard<'a, Client> {
    let ch = &*ch.cast::<ChannelPriv>();
    ch.client.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `ch` is a channel not yet closed: an id's calls write to its channel's fd, which
/// the kernel then refuses with EBADF.
pub(crate) fn is_open(ch: *mut rdma_event_channel) -> bool {
    open_set().contains_key(&(ch as usize))
}

/// Closes channel `ch`.
///
/// # Safety
/// `ch` must be a channel this library made, not used again.
pub(crate) unsafe fn close(ch: *mut rdma_event_channel) {
    // Forgotten before the pipe closes, so that a reader woken by the close knows why.
    open_set().remove(&(ch as usize));
    let ch = Box::from_raw(ch.cast::<ChannelPriv>());
    // A reader that found it open holds its daemon connection until its read is done.
    drop(ch.client.lock());
    drop(ch);
}

/// Waits for the next event of `ch` (or finds none, on a non-blocking fd: EAGAIN) and reads
/// it from the daemon. A notification whose event went before it was read (its id destroyed,
/// its multicast join left) is passed over.
///
/// Another thread may destroy the channel while this one waits in it, or on its way into or
/// out of the wait (its fd then reads EOF, once the daemon closes its end, or EBADF). The
/// kernel's read holds the file open, so such a reader sleeps until the process ends (rping's
/// event thread relies on it); this one does the same, and so does one that comes in after
/// (rping's, when it is slow to loop back), which the kernel's would not survive.
unsafe fn next(ch: *mut rdma_event_channel) -> Result<softrnic_client::proto::CmEvent, c_int> {
    let sleep_on = || -> ! {
        loop {
            std::thread::park();
        }
    };
    // Read while the channel is certainly open: it may be freed while this thread waits.
    let at = ch as usize;
    let (serial, fd) = {
        let open = open_set();
        match open.get(&at) {
            Some(&serial) => (serial, (*ch).fd),
            None => {
                drop(open);
                sleep_on()
            }
        }
    };
    let is_open = || open_set().get(&at) == Some(&serial);
    loop {
        match softrnic_sys::take_notification(fd) {
            Ok(true) => {}
            Ok(false) => return Err(libc::EAGAIN),
            Err(_) if !is_open() => sleep_on(),
            // The daemon is gone: as a removed rdma_cm device.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(libc::ENODEV),
            Err(e) => return Err(e.raw_os_error().unwrap_or(libc::EIO)),
        }
        // Its connection is taken while the set says it is open, so `close` waits for the read.
        let open = open_set();
        if open.get(&at) != Some(&serial) {
            drop(open);
            sleep_on();
        }
        let mut daemon = client(ch);
        drop(open);
        let read = daemon.cm_event();
        drop(daemon);
        match read {
            Err(e) if e.errno == libc::EAGAIN => continue,
            r => return r.map_err(|e| errno_of("rdma_get_cm_event", &e)),
        }
    }
}

/// The next event of `ch` as the program sees it (the library's own processing done: a
/// connection request gets its new id, a connection response readies the QP, and events the
/// library absorbs are skipped).
pub(crate) unsafe fn get_event(ch: *mut rdma_event_channel) -> Result<*mut rdma_cm_event, c_int> {
    loop {
        let ev = next(ch)?;
        if let Some(event) = id::event(ev)? {
            return Ok(event);
        }
    }
}

exported! {
    /// `rdma_create_event_channel`.
    fn rdma_create_event_channel() -> *mut rdma_event_channel {
        open().unwrap_or_else(|e| {
            fail(e);
            std::ptr::null_mut()
        })
    }

    /// `rdma_destroy_event_channel`.
    fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
        if !channel.is_null() {
            close(channel);
        }
    }

    /// `rdma_get_cm_event`: blocks until an event arrives unless the program made the
    /// channel's fd non-blocking (then EAGAIN).
    fn rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> c_int {
        if channel.is_null() || event.is_null() {
            return fail(libc::EINVAL);
        }
        match get_event(channel) {
            Ok(e) => {
                *event = e;
                0
            }
            Err(e) => fail(e),
        }
    }

    /// `rdma_ack_cm_event`.
    fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
        if event.is_null() {
            return fail(libc::EINVAL);
        }
        id::ack(event);
        0
    }

    /// `rdma_event_str`.
    fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
        let s: &'static [u8] = match event {
            RDMA_CM_EVENT_ADDR_RESOLVED => b"RDMA_CM_EVENT_ADDR_RESOLVED\0",
            RDMA_CM_EVENT_ADDR_ERROR => b"RDMA_CM_EVENT_ADDR_ERROR\0",
            RDMA_CM_EVENT_ROUTE_RESOLVED => b"RDMA_CM_EVENT_ROUTE_RESOLVED\0",
            RDMA_CM_EVENT_ROUTE_ERROR => b"RDMA_CM_EVENT_ROUTE_ERROR\0",
            RDMA_CM_EVENT_CONNECT_REQUEST => b"RDMA_CM_EVENT_CONNECT_REQUEST\0",
            RDMA_CM_EVENT_CONNECT_RESPONSE => b"RDMA_CM_EVENT_CONNECT_RESPONSE\0",
            RDMA_CM_EVENT_CONNECT_ERROR => b"RDMA_CM_EVENT_CONNECT_ERROR\0",
            RDMA_CM_EVENT_UNREACHABLE => b"RDMA_CM_EVENT_UNREACHABLE\0",
            RDMA_CM_EVENT_REJECTED => b"RDMA_CM_EVENT_REJECTED\0",
            RDMA_CM_EVENT_ESTABLISHED => b"RDMA_CM_EVENT_ESTABLISHED\0",
            RDMA_CM_EVENT_DISCONNECTED => b"RDMA_CM_EVENT_DISCONNECTED\0",
            RDMA_CM_EVENT_DEVICE_REMOVAL => b"RDMA_CM_EVENT_DEVICE_REMOVAL\0",
            RDMA_CM_EVENT_MULTICAST_JOIN => b"RDMA_CM_EVENT_MULTICAST_JOIN\0",
            RDMA_CM_EVENT_MULTICAST_ERROR => b"RDMA_CM_EVENT_MULTICAST_ERROR\0",
            RDMA_CM_EVENT_ADDR_CHANGE => b"RDMA_CM_EVENT_ADDR_CHANGE\0",
            RDMA_CM_EVENT_TIMEWAIT_EXIT => b"RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
            RDMA_CM_EVENT_ADDRINFO_RESOLVED => b"RDMA_CM_EVENT_ADDRINFO_RESOLVED\0",
            RDMA_CM_EVENT_ADDRINFO_ERROR => b"RDMA_CM_EVENT_ADDRINFO_ERROR\0",
            RDMA_CM_EVENT_USER => b"RDMA_CM_EVENT_USER\0",
            _ => b"UNKNOWN EVENT\0",
        };
        s.as_ptr().cast()
    }
}
