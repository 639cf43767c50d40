//! Mount namespaces: a private one for this process, and the mounts made in it.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

use super::check;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::ErrorKind::InvalidInput.into())
}

/// What [`private_mounts`] could keep from sending mounts back.
#[derive(Debug, PartialEq, Eq)]
pub enum Private {
    /// Every mount.
    All,
    /// In a chroot, whose root is no mount's root and so cannot be named: the mounts whose
    /// mount points it can see (`/proc/self/mountinfo`), other than its root.
    Under(Vec<PathBuf>),
}

impl Private {
    /// Whether a mount made at `path` stays in this namespace.
    pub fn keeps(&self, path: &Path) -> bool {
        match self {
            Private::All => true,
            Private::Under(points) => points.iter().any(|m| path.starts_with(m)),
        }
    }
}

/// Moves this process into a mount namespace of its own whose mounts receive the host's
/// later mounts but send none back. Without `CAP_SYS_ADMIN` it first enters a user namespace
/// of its own too, mapping only its own user and group to themselves (the kernel allows that
/// where unprivileged user namespaces are enabled, and not in a chroot), so that it may mount
/// there.
pub fn private_mounts() -> io::Result<Private> {
    // SAFETY: no pointers.
    let uid = unsafe { libc::geteuid() };
    // SAFETY: no pointers.
    let gid = unsafe { libc::getegid() };
    if uid == 0 {
        // SAFETY: no pointers.
        check(unsafe { libc::unshare(libc::CLONE_NEWNS) })?;
    } else {
        // SAFETY: no pointers.
        check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) })?;
        // A process without CAP_SETGID in the parent namespace must give up setgroups(2)
        // before it may write gid_map (user_namespaces(7)).
        std::fs::write("/proc/self/setgroups", "deny")?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    match slave(Path::new("/"), libc::MS_REC) {
        // "/" is not the root of a mount (EINVAL, mount(2)): a chroot into a directory.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let points: Vec<PathBuf> = mount_points()?
                .into_iter()
                .filter(|m| m != Path::new("/"))
                .collect();
            for m in &points {
                slave(m, 0)?;
            }
            Ok(Private::Under(points))
        }
        r => r.map(|()| Private::All),
    }
}

/// Makes the mount at `path` (with `MS_REC`, and those below it) receive propagation only.
fn slave(path: &Path, flags: libc::c_ulong) -> io::Result<()> {
    let path = c_path(path)?;
    // SAFETY: a NUL-terminated string that outlives the call; null type and data are allowed
    // for a propagation change.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            flags | libc::MS_SLAVE,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// The mount points this process sees, from `/proc/self/mountinfo` (proc(5): the fifth
/// field, with spaces and the like octal-escaped).
fn mount_points() -> io::Result<Vec<PathBuf>> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .collect())
}

/// Undoes mountinfo's `\ooo` escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = b.get(i + 1..i + 4).and_then(|o| {
            let o = std::str::from_utf8(o).ok()?;
            u8::from_str_radix(o, 8).ok()
        });
        match (b[i], code) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn mount(
    src: Option<&Path>,
    dst: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let src = src.map(c_path).transpose()?;
    let dst = c_path(dst)?;
    let fstype = fstype
        .map(CString::new)
        .transpose()
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let data = data
        .map(CString::new)
        .transpose()
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: NUL-terminated strings (or null where mount(2) allows it) that outlive the call.
    check(unsafe {
        libc::mount(
            ptr(&src),
            dst.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    })?;
    Ok(())
}

/// Mounts an empty tmpfs at `dst` (mode 0755).
pub fn mount_tmpfs(dst: &Path, name: &str) -> io::Result<()> {
    mount(
        Some(Path::new(name)),
        dst,
        Some("tmpfs"),
        libc::MS_NOSUID,
        Some("mode=0755"),
    )
}

/// Binds `src` (with the mounts below it) at `dst`, which must exist and be of its kind.
pub fn bind(src: &Path, dst: &Path) -> io::Result<()> {
    mount(Some(src), dst, None, libc::MS_BIND | libc::MS_REC, None)
}

/// Makes the mount at `dst` read-only.
pub fn remount_read_only(dst: &Path) -> io::Result<()> {
    mount(
        None,
        dst,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID,
        None,
    )
}

/// Moves the mount at `src` (with the mounts below it) to `dst`.
pub fn move_mount(src: &Path, dst: &Path) -> io::Result<()> {
    mount(Some(src), dst, None, libc::MS_MOVE, None)
}

/// Detaches the mount at `dst` (and the mounts below it).
pub fn unmount(dst: &Path) -> io::Result<()> {
    let dst = c_path(dst)?;
    // SAFETY: a NUL-terminated string that outlives the call.
    check(unsafe { libc::umount2(dst.as_ptr(), libc::MNT_DETACH) })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/mnt/a\\040b"), "/mnt/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/odd\\x"), "/odd\\x");
    }

    #[test]
    fn a_chroots_private_mounts_keep_only_paths_under_them() {
        let p = Private::Under(vec![PathBuf::from("/sys"), PathBuf::from("/dev")]);
        assert!(p.keeps(Path::new("/sys/class")));
        assert!(!p.keeps(Path::new("/system")));
        assert!(!p.keeps(Path::new("/tmp")));
        assert!(Private::All.keeps(Path::new("/tmp")));
    }
}
