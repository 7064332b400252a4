//! `git_status`: HEAD, then HEAD→index and index→work tree per path.

use crate::answer::{Head, StatusAnswer, StatusEntry};
use crate::error::GitError;
use gix::bstr::BString;
use gix::status::index_worktree::Item as WorktreeItem;
use gix::status::Item;
use gix_status_types::{Change, EntryStatus};
use std::collections::BTreeMap;

mod gix_status_types {
    pub use gix::status::plumbing::index_as_worktree::{Change, EntryStatus};
}

/// Where HEAD points.
pub(crate) fn head(repo: &gix::Repository) -> Result<Head, GitError> {
    let head = repo.head().map_err(GitError::git("reading HEAD"))?;
    Ok(Head {
        branch: head.referent_name().map(|n| n.shorten().to_string()),
        commit: head.id().map(|id| id.to_string()),
        detached: head.is_detached(),
    })
}

fn letter_of_tree_change(change: &gix::diff::index::Change) -> (&'static str, String, Option<String>) {
    use gix::diff::index::ChangeRef;
    match change {
        ChangeRef::Addition { location, .. } => ("A", location.to_string(), None),
        ChangeRef::Deletion { location, .. } => ("D", location.to_string(), None),
        ChangeRef::Modification { location, previous_entry_mode, entry_mode, .. } => {
            let kind = if previous_entry_mode.to_tree_entry_mode().map(|m| m.kind())
                == entry_mode.to_tree_entry_mode().map(|m| m.kind())
            {
                "M"
            } else {
                "T"
            };
            (kind, location.to_string(), None)
        }
        ChangeRef::Rewrite { source_location, location, copy, .. } => {
            (if *copy { "C" } else { "R" }, location.to_string(), Some(source_location.to_string()))
        }
    }
}

/// The status answer, comparing against `index` (the repository's, with
/// the stat-only files' entries marked up to date).
pub(crate) fn status(repo: &gix::Repository, index: gix::index::File) -> Result<StatusAnswer, GitError> {
    let head = head(repo)?;
    let iter = repo
        .status(gix::progress::Discard)
        .map_err(GitError::git("starting status"))?
        .index(gix::worktree::IndexPersistedOrInMemory::InMemory(index))
        .untracked_files(gix::status::UntrackedFiles::Files)
        .index_worktree_submodules(gix::status::Submodule::Given {
            ignore: gix::submodule::config::Ignore::All,
            check_dirty: false,
        })
        .index_worktree_rewrites(None)
        .tree_index_track_renames(gix::status::tree_index::TrackRenames::Given(gix::diff::Rewrites::default()))
        .into_iter(Vec::<BString>::new())
        .map_err(GitError::git("computing status"))?;
    let mut entries: BTreeMap<String, StatusEntry> = BTreeMap::new();
    let mut put = |path: String, index: Option<&str>, worktree: Option<&str>, from: Option<String>| {
        let e = entries.entry(path.clone()).or_insert_with(|| StatusEntry {
            path,
            index: ".".into(),
            worktree: ".".into(),
            from: None,
        });
        if let Some(i) = index {
            e.index = i.into();
        }
        if let Some(w) = worktree {
            e.worktree = w.into();
        }
        if from.is_some() {
            e.from = from;
        }
    };
    for item in iter {
        let item = item.map_err(GitError::git("computing status"))?;
        match item {
            Item::TreeIndex(change) => {
                let (letter, path, from) = letter_of_tree_change(&change);
                put(path, Some(letter), None, from);
            }
            Item::IndexWorktree(WorktreeItem::Modification { rela_path, status, .. }) => {
                let letter = match status {
                    EntryStatus::Conflict { .. } => {
                        put(rela_path.to_string(), Some("U"), Some("U"), None);
                        continue;
                    }
                    EntryStatus::Change(Change::Removed) => "D",
                    EntryStatus::Change(Change::Type { .. }) => "T",
                    EntryStatus::Change(Change::Modification { .. }) => "M",
                    EntryStatus::Change(Change::SubmoduleModification(_)) => "M",
                    EntryStatus::IntentToAdd => "A",
                    EntryStatus::NeedsUpdate(_) => continue,
                };
                put(rela_path.to_string(), None, Some(letter), None);
            }
            Item::IndexWorktree(WorktreeItem::DirectoryContents { entry, .. }) => {
                if entry.status == gix::dir::entry::Status::Untracked {
                    put(entry.rela_path.to_string(), Some("?"), Some("?"), None);
                }
            }
            Item::IndexWorktree(WorktreeItem::Rewrite { dirwalk_entry, .. }) => {
                // Not produced: work-tree rename tracking is off, as in `git status`.
                put(dirwalk_entry.rela_path.to_string(), Some("?"), Some("?"), None);
            }
        }
    }
    Ok(StatusAnswer { head, entries: entries.into_values().collect() })
}
