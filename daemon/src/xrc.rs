//! XRC domains across programs (IBA Annex A14, as the kernel's `ib_uverbs_open_xrcd` shares
//! them): programs that open a domain with the same file get the same domain, which lives
//! until the last of them closes it. Each context counts its own opens.

use softrnic_client::proto::Reply;

use crate::device::Device;
use crate::requests::{error, verbs};
use crate::{Daemon, device_at};

impl Daemon {
    /// The refusal of an open of `file`'s domain on shard `d` when another shard of the
    /// device has that domain. A domain's SRQs and target QPs are objects of one engine, and
    /// any target QP in it delivers to any of its SRQs (`ibv_xsrq_pingpong` sends to one
    /// program's SRQ through another's target QP), so the programs sharing it must share an
    /// engine: the contexts of one process do; others may not.
    pub(crate) fn xrcd_elsewhere(&self, d: usize, file: (u64, u64)) -> Option<Reply> {
        let other = self.shards(d).filter(|&s| s != d).find(|&s| {
            device_at(&self.devices, s).is_some_and(|dev| dev.xrcd_files.contains_key(&file))
        })?;
        let name = device_at(&self.devices, other)?.info.name.clone();
        Some(error(
            libc::EOPNOTSUPP,
            format!(
                "the file's XRC domain is in another shard of {name}, and the programs sharing \
                 a domain must share one: run the daemon with one shard per device \
                 (SOFTRNIC_SHARDS=1, the default)"
            ),
        ))
    }
}

/// `ibv_open_xrcd` for context `i`: the file's domain (EINVAL with `O_EXCL` if it has one,
/// EAGAIN without `O_CREAT` if it has none, as the kernel gives), or a new one.
pub(crate) fn open(
    dev: &mut Device,
    i: usize,
    file: Option<(u64, u64)>,
    create: bool,
    exclusive: bool,
) -> Reply {
    let existing = file.and_then(|f| dev.xrcd_files.get(&f).copied());
    let xrcd = match existing {
        Some(_) if exclusive => return error(libc::EINVAL, "the file has an XRC domain (O_EXCL)"),
        Some(x) => x,
        None if file.is_some() && !create => {
            return error(
                libc::EAGAIN,
                "the file has no XRC domain, and O_CREAT was not given",
            );
        }
        None => match dev.engine.alloc_xrcd() {
            Ok(x) => {
                if let Some(f) = file {
                    dev.xrcd_files.insert(f, x);
                }
                x
            }
            Err(e) => return verbs(e),
        },
    };
    if let Some(port) = dev.ports.get_mut(&i) {
        *port.owned.xrcds.entry(xrcd).or_default() += 1;
    }
    Reply::Handle(xrcd)
}

/// `ibv_close_xrcd` for context `i`: the domain goes with its last opener (EBUSY while SRQs or
/// target QPs remain in it).
pub(crate) fn close(dev: &mut Device, i: usize, xrcd: u32) -> Reply {
    let Some(&opens) = dev.ports.get(&i).and_then(|p| p.owned.xrcds.get(&xrcd)) else {
        return error(libc::EINVAL, "no such XRC domain in this context");
    };
    if opens == 1 && !held_by_others(dev, i, xrcd) {
        if let Err(e) = dev.engine.dealloc_xrcd(xrcd) {
            return verbs(e);
        }
        dev.xrcd_files.retain(|_, x| *x != xrcd);
    }
    if let Some(port) = dev.ports.get_mut(&i) {
        match opens {
            1 => port.owned.xrcds.remove(&xrcd),
            n => port.owned.xrcds.insert(xrcd, n - 1),
        };
    }
    Reply::Ok
}

/// After a context closed (its objects freed): the domains no one else holds go.
pub(crate) fn forget(dev: &mut Device, xrcds: impl IntoIterator<Item = u32>) {
    for xrcd in xrcds {
        if !held_by_others(dev, usize::MAX, xrcd) && dev.engine.dealloc_xrcd(xrcd).is_ok() {
            dev.xrcd_files.retain(|_, x| *x != xrcd);
        }
    }
}

fn held_by_others(dev: &Device, i: usize, xrcd: u32) -> bool {
    dev.ports
        .iter()
        .any(|(&j, p)| j != i && p.owned.xrcds.contains_key(&xrcd))
}
