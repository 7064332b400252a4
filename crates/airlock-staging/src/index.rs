//! The pool's index, `STATE/staging/index`: one file, read and written only
//! under the pool lock, that names every reservation with what admission
//! counts (its charge, its owner, its pending terms). An admission reads it
//! once instead of opening every record.
//!
//! The records (`leases/ID`) stay the truth; the index is derived from them
//! and may only ever count *more* than they hold, never less: a change that
//! lowers a count (release, shrink, reaping) is written to the record first
//! and to the index after, a change that raises one reaches the index before
//! anyone can use its bytes. An index that cannot be trusted — missing,
//! empty, torn by a kill in the middle of a write (its length and checksum
//! disagree), of another layout, or written before this boot (it is never
//! synced) — is rebuilt from the records by a full pass.
//!
//! Layout: a header line `airlock-staging-index 1 LENGTH CHECKSUM` and a
//! JSON body of `LENGTH` bytes. It is written in place, in one `pwrite` at
//! offset 0, and read in one `pread`; bytes after the body (left by a
//! longer index before) are ignored, and the full pass truncates them.

use crate::record::{Pending, Reservation};
use crate::ProcessIdentity;
use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::PrivateDir;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

/// The index file's name in the pool directory.
pub(crate) const INDEX_FILE: &str = "index";
/// The first word of the header line.
const MAGIC: &str = "airlock-staging-index";
/// The layout of the index; another one is rebuilt, never read.
const INDEX_VERSION: u32 = 1;
/// Largest index read back (each record is at most 4 KiB and a pool holds
/// at most 512 running and 512 waiting reservations); longer is damage.
const MAX_INDEX_BYTES: usize = 8 << 20;

/// One reservation as the index knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Entry {
    /// The invocation id (the record's name).
    pub(crate) id: String,
    /// Bytes counted.
    pub(crate) charged: u64,
    /// The holding process; `None` when durable.
    pub(crate) owner: Option<ProcessIdentity>,
    /// Set for a waiting call (the pending budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pending: Option<Pending>,
    /// The index's `turn` when its owner was last found alive (or the
    /// entry was written); the owners checked longest ago are checked next.
    pub(crate) checked: u64,
}

impl Entry {
    /// The entry for `record`, checked at `turn`.
    pub(crate) fn of(record: &Reservation, turn: u64) -> Entry {
        Entry {
            id: record.invocation_id.clone(),
            charged: record.charged,
            owner: record.owner,
            pending: record.pending.clone(),
            checked: turn,
        }
    }
}

/// The index's contents.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Index {
    /// `/proc/sys/kernel/random/boot_id` when it was written.
    boot_id: String,
    /// Admissions counted so far (orders the owner checks).
    pub(crate) turn: u64,
    /// Every reservation, in no particular order.
    pub(crate) entries: Vec<Entry>,
}

impl Index {
    /// Position of the entry for `id`.
    pub(crate) fn position(&self, id: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.id == id)
    }

    /// Replaces the entry for `entry.id`, or adds it.
    pub(crate) fn put(&mut self, entry: Entry) {
        match self.position(&entry.id) {
            Some(i) => self.entries[i] = entry,
            None => self.entries.push(entry),
        }
    }

    /// Drops the entry for `id`, if any.
    pub(crate) fn remove(&mut self, id: &str) {
        self.entries.retain(|e| e.id != id);
    }
}

/// The open index file of one process.
#[derive(Debug)]
pub(crate) struct IndexFile {
    file: File,
}

impl IndexFile {
    /// Opens (creating `0600`, empty, so the first admission rebuilds it)
    /// the index, never through a link, and checks it is a regular file.
    pub(crate) fn open(pool: &PrivateDir) -> Result<IndexFile, Refusal> {
        let file = pool.open_append(INDEX_FILE)?;
        let fail = |call: &str, e: rustix::io::Errno| {
            Refusal::new(ReasonCode::ConfigStateDir, format!("{call}(staging/{INDEX_FILE}): {e}"))
        };
        let st = rustix::fs::fstat(&file).map_err(|e| fail("fstat", e))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(Refusal::new(
                ReasonCode::ConfigStateDir,
                format!("staging/{INDEX_FILE} in {} is not a regular file", pool.display_path().display()),
            ));
        }
        // Written at offset 0: with O_APPEND, Linux's pwrite would append.
        let flags = rustix::fs::fcntl_getfl(&file).map_err(|e| fail("fcntl(F_GETFL)", e))?;
        rustix::fs::fcntl_setfl(&file, flags - rustix::fs::OFlags::APPEND).map_err(|e| fail("fcntl(F_SETFL)", e))?;
        Ok(IndexFile { file })
    }

    /// The index, when it can be trusted; `None` means: rebuild it from the
    /// records. Call only under the pool lock.
    pub(crate) fn load(&self) -> Option<Index> {
        let boot = boot_id()?;
        let mut bytes = vec![0u8; 64 * 1024];
        let mut len = 0;
        // Usually one read: a short one ends it (a read cut short for any
        // other reason fails the length check, and the index is rebuilt).
        loop {
            if len == bytes.len() {
                if len >= MAX_INDEX_BYTES {
                    return None;
                }
                bytes.resize(len * 2, 0);
            }
            match self.file.read_at(&mut bytes[len..], len as u64) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return None,
            }
            if len < bytes.len() || header(&bytes[..len]).is_some_and(|(start, body)| len >= start + body) {
                break;
            }
        }
        let index = decode(&bytes[..len])?;
        (index.boot_id == *boot).then_some(index)
    }

    /// Writes `index` over the old one, in one write at offset 0 (not
    /// synced: it is rebuilt after a reboot); with `compact`, the file is
    /// truncated first. A failure leaves an index that [`IndexFile::load`]
    /// rejects (empty or torn) or the old one. Call only under the pool lock.
    pub(crate) fn store(&self, index: &mut Index, compact: bool) -> Result<(), Refusal> {
        let Some(boot) = boot_id() else {
            // Without a boot id no index is ever trusted: keep none.
            return self.invalidate();
        };
        boot.clone_into(&mut index.boot_id);
        let bytes = encode(index);
        if compact {
            self.invalidate()?;
        }
        self.file
            .write_all_at(&bytes, 0)
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("writing staging/{INDEX_FILE}: {e}")))
    }

    /// Empties the index, so the next admission rebuilds it.
    pub(crate) fn invalidate(&self) -> Result<(), Refusal> {
        self.file
            .set_len(0)
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("truncating staging/{INDEX_FILE}: {e}")))
    }
}

/// `MAGIC VERSION LENGTH CHECKSUM\n` then the JSON body of `LENGTH` bytes.
fn encode(index: &Index) -> Vec<u8> {
    let body = serde_json::to_vec(index).expect("an index serializes");
    let mut out = format!("{MAGIC} {INDEX_VERSION} {} {:016x}\n", body.len(), fnv1a(&body)).into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Where the body starts and how long it is, from a whole header line.
fn header(bytes: &[u8]) -> Option<(usize, usize)> {
    parse_header(bytes).map(|(start, len, _)| (start, len))
}

fn parse_header(bytes: &[u8]) -> Option<(usize, usize, u64)> {
    let newline = bytes.iter().take(128).position(|&b| b == b'\n')?;
    let mut words = std::str::from_utf8(&bytes[..newline]).ok()?.split(' ');
    if words.next()? != MAGIC || words.next()?.parse::<u32>().ok()? != INDEX_VERSION {
        return None;
    }
    let len: usize = words.next()?.parse().ok()?;
    let sum = u64::from_str_radix(words.next()?, 16).ok()?;
    words.next().is_none().then_some((newline + 1, len, sum))
}

/// The index in `bytes` (what follows its body is ignored), if its header
/// is whole and its body has the header's length and checksum.
fn decode(bytes: &[u8]) -> Option<Index> {
    let (start, len, sum) = parse_header(bytes)?;
    let body = bytes.get(start..start.checked_add(len)?)?;
    if fnv1a(body) != sum {
        return None;
    }
    serde_json::from_slice(body).ok()
}

/// 64-bit FNV-1a: enough to tell a torn write from a whole one (the
/// directory is private to its user; this is not a defence against them).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// This boot's id, read once per process.
fn boot_id() -> Option<&'static String> {
    static BOOT_ID: OnceLock<Option<String>> = OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            let id = id.trim();
            (!id.is_empty()).then(|| id.to_owned())
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Index {
        let owner = ProcessIdentity::current();
        let entry = |id: &str| Entry { id: id.into(), charged: 4096, owner, pending: None, checked: 3 };
        Index { boot_id: boot_id().cloned().unwrap_or_default(), turn: 7, entries: vec![entry("a"), entry("b")] }
    }

    #[test]
    fn a_whole_index_reads_back_and_a_torn_or_altered_one_does_not() {
        let index = sample();
        let bytes = encode(&index);
        let back = decode(&bytes).unwrap();
        assert_eq!((back.turn, back.entries.clone()), (7, index.entries.clone()));
        // Every strict prefix (a write cut short) is rejected ...
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_none(), "a prefix of {cut} bytes was accepted");
        }
        // ... and so is every write of a shorter index cut short over the
        // longer one; whole, it is read and the old tail ignored.
        let mut shorter = index.clone();
        shorter.entries.pop();
        shorter.turn = 8;
        let new = encode(&shorter);
        for cut in 0..new.len() {
            let mut torn = new[..cut].to_vec();
            torn.extend_from_slice(&bytes[cut..]);
            // Until the first byte that differs, it is still the old index.
            let unchanged = new[..cut] == bytes[..cut];
            match decode(&torn) {
                None => {}
                Some(old) => assert!(unchanged && old.turn == 7, "a write cut after {cut} bytes was accepted"),
            }
        }
        let mut whole = new.clone();
        whole.extend_from_slice(&bytes[new.len()..]);
        assert_eq!(decode(&whole).unwrap().entries, shorter.entries);
        // A changed byte of the body.
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(decode(&flipped).is_none());
    }

    #[test]
    fn an_index_of_another_boot_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let pool =
            PrivateDir::open_or_create(&airlock_hostfs::HostAuthority::ambient(), &dir.path().join("p")).unwrap();
        let file = IndexFile::open(&pool).unwrap();
        assert!(file.load().is_none(), "a new, empty index is rebuilt");
        let mut index = sample();
        file.store(&mut index, false).unwrap();
        assert_eq!(file.load().unwrap().entries, index.entries);
        index.boot_id = "another-boot".into();
        std::fs::write(dir.path().join("p/index"), encode(&index)).unwrap();
        assert!(file.load().is_none());
        file.invalidate().unwrap();
        assert!(file.load().is_none());
    }
}
