//! Stat-only files: tracked ones are marked up to date, the rest created.
//!
//! The snapshot records a tracked file by its stat data alone only when
//! git's racy-clean rule says a status would find it unchanged
//! (`index_stat.rs`). Creating 5,000 such files in the worker's tmpfs and
//! letting gix `lstat` each one again only to reach that same verdict cost
//! more than the rest of a query, so the driver checks each record against
//! its index entry itself (stage 0, a regular file, the same size,
//! executable bit and modification time, older than the index) and sets
//! the entry's in-memory `UPTODATE` flag, git's own "already checked" mark,
//! which gix's index-to-work-tree comparison skips. Such a file is never
//! created: no answer reads its content, and the untracked-file walk finds
//! it in the index. A record that does not match its entry, or has none (an
//! untracked file), is created sparse with its size and time, and gix
//! judges it as it would any file.

use super::unpack::create_sparse;
use crate::archive::StatOnly;
use crate::error::GitError;
use gix::index::entry::{Flags, Mode, Stage};
use std::path::Path;

/// Marks the tracked, unchanged files of `files` up to date in `index` and
/// creates every other one under `work_tree` (its directories exist: the
/// archive recorded them first). "Older than the index" is judged against
/// the index file's time as gix loaded it, the time its own racy check uses.
pub(crate) fn settle(files: Vec<StatOnly>, index: &mut gix::index::File, work_tree: &Path) -> Result<(), GitError> {
    let index_mtime = index.timestamp().seconds();
    // The walk lists each directory sorted by name, so a record's entry is
    // most often the one after the last record's: that one is compared
    // first, and the index searched only where it is not.
    let mut next = 0;
    for file in files {
        let path: &gix::bstr::BStr = file.path.as_str().into();
        let found = match index.entries().get(next) {
            Some(e) if e.stage() == Stage::Unconflicted && e.path(index) == path => Some(next),
            _ => index.entry_index_by_path_and_stage(path, Stage::Unconflicted),
        };
        if let Some(i) = found {
            next = i + 1;
        }
        let unchanged = found.is_some_and(|i| matches_entry(&index.entries()[i], &file, index_mtime));
        match found {
            Some(i) if unchanged => index.entries_mut()[i].flags.insert(Flags::UPTODATE),
            _ => create_sparse(&work_tree.join(&file.path), &file)?,
        }
    }
    Ok(())
}

/// Whether gix, finding `file` on disk, would trust `entry`'s stat data
/// (the snapshot's rule, checked again here).
fn matches_entry(entry: &gix::index::Entry, file: &StatOnly, index_mtime: i64) -> bool {
    let mode = if file.executable { Mode::FILE_EXECUTABLE } else { Mode::FILE };
    let (Ok(secs), Ok(size)) = (u32::try_from(file.mtime.0), u32::try_from(file.size)) else {
        return false;
    };
    entry.mode == mode
        && entry.stat.size == size
        && (entry.stat.mtime.secs, entry.stat.mtime.nsecs) == (secs, file.mtime.1)
        && i64::from(secs) < index_mtime
        && !entry.flags.intersects(Flags::ASSUME_VALID | Flags::SKIP_WORKTREE | Flags::INTENT_TO_ADD)
}
