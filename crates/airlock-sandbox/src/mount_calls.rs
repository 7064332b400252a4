//! The mount calls the worker's root is built from, each failing with an
//! error that names the call: shared by the tree builder (`mounts`) and
//! the `/proc` masks (`proc_masks`), so neither depends on the other.
#![forbid(unsafe_code)]

use std::ffi::CString;

use rustix::mount::MountFlags;

use crate::error::{errno, SandboxError};

/// `mount(source, target, NULL, MS_BIND[|MS_REC], NULL)`.
pub(crate) fn bind(source: &str, target: &str, recursive: bool) -> Result<(), SandboxError> {
    let (r, flags) = if recursive {
        (rustix::mount::mount_bind_recursive(source, target), "MS_BIND|MS_REC")
    } else {
        (rustix::mount::mount_bind(source, target), "MS_BIND")
    };
    r.map_err(|e| SandboxError::BindMount {
        source_path: source.into(),
        target: target.into(),
        flags: flags.into(),
        errno: errno(e),
    })
}

/// `mount(NULL, target, NULL, MS_REMOUNT|MS_BIND|extra, NULL)`: per-mount flags only.
pub(crate) fn remount_bind(target: &str, extra: MountFlags, spelled: &str) -> Result<(), SandboxError> {
    rustix::mount::mount_remount(target, MountFlags::BIND | extra, "").map_err(|e| SandboxError::Remount {
        call: format!("mount(NULL, {target:?}, NULL, MS_REMOUNT|MS_BIND|{spelled}, NULL)"),
        errno: errno(e),
    })
}

/// Makes a host bind (and everything under it) read-only, nosuid, nodev.
pub(crate) fn readonly_recursive(target: &str) -> Result<(), SandboxError> {
    let c = CString::new(target).map_err(|_| SandboxError::InvalidSpec(format!("NUL in {target:?}")))?;
    match crate::sys::mount_setattr_readonly_recursive(&c) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            // Pre-5.12 kernel: remount the top mount, keeping the flags the
            // host may have locked (noexec, atime flags).
            let vfs = rustix::fs::statvfs(target)
                .map_err(|e| SandboxError::Remount { call: format!("statvfs({target:?})"), errno: errno(e) })?;
            let mut keep = MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV;
            let f = vfs.f_flag;
            for (st, ms) in [
                (rustix::fs::StatVfsMountFlags::NOEXEC, MountFlags::NOEXEC),
                (rustix::fs::StatVfsMountFlags::NOATIME, MountFlags::NOATIME),
                (rustix::fs::StatVfsMountFlags::NODIRATIME, MountFlags::NODIRATIME),
                (rustix::fs::StatVfsMountFlags::RELATIME, MountFlags::RELATIME),
            ] {
                if f.contains(st) {
                    keep |= ms;
                }
            }
            remount_bind(target, keep, "MS_RDONLY|MS_NOSUID|MS_NODEV|<locked flags>")
        }
        Err(e) => Err(SandboxError::Remount {
            call: format!("mount_setattr(AT_FDCWD, {target:?}, AT_RECURSIVE, {{RDONLY|NOSUID|NODEV}})"),
            errno: errno(e),
        }),
    }
}

/// Sets the size of the tmpfs mounted at `target` (a remount of its
/// superblock, keeping the mount flags `flags`); `spelled` names the flags
/// in errors.
pub(crate) fn resize_tmpfs(target: &str, flags: MountFlags, spelled: &str, options: &str) -> Result<(), SandboxError> {
    let opts = CString::new(options).map_err(|_| SandboxError::InvalidSpec("NUL in tmpfs options".into()))?;
    rustix::mount::mount_remount(target, flags, opts.as_c_str()).map_err(|e| SandboxError::MountTmpfs {
        target: target.into(),
        flags: format!("MS_REMOUNT|{spelled}"),
        options: options.into(),
        errno: errno(e),
    })
}

/// `mount("tmpfs", target, "tmpfs", flags, options)`; `spelled` names the flags in errors.
pub(crate) fn tmpfs(target: &str, flags: MountFlags, spelled: &str, options: &str) -> Result<(), SandboxError> {
    let opts = CString::new(options).map_err(|_| SandboxError::InvalidSpec("NUL in tmpfs options".into()))?;
    rustix::mount::mount("tmpfs", target, "tmpfs", flags, opts.as_c_str()).map_err(|e| SandboxError::MountTmpfs {
        target: target.into(),
        flags: spelled.into(),
        options: options.into(),
        errno: errno(e),
    })
}
