//! The per-component `O_NOFOLLOW` walk, for hosts without openat2.
//!
//! Each intermediate component is opened `O_PATH | O_DIRECTORY |
//! O_NOFOLLOW` relative to the previous handle, checked to be a directory on
//! the same mount as the root, and becomes the next base. No component is
//! ever followed; there is no `..` to handle because the grammar refused it.

use super::classify;
use crate::fault::{fstat, mount_id, Fault, FaultKind};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{FileType, Mode, OFlags};

pub(super) fn open(root: BorrowedFd<'_>, comps: &[&str], flags: OFlags) -> Result<OwnedFd, Fault> {
    let path = comps.join("/");
    let root_mount = mount_id(root).map_err(|f| f.context(format_args!("resolving {path:?}")))?;
    let mut current: Option<OwnedFd> = None;
    for (i, name) in comps.iter().enumerate() {
        let base = current.as_ref().map_or(root, |fd| fd.as_fd());
        let last = i + 1 == comps.len();
        let step_flags =
            if last { flags } else { OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC };
        let fd = rustix::fs::openat(base, *name, step_flags, Mode::empty())
            .map_err(|errno| classify(errno, base, name, "openat", comps))?;
        let ty = FileType::from_raw_mode(fstat(&fd, name)?.st_mode);
        if !last && ty != FileType::Directory {
            let kind = if ty == FileType::Symlink { FaultKind::Symlink } else { FaultKind::NotDirectory };
            return Err(Fault::new(kind, format!("{name:?} in {path:?} is not a directory")));
        }
        if mount_id(fd.as_fd())? != root_mount {
            return Err(Fault::new(FaultKind::MountCrossing, format!("{name:?} in {path:?} is on another mount")));
        }
        current = Some(fd);
    }
    current.ok_or_else(|| Fault::new(FaultKind::NotComponent, "an empty path names no entry"))
}
