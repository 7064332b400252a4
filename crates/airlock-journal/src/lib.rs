//! airlock-journal: the signed, hash-chained, append-only journal that is
//! airlock's evidence of what was prepared, authorized, run and published.
//!
//! - [`JournalKey`]: the Ed25519 key in `STATE/journal.key` (raw 32-byte
//!   seed, `0600`, checked on every load), its [`PublicKey`] written to
//!   `STATE/journal.pub` for operators.
//! - [`Journal`]: one [`Record`] per line, in RFC 8785 canonical JSON:
//!   `seq` (from 1), `prev` (SHA-256 of the previous line), `time`, `kind`
//!   (see [`kind`]), `invocation_id`, `body`, `key_id` and `sig` (Ed25519
//!   over the record without `sig`). The lines are kept in segments: the
//!   live `STATE/journal.jsonl` and sealed `STATE/journal.d/NNNNNN.jsonl`
//!   (see [`SEGMENT_STARTED`] for how one chain runs across them).
//! - [`verify()`]: checks one file's bytes against a pinned public key and
//!   names the first bad line; [`Journal::verify_chain`] and
//!   [`JournalReader::verify_chain`] check every segment as one chain.
//! - [`dsse`]: DSSE v1 envelopes signed with the same key.
//!
//! # What the journal guarantees
//!
//! - **Integrity and order under a pinned key.** Given the public key (kept
//!   where the state directory's writers cannot change it), [`verify()`]
//!   detects any change, insertion, removal, reordering or reformatting of
//!   a record, and names the first line at fault: each line is signed, and
//!   each names the hash of the line before it.
//! - **Durability before effect.** [`Journal::append`] returns only after
//!   the record's line was written in one `write(2)` and `fdatasync`ed, so a
//!   caller that appends an intent (`FilePublicationPrepared`) before acting
//!   never leaves an effect the journal does not announce.
//! - **Many writers.** Any number of processes may append at once: each
//!   append holds an exclusive `flock(2)`; sequence numbers have no gaps and
//!   no duplicates.
//! - **No silent continuation after damage.** A torn last line, an
//!   unreadable last record or one signed by another key stops appends until
//!   an operator looks.
//!
//! # What it does not do
//!
//! - It does not stop anyone holding the key, or with write access to the
//!   state directory, from rewriting history: with the key, a whole new
//!   chain can be signed; without it, the journal can still be **truncated**
//!   at a record boundary or deleted, and what remains verifies. Detecting
//!   that needs an external anchor, such as a head hash
//!   ([`Appended::line_sha256`], [`VerifyReport::head`]) published or kept
//!   elsewhere.
//! - It never fills up: the live segment is sealed at a size bound
//!   ([`Journal::with_segment_bytes`], default [`DEFAULT_SEGMENT_BYTES`])
//!   and the next one continues the chain. Old sealed segments are removed
//!   only by [`Journal::prune`], once exported or explicitly allowed; the
//!   kept chain then verifies from the first kept segment's header, which
//!   proves the kept records, not the removed ones. The key is not rotated.
//! - Time stamps are the writer's clock, not a trusted time source.
//!
//! ```
//! use airlock_hostfs::{HostAuthority, PrivateDir};
//! use airlock_journal::{kind, verify, Journal, JournalKey};
//! # let tmp = tempfile::tempdir()?;
//! # let path = tmp.path().join("state");
//! let state = PrivateDir::open_or_create(&HostAuthority::ambient(), &path)?;
//! let key = JournalKey::open_or_create(&state)?;
//! let pinned = key.public_key();
//! let journal = Journal::open(&state, key)?;
//! let appended = journal.append(kind::INVOCATION_PREPARED, Some("inv-1"), serde_json::json!({"tool": "wc"}))?;
//! assert_eq!(appended.seq, 1);
//! let report = verify(&journal.read_bytes()?, &pinned);
//! assert!(report.is_ok() && report.records == 1);
//! assert_eq!(report.head.as_deref(), Some(appended.line_sha256.as_str()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod dsse;
mod error;
mod journal;
mod key;
mod reader;
mod record;
mod segment;
mod time;
mod verify;

pub use dsse::{DsseEnvelope, DsseSignature};
pub use error::{JournalError, JournalErrorKind};
pub use journal::{Appended, Journal, Pruned, JOURNAL_FILE};
pub use key::{JournalKey, PublicKey, KEY_FILE, PUBLIC_KEY_FILE};
pub use reader::JournalReader;
pub use record::{kind, Record, GENESIS_PREV, MAX_RECORD_BYTES};
pub use segment::{
    export_marker, parse_segment_file, segment_file, Segment, DEFAULT_SEGMENT_BYTES, JOURNAL_PRUNED, MAX_SEGMENT_BYTES,
    MIN_SEGMENT_BYTES, SEGMENTS_DIR, SEGMENT_STARTED,
};
pub use time::format_rfc3339;
pub use verify::{verify, BadRecord, ChainStart, ChainVerifier, VerifyReport};
