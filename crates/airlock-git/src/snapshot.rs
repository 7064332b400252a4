//! Copying a repository into one private archive through held handles.
//!
//! The walk starts at the repository directory's handle and opens every
//! child by name beneath its parent's handle with `O_NOFOLLOW`
//! ([`airlock_hostfs::Dir`]): no link is followed at any component. In
//! the work tree, links are recorded as links and special files are
//! skipped; nested `.git` entries (submodule pointers, nested repositories)
//! are skipped. `.git` itself must be a real directory: a `.git` file
//! (`gitdir:` pointer) or link is refused, as is a linked worktree
//! (`commondir`). Inside `.git` only what a query reads is copied: hooks,
//! logs, modules, worktrees and the like are left out, links and special
//! files are skipped, and `objects/info/alternates` is never copied, so an
//! object store elsewhere is never consulted.

use crate::archive::Writer;
use crate::error::GitError;
use crate::limits::Limits;
use crate::query::Scope;
use airlock_core::ReasonCode;
use airlock_hostfs::{Dir, EntryKind, TreeEntry};
use sha2::{Digest, Sha256};
use std::io::Write;

/// Entries of `.git` never copied (never needed by a query, or a way to
/// reach outside the repository).
const GIT_DIR_SKIPPED: &[&str] = &[
    "hooks",
    "logs",
    "modules",
    "worktrees",
    "lfs",
    "fsmonitor--daemon",
    "fsmonitor--daemon.ipc",
    "description",
    "COMMIT_EDITMSG",
    "gc.log",
    "gitk.cache",
];
/// Entries of `.git/objects/info` never copied.
const ALTERNATES: &[&str] = &["alternates", "http-alternates"];
/// The most entries listed in one directory.
const MAX_DIR_ENTRIES: usize = 100_000;
/// Names of skipped entries kept for the answer.
const SKIPPED_KEPT: usize = 32;

/// What a snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotStats {
    /// Regular files and links copied.
    pub files: u64,
    /// Bytes of file content copied.
    pub bytes: u64,
    /// Directories recorded.
    pub dirs: u64,
    /// Size of the archive file.
    pub archive_bytes: u64,
    /// Lowercase hex SHA-256 of the archive file.
    pub sha256_hex: String,
    /// Files copied that have more than one hard link.
    pub linked_files: u64,
    /// Entries left out (special files, nested `.git`, links inside
    /// `.git`, alternates, mount crossings), counted.
    pub skipped: u64,
    /// The first few of them, by path.
    pub skipped_paths: Vec<String>,
}

/// Counts and hashes what goes through it.
struct Hashing<W: Write> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

struct Walk<'a, W: Write> {
    writer: Writer<Hashing<std::io::BufWriter<&'a mut W>>>,
    limits: Limits,
    stats: SnapshotStats,
}

fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

fn utf8(entry: &TreeEntry, parent: &str) -> Result<String, GitError> {
    entry.name.to_str().map(str::to_owned).ok_or_else(|| {
        GitError::new(ReasonCode::GitPathRejected, format!("a name in {parent:?} is not UTF-8: {:?}", entry.name))
    })
}

/// Copies the repository whose work tree is `repo` into `out`, as the
/// archive of [`crate::archive`], within `limits`.
pub fn take<W: Write>(repo: &Dir, scope: Scope, limits: Limits, out: &mut W) -> Result<SnapshotStats, GitError> {
    let top = repo.list_tree(MAX_DIR_ENTRIES)?;
    let git = top
        .iter()
        .find(|e| e.name == ".git")
        .ok_or_else(|| GitError::new(ReasonCode::GitNotRepository, "the directory has no .git directory"))?;
    if git.kind != EntryKind::Directory {
        return Err(GitError::new(
            ReasonCode::GitNotRepository,
            "its .git is not a directory (a gitdir pointer file or a link is never followed)",
        ));
    }
    let git_dir = repo.open_tree_dir(".git".as_ref())?;
    if git_dir.list_tree(MAX_DIR_ENTRIES)?.iter().any(|e| e.name == "commondir") {
        return Err(GitError::new(
            ReasonCode::GitNotRepository,
            "its .git is a linked worktree (commondir); the common directory is never followed",
        ));
    }
    let hashing = Hashing { inner: std::io::BufWriter::with_capacity(1 << 20, out), hasher: Sha256::new(), bytes: 0 };
    let mut walk = Walk {
        writer: Writer::new(hashing)?,
        limits,
        stats: SnapshotStats {
            files: 0,
            bytes: 0,
            dirs: 0,
            archive_bytes: 0,
            sha256_hex: String::new(),
            linked_files: 0,
            skipped: 0,
            skipped_paths: Vec::new(),
        },
    };
    walk.writer.dir(".git")?;
    walk.stats.dirs += 1;
    walk.git_dir(&git_dir, ".git", scope)?;
    if scope.work_tree {
        walk.work_tree(repo, "", top)?;
    }
    let Walk { writer, mut stats, .. } = walk;
    let hashing = writer.finish()?;
    stats.archive_bytes = hashing.bytes;
    stats.sha256_hex = hex::encode(hashing.hasher.finalize());
    Ok(stats)
}

impl<W: Write> Walk<'_, W> {
    fn skip(&mut self, path: String) {
        self.stats.skipped += 1;
        if self.stats.skipped_paths.len() < SKIPPED_KEPT {
            self.stats.skipped_paths.push(path);
        }
    }

    fn dir(&mut self, path: &str) -> Result<(), GitError> {
        self.stats.dirs += 1;
        if self.stats.dirs > self.limits.max_files {
            return Err(GitError::new(
                ReasonCode::GitSnapshotTooLarge,
                format!("the repository has more than {} directories (at {path:?})", self.limits.max_files),
            ));
        }
        self.writer.dir(path)
    }

    /// `in_work_tree`: a work-tree file keeps its modification time only
    /// if its inode has not changed since its content did (ctime = mtime);
    /// otherwise it gets time 0, so the driver never trusts its stat data
    /// and hashes it (git on the host would see the ctime move). Files
    /// under `.git` keep theirs (the index's time is what git's racy check uses).
    fn file(&mut self, dir: &Dir, entry: &TreeEntry, path: &str, in_work_tree: bool) -> Result<(), GitError> {
        self.limits.check(self.stats.files + 1, self.stats.bytes + entry.size, entry.size, path)?;
        let file = dir.open_tree_file(&entry.name, self.limits.max_file_bytes)?;
        let size = file.size();
        self.stats.files += 1;
        self.stats.bytes += size;
        self.limits.check(self.stats.files, self.stats.bytes, size, path)?;
        if file.nlink() > 1 {
            self.stats.linked_files += 1;
        }
        let executable = file.executable();
        let mtime = if !in_work_tree || file.ctime() == file.mtime() { file.mtime() } else { (0, 0) };
        self.writer.file(path, size, executable, mtime, |out| Ok(file.copy_into(out)?))
    }

    fn link(&mut self, dir: &Dir, entry: &TreeEntry, path: &str) -> Result<(), GitError> {
        self.stats.files += 1;
        self.limits.check(self.stats.files, self.stats.bytes, 0, path)?;
        let target = dir.read_tree_link(&entry.name, crate::archive::MAX_PATH_BYTES)?;
        self.writer.link(path, &target)
    }

    /// `.git` (or a directory beneath it): files and directories only.
    fn git_dir(&mut self, dir: &Dir, path: &str, scope: Scope) -> Result<(), GitError> {
        for entry in dir.list_tree(MAX_DIR_ENTRIES)? {
            let name = utf8(&entry, path)?;
            let child = join(path, &name);
            let left_out = (path == ".git"
                && (GIT_DIR_SKIPPED.contains(&name.as_str()) || (name == "index" && !scope.index)))
                || (path == ".git/objects/info" && ALTERNATES.contains(&name.as_str()));
            if left_out {
                if path == ".git/objects/info" {
                    self.skip(child); // worth reporting: an alternates file is never honoured
                }
                continue;
            }
            match entry.kind {
                EntryKind::Directory => {
                    let sub = dir.open_tree_dir(&entry.name)?;
                    self.dir(&child)?;
                    self.git_dir(&sub, &child, scope)?;
                }
                EntryKind::Regular => self.file(dir, &entry, &child, false)?,
                EntryKind::Symlink | EntryKind::Special => self.skip(child),
            }
        }
        Ok(())
    }

    /// The work tree: files, links (as links) and directories; nested
    /// `.git` entries and special files are skipped.
    fn work_tree(&mut self, dir: &Dir, path: &str, entries: Vec<TreeEntry>) -> Result<(), GitError> {
        for entry in entries {
            let name = utf8(&entry, path)?;
            let child = join(path, &name);
            if name == ".git" {
                if !path.is_empty() {
                    self.skip(child);
                }
                continue;
            }
            match entry.kind {
                EntryKind::Directory => {
                    let sub = match dir.open_tree_dir(&entry.name) {
                        Ok(sub) => sub,
                        Err(e) if e.code() == ReasonCode::PathMountCrossing => {
                            self.skip(child);
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    };
                    self.dir(&child)?;
                    let list = sub.list_tree(MAX_DIR_ENTRIES)?;
                    self.work_tree(&sub, &child, list)?;
                }
                EntryKind::Regular => self.file(dir, &entry, &child, true)?,
                EntryKind::Symlink => self.link(dir, &entry, &child)?,
                EntryKind::Special => self.skip(child),
            }
        }
        Ok(())
    }
}
