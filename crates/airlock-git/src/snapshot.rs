//! Copying a repository into one private archive through held handles.
//!
//! The walk starts at the repository directory's handle and opens every
//! child by name beneath its parent's handle with `O_NOFOLLOW`
//! ([`airlock_hostfs::Dir`], the one walker source queries use too):
//! entries are listed with `fstatat(AT_SYMLINK_NOFOLLOW)`, every child must
//! still be the inode the listing saw (else `path.race`), child directories
//! are opened `O_NOFOLLOW`, files by hostfs's checked-file rule (`O_PATH`
//! check, then reopened), links read from a checked `O_PATH` handle; no
//! link is followed at any component. No mount is crossed: in the work
//! tree a directory or file on another mount is skipped (`mount`), inside
//! `.git` it refuses the query (`path.mount_crossing`). In the work tree,
//! links are recorded as links and special files are skipped; nested `.git`
//! entries (submodule pointers, nested repositories)
//! are skipped. `.git` itself must be a real directory: a `.git` file
//! (`gitdir:` pointer), a link, or a linked worktree (`commondir`) is
//! `git.not_a_repository`. Inside `.git` only what a query reads is copied:
//! `hooks`, `logs`, `modules`, `worktrees`, `lfs`, fsmonitor state and the
//! like are left out, links and special files are skipped, and
//! `objects/info/{alternates,http-alternates}` are never copied (listed as
//! skipped), so an object store elsewhere is never consulted; borrowed
//! objects are then missing (`git.repository_invalid`).
//!
//! Paths must be UTF-8, free of NUL, CR, LF and backslash, of `.`, `..` and
//! empty components, and no two may differ only in ASCII case; `.git` in any
//! case is allowed only as the top-level `.git` (`git.path_rejected` when an
//! archive holds one). Limits count the files under `.git` too (loose
//! objects count; a packed repository is the norm).
//!
//! The snapshot obeys the read grammar (issue 14): control directories (the
//! path grammar's control names: `.airlock`, and `.git` other than the
//! top-level one, in any letter case), in the work tree and inside `.git`,
//! are never entered, copied or listed, and neither is any directory or
//! file whose `(dev, ino)` is one of airlock's own ([`ControlIds`]),
//! compared on the listed stat (so a bind mount of the state directory
//! under any name is caught) and again on the opened handle; a repository
//! or `.git` that is one of them is `path.control_dir`. These skips count
//! in `skipped` (`control_dir`) but do not make the answer partial, and
//! record no path.
//!
//! A regular file (or link) with more than one hard link is left out before
//! a byte is read, in `.git` as in the work tree, and counted in
//! [`SnapshotStats::linked_files`] (and `skipped.hardlink`): its content is
//! shared with a name elsewhere, which `read_file` refuses. In `.git` this
//! is the same rule on purpose: objects hard-linked by `git clone --local`
//! are content-addressed, but a linked file is not proven to be only an
//! object. A query that needed a left-out object fails with
//! `git.repository_invalid` (`git repack -a -d` gives the clone its own
//! copies).
//!
//! Work-tree files keep their host modification time in the archive when
//! their ctime equals their mtime, else time 0: with the driver's
//! `core.trustctime = false` and `core.checkstat = minimal`, gix then trusts
//! the index's stat data as git does on the host and hashes only files whose
//! time or size moved, while a change whose mtime was put back (ctime moved)
//! is still hashed and seen.
//!
//! **Only what the answer needs is copied.** `.git/index` is read first
//! (`.git` is walked before the work tree) and its stat data decides, file
//! by file, as git's own racy-clean rule does (`index_stat.rs`): a
//! tracked file whose size, mode and time match its entry and that is older
//! than the index, and an untracked file, are recorded by the listing's
//! stat data alone (a stat-only record, counted in
//! [`SnapshotStats::stat_only`]) and never opened; every other file is
//! copied as before. A stat-only file obeys the same rules as a copied one
//! (not one of airlock's own, one hard link, on its directory's mount) and
//! counts against the file bound, not the content bounds.

use crate::archive::Writer;
use crate::error::GitError;
use crate::index_stat::IndexStat;
use crate::limits::Limits;
use crate::lookahead::{self, CloseOnDrop, Lookahead, Ticket};
use crate::query::Scope;
use airlock_core::path::is_control_name;
use airlock_core::ReasonCode;
use airlock_hostfs::{Dir, Entry, EntryKind};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
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

/// Why an entry was left out (the names are stable: programs key on them,
/// and they match the source queries' `skipped` keys where they overlap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Skip {
    /// A control directory (by name or by identity): outside every query's
    /// scope, so it does not make the answer partial.
    ControlDir,
    /// A regular file with more than one hard link.
    Hardlink,
    /// A symbolic link inside `.git`.
    Symlink,
    /// A FIFO, socket or device.
    Special,
    /// A directory or file on another mount, in the work tree (inside
    /// `.git` one refuses the query).
    Mount,
    /// `objects/info/alternates` (borrowed objects are never consulted).
    Alternates,
}

impl Skip {
    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::ControlDir => "control_dir",
            Skip::Hardlink => "hardlink",
            Skip::Symlink => "symlink",
            Skip::Special => "special",
            Skip::Mount => "mount",
            Skip::Alternates => "alternates",
        }
    }
}

/// Identities `(st_dev, st_ino)` of airlock's control directories and
/// files (the state directory above all): the walk never enters, copies
/// or lists an entry with one of them, wherever it lies and whatever its
/// name. Compared on the opened handle, so a rename cannot slip one in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlIds {
    ids: HashSet<(u64, u64)>,
}

impl ControlIds {
    /// No identities known (the name rules still apply).
    pub fn new() -> Self {
        ControlIds::default()
    }

    /// Adds one identity.
    pub fn insert(&mut self, dev_ino: (u64, u64)) -> &mut Self {
        self.ids.insert(dev_ino);
        self
    }

    /// Whether `dev_ino` is one of them.
    pub fn contains(&self, dev_ino: (u64, u64)) -> bool {
        self.ids.contains(&dev_ino)
    }
}

/// What a snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotStats {
    /// Regular files and links recorded (copied or stat-only).
    pub files: u64,
    /// Of them, regular files recorded by their stat data alone, their
    /// content never read (the index says a query does not need it).
    pub stat_only: u64,
    /// Bytes of file content copied.
    pub bytes: u64,
    /// Directories recorded.
    pub dirs: u64,
    /// Size of the archive file.
    pub archive_bytes: u64,
    /// Lowercase hex SHA-256 of the archive file.
    pub sha256_hex: String,
    /// Regular files (and links) found with more than one hard link, all
    /// left out (also counted in `skipped`).
    pub linked_files: u64,
    /// Entries left out (control directories, hard-linked files, special
    /// files, links inside `.git`, alternates, mount crossings), counted.
    pub skipped: u64,
    /// The same, by reason.
    pub skipped_by: BTreeMap<Skip, u64>,
    /// The first few of them, by path (never the path of an entry left out
    /// for its identity).
    pub skipped_paths: Vec<String>,
}

impl SnapshotStats {
    /// Whether something a query may need was left out (anything but
    /// control directories).
    pub fn partial(&self) -> bool {
        self.skipped_by.keys().any(|k| *k != Skip::ControlDir)
    }

    /// Adds what the snapshot left out to a driver's answer (a JSON
    /// object): `partial`, `partial_reasons` (`skipped_entries` when
    /// partial) and `skipped` (counts by [`Skip`] name), as the source
    /// queries do.
    pub fn annotate(&self, answer: &mut serde_json::Value) {
        let Some(map) = answer.as_object_mut() else { return };
        map.insert("partial".into(), self.partial().into());
        let reasons: Vec<&str> = if self.partial() { vec!["skipped_entries"] } else { Vec::new() };
        map.insert("partial_reasons".into(), reasons.into());
        let skipped: serde_json::Map<String, serde_json::Value> =
            self.skipped_by.iter().map(|(k, n)| (k.as_str().to_owned(), (*n).into())).collect();
        map.insert("skipped".into(), skipped.into());
    }
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
    control: &'a ControlIds,
    /// Work-tree directories being listed ahead of the walk.
    lookahead: &'a Lookahead,
    /// The index's stat data, once `.git/index` was read (work-tree scopes).
    index: IndexStat,
    /// Whether the scope wants the index read for the work tree's sake.
    index_decides: bool,
    stats: SnapshotStats,
}

fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

fn utf8(entry: &Entry, parent: &str) -> Result<String, GitError> {
    entry.name_str().map(str::to_owned).ok_or_else(|| {
        let name = String::from_utf8_lossy(&entry.name);
        GitError::new(ReasonCode::GitPathRejected, format!("a name in {parent:?} is not UTF-8: {name:?}"))
    })
}

/// The entries of `dir`; more than [`MAX_DIR_ENTRIES`] is `limit.inputs`.
fn list(dir: &Dir) -> Result<Vec<Entry>, GitError> {
    let (entries, more) = dir.read_entries(MAX_DIR_ENTRIES)?;
    if more {
        return Err(GitError::new(
            ReasonCode::LimitInputs,
            format!("a directory holds more than {MAX_DIR_ENTRIES} entries"),
        ));
    }
    Ok(entries)
}

/// What opening a child directory found.
enum Opened {
    /// One of airlock's own (as listed, or once opened): never entered.
    Control,
    /// On another mount (where mounts are skipped).
    Mount,
    /// The directory.
    Dir(Dir),
}

/// Opens the child directory `entry` of `dir` by the walk's rules, without
/// counting anything (the walk counts when it reaches the entry): never
/// one whose listed identity is airlock's own, and not one on another
/// mount if `mounts_skipped`.
fn open_sub(control: &ControlIds, dir: &Dir, entry: &Entry, mounts_skipped: bool) -> Result<Opened, GitError> {
    if control.contains(entry.dev_ino) {
        return Ok(Opened::Control);
    }
    let sub = match dir.open_child_dir(entry) {
        Ok(sub) => sub,
        Err(e) if mounts_skipped && e.code() == ReasonCode::PathMountCrossing => return Ok(Opened::Mount),
        Err(e) => return Err(e.into()),
    };
    if control.contains(sub.dev_ino()) {
        return Ok(Opened::Control);
    }
    Ok(Opened::Dir(sub))
}

/// Whether the entry `name` of the `.git` directory `path` is left out
/// (`.git`'s entries no query reads, the index where the scope has none,
/// alternates files).
fn git_dir_left_out(path: &str, name: &str, scope: Scope) -> bool {
    (path == ".git" && (GIT_DIR_SKIPPED.contains(&name) || (name == "index" && !scope.index)))
        || (path == ".git/objects/info" && ALTERNATES.contains(&name))
}

/// One directory's entries as the walk goes through them, with the
/// subdirectories prepared ahead of it.
struct Prepared {
    entries: Vec<Entry>,
    /// Per entry: the subdirectory prepared ahead, if it was.
    slots: Vec<Option<Ahead>>,
    /// The first entry not looked at for preparing.
    next: usize,
    /// Whether a subdirectory on another mount is skipped (the work tree)
    /// rather than refused (`.git`).
    mounts_skipped: bool,
}

impl Prepared {
    fn new(entries: Vec<Entry>, mounts_skipped: bool) -> Prepared {
        let mut slots = Vec::new();
        slots.resize_with(entries.len(), || None);
        Prepared { entries, slots, next: 0, mounts_skipped }
    }
}

/// A subdirectory prepared before the walk reaches it.
enum Ahead {
    /// Opened and handed to the lookahead.
    Listing(Ticket),
    /// Left out, or failed to open: settled when the walk reaches it.
    Settled(Result<Opened, GitError>),
}

fn control_refused(what: &str) -> GitError {
    GitError::new(
        ReasonCode::PathControlDir,
        format!("{what} is one of airlock's control directories; point the query at a repository outside it"),
    )
}

/// Copies the repository whose work tree is `repo` into `out`, as the
/// archive of [`crate::archive`], within `limits`, never entering an
/// entry whose identity is in `control`.
pub fn take<W: Write>(
    repo: &Dir,
    scope: Scope,
    limits: Limits,
    control: &ControlIds,
    out: &mut W,
) -> Result<SnapshotStats, GitError> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    take_with_helpers(repo, scope, limits, control, out, lookahead::helpers_for(cores))
}

/// [`take`] with `helpers` threads listing work-tree directories ahead of
/// the walk (none: the walk lists alone). The archive and the counts are
/// the same whatever the number.
fn take_with_helpers<W: Write>(
    repo: &Dir,
    scope: Scope,
    limits: Limits,
    control: &ControlIds,
    out: &mut W,
    helpers: usize,
) -> Result<SnapshotStats, GitError> {
    if control.contains(repo.dev_ino()) {
        return Err(control_refused("the repository directory"));
    }
    let top = list(repo)?;
    let git = top
        .iter()
        .find(|e| e.name == b".git")
        .ok_or_else(|| GitError::new(ReasonCode::GitNotRepository, "the directory has no .git directory"))?;
    if git.kind != EntryKind::Directory {
        return Err(GitError::new(
            ReasonCode::GitNotRepository,
            "its .git is not a directory (a gitdir pointer file or a link is never followed)",
        ));
    }
    let git_dir = repo.open_child_dir(git)?;
    if control.contains(git_dir.dev_ino()) {
        return Err(control_refused("its .git"));
    }
    let git_entries = list(&git_dir)?;
    if git_entries.iter().any(|e| e.name == b"commondir") {
        return Err(GitError::new(
            ReasonCode::GitNotRepository,
            "its .git is a linked worktree (commondir); the common directory is never followed",
        ));
    }
    let lookahead = Lookahead::new(list, helpers);
    std::thread::scope(|s| {
        for _ in 0..helpers {
            // Without a helper the walk lists alone.
            let _ = std::thread::Builder::new().name("airlock-git-list".into()).spawn_scoped(s, || lookahead.serve());
        }
        let _closing = CloseOnDrop(&lookahead);
        let opened = Repository { work_tree: repo, top, git_dir, git_entries };
        walk(opened, scope, limits, control, &lookahead, out)
    })
}

/// The repository as [`take_with_helpers`] opened and checked it.
struct Repository<'r> {
    work_tree: &'r Dir,
    /// The work tree's entries.
    top: Vec<Entry>,
    git_dir: Dir,
    /// `.git`'s entries.
    git_entries: Vec<Entry>,
}

fn walk<W: Write>(
    repo: Repository<'_>,
    scope: Scope,
    limits: Limits,
    control: &ControlIds,
    lookahead: &Lookahead,
    out: &mut W,
) -> Result<SnapshotStats, GitError> {
    let hashing = Hashing { inner: std::io::BufWriter::with_capacity(1 << 20, out), hasher: Sha256::new(), bytes: 0 };
    let mut walk = Walk {
        writer: Writer::new(hashing)?,
        limits,
        control,
        lookahead,
        index: IndexStat::none(),
        index_decides: scope.work_tree && scope.index,
        stats: SnapshotStats {
            files: 0,
            stat_only: 0,
            bytes: 0,
            dirs: 0,
            archive_bytes: 0,
            sha256_hex: String::new(),
            linked_files: 0,
            skipped: 0,
            skipped_by: BTreeMap::new(),
            skipped_paths: Vec::new(),
        },
    };
    walk.writer.dir(".git")?;
    walk.stats.dirs += 1;
    walk.git_dir(&repo.git_dir, ".git", repo.git_entries, scope)?;
    if scope.work_tree {
        walk.work_tree(repo.work_tree, "", repo.top)?;
    }
    let Walk { writer, mut stats, .. } = walk;
    let hashing = writer.finish()?;
    stats.archive_bytes = hashing.bytes;
    stats.sha256_hex = hex::encode(hashing.hasher.finalize());
    Ok(stats)
}

impl<W: Write> Walk<'_, W> {
    /// Counts one entry left out; `path` is kept for the first few, unless
    /// it was left out for its identity (`None`).
    fn skip(&mut self, why: Skip, path: Option<String>) {
        self.stats.skipped += 1;
        *self.stats.skipped_by.entry(why).or_default() += 1;
        if why == Skip::Hardlink {
            self.stats.linked_files += 1;
        }
        if let Some(path) = path {
            if self.stats.skipped_paths.len() < SKIPPED_KEPT {
                self.stats.skipped_paths.push(path);
            }
        }
    }

    /// Counts what opening a child directory found, once the walk reaches
    /// it: the directory to enter, or `None` (counted) when it is one of
    /// airlock's own (as listed, so also when mounted elsewhere, or once
    /// opened) or on another mount (where mounts are skipped).
    fn reached(&mut self, opened: Result<Opened, GitError>, path: &str) -> Result<Option<Dir>, GitError> {
        match opened? {
            Opened::Control => {
                self.skip(Skip::ControlDir, None);
                Ok(None)
            }
            Opened::Mount => {
                self.skip(Skip::Mount, Some(path.to_owned()));
                Ok(None)
            }
            Opened::Dir(sub) => Ok(Some(sub)),
        }
    }

    /// Opens the subdirectories among `ahead.entries[ahead.next..]` whose
    /// names `walked` accepts and hands them to the lookahead while it has
    /// room.
    fn prepare_ahead(&self, dir: &Dir, ahead: &mut Prepared, walked: impl Fn(&str) -> bool) {
        while ahead.next < ahead.entries.len() && self.lookahead.has_room() {
            let index = ahead.next;
            ahead.next += 1;
            let entry = &ahead.entries[index];
            if entry.kind != EntryKind::Directory {
                continue;
            }
            // A name the walk skips before opening, or refuses (not
            // UTF-8), is left to the walk.
            let Some(name) = entry.name_str() else { continue };
            if !walked(name) || is_control_name(name) {
                continue;
            }
            ahead.slots[index] = Some(match open_sub(self.control, dir, entry, ahead.mounts_skipped) {
                Ok(Opened::Dir(sub)) => Ahead::Listing(self.lookahead.submit(sub)),
                other => Ahead::Settled(other),
            });
        }
    }

    /// Enters the subdirectory `entry` of `dir` (prepared ahead or not) as
    /// the walk reaches it, and walks it with `walk_sub`.
    fn subdirectory(
        &mut self,
        dir: &Dir,
        entry: &Entry,
        child: &str,
        prepared: Option<Ahead>,
        mounts_skipped: bool,
        walk_sub: impl FnOnce(&mut Self, &Dir, Vec<Entry>) -> Result<(), GitError>,
    ) -> Result<(), GitError> {
        let opened = match prepared {
            Some(Ahead::Listing(ticket)) => {
                let (sub, listing) = self.lookahead.take(ticket).ok_or_else(|| {
                    GitError::new(ReasonCode::Internal, "a directory listed ahead was not handed back")
                })?;
                self.dir(child)?;
                return walk_sub(self, &sub, listing?);
            }
            Some(Ahead::Settled(opened)) => opened,
            None => open_sub(self.control, dir, entry, mounts_skipped),
        };
        if let Some(sub) = self.reached(opened, child)? {
            self.dir(child)?;
            let entries = list(&sub)?;
            walk_sub(self, &sub, entries)?;
        }
        Ok(())
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

    /// `dir_mount` is `dir`'s [`Dir::mount_id`]. `in_work_tree`: a work-tree file keeps its modification time only
    /// if its inode has not changed since its content did (ctime = mtime);
    /// otherwise it gets time 0, so the driver never trusts its stat data
    /// and hashes it (git on the host would see the ctime move). Files
    /// under `.git` keep theirs (the index's time is what git's racy check uses).
    ///
    /// A file with more than one hard link (as listed, or once opened) is
    /// left out before a byte of it is read; so is one of airlock's own,
    /// and, in the work tree, a file on another mount (inside `.git` that
    /// refuses the query, as a directory on another mount does).
    fn file(
        &mut self,
        dir: &Dir,
        dir_mount: u64,
        entry: &Entry,
        path: &str,
        in_work_tree: bool,
    ) -> Result<(), GitError> {
        if self.left_out_as_listed(entry, path) {
            return Ok(());
        }
        self.limits.check(self.stats.files + 1, self.stats.bytes + entry.size, entry.size, path)?;
        let file = match dir.open_child_file(entry, dir_mount) {
            Ok(file) => file,
            Err(e) if e.code() == ReasonCode::InputHardlink => {
                self.skip(Skip::Hardlink, Some(path.to_owned()));
                return Ok(());
            }
            Err(e) if in_work_tree && e.code() == ReasonCode::PathMountCrossing => {
                self.skip(Skip::Mount, Some(path.to_owned()));
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if self.control.contains(file.dev_ino()) {
            self.skip(Skip::ControlDir, None);
            return Ok(());
        }
        let size = file.size();
        self.stats.files += 1;
        self.stats.bytes += size;
        self.limits.check(self.stats.files, self.stats.bytes, size, path)?;
        let executable = file.executable();
        let mtime = if !in_work_tree || file.ctime() == file.mtime() { file.mtime() } else { (0, 0) };
        if self.index_decides && path == ".git/index" {
            // Read once into memory: the archive and the index's stat data
            // are the same bytes.
            let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            let read = file.copy_into(&mut bytes)?;
            self.index = IndexStat::parse(&bytes, mtime.0);
            return self.writer.file(path, size, executable, mtime, |out| {
                out.write_all(&bytes).map_err(GitError::io("writing the snapshot"))?;
                Ok(read)
            });
        }
        self.writer.file(path, size, executable, mtime, |out| Ok(file.copy_into(out)?))
    }

    /// Whether the listed file `entry` is left out (and counted) before it
    /// is opened: one of airlock's own, or with more than one hard link.
    fn left_out_as_listed(&mut self, entry: &Entry, path: &str) -> bool {
        if self.control.contains(entry.dev_ino) {
            self.skip(Skip::ControlDir, None);
            return true;
        }
        if entry.nlink > 1 {
            self.skip(Skip::Hardlink, Some(path.to_owned()));
            return true;
        }
        false
    }

    /// A work-tree file whose content the answer does not need: recorded
    /// from the listing's stat data, never opened. The rules of [`Walk::file`]
    /// hold (not one of airlock's own, one hard link, on `dir_mount`).
    fn stat_only(&mut self, entry: &Entry, path: &str, dir_mount: u64) -> Result<(), GitError> {
        if self.left_out_as_listed(entry, path) {
            return Ok(());
        }
        if entry.mount_id != dir_mount {
            self.skip(Skip::Mount, Some(path.to_owned()));
            return Ok(());
        }
        self.stats.files += 1;
        self.stats.stat_only += 1;
        self.limits.check(self.stats.files, self.stats.bytes, 0, path)?;
        let mtime = if entry.ctime == entry.mtime { entry.mtime } else { (0, 0) };
        self.writer.stat_only(path, entry.size, entry.executable, mtime)
    }

    /// A link with more than one hard link is left out like a file (its
    /// target is its content).
    fn link(&mut self, dir: &Dir, entry: &Entry, path: &str) -> Result<(), GitError> {
        if entry.nlink > 1 {
            self.skip(Skip::Hardlink, Some(path.to_owned()));
            return Ok(());
        }
        self.stats.files += 1;
        self.limits.check(self.stats.files, self.stats.bytes, 0, path)?;
        let target = dir.read_child_link(entry, crate::archive::MAX_PATH_BYTES)?;
        self.writer.link(path, &target)
    }

    /// `.git` (or a directory beneath it): files and directories only;
    /// control directories (`.git/.airlock`, …) are never entered.
    fn git_dir(&mut self, dir: &Dir, path: &str, entries: Vec<Entry>, scope: Scope) -> Result<(), GitError> {
        let dir_mount = dir.mount_id()?;
        let mut ahead = Prepared::new(entries, false);
        for index in 0..ahead.entries.len() {
            self.prepare_ahead(dir, &mut ahead, |name| !git_dir_left_out(path, name, scope));
            let entry = &ahead.entries[index];
            let name = utf8(entry, path)?;
            let child = join(path, &name);
            if git_dir_left_out(path, &name, scope) {
                if path == ".git/objects/info" {
                    // worth reporting: an alternates file is never honoured
                    self.skip(Skip::Alternates, Some(child));
                }
                continue;
            }
            if is_control_name(&name) {
                self.skip(Skip::ControlDir, Some(child));
                continue;
            }
            match entry.kind {
                EntryKind::Directory => {
                    let prepared = ahead.slots[index].take();
                    self.subdirectory(dir, entry, &child, prepared, ahead.mounts_skipped, |walk, sub, entries| {
                        walk.git_dir(sub, &child, entries, scope)
                    })?;
                }
                EntryKind::Regular => self.file(dir, dir_mount, entry, &child, false)?,
                EntryKind::Symlink => self.skip(Skip::Symlink, Some(child)),
                EntryKind::Special => self.skip(Skip::Special, Some(child)),
            }
        }
        Ok(())
    }

    /// The work tree: files, links (as links) and directories; control
    /// directories (`.airlock`, nested `.git`, in any case) and special
    /// files are skipped.
    fn work_tree(&mut self, dir: &Dir, path: &str, entries: Vec<Entry>) -> Result<(), GitError> {
        let dir_mount = dir.mount_id()?;
        // The repository itself is copied by `git_dir`.
        let walked = |name: &str| !(path.is_empty() && name == ".git");
        let mut ahead = Prepared::new(entries, true);
        for index in 0..ahead.entries.len() {
            self.prepare_ahead(dir, &mut ahead, walked);
            let entry = &ahead.entries[index];
            let name = utf8(entry, path)?;
            let child = join(path, &name);
            if !walked(&name) {
                continue;
            }
            if is_control_name(&name) {
                self.skip(Skip::ControlDir, Some(child));
                continue;
            }
            match entry.kind {
                EntryKind::Directory => {
                    let prepared = ahead.slots[index].take();
                    self.subdirectory(dir, entry, &child, prepared, ahead.mounts_skipped, |walk, sub, entries| {
                        walk.work_tree(sub, &child, entries)
                    })?;
                }
                EntryKind::Regular => {
                    if self.index_decides && !self.index.content_needed(&child, entry) {
                        self.stat_only(entry, &child, dir_mount)?;
                    } else {
                        self.file(dir, dir_mount, entry, &child, true)?;
                    }
                }
                EntryKind::Symlink => self.link(dir, entry, &child)?,
                EntryKind::Special => self.skip(Skip::Special, Some(child)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_git::git;
    use airlock_hostfs::HostAuthority;
    use std::path::Path;

    /// A work tree of 120 directories, three deep, some wide and some
    /// empty, with files added to the index (loose objects: `.git` has
    /// many directories too) and some left untracked, a control directory
    /// by name in the work tree and in `.git`, one by identity, a link to
    /// a directory and a nested repository.
    fn repository() -> (tempfile::TempDir, std::path::PathBuf, ControlIds) {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        for a in 0..6 {
            for b in 0..4 {
                for c in 0..5 {
                    let d = repo.join(format!("a{a}/b{b}/c{c}"));
                    std::fs::create_dir_all(&d).unwrap();
                    for f in 0..(a * b + c) % 7 {
                        std::fs::write(d.join(format!("f{f}.txt")), format!("{a}{b}{c}{f}")).unwrap();
                    }
                }
            }
        }
        std::fs::create_dir_all(repo.join("a1/.airlock")).unwrap();
        std::fs::write(repo.join("a1/.airlock/secret"), "s").unwrap();
        std::fs::create_dir_all(repo.join("a2/state")).unwrap();
        std::fs::create_dir_all(repo.join("a3/inner/.git")).unwrap();
        std::fs::create_dir_all(repo.join(".git/.airlock")).unwrap();
        std::os::unix::fs::symlink("a0", repo.join("a0-link")).unwrap();
        git(&repo, &["add", "a0", "a1", "a2/b0", "a5"]);
        std::fs::write(repo.join("a0/b0/c0/f0.txt"), "changed").unwrap();
        let state = std::fs::metadata(repo.join("a2/state")).unwrap();
        let mut control = ControlIds::new();
        control.insert((std::os::linux::fs::MetadataExt::st_dev(&state), std::os::unix::fs::MetadataExt::ino(&state)));
        (tmp, repo, control)
    }

    fn snapshot(
        repo: &Path,
        limits: Limits,
        control: &ControlIds,
        helpers: usize,
    ) -> Result<(SnapshotStats, Vec<u8>), GitError> {
        let dir = Dir::open_ambient(&HostAuthority::ambient(), repo).unwrap();
        let scope = Scope { work_tree: true, index: true };
        let mut archive = Vec::new();
        let stats = take_with_helpers(&dir, scope, limits, control, &mut archive, helpers)?;
        Ok((stats, archive))
    }

    #[test]
    fn helpers_listing_ahead_change_no_byte_and_no_count() {
        let (_tmp, repo, control) = repository();
        let (alone, archive) = snapshot(&repo, Limits::default(), &control, 0).unwrap();
        assert!(alone.dirs > 100 && alone.stat_only > 0 && alone.files > alone.stat_only, "{alone:?}");
        assert_eq!(alone.skipped_by.get(&Skip::ControlDir), Some(&4), "{alone:?}");
        // Loose objects: `.git` is listed ahead too.
        assert!(std::fs::read_dir(repo.join(".git/objects")).unwrap().count() > 20);
        for helpers in [1, 3] {
            for _ in 0..5 {
                let (stats, bytes) = snapshot(&repo, Limits::default(), &control, helpers).unwrap();
                assert_eq!(stats, alone, "{helpers} helpers");
                assert!(bytes == archive, "{helpers} helpers: the archive differs");
            }
        }
    }

    #[test]
    fn helpers_listing_ahead_end_the_walk_where_it_ends_alone() {
        let (_tmp, repo, control) = repository();
        // A bound the walk passes part-way through the work tree.
        let limits = Limits { max_files: 100, ..Limits::default() };
        let alone = snapshot(&repo, limits, &control, 0).unwrap_err();
        assert_eq!(alone.code(), ReasonCode::GitSnapshotTooLarge);
        for helpers in [1, 3] {
            let ahead = snapshot(&repo, limits, &control, helpers).unwrap_err();
            assert_eq!((ahead.code(), ahead.to_string()), (alone.code(), alone.to_string()));
        }
        // A name the walk refuses, in a directory the helpers list ahead.
        let bad: &std::ffi::OsStr = std::os::unix::ffi::OsStrExt::from_bytes(b"a4/b2/c\xff");
        std::fs::create_dir(repo.join(bad)).unwrap();
        let alone = snapshot(&repo, Limits::default(), &control, 0).unwrap_err();
        assert_eq!(alone.code(), ReasonCode::GitPathRejected);
        for helpers in [1, 3] {
            let ahead = snapshot(&repo, Limits::default(), &control, helpers).unwrap_err();
            assert_eq!((ahead.code(), ahead.to_string()), (alone.code(), alone.to_string()));
        }
    }
}
