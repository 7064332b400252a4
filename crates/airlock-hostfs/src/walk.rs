//! Enumerating and reading beneath a held directory, never following a
//! link and never crossing a mount: the primitives of the source broker.
//!
//! - [`Dir::open_dir_beneath`]: a directory resolved beneath a held one;
//! - [`Dir::read_entries`]: at most `max` names, each `lstat`ed (no entry
//!   is opened to learn what it is);
//! - [`Dir::open_child_dir`] / [`Dir::open_child_file`]: open the entry
//!   just listed with `O_NOFOLLOW`, check it is still the same inode on the
//!   same mount, and (for files) that it is regular with one link; a file is
//!   opened `O_PATH` first and reopened non-blocking only after the check,
//!   so a FIFO, socket or device is never opened for reading;
//! - [`RegularFile::read_range`]: a bounded `pread` that hashes what it
//!   read and refuses a file whose size or change time moved meanwhile.
//!
//! Entry names are bytes: what a name means (and whether the path grammar
//! accepts it) is the caller's decision.

use crate::dir::Dir;
use crate::error::{Error, Result};
use crate::resolve::Resolver;
use airlock_core::{ReasonCode, RelPath};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, StatxFlags};
use sha2::{Digest, Sha256};
use std::ffi::CStr;
use std::fs::File;

/// What a directory entry is, from `lstat` (links are never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket, character or block device.
    Special,
}

/// One directory entry and its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name, as the kernel returned it (not necessarily UTF-8).
    pub name: Vec<u8>,
    /// What it is.
    pub kind: EntryKind,
    /// Size in bytes.
    pub size: u64,
    /// Hard-link count.
    pub nlink: u64,
    /// `(st_dev, st_ino)`.
    pub dev_ino: (u64, u64),
}

/// A regular file with one link, open for reading, checked but not yet read.
#[derive(Debug)]
pub struct RegularFile {
    file: File,
    stat: Stat,
}

/// Bytes of one range and their hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRead {
    /// The bytes read.
    pub bytes: Vec<u8>,
    /// Lowercase hex SHA-256 of `bytes`.
    pub sha256_hex: String,
}

pub(crate) fn kind_of(st: &Stat) -> EntryKind {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => EntryKind::Regular,
        FileType::Directory => EntryKind::Directory,
        FileType::Symlink => EntryKind::Symlink,
        _ => EntryKind::Special,
    }
}

pub(crate) fn mount_id(fd: BorrowedFd<'_>) -> Result<u64> {
    rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID)
        .map(|s| s.stx_mnt_id)
        .map_err(|e| Error::syscall(ReasonCode::InputUnreadable, "statx(mnt_id)", e))
}

fn name_cstr(name: &[u8]) -> Result<std::ffi::CString> {
    std::ffi::CString::new(name).map_err(|_| Error::new(ReasonCode::PathControlChar, "an entry name holds NUL"))
}

impl Dir {
    /// Opens the directory `rel` beneath this one (no link at any
    /// component, no mount crossing).
    pub fn open_dir_beneath(&self, resolver: &Resolver, rel: &RelPath) -> Result<Dir> {
        let fd = resolver.open_beneath(self.as_fd(), rel, OFlags::RDONLY | OFlags::DIRECTORY)?;
        Dir::from_fd(fd)
    }

    /// Reads this directory's entries (without `.` and `..`), at most
    /// `max`, each with `lstat` metadata, sorted by name. The flag is true
    /// when more entries were left unread. An entry that vanishes between
    /// the listing and its `lstat` is left out.
    pub fn read_entries(&self, max: usize) -> Result<(Vec<Entry>, bool)> {
        let mut stream = rustix::fs::Dir::read_from(self.as_fd())
            .map_err(|e| Error::syscall(ReasonCode::InputUnreadable, "open(dir, \".\")", e))?;
        let mut entries = Vec::new();
        let mut more = false;
        while let Some(next) = stream.read() {
            let dirent = next.map_err(|e| Error::syscall(ReasonCode::InputUnreadable, "getdents64(dir)", e))?;
            let name: &CStr = dirent.file_name();
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            if entries.len() == max {
                more = true;
                break;
            }
            let st = match rustix::fs::statat(self.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(Error::syscall(ReasonCode::InputUnreadable, "fstatat(dir, name)", e)),
            };
            entries.push(Entry {
                name: bytes.to_vec(),
                kind: kind_of(&st),
                size: st.st_size as u64,
                nlink: st.st_nlink,
                dev_ino: (st.st_dev, st.st_ino),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((entries, more))
    }

    /// Opens the directory `entry` (just listed from this directory) with
    /// `O_NOFOLLOW`: it must still be the same inode, a directory, on the
    /// same mount (`path.race`, `path.symlink`, `path.mount_crossing`).
    pub fn open_child_dir(&self, entry: &Entry) -> Result<Dir> {
        let name = name_cstr(&entry.name)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(self.as_fd(), name.as_c_str(), flags, Mode::empty()).map_err(|e| {
            let code = if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR {
                ReasonCode::PathRace
            } else {
                ReasonCode::InputUnreadable
            };
            Error::syscall(code, "openat(dir, name, O_DIRECTORY | O_NOFOLLOW)", e)
        })?;
        let dir = Dir::from_fd(fd)?;
        if dir.dev_ino() != entry.dev_ino {
            return Err(Error::new(ReasonCode::PathRace, "a directory was replaced while it was listed"));
        }
        if mount_id(dir.as_fd())? != mount_id(self.as_fd())? {
            return Err(Error::new(ReasonCode::PathMountCrossing, "a directory is on another mount"));
        }
        Ok(dir)
    }

    /// The mount id of this directory (`statx` `STATX_MNT_ID`), for
    /// [`Dir::open_child_file`].
    pub fn mount_id(&self) -> Result<u64> {
        mount_id(self.as_fd())
    }

    /// Opens the regular file `entry` (just listed from this directory,
    /// whose [`Dir::mount_id`] is `dir_mount`): `O_PATH | O_NOFOLLOW`
    /// first, checked to be the same regular inode with one link on the
    /// same mount, then reopened non-blocking.
    pub fn open_child_file(&self, entry: &Entry, dir_mount: u64) -> Result<RegularFile> {
        let name = name_cstr(&entry.name)?;
        let probe = rustix::fs::openat(
            self.as_fd(),
            name.as_c_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::syscall(ReasonCode::InputUnreadable, "openat(dir, name, O_PATH | O_NOFOLLOW)", e))?;
        let st = fstat(&probe)?;
        if (st.st_dev, st.st_ino) != entry.dev_ino {
            return Err(Error::new(ReasonCode::PathRace, "a file was replaced while it was listed"));
        }
        check_regular(&st)?;
        if mount_id(probe.as_fd())? != dir_mount {
            return Err(Error::new(ReasonCode::PathMountCrossing, "a file is on another mount"));
        }
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(self.as_fd(), name.as_c_str(), flags, Mode::empty())
            .map_err(|e| Error::syscall(ReasonCode::PathRace, "openat(dir, name, O_RDONLY | O_NOFOLLOW)", e))?;
        RegularFile::confirm(fd, &st)
    }
}

fn fstat(fd: impl AsFd) -> Result<Stat> {
    rustix::fs::fstat(fd).map_err(|e| Error::syscall(ReasonCode::InputUnreadable, "fstat", e))
}

fn check_regular(st: &Stat) -> Result<()> {
    match kind_of(st) {
        EntryKind::Regular => {}
        EntryKind::Symlink => return Err(Error::new(ReasonCode::PathSymlink, "it is a symbolic link")),
        EntryKind::Directory => return Err(Error::new(ReasonCode::InputNotRegular, "it is a directory")),
        EntryKind::Special => {
            return Err(Error::new(ReasonCode::InputNotRegular, "it is not a regular file (FIFO, socket or device)"))
        }
    }
    if st.st_nlink != 1 {
        return Err(Error::new(
            ReasonCode::InputHardlink,
            format!("it has {} hard links; only files with exactly one are read", st.st_nlink),
        ));
    }
    Ok(())
}

impl RegularFile {
    /// Opens `rel` beneath `dir` for reading: `O_PATH` first, checked to be
    /// a regular file with one link (`path.symlink`, `input.not_regular`,
    /// `input.hardlink`), then reopened non-blocking and checked to be the
    /// same inode. No byte is read.
    pub fn open_beneath(resolver: &Resolver, dir: &Dir, rel: &RelPath) -> Result<RegularFile> {
        let probe = resolver.open_beneath(dir.as_fd(), rel, OFlags::PATH)?;
        let st = fstat(&probe)?;
        check_regular(&st)?;
        let fd = resolver.open_beneath(dir.as_fd(), rel, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)?;
        RegularFile::confirm(fd, &st)
    }

    fn confirm(fd: OwnedFd, expected: &Stat) -> Result<RegularFile> {
        let st = fstat(&fd)?;
        if (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino) {
            return Err(Error::new(ReasonCode::PathRace, "the file was replaced while it was opened"));
        }
        check_regular(&st)?;
        Ok(RegularFile { file: File::from(fd), stat: st })
    }

    /// Size when opened.
    pub fn size(&self) -> u64 {
        self.stat.st_size as u64
    }

    /// Reads at most `max` bytes from `offset` with `pread`, hashing them.
    /// A file whose size or change time moved while it was read is refused
    /// (`input.changed`).
    pub fn read_range(&self, offset: u64, max: u64) -> Result<RangeRead> {
        let want = max.min(self.size().saturating_sub(offset));
        let mut bytes = vec![0u8; usize::try_from(want).unwrap_or(usize::MAX)];
        let mut got = 0usize;
        while got < bytes.len() {
            match rustix::io::pread(&self.file, &mut bytes[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(Error::syscall(ReasonCode::InputUnreadable, "pread", e)),
            }
        }
        bytes.truncate(got);
        let after = fstat(&self.file)?;
        let moved = after.st_size != self.stat.st_size
            || (after.st_ctime, after.st_ctime_nsec) != (self.stat.st_ctime, self.stat.st_ctime_nsec)
            || (got as u64) < want;
        if moved {
            return Err(Error::new(ReasonCode::InputChanged, "the file changed while it was read"));
        }
        let sha256_hex = hex::encode(Sha256::digest(&bytes));
        Ok(RangeRead { bytes, sha256_hex })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::ResolverKind;
    use std::os::unix::fs::symlink;

    fn open(path: &std::path::Path) -> Dir {
        Dir::open_ambient(&crate::HostAuthority::ambient(), path).unwrap()
    }

    #[test]
    fn entries_are_lstat_ed_and_sorted_and_bounded() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("b.txt"), b"bb").unwrap();
        std::fs::create_dir(t.path().join("a")).unwrap();
        symlink("/etc/passwd", t.path().join("c-link")).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, t.path().join("d-fifo"), FileType::Fifo, Mode::RUSR | Mode::WUSR, 0)
            .unwrap();
        let dir = open(t.path());
        let (entries, more) = dir.read_entries(10).unwrap();
        assert!(!more);
        let got: Vec<(&[u8], EntryKind)> = entries.iter().map(|e| (e.name.as_slice(), e.kind)).collect();
        assert_eq!(
            got,
            [
                (&b"a"[..], EntryKind::Directory),
                (&b"b.txt"[..], EntryKind::Regular),
                (&b"c-link"[..], EntryKind::Symlink),
                (&b"d-fifo"[..], EntryKind::Special)
            ]
        );
        let (two, more) = dir.read_entries(2).unwrap();
        assert_eq!((two.len(), more), (2, true));
        let (four, more) = dir.read_entries(4).unwrap();
        assert_eq!((four.len(), more), (4, false), "exactly at the bound is not more");
    }

    #[test]
    fn children_open_without_following_and_specials_are_refused_unopened() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), b"hello world").unwrap();
        std::fs::write(t.path().join("outside"), b"x").unwrap();
        std::fs::create_dir(t.path().join("sub")).unwrap();
        std::fs::hard_link(t.path().join("outside"), t.path().join("sub/hard")).unwrap();
        symlink(t.path().join("f"), t.path().join("sub/link")).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, t.path().join("sub/fifo"), FileType::Fifo, Mode::RUSR | Mode::WUSR, 0)
            .unwrap();
        let dir = open(t.path());
        let (entries, _) = dir.read_entries(10).unwrap();
        let f = entries.iter().find(|e| e.name == b"f").unwrap();
        let file = dir.open_child_file(f, dir.mount_id().unwrap()).unwrap();
        let r = file.read_range(6, 100).unwrap();
        assert_eq!(r.bytes, b"world");
        assert_eq!(r.sha256_hex, hex::encode(Sha256::digest(b"world")));
        assert_eq!(file.read_range(11, 5).unwrap().bytes, b"", "at the end");
        assert_eq!(file.read_range(0, 5).unwrap().bytes, b"hello");
        let sub_entry = entries.iter().find(|e| e.name == b"sub").unwrap();
        assert_eq!(
            dir.open_child_file(sub_entry, dir.mount_id().unwrap()).unwrap_err().code(),
            ReasonCode::InputNotRegular
        );
        let sub = dir.open_child_dir(sub_entry).unwrap();
        let (inner, _) = sub.read_entries(10).unwrap();
        let mnt = sub.mount_id().unwrap();
        let code = |n: &[u8]| sub.open_child_file(inner.iter().find(|e| e.name == n).unwrap(), mnt).unwrap_err().code();
        assert_eq!(code(b"hard"), ReasonCode::InputHardlink);
        assert_eq!(code(b"link"), ReasonCode::PathSymlink);
        assert_eq!(code(b"fifo"), ReasonCode::InputNotRegular);
        let link = inner.iter().find(|e| e.name == b"link").unwrap();
        assert_eq!(sub.open_child_dir(link).unwrap_err().code(), ReasonCode::PathRace);
    }

    #[test]
    fn a_swapped_entry_is_a_race() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), b"one").unwrap();
        let dir = open(t.path());
        let (entries, _) = dir.read_entries(10).unwrap();
        // The listed file is moved aside (not removed: a freed inode number
        // may be reused at once) and another file takes its name.
        std::fs::rename(t.path().join("f"), t.path().join("aside")).unwrap();
        std::fs::write(t.path().join("f"), b"two").unwrap();
        assert_eq!(dir.open_child_file(&entries[0], dir.mount_id().unwrap()).unwrap_err().code(), ReasonCode::PathRace);
    }

    #[test]
    fn open_beneath_refuses_links_and_specials_with_both_resolvers() {
        for kind in [ResolverKind::Openat2, ResolverKind::Emulated] {
            if kind == ResolverKind::Openat2 && !Resolver::openat2_supported() {
                continue;
            }
            let resolver = Resolver::with_kind(kind);
            let t = tempfile::tempdir().unwrap();
            std::fs::create_dir(t.path().join("d")).unwrap();
            std::fs::write(t.path().join("d/f"), b"abc").unwrap();
            symlink("/etc", t.path().join("etc")).unwrap();
            symlink("/etc/passwd", t.path().join("d/pw")).unwrap();
            let dir = open(t.path());
            let p = |s: &str| RelPath::parse(s).unwrap();
            assert_eq!(RegularFile::open_beneath(&resolver, &dir, &p("d/f")).unwrap().size(), 3);
            assert_eq!(
                RegularFile::open_beneath(&resolver, &dir, &p("d/pw")).unwrap_err().code(),
                ReasonCode::PathSymlink
            );
            let err = RegularFile::open_beneath(&resolver, &dir, &p("etc/passwd")).unwrap_err();
            assert_eq!(err.code(), ReasonCode::PathSymlink, "{kind:?}");
            assert_eq!(
                RegularFile::open_beneath(&resolver, &dir, &p("d")).unwrap_err().code(),
                ReasonCode::InputNotRegular
            );
            assert!(dir.open_dir_beneath(&resolver, &p("d")).is_ok());
            assert_eq!(dir.open_dir_beneath(&resolver, &p("etc")).unwrap_err().code(), ReasonCode::PathSymlink);
        }
    }
}
