//! The devices: librdmacm opens every RDMA device once (`ucma_init`) and gives each id the
//! context of the device its address resolved to, with a PD of its own for programs that pass
//! none; `rdma_get_devices` lists those contexts.

use core::ffi::{CStr, c_int};
use std::sync::{Mutex, MutexGuard};

use softrnic_verbs_abi::abi::{ibv_context, ibv_device_attr, ibv_pd};

use crate::fail;
use crate::verbs::*;

/// One opened device.
pub(crate) struct CmaDev {
    pub name: String,
    pub verbs: *mut ibv_context,
    pd: *mut ibv_pd,
    /// The device's READ/atomic limits, for `rdma_conn_param`'s 0xff ("the most").
    pub max_responder_resources: u8,
    pub max_initiator_depth: u8,
}

struct Devices(Vec<CmaDev>);

// SAFETY: the contexts and PDs are libibverbs objects, usable from any thread; the list is
// only reached under its mutex.
unsafe impl Send for Devices {}

static DEVICES: Mutex<Option<Devices>> = Mutex::new(None);

/// The devices, opened on first use; ENODEV when there are none (as rdma-core's `ucma_init`).
fn devices() -> Result<MutexGuard<'static, Option<Devices>>, c_int> {
    let mut guard = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        let mut n = 0;
        // SAFETY: libibverbs' API; the list is freed below and the contexts kept.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(libc::ENODEV);
        }
        let mut devs = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: `list` holds `n` devices.
            unsafe {
                let dev = *list.add(i);
                let verbs = ibv_open_device(dev);
                if verbs.is_null() {
                    continue;
                }
                let mut attr: ibv_device_attr = std::mem::zeroed();
                ibv_query_device(verbs, &mut attr);
                let name = CStr::from_ptr(ibv_get_device_name(dev))
                    .to_string_lossy()
                    .into_owned();
                devs.push(CmaDev {
                    name,
                    verbs,
                    pd: std::ptr::null_mut(),
                    max_responder_resources: attr.max_qp_rd_atom.clamp(0, 255) as u8,
                    max_initiator_depth: attr.max_qp_init_rd_atom.clamp(0, 255) as u8,
                });
            }
        }
        // SAFETY: from ibv_get_device_list.
        unsafe { ibv_free_device_list(list) };
        if devs.is_empty() {
            return Err(libc::ENODEV);
        }
        *guard = Some(Devices(devs));
    }
    Ok(guard)
}

/// Opens the devices if they are not yet (`ucma_init`).
pub(crate) fn init() -> Result<(), c_int> {
    devices().map(drop)
}

/// What an id bound to device `name` gets: its context, its PD (allocated on first use) and
/// its limits.
pub(crate) fn by_name(name: &str) -> Result<(*mut ibv_context, *mut ibv_pd, u8, u8), c_int> {
    let mut guard = devices()?;
    let dev = guard
        .as_mut()
        .and_then(|d| d.0.iter_mut().find(|d| d.name == name))
        .ok_or(libc::ENODEV)?;
    if dev.pd.is_null() {
        // SAFETY: an open context.
        dev.pd = unsafe { ibv_alloc_pd(dev.verbs) };
        if dev.pd.is_null() {
            return Err(libc::ENOMEM);
        }
    }
    Ok((
        dev.verbs,
        dev.pd,
        dev.max_responder_resources,
        dev.max_initiator_depth,
    ))
}

exported! {
    /// `rdma_get_devices`: the opened devices' contexts, NULL-terminated.
    fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
        let guard = match devices() {
            Ok(g) => g,
            Err(e) => {
                if !num_devices.is_null() {
                    *num_devices = 0;
                }
                fail(e);
                return std::ptr::null_mut();
            }
        };
        let devs = &guard.as_ref().expect("opened").0;
        let size = std::mem::size_of::<*mut ibv_context>() * (devs.len() + 1);
        let list = libc::malloc(size).cast::<*mut ibv_context>();
        if list.is_null() {
            fail(libc::ENOMEM);
            return list;
        }
        for (i, d) in devs.iter().enumerate() {
            *list.add(i) = d.verbs;
        }
        *list.add(devs.len()) = std::ptr::null_mut();
        if !num_devices.is_null() {
            *num_devices = devs.len() as c_int;
        }
        list
    }

    /// `rdma_free_devices`: the list goes; the contexts stay open for the ids.
    fn rdma_free_devices(list: *mut *mut ibv_context) {
        libc::free(list.cast());
    }
}
