//! What the host learns from `.git/index`: the stat data git recorded for
//! each path, so a snapshot copies a work-tree file's content only when
//! git itself would read it.
//!
//! `git status` trusts an index entry whose recorded size, mode and
//! modification time match the file and that is not *racy* (modified in
//! or after the second the index was written); only the others are
//! hashed. The snapshot applies the same rule, more strictly: a tracked
//! file is recorded by its stat data alone ([`crate::archive::Entry::Stat`],
//! no content) only when its size, executable bit, modification time to
//! the nanosecond all equal the entry's, its ctime equals its mtime (else
//! the driver is told to distrust it anyway), the entry is in stage 0 with
//! no flag that changes how git treats it, and its time is a whole second
//! older than the index. An untracked file never has its content read by
//! a status or diff, so it too is stat-only, but only when the index was
//! read completely (no split index, no sparse directory entries), since an
//! entry missing from a partial reading may be a tracked file.
//!
//! This is airlock's own parser rather than gix's on purpose: gix (a large
//! parser of attacker-controlled data) runs only inside the worker, never
//! in the host process (DESIGN "gix runs only in a worker"). The parser
//! reads only the fixed-width stat fields and the paths, is bounded
//! ([`MAX_ENTRIES`] entries, [`MAX_PATH_BYTES`] a path, [`MAX_PATH_TOTAL`]
//! in all), and fails closed: an index it cannot read in full
//! (a version other than 2–4, a malformed entry, too many entries) gives
//! no entries at all, so every work-tree file is copied, as before. The
//! worst a lying index can do is make a hostile repository's own answer
//! wrong: leaving content out never reads more of the host.

use airlock_hostfs::Entry;
use std::collections::HashMap;

/// The most index entries read; a larger index is not used (every file is
/// copied then). The snapshot holds at most 10,000 files, so a repository
/// it can answer for has a far smaller index.
pub(crate) const MAX_ENTRIES: usize = 100_000;

/// The longest path read (Linux's `PATH_MAX`: no work-tree file has a
/// longer one). A version-4 index builds each path from the last one, so
/// without this an index of a few MB could spell paths of GBs.
const MAX_PATH_BYTES: usize = 4096;

/// The most path bytes read in all: what bounds the memory and time one
/// index costs the host process, whatever its entries spell (a real
/// repository of 100,000 files needs a few MB).
const MAX_PATH_TOTAL: usize = 16 << 20;

/// Names whose content gix reads whatever their stat data says: the
/// per-directory ignore, attribute and submodule files.
const ALWAYS_COPIED: &[&str] = &[".gitignore", ".gitattributes", ".gitmodules"];

/// One index entry's stat data (stage 0 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Recorded {
    mtime: (u32, u32),
    size: u32,
    executable: bool,
    /// A plain stage-0 regular-file entry: no assume-valid, skip-worktree
    /// or intent-to-add flag, and no other stage of the same path.
    plain: bool,
}

/// The index's stat data, by path.
#[derive(Debug, Default)]
pub(crate) struct IndexStat {
    entries: HashMap<String, Recorded>,
    /// Every entry was read: a path missing here is untracked.
    complete: bool,
    /// The index file's own modification time (seconds).
    written: i64,
}

impl IndexStat {
    /// No index known: every file's content is needed.
    pub(crate) fn none() -> IndexStat {
        IndexStat::default()
    }

    /// Reads `bytes` (the whole index file, modified at `written`
    /// seconds); anything it cannot read in full gives [`IndexStat::none`].
    pub(crate) fn parse(bytes: &[u8], written: i64) -> IndexStat {
        parse(bytes).map_or_else(IndexStat::none, |(entries, complete)| IndexStat { entries, complete, written })
    }

    /// Whether a status or diff needs the content of the work-tree
    /// regular file `path`, listed as `file`.
    pub(crate) fn content_needed(&self, path: &str, file: &Entry) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        if ALWAYS_COPIED.contains(&name) {
            return true;
        }
        let Some(entry) = self.entries.get(path) else {
            return !self.complete;
        };
        let (Ok(secs), Ok(size)) = (u32::try_from(file.mtime.0), u32::try_from(file.size)) else {
            return true;
        };
        let trusted = entry.plain
            && entry.size == size
            && entry.executable == file.executable
            && entry.mtime == (secs, file.mtime.1)
            && file.ctime == file.mtime
            && i64::from(secs) < self.written;
        !trusted
    }
}

/// For the fuzz target: parses `bytes` and checks the bounds the parser
/// promises (entries, each path, all paths), then asks of every path read
/// whether its content is needed, for a file of the entry's own stat data.
#[cfg(feature = "fuzzing")]
pub(crate) fn check_bounds(bytes: &[u8]) {
    let written = i64::from(u32::MAX);
    let index = IndexStat::parse(bytes, written);
    assert!(index.entries.len() <= MAX_ENTRIES);
    assert!(index.entries.keys().all(|p| p.len() <= MAX_PATH_BYTES));
    assert!(index.entries.keys().map(String::len).sum::<usize>() <= MAX_PATH_TOTAL);
    for (path, recorded) in &index.entries {
        let mtime = (i64::from(recorded.mtime.0), recorded.mtime.1);
        let file = Entry {
            name: path.rsplit('/').next().unwrap_or(path).as_bytes().to_vec(),
            kind: airlock_hostfs::EntryKind::Regular,
            size: u64::from(recorded.size),
            executable: recorded.executable,
            nlink: 1,
            dev_ino: (0, 0),
            mtime,
            ctime: mtime,
            mount_id: 0,
        };
        let needed = index.content_needed(path, &file);
        // A flagged, conflicted or non-file entry is never trusted; a plain
        // one matching its file, older than the index, always is (but for
        // the names gix reads anyway).
        let always = ALWAYS_COPIED.contains(&std::str::from_utf8(&file.name).unwrap_or(""));
        if !recorded.plain || always {
            assert!(needed, "{path:?}");
        } else if i64::from(recorded.mtime.0) < written {
            assert!(!needed, "{path:?}");
        }
    }
}

/// A cursor over the index bytes; every read is bounds-checked.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.data.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    /// Bytes up to (not including) the next NUL, which is consumed.
    fn until_nul(&mut self) -> Option<&'a [u8]> {
        let rest = self.data.get(self.at..)?;
        let n = rest.iter().position(|b| *b == 0)?;
        let out = &rest[..n];
        self.at += n + 1;
        Some(out)
    }

    /// Git's offset varint (index v4 path compression).
    fn varint(&mut self) -> Option<usize> {
        let mut byte = self.take(1)?[0];
        let mut value = usize::from(byte & 0x7f);
        while byte & 0x80 != 0 {
            byte = self.take(1)?[0];
            value = value.checked_add(1)?.checked_mul(128)? | usize::from(byte & 0x7f);
        }
        Some(value)
    }
}

/// Flag bits of an entry (`flags`, then `extended flags` in v3+).
const FLAG_ASSUME_VALID: u16 = 0x8000;
const FLAG_EXTENDED: u16 = 0x4000;
const STAGE_MASK: u16 = 0x3000;
const EXTENDED_SKIP_WORKTREE: u16 = 0x4000;
const EXTENDED_INTENT_TO_ADD: u16 = 0x2000;
/// Object id length (SHA-1 repositories only: the driver refuses others).
const OID_BYTES: usize = 20;
/// The fixed part of an entry before its id.
const STAT_BYTES: usize = 40;
const MODE_REGULAR: u32 = 0o100644;
const MODE_EXECUTABLE: u32 = 0o100755;
const MODE_DIRECTORY: u32 = 0o040000;

/// The entries, and whether the reading is complete.
fn parse(data: &[u8]) -> Option<(HashMap<String, Recorded>, bool)> {
    let mut b = Bytes { data, at: 0 };
    if b.take(4)? != b"DIRC" {
        return None;
    }
    let version = b.u32()?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = usize::try_from(b.u32()?).ok()?;
    if count > MAX_ENTRIES {
        return None;
    }
    let mut entries: HashMap<String, Recorded> = HashMap::with_capacity(count);
    let mut complete = true;
    let mut previous: Vec<u8> = Vec::new();
    let mut total = 0usize;
    for _ in 0..count {
        let start = b.at;
        let stat = b.take(STAT_BYTES)?;
        let field = |i: usize| u32::from_be_bytes(stat[i * 4..i * 4 + 4].try_into().expect("four bytes"));
        let (mtime, mode, size) = ((field(2), field(3)), field(6), field(9));
        b.take(OID_BYTES)?;
        let flags = b.u16()?;
        let extended = if flags & FLAG_EXTENDED != 0 {
            if version < 3 {
                return None;
            }
            b.u16()?
        } else {
            0
        };
        let path = if version == 4 {
            let strip = b.varint()?;
            let keep = previous.len().checked_sub(strip)?;
            let added = b.until_nul()?;
            if keep.checked_add(added.len())? > MAX_PATH_BYTES {
                return None;
            }
            previous.truncate(keep);
            previous.extend_from_slice(added);
            previous.clone()
        } else {
            let path = b.until_nul()?.to_vec();
            // v2/v3 pad each entry with 1–8 NULs to a multiple of 8 bytes;
            // `until_nul` consumed the first.
            let used = b.at - start;
            b.take((8 - used % 8) % 8)?;
            path
        };
        total = total.checked_add(path.len())?;
        if path.len() > MAX_PATH_BYTES || total > MAX_PATH_TOTAL {
            return None;
        }
        if mode == MODE_DIRECTORY {
            complete = false; // a sparse directory entry: its files are not listed
            continue;
        }
        let Ok(path) = String::from_utf8(path) else {
            complete = false;
            continue;
        };
        let stage = flags & STAGE_MASK;
        let plain = stage == 0
            && flags & FLAG_ASSUME_VALID == 0
            && extended & (EXTENDED_SKIP_WORKTREE | EXTENDED_INTENT_TO_ADD) == 0
            && (mode == MODE_REGULAR || mode == MODE_EXECUTABLE);
        let recorded = Recorded { mtime, size, executable: mode == MODE_EXECUTABLE, plain };
        entries
            .entry(path)
            .and_modify(|seen| seen.plain = false) // more than one stage: a conflict
            .or_insert(recorded);
    }
    // Extensions: a split index ("link") keeps most entries in another file.
    let trailer = data.len().checked_sub(OID_BYTES)?;
    while b.at < trailer {
        let signature = b.take(4)?;
        let size = usize::try_from(b.u32()?).ok()?;
        if signature == b"link" || signature == b"sdir" {
            complete = false;
        }
        b.take(size)?;
    }
    if b.at != trailer {
        return None;
    }
    Some((entries, complete))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_git::git;
    use std::os::unix::fs::MetadataExt;

    /// `path` as the walker lists it.
    fn host(path: &std::path::Path) -> Entry {
        let parent = path.parent().unwrap();
        let dir = airlock_hostfs::Dir::open_ambient(&airlock_hostfs::HostAuthority::ambient(), parent).unwrap();
        let name = path.file_name().unwrap().as_encoded_bytes();
        dir.read_entries(100).unwrap().0.into_iter().find(|e| e.name == name).unwrap()
    }

    /// A repository whose files are a second older than its index.
    fn repo(version: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        git(t.path(), &["init", "-q"]);
        git(t.path(), &["config", "index.version", version]);
        for name in ["a.txt", "dir/b.txt", "dir/deeper/c.txt", ".gitignore"] {
            let p = t.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, name).unwrap();
        }
        git(t.path(), &["add", "-A"]);
        git(t.path(), &["commit", "-qm", "x"]);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        git(t.path(), &["update-index", "--really-refresh"]);
        t
    }

    fn read(t: &tempfile::TempDir) -> IndexStat {
        let index = t.path().join(".git/index");
        let written = std::fs::metadata(&index).unwrap().mtime();
        IndexStat::parse(&std::fs::read(index).unwrap(), written)
    }

    #[test]
    fn unchanged_tracked_files_need_no_content_in_every_index_version() {
        for version in ["2", "3", "4"] {
            let t = repo(version);
            let index = read(&t);
            assert!(index.complete, "v{version}");
            for name in ["a.txt", "dir/b.txt", "dir/deeper/c.txt"] {
                assert!(!index.content_needed(name, &host(&t.path().join(name))), "v{version} {name}");
            }
            // Ignore files are always read by gix.
            assert!(index.content_needed(".gitignore", &host(&t.path().join(".gitignore"))));
            // Untracked, and the index is complete: no content.
            std::fs::write(t.path().join("new.txt"), "n").unwrap();
            assert!(!index.content_needed("new.txt", &host(&t.path().join("new.txt"))));
        }
    }

    #[test]
    fn any_difference_or_doubt_needs_the_content() {
        let t = repo("2");
        let index = read(&t);
        let a = host(&t.path().join("a.txt"));
        let changed = [
            Entry { size: a.size + 1, ..a.clone() },
            Entry { executable: !a.executable, ..a.clone() },
            Entry { mtime: (a.mtime.0, a.mtime.1 ^ 1), ctime: (a.mtime.0, a.mtime.1 ^ 1), ..a.clone() },
            Entry { ctime: (a.ctime.0 + 1, a.ctime.1), ..a.clone() },
        ];
        for file in changed {
            assert!(index.content_needed("a.txt", &file), "{file:?}");
        }
        // Racy: modified in the second the index was written.
        let racy = IndexStat { written: a.mtime.0, ..read(&t) };
        assert!(racy.content_needed("a.txt", &a));
        // No index, or one that does not parse: everything is copied.
        for broken in [IndexStat::none(), IndexStat::parse(b"DIRC\0\0\0\x02\0\0\0\x05", i64::MAX)] {
            assert!(broken.content_needed("a.txt", &a));
            assert!(broken.content_needed("untracked.txt", &a));
        }
    }

    #[test]
    fn truncated_or_corrupt_indexes_give_nothing() {
        let t = repo("4");
        let bytes = std::fs::read(t.path().join(".git/index")).unwrap();
        // Every cut inside the entries (the cache-tree extension follows them).
        let entries_end = bytes.windows(4).position(|w| w == b"TREE").unwrap();
        for cut in 0..entries_end {
            let index = IndexStat::parse(&bytes[..cut], i64::MAX);
            assert!(index.entries.is_empty() && !index.complete, "cut at {cut}");
        }
        let mut version = bytes.clone();
        version[7] = 9;
        assert!(IndexStat::parse(&version, i64::MAX).entries.is_empty());
        // Any byte of it changed to any of a few hostile values: no panic,
        // and never more entries than the index holds.
        for at in 0..bytes.len() {
            for value in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut hostile = bytes.clone();
                hostile[at] = value;
                assert!(IndexStat::parse(&hostile, i64::MAX).entries.len() <= 3, "byte {at} = {value:#x}");
            }
        }
    }

    /// Git's offset varint, as `Bytes::varint` reads it.
    fn varint(mut value: usize) -> Vec<u8> {
        let mut out = vec![(value & 0x7f) as u8];
        value >>= 7;
        while value != 0 {
            value -= 1;
            out.insert(0, 0x80 | (value & 0x7f) as u8);
            value >>= 7;
        }
        out
    }

    /// A version-4 index of `count` entries; each strips `strip(previous
    /// length)` bytes of the last path and adds `add` bytes; then the
    /// trailer.
    fn v4(count: u32, add: usize, strip: impl Fn(usize) -> usize) -> Vec<u8> {
        let mut bytes = b"DIRC".to_vec();
        bytes.extend_from_slice(&4u32.to_be_bytes());
        bytes.extend_from_slice(&count.to_be_bytes());
        let mut previous = 0;
        for _ in 0..count {
            let mut stat = [0u8; STAT_BYTES];
            stat[24..28].copy_from_slice(&MODE_REGULAR.to_be_bytes());
            bytes.extend_from_slice(&stat);
            bytes.extend_from_slice(&[0u8; OID_BYTES]);
            bytes.extend_from_slice(&0x0fffu16.to_be_bytes());
            let cut = strip(previous);
            bytes.extend(varint(cut));
            bytes.extend(std::iter::repeat_n(b'a', add));
            bytes.push(0);
            previous = previous - cut + add;
        }
        bytes.extend_from_slice(&[0u8; OID_BYTES]);
        bytes
    }

    #[test]
    fn varints_round_trip() {
        for value in [0, 1, 127, 128, 4_000, 16_511, 1 << 20] {
            let bytes = varint(value);
            assert_eq!(Bytes { data: &bytes, at: 0 }.varint(), Some(value));
        }
    }

    #[test]
    fn an_index_whose_paths_grow_without_end_gives_nothing_and_stays_small() {
        // 20,000 entries, each keeping the last path and adding 1,000
        // bytes: 21 MB of index (under the snapshot's 64 MiB a file),
        // whose paths together would be 200 GB held in the host process.
        let hostile = IndexStat::parse(&v4(20_000, 1_000, |_| 0), i64::MAX);
        assert!(hostile.entries.is_empty() && !hostile.complete);
        // Paths up to the bound still read.
        let fine = IndexStat::parse(&v4(4, 1_000, |_| 0), i64::MAX);
        assert_eq!((fine.entries.len(), fine.complete), (4, true));
        // Paths each under the bound, whose total passes its own bound.
        let many = |count| IndexStat::parse(&v4(count, 4_000, |previous| previous), i64::MAX);
        let under = (MAX_PATH_TOTAL / 4_000) as u32;
        assert!(many(under).complete, "{under} paths of 4,000 bytes are within {MAX_PATH_TOTAL}");
        assert!(!many(under + 1).complete && many(under + 1).entries.is_empty());
    }

    #[test]
    fn skip_worktree_assume_valid_and_split_indexes_are_not_trusted() {
        let t = repo("3");
        git(t.path(), &["update-index", "--skip-worktree", "a.txt"]);
        git(t.path(), &["update-index", "--assume-unchanged", "dir/b.txt"]);
        let index = read(&t);
        assert!(index.content_needed("a.txt", &host(&t.path().join("a.txt"))));
        assert!(index.content_needed("dir/b.txt", &host(&t.path().join("dir/b.txt"))));
        assert!(!index.content_needed("dir/deeper/c.txt", &host(&t.path().join("dir/deeper/c.txt"))));

        let split = repo("2");
        git(split.path(), &["update-index", "--split-index"]);
        let index = read(&split);
        assert!(!index.complete);
        std::fs::write(split.path().join("new.txt"), "n").unwrap();
        assert!(index.content_needed("new.txt", &host(&split.path().join("new.txt"))));
    }
}
