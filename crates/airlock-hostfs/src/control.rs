//! airlock's control files (configuration, manifests, policies) and the
//! directories that hold them, read and identified through handles.
//!
//! [`read_control_file`] opens a control file's directory, then the file
//! beneath that handle without following a link, and reports the owner and
//! mode of both as `fstat` saw them on the handles that were read, so the
//! caller judges the very bytes it parses. [`holders`] and
//! [`Dir::ancestry`] name directories by `(dev, ino)`, walking `..` from
//! open handles: a directory reached through a bind mount or another path
//! has the same identity as the one it shows.

use crate::authority::HostAuthority;
use crate::dir::Dir;
use crate::error::{Error, Result};
use airlock_core::ReasonCode;
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};
use rustix::io::Errno;
use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Deepest directory tree walked upwards (a loop guard; real trees are far shallower).
const MAX_ANCESTRY: usize = 4096;

/// Who owns a file and its permission bits, from `fstat` on its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// `st_uid`.
    pub uid: u32,
    /// `st_mode & 0o7777`.
    pub mode: u32,
}

/// A control file's bytes with the ownership of the file and of the
/// directory it was opened from.
#[derive(Debug)]
pub struct ControlFile {
    /// The bytes read (at most the bound given).
    pub bytes: Vec<u8>,
    /// The file's owner and mode.
    pub file: Owner,
    /// Its directory's owner and mode.
    pub dir: Owner,
}

/// Reads the control file at `path`, at most `max` bytes.
///
/// The directory part of `path` is the operator's and is opened following
/// links (`O_PATH | O_DIRECTORY`); the file is opened beneath that handle
/// with `O_NOFOLLOW | O_NONBLOCK`, must be a regular file, and is read
/// through the same descriptor that `fstat` judged.
///
/// Errors: a symbolic link or a file that is not regular is
/// `config.control_file_unsafe`; a file over `max` bytes or one that cannot
/// be opened or read is `config.invalid` (with the errno, so a caller can
/// tell a missing file apart and give its own code).
pub fn read_control_file(_authority: &HostAuthority, path: &Path, max: u64) -> Result<ControlFile> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::new(ReasonCode::ConfigInvalid, format!("{} names no file", path.display())))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = rustix::fs::openat(CWD, parent, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| Error::syscall(ReasonCode::ConfigInvalid, format_args!("open({})", parent.display()), e))?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&dir, name, flags, Mode::empty()).map_err(|e| match e {
        Errno::LOOP => Error::syscall(
            ReasonCode::ControlFileUnsafe,
            format_args!("{} is a symbolic link; airlock's control files are opened without following links: open({}, O_NOFOLLOW)", path.display(), path.display()),
            e,
        ),
        _ => Error::syscall(ReasonCode::ConfigInvalid, format_args!("open({})", path.display()), e),
    })?;
    let st = fstat(&fd, path)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(Error::new(ReasonCode::ControlFileUnsafe, format!("{} is not a regular file", path.display())));
    }
    let dst = fstat(&dir, parent)?;
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::new(ReasonCode::ConfigInvalid, format!("reading {}: {e}", path.display())))?;
    if bytes.len() as u64 > max {
        return Err(Error::new(ReasonCode::ConfigInvalid, format!("{} is larger than {max} bytes", path.display())));
    }
    Ok(ControlFile { bytes, file: owner(&st), dir: owner(&dst) })
}

/// One directory on the way from a directory up to `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ancestor {
    /// `(st_dev, st_ino)`.
    pub id: (u64, u64),
    /// Its name in the directory above, when the kernel's path for the
    /// handle names an entry of the parent with the same identity; `None`
    /// for `/`, a mount root, or a name that could not be confirmed.
    pub name: Option<OsString>,
}

impl Dir {
    /// This directory and every directory above it, nearest first, with
    /// names (see [`Ancestor::name`]; [`Dir::ancestor_ids`] skips them). Each
    /// found by opening `..` beneath the handle before it (`O_PATH`), up to
    /// the root this process sees. `..` at a mount's root leads to the
    /// directory the mount sits on, so the walk crosses mounts upwards.
    pub fn ancestry(&self) -> Result<Vec<Ancestor>> {
        let mut out = Vec::new();
        walk_up(self.as_fd(), self.dev_ino(), true, |id, name| {
            out.push(Ancestor { id, name: name.map(Into::into) });
            true
        })?;
        Ok(out)
    }

    /// The identities of [`Dir::ancestry`], without looking names up.
    pub fn ancestor_ids(&self) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        walk_up(self.as_fd(), self.dev_ino(), false, |id, _| {
            out.push(id);
            true
        })?;
        Ok(out)
    }
}

/// The identities of every directory whose tree holds `path` (absolute;
/// it need not exist): for each existing prefix of `path`, the directory it
/// opens (links followed) and every directory above that. A symbolic link
/// on the way therefore counts both where it lies and where it leads, and
/// a missing file counts where it would be created.
pub fn holders(_authority: &HostAuthority, path: &Path) -> HashSet<(u64, u64)> {
    let mut seen = HashSet::new();
    for prefix in path.ancestors().filter(|p| !p.as_os_str().is_empty()) {
        let Ok(fd) = rustix::fs::openat(CWD, prefix, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        else {
            continue;
        };
        let Ok(st) = rustix::fs::fstat(&fd) else { continue };
        // Stop at the first directory already collected: all above it are too.
        let _ = walk_up(fd.as_fd(), (st.st_dev, st.st_ino), false, |id, _| seen.insert(id));
    }
    seen
}

/// Calls `visit(id, name)` for the directory `fd` (whose identity is `id`)
/// and each one above it, until `visit` answers `false` or the root is
/// reached. Names are looked up only when `names` is set.
fn walk_up(
    fd: BorrowedFd<'_>,
    id: (u64, u64),
    names: bool,
    mut visit: impl FnMut((u64, u64), Option<PathBuf>) -> bool,
) -> Result<()> {
    let dotdot = |fd: BorrowedFd<'_>| {
        rustix::fs::openat(fd, "..", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| Error::syscall(ReasonCode::Internal, "openat(dir, \"..\", O_PATH)", e))
    };
    let mut current: Option<OwnedFd> = None;
    let mut id = id;
    for _ in 0..MAX_ANCESTRY {
        let here = current.as_ref().map_or(fd, |c| c.as_fd());
        let parent = dotdot(here)?;
        let pst = rustix::fs::fstat(&parent).map_err(|e| Error::syscall(ReasonCode::Internal, "fstat(..)", e))?;
        let pid = (pst.st_dev, pst.st_ino);
        let at_root = pid == id;
        let name = if at_root || !names { None } else { confirmed_name(here, &parent, id) };
        if !visit(id, name) || at_root {
            return Ok(());
        }
        current = Some(parent);
        id = pid;
    }
    Err(Error::new(ReasonCode::Internal, format!("more than {MAX_ANCESTRY} directories above a directory")))
}

/// The name of `child` (identity `id`) in `parent`: the last component of
/// the path the kernel reports for the child's handle, kept only if that
/// entry of `parent`, not followed, has the same identity.
fn confirmed_name(child: BorrowedFd<'_>, parent: &OwnedFd, id: (u64, u64)) -> Option<PathBuf> {
    let path = std::fs::read_link(format!("/proc/self/fd/{}", child.as_raw_fd())).ok()?;
    let name = PathBuf::from(path.file_name()?);
    let st = rustix::fs::statat(parent, &name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    ((st.st_dev, st.st_ino) == id).then_some(name)
}

fn fstat(fd: &OwnedFd, path: &Path) -> Result<rustix::fs::Stat> {
    rustix::fs::fstat(fd)
        .map_err(|e| Error::syscall(ReasonCode::ConfigInvalid, format_args!("fstat({})", path.display()), e))
}

fn owner(st: &rustix::fs::Stat) -> Owner {
    Owner { uid: st.st_uid, mode: st.st_mode & 0o7777 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn reads_regular_files_and_refuses_links_and_fifos() {
        let dir = tempfile::tempdir().unwrap();
        let a = HostAuthority::ambient();
        let file = dir.path().join("airlock.toml");
        std::fs::write(&file, "x = 1\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let read = read_control_file(&a, &file, 16).unwrap();
        assert_eq!(read.bytes, b"x = 1\n");
        assert_eq!(read.file.mode, 0o640);
        assert_eq!(read.file.uid, rustix::process::geteuid().as_raw());
        assert_eq!(read_control_file(&a, &file, 3).unwrap_err().code(), ReasonCode::ConfigInvalid);
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_control_file(&a, &link, 16).unwrap_err().code(), ReasonCode::ControlFileUnsafe);
        let fifo = dir.path().join("fifo.toml");
        rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        assert_eq!(read_control_file(&a, &fifo, 16).unwrap_err().code(), ReasonCode::ControlFileUnsafe);
        let missing = read_control_file(&a, &dir.path().join("none.toml"), 16).unwrap_err();
        assert_eq!(missing.errno(), Some(Errno::NOENT));
    }

    #[test]
    fn holders_cover_every_directory_above_and_where_a_missing_file_would_be() {
        let dir = tempfile::tempdir().unwrap();
        let a = HostAuthority::ambient();
        std::fs::create_dir_all(dir.path().join("p/tools")).unwrap();
        let id = |p: &Path| {
            let st = rustix::fs::stat(p).unwrap();
            (st.st_dev, st.st_ino)
        };
        let held = holders(&a, &dir.path().join("p/tools/missing/x.clad.toml"));
        for d in [dir.path().join("p/tools"), dir.path().join("p"), dir.path().to_path_buf(), "/".into()] {
            assert!(held.contains(&id(&d)), "{}", d.display());
        }
        std::fs::create_dir(dir.path().join("beside")).unwrap();
        assert!(!held.contains(&id(&dir.path().join("beside"))));
    }

    #[test]
    fn ancestry_names_each_step() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("p/.airlock")).unwrap();
        let d = Dir::open_ambient(&HostAuthority::ambient(), &dir.path().join("p/.airlock")).unwrap();
        let up = d.ancestry().unwrap();
        assert_eq!(up[0].name.as_deref(), Some(std::ffi::OsStr::new(".airlock")));
        assert_eq!(up[1].name.as_deref(), Some(std::ffi::OsStr::new("p")));
        assert_eq!(up.last().unwrap().name, None);
        let root = rustix::fs::stat("/").unwrap();
        assert_eq!(up.last().unwrap().id, (root.st_dev, root.st_ino));
    }
}
