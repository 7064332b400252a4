//! A large input bound into the native worker as it stands on the host,
//! held unchanged by a read lease instead of copied into staging.
//!
//! A snapshot exists so that the worker reads exactly the bytes whose hash
//! the descriptor, and so policy and the journal, carry. For a file over
//! [`BIND_MIN_BYTES`](crate::placement::BIND_MIN_BYTES) the native tier
//! binds the file into the worker instead of copying it onto its tmpfs; a
//! private copy in staging only to bind that copy costs a whole write of
//! the file (a second for its sync pressure), and its staging room. A read
//! lease (`fcntl(F_SETLEASE, F_RDLCK)`) gives the same promise without
//! the copy:
//!
//! - the kernel grants it only while no one has the file open for writing
//!   (a writable mapping keeps its file open), so no writer is left over
//!   from before;
//! - while it is held, an `open` for writing or a `truncate` of the inode
//!   by anyone waits for its release (the bytes cannot change), for at
//!   most `/proc/sys/fs/lease-break-time` seconds, after which the kernel
//!   takes the lease away;
//! - [`HeldInput::unchanged`] is true only while it is held and no writer
//!   has asked: a call checks it after its worker ends, and anything else
//!   is `input.changed` (nothing published, no answer from those bytes).
//!
//! The input is hashed after the lease is taken, so the hash is of the
//! bytes the worker reads. The worker's mount of it is read-only, and
//! nothing here changes the file (not even its mode): a file the worker
//! could not read as it stands is not held. Held inputs are only for a
//! call run at once on the native tier (not a kept call or a session: a
//! lease held for hours would stall the host's writers).
#![forbid(unsafe_code)]

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;

use crate::placement::BIND_MIN_BYTES;

/// A host file open for reading with a read lease on it.
#[derive(Debug)]
pub struct HeldInput {
    file: File,
}

impl HeldInput {
    /// Holds `file` (an input open read-only) unchanged, or `None` when
    /// it is copied as before: it is at most 8 MiB (copied onto the
    /// worker's tmpfs anyway), the native worker could not read it as it
    /// stands, or the kernel refuses the lease (the file is open for
    /// writing, the caller does not own it, the file system has no
    /// leases).
    pub fn hold(file: &File) -> Option<HeldInput> {
        let md = file.metadata().ok()?;
        if !md.is_file() || md.len() <= BIND_MIN_BYTES || !worker_reads_as_is(&md) {
            return None;
        }
        let file = file.try_clone().ok()?;
        crate::sys::take_read_lease(file.as_fd()).ok()?;
        Some(HeldInput { file })
    }

    /// The held file (a duplicate shares the lease).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Whether the lease is still held with no writer waiting or let
    /// through: the bytes are those hashed when it was taken.
    pub fn unchanged(&self) -> bool {
        crate::sys::lease_kind(self.file.as_fd()).is_ok_and(|kind| kind == libc::F_RDLCK)
    }
}

impl Drop for HeldInput {
    fn drop(&mut self) {
        // A duplicate may outlive this one (the init's copy); the lease is
        // the open file description's, so a waiting writer goes on now.
        let _ = crate::sys::release_lease(self.file.as_fd());
    }
}

/// Whether this host grants read leases, and how long a writer waits on
/// one (`/proc/sys/fs/lease-break-time`, seconds); `Err` says why large
/// inputs are copied instead (for `airlock doctor`).
pub fn lease_support() -> Result<u64, String> {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/fs/{name}"))
            .map_err(|e| format!("/proc/sys/fs/{name}: {e}"))
            .and_then(|v| v.trim().parse::<u64>().map_err(|e| format!("/proc/sys/fs/{name}: {e}")))
    };
    if read("leases-enable")? == 0 {
        return Err("/proc/sys/fs/leases-enable is 0".into());
    }
    read("lease-break-time")
}

/// Whether the native worker reads the file without anything changed: as
/// "other" when the caller is root (the worker runs as 65534), else as
/// the caller (its owner, or "other").
fn worker_reads_as_is(md: &std::fs::Metadata) -> bool {
    let mode = md.mode();
    if mode & 0o004 != 0 {
        return true;
    }
    !crate::init::privileged_caller() && md.uid() == rustix::process::geteuid().as_raw() && mode & 0o400 != 0
}
