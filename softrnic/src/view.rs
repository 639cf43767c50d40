//! The kernel's view of softrnic's devices, for the programs `softrnic exec` runs.
//!
//! Some programs look for RDMA devices where the kernel shows them, not only through
//! libibverbs: UCX uses a device only if `/dev/infiniband/uverbsN` is a character device it
//! may open, and reads GID types and interfaces from `/sys/class/infiniband`; rdma-core's tests
//! and scripts written for rxe read the interface there too. So the program runs in a private
//! mount namespace where those paths describe softrnic's devices, with the files and formats of
//! the kernel's `drivers/infiniband/core/sysfs.c` and `uverbs_main.c`. Where a directory is
//! missing (a host without an RDMA subsystem), its parent is replaced by a tmpfs that holds the
//! parent's other entries (directories and files bound, symbolic links copied) beside it.
//! Without root this needs an unprivileged user namespace, which most distributions allow.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use softrnic_client::proto::{DeviceInfo, FW_VER};
use softrnic_emu_core::{Gid, PortAttr};

/// What the view shows of one device.
pub struct Device {
    /// The daemon's description.
    pub info: DeviceInfo,
    /// Its port.
    pub port: PortAttr,
}

/// An entry of the view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A directory.
    Dir,
    /// A file and its contents.
    File(String),
    /// A symbolic link and its target.
    Link(String),
}

/// The kernel's `rate` for the port the provider reports: 1X at SDR, as rxe's.
const RATE: &str = "2.5 Gb/sec (1X SDR)";
/// The major and first minor of `/dev/infiniband/uverbsN` (`IB_UVERBS_MAJOR`, `_BASE_MINOR`).
const UVERBS_DEV: (u32, u32) = (231, 192);
/// The uverbs ABI the class reports (`IB_USER_VERBS_ABI_VERSION`), and rxe's driver ABI.
const UVERBS_ABI: u32 = 6;
const DRIVER_ABI: u32 = 2;

/// Bytes as the kernel prints GIDs (`%pI6`) and GUIDs: groups of four hex digits, by colons.
fn hex_groups(bytes: &[u8]) -> String {
    let groups: Vec<String> = bytes
        .chunks(2)
        .map(|g| format!("{:02x}{:02x}", g[0], g[1]))
        .collect();
    groups.join(":")
}

/// `/sys/class/infiniband/DEV/...`, by path relative to `/sys/class/infiniband`.
/// The device's GUID: the EUI-64 of its MAC, as the provider's `node_guid`.
pub fn node_guid(d: &Device) -> String {
    hex_groups(&Gid::link_local(d.info.mac).0[8..])
}

/// The port's state as the kernel names it (`IB_PORT_ACTIVE` is "ACTIVE").
pub fn state_name(d: &Device) -> &'static str {
    ["NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"]
        .get(d.port.state as usize)
        .unwrap_or(&"UNKNOWN")
}

/// Whether the port's link is up (physical state LinkUp, else Disabled).
pub fn link_up(d: &Device) -> bool {
    d.port.state as u32 == 4
}

/// The device's interface, if it is one of this namespace's.
pub fn netdev(d: &Device) -> Option<&str> {
    d.info.netdev.as_deref().filter(|_| d.info.netns.is_none())
}

fn ib_device(d: &Device) -> Vec<(String, Node)> {
    let name = &d.info.name;
    let guid = node_guid(d);
    let state = d.port.state as u32;
    let (phys, phys_name) = if link_up(d) {
        (5, "LinkUp")
    } else {
        (3, "Disabled")
    };
    let state_name = state_name(d);
    let port = format!("{name}/ports/1");
    let mut t = vec![
        (name.clone(), Node::Dir),
        (format!("{name}/node_type"), Node::File("1: CA\n".into())),
        (format!("{name}/node_guid"), Node::File(format!("{guid}\n"))),
        (
            format!("{name}/sys_image_guid"),
            Node::File(format!("{guid}\n")),
        ),
        (format!("{name}/node_desc"), Node::File(format!("{name}\n"))),
        (format!("{name}/fw_ver"), Node::File(format!("{FW_VER}\n"))),
        (format!("{name}/ports"), Node::Dir),
        (port.clone(), Node::Dir),
        (
            format!("{port}/state"),
            Node::File(format!("{state}: {state_name}\n")),
        ),
        (
            format!("{port}/phys_state"),
            Node::File(format!("{phys}: {phys_name}\n")),
        ),
        (format!("{port}/lid"), Node::File("0x0\n".into())),
        (format!("{port}/sm_lid"), Node::File("0x0\n".into())),
        (format!("{port}/lid_mask_count"), Node::File("0\n".into())),
        (format!("{port}/sm_sl"), Node::File("0\n".into())),
        // IB_PORT_CM_SUP, as the provider's port_cap_flags.
        (
            format!("{port}/cap_mask"),
            Node::File("0x00010000\n".into()),
        ),
        (format!("{port}/rate"), Node::File(format!("{RATE}\n"))),
        (
            format!("{port}/link_layer"),
            Node::File("Ethernet\n".into()),
        ),
        (format!("{port}/gids"), Node::Dir),
        (format!("{port}/pkeys"), Node::Dir),
        (format!("{port}/gid_attrs"), Node::Dir),
        (format!("{port}/gid_attrs/types"), Node::Dir),
        (format!("{port}/gid_attrs/ndevs"), Node::Dir),
    ];
    for i in 0..d.port.pkey_tbl_len {
        let pkey = if i == 0 { "0xffff" } else { "0x0000" };
        t.push((format!("{port}/pkeys/{i}"), Node::File(format!("{pkey}\n"))));
    }
    // Every entry has a `gids` file (zeros when empty); only entries in use have a type and,
    // on an interface this namespace has, an `ndevs` file (the kernel answers EINVAL for the
    // others).
    let netdev = netdev(d);
    for i in 0..d.port.gid_tbl_len as usize {
        let gid = d.info.gids.get(i);
        let text = hex_groups(&gid.unwrap_or(&Gid([0; 16])).0);
        t.push((format!("{port}/gids/{i}"), Node::File(format!("{text}\n"))));
        if gid.is_some() {
            t.push((
                format!("{port}/gid_attrs/types/{i}"),
                Node::File("RoCE v2\n".into()),
            ));
            if let Some(n) = netdev {
                t.push((
                    format!("{port}/gid_attrs/ndevs/{i}"),
                    Node::File(format!("{n}\n")),
                ));
            }
        }
    }
    // rdma-core's tests find a device's interface in `device/net/`.
    if let Some(n) = netdev {
        t.push((format!("{name}/device"), Node::Dir));
        t.push((format!("{name}/device/net"), Node::Dir));
        t.push((
            format!("{name}/device/net/{n}"),
            Node::Link(format!("/sys/class/net/{n}")),
        ));
    }
    t
}

/// `/sys/class/infiniband`'s entries (relative to it), for `devices` in the order
/// `ibv_get_device_list` gives them.
pub fn infiniband(devices: &[Device]) -> Vec<(String, Node)> {
    devices.iter().flat_map(ib_device).collect()
}

/// `/sys/class/infiniband_verbs`'s entries (relative to it).
pub fn infiniband_verbs(devices: &[Device]) -> Vec<(String, Node)> {
    let mut t = vec![(
        "abi_version".to_string(),
        Node::File(format!("{UVERBS_ABI}\n")),
    )];
    for (i, d) in devices.iter().enumerate() {
        let u = format!("uverbs{i}");
        let (major, minor) = (UVERBS_DEV.0, UVERBS_DEV.1 + i as u32);
        t.extend([
            (u.clone(), Node::Dir),
            (
                format!("{u}/ibdev"),
                Node::File(format!("{}\n", d.info.name)),
            ),
            (
                format!("{u}/abi_version"),
                Node::File(format!("{DRIVER_ABI}\n")),
            ),
            (format!("{u}/dev"), Node::File(format!("{major}:{minor}\n"))),
        ]);
    }
    t
}

/// `/dev/infiniband`'s character devices: `uverbsN` for each device and `rdma_cm`.
pub fn dev_infiniband(devices: &[Device]) -> Vec<String> {
    let mut names: Vec<String> = (0..devices.len()).map(|i| format!("uverbs{i}")).collect();
    names.push("rdma_cm".into());
    names
}

/// Writes `entries` below `root`.
fn write(root: &Path, entries: &[(String, Node)]) -> io::Result<()> {
    for (path, node) in entries {
        let p = root.join(path);
        match node {
            Node::Dir => fs::create_dir(&p)?,
            Node::File(text) => fs::write(&p, text)?,
            Node::Link(target) => std::os::unix::fs::symlink(target, &p)?,
        }
    }
    Ok(())
}

/// Moves this process into a private mount namespace where `/sys/class/infiniband`,
/// `/sys/class/infiniband_verbs` and `/dev/infiniband` show `devices` and nothing else.
pub fn enter(devices: &[Device]) -> Result<(), String> {
    let private = softrnic_sys::private_mounts().map_err(|e| {
        format!(
            "no private mount namespace: {e} (run as root, or allow unprivileged user \
                 namespaces; in a chroot, as root)"
        )
    })?;
    // In a chroot a mount on a directory of its root would show in the host's tree too.
    for dir in ["/sys/class", "/dev"] {
        if !private.keeps(Path::new(dir)) {
            return Err(format!(
                "{dir} is on this chroot's root, whose mount cannot be made private: mount \
                 /sys and /dev in the chroot (mount --rbind), or bind its root onto itself"
            ));
        }
    }
    let sysfs = [
        ("infiniband", infiniband(devices)),
        ("infiniband_verbs", infiniband_verbs(devices)),
    ];
    cover(Path::new("/sys/class"), &sysfs, true)
        .map_err(|e| format!("/sys/class/infiniband: {e}"))?;
    let nodes = dev_infiniband(devices);
    let fill = |dir: &Path| -> io::Result<()> {
        for n in &nodes {
            // Any character device the program may open passes for one (UCX checks only
            // that); softrnic's libraries never open it.
            let p = dir.join(n);
            fs::write(&p, "")?;
            softrnic_sys::bind(Path::new("/dev/null"), &p)?;
        }
        Ok(())
    };
    cover_with(
        Path::new("/dev"),
        &["infiniband"],
        |_, dir| fill(dir),
        false,
    )
    .map_err(|e| format!("/dev/infiniband: {e}"))
}

/// [`cover_with`] for trees of entries.
fn cover(parent: &Path, trees: &[(&str, Vec<(String, Node)>)], read_only: bool) -> io::Result<()> {
    let names: Vec<&str> = trees.iter().map(|(n, _)| *n).collect();
    cover_with(
        parent,
        &names,
        |name, dir| {
            write(
                dir,
                &trees.iter().find(|(n, _)| *n == name).expect("named").1,
            )
        },
        read_only,
    )
}

/// Puts a new empty directory, filled by `fill(name, dir)`, at `parent/NAME` for each of
/// `names`, hiding what was there. Each is built in a tmpfs elsewhere and moved into place only
/// when complete, so a failure leaves the paths as they were.
fn cover_with(
    parent: &Path,
    names: &[&str],
    fill: impl Fn(&str, &Path) -> io::Result<()>,
    read_only: bool,
) -> io::Result<()> {
    if names.iter().all(|n| parent.join(n).is_dir()) {
        for n in names {
            let stage = Stage::new()?;
            fill(n, &stage.dir)?;
            stage.place(&parent.join(n), read_only)?;
        }
        return Ok(());
    }
    let stage = Stage::new()?;
    for entry in fs::read_dir(parent)? {
        let entry = entry?;
        let name = entry.file_name();
        if names.iter().any(|n| name == *n) {
            continue;
        }
        let (src, dst) = (entry.path(), stage.dir.join(&name));
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src)?, &dst)?;
        } else {
            if kind.is_dir() {
                fs::create_dir(&dst)?;
            } else {
                fs::write(&dst, "")?;
            }
            softrnic_sys::bind(&src, &dst)?;
        }
    }
    for n in names {
        let dir = stage.dir.join(n);
        fs::create_dir(&dir)?;
        fill(n, &dir)?;
    }
    stage.place(parent, read_only)
}

/// A tmpfs being filled, at an empty directory of its own until it is moved into place.
struct Stage {
    dir: PathBuf,
    mounted: bool,
}

impl Stage {
    fn new() -> io::Result<Stage> {
        let dir = std::env::temp_dir().join(format!("softrnic-view-{}", std::process::id()));
        fs::create_dir(&dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        let mut stage = Stage {
            dir,
            mounted: false,
        };
        softrnic_sys::mount_tmpfs(&stage.dir, "softrnic")?;
        stage.mounted = true;
        Ok(stage)
    }

    fn place(mut self, target: &Path, read_only: bool) -> io::Result<()> {
        softrnic_sys::move_mount(&self.dir, target)?;
        self.mounted = false;
        if read_only {
            softrnic_sys::remount_read_only(target)?;
        }
        Ok(())
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if self.mounted {
            let _ = softrnic_sys::unmount(&self.dir);
        }
        let _ = fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use softrnic_client::proto::BackendKind;
    use softrnic_emu_core::PortAttr;

    pub(crate) fn device(name: &str, netdev: Option<&str>, gids: Vec<Gid>) -> Device {
        Device {
            info: DeviceInfo {
                name: name.into(),
                netdev: netdev.map(Into::into),
                netns: None,
                backend: BackendKind::Local,
                backend_reason: String::new(),
                mac: [0x02, 0x53, 0x52, 0x4e, 0x00, 0x01],
                gids,
                objects: [0; 4],
                contexts: 0,
            },
            port: PortAttr::active(1500),
        }
    }

    fn file<'a>(t: &'a [(String, Node)], path: &str) -> Option<&'a str> {
        t.iter()
            .find(|(p, _)| p == path)
            .and_then(|(_, n)| match n {
                Node::File(s) => Some(s.as_str()),
                _ => None,
            })
    }

    #[test]
    fn a_device_reads_as_the_kernel_prints_rxe() {
        let v4 = Gid::from(core::net::Ipv4Addr::new(198, 18, 0, 1));
        let ll = Gid::link_local([0x02, 0x53, 0x52, 0x4e, 0x00, 0x01]);
        let t = infiniband(&[device("srnic0", Some("veth0"), vec![ll, v4])]);
        let f = |p| file(&t, p).unwrap_or_else(|| panic!("no {p}"));
        assert_eq!(f("srnic0/node_type"), "1: CA\n");
        assert_eq!(f("srnic0/node_guid"), "0053:52ff:fe4e:0001\n");
        assert_eq!(f("srnic0/ports/1/state"), "4: ACTIVE\n");
        assert_eq!(f("srnic0/ports/1/phys_state"), "5: LinkUp\n");
        assert_eq!(f("srnic0/ports/1/link_layer"), "Ethernet\n");
        assert_eq!(f("srnic0/ports/1/rate"), "2.5 Gb/sec (1X SDR)\n");
        assert_eq!(f("srnic0/ports/1/pkeys/0"), "0xffff\n");
        assert_eq!(
            f("srnic0/ports/1/gids/0"),
            "fe80:0000:0000:0000:0053:52ff:fe4e:0001\n"
        );
        assert_eq!(
            f("srnic0/ports/1/gids/1"),
            "0000:0000:0000:0000:0000:ffff:c612:0001\n"
        );
        assert_eq!(
            f("srnic0/ports/1/gids/1023"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n"
        );
        assert_eq!(
            file(&t, "srnic0/ports/1/gids/1024"),
            None,
            "gid_tbl_len is 1024"
        );
        assert_eq!(f("srnic0/ports/1/gid_attrs/types/1"), "RoCE v2\n");
        assert_eq!(f("srnic0/ports/1/gid_attrs/ndevs/1"), "veth0\n");
        assert_eq!(
            file(&t, "srnic0/ports/1/gid_attrs/types/2"),
            None,
            "unused entry"
        );
        assert!(t.contains(&(
            "srnic0/device/net/veth0".into(),
            Node::Link("/sys/class/net/veth0".into())
        )));
    }

    #[test]
    fn a_local_device_has_no_interface_and_each_device_its_uverbs() {
        let ll = Gid::link_local([0x02, 0x53, 0x52, 0x4e, 0x00, 0x01]);
        let devices = [
            device("srnic0", None, vec![ll]),
            device("srnic1", None, vec![ll]),
        ];
        let t = infiniband(&devices);
        assert_eq!(file(&t, "srnic0/ports/1/gid_attrs/ndevs/0"), None);
        assert!(!t.iter().any(|(p, _)| p.starts_with("srnic0/device")));
        let v = infiniband_verbs(&devices);
        assert_eq!(file(&v, "abi_version"), Some("6\n"));
        assert_eq!(file(&v, "uverbs1/ibdev"), Some("srnic1\n"));
        assert_eq!(file(&v, "uverbs1/dev"), Some("231:193\n"));
        assert_eq!(dev_infiniband(&devices), ["uverbs0", "uverbs1", "rdma_cm"]);
    }
}
