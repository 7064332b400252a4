//! Bounded source queries: the fixed operations, their hard limits
//! (DESIGN.md §4) and the evidence a prepared source call binds.
//!
//! A source tool declares `[source] operation = "…"` instead of a command.
//! The operation is served in-process by the broker (`airlock-source`)
//! through handles beneath the configured ceilings; nothing runs in a
//! worker. This module is the pure part: names, limits and the shape of
//! `command_boundary.filesystem.source` in the descriptor.
//!
//! ```
//! use airlock_core::source::{SourceOp, limits};
//! assert_eq!(SourceOp::parse("grep_files"), Some(SourceOp::GrepFiles));
//! assert!(SourceOp::GitLog.is_git());
//! assert_eq!(limits::MAX_READ_BYTES, 65_536);
//! ```

use serde::{Deserialize, Serialize};

/// Name of the broker bound into every source descriptor.
pub const BROKER_NAME: &str = "fixed_source_broker";

/// Hard limits of the source operations (DESIGN.md §4). They are not
/// configurable: a query asks for less, never for more.
pub mod limits {
    /// Bytes `read_file` returns when the call does not say.
    pub const DEFAULT_READ_BYTES: u64 = 32 * 1024;
    /// Most bytes one `read_file` returns.
    pub const MAX_READ_BYTES: u64 = 64 * 1024;
    /// Largest `read_file` offset.
    pub const MAX_OFFSET: u64 = 10_000_000;
    /// Bytes of one file `grep_files` searches.
    pub const MAX_GREP_FILE_BYTES: u64 = 1024 * 1024;
    /// Bytes `grep_files` searches in all.
    pub const MAX_GREP_TOTAL_BYTES: u64 = 8 * 1024 * 1024;
    /// Matches `grep_files` returns.
    pub const MAX_MATCHES: usize = 200;
    /// Input bytes of one match excerpt.
    pub const MAX_EXCERPT_BYTES: usize = 512;
    /// Shortest literal needle, in bytes.
    pub const MIN_NEEDLE_BYTES: usize = 1;
    /// Longest literal needle, in bytes.
    pub const MAX_NEEDLE_BYTES: usize = 1024;
    /// Directory entries an enumeration looks at.
    pub const MAX_ENTRIES: usize = 10_000;
    /// Regular files an enumeration yields.
    pub const MAX_FILES: usize = 2_000;
    /// Directory levels below the query root an enumeration descends.
    pub const MAX_DEPTH: usize = 32;
    /// Bytes of relative paths an enumeration yields, all together.
    pub const MAX_PATH_BYTES: usize = 65_536;
}

/// One fixed source operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceOp {
    /// A bounded byte range of one regular file.
    ReadFile,
    /// Names and metadata below a directory, recursively.
    ListFiles,
    /// A literal needle in the regular files below a path.
    GrepFiles,
    /// `git status` of a snapshot (served by the Git engine).
    GitStatus,
    /// `git log` of a snapshot (served by the Git engine).
    GitLog,
    /// `git diff` of a snapshot (served by the Git engine).
    GitDiff,
    /// `git diff --staged` of a snapshot (served by the Git engine).
    GitStagedDiff,
}

impl SourceOp {
    /// Every operation, in this order.
    pub const ALL: &'static [SourceOp] = &[
        SourceOp::ReadFile,
        SourceOp::ListFiles,
        SourceOp::GrepFiles,
        SourceOp::GitStatus,
        SourceOp::GitLog,
        SourceOp::GitDiff,
        SourceOp::GitStagedDiff,
    ];

    /// The name as written in `[source] operation`.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceOp::ReadFile => "read_file",
            SourceOp::ListFiles => "list_files",
            SourceOp::GrepFiles => "grep_files",
            SourceOp::GitStatus => "git_status",
            SourceOp::GitLog => "git_log",
            SourceOp::GitDiff => "git_diff",
            SourceOp::GitStagedDiff => "git_staged_diff",
        }
    }

    /// Looks an operation up by name.
    pub fn parse(name: &str) -> Option<SourceOp> {
        SourceOp::ALL.iter().copied().find(|op| op.as_str() == name)
    }

    /// Whether the Git engine (not the file broker) serves it.
    pub fn is_git(self) -> bool {
        matches!(self, SourceOp::GitStatus | SourceOp::GitLog | SourceOp::GitDiff | SourceOp::GitStagedDiff)
    }

    /// The arguments the operation takes, and whether each is required.
    /// A source manifest may declare only these (and must declare the
    /// required ones). The Git engine checks the values of the Git
    /// operations' arguments.
    pub fn parameters(self) -> &'static [(&'static str, bool)] {
        match self {
            SourceOp::ReadFile => &[("path", true), ("offset", false), ("limit", false)],
            SourceOp::ListFiles => &[("path", false)],
            SourceOp::GrepFiles => &[("pattern", true), ("path", false)],
            SourceOp::GitLog => &[("path", false), ("max_count", false)],
            SourceOp::GitStatus | SourceOp::GitDiff | SourceOp::GitStagedDiff => &[("path", false)],
        }
    }
}

impl std::fmt::Display for SourceOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One byte range the broker read, as bound into the descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRange {
    /// Path relative to the working directory.
    pub path: String,
    /// First byte read.
    pub offset: u64,
    /// Bytes read.
    pub bytes: u64,
    /// `sha256:` digest of exactly those bytes.
    pub sha256: String,
}

/// The limits a source call ran under (all bytes or counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceLimits {
    /// `read_file` bytes asked for (0 for other operations).
    pub read_bytes: u64,
    /// Largest offset accepted.
    pub max_offset: u64,
    /// Bytes of one file searched.
    pub max_file_bytes: u64,
    /// Bytes searched in all.
    pub max_total_bytes: u64,
    /// Matches returned.
    pub max_matches: u64,
    /// Input bytes of one excerpt.
    pub max_excerpt_bytes: u64,
    /// Entries an enumeration looks at.
    pub max_entries: u64,
    /// Regular files an enumeration yields.
    pub max_files: u64,
    /// Levels an enumeration descends.
    pub max_depth: u64,
    /// Path bytes an enumeration yields.
    pub max_path_bytes: u64,
}

impl SourceLimits {
    /// The hard limits, with `read_bytes` asked for.
    pub fn with_read_bytes(read_bytes: u64) -> SourceLimits {
        SourceLimits {
            read_bytes,
            max_offset: limits::MAX_OFFSET,
            max_file_bytes: limits::MAX_GREP_FILE_BYTES,
            max_total_bytes: limits::MAX_GREP_TOTAL_BYTES,
            max_matches: limits::MAX_MATCHES as u64,
            max_excerpt_bytes: limits::MAX_EXCERPT_BYTES as u64,
            max_entries: limits::MAX_ENTRIES as u64,
            max_files: limits::MAX_FILES as u64,
            max_depth: limits::MAX_DEPTH as u64,
            max_path_bytes: limits::MAX_PATH_BYTES as u64,
        }
    }
}

/// `command_boundary.filesystem.source`: what a prepared source call
/// binds. Cedar and exact approval see it beside `reads` (which, for a
/// source call, holds one entry per byte range read: path, bytes, hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceBoundary {
    /// Always [`BROKER_NAME`].
    pub broker: String,
    /// `sha256:` digest of the broker's own source, fixed at build time.
    pub broker_sha256: String,
    /// The operation.
    pub operation: SourceOp,
    /// The query path relative to the working directory (`""` is the
    /// working directory itself).
    pub path: String,
    /// The limits in force.
    pub limits: SourceLimits,
    /// Every byte range read, in the order read. Listing reads none.
    pub ranges: Vec<SourceRange>,
    /// `sha256:` digest of the result's canonical JSON (without its own
    /// `result_sha256` field).
    pub result_sha256: String,
    /// Whether a limit or a skipped entry cut the result.
    pub partial: bool,
}
