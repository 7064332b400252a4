//! airlock-source: the fixed source broker.
//!
//! `read_file`, `list_files` and `grep_files` are served in-process through
//! [`airlock_hostfs`] handles beneath the configured ceilings: no worker, no
//! mount, no staging. [`Query::from_args`] validates the string arguments
//! against the hard limits of DESIGN.md §4; [`run`] answers with the result
//! JSON (sealed with `result_sha256` over its canonical form) and the
//! [`SourceBoundary`] a prepared call binds: operation, path, limits, every
//! byte range read with its hash, the result digest and [`BROKER_SHA256`],
//! the digest of this crate's own source fixed at build time (`build.rs`
//! hashes the names and bytes of `crates/airlock-source/src/**` into
//! `AIRLOCK_SOURCE_BROKER_SHA256`).
//!
//! Links, special files, files with more than one link, names outside the
//! path grammar and `.git`/`.airlock` are never read; enumeration skips and
//! counts them. A result cut by any limit says `partial: true` and why.
//! How each limit counts (entries looked at, files yielded, levels, path
//! bytes, grep's bytes and matches, excerpts) is DESIGN.md §4; entries are
//! yielded depth-first in byte order of names.
//!
//! `grep_files` opens, reads (hashing as it reads, into one reused buffer a
//! thread) and searches files on every core (`ordered.rs`), at most 64
//! files ahead, never handing out a file the byte budget would leave unread
//! as listed; the results, and the walk's own notes between them, are
//! applied in walk order, so every bound, skip count, partial reason, match
//! and range is the one a search on one thread gives.
//!
//! ```no_run
//! use airlock_core::{RelPath, ResolverChoice, SourceOp};
//! use airlock_hostfs::{Dir, HostAuthority, Resolver};
//! use airlock_source::{run, Ceilings, Query};
//! struct One(std::path::PathBuf);
//! impl Ceilings for One {
//!     fn roots(&self) -> Vec<Option<RelPath>> { vec![None] }
//!     fn open(&self, _: Option<&RelPath>) -> Result<Dir, airlock_core::Refusal> {
//!         Ok(Dir::open_ambient(&HostAuthority::ambient(), &self.0)?)
//!     }
//! }
//! let args = [("pattern".to_string(), "fn main".to_string())].into_iter().collect();
//! let query = Query::from_args(SourceOp::GrepFiles, &args)?;
//! let answer = run(&query, &One("/srv/source".into()), &Resolver::new(ResolverChoice::Auto)?, None)?;
//! println!("{}", answer.result["result_sha256"]);
//! # Ok::<(), airlock_core::Refusal>(())
//! ```
#![deny(missing_docs)]

mod bundled;
mod grep;
mod list;
mod ordered;
mod outcome;
mod query;
mod read;
mod tree;

pub use bundled::{bundled, BUNDLED};
pub use outcome::{reason, verify_result};
pub use query::Query;
pub use tree::Ceilings;

use airlock_core::source::BROKER_NAME;
use airlock_core::{Refusal, SourceBoundary, SourceLimits, SourceOp};
use airlock_hostfs::Resolver;
use std::time::Instant;

/// `sha256:` digest of this crate's `src/` (names and bytes), computed by
/// `build.rs`: the broker implementation a prepared call binds.
pub const BROKER_SHA256: &str = env!("AIRLOCK_SOURCE_BROKER_SHA256");

/// A query's answer: the result (held until authorization) and its evidence.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The result JSON, with `partial`, `partial_reasons`, `skipped`,
    /// `replaced_invalid_utf8` and `result_sha256`.
    pub result: serde_json::Value,
    /// What the descriptor binds.
    pub boundary: SourceBoundary,
}

/// Runs `query` beneath `ceilings`. `deadline`: a cooperative stop for
/// enumeration and search (the result is then partial, `deadline`).
pub fn run(
    query: &Query,
    ceilings: &dyn Ceilings,
    resolver: &Resolver,
    deadline: Option<Instant>,
) -> Result<Answer, Refusal> {
    run_on(query, ceilings, resolver, deadline, ordered::default_threads())
}

/// [`run`] with a search on `threads` threads (1: all on the caller's).
fn run_on(
    query: &Query,
    ceilings: &dyn Ceilings,
    resolver: &Resolver,
    deadline: Option<Instant>,
    threads: usize,
) -> Result<Answer, Refusal> {
    let tree = tree::Tree::new(ceilings, resolver);
    let mut tally = outcome::Tally::default();
    let body = match query.op {
        SourceOp::ReadFile => read::read(&tree, query, &mut tally)?,
        SourceOp::ListFiles => list::list(&tree, query, &mut tally, deadline)?,
        SourceOp::GrepFiles => grep::grep(&tree, query, &mut tally, deadline, threads)?,
        op => {
            return Err(Refusal::new(
                airlock_core::ReasonCode::ManifestUnsupported,
                format!("{op} needs the Git engine, which this build does not include"),
            ))
        }
    };
    let (result, digest) = tally.seal(body);
    let partial = tally.partial();
    let read_bytes = if query.op == SourceOp::ReadFile { query.limit } else { 0 };
    let boundary = SourceBoundary {
        broker: BROKER_NAME.to_owned(),
        broker_sha256: BROKER_SHA256.to_owned(),
        operation: query.op,
        path: query.path_str().to_owned(),
        limits: SourceLimits::with_read_bytes(read_bytes),
        ranges: tally.ranges,
        result_sha256: digest,
        partial,
    };
    Ok(Answer { result, boundary })
}

#[cfg(test)]
mod tests;
