//! Private directories airlock owns (the state directory and what is under
//! it): created `0700`, checked to be owned by us and closed to others, and
//! worked on only through handles.

use crate::authority::HostAuthority;
use crate::dir::Dir;
use crate::error::{Error, Result};
use crate::publish::StagedFile;
use airlock_core::ReasonCode;
use rustix::fd::AsFd;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, CWD};
use rustix::io::Errno;
use std::fs::File;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Deepest tree [`PrivateDir::remove_tree`] will descend.
const MAX_REMOVE_DEPTH: usize = 16;

/// A directory only the current user can use.
#[derive(Debug)]
pub struct PrivateDir {
    dir: Dir,
    display: PathBuf,
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(Error::new(ReasonCode::Internal, format!("invalid private entry name {name:?}")));
    }
    Ok(())
}

impl PrivateDir {
    /// Opens the directory at `path`, creating it (and missing parents)
    /// with mode `0700`. Refuses (`config.state_dir`) a final symlink, a
    /// directory owned by someone else, or one others can read or write.
    pub fn open_or_create(_authority: &HostAuthority, path: &Path) -> Result<PrivateDir> {
        let err = |e: Errno, what: &str| {
            Error::syscall(ReasonCode::ConfigStateDir, format_args!("{what}({})", path.display()), e)
        };
        if let Err(e) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(Error::new(ReasonCode::ConfigStateDir, format!("creating {}: {e}", path.display())));
            }
        }
        let fd = rustix::fs::openat(
            CWD,
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| err(e, "open"))?;
        let dir = PrivateDir { dir: Dir::from_fd(fd)?, display: path.to_path_buf() };
        dir.check_private()?;
        Ok(dir)
    }

    fn check_private(&self) -> Result<()> {
        let st =
            rustix::fs::fstat(self.dir.as_fd()).map_err(|e| Error::syscall(ReasonCode::ConfigStateDir, "fstat", e))?;
        if st.st_uid != rustix::process::geteuid().as_raw() {
            return Err(Error::new(
                ReasonCode::ConfigStateDir,
                format!("{} is owned by uid {}, not by the user running airlock", self.display.display(), st.st_uid),
            ));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(Error::new(
                ReasonCode::ConfigStateDir,
                format!(
                    "{} is open to other users (mode {:o}); it must be 0700",
                    self.display.display(),
                    st.st_mode & 0o7777
                ),
            ));
        }
        Ok(())
    }

    /// A second handle to the same directory (`fcntl(F_DUPFD_CLOEXEC)`).
    pub fn try_clone(&self) -> Result<PrivateDir> {
        Ok(PrivateDir { dir: self.dir.try_clone()?, display: self.display.clone() })
    }

    /// The path it was opened at, for messages.
    pub fn display_path(&self) -> &Path {
        &self.display
    }

    /// The underlying handle.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Opens subdirectory `name`, creating it `0700` if missing.
    pub fn ensure_subdir(&self, name: &str) -> Result<PrivateDir> {
        check_name(name)?;
        match rustix::fs::mkdirat(self.dir.as_fd(), name, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(Error::syscall(ReasonCode::ConfigStateDir, format_args!("mkdirat({name:?})"), e)),
        }
        self.open_subdir(name)
    }

    /// Creates subdirectory `name` (`0700`); fails if it exists.
    pub fn create_subdir(&self, name: &str) -> Result<PrivateDir> {
        check_name(name)?;
        rustix::fs::mkdirat(self.dir.as_fd(), name, Mode::from_raw_mode(0o700))
            .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("mkdirat({name:?})"), e))?;
        self.open_subdir(name)
    }

    /// Opens existing subdirectory `name` without following a link.
    pub fn open_subdir(&self, name: &str) -> Result<PrivateDir> {
        check_name(name)?;
        let fd = rustix::fs::openat(
            self.dir.as_fd(),
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            let code = if e == Errno::NOENT { ReasonCode::InvocationNotFound } else { ReasonCode::ConfigStateDir };
            Error::syscall(code, format_args!("openat({name:?})"), e)
        })?;
        let sub = PrivateDir { dir: Dir::from_fd(fd)?, display: self.display.join(name) };
        sub.check_private()?;
        Ok(sub)
    }

    /// Creates file `name` exclusively, mode `0600`, for writing.
    pub fn create_file(&self, name: &str) -> Result<File> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        self.open_at(name, flags, 0o600, "O_CREAT|O_EXCL")
    }

    /// Creates file `name` exclusively, mode `0600`, for reading and
    /// writing (a copy that is read back to hash it).
    pub fn create_file_rw(&self, name: &str) -> Result<File> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        self.open_at(name, flags, 0o600, "O_RDWR|O_CREAT|O_EXCL")
    }

    /// Creates a new `0600` file for reading and writing, unnamed
    /// (`O_TMPFILE`) where the file system allows it, else named `name`
    /// (as [`PrivateDir::create_staged_named`]). An unnamed file can later
    /// be given a name in another directory of the same mount by linking
    /// its descriptor (a staged output published as itself,
    /// [`crate::HeldOutput::adopt_staged`]); it vanishes with its last
    /// descriptor.
    pub fn create_staged(&self, name: &str) -> Result<StagedFile> {
        let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
        match rustix::fs::openat(self.dir.as_fd(), ".", flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => Ok(StagedFile::Unnamed(File::from(fd))),
            Err(e) if crate::publish::tmpfile_unsupported(e) => self.create_staged_named(name),
            Err(e) => Err(Error::syscall(ReasonCode::Internal, "openat(\".\", O_TMPFILE|O_RDWR, 0600)", e)),
        }
    }

    /// Creates the new file `name` (`0600`, for reading and writing, never
    /// through a link, failing if `name` exists) and keeps it with a handle
    /// of this directory, so that it can be renamed from here into an
    /// output's directory of the same mount ([`crate::HeldOutput::adopt_staged`])
    /// and, having a name, be bound into a worker.
    pub fn create_staged_named(&self, name: &str) -> Result<StagedFile> {
        let file = self.create_file_rw(name)?;
        Ok(StagedFile::Named { file, dir: self.dir.try_clone()?, name: name.to_owned() })
    }

    /// Opens regular file `name` for reading, never through a link.
    pub fn open_file(&self, name: &str) -> Result<File> {
        let file = self.open_nofollow(name).map_err(|e| match e.errno() {
            Some(Errno::NOENT) => e.with_code(ReasonCode::InvocationNotFound),
            _ => e,
        })?;
        let st = rustix::fs::fstat(&file).map_err(|e| Error::syscall(ReasonCode::Internal, "fstat", e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::new(
                ReasonCode::Internal,
                format!("{name:?} in {} is not a regular file", self.display.display()),
            ));
        }
        Ok(file)
    }

    /// Opens file `name` for reading and appending, creating it `0600` if
    /// missing: `openat(O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK
    /// | O_CLOEXEC)`. A final symlink is never followed (`ELOOP`). Nothing
    /// about what was opened is checked here: the caller checks type, owner,
    /// mode and links with `fstat` on the handle, so it can say precisely
    /// what is wrong, and syncs this directory if the file may be new.
    pub fn open_append(&self, name: &str) -> Result<File> {
        let flags =
            OFlags::RDWR | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        self.open_at(name, flags, 0o600, "O_RDWR|O_APPEND|O_CREAT|O_NOFOLLOW")
    }

    /// Opens entry `name` read-only without checking its type:
    /// `openat(O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)`, so a final
    /// symlink fails (`ELOOP`) and a FIFO does not block. For callers that
    /// check the handle themselves with `fstat` (see [`PrivateDir::open_file`]
    /// for one that refuses anything but a regular file).
    pub fn open_nofollow(&self, name: &str) -> Result<File> {
        self.open_at(
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            0,
            "O_RDONLY|O_NOFOLLOW",
        )
    }

    /// `openat(this dir, name, flags, mode)` for a checked single-component
    /// name; `what` names the flags in the error.
    fn open_at(&self, name: &str, flags: OFlags, mode: u32, what: &str) -> Result<File> {
        check_name(name)?;
        rustix::fs::openat(self.dir.as_fd(), name, flags, Mode::from_raw_mode(mode))
            .map(File::from)
            .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("openat({name:?}, {what})"), e))
    }

    /// Writes `bytes` to file `name`, synced, replacing whatever entry had
    /// that name in one step: written `0600` to a temporary name, synced,
    /// then `renameat` over `name` (a link called `name` is replaced, never
    /// followed), and this directory synced.
    pub fn replace_file(&self, name: &str, bytes: &[u8]) -> Result<()> {
        check_name(name)?;
        let tmp = self.write_synced_temp(name, bytes)?;
        rustix::fs::renameat(self.dir.as_fd(), tmp.as_str(), self.dir.as_fd(), name).map_err(|e| {
            let _ = self.remove_tree(&tmp);
            Error::syscall(ReasonCode::Internal, format_args!("renameat({tmp:?}, {name:?})"), e)
        })?;
        self.sync()
    }

    /// Writes `bytes` to a new, synced temporary file named after `name`
    /// and returns its name; on failure nothing is left behind.
    fn write_synced_temp(&self, name: &str, bytes: &[u8]) -> Result<String> {
        use std::io::Write;
        let tmp = format!(".tmp-{name}-{}", random_suffix());
        let mut f = self.create_file(&tmp)?;
        if let Err(e) = f.write_all(bytes).and_then(|()| f.sync_all()) {
            let _ = self.remove_tree(&tmp);
            return Err(Error::new(ReasonCode::Internal, format!("writing {name:?}: {e}")));
        }
        Ok(tmp)
    }

    /// Writes `bytes` to a new file `name`, synced, in one step: written to
    /// a temporary name first, then renamed without replacing anything.
    pub fn write_new_file(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let tmp = self.write_synced_temp(name, bytes)?;
        self.rename_noreplace(&tmp, name).inspect_err(|_| {
            let _ = self.remove_tree(&tmp);
        })
    }

    /// Renames `from` to `to` inside this directory, refusing to replace
    /// anything (`renameat2(RENAME_NOREPLACE)`); an existing `to` is
    /// `invocation.duplicate`.
    pub fn rename_noreplace(&self, from: &str, to: &str) -> Result<()> {
        check_name(from)?;
        check_name(to)?;
        rustix::fs::renameat_with(self.dir.as_fd(), from, self.dir.as_fd(), to, RenameFlags::NOREPLACE).map_err(|e| {
            let code = if e == Errno::EXIST { ReasonCode::InvocationDuplicate } else { ReasonCode::Internal };
            Error::syscall(code, format_args!("renameat2({from:?}, {to:?}, RENAME_NOREPLACE)"), e)
        })
    }

    /// Gives entry `name` of this directory a second name, `new_name` in
    /// `to` (`linkat` without `AT_SYMLINK_FOLLOW`: a link is linked as
    /// itself, never followed), replacing nothing: an existing `new_name`
    /// fails with `EEXIST`, as [`PrivateDir::create_file`] does. A marker
    /// whose existence is the fact it records costs no inode this way.
    pub fn link_as(&self, name: &str, to: &PrivateDir, new_name: &str) -> Result<()> {
        check_name(name)?;
        check_name(new_name)?;
        rustix::fs::linkat(self.dir.as_fd(), name, to.dir.as_fd(), new_name, AtFlags::empty())
            .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("linkat({name:?}, {new_name:?})"), e))
    }

    /// Whether an entry called `name` exists (of any kind).
    pub fn contains(&self, name: &str) -> bool {
        check_name(name).is_ok() && rustix::fs::statat(self.dir.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// When entry `name` (not followed if a link) was last modified, as
    /// seconds since the Unix epoch; `None` if it cannot be read.
    pub fn modified_at(&self, name: &str) -> Option<i64> {
        check_name(name).ok()?;
        rustix::fs::statat(self.dir.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW).ok().map(|st| st.st_mtime)
    }

    /// How many names entry `name` (not followed if a link) has; `None`
    /// if it cannot be read.
    pub fn link_count(&self, name: &str) -> Option<u64> {
        check_name(name).ok()?;
        rustix::fs::statat(self.dir.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW).ok().map(|st| st.st_nlink)
    }

    /// Names of the entries, sorted.
    pub fn entries(&self) -> Result<Vec<String>> {
        list(&self.dir)
    }

    /// Flushes this directory's entries.
    pub fn sync(&self) -> Result<()> {
        self.dir.sync()
    }

    /// Removes `name` and everything beneath it, through handles: a link is
    /// unlinked, never followed, so a subdirectory swapped for a symlink
    /// cannot redirect the removal outside this directory. Missing is fine.
    pub fn remove_tree(&self, name: &str) -> Result<()> {
        check_name(name)?;
        remove_entry(&self.dir, name, 0)
    }
}

fn list(dir: &Dir) -> Result<Vec<String>> {
    let fd = rustix::fs::openat(dir.as_fd(), ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| Error::syscall(ReasonCode::Internal, "openat(\".\")", e))?;
    let mut reader = rustix::fs::Dir::read_from(&fd).map_err(|e| Error::syscall(ReasonCode::Internal, "readdir", e))?;
    let mut names = Vec::new();
    while let Some(entry) = reader.read() {
        let entry = entry.map_err(|e| Error::syscall(ReasonCode::Internal, "readdir", e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "." && name != ".." {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

fn remove_entry(parent: &Dir, name: &str, depth: usize) -> Result<()> {
    let st = match rustix::fs::statat(parent.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(Error::syscall(ReasonCode::Internal, format_args!("fstatat({name:?})"), e)),
    };
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        if depth >= MAX_REMOVE_DEPTH {
            return Err(Error::new(ReasonCode::Internal, format!("{name:?} is nested deeper than {MAX_REMOVE_DEPTH}")));
        }
        let fd = rustix::fs::openat(
            parent.as_fd(),
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("openat({name:?})"), e))?;
        let sub = Dir::from_fd(fd)?;
        if sub.dev_ino() != (st.st_dev, st.st_ino) {
            return Err(Error::new(ReasonCode::PathRace, format!("{name:?} was replaced during removal")));
        }
        for child in list(&sub)? {
            remove_entry(&sub, &child, depth + 1)?;
        }
        match rustix::fs::unlinkat(parent.as_fd(), name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(Error::syscall(ReasonCode::Internal, format_args!("unlinkat({name:?}, AT_REMOVEDIR)"), e)),
        }
    } else {
        match rustix::fs::unlinkat(parent.as_fd(), name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(Error::syscall(ReasonCode::Internal, format_args!("unlinkat({name:?})"), e)),
        }
    }
}

/// 16 random hex characters from the kernel.
pub fn random_suffix() -> String {
    let mut bytes = [0u8; 8];
    rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())
        .expect("getrandom never fails for 8 bytes");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    fn state() -> (tempfile::TempDir, PrivateDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = PrivateDir::open_or_create(&HostAuthority::ambient(), &tmp.path().join("state")).unwrap();
        (tmp, dir)
    }

    #[test]
    fn open_append_creates_0600_and_appends_at_the_end() {
        let (_tmp, dir) = state();
        let mut a = dir.open_append("log").unwrap();
        assert_eq!(a.metadata().unwrap().mode() & 0o7777, 0o600);
        a.write_all(b"one\n").unwrap();
        let mut b = dir.open_append("log").unwrap();
        b.seek(SeekFrom::Start(0)).unwrap();
        b.write_all(b"two\n").unwrap();
        let mut text = String::new();
        b.seek(SeekFrom::Start(0)).unwrap();
        b.read_to_string(&mut text).unwrap();
        assert_eq!(text, "one\ntwo\n");
    }

    #[test]
    fn open_append_and_open_nofollow_refuse_a_symlink() {
        let (tmp, dir) = state();
        std::fs::write(tmp.path().join("target"), b"x").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("target"), tmp.path().join("state/link")).unwrap();
        assert_eq!(dir.open_append("link").unwrap_err().errno(), Some(Errno::LOOP));
        assert_eq!(dir.open_nofollow("link").unwrap_err().errno(), Some(Errno::LOOP));
        assert_eq!(std::fs::read(tmp.path().join("target")).unwrap(), b"x");
    }

    #[test]
    fn open_nofollow_does_not_block_on_a_fifo() {
        let (tmp, dir) = state();
        rustix::fs::mkfifoat(CWD, tmp.path().join("state/fifo"), Mode::from_raw_mode(0o600)).unwrap();
        let f = dir.open_nofollow("fifo").unwrap();
        assert!(f.metadata().unwrap().file_type().is_fifo());
    }

    #[test]
    fn replace_file_replaces_a_link_not_its_target() {
        let (tmp, dir) = state();
        std::fs::write(tmp.path().join("target"), b"keep").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("target"), tmp.path().join("state/pub")).unwrap();
        dir.replace_file("pub", b"new").unwrap();
        assert_eq!(std::fs::read(tmp.path().join("target")).unwrap(), b"keep");
        let meta = std::fs::symlink_metadata(tmp.path().join("state/pub")).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.mode() & 0o7777, 0o600);
        dir.replace_file("pub", b"newer").unwrap();
        assert_eq!(std::fs::read(tmp.path().join("state/pub")).unwrap(), b"newer");
        assert_eq!(dir.entries().unwrap(), vec!["pub".to_string()]);
    }

    #[test]
    fn link_as_gives_a_second_name_and_never_follows_or_replaces() {
        let (tmp, dir) = state();
        let sub = dir.create_subdir("sub").unwrap();
        dir.write_new_file("record", b"r").unwrap();
        dir.link_as("record", &sub, "marker").unwrap();
        let (a, b) = (tmp.path().join("state/record"), tmp.path().join("state/sub/marker"));
        assert_eq!(std::fs::metadata(&a).unwrap().ino(), std::fs::metadata(&b).unwrap().ino());
        assert_eq!(std::fs::metadata(&a).unwrap().nlink(), 2);
        assert_eq!(dir.link_as("record", &sub, "marker").unwrap_err().errno(), Some(Errno::EXIST));
        std::fs::write(tmp.path().join("target"), b"x").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("target"), tmp.path().join("state/link")).unwrap();
        dir.link_as("link", &sub, "linked").unwrap();
        assert!(std::fs::symlink_metadata(tmp.path().join("state/sub/linked")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::metadata(tmp.path().join("target")).unwrap().nlink(), 1, "the target is not linked");
        assert_eq!(dir.link_as("missing", &sub, "m").unwrap_err().errno(), Some(Errno::NOENT));
    }
}
