//! The answers the driver prints (one JSON object on standard output).
//!
//! Status: porcelain v2 letters, with renames (`from`); untracked files are
//! listed file by file, ignored files not at all. Log: newest commit time
//! first, with parents, author and committer (seconds and offset) and git's
//! `%s` subject. Diffs: name-status letters, the rename source, git's binary
//! rule (a NUL in the first 8,000 bytes), added and removed line counts and
//! 3-line unified hunks (`@@ -a,b +c,d @@`, without git's function-name
//! context).
//!
//! Every list is sorted by path (status, diffs) or in walk order (log),
//! so equal repositories give byte-equal answers.

use serde::{Deserialize, Serialize};

/// Where HEAD points.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// The branch HEAD names (`main`), absent when detached.
    pub branch: Option<String>,
    /// The commit HEAD resolves to, absent on an unborn branch.
    pub commit: Option<String>,
    /// Whether HEAD names a commit directly.
    pub detached: bool,
}

/// One path's state, in `git status --porcelain=v2` letters: `index` is
/// HEAD→index (`.` unchanged, `M`, `A`, `D`, `R`, `C`, `T`, `U`), `worktree`
/// is index→work tree (`.`, `M`, `D`, `T`, `A` for intent-to-add, `U`);
/// untracked paths are `?` `?`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusEntry {
    /// The path now.
    pub path: String,
    /// HEAD→index letter.
    pub index: String,
    /// Index→work tree letter.
    pub worktree: String,
    /// For a rename or copy in the index: the path it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// `git_status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusAnswer {
    /// Where HEAD points.
    pub head: Head,
    /// Changed and untracked paths (untracked listed file by file; ignored
    /// files are not listed), sorted by path.
    pub entries: Vec<StatusEntry>,
}

/// An author or committer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// Name.
    pub name: String,
    /// E-mail address.
    pub email: String,
    /// Seconds since the Unix epoch.
    pub time: i64,
    /// Offset from UTC in seconds.
    pub offset: i32,
}

/// One commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    /// Its id (hex).
    pub id: String,
    /// Its parents' ids, in order.
    pub parents: Vec<String>,
    /// Author.
    pub author: Signature,
    /// Committer.
    pub committer: Signature,
    /// The subject: the first paragraph of the message, lines joined by spaces (git's `%s`).
    pub summary: String,
}

/// `git_log`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogAnswer {
    /// Where HEAD points.
    pub head: Head,
    /// Commits reachable from HEAD, newest commit time first.
    pub commits: Vec<Commit>,
    /// Whether more commits were reachable than `max_count`.
    pub truncated: bool,
}

/// One changed file of a diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiff {
    /// `M`, `A`, `D`, `R`, `C` or `T` (as `git diff --name-status`).
    pub status: String,
    /// The path now (for `D`, the path removed).
    pub path: String,
    /// For `R`/`C`: the path it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Whether either side is binary (a NUL byte in its first 8,000 bytes, as git decides).
    pub binary: bool,
    /// Lines added (0 for binary files).
    pub added: u64,
    /// Lines removed (0 for binary files).
    pub removed: u64,
    /// The unified hunks (`@@ -a,b +c,d @@` and 3 lines of context), empty for binary files.
    pub hunks: String,
}

/// `git_diff` and `git_staged_diff`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffAnswer {
    /// Changed files, sorted by path.
    pub files: Vec<FileDiff>,
}
