//! Mount namespaces: a private one for this process, and the mounts made in it.

use std::ffi::CString;
use std::io;
use std::path::Path;

use super::check;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::ErrorKind::InvalidInput.into())
}

/// Moves this process into a mount namespace of its own whose mounts receive the host's
/// later mounts but send none back. Without `CAP_SYS_ADMIN` it first enters a user namespace
/// of its own too, mapping only its own user and group to themselves (the kernel allows that
/// where unprivileged user namespaces are enabled), so that it may mount there.
pub fn private_mounts() -> io::Result<()> {
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
    let root = c_path(Path::new("/"))?;
    // SAFETY: NUL-terminated strings that outlive the call; null type and data are allowed
    // for a propagation change.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        )
    })?;
    Ok(())
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
