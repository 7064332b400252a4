//! The per-component `O_NOFOLLOW` walk, for hosts without openat2.
//!
//! Each intermediate component is opened `O_PATH | O_DIRECTORY |
//! O_NOFOLLOW` relative to the previous handle, checked to be a directory on
//! the same mount as the root, and becomes the next base. No component is
//! ever followed; there is no `..` to handle because the grammar refused it.

use super::classify;
use crate::error::{Error, Result};
use airlock_core::{ReasonCode, RelPath};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxFlags};

pub(super) fn open(root: BorrowedFd<'_>, path: &RelPath, flags: OFlags) -> Result<OwnedFd> {
    let root_mount = mount_id(root, path)?;
    let mut components = path.components().peekable();
    let mut current: Option<OwnedFd> = None;
    while let Some(name) = components.next() {
        let base = current.as_ref().map_or(root, |fd| fd.as_fd());
        let last = components.peek().is_none();
        let step_flags =
            if last { flags } else { OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC };
        let fd = rustix::fs::openat(base, name, step_flags, Mode::empty())
            .map_err(|errno| classify(errno, base, name, "openat", path))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::syscall(ReasonCode::InputUnreadable, "fstat", e))?;
        let ty = FileType::from_raw_mode(st.st_mode);
        if !last && ty != FileType::Directory {
            let code = if ty == FileType::Symlink { ReasonCode::PathSymlink } else { ReasonCode::PathNotDirectory };
            return Err(Error::new(code, format!("{name:?} in {:?} is not a directory", path.as_str())));
        }
        if mount_id(fd.as_fd(), path)? != root_mount {
            return Err(Error::new(
                ReasonCode::PathMountCrossing,
                format!("{name:?} in {:?} is on another mount", path.as_str()),
            ));
        }
        current = Some(fd);
    }
    current.ok_or_else(|| Error::new(ReasonCode::PathEmpty, "empty path"))
}

fn mount_id(fd: BorrowedFd<'_>, path: &RelPath) -> Result<u64> {
    rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID).map(|s| s.stx_mnt_id).map_err(|e| {
        Error::syscall(
            ReasonCode::InputUnreadable,
            format_args!("statx(mnt_id) while resolving {:?}", path.as_str()),
            e,
        )
    })
}
