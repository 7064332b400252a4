//! The four Git queries and their arguments.

use crate::error::GitError;
use airlock_core::ReasonCode;
use serde::{Deserialize, Serialize};

/// Most commits `git_log` returns.
pub const MAX_LOG_COUNT: u32 = 1000;
/// Commits `git_log` returns when `max_count` is not given.
pub const DEFAULT_LOG_COUNT: u32 = 100;

/// Which query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Branch, HEAD and per-path index/work-tree state (like `git status --porcelain=v2`).
    GitStatus,
    /// Commits reachable from HEAD, newest first (like `git log`).
    GitLog,
    /// Index against work tree (like `git diff`).
    GitDiff,
    /// HEAD against index (like `git diff --cached`).
    GitStagedDiff,
}

impl Operation {
    /// Every operation.
    pub const ALL: [Operation; 4] =
        [Operation::GitStatus, Operation::GitLog, Operation::GitDiff, Operation::GitStagedDiff];

    /// Its name (`git_status`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::GitStatus => "git_status",
            Operation::GitLog => "git_log",
            Operation::GitDiff => "git_diff",
            Operation::GitStagedDiff => "git_staged_diff",
        }
    }

    /// Parses a name; anything else is `git.bad_argument`.
    pub fn parse(name: &str) -> Result<Operation, GitError> {
        Operation::ALL
            .into_iter()
            .find(|o| o.as_str() == name)
            .ok_or_else(|| GitError::new(ReasonCode::GitBadArgument, format!("unknown Git query {name:?}")))
    }

    /// What the snapshot holds for this query: log and staged diff omit
    /// the work tree; log also omits the index.
    pub fn scope(self) -> Scope {
        match self {
            Operation::GitStatus | Operation::GitDiff => Scope { work_tree: true, index: true },
            Operation::GitStagedDiff => Scope { work_tree: false, index: true },
            Operation::GitLog => Scope { work_tree: false, index: false },
        }
    }
}

/// What a snapshot copies besides the object store and refs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    /// The work tree (everything beside `.git`).
    pub work_tree: bool,
    /// `.git/index`.
    pub index: bool,
}

/// One query as the driver receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Which query.
    pub operation: Operation,
    /// `git_log` only: at most this many commits (1 … 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_count: Option<u32>,
}

impl Request {
    /// Checks the arguments' bounds.
    pub fn check(&self) -> Result<(), GitError> {
        match (self.operation, self.max_count) {
            (Operation::GitLog, Some(n)) if n == 0 || n > MAX_LOG_COUNT => Err(GitError::new(
                ReasonCode::GitBadArgument,
                format!("max_count must be 1 … {MAX_LOG_COUNT}, not {n}"),
            )),
            (Operation::GitLog, _) | (_, None) => Ok(()),
            (op, Some(_)) => {
                Err(GitError::new(ReasonCode::GitBadArgument, format!("{} takes no max_count", op.as_str())))
            }
        }
    }
}
