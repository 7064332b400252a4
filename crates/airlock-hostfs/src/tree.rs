//! Walking a directory tree beneath a held handle, one component at a time:
//! list a directory's entries without following any, open a child directory
//! (`O_NOFOLLOW`, same mount only), open a child regular file (`O_PATH`
//! check, then a non-blocking reopen of the same inode), read a child link's
//! target. Used to copy a repository into a private snapshot; nothing here
//! ever follows a symbolic link or leaves the directory it starts from.

use crate::dir::Dir;
use crate::error::{Error, Result};
use crate::walk::{kind_of, mount_id, EntryKind};
use airlock_core::ReasonCode;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, Mode, OFlags, Stat};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// One entry of a listed directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    /// The entry's name (one component).
    pub name: OsString,
    /// Its kind, from `fstatat(AT_SYMLINK_NOFOLLOW)`.
    pub kind: EntryKind,
    /// Its size in bytes as listed.
    pub size: u64,
    /// Whether any execute bit is set.
    pub executable: bool,
    /// Its hard-link count.
    pub nlink: u64,
    /// Its `(st_dev, st_ino)` as listed (for a mount point: the mounted
    /// root's).
    pub dev_ino: (u64, u64),
}

/// A child regular file opened for reading (checked, not yet read).
#[derive(Debug)]
pub struct ChildFile {
    file: File,
    stat: Stat,
}

fn err(code: ReasonCode, call: &str, name: &OsStr, e: rustix::io::Errno) -> Error {
    Error::syscall(code, format_args!("{call}(dirfd, {:?})", name), e)
}

/// A single component: not empty, not `.` or `..`, no `/` or NUL.
fn check_name(name: &OsStr) -> Result<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Error::new(ReasonCode::PathTraversal, format!("{name:?} is not a single path component")));
    }
    Ok(())
}

impl Dir {
    /// Lists the entries of this directory (not `.` and `..`), sorted by
    /// name, each looked at with `fstatat(AT_SYMLINK_NOFOLLOW)`. More than
    /// `max_entries` entries is `limit.inputs`.
    pub fn list_tree(&self, max_entries: usize) -> Result<Vec<TreeEntry>> {
        let mut dir = rustix::fs::Dir::read_from(self.as_fd())
            .map_err(|e| Error::syscall(ReasonCode::InputUnreadable, "opendir(dirfd)", e))?;
        let mut out = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(|e| Error::syscall(ReasonCode::InputUnreadable, "readdir(dirfd)", e))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if out.len() == max_entries {
                return Err(Error::new(
                    ReasonCode::LimitInputs,
                    format!("a directory holds more than {max_entries} entries"),
                ));
            }
            let name = OsString::from_vec(name.to_vec());
            let st = rustix::fs::statat(self.as_fd(), name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| err(ReasonCode::PathRace, "fstatat", &name, e))?;
            out.push(TreeEntry {
                kind: kind_of(&st),
                size: st.st_size as u64,
                executable: st.st_mode & 0o111 != 0,
                nlink: st.st_nlink,
                dev_ino: (st.st_dev, st.st_ino),
                name,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Opens the child directory `name` (`O_DIRECTORY | O_NOFOLLOW`): a
    /// link is `path.symlink`, a directory on another mount is
    /// `path.mount_crossing`.
    pub fn open_tree_dir(&self, name: &OsStr) -> Result<Dir> {
        check_name(name)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(self.as_fd(), name, flags, Mode::empty()).map_err(|e| {
            let code = match e {
                rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => ReasonCode::PathSymlink,
                rustix::io::Errno::NOENT => ReasonCode::PathRace,
                _ => ReasonCode::InputUnreadable,
            };
            err(code, "openat(O_DIRECTORY|O_NOFOLLOW)", name, e)
        })?;
        let child = Dir::from_fd(fd)?;
        if mount_id(child.as_fd())? != mount_id(self.as_fd())? {
            return Err(Error::new(ReasonCode::PathMountCrossing, format!("{name:?} is on another mount")));
        }
        Ok(child)
    }

    /// Opens the child regular file `name` for reading: first `O_PATH |
    /// O_NOFOLLOW` and checked (a regular file of at most `max_bytes`), then
    /// reopened `O_RDONLY | O_NONBLOCK | O_NOFOLLOW` and required to be the
    /// same inode. A refused entry is never opened for reading.
    pub fn open_tree_file(&self, name: &OsStr, max_bytes: u64) -> Result<ChildFile> {
        check_name(name)?;
        let probe: OwnedFd =
            rustix::fs::openat(self.as_fd(), name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| err(ReasonCode::PathRace, "openat(O_PATH|O_NOFOLLOW)", name, e))?;
        let st = rustix::fs::fstat(&probe).map_err(|e| err(ReasonCode::InputUnreadable, "fstat", name, e))?;
        check_file(&st, name, max_bytes)?;
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(self.as_fd(), name, flags, Mode::empty())
            .map_err(|e| err(ReasonCode::PathRace, "openat(O_RDONLY|O_NOFOLLOW)", name, e))?;
        let again = rustix::fs::fstat(&fd).map_err(|e| err(ReasonCode::InputUnreadable, "fstat", name, e))?;
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
            return Err(Error::new(ReasonCode::PathRace, format!("{name:?} was replaced while it was opened")));
        }
        check_file(&again, name, max_bytes)?;
        Ok(ChildFile { file: File::from(fd), stat: again })
    }

    /// Reads the target of the child symbolic link `name` (at most
    /// `max_len` bytes), without following it.
    pub fn read_tree_link(&self, name: &OsStr, max_len: usize) -> Result<Vec<u8>> {
        check_name(name)?;
        let target = rustix::fs::readlinkat(self.as_fd(), name, Vec::new())
            .map_err(|e| err(ReasonCode::PathRace, "readlinkat", name, e))?;
        let target = target.into_bytes();
        if target.len() > max_len {
            return Err(Error::new(
                ReasonCode::InputTooLarge,
                format!("link {name:?} has a target over {max_len} bytes"),
            ));
        }
        Ok(target)
    }
}

fn check_file(st: &Stat, name: &OsStr, max_bytes: u64) -> Result<()> {
    match kind_of(st) {
        EntryKind::Regular => {}
        EntryKind::Symlink => return Err(Error::new(ReasonCode::PathSymlink, format!("{name:?} is a symbolic link"))),
        _ => return Err(Error::new(ReasonCode::InputNotRegular, format!("{name:?} is not a regular file"))),
    }
    if st.st_size as u64 > max_bytes {
        return Err(Error::new(
            ReasonCode::InputTooLarge,
            format!("{name:?} is {} bytes, more than {max_bytes}", st.st_size),
        ));
    }
    Ok(())
}

impl ChildFile {
    /// Size reported when the file was opened.
    pub fn size(&self) -> u64 {
        self.stat.st_size as u64
    }

    /// Whether any execute bit is set.
    pub fn executable(&self) -> bool {
        self.stat.st_mode & 0o111 != 0
    }

    /// Its modification time when opened: seconds and nanoseconds.
    pub fn mtime(&self) -> (i64, u32) {
        (self.stat.st_mtime, self.stat.st_mtime_nsec as u32)
    }

    /// Its status-change time when opened: seconds and nanoseconds.
    pub fn ctime(&self) -> (i64, u32) {
        (self.stat.st_ctime, self.stat.st_ctime_nsec as u32)
    }

    /// Its hard-link count when opened.
    pub fn nlink(&self) -> u64 {
        self.stat.st_nlink
    }

    /// Its `(st_dev, st_ino)` when opened.
    pub fn dev_ino(&self) -> (u64, u64) {
        (self.stat.st_dev, self.stat.st_ino)
    }

    /// Copies exactly the size reported at open into `dest`. A file whose
    /// size or change time moves while it is read is `input.changed`.
    pub fn copy_into(mut self, dest: &mut impl Write) -> Result<u64> {
        let want = self.size();
        // One byte more than the file, so growth is seen, and no more than 64 KiB.
        let mut buf = vec![0u8; (want + 1).min(64 * 1024) as usize];
        let mut total = 0u64;
        loop {
            let room = (want + 1 - total).min(buf.len() as u64) as usize;
            let n = match self.file.read(&mut buf[..room]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::new(ReasonCode::InputUnreadable, format!("read: {e}"))),
            };
            total += n as u64;
            if total > want {
                return Err(Error::new(ReasonCode::InputChanged, "a file grew while it was read; try again"));
            }
            dest.write_all(&buf[..n]).map_err(|e| Error::new(ReasonCode::Internal, format!("write: {e}")))?;
        }
        let after =
            rustix::fs::fstat(&self.file).map_err(|e| Error::syscall(ReasonCode::InputUnreadable, "fstat", e))?;
        if total != want
            || after.st_size != self.stat.st_size
            || (after.st_ctime, after.st_ctime_nsec) != (self.stat.st_ctime, self.stat.st_ctime_nsec)
        {
            return Err(Error::new(ReasonCode::InputChanged, "a file changed while it was read; try again"));
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HostAuthority;
    use rustix::fs::FileType;

    fn open(p: &std::path::Path) -> Dir {
        Dir::open_ambient(&HostAuthority::ambient(), p).unwrap()
    }

    #[test]
    fn lists_without_following_and_sorts() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("b"), b"12").unwrap();
        std::fs::create_dir(t.path().join("a")).unwrap();
        std::os::unix::fs::symlink("/etc", t.path().join("c")).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, t.path().join("d"), FileType::Fifo, Mode::from_raw_mode(0o600), 0)
            .unwrap();
        let list = open(t.path()).list_tree(10).unwrap();
        let got: Vec<(&str, EntryKind)> = list.iter().map(|e| (e.name.to_str().unwrap(), e.kind)).collect();
        assert_eq!(
            got,
            [
                ("a", EntryKind::Directory),
                ("b", EntryKind::Regular),
                ("c", EntryKind::Symlink),
                ("d", EntryKind::Special)
            ]
        );
        assert_eq!(open(t.path()).list_tree(3).unwrap_err().code(), ReasonCode::LimitInputs);
    }

    #[test]
    fn children_are_never_followed() {
        let t = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc", t.path().join("dirlink")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", t.path().join("filelink")).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, t.path().join("fifo"), FileType::Fifo, Mode::from_raw_mode(0o600), 0)
            .unwrap();
        std::fs::write(t.path().join("big"), vec![1u8; 10]).unwrap();
        let d = open(t.path());
        assert_eq!(d.open_tree_dir("dirlink".as_ref()).unwrap_err().code(), ReasonCode::PathSymlink);
        assert_eq!(d.open_tree_file("filelink".as_ref(), 100).unwrap_err().code(), ReasonCode::PathSymlink);
        assert_eq!(d.open_tree_file("fifo".as_ref(), 100).unwrap_err().code(), ReasonCode::InputNotRegular);
        assert_eq!(d.open_tree_file("big".as_ref(), 9).unwrap_err().code(), ReasonCode::InputTooLarge);
        assert_eq!(d.open_tree_file("../x".as_ref(), 9).unwrap_err().code(), ReasonCode::PathTraversal);
        assert_eq!(d.read_tree_link("filelink".as_ref(), 100).unwrap(), b"/etc/passwd");
        let mut out = Vec::new();
        assert_eq!(d.open_tree_file("big".as_ref(), 10).unwrap().copy_into(&mut out).unwrap(), 10);
        assert_eq!(out, vec![1u8; 10]);
    }
}
