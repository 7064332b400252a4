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

/// Whether the index's cache-tree says it holds exactly `HEAD`'s tree, so
/// that comparing the two finds nothing: its root is valid, spans every
/// entry and names `HEAD`'s tree, and no entry is a conflict stage or an
/// intent to add (each of which a full comparison could report). git's
/// own `status` skips the trees the cache-tree vouches for in the same way.
/// A repository whose cache-tree lies gets a wrong answer about itself,
/// as with a lying index's stat data; nothing else is read or trusted.
fn index_matches_head(repo: &gix::Repository, index: &gix::index::File) -> Result<bool, GitError> {
    let Some(root) = index.tree() else { return Ok(false) };
    if root.num_entries.map(u64::from) != Some(index.entries().len() as u64) {
        return Ok(false);
    }
    let conflict_or_intent =
        index.entries().iter().any(|e| e.stage_raw() != 0 || e.flags.contains(gix::index::entry::Flags::INTENT_TO_ADD));
    if conflict_or_intent {
        return Ok(false);
    }
    let head_tree = repo.head_tree_id_or_empty().map_err(GitError::git("reading HEAD's tree"))?;
    Ok(root.id == head_tree.detach())
}

/// The status answer, comparing against `index` (the repository's, with
/// the stat-only files' entries marked up to date).
pub(crate) fn status(repo: &gix::Repository, index: gix::index::File) -> Result<StatusAnswer, GitError> {
    let head = head(repo)?;
    let skip_tree_index = index_matches_head(repo, &index)?;
    let platform = repo
        .status(gix::progress::Discard)
        .map_err(GitError::git("starting status"))?
        .index(gix::worktree::IndexPersistedOrInMemory::InMemory(index))
        .untracked_files(gix::status::UntrackedFiles::Files)
        .index_worktree_submodules(gix::status::Submodule::Given {
            ignore: gix::submodule::config::Ignore::All,
            check_dirty: false,
        })
        .index_worktree_rewrites(None)
        .tree_index_track_renames(gix::status::tree_index::TrackRenames::Given(gix::diff::Rewrites::default()));
    const COMPUTING: &str = "computing status";
    let iter: Box<dyn Iterator<Item = Result<Item, GitError>>> = if skip_tree_index {
        let iter = platform.into_index_worktree_iter(Vec::<BString>::new()).map_err(GitError::git(COMPUTING))?;
        Box::new(iter.map(|item| item.map(Item::IndexWorktree).map_err(GitError::git(COMPUTING))))
    } else {
        let iter = platform.into_iter(Vec::<BString>::new()).map_err(GitError::git(COMPUTING))?;
        Box::new(iter.map(|item| item.map_err(GitError::git(COMPUTING))))
    };
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
        let item = item?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_git::git;

    fn vouches(dir: &std::path::Path) -> bool {
        let repo = gix::open_opts(dir, gix::open::Options::isolated()).unwrap();
        let index = repo.open_index().unwrap();
        index_matches_head(&repo, &index).unwrap()
    }

    #[test]
    fn the_cache_tree_vouches_only_for_an_index_that_is_head_s_tree() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        git(dir, &["init", "-q", "-b", "main"]);
        std::fs::create_dir(dir.join("d")).unwrap();
        std::fs::write(dir.join("d/a.txt"), "a\n").unwrap();
        std::fs::write(dir.join("b.txt"), "b\n").unwrap();
        git(dir, &["add", "-A"]);
        assert!(!vouches(dir), "no commit yet: the index has no cache-tree");
        git(dir, &["commit", "-q", "-m", "one"]);
        assert!(vouches(dir), "just committed: the cache-tree is HEAD's tree");
        // A work-tree change is the other comparison's: still vouched for.
        std::fs::write(dir.join("b.txt"), "b, changed\n").unwrap();
        assert!(vouches(dir));
        // Staged: git invalidates the path's cache-tree nodes, the root too.
        git(dir, &["add", "b.txt"]);
        assert!(!vouches(dir));
        // Valid again, but for a tree that is not HEAD's.
        git(dir, &["write-tree"]);
        assert!(!vouches(dir), "a valid cache-tree of another tree");
        git(dir, &["commit", "-q", "-m", "two"]);
        assert!(vouches(dir));
        // An intent to add, even where the cache-tree is written again.
        std::fs::write(dir.join("c.txt"), "c\n").unwrap();
        git(dir, &["add", "-N", "c.txt"]);
        git(dir, &["write-tree"]);
        assert!(!vouches(dir), "an intent-to-add entry");
    }
}
