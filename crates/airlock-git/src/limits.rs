//! The snapshot's bounds (issue 6: ≤ 128 MiB, ≤ 64 MiB a file, ≤ 10,000 files).

use crate::error::GitError;
use airlock_core::ReasonCode;

/// Most bytes of file content in one snapshot.
pub const MAX_SNAPSHOT_BYTES: u64 = 128 << 20;
/// Most bytes of one file.
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// Most files (regular files and links) in one snapshot.
pub const MAX_FILES: u64 = 10_000;

/// Bounds on one snapshot; [`Limits::default`] is the maximum, and a
/// caller may only lower them. The archive, which knows its framing, gives
/// the largest archive they allow ([`Limits::max_archive_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of file content in all.
    pub max_bytes: u64,
    /// Most bytes of one file.
    pub max_file_bytes: u64,
    /// Most files (regular files and links).
    pub max_files: u64,
}

impl Default for Limits {
    /// 128 MiB, 64 MiB a file, 10,000 files.
    fn default() -> Self {
        Limits { max_bytes: MAX_SNAPSHOT_BYTES, max_file_bytes: MAX_FILE_BYTES, max_files: MAX_FILES }
    }
}

impl Limits {
    /// Refuses (`git.snapshot_too_large`) once `files` files, `bytes` bytes
    /// in all or one file of `file_bytes` pass a bound; `path` names the
    /// file that passed it.
    pub fn check(&self, files: u64, bytes: u64, file_bytes: u64, path: &str) -> Result<(), GitError> {
        let over = |what: String| Err(GitError::new(ReasonCode::GitSnapshotTooLarge, what));
        if file_bytes > self.max_file_bytes {
            return over(format!("{path:?} is {file_bytes} bytes, more than {} a file", self.max_file_bytes));
        }
        if files > self.max_files {
            return over(format!("the repository has more than {} files (at {path:?})", self.max_files));
        }
        if bytes > self.max_bytes {
            return over(format!("the repository holds more than {} bytes (at {path:?})", self.max_bytes));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_at_its_edge_and_one_past() {
        let l = Limits::default();
        l.check(MAX_FILES, MAX_SNAPSHOT_BYTES, MAX_FILE_BYTES, "x").unwrap();
        assert!(l.check(MAX_FILES + 1, 0, 0, "x").is_err());
        assert!(l.check(1, MAX_SNAPSHOT_BYTES + 1, 0, "x").is_err());
        assert!(l.check(1, 0, MAX_FILE_BYTES + 1, "x").is_err());
    }
}
