//! The crate's error: one variant per way the journal can refuse or fail,
//! each with a stable dotted reason code and a message that names the file
//! and the call.

use std::path::{Path, PathBuf};

/// Why a journal, key or envelope operation was refused or failed.
///
/// [`JournalError::kind`] is for programs and never changes meaning; the
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

/// What kind of failure a [`JournalError`] is, for programs: one kind per
/// variant. [`JournalErrorKind::as_str`] is the stable dotted code and never
/// changes meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JournalErrorKind {
    /// `journal.key_missing`: the state directory has no `journal.key`.
    KeyMissing,
    /// `journal.key_unsafe`: the key file is not safe to use.
    KeyUnsafe,
    /// `journal.file_unsafe`: the journal file is not safe to use.
    FileUnsafe,
    /// `journal.io`: a system call on a journal file failed.
    Io,
    /// `journal.torn_tail`: the journal does not end with a newline.
    TornTail,
    /// `journal.record_too_large`: one record line would exceed [`crate::MAX_RECORD_BYTES`].
    RecordTooLarge,
    /// `journal.invalid_record`: a record that cannot be written faithfully.
    InvalidRecord,
    /// `journal.corrupt`: existing journal content cannot be read as records.
    Corrupt,
    /// `journal.key_mismatch`: the last record was signed by a different key.
    KeyMismatch,
    /// `journal.not_exported`: a prune would remove segments never exported.
    NotExported,
    /// `journal.public_key_invalid`: a public key does not parse.
    PublicKeyInvalid,
    /// `journal.signature_invalid`: a DSSE envelope does not verify.
    SignatureInvalid,
}

impl JournalErrorKind {
    /// Every kind.
    pub const ALL: &'static [JournalErrorKind] = &[
        JournalErrorKind::KeyMissing,
        JournalErrorKind::KeyUnsafe,
        JournalErrorKind::FileUnsafe,
        JournalErrorKind::Io,
        JournalErrorKind::TornTail,
        JournalErrorKind::RecordTooLarge,
        JournalErrorKind::InvalidRecord,
        JournalErrorKind::Corrupt,
        JournalErrorKind::KeyMismatch,
        JournalErrorKind::NotExported,
        JournalErrorKind::PublicKeyInvalid,
        JournalErrorKind::SignatureInvalid,
    ];

    /// The stable dotted code, e.g. `journal.torn_tail`.
    pub fn as_str(self) -> &'static str {
        match self {
            JournalErrorKind::KeyMissing => "journal.key_missing",
            JournalErrorKind::KeyUnsafe => "journal.key_unsafe",
            JournalErrorKind::FileUnsafe => "journal.file_unsafe",
            JournalErrorKind::Io => "journal.io",
            JournalErrorKind::TornTail => "journal.torn_tail",
            JournalErrorKind::RecordTooLarge => "journal.record_too_large",
            JournalErrorKind::InvalidRecord => "journal.invalid_record",
            JournalErrorKind::Corrupt => "journal.corrupt",
            JournalErrorKind::KeyMismatch => "journal.key_mismatch",
            JournalErrorKind::NotExported => "journal.not_exported",
            JournalErrorKind::PublicKeyInvalid => "journal.public_key_invalid",
            JournalErrorKind::SignatureInvalid => "journal.signature_invalid",
        }
    }
}

impl std::fmt::Display for JournalErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl JournalError {
    /// What kind of failure this is (see [`JournalErrorKind`]).
    pub fn kind(&self) -> JournalErrorKind {
        match self {
            JournalError::KeyMissing { .. } => JournalErrorKind::KeyMissing,
            JournalError::KeyUnsafe { .. } => JournalErrorKind::KeyUnsafe,
            JournalError::FileUnsafe { .. } => JournalErrorKind::FileUnsafe,
            JournalError::Io { .. } => JournalErrorKind::Io,
            JournalError::TornTail { .. } => JournalErrorKind::TornTail,
            JournalError::RecordTooLarge { .. } => JournalErrorKind::RecordTooLarge,
            JournalError::InvalidRecord { .. } => JournalErrorKind::InvalidRecord,
            JournalError::Corrupt { .. } => JournalErrorKind::Corrupt,
            JournalError::KeyMismatch { .. } => JournalErrorKind::KeyMismatch,
            JournalError::NotExported { .. } => JournalErrorKind::NotExported,
            JournalError::PublicKeyInvalid { .. } => JournalErrorKind::PublicKeyInvalid,
            JournalError::SignatureInvalid { .. } => JournalErrorKind::SignatureInvalid,
        }
    }

    pub(crate) fn io(file: &Path, call: impl std::fmt::Display) -> JournalError {
        JournalError::Io { file: file.to_path_buf(), call: call.to_string() }
    }

    pub(crate) fn corrupt(file: &Path, line: Option<u64>, reason: impl Into<String>) -> JournalError {
        JournalError::Corrupt { file: file.to_path_buf(), line, reason: reason.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_known_code() {
        let codes: Vec<&str> = JournalErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        let distinct: std::collections::HashSet<&str> = codes.iter().copied().collect();
        assert_eq!(distinct.len(), codes.len(), "{codes:?}");
        for (kind, code) in JournalErrorKind::ALL.iter().zip(&codes) {
            assert!(code.starts_with("journal.") && code.len() > "journal.".len(), "{kind:?}: {code}");
            assert_eq!(&kind.to_string(), code);
        }
    }

    #[test]
    fn each_variant_has_the_kind_of_its_name() {
        let file = PathBuf::from("journal.jsonl");
        let e = JournalError::TornTail { file: file.clone(), size: 3 };
        assert_eq!((e.kind(), e.kind().as_str()), (JournalErrorKind::TornTail, "journal.torn_tail"));
        let e = JournalError::corrupt(&file, Some(2), "bad");
        assert_eq!((e.kind(), e.kind().as_str()), (JournalErrorKind::Corrupt, "journal.corrupt"));
        let e = JournalError::NotExported { segments: vec![1] };
        assert_eq!((e.kind(), e.kind().as_str()), (JournalErrorKind::NotExported, "journal.not_exported"));
    }
}
