//! The one walker: enumerating and opening beneath a held directory, one
//! component at a time, never following a link and never crossing a mount.
//! Source queries (`airlock-source`) and Git snapshots (`airlock-git`) both
//! walk with it, so they obey the same rules.
//!
//! - [`Dir::read_entries`]: at most `max` names, each `statx`ed without
//!   following (`AT_SYMLINK_NOFOLLOW`, with the mount id) into an
//!   [`Entry`] (no entry is opened to learn what it is); an entry gone
//!   between the listing and its `lstat` is left out;
//! - [`Dir::open_child_dir`]: opens a listed directory `O_PATH |
//!   O_NOFOLLOW`, requires it to be the listed inode (`path.race`), a
//!   directory (`path.symlink`, `path.not_directory`) on this directory's
//!   mount (`path.mount_crossing`), and only then opens it for listing
//!   (relative to that very handle, so no name is looked up twice);
//! - [`Dir::open_child_file`]: a listed file by the crate's one checked-file
//!   rule ([`RegularFile`]), plus the same identity and mount checks on the
//!   `O_PATH` probe;
//! - [`Dir::read_child_link`]: a listed link's target, read from an
//!   `O_PATH | O_NOFOLLOW` handle checked to be the listed link.
//!
//! Every child is judged against what the listing saw: a name that now
//! holds another inode (renamed, replaced, swapped for a link) is
//! `path.race`, whatever it became.
//!
//! **Mounts.** Nothing here crosses a mount: a child directory or file on
//! another mount than its parent is `path.mount_crossing`, for source
//! queries and Git snapshots alike. A Git snapshot therefore never copies
//! content from another mount: in the work tree such an entry is skipped
//! (`skipped.mount`, the answer is partial), inside `.git` it refuses the
//! query (a repository whose objects live on another mount is not
//! snapshotted in part). A bind mount of one of airlock's own directories
//! is still caught by identity first (the listed `(dev, ino)` of a mount
//! point is the mounted root's).
//!
//! Entry names are bytes: what a name means (and whether the path grammar
//! accepts it) is the caller's decision.

use crate::checked::RegularFile;
use crate::dir::Dir;
use crate::error::{Error, Result};
use crate::fault::{fstat, is_component, mount_id, Fault, FaultKind};
use crate::resolve::Resolver;
use airlock_core::{ReasonCode, RelPath};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, StatxFlags};
use rustix::io::Errno;
use std::ffi::{CStr, CString};

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

/// One directory entry and its metadata, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name, as the kernel returned it (not necessarily UTF-8).
    pub name: Vec<u8>,
    /// What it is.
    pub kind: EntryKind,
    /// Size in bytes.
    pub size: u64,
    /// Whether any execute bit is set.
    pub executable: bool,
    /// Hard-link count.
    pub nlink: u64,
    /// `(st_dev, st_ino)` (for a mount point: the mounted root's).
    pub dev_ino: (u64, u64),
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, u32),
    /// Status change time (seconds, nanoseconds).
    pub ctime: (i64, u32),
    /// The mount id (`STATX_MNT_ID`; for a mount point: the mount's), to
    /// compare with its directory's [`Dir::mount_id`].
    pub mount_id: u64,
}

impl Entry {
    /// The name as UTF-8, if it is.
    pub fn name_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.name).ok()
    }

    /// The name for messages.
    fn shown(&self) -> String {
        format!("{:?}", String::from_utf8_lossy(&self.name))
    }
}

fn kind_of(mode: u32) -> EntryKind {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => EntryKind::Regular,
        FileType::Directory => EntryKind::Directory,
        FileType::Symlink => EntryKind::Symlink,
        _ => EntryKind::Special,
    }
}

/// The listed entry's name as one component.
fn child_name(entry: &Entry) -> Result<CString, Fault> {
    if !is_component(&entry.name) {
        return Err(Fault::new(FaultKind::NotComponent, "the name is not a single path component"));
    }
    CString::new(entry.name.as_slice())
        .map_err(|_| Fault::new(FaultKind::NotComponent, "the name is not a single path component"))
}

/// Opens the listed `entry` beneath `dir` with `flags` (plus `O_NOFOLLOW |
/// O_CLOEXEC`). The entry was listed: a name now missing, or now a link
/// where `O_DIRECTORY` wanted none, changed meanwhile.
fn open_child(dir: &Dir, name: &CStr, flags: OFlags) -> Result<OwnedFd, Fault> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(dir.as_fd(), name, flags, Mode::empty()).map_err(|e| {
        let kind = match e {
            Errno::NOENT | Errno::LOOP | Errno::NOTDIR => FaultKind::Race,
            _ => FaultKind::Io,
        };
        Fault::syscall(kind, format_args!("openat(dir, {name:?}, {flags:?})"), e)
    })
}

/// The probe check every child gets: still the listed inode.
fn same_as_listed(st: &Stat, entry: &Entry) -> Result<(), Fault> {
    if (st.st_dev, st.st_ino) != entry.dev_ino {
        return Err(Fault::new(FaultKind::Race, "it was replaced since it was listed"));
    }
    Ok(())
}

/// The probe check of a child that holds content: on the parent's mount.
fn same_mount(fd: &OwnedFd, dir_mount: u64) -> Result<(), Fault> {
    if mount_id(fd.as_fd())? != dir_mount {
        return Err(Fault::new(FaultKind::MountCrossing, "it is on another mount"));
    }
    Ok(())
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
            let wanted = StatxFlags::BASIC_STATS | StatxFlags::MNT_ID;
            let st = match rustix::fs::statx(self.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW, wanted) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(e) => {
                    return Err(Error::syscall(ReasonCode::InputUnreadable, format_args!("statx(dir, {name:?})"), e))
                }
            };
            let mode = u32::from(st.stx_mode);
            entries.push(Entry {
                name: bytes.to_vec(),
                kind: kind_of(mode),
                size: st.stx_size,
                executable: mode & 0o111 != 0,
                nlink: u64::from(st.stx_nlink),
                dev_ino: (rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor), st.stx_ino),
                mtime: (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
                ctime: (st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
                mount_id: st.stx_mnt_id,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((entries, more))
    }

    /// The mount id of this directory (`statx` `STATX_MNT_ID`), for
    /// [`Dir::open_child_file`].
    pub fn mount_id(&self) -> Result<u64> {
        Ok(mount_id(self.as_fd())?)
    }

    /// Opens the directory `entry` (just listed from this directory): it
    /// must still be the listed inode (`path.race`), a directory
    /// (`path.symlink`, `path.not_directory`), on this directory's mount
    /// (`path.mount_crossing`).
    pub fn open_child_dir(&self, entry: &Entry) -> Result<Dir> {
        Ok(self.child_dir(entry).map_err(|f| f.context(entry.shown()))?)
    }

    fn child_dir(&self, entry: &Entry) -> Result<Dir, Fault> {
        let name = child_name(entry)?;
        let probe = open_child(self, &name, OFlags::PATH)?;
        let st = fstat(&probe, entry.shown())?;
        same_as_listed(&st, entry)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {}
            FileType::Symlink => return Err(Fault::new(FaultKind::Symlink, "it is a symbolic link")),
            _ => return Err(Fault::new(FaultKind::NotDirectory, "it is not a directory")),
        }
        same_mount(&probe, mount_id(self.as_fd())?)?;
        // The checked handle itself, opened for listing: no second lookup.
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&probe, ".", flags, Mode::empty())
            .map_err(|e| Fault::syscall(FaultKind::Io, "openat(probe, \".\", O_DIRECTORY)", e))?;
        Ok(Dir::from_checked(fd, &st))
    }

    /// Opens the regular file `entry` (just listed from this directory,
    /// whose [`Dir::mount_id`] is `dir_mount`) by the checked-file rule,
    /// its `O_PATH` probe checked to be the listed inode on the same mount:
    /// `path.race`, `path.mount_crossing`, `path.symlink`,
    /// `input.not_regular`, `input.hardlink`.
    pub fn open_child_file(&self, entry: &Entry, dir_mount: u64) -> Result<RegularFile> {
        let opened = child_name(entry).and_then(|name| {
            RegularFile::open_checked(
                |flags| open_child(self, &name, flags),
                |st| {
                    if st.dev_ino != entry.dev_ino {
                        return Err(Fault::new(FaultKind::Race, "it was replaced since it was listed"));
                    }
                    if st.mount != Some(dir_mount) {
                        return Err(Fault::new(FaultKind::MountCrossing, "it is on another mount"));
                    }
                    Ok(())
                },
                u64::MAX,
                true,
            )
        });
        Ok(opened.map_err(|f| f.context(entry.shown()))?)
    }

    /// Reads the target of the link `entry` (just listed from this
    /// directory), at most `max_len` bytes (`input.too_large`), from an
    /// `O_PATH | O_NOFOLLOW` handle checked to be the listed link
    /// (`path.race`). The link is never followed.
    pub fn read_child_link(&self, entry: &Entry, max_len: usize) -> Result<Vec<u8>> {
        Ok(self.child_link(entry, max_len).map_err(|f| f.context(entry.shown()))?)
    }

    fn child_link(&self, entry: &Entry, max_len: usize) -> Result<Vec<u8>, Fault> {
        let name = child_name(entry)?;
        let probe = open_child(self, &name, OFlags::PATH)?;
        let st = fstat(&probe, entry.shown())?;
        same_as_listed(&st, entry)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
            return Err(Fault::new(FaultKind::Race, "it is no longer a symbolic link"));
        }
        let target = rustix::fs::readlinkat(&probe, "", Vec::new())
            .map_err(|e| Fault::syscall(FaultKind::Io, "readlinkat(probe, \"\")", e))?
            .into_bytes();
        if target.len() > max_len {
            return Err(Fault::new(FaultKind::TooLarge, format!("its target is over {max_len} bytes")));
        }
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::ResolverKind;
    use sha2::{Digest, Sha256};
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
        assert_eq!(sub.open_child_dir(link).unwrap_err().code(), ReasonCode::PathSymlink);
        assert_eq!(sub.read_child_link(link, 4096).unwrap(), t.path().join("f").as_os_str().as_encoded_bytes());
        assert_eq!(sub.read_child_link(link, 3).unwrap_err().code(), ReasonCode::InputTooLarge);
        let fifo = inner.iter().find(|e| e.name == b"fifo").unwrap();
        assert_eq!(sub.open_child_dir(fifo).unwrap_err().code(), ReasonCode::PathNotDirectory);
        let mut out = Vec::new();
        assert_eq!(dir.open_child_file(f, dir.mount_id().unwrap()).unwrap().copy_into(&mut out).unwrap(), 11);
        assert_eq!(out, b"hello world");
    }

    fn listed<'a>(entries: &'a [Entry], name: &str) -> &'a Entry {
        entries.iter().find(|e| e.name == name.as_bytes()).unwrap()
    }

    /// Every child is judged against the listing: a directory renamed away
    /// and replaced (by another directory, or by a link to the original)
    /// is `path.race`, and so is a link replaced by another link.
    #[test]
    fn a_child_replaced_since_the_listing_is_a_race() {
        let t = tempfile::tempdir().unwrap();
        for d in ["d", "e"] {
            std::fs::create_dir(t.path().join(d)).unwrap();
        }
        symlink("d", t.path().join("l")).unwrap();
        let dir = open(t.path());
        let (entries, _) = dir.read_entries(10).unwrap();
        std::fs::rename(t.path().join("d"), t.path().join("d-aside")).unwrap();
        std::fs::create_dir(t.path().join("d")).unwrap();
        std::fs::rename(t.path().join("e"), t.path().join("e-aside")).unwrap();
        symlink("e-aside", t.path().join("e")).unwrap();
        std::fs::rename(t.path().join("l"), t.path().join("l-aside")).unwrap();
        symlink("e", t.path().join("l")).unwrap();
        assert_eq!(dir.open_child_dir(listed(&entries, "d")).unwrap_err().code(), ReasonCode::PathRace);
        assert_eq!(dir.open_child_dir(listed(&entries, "e")).unwrap_err().code(), ReasonCode::PathRace);
        assert_eq!(dir.read_child_link(listed(&entries, "l"), 100).unwrap_err().code(), ReasonCode::PathRace);
        std::fs::remove_dir(t.path().join("d")).unwrap();
        assert_eq!(dir.open_child_dir(listed(&entries, "d")).unwrap_err().code(), ReasonCode::PathRace, "gone");
        let (now, _) = dir.read_entries(10).unwrap();
        assert_eq!(dir.read_child_link(listed(&now, "l"), 100).unwrap(), b"e", "the listed link is read");
    }

    /// Runs in a private mount namespace (root only): a tmpfs mounted on a
    /// child directory and a file bind-mounted over a child file are both
    /// `path.mount_crossing`, for directories and files alike.
    #[test]
    fn a_child_on_another_mount_is_refused() {
        crate::testutil::run_in_mount_namespace("walk::tests::mount_crossing_child");
    }

    #[test]
    #[ignore = "run by a_child_on_another_mount_is_refused in a private mount namespace"]
    fn mount_crossing_child() {
        crate::testutil::assert_mount_child();
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        std::fs::create_dir_all(top.join("tmp")).unwrap();
        std::fs::create_dir_all(top.join("plain")).unwrap();
        std::fs::write(top.join("file"), b"under").unwrap();
        std::fs::write(t.path().join("file-src"), b"bound").unwrap();
        rustix::mount::mount("tmpfs", top.join("tmp"), "tmpfs", rustix::mount::MountFlags::empty(), None).unwrap();
        std::fs::write(top.join("tmp/inside"), b"on the tmpfs").unwrap();
        rustix::mount::mount_bind(t.path().join("file-src"), top.join("file")).unwrap();
        let dir = open(&top);
        let (entries, _) = dir.read_entries(10).unwrap();
        let mnt = dir.mount_id().unwrap();
        assert!(dir.open_child_dir(listed(&entries, "plain")).is_ok(), "same mount");
        let err = dir.open_child_dir(listed(&entries, "tmp")).unwrap_err();
        assert_eq!(err.code(), ReasonCode::PathMountCrossing, "{err}");
        let err = dir.open_child_file(listed(&entries, "file"), mnt).unwrap_err();
        assert_eq!(err.code(), ReasonCode::PathMountCrossing, "{err}");
    }

    #[test]
    fn children_are_never_followed() {
        let t = tempfile::tempdir().unwrap();
        symlink("/etc", t.path().join("dirlink")).unwrap();
        symlink("/etc/passwd", t.path().join("filelink")).unwrap();
        let d = open(t.path());
        let (entries, _) = d.read_entries(10).unwrap();
        let mnt = d.mount_id().unwrap();
        assert_eq!(d.open_child_dir(listed(&entries, "dirlink")).unwrap_err().code(), ReasonCode::PathSymlink);
        assert_eq!(d.open_child_file(listed(&entries, "filelink"), mnt).unwrap_err().code(), ReasonCode::PathSymlink);
        assert_eq!(d.read_child_link(listed(&entries, "filelink"), 100).unwrap(), b"/etc/passwd");
        let mut forged = listed(&entries, "filelink").clone();
        forged.name = b"../x".to_vec();
        assert_eq!(d.open_child_file(&forged, mnt).unwrap_err().code(), ReasonCode::PathTraversal);
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
