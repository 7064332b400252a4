//! Unpacking the archive into the worker's private directory.
//!
//! Every record passes the reader's checks ([`crate::archive::Reader`]):
//! normal relative paths without CR/LF/NUL, no duplicate, no case
//! collision, a parent recorded as a directory before its children, the
//! limits. Files are created with `O_CREAT | O_EXCL | O_NOFOLLOW`, so
//! nothing existing is overwritten and no link is written through; links
//! are created as links and never followed by the unpacking. Stat-only
//! records are handed back (`stat_only.rs` settles them).

use crate::archive::{Entry, Reader, StatOnly};
use crate::error::GitError;
use crate::limits::Limits;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Unpacks `archive` into the new directory `into`; stat-only files are
/// returned, not created (`stat_only.rs` decides).
pub(crate) fn unpack(archive: &Path, into: &Path, limits: Limits) -> Result<Vec<StatOnly>, GitError> {
    let mut stat_only = Vec::new();
    let file = File::open(archive).map_err(GitError::io("opening the snapshot"))?;
    DirBuilder::new().mode(0o700).create(into).map_err(GitError::io("creating the unpack directory"))?;
    let reader = Reader::new(BufReader::with_capacity(1 << 20, file), limits)?;
    reader.read_all(|entry, data| {
        let at = into.join(entry.path());
        match entry {
            Entry::Dir(_) => DirBuilder::new().mode(0o755).create(&at).map_err(GitError::io("creating a directory")),
            Entry::File { executable, mtime, .. } => {
                let mut out = create(&at, executable)?;
                let data: &mut dyn Read =
                    data.ok_or_else(|| GitError::io("reading the snapshot")(std::io::ErrorKind::UnexpectedEof.into()))?;
                std::io::copy(data, &mut out).map_err(GitError::io("writing a file"))?;
                set_mtime(&out, mtime)
            }
            Entry::Stat(file) => {
                stat_only.push(file);
                Ok(())
            }
            Entry::Link { target, .. } => {
                use std::os::unix::ffi::OsStrExt;
                std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&target), &at)
                    .map_err(GitError::io("creating a link"))
            }
        }
    })?;
    Ok(stat_only)
}

/// Creates `file` at `at` sparse: its size without its bytes (tmpfs
/// charges no memory for a hole), and its time.
pub(crate) fn create_sparse(at: &Path, file: &StatOnly) -> Result<(), GitError> {
    let out = create(at, file.executable)?;
    out.set_len(file.size).map_err(GitError::io("sizing a stat-only file"))?;
    set_mtime(&out, file.mtime)
}

/// Creates the new file `at` (never an existing one, never through a link).
fn create(at: &Path, executable: bool) -> Result<File, GitError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if executable { 0o755 } else { 0o644 })
        .custom_flags(libc_o_nofollow())
        .open(at)
        .map_err(GitError::io("creating a file"))
}

/// Gives `file` the host's modification time.
fn set_mtime(file: &File, mtime: (i64, u32)) -> Result<(), GitError> {
    let when = std::time::UNIX_EPOCH
        .checked_add(std::time::Duration::new(mtime.0.max(0) as u64, mtime.1))
        .unwrap_or(std::time::UNIX_EPOCH);
    file.set_times(std::fs::FileTimes::new().set_modified(when)).map_err(GitError::io("setting a file's time"))
}

/// `O_NOFOLLOW` (rustix's flag, as the raw value std wants).
fn libc_o_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}
