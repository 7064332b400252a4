//! An open directory handle and its identity.

use crate::authority::HostAuthority;
use crate::error::{Error, Result};
use airlock_core::{DirIdentity, ReasonCode};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{FileType, Mode, OFlags, CWD};
use std::path::Path;

/// An open directory (`O_RDONLY | O_DIRECTORY`). Every operation on it is
/// relative to the handle, so renaming or replacing the directory's path
/// afterwards does not change what it refers to.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    dev: u64,
    ino: u64,
}

impl Dir {
    /// Opens a configured ceiling (or any directory the operator named) by
    /// host path. The path is the operator's, so links in it are followed;
    /// nothing beneath the handle ever is.
    pub fn open_ambient(_authority: &HostAuthority, path: &Path) -> Result<Dir> {
        let fd = rustix::fs::openat(CWD, path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| Error::syscall(ReasonCode::ConfigCeiling, format_args!("open({})", path.display()), e))?;
        Dir::from_fd(fd)
    }

    /// Opens a ceiling by host path: like [`Dir::open_ambient`], but the
    /// last component must not be a symlink (`path.symlink`), so a ceiling
    /// directory swapped for a link by another host process is refused
    /// rather than followed.
    pub fn open_ceiling(_authority: &HostAuthority, path: &Path) -> Result<Dir> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(CWD, path, flags, Mode::empty()) {
            Ok(fd) => Dir::from_fd(fd),
            Err(e @ (rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR)) => {
                let is_link = std::fs::symlink_metadata(path).map(|m| m.file_type().is_symlink()).unwrap_or(false);
                let code = if is_link { ReasonCode::PathSymlink } else { ReasonCode::ConfigCeiling };
                Err(Error::syscall(code, format_args!("open({}, O_NOFOLLOW)", path.display()), e))
            }
            Err(e) => Err(Error::syscall(ReasonCode::ConfigCeiling, format_args!("open({})", path.display()), e)),
        }
    }

    /// Wraps an owned descriptor, checking it is a directory.
    pub fn from_fd(fd: OwnedFd) -> Result<Dir> {
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::syscall(ReasonCode::Internal, "fstat(dir)", e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Err(Error::new(ReasonCode::PathNotDirectory, "not a directory"));
        }
        Ok(Dir { fd, dev: st.st_dev, ino: st.st_ino })
    }

    /// Wraps a descriptor whose `fstat` the caller took and checked to be a
    /// directory.
    pub(crate) fn from_checked(fd: OwnedFd, st: &rustix::fs::Stat) -> Dir {
        Dir { fd, dev: st.st_dev, ino: st.st_ino }
    }

    /// A second handle to the same directory.
    pub fn try_clone(&self) -> Result<Dir> {
        let fd = rustix::io::fcntl_dupfd_cloexec(&self.fd, 3)
            .map_err(|e| Error::syscall(ReasonCode::Internal, "dup(dir)", e))?;
        Ok(Dir { fd, dev: self.dev, ino: self.ino })
    }

    /// `(st_dev, st_ino)` taken when the handle was opened.
    pub fn identity(&self) -> DirIdentity {
        DirIdentity::new(self.dev, self.ino)
    }

    /// Raw `(st_dev, st_ino)`.
    pub fn dev_ino(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// Flushes the directory's entries to stable storage.
    pub fn sync(&self) -> Result<()> {
        rustix::fs::fsync(&self.fd).map_err(|e| Error::syscall(ReasonCode::Internal, "fsync(dir)", e))
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
