//! How one staged file reaches the worker's tree: the staged inode itself,
//! bound (read-only for an input), or a copy on the root tmpfs.
//!
//! A bind saves a pass over the bytes and keeps them off the worker's
//! memory-backed root: a 4 GiB input copied onto tmpfs is 4 GiB of RAM
//! (and of the worker's cgroup). What is bound is never a file the call
//! named on the host: it is the caller's private staged copy (an input's
//! snapshot, the output's staging file) in a directory only the caller can
//! reach. The worker can learn that file's identity (`fstat`) and where it
//! lives (its mount's root in `/proc/self/mountinfo`), and reach nothing
//! beside it.
//!
//! The way depends on who the caller is:
//! - [`Placement::Path`]: an unprivileged caller's PID 1 runs as the
//!   caller's own uid, so it binds the file by the path the kernel reports
//!   for the descriptor, in its copy of the caller's mount namespace (the
//!   kernel binds nothing across mount namespaces), and checks that the
//!   bound inode is the descriptor's.
//! - [`Placement::Detached`]: a root caller's PID 1 runs as 65534 outside
//!   and cannot traverse root's private directories; the caller, still
//!   root in the initial namespaces, clones the file as a detached mount
//!   (`open_tree(OPEN_TREE_CLONE)`), makes an input readable by that id and
//!   gives it the output (its owner, as a worker owns the output it finds on
//!   its tmpfs: a tool may `chmod` it; the caller takes it back after the
//!   run, `parent.rs`), and PID 1 moves the mount into place.
//! - [`Placement::Copy`]: a file of at most [`BIND_MIN_BYTES`] (an output
//!   whose bound is), or one with no name to bind (an unnamed `O_TMPFILE`,
//!   a memfd; the kernel mounts neither).
//!
//! The price of a bind is that disclosure: the worker can read the host
//! path of its staged file (`/proc/self/mountinfo` shows a mount's root).
//! A call within the seed's default file size pays nothing for a copy that
//! small, so it keeps the stronger promise that no host path shows in the
//! worker; only a file over that size, which an operator's raised
//! `[limits]` allow, is bound.
#![forbid(unsafe_code)]

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use rustix::mount::{MoveMountFlags, OpenTreeFlags};
use serde::{Deserialize, Serialize};

use crate::error::{errno, SandboxError};

/// Files (and outputs whose bound is) of at most this many bytes are
/// copied: the seed's default `max_file_bytes` (8 MiB).
pub const BIND_MIN_BYTES: u64 = 8 << 20;

/// How PID 1 puts one staged file into the worker's tree.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub(crate) enum Placement {
    /// Copied onto the root tmpfs.
    #[default]
    Copy,
    /// Bound from this absolute host path (as seen in PID 1's copy of the
    /// caller's mount namespace).
    Path {
        /// What `readlink(/proc/self/fd/N)` said for the descriptor.
        path: String,
    },
    /// Moved in from the detached mount the caller cloned, inherited as
    /// this descriptor.
    Detached {
        /// The inherited `open_tree` descriptor.
        mount_fd: i32,
    },
}

impl Placement {
    /// Whether the file's bytes go onto the root tmpfs.
    pub(crate) fn copies(&self) -> bool {
        matches!(self, Placement::Copy)
    }

    /// The inherited mount descriptor, for [`Placement::Detached`].
    pub(crate) fn mount_fd(&self) -> Option<i32> {
        match self {
            Placement::Detached { mount_fd } => Some(*mount_fd),
            _ => None,
        }
    }

    /// The inherited mount descriptor's number, to put a received
    /// descriptor in its place ([`crate::call_channel`]).
    pub(crate) fn mount_fd_mut(&mut self) -> Option<&mut i32> {
        match self {
            Placement::Detached { mount_fd } => Some(mount_fd),
            _ => None,
        }
    }

    /// Checks a placement read from the spec: a path must be absolute and
    /// free of NUL bytes.
    pub(crate) fn check(&self) -> Result<(), SandboxError> {
        match self {
            Placement::Path { path } if !path.starts_with('/') || path.contains('\0') => {
                Err(SandboxError::InvalidSpec(format!("bind source {path:?} is not an absolute path")))
            }
            _ => Ok(()),
        }
    }
}

/// What [`choose`] decided, in the caller.
#[derive(Debug)]
pub(crate) enum Chosen {
    /// [`Placement::Copy`].
    Copy,
    /// [`Placement::Path`] with this path.
    Path(String),
    /// [`Placement::Detached`]: this detached mount, for the init to inherit.
    Detached(OwnedFd),
}

/// Whether a file is placed for reading only or also for writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// An input: the worker reads it.
    Read,
    /// A held input ([`crate::HeldInput`]): the host's own file, which
    /// the worker reads as it stands; nothing about it is changed.
    ReadHeld,
    /// The output: the worker writes it.
    Write,
}

/// In the caller: how `file` will be placed. `bytes` is an input's size or
/// the output's bound; `worker_id` is the host id the worker runs as when
/// the caller is root with the capabilities to map other ids (`None`: the
/// caller's own).
pub(crate) fn choose(file: &File, bytes: u64, worker_id: Option<u32>, access: Access) -> Result<Chosen, SandboxError> {
    let md =
        file.metadata().map_err(|e| SandboxError::Descriptor { call: "fstat(staged file)".into(), errno: errno(e) })?;
    if bytes <= BIND_MIN_BYTES || !md.is_file() || md.nlink() == 0 {
        return Ok(Chosen::Copy);
    }
    if let Some(id) = worker_id {
        let flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC | OpenTreeFlags::AT_EMPTY_PATH;
        let Ok(mount) = rustix::mount::open_tree(file, "", flags) else {
            return Ok(Chosen::Copy);
        };
        // The worker's id is not the owner. An input it reads as "other"
        // (the file lives in the caller's private directory, so the bit
        // opens it to nobody else); the output becomes its own until the
        // run is over.
        match access {
            Access::ReadHeld => {}
            Access::Read => rustix::fs::fchmod(file, rustix::fs::Mode::from_raw_mode((md.mode() & 0o7777) | 0o444))
                .map_err(|e| SandboxError::Descriptor { call: "fchmod(staged input, a+r)".into(), errno: errno(e) })?,
            Access::Write => {
                let worker = Some(rustix::process::Uid::from_raw(id));
                rustix::fs::fchown(file, worker, Some(rustix::process::Gid::from_raw(id))).map_err(|e| {
                    SandboxError::Descriptor { call: format!("fchown(staged output, {id}, {id})"), errno: errno(e) }
                })?;
            }
        }
        return Ok(Chosen::Detached(mount));
    }
    let link = format!("/proc/self/fd/{}", file.as_raw_fd());
    let Ok(path) = std::fs::read_link(&link) else {
        return Ok(Chosen::Copy);
    };
    let Some(path) = path.to_str().filter(|p| p.starts_with('/')) else {
        return Ok(Chosen::Copy);
    };
    // The name must still be this inode here; PID 1 checks again after binding.
    match std::fs::symlink_metadata(path) {
        Ok(at) if at.is_file() && (at.dev(), at.ino()) == (md.dev(), md.ino()) => Ok(Chosen::Path(path.to_string())),
        _ => Ok(Chosen::Copy),
    }
}

/// In PID 1, before `pivot_root`: mounts the staged file `file` at
/// `target` (an empty file made as its mount point) as `how` says, and
/// checks the file now at `target` is `file`'s inode. Not for
/// [`Placement::Copy`].
pub(crate) fn bind_into(
    target: &str,
    how: &Placement,
    file: &File,
    detached: Option<OwnedFd>,
) -> Result<(), SandboxError> {
    match (how, detached) {
        (Placement::Path { path }, None) => crate::mount_calls::bind(path, target, false)?,
        (Placement::Detached { .. }, Some(mount)) => {
            rustix::mount::move_mount(&mount, "", rustix::fs::CWD, target, MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH)
                .map_err(|e| SandboxError::BindMount {
                    source_path: "(detached mount of a staged file)".into(),
                    target: target.into(),
                    flags: "move_mount(MOVE_MOUNT_F_EMPTY_PATH)".into(),
                    errno: errno(e),
                })?;
        }
        _ => return Err(SandboxError::InvalidSpec(format!("no mount to place at {target:?}"))),
    }
    let want =
        file.metadata().map_err(|e| SandboxError::Descriptor { call: "fstat(staged file)".into(), errno: errno(e) })?;
    let got = std::fs::symlink_metadata(target)
        .map_err(|e| SandboxError::BuildRoot { call: format!("lstat({target:?})"), errno: errno(e) })?;
    if !got.is_file() || (got.dev(), got.ino()) != (want.dev(), want.ino()) {
        return Err(SandboxError::InvalidSpec(format!("the file bound at {target:?} is not the staged file")));
    }
    Ok(())
}
