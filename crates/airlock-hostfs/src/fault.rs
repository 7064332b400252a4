//! What went wrong beneath the crate's edges, typed.
//!
//! The resolver, the walker and the checked file report a [`Fault`] whose
//! [`FaultKind`] says what was found; each edge maps the kind to its own
//! codes, exhaustively and in one place: [`Error`]'s reason codes for
//! airlock's inputs, source queries and Git snapshots (`From<Fault> for
//! Error` below), the broker's codes in [`crate::rooted`]. A new kind is a
//! compile error at both edges, never a silent default.

use crate::error::Error;
use airlock_core::ReasonCode;
use rustix::fd::{AsFd, BorrowedFd};
use rustix::fs::{AtFlags, FileType, Stat, StatxFlags};
use rustix::io::Errno;
use std::fmt;

/// What a resolution, a walk step or a file check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FaultKind {
    /// A component, or the entry, does not exist.
    Missing,
    /// A component, or the entry, is a symbolic link.
    Symlink,
    /// A component, or the entry, is on another mount.
    MountCrossing,
    /// A component on the way (or a directory asked for) is not a directory.
    NotDirectory,
    /// An entry changed (was renamed, replaced or removed) while it was
    /// resolved, listed or opened.
    Race,
    /// A file was asked for and this is a directory.
    Directory,
    /// A FIFO, socket or device.
    Special,
    /// A regular file with this many hard links (not one).
    Hardlink(u64),
    /// A regular file larger than the caller's bound.
    TooLarge,
    /// A name that is not a single path component.
    NotComponent,
    /// A system call failed for another reason (see the errno).
    Io,
}

/// A typed failure: its kind, a message naming the entry or the call (with
/// its arguments), and the errno when a system call failed.
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    pub(crate) message: String,
    pub(crate) errno: Option<Errno>,
}

impl Fault {
    /// A fault found by looking, not by a failed call.
    pub(crate) fn new(kind: FaultKind, message: impl Into<String>) -> Fault {
        Fault { kind, message: message.into(), errno: None }
    }

    /// A failed system call; `call` names it with its arguments (the
    /// errno is printed after it at the edge).
    pub(crate) fn syscall(kind: FaultKind, call: impl fmt::Display, errno: Errno) -> Fault {
        Fault { kind, message: call.to_string(), errno: Some(errno) }
    }

    /// The same fault with `context` before its message.
    pub(crate) fn context(mut self, context: impl fmt::Display) -> Fault {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl From<Fault> for Error {
    fn from(f: Fault) -> Error {
        let code = match f.kind {
            FaultKind::Missing => ReasonCode::InputMissing,
            FaultKind::Symlink => ReasonCode::PathSymlink,
            FaultKind::MountCrossing => ReasonCode::PathMountCrossing,
            FaultKind::NotDirectory => ReasonCode::PathNotDirectory,
            FaultKind::Race => ReasonCode::PathRace,
            FaultKind::Directory | FaultKind::Special => ReasonCode::InputNotRegular,
            FaultKind::Hardlink(_) => ReasonCode::InputHardlink,
            FaultKind::TooLarge => ReasonCode::InputTooLarge,
            FaultKind::NotComponent => ReasonCode::PathTraversal,
            FaultKind::Io => ReasonCode::InputUnreadable,
        };
        let message = match f.errno {
            Some(errno) => format!("{}: {errno}", f.message),
            None => f.message,
        };
        Error::from_parts(code, message, f.errno)
    }
}

/// `fstat(fd)`; `what` names the file in the message.
pub(crate) fn fstat(fd: impl AsFd, what: impl fmt::Display) -> Result<Stat, Fault> {
    rustix::fs::fstat(fd).map_err(|e| Fault::syscall(FaultKind::Io, format_args!("fstat({what})"), e))
}

/// The mount id of `fd` (`statx` with `STATX_MNT_ID`).
pub(crate) fn mount_id(fd: BorrowedFd<'_>) -> Result<u64, Fault> {
    rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID)
        .map(|s| s.stx_mnt_id)
        .map_err(|e| Fault::syscall(FaultKind::Io, "statx(fd, \"\", AT_EMPTY_PATH, STATX_MNT_ID)", e))
}

/// Whether `name` is one path component: not empty, not `.` or `..`, no
/// `/` and no NUL.
pub(crate) fn is_component(name: &[u8]) -> bool {
    !(name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0))
}

/// What the checked-file rule reads of an entry's status.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Status {
    pub(crate) mode: u32,
    pub(crate) nlink: u64,
    pub(crate) size: u64,
    pub(crate) dev_ino: (u64, u64),
    /// The mount id, when it was asked for.
    pub(crate) mount: Option<u64>,
}

impl From<&Stat> for Status {
    fn from(st: &Stat) -> Status {
        Status {
            mode: st.st_mode,
            nlink: st.st_nlink,
            size: st.st_size as u64,
            dev_ino: (st.st_dev, st.st_ino),
            mount: None,
        }
    }
}

/// `fstat(fd)`, or with `mount` one `statx` that also answers the mount id
/// (`STATX_MNT_ID`), instead of an `fstat` and a [`mount_id`].
pub(crate) fn status(fd: BorrowedFd<'_>, what: impl fmt::Display, mount: bool) -> Result<Status, Fault> {
    if !mount {
        return fstat(fd, what).map(|st| Status::from(&st));
    }
    let sx =
        rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::BASIC_STATS | StatxFlags::MNT_ID).map_err(|e| {
            Fault::syscall(
                FaultKind::Io,
                format_args!("statx({what}, \"\", AT_EMPTY_PATH, STATX_BASIC_STATS | STATX_MNT_ID)"),
                e,
            )
        })?;
    Ok(Status {
        mode: u32::from(sx.stx_mode),
        nlink: u64::from(sx.stx_nlink),
        size: sx.stx_size,
        dev_ino: (rustix::fs::makedev(sx.stx_dev_major, sx.stx_dev_minor), sx.stx_ino),
        mount: Some(sx.stx_mnt_id),
    })
}

/// The kind a file check finds in `mode` when it is not a regular file.
pub(crate) fn not_regular(mode: u32) -> Option<Fault> {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => None,
        FileType::Symlink => Some(Fault::new(FaultKind::Symlink, "it is a symbolic link")),
        FileType::Directory => Some(Fault::new(FaultKind::Directory, "it is a directory")),
        _ => Some(Fault::new(FaultKind::Special, "it is not a regular file (FIFO, socket or device)")),
    }
}
