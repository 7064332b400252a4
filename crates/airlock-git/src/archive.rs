//! The snapshot archive: one private file, strictly framed.
//!
//! ```text
//! "AIRLOCK-GIT-SNAPSHOT-1\n"
//! record*   where record = tag u8, path_len u16 BE, path
//!             'D' directory
//!             'F' file        mtime i64 BE s, u32 BE ns; size u64 BE, bytes
//!             'X' executable  the same
//!             'S' stat-only   mtime i64 BE s, u32 BE ns; size u64 BE (no bytes)
//!             'T' executable stat-only, the same
//!             'L' link        target_len u16 BE, target
//! 'E' count u64 BE            the number of records before it; then EOF
//! ```
//!
//! Paths are repository-relative, `/`-separated, and pass [`check_path`];
//! a record's parent directory must have been recorded before it; no path
//! appears twice, and no two differ only in ASCII case. The reader enforces
//! every rule and every [`Limits`] bound again: it trusts nothing it reads.
//!
//! A stat-only record is a work-tree file whose content a query does not
//! need (`index_stat.rs`): the driver creates it sparse, with its
//! size and time, so gix trusts the index's stat data for it as git does
//! on the host. Its size counts against no content bound (it is never
//! read), only against `i64::MAX`.

use crate::error::GitError;
use crate::limits::Limits;
use airlock_core::ReasonCode;
use std::collections::hash_map::Entry as Slot;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};

/// The archive's first bytes.
pub const MAGIC: &[u8] = b"AIRLOCK-GIT-SNAPSHOT-2\n";
/// The longest path or link target.
pub const MAX_PATH_BYTES: usize = 4096;
/// The deepest path, in components.
pub const MAX_DEPTH: usize = 64;

/// The archive's framing bounds its size.
impl Limits {
    /// The largest archive a snapshot within these limits can produce: the
    /// content, plus per record (at most `max_files` files and as many
    /// directories) a tag, a path of at most 4,096 bytes and 20 bytes of
    /// size and time, plus the header and end record. A staging pool can
    /// reserve this before the walk and release the difference after it
    /// ([`crate::SnapshotStats::archive_bytes`] is the real size).
    pub fn max_archive_bytes(&self) -> u64 {
        let per_record = 1 + 2 + MAX_PATH_BYTES as u64 + 20;
        let header = MAGIC.len() as u64 + 9;
        self.max_bytes + 2 * self.max_files * per_record + header
    }
}

/// One archive record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory.
    Dir(String),
    /// A regular file of `size` bytes (its bytes follow in the archive).
    File {
        /// Its path.
        path: String,
        /// Its size.
        size: u64,
        /// Whether it is executable.
        executable: bool,
        /// Modification time on the host (seconds, nanoseconds), kept so
        /// gix can trust the index's stat data as git does on the host.
        mtime: (i64, u32),
    },
    /// A regular file recorded by its stat data alone.
    Stat(StatOnly),
    /// A symbolic link (recorded, never followed).
    Link {
        /// Its path.
        path: String,
        /// Its target, as bytes.
        target: Vec<u8>,
    },
}

/// A regular file recorded by its stat data alone: its content was not
/// copied (the driver creates it sparse, `size` bytes long, unless its
/// index entry shows it unchanged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatOnly {
    /// Its path.
    pub path: String,
    /// Its size.
    pub size: u64,
    /// Whether it is executable.
    pub executable: bool,
    /// Modification time on the host (seconds, nanoseconds).
    pub mtime: (i64, u32),
}

impl Entry {
    /// The entry's path.
    pub fn path(&self) -> &str {
        match self {
            Entry::Dir(p) => p,
            Entry::File { path, .. } | Entry::Stat(StatOnly { path, .. }) | Entry::Link { path, .. } => path,
        }
    }
}

fn rejected(msg: String) -> GitError {
    GitError::new(ReasonCode::GitPathRejected, msg)
}

/// Checks a repository-relative path: normal `/`-separated components (no
/// empty, `.` or `..`), no leading `/`, no NUL, CR or LF byte, no backslash,
/// components of at most 255 bytes, at most [`MAX_DEPTH`] components and
/// [`MAX_PATH_BYTES`] bytes. `.git` (in any case) may only be the first
/// component, spelled exactly `.git`.
pub fn check_path(p: &str) -> Result<(), GitError> {
    if p.is_empty() || p.len() > MAX_PATH_BYTES {
        return Err(rejected(format!("path {p:?} is empty or longer than {MAX_PATH_BYTES} bytes")));
    }
    if p.bytes().any(|b| matches!(b, 0 | b'\r' | b'\n' | b'\\')) {
        return Err(rejected(format!("path {p:?} holds a NUL, CR, LF or backslash byte")));
    }
    // Both ends check every path of a snapshot: nothing is allocated here
    // for an ASCII path.
    if p.bytes().filter(|b| *b == b'/').count() >= MAX_DEPTH {
        return Err(rejected(format!("path {p:?} is deeper than {MAX_DEPTH} levels")));
    }
    for (i, c) in p.split('/').enumerate() {
        if c.is_empty() || c == "." || c == ".." || c.len() > 255 {
            return Err(rejected(format!("path {p:?} has an empty, `.`, `..` or over-long component")));
        }
        if airlock_core::path::folds_to(c, ".git") && (i > 0 || c != ".git") {
            return Err(rejected(format!("path {p:?} holds a nested or case-folded .git")));
        }
    }
    Ok(())
}

/// Writes records (hashing nothing itself: the caller wraps the sink),
/// refusing a path [`check_path`] refuses or one that repeats another
/// but for case (as `airlock_core::path::fold_key` folds it).
pub struct Writer<W: Write> {
    out: W,
    count: u64,
    folded: HashSet<String>,
}

impl<W: Write> Writer<W> {
    /// Starts an archive on `out`.
    pub fn new(mut out: W) -> Result<Self, GitError> {
        out.write_all(MAGIC).map_err(GitError::io("writing the snapshot"))?;
        Ok(Writer { out, count: 0, folded: HashSet::new() })
    }

    fn header(&mut self, tag: u8, path: &str) -> Result<(), GitError> {
        check_path(path)?;
        if !self.folded.insert(airlock_core::path::fold_key(path)) {
            return Err(rejected(format!("{path:?} collides with another path that differs only in case")));
        }
        self.count += 1;
        let [high, low] = (path.len() as u16).to_be_bytes();
        self.out.write_all(&[tag, high, low]).map_err(GitError::io("writing the snapshot"))?;
        self.out.write_all(path.as_bytes()).map_err(GitError::io("writing the snapshot"))
    }

    /// Records a directory.
    pub fn dir(&mut self, path: &str) -> Result<(), GitError> {
        self.header(b'D', path)
    }

    /// Records a file of `size` bytes; `fill` must write exactly that many.
    pub fn file(
        &mut self,
        path: &str,
        size: u64,
        executable: bool,
        mtime: (i64, u32),
        fill: impl FnOnce(&mut W) -> Result<u64, GitError>,
    ) -> Result<(), GitError> {
        self.header(if executable { b'X' } else { b'F' }, path)?;
        self.time_and_size(mtime, size)?;
        let wrote = fill(&mut self.out)?;
        if wrote != size {
            return Err(GitError::new(ReasonCode::InputChanged, format!("{path:?} changed size while it was copied")));
        }
        Ok(())
    }

    /// Records a file by its stat data alone (no content follows).
    pub fn stat_only(&mut self, path: &str, size: u64, executable: bool, mtime: (i64, u32)) -> Result<(), GitError> {
        if size > i64::MAX as u64 {
            return Err(rejected(format!("{path:?} has a size no file can have")));
        }
        self.header(if executable { b'T' } else { b'S' }, path)?;
        self.time_and_size(mtime, size)
    }

    fn time_and_size(&mut self, mtime: (i64, u32), size: u64) -> Result<(), GitError> {
        let mut t = [0u8; 20];
        t[..8].copy_from_slice(&mtime.0.to_be_bytes());
        t[8..12].copy_from_slice(&mtime.1.to_be_bytes());
        t[12..].copy_from_slice(&size.to_be_bytes());
        self.out.write_all(&t).map_err(GitError::io("writing the snapshot"))
    }

    /// Records a link.
    pub fn link(&mut self, path: &str, target: &[u8]) -> Result<(), GitError> {
        if target.is_empty() || target.len() > MAX_PATH_BYTES {
            return Err(rejected(format!("link {path:?} has an empty or over-long target")));
        }
        self.header(b'L', path)?;
        self.out.write_all(&(target.len() as u16).to_be_bytes()).map_err(GitError::io("writing the snapshot"))?;
        self.out.write_all(target).map_err(GitError::io("writing the snapshot"))
    }

    /// Ends the archive and returns the sink.
    pub fn finish(mut self) -> Result<W, GitError> {
        self.out.write_all(b"E").map_err(GitError::io("writing the snapshot"))?;
        self.out.write_all(&self.count.to_be_bytes()).map_err(GitError::io("writing the snapshot"))?;
        self.out.flush().map_err(GitError::io("writing the snapshot"))?;
        Ok(self.out)
    }
}

/// Reads an archive strictly, calling `sink` for every record (with a
/// reader of exactly the file's bytes for files), enforcing `limits`.
pub struct Reader<R: Read> {
    input: R,
    limits: Limits,
    /// Each path read, by its fold key; the path itself only where it is
    /// not its own key (one set tells a repeated path from a case collision).
    folded: HashMap<String, Option<Box<str>>>,
    dirs: HashSet<String>,
    files: u64,
    bytes: u64,
    count: u64,
}

fn bad(msg: impl Into<String>) -> GitError {
    GitError::new(ReasonCode::GitPathRejected, format!("malformed snapshot: {}", msg.into()))
}

impl<R: Read> Reader<R> {
    /// Checks the magic and prepares to read.
    pub fn new(mut input: R, limits: Limits) -> Result<Self, GitError> {
        let mut magic = vec![0u8; MAGIC.len()];
        input.read_exact(&mut magic).map_err(|_| bad("short header"))?;
        if magic != MAGIC {
            return Err(bad("wrong header"));
        }
        Ok(Reader { input, limits, folded: HashMap::new(), dirs: HashSet::new(), files: 0, bytes: 0, count: 0 })
    }

    fn u16(&mut self) -> Result<u16, GitError> {
        let mut b = [0u8; 2];
        self.input.read_exact(&mut b).map_err(|_| bad("truncated"))?;
        Ok(u16::from_be_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, GitError> {
        let mut b = [0u8; 8];
        self.input.read_exact(&mut b).map_err(|_| bad("truncated"))?;
        Ok(u64::from_be_bytes(b))
    }

    fn bytes(&mut self, n: usize) -> Result<Vec<u8>, GitError> {
        let mut b = vec![0u8; n];
        self.input.read_exact(&mut b).map_err(|_| bad("truncated"))?;
        Ok(b)
    }

    /// A record's modification time: seconds, then nanoseconds below 10⁹.
    fn mtime(&mut self, path: &str) -> Result<(i64, u32), GitError> {
        let secs = self.u64()? as i64;
        let mut ns = [0u8; 4];
        self.input.read_exact(&mut ns).map_err(|_| bad("truncated"))?;
        let nanos = u32::from_be_bytes(ns);
        if nanos >= 1_000_000_000 {
            return Err(bad(format!("{path:?} has a bad modification time")));
        }
        Ok((secs, nanos))
    }

    fn path(&mut self) -> Result<String, GitError> {
        let n = self.u16()? as usize;
        if n > MAX_PATH_BYTES {
            return Err(rejected(format!("a path of {n} bytes")));
        }
        let raw = self.bytes(n)?;
        let p = String::from_utf8(raw).map_err(|_| rejected("a path that is not UTF-8".into()))?;
        check_path(&p)?;
        if let Some((parent, _)) = p.rsplit_once('/') {
            if !self.dirs.contains(parent) {
                return Err(rejected(format!("{p:?} comes before its directory (or its parent is not a directory)")));
            }
        }
        match self.folded.entry(airlock_core::path::fold_key(&p)) {
            Slot::Occupied(earlier) => {
                let earlier = earlier.get().as_deref().unwrap_or(earlier.key());
                if earlier == p {
                    return Err(rejected(format!("{p:?} appears twice")));
                }
                return Err(rejected(format!("{p:?} collides with another path that differs only in case")));
            }
            Slot::Vacant(slot) => {
                let own = (*slot.key() != p).then(|| p.clone().into_boxed_str());
                slot.insert(own);
            }
        }
        Ok(p)
    }

    /// Reads every record. For a file, `sink` gets a reader limited to its
    /// bytes and must consume all of them.
    pub fn read_all(
        mut self,
        mut sink: impl FnMut(Entry, Option<&mut dyn Read>) -> Result<(), GitError>,
    ) -> Result<(), GitError> {
        loop {
            let mut tag = [0u8; 1];
            self.input.read_exact(&mut tag).map_err(|_| bad("no end record"))?;
            if tag[0] == b'E' {
                let count = self.u64()?;
                if count != self.count {
                    return Err(bad(format!("end record says {count} records, read {}", self.count)));
                }
                let mut rest = [0u8; 1];
                if self.input.read(&mut rest).map_err(GitError::io("reading the snapshot"))? != 0 {
                    return Err(bad("bytes after the end record"));
                }
                return Ok(());
            }
            self.count += 1;
            if self.count > self.limits.max_files.saturating_mul(2) {
                return Err(GitError::new(ReasonCode::GitSnapshotTooLarge, "too many records"));
            }
            match tag[0] {
                b'D' => {
                    let p = self.path()?;
                    self.dirs.insert(p.clone());
                    sink(Entry::Dir(p), None)?;
                }
                b'F' | b'X' => {
                    let path = self.path()?;
                    let mtime = self.mtime(&path)?;
                    let size = self.u64()?;
                    self.files += 1;
                    self.bytes = self.bytes.saturating_add(size);
                    self.limits.check(self.files, self.bytes, size, &path)?;
                    let shown = format!("{path:?}");
                    let entry = Entry::File { path, size, executable: tag[0] == b'X', mtime };
                    let mut take = (&mut self.input).take(size);
                    sink(entry, Some(&mut take))?;
                    if take.limit() != 0 {
                        return Err(bad(format!("{shown} was not read to its end")));
                    }
                }
                b'S' | b'T' => {
                    let path = self.path()?;
                    let mtime = self.mtime(&path)?;
                    let size = self.u64()?;
                    if size > i64::MAX as u64 {
                        return Err(bad(format!("{path:?} has a size no file can have")));
                    }
                    self.files += 1;
                    self.limits.check(self.files, self.bytes, 0, &path)?;
                    sink(Entry::Stat(StatOnly { path, size, executable: tag[0] == b'T', mtime }), None)?;
                }
                b'L' => {
                    let path = self.path()?;
                    let n = self.u16()? as usize;
                    if n == 0 || n > MAX_PATH_BYTES {
                        return Err(rejected(format!("link {path:?} has an empty or over-long target")));
                    }
                    let target = self.bytes(n)?;
                    self.files += 1;
                    self.limits.check(self.files, self.bytes, 0, &path)?;
                    sink(Entry::Link { path, target }, None)?;
                }
                other => return Err(bad(format!("unknown record tag {other:#x}"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8]) -> Result<Vec<Entry>, GitError> {
        let mut out = Vec::new();
        Reader::new(bytes, Limits::default())?.read_all(|e, r| {
            if let Some(r) = r {
                std::io::copy(r, &mut std::io::sink()).unwrap();
            }
            out.push(e);
            Ok(())
        })?;
        Ok(out)
    }

    fn raw(records: &[(u8, &str)]) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        for (tag, p) in records {
            v.push(*tag);
            v.extend_from_slice(&(p.len() as u16).to_be_bytes());
            v.extend_from_slice(p.as_bytes());
            if *tag == b'F' {
                v.extend_from_slice(&[0u8; 12]);
                v.extend_from_slice(&1u64.to_be_bytes());
                v.push(b'x');
            }
        }
        v.push(b'E');
        v.extend_from_slice(&(records.len() as u64).to_be_bytes());
        v
    }

    #[test]
    fn round_trip() {
        let mut w = Writer::new(Vec::new()).unwrap();
        w.dir(".git").unwrap();
        w.file(".git/HEAD", 3, false, (1, 2), |o| {
            o.write_all(b"abc").unwrap();
            Ok(3)
        })
        .unwrap();
        w.link("l", b"/etc/passwd").unwrap();
        w.stat_only("big", 5 << 30, true, (7, 8)).unwrap();
        let bytes = w.finish().unwrap();
        let got = read(&bytes).unwrap();
        assert_eq!(got.len(), 4);
        assert_eq!(got[2], Entry::Link { path: "l".into(), target: b"/etc/passwd".to_vec() });
        // A stat-only file is over the 64 MiB file bound but holds no content.
        assert_eq!(
            got[3],
            Entry::Stat(StatOnly { path: "big".into(), size: 5 << 30, executable: true, mtime: (7, 8) })
        );
    }

    #[test]
    fn hostile_paths_are_rejected() {
        for p in
            ["../x", "a/../b", "/etc/passwd", "a//b", "./a", "a\rb", "a\nb", "a\\b", "sub/.git", ".GIT", "a/.Git/x"]
        {
            assert!(check_path(p).is_err(), "{p:?} accepted");
            let e = read(&raw(&[(b'F', p)])).unwrap_err();
            assert_eq!(e.code(), ReasonCode::GitPathRejected, "{p:?}");
        }
        check_path(".git/objects/ab/cdef").unwrap();
        check_path("src/main.rs").unwrap();
    }

    #[test]
    fn duplicates_case_collisions_and_orphans_are_rejected() {
        assert!(read(&raw(&[(b'F', "a"), (b'F', "a")])).unwrap_err().message().contains("twice"));
        assert!(read(&raw(&[(b'F', "README"), (b'F', "readme")])).unwrap_err().message().contains("case"));
        assert!(read(&raw(&[(b'F', "d/x")])).unwrap_err().message().contains("before its directory"));
        // A file is not a directory: nothing may be placed beneath it.
        assert!(read(&raw(&[(b'F', "d"), (b'F', "d/x")])).is_err());
        read(&raw(&[(b'D', "d"), (b'F', "d/x")])).unwrap();
    }

    #[test]
    fn framing_is_strict() {
        let good = raw(&[(b'F', "a")]);
        read(&good).unwrap();
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(read(&trailing).is_err());
        assert!(read(&good[..good.len() - 3]).is_err());
        let mut count = good.clone();
        let n = count.len();
        count[n - 1] = 2;
        assert!(read(&count).is_err());
        assert!(read(b"NOT-AN-ARCHIVE").is_err());
    }

    #[test]
    fn the_archive_bound_covers_a_full_archive() {
        let l = Limits { max_bytes: 10, max_file_bytes: 10, max_files: 2 };
        let mut w = Writer::new(Vec::new()).unwrap();
        let long = "d".repeat(255);
        let mut dir = String::new();
        for _ in 0..2 {
            dir = if dir.is_empty() { long.clone() } else { format!("{dir}/{}", "e".repeat(255)) };
            w.dir(&dir).unwrap();
        }
        for i in 0..2u8 {
            let path = format!("{dir}/{}", (b'a' + i) as char);
            w.file(&path, 5, false, (0, 0), |o| {
                std::io::Write::write_all(o, b"12345").unwrap();
                Ok(5)
            })
            .unwrap();
        }
        let bytes = w.finish().unwrap();
        assert!((bytes.len() as u64) <= l.max_archive_bytes(), "{} > {}", bytes.len(), l.max_archive_bytes());
    }
}
