//! File operations beneath a granted root, for the filesystem broker.
//!
//! Every function takes the root as a directory handle and the path as
//! components that already passed the protocol's path grammar
//! (`airlock_fsproto::check_path`); an empty slice names the root itself.
//! Resolution goes through the crate's one [`Resolver`] (never following a
//! link at any component and never crossing a mount: `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_NO_XDEV`, or the per-component `O_PATH | O_NOFOLLOW` walk that
//! compares every step's mount id with the root's), and a read through
//! its one checked file ([`crate::RegularFile`]); this module only maps
//! their typed faults to [`RootedError`] (the broker's codes), in
//! `RootedError::from_fault`.
//!
//! - [`read_file`]: the final entry is opened `O_PATH` first and must be a
//!   regular file with one link before it is reopened for reading, so a
//!   FIFO or device is never opened for reading; one frame from an offset,
//!   with the file's identity, size and change time, the same before and
//!   after the bytes were read;
//! - [`list_dir`]: sorted names and their kinds, without names the grammar
//!   refuses;
//! - [`prepare_write`] (or [`open_write`] then [`PreparedWrite::append`] …)
//!   / [`PreparedWrite::commit`]: a write never modifies
//!   an existing inode. The bytes go to an unnamed `O_TMPFILE` in the target's
//!   directory; commit links it under a staging name, renames that over the
//!   target, syncs the directory and checks the target is now that inode.
//!   Until commit nothing is named, so a dropped [`PreparedWrite`] leaves
//!   nothing behind;
//! - [`remove_stage_entry`]: removes a staging entry only if it is still
//!   the file that was staged (for cleanup and crash recovery).
//!
//! # Limits
//!
//! The directory handles are the whole authority: whoever holds them can do
//! anything the descriptors allow. A host process that renames directories
//! inside a root while an operation runs can make it fail or act on the
//! directory at its new place inside the root, never outside it. The final
//! `stat`-then-`unlink` of [`remove_stage_entry`] is not atomic: the seed's
//! rule "grant trees must not be rearranged by untrusted host processes"
//! applies, and staging names are unreachable through the path grammar.

use crate::checked::RegularFile;
use crate::fault::{fstat, is_component, mount_id, Fault, FaultKind};
use crate::resolve::Resolver;
use airlock_fsproto::EntryKind;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, StatxFlags};
use rustix::io::Errno;
use std::collections::BinaryHeap;
use std::fs::File;

/// Why an operation beneath a root was refused or failed. Each variant has
/// exactly one reason code ([`RootedError::code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RootedError {
    /// A component is a symbolic link (`broker.symlink`).
    #[error("{path:?}: a component is a symbolic link; links are never followed")]
    Symlink {
        /// The path, relative to the root.
        path: String,
    },
    /// A component is on another mount than the root (`broker.mount_crossing`).
    #[error("{path:?}: a component is on another mount than the root")]
    MountCrossing {
        /// The path, relative to the root.
        path: String,
    },
    /// A component does not exist (`broker.not_found`).
    #[error("{path:?}: no such file or directory")]
    NotFound {
        /// The path, relative to the root.
        path: String,
    },
    /// The entry is not of the kind the operation needs: not a regular file
    /// for a read or write, not a directory for a listing or on the way
    /// (`broker.not_regular`).
    #[error("{path:?}: {what}")]
    NotRegular {
        /// The path, relative to the root.
        path: String,
        /// What it is instead, for people.
        what: &'static str,
    },
    /// A file to read has more than one hard link (`broker.hardlink`).
    #[error("{path:?}: the file has {links} hard links; only files with exactly one are read")]
    Hardlink {
        /// The path, relative to the root.
        path: String,
        /// Its link count.
        links: u64,
    },
    /// After a commit's rename the target is not the prepared file: the
    /// staging entry was swapped between its link and the rename
    /// (`broker.race`). What is at the target is left in place.
    #[error(
        "{path:?}: after the rename the target is (dev {}, ino {}), not the prepared file (dev {}, ino {}); the \
         staging entry was replaced by another process, the file is left in place and the write did not land",
        found.dev, found.ino, expected.dev, expected.ino
    )]
    Replaced {
        /// The path, relative to the root.
        path: String,
        /// What the target is now.
        found: FileId,
        /// The prepared file.
        expected: FileId,
    },
    /// The file's size or change time moved while one frame was read
    /// (`broker.changed`).
    #[error("{path:?}: the file changed while it was read (size or change time moved); read it again")]
    Changed {
        /// The path, relative to the root.
        path: String,
    },
    /// A system call failed (`broker.io`), or an entry changed while it was
    /// worked on (`EAGAIN`: `broker.race`).
    #[error("{call}: {errno}")]
    Io {
        /// The call, with its arguments.
        call: String,
        /// The error it returned (`EAGAIN` for an entry replaced meanwhile,
        /// `EEXIST` for a staging entry that is not the staged file).
        errno: Errno,
    },
}

impl RootedError {
    /// The stable reason code: `broker.symlink`, `broker.mount_crossing`,
    /// `broker.not_found`, `broker.not_regular`, `broker.hardlink`,
    /// `broker.race` (an entry changed while it was resolved or opened, and
    /// retrying did not outlast it, or a committed target is not the
    /// prepared file) or `broker.io`.
    pub fn code(&self) -> &'static str {
        use airlock_fsproto::codes;
        match self {
            RootedError::Symlink { .. } => codes::SYMLINK,
            RootedError::MountCrossing { .. } => codes::MOUNT_CROSSING,
            RootedError::NotFound { .. } => codes::NOT_FOUND,
            RootedError::NotRegular { .. } => codes::NOT_REGULAR,
            RootedError::Hardlink { .. } => codes::HARDLINK,
            RootedError::Changed { .. } => codes::CHANGED,
            RootedError::Io { errno: Errno::AGAIN, .. } | RootedError::Replaced { .. } => codes::RACE,
            RootedError::Io { .. } => codes::IO,
        }
    }

    fn io(call: impl Into<String>, errno: Errno) -> RootedError {
        RootedError::Io { call: call.into(), errno }
    }

    /// The broker's name for what the resolver or the checked file found
    /// while working on `comps` (this module's one edge).
    fn from_fault(f: Fault, comps: &[&str]) -> RootedError {
        let path = display(comps);
        match f.kind {
            FaultKind::Missing => RootedError::NotFound { path },
            FaultKind::Symlink => RootedError::Symlink { path },
            FaultKind::MountCrossing => RootedError::MountCrossing { path },
            FaultKind::NotDirectory => RootedError::NotRegular { path, what: "a component is not a directory" },
            FaultKind::Directory => RootedError::NotRegular { path, what: "it is a directory" },
            FaultKind::Special => {
                RootedError::NotRegular { path, what: "it is not a regular file (FIFO, socket or device)" }
            }
            FaultKind::Hardlink(links) => RootedError::Hardlink { path, links },
            FaultKind::Race => RootedError::io(format!("{path:?}: {}", f.message), Errno::AGAIN),
            FaultKind::TooLarge => RootedError::io(f.message, f.errno.unwrap_or(Errno::FBIG)),
            FaultKind::NotComponent => RootedError::io(f.message, f.errno.unwrap_or(Errno::INVAL)),
            FaultKind::Io => RootedError::io(f.message, f.errno.unwrap_or(Errno::IO)),
        }
    }
}

/// Shorthand for this module's results.
pub type RootedResult<T> = std::result::Result<T, RootedError>;

/// `(st_dev, st_ino)` of a file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

impl FileId {
    fn of(st: &Stat) -> FileId {
        FileId { dev: st.st_dev, ino: st.st_ino }
    }
}

/// One frame of a file and the file as it was while it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    /// The bytes from the offset asked (fewer than asked only at the end).
    pub bytes: Vec<u8>,
    /// The file's identity, size and change time.
    pub stamp: airlock_fsproto::ReadStamp,
}

/// A directory listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    /// Entry names (never `.` or `..`), sorted bytewise, at most the
    /// requested maximum: the smallest names of the directory.
    pub names: Vec<String>,
    /// What each name is (never followed), in the same order.
    pub kinds: Vec<airlock_fsproto::EntryKind>,
    /// Entries left out because their name is not UTF-8 or the path grammar
    /// refuses it (this includes staging entries).
    pub skipped: u64,
    /// Whether acceptable names were left out to stay within the maximum.
    pub truncated: bool,
}

fn display(comps: &[&str]) -> String {
    if comps.is_empty() {
        ".".to_owned()
    } else {
        comps.join("/")
    }
}

/// Components reach this module validated; this only refuses what would
/// change the meaning of a resolution (a separator, `.`/`..`, NUL, empty).
fn check_components(comps: &[&str]) -> RootedResult<()> {
    for c in comps {
        if !is_component(c.as_bytes()) {
            return Err(RootedError::io(
                format!("resolve {:?}: invalid component {c:?}", display(comps)),
                Errno::INVAL,
            ));
        }
    }
    Ok(())
}

/// Opens `comps` beneath `root` with `flags` (plus `O_NOFOLLOW | O_CLOEXEC`)
/// through the one resolver. With `O_PATH` a final symlink is returned as
/// itself; otherwise it is [`RootedError::Symlink`].
fn open_beneath(resolver: &Resolver, root: BorrowedFd<'_>, comps: &[&str], flags: OFlags) -> RootedResult<OwnedFd> {
    resolver.open_components(root, comps, flags).map_err(|f| RootedError::from_fault(f, comps))
}

/// `openat2(root, comps, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)` with no link
/// at any component and no mount crossed; an empty `comps` opens the root
/// itself. A non-directory is [`RootedError::NotRegular`].
pub fn open_dir_beneath(resolver: &Resolver, root: impl AsFd, comps: &[&str]) -> RootedResult<OwnedFd> {
    let root = root.as_fd();
    open_beneath(resolver, root, comps, OFlags::RDONLY | OFlags::DIRECTORY).map_err(|e| match e {
        // O_DIRECTORY on a final non-directory: say what it is.
        RootedError::NotRegular { path, .. } => RootedError::NotRegular { path, what: "it is not a directory" },
        other => other,
    })
}

/// Reads at most `max` bytes from `offset` of the regular file `comps`
/// (fewer at its end, none past it) and returns them with the file's
/// identity, size and change time: [`read_file_into`] into a new buffer.
pub fn read_file(
    resolver: &Resolver,
    root: impl AsFd,
    comps: &[&str],
    offset: u64,
    max: u64,
) -> RootedResult<FileRead> {
    let mut bytes = Vec::new();
    let (stamp, _) = read_file_into(resolver, root, comps, offset, max, &mut bytes)?;
    Ok(FileRead { bytes, stamp })
}

/// Reads at most `max` bytes from `offset` of the regular file `comps`
/// (fewer at its end, none past it) into `bytes`, which then holds exactly
/// them, and returns the file's identity, size and change time, and the
/// file itself, open `O_RDONLY` (for a caller that hands a stream's file
/// on: the broker passes it to airlock, which reads the rest of the stream
/// itself). A caller that reuses `bytes` for frames of one size neither
/// allocates nor zeroes.
///
/// The entry is opened `O_PATH | O_NOFOLLOW` first and must be a regular
/// file with exactly one link; only then is it reopened `O_RDONLY |
/// O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`, and the reopened inode must be the
/// checked one (else [`RootedError::Io`] with `EAGAIN`). A file whose size
/// or change time moved while the bytes were read, or that gave fewer bytes
/// than its size promised, is [`RootedError::Changed`]. On an error
/// `bytes` holds nothing of the file's.
pub fn read_file_into(
    resolver: &Resolver,
    root: impl AsFd,
    comps: &[&str],
    offset: u64,
    max: u64,
    bytes: &mut Vec<u8>,
) -> RootedResult<(airlock_fsproto::ReadStamp, File)> {
    let read = read_into(resolver, root.as_fd(), comps, offset, max, bytes);
    if read.is_err() {
        bytes.clear();
    }
    read
}

fn read_into(
    resolver: &Resolver,
    root: BorrowedFd<'_>,
    comps: &[&str],
    offset: u64,
    max: u64,
    bytes: &mut Vec<u8>,
) -> RootedResult<(airlock_fsproto::ReadStamp, File)> {
    if comps.is_empty() {
        return Err(RootedError::NotRegular { path: display(comps), what: "it is a directory" });
    }
    let file = RegularFile::beneath(resolver, root, comps, u64::MAX).map_err(|f| RootedError::from_fault(f, comps))?;
    let (dev, ino) = file.dev_ino();
    let (size, (ctime, ctime_nsec)) = (file.size(), file.ctime());
    let want = max.min(size.saturating_sub(offset));
    // `want` is at most `max`, which the callers bound to one frame. Only
    // what the buffer grows by is zeroed: it is overwritten below.
    bytes.resize(usize::try_from(want).unwrap_or(0), 0);
    let file = file.into_file();
    let mut got = 0usize;
    while got < bytes.len() {
        match rustix::io::pread(&file, &mut bytes[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(RootedError::io(format!("pread({:?})", display(comps)), e)),
        }
    }
    let after = fstat(file.as_fd(), "file after reading").map_err(|f| RootedError::from_fault(f, comps))?;
    if got < bytes.len()
        || after.st_size as u64 != size
        || (after.st_ctime, after.st_ctime_nsec as u32) != (ctime, ctime_nsec)
    {
        return Err(RootedError::Changed { path: display(comps) });
    }
    Ok((airlock_fsproto::ReadStamp { dev, ino, size, ctime, ctime_nsec }, file))
}

/// Lists the directory `comps` (empty: the root): at most `max` names,
/// the bytewise-smallest ones, sorted. A name that is not UTF-8 or that
/// `airlock_fsproto::check_component` refuses is counted in
/// [`Listing::skipped`]; names past `max` set [`Listing::truncated`]. Memory
/// stays bounded by `max` whatever the directory holds.
pub fn list_dir(resolver: &Resolver, root: impl AsFd, comps: &[&str], max: usize) -> RootedResult<Listing> {
    let fd = open_dir_beneath(resolver, root, comps)?;
    let mut stream = rustix::fs::Dir::read_from(&fd).map_err(|e| RootedError::io("fdopendir", e))?;
    // A max-heap of the smallest `max` names seen so far, with their kinds.
    let mut kept: BinaryHeap<(String, EntryKind)> = BinaryHeap::new();
    let mut listing = Listing::default();
    while let Some(next) = stream.read() {
        let entry = next.map_err(|e| RootedError::io(format!("getdents64({:?})", display(comps)), e))?;
        let raw = entry.file_name().to_bytes();
        if raw == b"." || raw == b".." {
            continue;
        }
        let name = match std::str::from_utf8(raw) {
            Ok(name) if airlock_fsproto::check_component(name).is_ok() => name,
            _ => {
                listing.skipped += 1;
                continue;
            }
        };
        if kept.len() < max {
            kept.push((name.to_owned(), entry_kind(&fd, name, entry.file_type())));
        } else {
            listing.truncated = true;
            if kept.peek().is_some_and(|(largest, _)| name < largest.as_str()) {
                kept.pop();
                kept.push((name.to_owned(), entry_kind(&fd, name, entry.file_type())));
            }
        }
    }
    (listing.names, listing.kinds) = kept.into_sorted_vec().into_iter().unzip();
    Ok(listing)
}

/// The kind `getdents` reported, or (where the file system does not say)
/// what `fstatat(AT_SYMLINK_NOFOLLOW)` finds; an entry gone meanwhile is
/// `other`.
fn entry_kind(dir: &OwnedFd, name: &str, reported: FileType) -> EntryKind {
    let of = |t: FileType| match t {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Dir,
        FileType::Symlink => EntryKind::Link,
        _ => EntryKind::Other,
    };
    match reported {
        FileType::Unknown => rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_or(EntryKind::Other, |st| of(FileType::from_raw_mode(st.st_mode))),
        t => of(t),
    }
}

/// A write whose bytes are synced in an unnamed file beside its target,
/// not yet visible. Dropping it without [`PreparedWrite::commit`] leaves
/// nothing: the file was never named.
#[derive(Debug)]
pub struct PreparedWrite {
    dir: OwnedFd,
    file: OwnedFd,
    name: String,
    path: String,
    dir_id: FileId,
    file_id: FileId,
    bytes: u64,
}

/// Prepares replacing (or creating) the regular file `comps` with `bytes`,
/// mode `0600` ([`prepare_write_with_mode`]).
pub fn prepare_write(
    resolver: &Resolver,
    root: impl AsFd,
    comps: &[&str],
    bytes: &[u8],
) -> RootedResult<PreparedWrite> {
    prepare_write_with_mode(resolver, root, comps, bytes, 0o600)
}

/// [`prepare_write`] with the unnamed file created with permission bits
/// `mode` (less the process's umask), which the target keeps:
/// [`open_write`], [`PreparedWrite::append`] and `fsync`.
pub fn prepare_write_with_mode(
    resolver: &Resolver,
    root: impl AsFd,
    comps: &[&str],
    bytes: &[u8],
    mode: u32,
) -> RootedResult<PreparedWrite> {
    let mut write = open_write(resolver, root, comps, mode)?;
    write.append(bytes)?;
    write.sync()?;
    Ok(write)
}

/// Opens an empty unnamed file to replace (or create) the regular file
/// `comps`, for [`PreparedWrite::append`] (a chunked write).
///
/// The parent (every component but the last) is resolved like
/// [`open_dir_beneath`]; an existing target must be a regular file (a
/// symlink is [`RootedError::Symlink`], a file mounted over the name
/// [`RootedError::MountCrossing`], anything else [`RootedError::NotRegular`];
/// its link count does not matter, since it is never opened). The file is
/// an `O_TMPFILE` in that directory with permission bits `mode & 0o666`
/// (less the umask), which the target keeps.
pub fn open_write(resolver: &Resolver, root: impl AsFd, comps: &[&str], mode: u32) -> RootedResult<PreparedWrite> {
    let root = root.as_fd();
    check_components(comps)?;
    let Some((name, parent)) = comps.split_last() else {
        return Err(RootedError::NotRegular { path: display(comps), what: "it is a directory" });
    };
    let path = display(comps);
    let dir = open_dir_beneath(resolver, root, parent)?;
    match rustix::fs::statat(&dir, *name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => {}
        Err(e) => return Err(RootedError::io(format!("fstatat({path:?}, AT_SYMLINK_NOFOLLOW)"), e)),
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => {
                // A file mounted over the name: renaming over it would fail
                // (EBUSY) after the work; say what it is first.
                let at = rustix::fs::statx(&dir, *name, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::MNT_ID)
                    .map_err(|e| RootedError::io(format!("statx({path:?}, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID)"), e))?;
                if at.stx_mnt_id != mount_id(dir.as_fd()).map_err(|f| RootedError::from_fault(f, comps))? {
                    return Err(RootedError::MountCrossing { path });
                }
            }
            FileType::Symlink => return Err(RootedError::Symlink { path }),
            FileType::Directory => return Err(RootedError::NotRegular { path, what: "it is a directory" }),
            _ => {
                return Err(RootedError::NotRegular { path, what: "it is not a regular file (FIFO, socket or device)" })
            }
        },
    }
    let file = rustix::fs::openat(
        &dir,
        ".",
        OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode & 0o666),
    )
    .map_err(|e| RootedError::io(format!("openat(dir of {path:?}, \".\", O_TMPFILE|O_WRONLY, {mode:04o})"), e))?;
    let stat = |fd: BorrowedFd<'_>, what: &str| fstat(fd, what).map_err(|f| RootedError::from_fault(f, comps));
    let file_id = FileId::of(&stat(file.as_fd(), "tmpfile")?);
    let dir_id = FileId::of(&stat(dir.as_fd(), "parent dir")?);
    Ok(PreparedWrite { dir, file, name: (*name).to_owned(), path, dir_id, file_id, bytes: 0 })
}

impl PreparedWrite {
    /// `(dev, ino)` of the target's directory.
    pub fn dir_id(&self) -> FileId {
        self.dir_id
    }

    /// `(dev, ino)` of the unnamed file holding the bytes (the inode that
    /// will carry the target's name).
    pub fn file_id(&self) -> FileId {
        self.file_id
    }

    /// How many bytes the file holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Appends `bytes` to the unnamed file (nothing is named or synced).
    pub fn append(&mut self, bytes: &[u8]) -> RootedResult<()> {
        let mut written = 0;
        while written < bytes.len() {
            match rustix::io::write(&self.file, &bytes[written..]) {
                Ok(0) => return Err(RootedError::io(format!("write(tmpfile for {:?})", self.path), Errno::IO)),
                Ok(n) => written += n,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(RootedError::io(format!("write(tmpfile for {:?})", self.path), e)),
            }
        }
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    /// `fsync` of the unnamed file.
    fn sync(&self) -> RootedResult<()> {
        rustix::fs::fsync(&self.file).map_err(|e| RootedError::io(format!("fsync(tmpfile for {:?})", self.path), e))
    }

    /// The unnamed file holding the bytes (for a caller that starts its
    /// writeback early; nothing may be written through it).
    pub fn file(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// A second descriptor of the unnamed file, for a writer in another
    /// process (the broker hands a chunked write's file to airlock, which
    /// appends to it). [`PreparedWrite::commit`] counts the bytes the file
    /// holds then, whoever wrote them.
    pub fn share(&self) -> RootedResult<OwnedFd> {
        rustix::io::fcntl_dupfd_cloexec(&self.file, 0)
            .map_err(|e| RootedError::io(format!("F_DUPFD_CLOEXEC(tmpfile for {:?})", self.path), e))
    }

    /// The target's directory handle (for [`remove_stage_entry`]).
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// Makes the bytes the target's content: `fsync(file)` (a chunked
    /// write's appends are synced here, before any name), `linkat(file, "", dir,
    /// stage_name, AT_EMPTY_PATH)`, then `renameat(dir, stage_name, dir,
    /// target)`, which replaces the name without opening the old inode,
    /// then `fsync(dir)`. If the rename fails, the staging entry is removed
    /// (after checking it is still this file). After the rename the target
    /// must be the prepared file's `(dev, ino)`: a staging entry swapped by
    /// another process in between is [`RootedError::Replaced`], never a
    /// write reported as landed. Returns the byte count: the file's size
    /// once synced (with a [`PreparedWrite::share`]d file, what the other
    /// writer appended).
    ///
    /// `stage_name` must be a single component that does not exist (the
    /// caller picks it, e.g. to write a recovery record first).
    pub fn commit(self, stage_name: &str) -> RootedResult<u64> {
        check_components(&[stage_name])?;
        self.sync()?;
        let path = &self.path;
        let bytes = fstat(self.file.as_fd(), "tmpfile before naming")
            .map_err(|f| RootedError::from_fault(f, &[path.as_str()]))?
            .st_size as u64;
        rustix::fs::linkat(&self.file, "", &self.dir, stage_name, AtFlags::EMPTY_PATH).map_err(|e| {
            RootedError::io(format!("linkat(tmpfile, \"\", dir of {path:?}, {stage_name:?}, AT_EMPTY_PATH)"), e)
        })?;
        if let Err(e) = rustix::fs::renameat(&self.dir, stage_name, &self.dir, self.name.as_str()) {
            let err = RootedError::io(format!("renameat(dir, {stage_name:?}, dir, {:?})", self.name), e);
            // Best effort: the rename's error is the one to report.
            let _ = remove_stage_entry(&self.dir, stage_name, self.file_id);
            return Err(err);
        }
        rustix::fs::fsync(&self.dir).map_err(|e| RootedError::io(format!("fsync(dir of {path:?})"), e))?;
        let now = rustix::fs::statat(&self.dir, self.name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| RootedError::io(format!("fstatat(dir, {:?}, AT_SYMLINK_NOFOLLOW)", self.name), e))?;
        if FileId::of(&now) != self.file_id {
            return Err(RootedError::Replaced { path: path.clone(), found: FileId::of(&now), expected: self.file_id });
        }
        Ok(bytes)
    }
}

/// Removes the staging entry `stage_name` from `dir` only if it is a
/// regular file whose `(dev, ino)` is `expected`, then syncs `dir` (which
/// must therefore be open for reading, as [`open_dir_beneath`] opens it, not
/// `O_PATH`).
/// `Ok(false)` when there is no such entry. Anything else at that name is
/// left alone and reported: [`RootedError::NotRegular`] or
/// [`RootedError::Symlink`] for another kind, [`RootedError::Io`] with
/// `EEXIST` for another file.
pub fn remove_stage_entry(dir: impl AsFd, stage_name: &str, expected: FileId) -> RootedResult<bool> {
    let dir = dir.as_fd();
    check_components(&[stage_name])?;
    let st = match rustix::fs::statat(dir, stage_name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(false),
        Err(e) => return Err(RootedError::io(format!("fstatat(dir, {stage_name:?}, AT_SYMLINK_NOFOLLOW)"), e)),
    };
    let path = stage_name.to_owned();
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {}
        FileType::Symlink => return Err(RootedError::Symlink { path }),
        _ => return Err(RootedError::NotRegular { path, what: "a staging entry that is not a regular file" }),
    }
    if FileId::of(&st) != expected {
        return Err(RootedError::io(
            format!(
                "staging entry {stage_name:?} is ({}, {}), not the staged file ({}, {}); left in place",
                st.st_dev, st.st_ino, expected.dev, expected.ino
            ),
            Errno::EXIST,
        ));
    }
    match rustix::fs::unlinkat(dir, stage_name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(RootedError::io(format!("unlinkat(dir, {stage_name:?}, 0)"), e)),
    }
    rustix::fs::fsync(dir).map_err(|e| RootedError::io("fsync(dir)", e))?;
    Ok(true)
}

#[cfg(test)]
mod tests;
