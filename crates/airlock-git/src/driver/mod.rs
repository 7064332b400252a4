//! The driver: runs inside the worker, sees only the snapshot.
//!
//! `airlock-git-driver` (this crate's binary, beside `airlock`; without
//! it, `airlock` itself) is bound into the worker at
//! `airlock_sandbox::PROGRAM_PATH` and executed with [`DRIVER_MARKER`], the
//! build fingerprint of the `airlock` that sent the request (a driver of
//! another build refuses it: `helper.mismatch`), the request (JSON) and the
//! archive's path (`/workspace/snapshot`, a
//! staged input and the worker's only file; its image holds only `/lib*`
//! and `/usr/lib*`: no shell, no `git`). The driver unpacks the archive
//! into `/tmp/repo` with every path checked again
//! (`unpack.rs`), replaces the repository's configuration with a minimal
//! one of its own (`open.rs`), settles the stat-only files against the
//! index (`stat_only.rs`), opens it with gix isolated from every
//! system, global and environment setting, answers, and prints one JSON
//! object. Exit 0 with the answer; otherwise exit 2 with
//! `{"error":{"code","message"}}`.

mod diff;
mod log;
mod open;
mod stat_only;
mod status;
mod unpack;

use crate::error::GitError;
use crate::limits::Limits;
use crate::query::{Operation, Request};
use airlock_core::ReasonCode;
use std::path::Path;

/// The hidden first argument that makes `airlock` run as the driver.
pub const DRIVER_MARKER: &str = "--airlock-git-driver-7d1c";
/// Where the driver unpacks the repository (inside the worker's private `/tmp`).
pub const UNPACK_DIR: &str = "/tmp/repo";
/// Exit status of a driver that answered with an error object.
pub const EXIT_ERROR: i32 = 2;

/// If `args[1]` is [`DRIVER_MARKER`], runs the driver and exits; otherwise
/// returns. Call it first in `main`.
pub fn maybe_run_driver() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(DRIVER_MARKER) {
        return;
    }
    let result = match (args.get(2), args.get(3), args.get(4), args.len()) {
        (Some(build), Some(request), Some(archive), 5) => {
            same_build(build).and_then(|()| run(request, Path::new(archive), Path::new(UNPACK_DIR)))
        }
        _ => Err(GitError::new(ReasonCode::Usage, "usage: DRIVER_MARKER BUILD REQUEST_JSON ARCHIVE")),
    };
    match result {
        Ok(json) => {
            println!("{json}");
            std::process::exit(0)
        }
        Err(e) => {
            let body = serde_json::json!({ "error": { "code": e.code().as_str(), "message": e.message() } });
            println!("{body}");
            std::process::exit(EXIT_ERROR)
        }
    }
}

/// The driver's arguments for `request` (JSON) on the archive at
/// `archive`: [`DRIVER_MARKER`], this build's fingerprint, then those two.
pub fn driver_args(request: String, archive: String) -> [String; 4] {
    [DRIVER_MARKER.to_owned(), airlock_fsproto::BUILD_FINGERPRINT.to_owned(), request, archive]
}

/// Refuses a request from an `airlock` of another build: the archive, the
/// request and the answer are one build's formats.
fn same_build(build: &str) -> Result<(), GitError> {
    if build == airlock_fsproto::BUILD_FINGERPRINT {
        return Ok(());
    }
    Err(GitError::new(
        ReasonCode::HelperMismatch,
        format!(
            "this Git driver is build {:?} and the airlock that started it is build {build:?}: install the \
             airlock-git-driver built with this airlock beside it, or remove it (airlock is then its own driver)",
            airlock_fsproto::BUILD_FINGERPRINT
        ),
    ))
}

/// Unpacks `archive` into `into` (which must not exist) and answers
/// `request` (JSON) from it. Public so the tests can run the very same
/// code outside a worker.
pub fn run(request: &str, archive: &Path, into: &Path) -> Result<String, GitError> {
    let request: Request = serde_json::from_str(request)
        .map_err(|e| GitError::new(ReasonCode::GitBadArgument, format!("bad request: {e}")))?;
    request.check()?;
    let stat_only = unpack::unpack(archive, into, Limits::default())?;
    let repo = open::open(into)?;
    let shared = repo.index_or_empty().map_err(GitError::git("reading the index"))?;
    let mut index: gix::index::File = (**shared).clone();
    stat_only::settle(stat_only, &mut index, into)?;
    let json = match request.operation {
        Operation::GitStatus => serde_json::to_string(&status::status(&repo, index)?),
        Operation::GitLog => serde_json::to_string(&log::log(&repo, request.max_count)?),
        Operation::GitDiff => serde_json::to_string(&diff::worktree_diff(&repo, index)?),
        Operation::GitStagedDiff => serde_json::to_string(&diff::staged_diff(&repo)?),
    };
    json.map_err(|e| GitError::new(ReasonCode::Internal, format!("encoding the answer: {e}")))
}
