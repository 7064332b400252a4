//! Opening a declared input and taking its bounded snapshot.
//!
//! The order matters for "a refusal reads no byte": the entry is first
//! opened `O_PATH` (which reads nothing and has no side effects on FIFOs or
//! devices) and checked to be a regular file with one link and a size within
//! bounds. Only then is it reopened for reading, non-blocking and
//! no-follow, and the reopened handle must be the same inode.

use crate::dir::Dir;
use crate::error::{Error, Result};
use crate::resolve::Resolver;
use airlock_core::{ReasonCode, RelPath};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{FileType, OFlags, Stat};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Write};

/// Size of one read while snapshotting.
const CHUNK: usize = 256 * 1024;

/// A declared input, open for reading, checked but not yet read.
#[derive(Debug)]
pub struct InputFile {
    file: File,
    path: RelPath,
    stat: Stat,
}

/// What a snapshot holds: its size and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// Bytes copied.
    pub bytes: u64,
    /// Lowercase hex SHA-256 of those bytes.
    pub sha256_hex: String,
}

impl SnapshotInfo {
    /// `sha256:` and the hex digest.
    pub fn sha256_tagged(&self) -> String {
        format!("sha256:{}", self.sha256_hex)
    }
}

fn stat_of(fd: impl AsFd, path: &RelPath) -> Result<Stat> {
    rustix::fs::fstat(fd)
        .map_err(|e| Error::syscall(ReasonCode::InputUnreadable, format_args!("fstat({:?})", path.as_str()), e))
}

impl InputFile {
    /// Opens `rel` beneath `ceiling` (its display name is `path`, the
    /// declared path relative to the working directory), refusing links,
    /// non-regular files, files with more than one link, and files over
    /// `max_bytes`, before reading any byte.
    pub fn open(
        resolver: &Resolver,
        ceiling: &Dir,
        rel: &RelPath,
        path: &RelPath,
        max_bytes: u64,
    ) -> Result<InputFile> {
        let here = |e: Error| e.context(format_args!("input {:?}", path.as_str()));
        let probe = resolver.open_beneath(ceiling.as_fd(), rel, OFlags::PATH).map_err(here)?;
        let st = stat_of(&probe, path)?;
        check_kind(&st, path, max_bytes)?;
        let fd: OwnedFd = resolver
            .open_beneath(ceiling.as_fd(), rel, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)
            .map_err(here)?;
        let again = stat_of(&fd, path)?;
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
            return Err(Error::new(
                ReasonCode::PathRace,
                format!("input {:?} was replaced while it was opened", path.as_str()),
            ));
        }
        check_kind(&again, path, max_bytes)?;
        Ok(InputFile { file: File::from(fd), path: path.clone(), stat: again })
    }

    /// Size reported when the file was opened.
    pub fn size(&self) -> u64 {
        self.stat.st_size as u64
    }

    /// Copies at most `max_bytes` into `dest`, hashing while it reads. A file
    /// that grows past `max_bytes`, or whose size or change time moves while
    /// it is read, is refused (`input.too_large`, `input.changed`); the
    /// caller discards whatever reached `dest`.
    pub fn snapshot_into(mut self, dest: &mut impl Write, max_bytes: u64) -> Result<SnapshotInfo> {
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        let mut total: u64 = 0;
        loop {
            let room = (max_bytes + 1 - total).min(CHUNK as u64) as usize;
            let n = match self.file.read(&mut buf[..room]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(Error::new(
                        ReasonCode::InputUnreadable,
                        format!("reading input {:?}: {e}", self.path.as_str()),
                    ))
                }
            };
            total += n as u64;
            if total > max_bytes {
                return Err(Error::new(
                    ReasonCode::InputTooLarge,
                    format!("input {:?} grew past {max_bytes} bytes while it was read", self.path.as_str()),
                ));
            }
            hasher.update(&buf[..n]);
            dest.write_all(&buf[..n]).map_err(|e| {
                Error::new(ReasonCode::Internal, format!("writing snapshot of {:?}: {e}", self.path.as_str()))
            })?;
        }
        let after = stat_of(&self.file, &self.path)?;
        let moved = after.st_size != self.stat.st_size
            || total != self.stat.st_size as u64
            || (after.st_ctime, after.st_ctime_nsec) != (self.stat.st_ctime, self.stat.st_ctime_nsec);
        if moved {
            return Err(Error::new(
                ReasonCode::InputChanged,
                format!("input {:?} changed while it was read; try again", self.path.as_str()),
            ));
        }
        Ok(SnapshotInfo { bytes: total, sha256_hex: hex::encode(hasher.finalize()) })
    }
}

fn check_kind(st: &Stat, path: &RelPath, max_bytes: u64) -> Result<()> {
    let p = path.as_str();
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {}
        FileType::Symlink => {
            return Err(Error::new(ReasonCode::PathSymlink, format!("input {p:?} is a symbolic link")))
        }
        FileType::Directory => {
            return Err(Error::new(ReasonCode::InputNotRegular, format!("input {p:?} is a directory")))
        }
        other => {
            return Err(Error::new(
                ReasonCode::InputNotRegular,
                format!("input {p:?} is not a regular file ({other:?})"),
            ))
        }
    }
    if st.st_nlink != 1 {
        return Err(Error::new(
            ReasonCode::InputHardlink,
            format!("input {p:?} has {} hard links; only files with exactly one are accepted", st.st_nlink),
        ));
    }
    if st.st_size as u64 > max_bytes {
        return Err(Error::new(
            ReasonCode::InputTooLarge,
            format!("input {p:?} is {} bytes, more than max_input_file_bytes = {max_bytes}", st.st_size),
        ));
    }
    Ok(())
}
