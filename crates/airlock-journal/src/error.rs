//! The crate's error: one variant per way the journal can refuse or fail,
//! each with a stable dotted reason code and a message that names the file
//! and the call.

use std::path::{Path, PathBuf};

/// Why a journal, key or envelope operation was refused or failed.
///
/// [`JournalError::code`] is for programs and never changes meaning; the
/// `Display` text is for people.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// `journal.key_missing`: the state directory has no `journal.key`.
    #[error("{}: no journal signing key (create one with `airlock init`)", file.display())]
    KeyMissing {
        /// The key file's path.
        file: PathBuf,
    },
    /// `journal.key_unsafe`: the key file is a link, not a regular file, not
    /// ours, open to others, has more than one name, or is not 32 bytes.
    #[error("{}: refusing to use the journal signing key: {reason}", file.display())]
    KeyUnsafe {
        /// The key file's path.
        file: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `journal.file_unsafe`: the journal file fails the same checks as the
    /// key (link, type, owner, mode, link count), or was unlinked while open.
    #[error("{}: refusing to use the journal: {reason}", file.display())]
    FileUnsafe {
        /// The journal's path.
        file: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `journal.io`: a system call on a journal file failed.
    #[error("{}: {call}", file.display())]
    Io {
        /// The file the call was made on.
        file: PathBuf,
        /// The call with its arguments and the error, e.g.
        /// `fdatasync(journal.jsonl): Input/output error`.
        call: String,
    },
    /// `journal.torn_tail`: the journal does not end with a newline (an
    /// append was cut short); nothing more is appended until an operator
    /// looks at it.
    #[error(
        "{}: the last line is torn (no newline at the end of {size} bytes); refusing to append after damage \
         (see `airlock journal verify`)",
        file.display()
    )]
    TornTail {
        /// The journal's path.
        file: PathBuf,
        /// The journal's size in bytes.
        size: u64,
    },
    /// `journal.record_too_large`: one record line would exceed
    /// [`crate::MAX_RECORD_BYTES`].
    #[error("record of kind {kind:?} is {bytes} bytes with its newline; a record may be at most {max} bytes")]
    RecordTooLarge {
        /// The record's kind.
        kind: String,
        /// Its size, newline included.
        bytes: usize,
        /// [`crate::MAX_RECORD_BYTES`].
        max: usize,
    },
    /// `journal.invalid_record`: the caller asked for a record that cannot be
    /// written faithfully (empty kind, a body that is not an object, an
    /// integer outside ±(2^53−1) that RFC 8785 would round).
    #[error("invalid journal record: {reason}")]
    InvalidRecord {
        /// What is wrong.
        reason: String,
    },
    /// `journal.corrupt`: existing journal content cannot be read as records.
    #[error("{}{}: journal is corrupt: {reason}", file.display(), line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Corrupt {
        /// The journal's path.
        file: PathBuf,
        /// The 1-based line, when one line is at fault.
        line: Option<u64>,
        /// What is wrong.
        reason: String,
    },
    /// `journal.key_mismatch`: the journal's last record was signed by a
    /// different key than the one appending (the key was replaced).
    #[error("{}: the last record is signed by key {found}, not by this journal's key {ours}; refusing to append", file.display())]
    KeyMismatch {
        /// The journal's path.
        file: PathBuf,
        /// `key_id` of the last record.
        found: String,
        /// `key_id` of the key in use.
        ours: String,
    },
    /// `journal.not_exported`: a prune would remove sealed segments that
    /// were never exported (or changed since), and was not told to.
    #[error(
        "segments {segments:?} were never exported; export each with `airlock journal export --segment N FILE` \
         or prune with --allow-unexported"
    )]
    NotExported {
        /// The segments' numbers.
        segments: Vec<u64>,
    },
    /// `journal.public_key_invalid`: a public key's text or bytes do not
    /// parse as an Ed25519 key.
    #[error("invalid public key: {reason}")]
    PublicKeyInvalid {
        /// What is wrong.
        reason: String,
    },
    /// `journal.signature_invalid`: a DSSE envelope does not parse or no
    /// signature in it verifies under the given key.
    #[error("signature check failed: {reason}")]
    SignatureInvalid {
        /// What is wrong.
        reason: String,
    },
}

impl JournalError {
    /// The stable dotted reason code.
    pub fn code(&self) -> &'static str {
        match self {
            JournalError::KeyMissing { .. } => "journal.key_missing",
            JournalError::KeyUnsafe { .. } => "journal.key_unsafe",
            JournalError::FileUnsafe { .. } => "journal.file_unsafe",
            JournalError::Io { .. } => "journal.io",
            JournalError::TornTail { .. } => "journal.torn_tail",
            JournalError::RecordTooLarge { .. } => "journal.record_too_large",
            JournalError::InvalidRecord { .. } => "journal.invalid_record",
            JournalError::Corrupt { .. } => "journal.corrupt",
            JournalError::KeyMismatch { .. } => "journal.key_mismatch",
            JournalError::NotExported { .. } => "journal.not_exported",
            JournalError::PublicKeyInvalid { .. } => "journal.public_key_invalid",
            JournalError::SignatureInvalid { .. } => "journal.signature_invalid",
        }
    }

    pub(crate) fn io(file: &Path, call: impl std::fmt::Display) -> JournalError {
        JournalError::Io { file: file.to_path_buf(), call: call.to_string() }
    }

    pub(crate) fn corrupt(file: &Path, line: Option<u64>, reason: impl Into<String>) -> JournalError {
        JournalError::Corrupt { file: file.to_path_buf(), line, reason: reason.into() }
    }
}
