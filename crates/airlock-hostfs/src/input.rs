//! Opening a declared input and taking its bounded snapshot.
//!
//! The input is opened by the crate's one checked-file rule
//! ([`RegularFile`]: `O_PATH` first, regular, one link, within
//! `max_file_bytes`, then reopened non-blocking as the same inode), so a
//! refusal reads no byte; this module names the input in every message and
//! hashes the snapshot while it copies it.

use crate::checked::RegularFile;
use crate::dir::Dir;
use crate::error::{Error, Result};
use crate::fault::FaultKind;
use crate::resolve::Resolver;
use airlock_core::{ReasonCode, RelPath};
use rustix::fd::AsFd;
use sha2::{Digest, Sha256};
use std::io::Write;

/// A declared input, open for reading, checked but not yet read.
#[derive(Debug)]
pub struct InputFile {
    file: RegularFile,
    path: RelPath,
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

/// Hashes what goes through it to `inner`.
struct Hashing<'a, W: Write> {
    inner: &'a mut W,
    hasher: Sha256,
}

impl<W: Write> Write for Hashing<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
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
        let comps: Vec<&str> = rel.components().collect();
        let file = RegularFile::beneath(resolver, ceiling.as_fd(), &comps, max_bytes).map_err(|f| {
            let bound = if f.kind == FaultKind::TooLarge {
                format!(" (max_input_file_bytes = {max_bytes})")
            } else {
                String::new()
            };
            Error::from(f.context(format_args!("input {:?}{bound}", path.as_str())))
        })?;
        Ok(InputFile { file, path: path.clone() })
    }

    /// Size reported when the file was opened.
    pub fn size(&self) -> u64 {
        self.file.size()
    }

    /// Copies the file (at most `max_bytes`) into `dest`, hashing while it
    /// reads. A file over `max_bytes` is `input.too_large`; one whose size
    /// or change time moves while it is read is `input.changed`; the
    /// caller discards whatever reached `dest`.
    pub fn snapshot_into(self, dest: &mut impl Write, max_bytes: u64) -> Result<SnapshotInfo> {
        let p = self.path.as_str();
        self.check_bound(max_bytes)?;
        let mut hashing = Hashing { inner: dest, hasher: Sha256::new() };
        let bytes = self.file.copy_into(&mut hashing).map_err(|e| e.context(format_args!("input {p:?}")))?;
        Ok(SnapshotInfo { bytes, sha256_hex: hex::encode(hashing.hasher.finalize()) })
    }

    /// [`InputFile::snapshot_into`] a new, empty private file `dest` (open
    /// for reading and writing), for large inputs: the bytes are copied in
    /// the kernel and the hash is of what `dest` holds, read back while the
    /// copy proceeds; `copied` hears of each step's bytes. The same refusals.
    pub fn snapshot_to_file(
        self,
        dest: &std::fs::File,
        max_bytes: u64,
        copied: &mut dyn FnMut(u64),
    ) -> Result<SnapshotInfo> {
        self.check_bound(max_bytes)?;
        let p = self.path.clone();
        let copied =
            self.file.copy_to_file(dest, copied).map_err(|e| e.context(format_args!("input {:?}", p.as_str())))?;
        Ok(SnapshotInfo { bytes: copied.bytes, sha256_hex: copied.sha256_hex })
    }

    /// The open input (read-only), for a caller that holds it unchanged
    /// (a read lease) instead of snapshotting it; see
    /// [`InputFile::hash_held`].
    pub fn file(&self) -> &std::fs::File {
        self.file.file()
    }

    /// For an input the caller holds unchanged (its own guarantee, such as
    /// a read lease on [`InputFile::file`] taken before this is called):
    /// its size and hash, read in place without a copy. The same
    /// refusals as a snapshot; `read` hears of each step's bytes.
    pub fn hash_held(&self, max_bytes: u64, read: &mut dyn FnMut(u64)) -> Result<SnapshotInfo> {
        self.check_bound(max_bytes)?;
        let p = self.path.as_str();
        let sha256_hex = self.file.hash_in_place(read).map_err(|e| e.context(format_args!("input {p:?}")))?;
        Ok(SnapshotInfo { bytes: self.file.size(), sha256_hex })
    }

    /// `input.too_large` when the file was over `max_bytes` when opened.
    fn check_bound(&self, max_bytes: u64) -> Result<()> {
        if self.file.size() > max_bytes {
            return Err(Error::new(
                ReasonCode::InputTooLarge,
                format!(
                    "input {:?} is {} bytes, more than max_input_file_bytes = {max_bytes}",
                    self.path.as_str(),
                    self.file.size()
                ),
            ));
        }
        Ok(())
    }
}
