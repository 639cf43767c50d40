//! The device list: `ibv_get_device_list` asks the daemon for its devices.

use std::ffi::{c_char, c_int};
use std::ptr;
use std::sync::Mutex;

use softrnic_client::client::Client;
use softrnic_client::proto::DeviceInfo;
use softrnic_client::proto::default_socket;

use crate::abi::*;

/// A device as programs see it. `ibv_device` comes first, so the pointer programs hold is a
/// pointer to this.
#[repr(C)]
pub struct Device {
    /// What the program reads.
    pub dev: ibv_device,
    /// Node GUID, in network order (from the MAC, as rxe derives it).
    pub guid: u64,
    /// Position in the daemon's list.
    pub index: c_int,
    /// The interface's index, if it is in this process's network namespace (else 0).
    pub ifindex: u32,
}

/// Every device ever listed. Programs may keep a device pointer after freeing the list (rdma-core
/// keeps devices alive the same way), so these are never freed; a device listed again is the
/// same pointer.
static DEVICES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The node GUID rxe makes from a MAC: its EUI-64 (the interface ID of its IPv6 link-local
/// address), in network order.
pub fn guid_from_mac(mac: [u8; 6]) -> u64 {
    let gid = softrnic_emu_core::Gid::link_local(mac).0;
    u64::from_ne_bytes(gid[8..].try_into().expect("8 bytes"))
}

fn copy_name(dst: &mut [c_char], s: &str) {
    let room = dst.len() - 1;
    for (d, b) in dst.iter_mut().zip(s.bytes().take(room)) {
        *d = b as c_char;
    }
}

impl Device {
    /// The device's name.
    pub fn name(&self) -> String {
        let bytes: Vec<u8> = self
            .dev
            .name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn new(info: &DeviceInfo, index: usize) -> Device {
        // SAFETY: ibv_device is plain data (arrays and nullable function pointers).
        let mut dev: ibv_device = unsafe { std::mem::zeroed() };
        dev.node_type = IBV_NODE_CA;
        dev.transport_type = IBV_TRANSPORT_IB;
        copy_name(&mut dev.name, &info.name);
        copy_name(&mut dev.dev_name, &format!("uverbs{index}"));
        copy_name(
            &mut dev.dev_path,
            &format!("/sys/class/infiniband_verbs/uverbs{index}"),
        );
        copy_name(
            &mut dev.ibdev_path,
            &format!("/sys/class/infiniband/{}", info.name),
        );
        Device {
            dev,
            guid: guid_from_mac(info.mac),
            index: index as c_int,
            ifindex: ifindex(info),
        }
    }
}

/// The index of a device's interface, if it is in our network namespace.
fn ifindex(info: &DeviceInfo) -> u32 {
    match (&info.netdev, &info.netns) {
        (Some(name), None) => std::ffi::CString::new(name.as_str())
            // SAFETY: a NUL-terminated string that outlives the call.
            .map_or(0, |n| unsafe { libc::if_nametoindex(n.as_ptr()) }),
        _ => 0,
    }
}

/// The daemon's devices, or why there are none.
fn list() -> Result<Vec<DeviceInfo>, String> {
    let socket = default_socket();
    let mut client = Client::connect(&socket).map_err(|e| e.message)?;
    client.devices().map_err(|e| e.message)
}

/// The device of this name, made once.
fn device(info: &DeviceInfo, index: usize) -> *mut Device {
    let mut all = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    for &d in all.iter() {
        // SAFETY: entries are leaked Devices, never freed.
        let existing = unsafe { &mut *(d as *mut Device) };
        if existing.name() == info.name {
            // The same name may now be another device: keep its details current.
            existing.guid = guid_from_mac(info.mac);
            existing.index = index as c_int;
            existing.ifindex = ifindex(info);
            return existing;
        }
    }
    let d = Box::into_raw(Box::new(Device::new(info, index)));
    all.push(d as usize);
    d
}

exported! {
    /// `ibv_get_device_list`: a NULL-terminated array of the daemon's devices; empty (not NULL)
    /// when there is no daemon, with a message on stderr saying how to start one.
    fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
        let infos = list().unwrap_or_else(|why| {
            eprintln!("softrnic: no devices: {why}");
            Vec::new()
        });
        let mut out: Vec<*mut ibv_device> = infos
            .iter()
            .enumerate()
            .map(|(i, info)| device(info, i).cast())
            .collect();
        if !num_devices.is_null() {
            *num_devices = out.len() as c_int;
        }
        out.push(ptr::null_mut());
        Box::into_raw(out.into_boxed_slice()).cast()
    }

    /// `ibv_free_device_list`.
    fn ibv_free_device_list(list: *mut *mut ibv_device) {
        if list.is_null() {
            return;
        }
        let mut n = 0;
        while !(*list.add(n)).is_null() {
            n += 1;
        }
        drop(Box::from_raw(ptr::slice_from_raw_parts_mut(list, n + 1)));
    }

    /// `ibv_get_device_name`.
    fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
        if device.is_null() {
            crate::set_errno(libc::EINVAL);
            return ptr::null();
        }
        (*device).name.as_ptr()
    }

    /// `ibv_get_device_guid`: the node GUID, in network order.
    fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
        if device.is_null() {
            return 0;
        }
        (*device.cast::<Device>()).guid
    }

    /// `ibv_get_device_index`.
    fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
        if device.is_null() {
            return -1;
        }
        (*device.cast::<Device>()).index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_is_rxe_eui64() {
        let g = guid_from_mac([0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
        assert_eq!(
            g.to_ne_bytes(),
            [0x00, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55]
        );
    }
}
