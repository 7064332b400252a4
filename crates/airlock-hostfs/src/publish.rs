//! Publishing an output through its held parent, in steps a journal can
//! announce: write and sync a private candidate, then rename it into place
//! without replacing anything, then sync the directory.

use crate::error::{Error, Result};
use crate::output::HeldOutput;
use airlock_core::ReasonCode;
use rustix::fd::AsFd;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::io::{Read, Seek, Write};

/// Prefix of publication candidates in a destination directory.
pub const CANDIDATE_PREFIX: &str = ".airlock-candidate-";

/// A published file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// Bytes written.
    pub bytes: u64,
    /// Lowercase hex SHA-256.
    pub sha256_hex: String,
    /// `(st_dev, st_ino)` of the published file.
    pub dev_ino: (u64, u64),
}

/// A synced candidate beside the destination, not yet published. Dropping
/// it without [`Candidate::publish`] removes it.
#[derive(Debug)]
pub struct Candidate<'a> {
    held: &'a HeldOutput,
    name: String,
    file: Published,
    done: bool,
}

/// What is at a name in a directory, without following links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryIdentity {
    /// `(st_dev, st_ino)`.
    pub dev_ino: (u64, u64),
    /// Size in bytes.
    pub bytes: u64,
    /// Whether it is a regular file.
    pub regular: bool,
}

fn copy_hashed(source: &mut std::fs::File, out: &mut std::fs::File, max_bytes: u64) -> Result<(u64, String)> {
    source.rewind().map_err(|e| Error::new(ReasonCode::Internal, format!("rewinding output: {e}")))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = source.read(&mut buf).map_err(|e| Error::new(ReasonCode::Internal, format!("reading output: {e}")))?;
        if n == 0 {
            return Ok((total, hex::encode(hasher.finalize())));
        }
        total += n as u64;
        if total > max_bytes {
            return Err(Error::new(ReasonCode::LimitOutputSize, format!("output is larger than {max_bytes} bytes")));
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|e| Error::new(ReasonCode::Internal, format!("writing candidate: {e}")))?;
    }
}

impl HeldOutput {
    /// Step 1: checks the parent is still `expected_parent` and the name is
    /// still free, then copies `source` (at most `max_bytes`) into a new
    /// `0600` candidate beside the destination and syncs it.
    /// The candidate is named [`CANDIDATE_PREFIX`] + `tag` (a single safe
    /// component, such as the invocation id), so recovery can find it even
    /// when a crash came before any record named it.
    pub fn write_candidate(
        &self,
        source: &mut std::fs::File,
        max_bytes: u64,
        expected_parent: (u64, u64),
        tag: &str,
    ) -> Result<Candidate<'_>> {
        let now = rustix::fs::fstat(self.parent.as_fd())
            .map_err(|e| Error::syscall(ReasonCode::Internal, "fstat(parent)", e))?;
        if (now.st_dev, now.st_ino) != expected_parent || self.parent.dev_ino() != expected_parent {
            return Err(Error::new(
                ReasonCode::OutputParentChanged,
                format!("the parent directory of {:?} is not the one that was prepared", self.path.as_str()),
            ));
        }
        self.ensure_absent()?;
        if tag.is_empty() || tag.contains('/') || tag.contains('\0') || tag.len() > 128 {
            return Err(Error::new(ReasonCode::Internal, format!("invalid candidate tag {tag:?}")));
        }
        let name = format!("{CANDIDATE_PREFIX}{tag}");
        let fd = rustix::fs::openat(
            self.parent.as_fd(),
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| {
            Error::syscall(ReasonCode::Internal, format_args!("openat(parent, {name:?}, O_CREAT|O_EXCL)"), e)
        })?;
        let mut candidate = Candidate {
            held: self,
            name,
            file: Published { bytes: 0, sha256_hex: String::new(), dev_ino: (0, 0) },
            done: false,
        };
        let mut out = std::fs::File::from(fd);
        let (bytes, sha256_hex) = copy_hashed(source, &mut out, max_bytes)?;
        out.sync_all().map_err(|e| Error::new(ReasonCode::Internal, format!("syncing candidate: {e}")))?;
        let st = rustix::fs::fstat(&out).map_err(|e| Error::syscall(ReasonCode::Internal, "fstat(candidate)", e))?;
        candidate.file = Published { bytes, sha256_hex, dev_ino: (st.st_dev, st.st_ino) };
        Ok(candidate)
    }

    /// What is at `name` in the held parent, if anything (no link followed).
    pub fn entry(&self, name: &str) -> Result<Option<EntryIdentity>> {
        match rustix::fs::statat(self.parent.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(EntryIdentity {
                dev_ino: (st.st_dev, st.st_ino),
                bytes: st.st_size as u64,
                regular: FileType::from_raw_mode(st.st_mode) == FileType::RegularFile,
            })),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(Error::syscall(ReasonCode::Internal, format_args!("fstatat(parent, {name:?})"), e)),
        }
    }

    /// SHA-256 (hex) and size of the regular file `name` in the held parent,
    /// which must be the inode `dev_ino`.
    pub fn hash_entry(&self, name: &str, dev_ino: (u64, u64)) -> Result<(u64, String)> {
        let fd = rustix::fs::openat(
            self.parent.as_fd(),
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("openat(parent, {name:?})"), e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::syscall(ReasonCode::Internal, "fstat", e))?;
        if (st.st_dev, st.st_ino) != dev_ino || FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::new(ReasonCode::PathRace, format!("{name:?} is not the recorded file")));
        }
        let mut file = std::fs::File::from(fd);
        let mut hasher = Sha256::new();
        let n = std::io::copy(&mut file, &mut hasher)
            .map_err(|e| Error::new(ReasonCode::Internal, format!("reading {name:?}: {e}")))?;
        Ok((n, hex::encode(hasher.finalize())))
    }

    /// Renames the existing candidate `name` (which must be the inode
    /// `dev_ino`) to the output's name without replacing anything, then
    /// syncs the directory. For recovery.
    pub fn publish_candidate_named(&self, name: &str, dev_ino: (u64, u64)) -> Result<()> {
        match self.entry(name)? {
            Some(e) if e.dev_ino == dev_ino && e.regular => {}
            _ => return Err(Error::new(ReasonCode::PathRace, format!("{name:?} is not the recorded candidate"))),
        }
        rename_noreplace(self, name)?;
        self.parent.sync()
    }

    /// Removes the candidate `name` if it is still the inode `dev_ino`.
    pub fn remove_candidate_named(&self, name: &str, dev_ino: (u64, u64)) -> Result<()> {
        match self.entry(name)? {
            Some(e) if e.dev_ino == dev_ino => {
                rustix::fs::unlinkat(self.parent.as_fd(), name, AtFlags::empty())
                    .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("unlinkat({name:?})"), e))?;
                self.parent.sync()
            }
            Some(_) => Err(Error::new(ReasonCode::PathRace, format!("{name:?} is not the recorded candidate"))),
            None => Ok(()),
        }
    }
}

fn rename_noreplace(held: &HeldOutput, candidate: &str) -> Result<()> {
    rustix::fs::renameat_with(
        held.parent.as_fd(),
        candidate,
        held.parent.as_fd(),
        held.name.as_str(),
        RenameFlags::NOREPLACE,
    )
    .map_err(|e| {
        let code = if e == Errno::EXIST { ReasonCode::OutputExists } else { ReasonCode::Internal };
        Error::syscall(code, format_args!("renameat2({candidate:?}, {:?}, RENAME_NOREPLACE)", held.name), e)
    })
}

impl Candidate<'_> {
    /// The candidate's file name in the destination directory.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Size, hash and inode of what was written.
    pub fn file(&self) -> &Published {
        &self.file
    }

    /// Step 2: renames the candidate into place with `RENAME_NOREPLACE` (an
    /// output that appeared meanwhile wins and this is `output.exists`),
    /// then syncs the directory. On failure the candidate is removed.
    pub fn publish(mut self) -> Result<Published> {
        rename_noreplace(self.held, &self.name)?;
        self.done = true;
        self.held.parent.sync()?;
        Ok(self.file.clone())
    }
}

impl Drop for Candidate<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = rustix::fs::unlinkat(self.held.parent.as_fd(), self.name.as_str(), AtFlags::empty());
        }
    }
}
