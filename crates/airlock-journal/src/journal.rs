//! The journal's files: locked, bounded, synced appends to the live
//! segment, rotation into sealed segments, and reading them back in order.
//!
//! Concurrent processes append under an exclusive `flock`; an append reads
//! only the tail of the live segment (and, only when the live segment is
//! empty, the last sealed one's). [`Journal::append`] syncs the record
//! before it returns; [`Journal::append_deferred`] writes it without its own
//! `fdatasync`, for records that announce no effect, which become durable
//! with the next synced record.
//!
//! Rotation: once an append would take the live segment past its bound
//! (`[journal] segment_bytes`, default 64 MiB, 256 KiB … 256 MiB), the
//! segment is synced and renamed (no replace) to
//! `journal.d/NNNNNN.jsonl` under the exclusive lock, and the next append
//! writes the signed `JournalSegmentStarted` header first. A handle whose
//! live file was sealed by another process finds under the lock that the
//! name leads elsewhere and reopens; a missing live file with a sealed
//! segment continues from that segment's tail (as after a crash between
//! sealing and the next append).
//!
//! Readers ([`Journal::records_where`], used by fail-stop, inspect/recover
//! and attest with a filter, so only one segment and the matches are in
//! memory) list the sealed segments and read the live one under a shared
//! lock, then read the immutable sealed files.
//!
//! Export and prune: [`Journal::sealed_segment`] copies a sealed segment
//! (never the live one; the CLI creates the target file and never replaces
//! one) and [`Journal::mark_exported`] writes `journal.d/NNNNNN.exported`
//! with its SHA-256. [`Journal::prune`] removes the sealed segments below N
//! only when every one is exported and unchanged (else
//! `journal.not_exported`) unless explicitly allowed, after appending a
//! synced `JournalPruned` `{through, segments}`.

use crate::error::JournalError;
use crate::key::{check_private_file, Fault, JournalKey};
use crate::record::{encode_line, line_hash, Draft, Record, GENESIS_PREV, MAX_RECORD_BYTES};
use crate::segment::{
    export_marker, parse_segment_file, segment_file, Segment, DEFAULT_SEGMENT_BYTES, JOURNAL_PRUNED, MAX_SEGMENT_BYTES,
    MIN_SEGMENT_BYTES, SEGMENTS_DIR, SEGMENT_STARTED,
};
use crate::verify::{ChainVerifier, VerifyReport};
use crate::PublicKey;
use airlock_hostfs::PrivateDir;
use rustix::fs::{AtFlags, FlockOperation, RenameFlags};
use rustix::io::Errno;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// The live segment's file name in the state directory.
pub const JOURNAL_FILE: &str = "journal.jsonl";
/// Where the bytes of torn last lines are kept (`STATE/journal.torn`).
pub const TORN_DIR: &str = "journal.torn";
/// The kind of the record written after a torn last line was cut away.
const TAIL_REPAIRED: &str = crate::record::kind::JOURNAL_TAIL_REPAIRED;

/// How much of a segment's end an append reads first to find the last line.
const TAIL_GUESS_BYTES: u64 = 4096;

/// What an append wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The record's sequence number.
    pub seq: u64,
    /// `sha256:<hex>` of the record's line (without its newline): the next
    /// record's `prev`, and a head hash to publish as an external anchor.
    pub line_sha256: String,
}

/// An open journal: the live segment `journal.jsonl` and the sealed ones
/// in `journal.d/` of a state directory, and the key that signs its
/// records.
///
/// Any number of handles, in any number of processes, may append at once:
/// each append holds an exclusive `flock(2)` on the live segment (and,
/// within one handle, a mutex) while it reads the tail, writes its line and
/// syncs. A handle whose live segment was sealed by another finds out
/// under the lock (the name leads to another file) and opens the new one.
#[derive(Debug)]
pub struct Journal {
    state: PrivateDir,
    path: PathBuf,
    key: JournalKey,
    segment_bytes: u64,
    /// The live segment as this handle last opened it. The mutex also
    /// serializes this handle's users: `flock` locks belong to the open
    /// file, so two threads sharing it would not exclude each other.
    live: Mutex<File>,
}

/// Holds the file lock on the live segment; unlocks when dropped.
struct Flock<'a> {
    file: MutexGuard<'a, File>,
}

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        // Closing the file would release it too; an unlock that fails
        // leaves nothing to undo.
        let _ = rustix::fs::flock(&*self.file, FlockOperation::Unlock);
    }
}

/// The last record of a non-empty segment, as far as an append needs it.
struct Tail {
    seq: u64,
    hash: String,
}

/// What [`Journal::prune`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pruned {
    /// The segments removed, in order.
    pub removed: Vec<u64>,
    /// Those of them that were never exported (removed because
    /// `allow_unexported` was given).
    pub unexported: Vec<u64>,
}

impl Journal {
    /// Opens the live segment `journal.jsonl` in `state`, creating it if
    /// missing (`openat(O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW |
    /// O_CLOEXEC)`, mode `0600`). Refuses (`journal.file_unsafe`) a
    /// symlink, anything but a regular file, a file not owned by the
    /// effective user, one open to group or others, and one with more than
    /// one link. An empty live segment's directory is synced, so the file
    /// survives a crash once a record is in it. Segments are sealed at
    /// [`DEFAULT_SEGMENT_BYTES`] unless [`Journal::with_segment_bytes`] says
    /// otherwise.
    pub fn open(state: &PrivateDir, key: JournalKey) -> Result<Journal, JournalError> {
        let path = state.display_path().join(JOURNAL_FILE);
        let state = state.try_clone().map_err(|e| JournalError::io(&path, e.message()))?;
        let file = open_live(&state, &path)?;
        Ok(Journal { state, path, key, segment_bytes: DEFAULT_SEGMENT_BYTES, live: Mutex::new(file) })
    }

    /// Seals the live segment once an append would take it past `bytes`,
    /// clamped to [`MIN_SEGMENT_BYTES`]..=[`MAX_SEGMENT_BYTES`]. Default
    /// [`DEFAULT_SEGMENT_BYTES`].
    pub fn with_segment_bytes(mut self, bytes: u64) -> Journal {
        self.segment_bytes = bytes.clamp(MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES);
        self
    }

    /// The key that signs this journal's records.
    pub fn key(&self) -> &JournalKey {
        &self.key
    }

    /// The live segment's path, for messages.
    pub fn display_path(&self) -> &Path {
        &self.path
    }

    /// Appends one signed record and returns once it is durable.
    ///
    /// Under the lock it reads at most the last [`MAX_RECORD_BYTES`] + 1
    /// bytes of the live segment to find the last record's `seq` and line
    /// hash (of the last sealed segment when the live one is empty), refuses
    /// to go on after a torn last line (`journal.torn_tail`), after a record
    /// signed by another key (`journal.key_mismatch`) or after a last line
    /// it cannot read (`journal.corrupt`), refuses a record over
    /// [`MAX_RECORD_BYTES`] (`journal.record_too_large`), seals the live
    /// segment if the record would take it past the segment bound, writes
    /// the line and its newline in one `write(2)`, and `fdatasync`s.
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
        // The body of a `JournalTailRepaired` record to write before the
        // caller's, once a torn last line was cut away.
        let mut repaired: Option<Value> = None;
        loop {
            let locked = self.lock(FlockOperation::LockExclusive)?;
            let file = &*locked.file;
            let size = self.size(file)?;
            let time = crate::time::now_rfc3339();
            let (kind, invocation_id, body) = match &repaired {
                Some(repair) => (TAIL_REPAIRED, None, repair.clone()),
                None => (kind, invocation_id, body.clone()),
            };
            let appended = if size == 0 {
                self.start_segment(file, Draft { seq: 0, prev: "", time: &time, kind, invocation_id, body })?
            } else {
                let tail = match self.tail(file, &self.path, size) {
                    Err(JournalError::TornTail { .. }) if repaired.is_none() => {
                        repaired = Some(self.cut_torn_tail(file, size)?);
                        continue;
                    }
                    other => other?,
                };
                let seq = next_seq(&tail, &self.path)?;
                let draft = Draft { seq, prev: &tail.hash, time: &time, kind, invocation_id, body };
                let mut line = encode_line(&self.key, draft)?;
                let line_sha256 = line_hash(&line);
                line.push(b'\n');
                if size + line.len() as u64 > self.segment_bytes {
                    self.seal(file, size)?;
                    continue;
                }
                self.write_line(file, &line, size)?;
                Appended { seq, line_sha256 }
            };
            if repaired.take().is_some() {
                // The cut and its record are made durable before the
                // caller's record follows them.
                self.sync_file(file)?;
                continue;
            }
            return Ok(appended);
        }
    }

    /// Cuts a torn last line off the live segment `file` of `size` bytes
    /// (the exclusive lock is held). Every record is one `write(2)` of its
    /// line and newline under this lock, so a last line without its newline
    /// is what a writer left when it died inside that write (SIGKILL can cut
    /// a write at a page boundary; so can a crash of the host before the
    /// sync): it announced nothing that was carried out, since an effect
    /// follows only a completed append. Refusing every later append would
    /// turn one killed caller into a host that runs nothing, so the line is
    /// kept, not dropped: its bytes go to `STATE/journal.torn/` (a new file
    /// each time), the segment is cut back to its last newline, and the
    /// answer is the body of the `JournalTailRepaired` record that says so.
    /// A torn line longer than a record is not cut: that is damage.
    fn cut_torn_tail(&self, file: &File, size: u64) -> Result<Value, JournalError> {
        let n = size.min(MAX_RECORD_BYTES as u64 + 1);
        let start = size - n;
        let mut buf = vec![0u8; n as usize];
        file.read_exact_at(&mut buf, start)
            .map_err(|e| JournalError::io(&self.path, format_args!("pread({JOURNAL_FILE}, {n}, {start}): {e}")))?;
        let cut = match buf.iter().rposition(|&b| b == b'\n') {
            Some(i) => start + i as u64 + 1,
            None if start == 0 => 0,
            None => return Err(JournalError::TornTail { file: self.path.clone(), size }),
        };
        let torn = &buf[(cut - start) as usize..];
        let sha256 = format!("sha256:{}", hex::encode(Sha256::digest(torn)));
        let kept = format!("{TORN_DIR}/{}-{cut}.bin", &sha256[7..23]);
        let dir = self.state.ensure_subdir(TORN_DIR).map_err(|e| JournalError::io(&self.path, e.message()))?;
        let name = &kept[TORN_DIR.len() + 1..];
        if !dir.contains(name) {
            dir.write_new_file(name, torn).map_err(|e| JournalError::io(&self.path, e.message()))?;
            dir.sync().map_err(|e| JournalError::io(&self.path, e.message()))?;
        }
        rustix::fs::ftruncate(file, cut)
            .map_err(|e| JournalError::io(&self.path, format_args!("ftruncate({JOURNAL_FILE}, {cut}): {e}")))?;
        self.sync_file(file)?;
        Ok(json!({ "offset": cut, "bytes": torn.len(), "sha256": sha256, "kept_as": kept }))
    }

    /// Writes the first record(s) of an empty live segment: `draft` alone
    /// (as seq 1) for the first segment, else a [`SEGMENT_STARTED`] header
    /// continuing the last sealed segment, then `draft`.
    fn start_segment(&self, file: &File, draft: Draft<'_>) -> Result<Appended, JournalError> {
        let Draft { time, kind, invocation_id, body, .. } = draft;
        let Some((number, tail)) = self.last_sealed()? else {
            let mut line =
                encode_line(&self.key, Draft { seq: 1, prev: GENESIS_PREV, time, kind, invocation_id, body })?;
            let line_sha256 = line_hash(&line);
            line.push(b'\n');
            self.write_line(file, &line, 0)?;
            return Ok(Appended { seq: 1, line_sha256 });
        };
        let header_seq = next_seq(&tail, &self.path)?;
        let header_body = json!({
            "segment": number + 1,
            "previous_segment": number,
            "previous_seq": tail.seq,
            "previous_head": tail.hash,
        });
        let header = Draft {
            seq: header_seq,
            prev: &tail.hash,
            time,
            kind: SEGMENT_STARTED,
            invocation_id: None,
            body: header_body,
        };
        let mut lines = encode_line(&self.key, header)?;
        let header_hash = line_hash(&lines);
        lines.push(b'\n');
        let seq = header_seq + 1;
        let line = encode_line(&self.key, Draft { seq, prev: &header_hash, time, kind, invocation_id, body })?;
        let line_sha256 = line_hash(&line);
        lines.extend_from_slice(&line);
        lines.push(b'\n');
        self.write_line(file, &lines, 0)?;
        Ok(Appended { seq, line_sha256 })
    }

    /// Seals the live segment `file` of `size` bytes (the exclusive lock is
    /// held): syncs it, renames it to `journal.d/NNNNNN.jsonl` without
    /// replacing anything, and syncs both directories. The next append
    /// finds the name leads elsewhere and starts the next segment.
    fn seal(&self, file: &File, size: u64) -> Result<(), JournalError> {
        self.sync_file(file)?;
        let number = self.live_number(file, size)?;
        let sealed_dir = segments_dir(&self.state, true)?.ok_or_else(|| missing(&self.state, number))?;
        let name = segment_file(number);
        let sealed_path = sealed_dir.display_path().join(&name);
        rustix::fs::renameat_with(
            self.state.dir().as_fd(),
            JOURNAL_FILE,
            sealed_dir.dir().as_fd(),
            name.as_str(),
            RenameFlags::NOREPLACE,
        )
        .map_err(|e| match e {
            Errno::EXIST => JournalError::corrupt(
                &sealed_path,
                None,
                format!("segment {number} exists already, so the live segment cannot be sealed under that number"),
            ),
            e => JournalError::io(&self.path, format_args!("renameat2({JOURNAL_FILE}, {SEGMENTS_DIR}/{name}): {e}")),
        })?;
        sealed_dir.sync().map_err(|e| JournalError::io(&sealed_path, e.message()))?;
        self.state.sync().map_err(|e| JournalError::io(&self.path, e.message()))
    }

    /// The live segment's number: its header's, or 1 without one.
    fn live_number(&self, file: &File, size: u64) -> Result<u64, JournalError> {
        let n = size.min(MAX_RECORD_BYTES as u64);
        let mut buf = vec![0u8; n as usize];
        file.read_exact_at(&mut buf, 0)
            .map_err(|e| JournalError::io(&self.path, format_args!("pread({JOURNAL_FILE}, {n}, 0): {e}")))?;
        let first = buf.split(|&b| b == b'\n').next().unwrap_or_default();
        Ok(header_number(first).unwrap_or(1))
    }

    /// The last sealed segment's number and last record, if any is sealed.
    fn last_sealed(&self) -> Result<Option<(u64, Tail)>, JournalError> {
        let Some(&number) = sealed_numbers(&self.state)?.last() else { return Ok(None) };
        let (file, path, size) = open_sealed(&self.state, number)?;
        if size == 0 {
            return Err(JournalError::corrupt(&path, None, "a sealed segment is empty"));
        }
        Ok(Some((number, self.tail(&file, &path, size)?)))
    }

    /// Makes every record appended so far durable (`fdatasync`).
    pub fn sync(&self) -> Result<(), JournalError> {
        let file = self.live.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.sync_file(&file)
    }

    fn sync_file(&self, file: &File) -> Result<(), JournalError> {
        rustix::fs::fdatasync(file)
            .map_err(|e| JournalError::io(&self.path, format_args!("fdatasync({JOURNAL_FILE}): {e}")))
    }

    /// Every record of every kept segment, in order, parsed but not
    /// verified (use [`Journal::verify_chain`] for that). A torn last line
    /// is `journal.torn_tail`; a line that is not a record is
    /// `journal.corrupt`. Reads one segment at a time.
    pub fn records(&self) -> Result<Vec<Record>, JournalError> {
        self.records_where(|_| true)
    }

    /// The records `keep` accepts, of every kept segment, in order; the
    /// others are dropped as they are read, so only one segment and the
    /// kept records are in memory at once.
    pub fn records_where(&self, mut keep: impl FnMut(&Record) -> bool) -> Result<Vec<Record>, JournalError> {
        let mut records = Vec::new();
        self.for_each_segment(|segment| {
            let path = self.segment_path(&segment);
            if segment.bytes.is_empty() {
                return Ok(true);
            }
            let Some(body) = segment.bytes.strip_suffix(b"\n") else {
                return Err(JournalError::TornTail { file: path, size: segment.bytes.len() as u64 });
            };
            for (i, line) in body.split(|&b| b == b'\n').enumerate() {
                let record: Record = serde_json::from_slice(line)
                    .map_err(|e| JournalError::corrupt(&path, Some(i as u64 + 1), format!("not a record: {e}")))?;
                if keep(&record) {
                    records.push(record);
                }
            }
            Ok(true)
        })?;
        Ok(records)
    }

    fn segment_path(&self, segment: &Segment) -> PathBuf {
        if segment.sealed {
            self.state.display_path().join(SEGMENTS_DIR).join(segment_file(segment.number))
        } else {
            self.path.clone()
        }
    }

    /// Hands every kept segment to `each`, oldest first, the live one last,
    /// until `each` returns `false`. The list of sealed segments and the
    /// live segment's bytes are taken together under a shared lock (so no
    /// append is seen half-written and no segment is sealed in between);
    /// sealed segments never change, so they are read after it, one at a
    /// time. A segment over [`MAX_SEGMENT_BYTES`] is `journal.corrupt`.
    pub fn for_each_segment(
        &self,
        each: impl FnMut(Segment) -> Result<bool, JournalError>,
    ) -> Result<(), JournalError> {
        let (sealed, live) = {
            let locked = self.lock(FlockOperation::LockShared)?;
            let sealed = sealed_numbers(&self.state)?;
            let live = read_file(&locked.file, &self.path)?;
            (sealed, live)
        };
        visit_segments(&self.state, sealed, live, each)
    }

    /// The live segment's bytes, read under a shared lock so no append is
    /// seen half-written ([`Journal::for_each_segment`] reads them all).
    pub fn read_bytes(&self) -> Result<Vec<u8>, JournalError> {
        let locked = self.lock(FlockOperation::LockShared)?;
        read_file(&locked.file, &self.path)
    }

    /// Verifies every kept segment, in order, as one chain under
    /// `public_key` (see [`ChainVerifier`]): each segment after the first
    /// must open with a header naming its number and the previous
    /// segment's last hash, and a chain that starts after segment 1 must be
    /// explained by a signed [`JOURNAL_PRUNED`] record in what is kept.
    pub fn verify_chain(&self, public_key: &PublicKey) -> Result<VerifyReport, JournalError> {
        let mut verifier = ChainVerifier::new(public_key);
        self.for_each_segment(|segment| Ok(verifier.feed(Some(segment.number), &segment.bytes)))?;
        Ok(verifier.finish(true))
    }

    /// The bytes of sealed segment `number` (the live one is never
    /// exported: it still grows).
    pub fn sealed_segment(&self, number: u64) -> Result<Vec<u8>, JournalError> {
        let (file, path, _) = open_sealed(&self.state, number)?;
        read_file(&file, &path)
    }

    /// Records that sealed segment `number`, whose bytes are `bytes`, was
    /// copied out: writes `journal.d/NNNNNN.exported` holding their
    /// SHA-256, which [`Journal::prune`] requires (and compares) before it
    /// removes the segment. Refused if `bytes` are not the segment's.
    /// Returns that SHA-256 (`sha256:<hex>`).
    pub fn mark_exported(&self, number: u64, bytes: &[u8]) -> Result<String, JournalError> {
        let current = self.sealed_segment(number)?;
        let dir = segments_dir(&self.state, false)?.ok_or_else(|| missing(&self.state, number))?;
        let marker = dir.display_path().join(export_marker(number));
        if current != bytes {
            return Err(JournalError::corrupt(&marker, None, "the exported bytes are not the segment's"));
        }
        let digest = sha256(bytes);
        dir.replace_file(&export_marker(number), format!("{digest}\n").as_bytes())
            .map_err(|e| JournalError::io(&marker, e.message()))?;
        Ok(digest)
    }

    /// Removes every sealed segment numbered below `before`, oldest first.
    /// Each must have been exported ([`Journal::mark_exported`], and not
    /// changed since) unless `allow_unexported`; otherwise nothing is
    /// removed (`journal.not_exported`). A [`JOURNAL_PRUNED`] record naming
    /// them is appended and synced before any is removed. The live segment
    /// is never removed.
    pub fn prune(&self, before: u64, allow_unexported: bool) -> Result<Pruned, JournalError> {
        let targets: Vec<u64> = sealed_numbers(&self.state)?.into_iter().filter(|n| *n < before).collect();
        let Some(&through) = targets.last() else {
            return Ok(Pruned { removed: Vec::new(), unexported: Vec::new() });
        };
        let dir = segments_dir(&self.state, false)?.ok_or_else(|| missing(&self.state, through))?;
        let mut unexported = Vec::new();
        let mut listed = Vec::new();
        for &n in &targets {
            let exported = self.exported(&dir, n)?;
            if !exported {
                unexported.push(n);
            }
            listed.push(json!({ "segment": n, "exported": exported }));
        }
        if !unexported.is_empty() && !allow_unexported {
            return Err(JournalError::NotExported { segments: unexported });
        }
        self.append(JOURNAL_PRUNED, None, json!({ "through": through, "segments": listed }))?;
        for &n in &targets {
            for name in [segment_file(n), export_marker(n)] {
                dir.remove_tree(&name).map_err(|e| JournalError::io(&dir.display_path().join(&name), e.message()))?;
            }
        }
        dir.sync().map_err(|e| JournalError::io(dir.display_path(), e.message()))?;
        Ok(Pruned { removed: targets, unexported })
    }

    /// Whether segment `n` has an export marker matching its bytes.
    fn exported(&self, dir: &PrivateDir, n: u64) -> Result<bool, JournalError> {
        let Ok(mut marker) = dir.open_nofollow(&export_marker(n)) else { return Ok(false) };
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::Read::take(&mut marker, 128), &mut text);
        Ok(text.trim() == sha256(&self.sealed_segment(n)?))
    }

    /// Locks the live segment, first making sure this handle has the file
    /// `journal.jsonl` names: after another handle sealed it, the name
    /// leads to a new file (or, for a moment, to none), which is opened.
    fn lock(&self, op: FlockOperation) -> Result<Flock<'_>, JournalError> {
        let mut file = self.live.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        loop {
            loop {
                match rustix::fs::flock(&*file, op) {
                    Ok(()) => break,
                    Err(Errno::INTR) => continue,
                    Err(e) => {
                        return Err(JournalError::io(&self.path, format_args!("flock({JOURNAL_FILE}, {op:?}): {e}")))
                    }
                }
            }
            let ours = rustix::fs::fstat(&*file)
                .map_err(|e| JournalError::io(&self.path, format_args!("fstat({JOURNAL_FILE}): {e}")))?;
            let named = match rustix::fs::statat(self.state.dir().as_fd(), JOURNAL_FILE, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => Some(st),
                Err(Errno::NOENT) => None,
                Err(e) => return Err(JournalError::io(&self.path, format_args!("fstatat({JOURNAL_FILE}): {e}"))),
            };
            if named.is_some_and(|st| st.st_dev == ours.st_dev && st.st_ino == ours.st_ino) {
                return Ok(Flock { file });
            }
            let _ = rustix::fs::flock(&*file, FlockOperation::Unlock);
            // Sealed (it is still linked, in journal.d, or was pruned since):
            // continue in the file the name leads to now. Removed or replaced
            // with nothing sealed: refused, as before segments existed.
            if ours.st_nlink == 0 && sealed_numbers(&self.state)?.is_empty() {
                return Err(JournalError::FileUnsafe {
                    file: self.path.clone(),
                    reason: "it was removed or replaced while open, and no segment was sealed".into(),
                });
            }
            *file = open_live(&self.state, &self.path)?;
        }
    }

    /// The live segment's size; refuses one with other links.
    fn size(&self, file: &File) -> Result<u64, JournalError> {
        size_of(file, &self.path)
    }

    /// Finds the last record of a segment of `size` bytes, reading at most
    /// [`MAX_RECORD_BYTES`] + 1 bytes.
    fn tail(&self, file: &File, path: &Path, size: u64) -> Result<Tail, JournalError> {
        // Most records are far shorter than the bound: the last 4 KiB
        // usually hold the whole last line, and reading the bound's 64 KiB
        // each time was most of an append's cost.
        let short = self.tail_bytes(file, path, size, TAIL_GUESS_BYTES)?;
        let (buf, start) = match last_line_start(&short, size) {
            Some(i) => (short, Some(i)),
            None => {
                let whole = self.tail_bytes(file, path, size, MAX_RECORD_BYTES as u64 + 1)?;
                let start = last_line_start(&whole, size);
                (whole, start)
            }
        };
        let body = &buf[..buf.len() - 1];
        let line = match start {
            Some(i) => &body[i..],
            None => {
                return Err(JournalError::corrupt(
                    path,
                    None,
                    format!("the last line is longer than the record bound of {MAX_RECORD_BYTES} bytes"),
                ))
            }
        };
        let bad = |reason: &str| JournalError::corrupt(path, None, format!("the last line {reason}"));
        let value: Value = serde_json::from_slice(line).map_err(|_| bad("is not JSON"))?;
        let seq = value.get("seq").and_then(Value::as_u64).ok_or_else(|| bad("has no seq"))?;
        let key_id = value.get("key_id").and_then(Value::as_str).ok_or_else(|| bad("has no key_id"))?;
        let ours = self.key.key_id();
        if key_id != ours {
            return Err(JournalError::KeyMismatch { file: path.to_path_buf(), found: key_id.to_string(), ours });
        }
        Ok(Tail { seq, hash: line_hash(line) })
    }

    /// The last `at_most` bytes of the segment `file` of `size` bytes,
    /// which must end with a newline (`journal.torn_tail` otherwise).
    fn tail_bytes(&self, file: &File, path: &Path, size: u64, at_most: u64) -> Result<Vec<u8>, JournalError> {
        let n = size.min(at_most);
        let start = size - n;
        let mut buf = vec![0u8; n as usize];
        file.read_exact_at(&mut buf, start)
            .map_err(|e| JournalError::io(path, format_args!("pread({}, {n}, {start}): {e}", file_name(path))))?;
        if buf.last() != Some(&b'\n') {
            return Err(JournalError::TornTail { file: path.to_path_buf(), size });
        }
        Ok(buf)
    }

    /// Writes `line` with one `write(2)`; a short write is truncated back to
    /// `size` (the lock is held, so nothing else wrote after it).
    fn write_line(&self, file: &File, line: &[u8], size: u64) -> Result<(), JournalError> {
        let written = loop {
            match rustix::io::write(file, line) {
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
        match rustix::fs::ftruncate(file, size) {
            Ok(()) => Err(JournalError::io(&self.path, format_args!("{failure}; truncated back to {size} bytes"))),
            Err(e) => Err(JournalError::io(
                &self.path,
                format_args!("{failure}; ftruncate({JOURNAL_FILE}, {size}) also failed: {e}"),
            )),
        }
    }
}

/// `journal.d`, created if `create`; `None` when it does not exist.
pub(crate) fn segments_dir(state: &PrivateDir, create: bool) -> Result<Option<PrivateDir>, JournalError> {
    let dir_path = state.display_path().join(SEGMENTS_DIR);
    let opened = if create { state.ensure_subdir(SEGMENTS_DIR) } else { state.open_subdir(SEGMENTS_DIR) };
    match opened {
        Ok(dir) => Ok(Some(dir)),
        Err(e) if !create && e.errno() == Some(Errno::NOENT) => Ok(None),
        Err(e) => Err(JournalError::FileUnsafe { file: dir_path, reason: e.message().to_string() }),
    }
}

/// The sealed segments' numbers, ascending.
pub(crate) fn sealed_numbers(state: &PrivateDir) -> Result<Vec<u64>, JournalError> {
    let Some(dir) = segments_dir(state, false)? else { return Ok(Vec::new()) };
    let names = dir.entries().map_err(|e| JournalError::io(dir.display_path(), e.message()))?;
    let mut numbers: Vec<u64> = names.iter().filter_map(|n| parse_segment_file(n)).collect();
    numbers.sort_unstable();
    Ok(numbers)
}

/// Opens sealed segment `number` with the checks of the live one.
pub(crate) fn open_sealed(state: &PrivateDir, number: u64) -> Result<(File, PathBuf, u64), JournalError> {
    let dir = segments_dir(state, false)?.ok_or_else(|| missing(state, number))?;
    let name = segment_file(number);
    let path = dir.display_path().join(&name);
    let file = dir.open_nofollow(&name).map_err(|e| match e.errno() {
        Some(Errno::NOENT) => missing(state, number),
        _ => JournalError::io(&path, e.message()),
    })?;
    check_private_file(&file, &path, None).map_err(|fault| unsafe_file(&path, fault))?;
    let size = file.metadata().map_err(|e| JournalError::io(&path, format_args!("fstat: {e}")))?.len();
    Ok((file, path, size))
}

pub(crate) fn missing(state: &PrivateDir, number: u64) -> JournalError {
    let path = state.display_path().join(SEGMENTS_DIR).join(segment_file(number));
    JournalError::corrupt(&path, None, "the segment is missing (pruned while being read?)")
}

/// Reads all of `file` (at most [`MAX_SEGMENT_BYTES`]).
pub(crate) fn read_file(file: &File, path: &Path) -> Result<Vec<u8>, JournalError> {
    let size = size_of(file, path)?;
    if size > MAX_SEGMENT_BYTES {
        return Err(JournalError::corrupt(
            path,
            None,
            format!("it is {size} bytes, over the segment cap of {MAX_SEGMENT_BYTES}"),
        ));
    }
    let mut bytes = vec![0u8; size as usize];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| JournalError::io(path, format_args!("pread({}, {size}, 0): {e}", file_name(path))))?;
    Ok(bytes)
}

/// The size of a segment file; refuses one with other links.
pub(crate) fn size_of(file: &File, path: &Path) -> Result<u64, JournalError> {
    let st =
        rustix::fs::fstat(file).map_err(|e| JournalError::io(path, format_args!("fstat({}): {e}", file_name(path))))?;
    if st.st_nlink != 1 {
        return Err(JournalError::FileUnsafe {
            file: path.to_path_buf(),
            reason: format!("it has {} links since it was opened; it must have exactly one", st.st_nlink),
        });
    }
    Ok(st.st_size as u64)
}

/// Hands the sealed segments `sealed` (read now, one at a time) and then
/// the live segment's bytes `live` to `each`, until it returns `false`.
pub(crate) fn visit_segments(
    state: &PrivateDir,
    sealed: Vec<u64>,
    live: Vec<u8>,
    mut each: impl FnMut(Segment) -> Result<bool, JournalError>,
) -> Result<(), JournalError> {
    let live_number = match live.split(|&b| b == b'\n').next().and_then(header_number) {
        Some(n) => n,
        None if live.is_empty() => sealed.last().map_or(1, |n| n + 1),
        None => 1,
    };
    for number in sealed {
        let (file, path, _) = open_sealed(state, number)?;
        let bytes = read_file(&file, &path)?;
        if !each(Segment { number, sealed: true, bytes })? {
            return Ok(());
        }
    }
    each(Segment { number: live_number, sealed: false, bytes: live })?;
    Ok(())
}

/// Opens (creating) the live segment and checks it; syncs the directory
/// when it is empty, so a new file survives a crash once a record is in it.
fn open_live(state: &PrivateDir, path: &Path) -> Result<File, JournalError> {
    let file = state.open_append(JOURNAL_FILE).map_err(|e| match e.errno() {
        Some(Errno::LOOP) => {
            JournalError::FileUnsafe { file: path.to_path_buf(), reason: "it is a symbolic link".into() }
        }
        Some(Errno::ISDIR) => JournalError::FileUnsafe { file: path.to_path_buf(), reason: "it is a directory".into() },
        _ => JournalError::io(path, e.message()),
    })?;
    check_private_file(&file, path, None).map_err(|fault| unsafe_file(path, fault))?;
    let size = file.metadata().map_err(|e| JournalError::io(path, format_args!("fstat: {e}")))?.len();
    if size == 0 {
        state.sync().map_err(|e| JournalError::io(path, e.message()))?;
    }
    Ok(file)
}

/// Where the last line starts in `buf`, the last bytes of a segment of
/// `size` bytes ending with a newline: after the newline before it, or at 0
/// when `buf` is the whole segment; `None` when `buf` holds only part of it.
fn last_line_start(buf: &[u8], size: u64) -> Option<usize> {
    let body = &buf[..buf.len().saturating_sub(1)];
    match body.iter().rposition(|&b| b == b'\n') {
        Some(i) => Some(i + 1),
        None => (buf.len() as u64 == size).then_some(0),
    }
}

fn next_seq(tail: &Tail, path: &Path) -> Result<u64, JournalError> {
    tail.seq.checked_add(1).ok_or_else(|| JournalError::corrupt(path, None, "the last seq is u64::MAX"))
}

/// The segment number a header line names, if `line` is a header.
fn header_number(line: &[u8]) -> Option<u64> {
    let value: Value = serde_json::from_slice(line).ok()?;
    if value.get("kind")?.as_str()? != SEGMENT_STARTED {
        return None;
    }
    value.get("body")?.get("segment")?.as_u64()
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn unsafe_file(path: &Path, fault: Fault) -> JournalError {
    match fault {
        Fault::Unsafe(reason) => JournalError::FileUnsafe { file: path.to_path_buf(), reason },
        Fault::Io(e) => e,
    }
}
