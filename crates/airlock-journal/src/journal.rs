//! The journal file (`journal.jsonl`): locked, bounded, synced appends.

use crate::error::JournalError;
use crate::key::{check_private_file, Fault, JournalKey};
use crate::record::{encode_line, line_hash, Draft, Record, GENESIS_PREV, MAX_JOURNAL_BYTES, MAX_RECORD_BYTES};
use airlock_hostfs::PrivateDir;
use rustix::fs::FlockOperation;
use rustix::io::Errno;
use serde_json::Value;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// The journal's file name in the state directory.
pub const JOURNAL_FILE: &str = "journal.jsonl";

/// What an append wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The record's sequence number.
    pub seq: u64,
    /// `sha256:<hex>` of the record's line (without its newline): the next
    /// record's `prev`, and a head hash to publish as an external anchor.
    pub line_sha256: String,
}

/// An open journal: `journal.jsonl` in the state directory and the key
/// that signs its records.
///
/// Any number of handles, in any number of processes, may append at once:
/// each append holds an exclusive `flock(2)` on the file (and, within one
/// handle, a mutex) while it reads the tail, writes its line and syncs.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    key: JournalKey,
    /// Serializes this handle's users: `flock` locks belong to the open
    /// file, so two threads sharing it would not exclude each other.
    lock: Mutex<()>,
}

/// Holds the file lock; unlocks when dropped.
struct Flock<'a> {
    file: &'a File,
    _inner: MutexGuard<'a, ()>,
}

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        // Closing the file would release it too; an unlock that fails
        // leaves nothing to undo.
        let _ = rustix::fs::flock(self.file, FlockOperation::Unlock);
    }
}

/// The last record of a non-empty journal, as far as an append needs it.
struct Tail {
    seq: u64,
    hash: String,
}

impl Journal {
    /// Opens `journal.jsonl` in `state`, creating it if missing
    /// (`openat(O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC)`,
    /// mode `0600`). Refuses (`journal.file_unsafe`) a symlink, anything but
    /// a regular file, a file not owned by the effective user, one open to
    /// group or others, and one with more than one link. An empty journal's
    /// directory is synced, so the file survives a crash once a record is in
    /// it.
    pub fn open(state: &PrivateDir, key: JournalKey) -> Result<Journal, JournalError> {
        let path = state.display_path().join(JOURNAL_FILE);
        let file = state.open_append(JOURNAL_FILE).map_err(|e| match e.errno() {
            Some(Errno::LOOP) => {
                JournalError::FileUnsafe { file: path.clone(), reason: "it is a symbolic link".into() }
            }
            Some(Errno::ISDIR) => JournalError::FileUnsafe { file: path.clone(), reason: "it is a directory".into() },
            _ => JournalError::io(&path, e.message()),
        })?;
        check_private_file(&file, &path, None).map_err(|fault| unsafe_file(&path, fault))?;
        let journal = Journal { file, path, key, lock: Mutex::new(()) };
        if journal.size()? == 0 {
            state.sync().map_err(|e| JournalError::io(&journal.path, e.message()))?;
        }
        Ok(journal)
    }

    /// The key that signs this journal's records.
    pub fn key(&self) -> &JournalKey {
        &self.key
    }

    /// The journal's path, for messages.
    pub fn display_path(&self) -> &Path {
        &self.path
    }

    /// Appends one signed record and returns once it is durable.
    ///
    /// Under the lock it reads at most the last [`MAX_RECORD_BYTES`] + 1
    /// bytes to find the last record's `seq` and line hash, refuses to go on
    /// after a torn last line (`journal.torn_tail`), after a record signed by
    /// another key (`journal.key_mismatch`) or after a last line it cannot
    /// read (`journal.corrupt`), refuses a record over [`MAX_RECORD_BYTES`]
    /// (`journal.record_too_large`) or a journal that would pass
    /// [`MAX_JOURNAL_BYTES`] (`journal.full`), writes the line and its
    /// newline in one `write(2)`, and `fdatasync`s.
    ///
    /// A write cut short is truncated away again under the lock. If the
    /// sync fails the record may still be in the file: the caller gets an
    /// error and must not carry out the effect the record announces, so the
    /// journal may hold an intent that was never acted on, never the reverse.
    pub fn append(&self, kind: &str, invocation_id: Option<&str>, body: Value) -> Result<Appended, JournalError> {
        let appended = self.append_deferred(kind, invocation_id, body)?;
        self.sync()?;
        Ok(appended)
    }

    /// [`Journal::append`] without the `fdatasync`: the record is in the file
    /// (in order, and visible to every reader at once) but only durable after
    /// the next [`Journal::sync`] or synced append, which makes every earlier
    /// record durable with it. For records that announce no effect of their
    /// own, so that a call pays one sync per effect rather than one a record.
    pub fn append_deferred(
        &self,
        kind: &str,
        invocation_id: Option<&str>,
        body: Value,
    ) -> Result<Appended, JournalError> {
        let _locked = self.lock(FlockOperation::LockExclusive)?;
        let size = self.size()?;
        let tail = self.tail(size)?;
        let (seq, prev) = match &tail {
            None => (1, GENESIS_PREV),
            Some(t) => (
                t.seq
                    .checked_add(1)
                    .ok_or_else(|| JournalError::corrupt(&self.path, None, "the last seq is u64::MAX"))?,
                t.hash.as_str(),
            ),
        };
        let time = crate::time::now_rfc3339();
        let mut line = encode_line(&self.key, Draft { seq, prev, time: &time, kind, invocation_id, body })?;
        let line_sha256 = line_hash(&line);
        line.push(b'\n');
        if size + line.len() as u64 > MAX_JOURNAL_BYTES {
            return Err(JournalError::Full {
                file: self.path.clone(),
                size,
                line: line.len() as u64,
                cap: MAX_JOURNAL_BYTES,
            });
        }
        self.write_line(&line, size)?;
        Ok(Appended { seq, line_sha256 })
    }

    /// Makes every record appended so far durable (`fdatasync`).
    pub fn sync(&self) -> Result<(), JournalError> {
        rustix::fs::fdatasync(&self.file)
            .map_err(|e| JournalError::io(&self.path, format_args!("fdatasync({JOURNAL_FILE}): {e}")))
    }

    /// Every record, parsed but not verified (use [`crate::verify`] on
    /// [`Journal::read_bytes`] for that). A torn last line is
    /// `journal.torn_tail`; a line that is not a record is `journal.corrupt`.
    pub fn records(&self) -> Result<Vec<Record>, JournalError> {
        let bytes = self.read_bytes()?;
        if bytes.is_empty() {
            return Ok(Vec::new());
        }
        let Some(body) = bytes.strip_suffix(b"\n") else {
            return Err(JournalError::TornTail { file: self.path.clone(), size: bytes.len() as u64 });
        };
        let mut records = Vec::new();
        for (i, line) in body.split(|&b| b == b'\n').enumerate() {
            let record: Record = serde_json::from_slice(line)
                .map_err(|e| JournalError::corrupt(&self.path, Some(i as u64 + 1), format!("not a record: {e}")))?;
            records.push(record);
        }
        Ok(records)
    }

    /// The journal's bytes, read under a shared lock so no append is seen
    /// half-written. Refuses (`journal.corrupt`) a file over
    /// [`MAX_JOURNAL_BYTES`], which no append makes.
    pub fn read_bytes(&self) -> Result<Vec<u8>, JournalError> {
        let _locked = self.lock(FlockOperation::LockShared)?;
        let size = self.size()?;
        if size > MAX_JOURNAL_BYTES {
            return Err(JournalError::corrupt(
                &self.path,
                None,
                format!("it is {size} bytes, over the cap of {MAX_JOURNAL_BYTES}"),
            ));
        }
        let mut bytes = vec![0u8; size as usize];
        self.file
            .read_exact_at(&mut bytes, 0)
            .map_err(|e| JournalError::io(&self.path, format_args!("pread({JOURNAL_FILE}, {size}, 0): {e}")))?;
        Ok(bytes)
    }

    fn lock(&self, op: FlockOperation) -> Result<Flock<'_>, JournalError> {
        let inner = self.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        loop {
            match rustix::fs::flock(&self.file, op) {
                Ok(()) => break,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(JournalError::io(&self.path, format_args!("flock({JOURNAL_FILE}, {op:?}): {e}"))),
            }
        }
        Ok(Flock { file: &self.file, _inner: inner })
    }

    /// The file's size; refuses a journal whose name no longer leads to it.
    fn size(&self) -> Result<u64, JournalError> {
        let st = rustix::fs::fstat(&self.file)
            .map_err(|e| JournalError::io(&self.path, format_args!("fstat({JOURNAL_FILE}): {e}")))?;
        if st.st_nlink != 1 {
            return Err(JournalError::FileUnsafe {
                file: self.path.clone(),
                reason: format!("it has {} links since it was opened; it must have exactly one", st.st_nlink),
            });
        }
        Ok(st.st_size as u64)
    }

    /// Finds the last record of a journal of `size` bytes, reading at most
    /// [`MAX_RECORD_BYTES`] + 1 bytes.
    fn tail(&self, size: u64) -> Result<Option<Tail>, JournalError> {
        if size == 0 {
            return Ok(None);
        }
        let n = size.min(MAX_RECORD_BYTES as u64 + 1);
        let start = size - n;
        let mut buf = vec![0u8; n as usize];
        self.file
            .read_exact_at(&mut buf, start)
            .map_err(|e| JournalError::io(&self.path, format_args!("pread({JOURNAL_FILE}, {n}, {start}): {e}")))?;
        if buf.last() != Some(&b'\n') {
            return Err(JournalError::TornTail { file: self.path.clone(), size });
        }
        let body = &buf[..buf.len() - 1];
        let line = match body.iter().rposition(|&b| b == b'\n') {
            Some(i) => &body[i + 1..],
            None if start == 0 => body,
            None => {
                return Err(JournalError::corrupt(
                    &self.path,
                    None,
                    format!("the last line is longer than the record bound of {MAX_RECORD_BYTES} bytes"),
                ))
            }
        };
        let bad = |reason: &str| JournalError::corrupt(&self.path, None, format!("the last line {reason}"));
        let value: Value = serde_json::from_slice(line).map_err(|_| bad("is not JSON"))?;
        let seq = value.get("seq").and_then(Value::as_u64).ok_or_else(|| bad("has no seq"))?;
        let key_id = value.get("key_id").and_then(Value::as_str).ok_or_else(|| bad("has no key_id"))?;
        let ours = self.key.key_id();
        if key_id != ours {
            return Err(JournalError::KeyMismatch { file: self.path.clone(), found: key_id.to_string(), ours });
        }
        Ok(Some(Tail { seq, hash: line_hash(line) }))
    }

    /// Writes `line` with one `write(2)`; a short write is truncated back to
    /// `size` (the lock is held, so nothing else wrote after it).
    fn write_line(&self, line: &[u8], size: u64) -> Result<(), JournalError> {
        let written = loop {
            match rustix::io::write(&self.file, line) {
                Err(Errno::INTR) => continue,
                other => break other,
            }
        };
        let call = format!("write({JOURNAL_FILE}, {} bytes)", line.len());
        let failure = match written {
            Ok(n) if n == line.len() => return Ok(()),
            Ok(n) => format!("{call}: wrote only {n} bytes"),
            Err(e) => format!("{call}: {e}"),
        };
        match rustix::fs::ftruncate(&self.file, size) {
            Ok(()) => Err(JournalError::io(&self.path, format_args!("{failure}; truncated back to {size} bytes"))),
            Err(e) => Err(JournalError::io(
                &self.path,
                format_args!("{failure}; ftruncate({JOURNAL_FILE}, {size}) also failed: {e}"),
            )),
        }
    }
}

fn unsafe_file(path: &Path, fault: Fault) -> JournalError {
    match fault {
        Fault::Unsafe(reason) => JournalError::FileUnsafe { file: path.to_path_buf(), reason },
        Fault::Io(e) => e,
    }
}
