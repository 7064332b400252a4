//! `git_diff` (index → work tree) and `git_staged_diff` (HEAD → index):
//! which files changed, and their unified hunks.

use crate::answer::{DiffAnswer, FileDiff};
use crate::error::GitError;
use gix::bstr::BString;
use gix::diff::blob::unified_diff::{ConsumeHunk, ContextSize, DiffLineKind, HunkHeader};
use gix::diff::blob::{Algorithm, Diff, InternedInput, UnifiedDiff};
use gix::status::index_worktree::Item as WorktreeItem;
use gix::status::plumbing::index_as_worktree::{Change, EntryStatus};

/// Bytes git looks at to decide a file is binary.
const BINARY_PROBE: usize = 8000;

/// One side of a change: its bytes, or nothing (added/removed, or a gitlink).
type Side = Option<Vec<u8>>;

fn is_binary(data: &[u8]) -> bool {
    data[..data.len().min(BINARY_PROBE)].contains(&0)
}

/// Renders hunks as git does: `@@ -a,b +c,d @@`, a count of 1 omitted.
#[derive(Default)]
struct Hunks {
    text: Vec<u8>,
    added: u64,
    removed: u64,
}

fn range(start: u32, len: u32) -> String {
    match len {
        0 => format!("{},0", start.saturating_sub(1)),
        1 => format!("{start}"),
        n => format!("{start},{n}"),
    }
}

impl ConsumeHunk for Hunks {
    type Out = Hunks;

    fn consume_hunk(&mut self, h: HunkHeader, lines: &[(DiffLineKind, &[u8])]) -> std::io::Result<()> {
        let header = format!(
            "@@ -{} +{} @@\n",
            range(h.before_hunk_start, h.before_hunk_len),
            range(h.after_hunk_start, h.after_hunk_len)
        );
        self.text.extend_from_slice(header.as_bytes());
        for (kind, line) in lines {
            match kind {
                DiffLineKind::Add => self.added += 1,
                DiffLineKind::Remove => self.removed += 1,
                DiffLineKind::Context => {}
            }
            self.text.push(kind.to_prefix() as u8);
            self.text.extend_from_slice(line);
            if !line.ends_with(b"\n") {
                self.text.extend_from_slice(b"\n\\ No newline at end of file\n");
            }
        }
        Ok(())
    }

    fn finish(self) -> Hunks {
        self
    }
}

/// Builds one file's entry from its two sides.
fn file_diff(status: &str, path: String, from: Option<String>, old: Side, new: Side) -> Result<FileDiff, GitError> {
    let (old, new) = (old.unwrap_or_default(), new.unwrap_or_default());
    let binary = is_binary(&old) || is_binary(&new);
    let mut out = FileDiff { status: status.into(), path, from, binary, added: 0, removed: 0, hunks: String::new() };
    if binary {
        return Ok(out);
    }
    let input = InternedInput::new(old.as_slice(), new.as_slice());
    let mut diff = Diff::compute(Algorithm::Myers, &input);
    diff.postprocess_lines(&input);
    let hunks = UnifiedDiff::new(&diff, &input, Hunks::default(), ContextSize::symmetrical(3))
        .consume()
        .map_err(GitError::io("rendering a diff"))?;
    out.added = hunks.added;
    out.removed = hunks.removed;
    out.hunks = String::from_utf8_lossy(&hunks.text).into_owned();
    Ok(out)
}

fn blob(repo: &gix::Repository, id: &gix::oid, mode: gix::index::entry::Mode) -> Result<Side, GitError> {
    if mode == gix::index::entry::Mode::COMMIT {
        return Ok(None); // a submodule's commit: no content here
    }
    let object = repo.find_object(id).map_err(GitError::git("reading a blob"))?;
    Ok(Some(object.detach().data))
}

/// HEAD → index.
pub(crate) fn staged_diff(repo: &gix::Repository) -> Result<DiffAnswer, GitError> {
    let tree = match repo.head_tree_id_or_empty() {
        Ok(id) => id.detach(),
        Err(e) => return Err(GitError::git("reading HEAD's tree")(e)),
    };
    let index = repo.index_or_empty().map_err(GitError::git("reading the index"))?;
    type Raw = (
        &'static str,
        String,
        Option<String>,
        Option<(gix::ObjectId, gix::index::entry::Mode)>,
        Option<(gix::ObjectId, gix::index::entry::Mode)>,
    );
    let mut raw: Vec<Raw> = Vec::new();
    repo.tree_index_status(
        &tree,
        &index,
        None,
        gix::status::tree_index::TrackRenames::Given(gix::diff::Rewrites::default()),
        |change, _, _| {
            use gix::diff::index::ChangeRef;
            raw.push(match change {
                ChangeRef::Addition { location, entry_mode, id, .. } => {
                    ("A", location.to_string(), None, None, Some((id.into_owned(), entry_mode)))
                }
                ChangeRef::Deletion { location, entry_mode, id, .. } => {
                    ("D", location.to_string(), None, Some((id.into_owned(), entry_mode)), None)
                }
                ChangeRef::Modification { location, previous_entry_mode, previous_id, entry_mode, id, .. } => {
                    let same_kind = previous_entry_mode.to_tree_entry_mode().map(|m| m.kind())
                        == entry_mode.to_tree_entry_mode().map(|m| m.kind());
                    (
                        if same_kind { "M" } else { "T" },
                        location.to_string(),
                        None,
                        Some((previous_id.into_owned(), previous_entry_mode)),
                        Some((id.into_owned(), entry_mode)),
                    )
                }
                ChangeRef::Rewrite {
                    source_location,
                    source_entry_mode,
                    source_id,
                    location,
                    entry_mode,
                    id,
                    copy,
                    ..
                } => (
                    if copy { "C" } else { "R" },
                    location.to_string(),
                    Some(source_location.to_string()),
                    Some((source_id.into_owned(), source_entry_mode)),
                    Some((id.into_owned(), entry_mode)),
                ),
            });
            Ok::<_, std::convert::Infallible>(std::ops::ControlFlow::Continue(()))
        },
    )
    .map_err(GitError::git("comparing HEAD with the index"))?;
    let mut files = Vec::with_capacity(raw.len());
    for (status, path, from, old, new) in raw {
        let old = old.map(|(id, mode)| blob(repo, &id, mode)).transpose()?.flatten();
        let new = new.map(|(id, mode)| blob(repo, &id, mode)).transpose()?.flatten();
        files.push(file_diff(status, path, from, old, new)?);
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(DiffAnswer { files })
}

/// The work tree's side of `path`: a file's bytes, or a link's target (as git diffs links).
fn worktree_side(repo: &gix::Repository, path: &str) -> Result<Side, GitError> {
    let root = repo.workdir().ok_or_else(|| GitError::git("the repository")("has no work tree"))?;
    let at = root.join(path);
    let md = match at.symlink_metadata() {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(GitError::io("reading the work tree")(e)),
    };
    if md.file_type().is_symlink() {
        use std::os::unix::ffi::OsStrExt;
        let target = std::fs::read_link(&at).map_err(GitError::io("reading a link"))?;
        return Ok(Some(target.as_os_str().as_bytes().to_vec()));
    }
    if !md.is_file() {
        return Ok(None);
    }
    Ok(Some(std::fs::read(&at).map_err(GitError::io("reading the work tree"))?))
}

/// Index → work tree, against `index` (as [`super::status::status`]).
pub(crate) fn worktree_diff(repo: &gix::Repository, index: gix::index::File) -> Result<DiffAnswer, GitError> {
    let iter = repo
        .status(gix::progress::Discard)
        .map_err(GitError::git("starting status"))?
        .index(gix::worktree::IndexPersistedOrInMemory::InMemory(index))
        .untracked_files(gix::status::UntrackedFiles::None)
        .index_worktree_submodules(gix::status::Submodule::Given {
            ignore: gix::submodule::config::Ignore::All,
            check_dirty: false,
        })
        .index_worktree_rewrites(None)
        .into_index_worktree_iter(Vec::<BString>::new())
        .map_err(GitError::git("comparing the index with the work tree"))?;
    let mut files = Vec::new();
    for item in iter {
        let item = item.map_err(GitError::git("comparing the index with the work tree"))?;
        let WorktreeItem::Modification { entry, rela_path, status, .. } = item else { continue };
        let path = rela_path.to_string();
        let status = match status {
            EntryStatus::Change(Change::Removed) => "D",
            EntryStatus::Change(Change::Type { .. }) => "T",
            EntryStatus::Change(Change::Modification { .. } | Change::SubmoduleModification(_)) => "M",
            EntryStatus::Conflict { .. } | EntryStatus::NeedsUpdate(_) | EntryStatus::IntentToAdd => continue,
        };
        let old = blob(repo, &entry.id, entry.mode)?;
        let new = if status == "D" { None } else { worktree_side(repo, &path)? };
        files.push(file_diff(status, path, None, old, new)?);
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(DiffAnswer { files })
}
