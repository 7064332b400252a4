//! airlock-git: Git queries over a bounded private snapshot.
//!
//! Two halves, on two sides of the sandbox:
//!
//! - [`snapshot::take`] (host side, in the broker): walks a repository
//!   beneath a held directory handle with [`airlock_hostfs`] primitives,
//!   never following a link, and writes ONE private archive
//!   ([`archive`]) within [`Limits`] (≤ 128 MiB, ≤ 64 MiB a file,
//!   ≤ 10,000 files), returning [`SnapshotStats`] with the archive's SHA-256.
//!   `git_log` and `git_staged_diff` leave the work tree out; `git_log`
//!   also the index. `git_status` and `git_diff` copy a work-tree file's
//!   content only when git would read it (the `index_stat` module's rule, from the
//!   index's stat data); the others are stat-only records. Control directories (by name, and by identity:
//!   [`ControlIds`]) are never entered; hard-linked files are left out
//!   and counted.
//! - [`driver`] (worker side): the `airlock` binary, bound read-only into
//!   a native worker that sees only the archive, unpacks it with every
//!   path checked again, replaces the repository's configuration with a
//!   minimal one, opens it with gix isolated from system, global and
//!   environment configuration, and prints one JSON answer ([`answer`]).
//!
//! gix lives here, not in the in-process source broker (`airlock-source`):
//! gix is a large parser of attacker-controlled data, so it is never linked
//! into an in-process code path that touches a repository, and a parser bug
//! in it meets a hostile repository only inside the sandbox. It is built
//! with `default-features = false, features = ["sha1", "status"]`: SHA-1
//! repositories only. The snapshot's bounds (also ≤ 10,000 directories and
//! 64 levels, `git.snapshot_too_large`) are DESIGN.md §4's.
//!
//! ```no_run
//! use airlock_git::{snapshot, ControlIds, Limits, Operation};
//! use airlock_hostfs::{Dir, HostAuthority};
//! let repo = Dir::open_ambient(&HostAuthority::ambient(), "/srv/repo".as_ref())?;
//! let state = Dir::open_ambient(&HostAuthority::ambient(), "/srv/repo/.airlock".as_ref())?;
//! let mut control = ControlIds::new();
//! control.insert(state.dev_ino());
//! let mut archive = Vec::new();
//! let stats = snapshot::take(&repo, Operation::GitStatus.scope(), Limits::default(), &control, &mut archive)?;
//! println!("{} files, sha256:{}", stats.files, stats.sha256_hex);
//! # Ok::<(), airlock_git::GitError>(())
//! ```
#![deny(missing_docs)]

pub mod answer;
pub mod archive;
pub mod driver;
mod error;
mod index_stat;
mod limits;
mod lookahead;
mod query;
pub mod snapshot;
#[cfg(test)]
mod test_git;

/// Entry points for the fuzz targets (`fuzz/`), built only with the
/// `fuzzing` feature.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    /// Reads `bytes` as the snapshot reads `.git/index` and asks, of every
    /// path it read, whether its content is needed; panics if a bound the
    /// parser promises does not hold.
    pub fn index(bytes: &[u8]) {
        crate::index_stat::check_bounds(bytes);
    }
}

pub use error::GitError;
pub use limits::{Limits, MAX_FILES, MAX_FILE_BYTES, MAX_SNAPSHOT_BYTES};
pub use query::{Operation, Request, Scope, DEFAULT_LOG_COUNT, MAX_LOG_COUNT};
pub use snapshot::{ControlIds, Skip, SnapshotStats};
