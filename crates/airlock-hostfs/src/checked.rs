//! The one checked regular file: every file this crate opens for reading
//! (a declared input, a source query's file, a Git snapshot's file, a
//! broker read) is opened by [`RegularFile::open_checked`], and nowhere
//! else.
//!
//! The rule, in this order, so that a refusal reads no byte and a FIFO,
//! socket or device is never opened for reading:
//!
//! 1. open the entry `O_PATH | O_NOFOLLOW` (reads nothing, no side effect
//!    on a FIFO or device) and `fstat` it (the walker: one `statx` that
//!    also answers its mount id);
//! 2. the caller's check of that probe (the walker compares it with the
//!    listed entry's identity and its directory's mount);
//! 3. it must be a regular file (a link is [`FaultKind::Symlink`], a
//!    directory [`FaultKind::Directory`], anything else
//!    [`FaultKind::Special`]) with exactly one link
//!    ([`FaultKind::Hardlink`]) and at most the caller's bound
//!    ([`FaultKind::TooLarge`]);
//! 4. reopen it `O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW`; the
//!    reopened handle must be the same inode ([`FaultKind::Race`]) and pass
//!    step 3 again.
//!
//! How the entry is reached (the [`crate::Resolver`] beneath a handle, or
//! one name in a listed directory) is the caller's; what a refusal is
//! called (`input.*`, `path.*`, `broker.*`, a skipped entry) is decided at
//! each caller's edge from the [`FaultKind`].

use crate::dir::Dir;
use crate::error::{Error, Result};
use crate::fault::{fstat, not_regular, status, Fault, FaultKind, Status};
use crate::resolve::Resolver;
use airlock_core::{ReasonCode, RelPath};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{OFlags, Stat};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Write;

/// Size of one read while copying.
const CHUNK: u64 = 256 * 1024;

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

/// Step 3 of the rule.
fn check(st: &Status, max_bytes: u64) -> Result<(), Fault> {
    if let Some(fault) = not_regular(st.mode) {
        return Err(fault);
    }
    if st.nlink != 1 {
        return Err(Fault::new(
            FaultKind::Hardlink(st.nlink),
            format!("it has {} hard links; only files with exactly one are read", st.nlink),
        ));
    }
    if st.size > max_bytes {
        return Err(Fault::new(FaultKind::TooLarge, format!("it is {} bytes, more than {max_bytes}", st.size)));
    }
    Ok(())
}

impl RegularFile {
    /// Opens a file by the rule of this module: `open(flags)` reaches the
    /// entry (it is called with `O_PATH` first, then with `O_RDONLY |
    /// O_NONBLOCK | O_NOCTTY`; it adds `O_NOFOLLOW | O_CLOEXEC`), `probe`
    /// is the caller's check of the `O_PATH` handle's status (`fstat`, or
    /// with `mount` one `statx` that also gives its mount id), and
    /// `max_bytes` bounds the size (`u64::MAX`: no bound).
    pub(crate) fn open_checked(
        mut open: impl FnMut(OFlags) -> Result<OwnedFd, Fault>,
        probe: impl FnOnce(&Status) -> Result<(), Fault>,
        max_bytes: u64,
        mount: bool,
    ) -> Result<RegularFile, Fault> {
        let path_fd = open(OFlags::PATH)?;
        let st = status(path_fd.as_fd(), "O_PATH probe", mount)?;
        probe(&st)?;
        check(&st, max_bytes)?;
        let fd = open(OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)?;
        let again = fstat(&fd, "reopened file")?;
        if (again.st_dev, again.st_ino) != st.dev_ino {
            return Err(Fault::new(FaultKind::Race, "the file was replaced while it was opened"));
        }
        check(&Status::from(&again), max_bytes)?;
        Ok(RegularFile { file: File::from(fd), stat: again })
    }

    /// Size when opened.
    pub fn size(&self) -> u64 {
        self.stat.st_size as u64
    }

    /// Whether any execute bit was set when opened.
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

    /// Its hard-link count when opened (always 1: the rule refuses others).
    pub fn nlink(&self) -> u64 {
        self.stat.st_nlink
    }

    /// Its `(st_dev, st_ino)` when opened.
    pub fn dev_ino(&self) -> (u64, u64) {
        (self.stat.st_dev, self.stat.st_ino)
    }

    /// The open file, for a caller that reads it its own way.
    pub(crate) fn into_file(self) -> File {
        self.file
    }

    /// The open file, borrowed.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// `input.changed` unless the size and change time are still those
    /// seen when the file was opened.
    fn unchanged(&self) -> Result<()> {
        let after = fstat(&self.file, "file after reading")?;
        if after.st_size != self.stat.st_size
            || (after.st_ctime, after.st_ctime_nsec) != (self.stat.st_ctime, self.stat.st_ctime_nsec)
        {
            return Err(Error::new(ReasonCode::InputChanged, "the file changed while it was read; try again"));
        }
        Ok(())
    }

    /// Reads at most `max` bytes from `offset` with `pread`, hashing them.
    /// A file whose size or change time moved while it was read is refused
    /// (`input.changed`).
    pub fn read_range(&self, offset: u64, max: u64) -> Result<RangeRead> {
        let mut bytes = Vec::new();
        let (got, digest) = self.read_range_into(offset, max, &mut bytes)?;
        let got = got.len();
        bytes.truncate(got);
        Ok(RangeRead { bytes, sha256_hex: hex::encode(digest) })
    }

    /// [`RegularFile::read_range`] into the caller's buffer, which only
    /// ever grows (a walk reuses one for every file): the bytes read and
    /// their SHA-256, hashed chunk by chunk as they arrive.
    pub fn read_range_into<'b>(&self, offset: u64, max: u64, buf: &'b mut Vec<u8>) -> Result<(&'b [u8], [u8; 32])> {
        let want = usize::try_from(max.min(self.size().saturating_sub(offset))).unwrap_or(usize::MAX);
        if buf.len() < want {
            buf.resize(want, 0);
        }
        let mut hasher = Sha256::new();
        let mut got = 0usize;
        while got < want {
            let end = want.min(got + CHUNK as usize);
            match rustix::io::pread(&self.file, &mut buf[got..end], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => {
                    hasher.update(&buf[got..got + n]);
                    got += n;
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(Error::syscall(ReasonCode::InputUnreadable, "pread", e)),
            }
        }
        if got < want {
            return Err(Error::new(ReasonCode::InputChanged, "the file shrank while it was read; try again"));
        }
        self.unchanged()?;
        Ok((&buf[..got], hasher.finalize().into()))
    }

    /// Copies exactly the size seen at open into the new, empty `dest`
    /// (open for reading and writing) in the kernel, and hashes what
    /// `dest` then holds ([`crate::copy`]). A file that grows, shrinks or
    /// whose change time moves while it is copied is `input.changed` (the
    /// caller discards `dest`).
    /// `copied` hears of each step's bytes.
    pub(crate) fn copy_to_file(self, dest: &File, copied: &mut dyn FnMut(u64)) -> Result<crate::copy::Copied> {
        let want = self.size();
        crate::copy::copy_hashed(&self.file, dest, want.saturating_add(1), ReasonCode::InputUnreadable, copied, |n| {
            if n > want {
                return Err(Error::new(ReasonCode::InputChanged, "the file grew while it was read; try again"));
            }
            if n < want {
                return Err(Error::new(ReasonCode::InputChanged, "the file shrank while it was read; try again"));
            }
            self.unchanged()
        })
    }

    /// Hashes the file in place, from offset 0 with `pread` (the file's
    /// offset stays 0 for whoever reads it next), exactly the size seen at
    /// open: one that grows, shrinks or whose change time moves while it
    /// is read is `input.changed`. `read` hears of each step's bytes.
    pub(crate) fn hash_in_place(&self, read: &mut dyn FnMut(u64)) -> Result<String> {
        let mut hasher = Sha256::new();
        self.each_chunk(|chunk| {
            hasher.update(chunk);
            read(chunk.len() as u64);
            Ok(())
        })?;
        Ok(hex::encode(hasher.finalize()))
    }

    /// Copies exactly the size seen at open into `dest` and returns it. A
    /// file that grows, shrinks or whose change time moves while it is
    /// read is `input.changed` (the caller discards what reached `dest`).
    pub fn copy_into(self, dest: &mut impl Write) -> Result<u64> {
        self.each_chunk(|chunk| {
            dest.write_all(chunk).map_err(|e| Error::new(ReasonCode::Internal, format!("write: {e}")))
        })
    }

    /// Reads exactly the size seen at open, from offset 0 with `pread`,
    /// handing each chunk to `take`; returns the size. A file that grows,
    /// shrinks or whose change time moves while it is read is
    /// `input.changed`.
    fn each_chunk(&self, mut take: impl FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        let want = self.size();
        // One byte more than the file, so growth is seen.
        let mut buf = vec![0u8; (want + 1).min(4 * CHUNK) as usize];
        let mut total = 0u64;
        loop {
            let room = (want + 1 - total).min(buf.len() as u64) as usize;
            let n = match rustix::io::pread(&self.file, &mut buf[..room], total) {
                Ok(0) => break,
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(Error::syscall(ReasonCode::InputUnreadable, "pread", e)),
            };
            total += n as u64;
            if total > want {
                return Err(Error::new(ReasonCode::InputChanged, "the file grew while it was read; try again"));
            }
            take(&buf[..n])?;
        }
        if total != want {
            return Err(Error::new(ReasonCode::InputChanged, "the file shrank while it was read; try again"));
        }
        self.unchanged()?;
        Ok(total)
    }
}

impl RegularFile {
    /// Opens `rel` beneath `dir` for reading by the rule of this module:
    /// resolved with no link at any component and no mount crossed, then
    /// checked (`path.symlink`, `input.not_regular`, `input.hardlink`,
    /// `path.race`). No byte is read.
    pub fn open_beneath(resolver: &Resolver, dir: &Dir, rel: &RelPath) -> Result<RegularFile> {
        let comps: Vec<&str> = rel.components().collect();
        Ok(RegularFile::beneath(resolver, dir.as_fd(), &comps, u64::MAX)?)
    }

    /// [`RegularFile::open_beneath`] for components, with a size bound.
    pub(crate) fn beneath(
        resolver: &Resolver,
        root: BorrowedFd<'_>,
        comps: &[&str],
        max_bytes: u64,
    ) -> Result<RegularFile, Fault> {
        RegularFile::open_checked(|flags| resolver.open_components(root, comps, flags), |_| Ok(()), max_bytes, false)
    }
}
