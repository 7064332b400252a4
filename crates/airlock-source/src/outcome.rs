//! What a query found besides its payload: skipped entries, the reasons a
//! result is partial, the ranges read; and the sealing of a result with
//! its digest.
//!
//! Skipped entries: symlinks, FIFOs, sockets and devices, files with more
//! than one link (refused by `read_file` as `input.hardlink`, and skipped by
//! listing and search, so a listing shows only what `read_file` can read),
//! names the path grammar refuses, other mounts, and unreadable or changed
//! entries are counted in `skipped` and make the result partial
//! (`skipped_entries`); `.git` and `.airlock` are counted (`control_dir`)
//! but, being outside the query's scope, do not make it partial.
//!
//! Sealing: `result_sha256` is the SHA-256 of the RFC 8785 form of
//! everything else in the result. Text is rendered with invalid UTF-8
//! replaced (`replaced_invalid_utf8`); range hashes cover the real bytes.

use airlock_core::{sha256_tagged, SourceRange};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Why an entry was left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skip {
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device.
    Special,
    /// A regular file with more than one link.
    Hardlink,
    /// A name the path grammar refuses (so no query could name it).
    InvalidName,
    /// `.git` or `.airlock`: outside the query scope (does not make the
    /// result partial).
    ControlDir,
    /// On another mount.
    Mount,
    /// Could not be opened or read.
    Unreadable,
    /// Changed or was replaced while it was read.
    Changed,
}

impl Skip {
    fn as_str(self) -> &'static str {
        match self {
            Skip::Symlink => "symlink",
            Skip::Special => "special",
            Skip::Hardlink => "hardlink",
            Skip::InvalidName => "invalid_name",
            Skip::ControlDir => "control_dir",
            Skip::Mount => "mount",
            Skip::Unreadable => "unreadable",
            Skip::Changed => "changed",
        }
    }
}

/// Why a result is partial (the names are stable: programs key on them).
pub mod reason {
    /// `read_file` returned `limit` bytes and the file goes on.
    pub const READ_LIMIT: &str = "read_limit";
    /// Enumeration looked at 10,000 entries.
    pub const MAX_ENTRIES: &str = "max_entries";
    /// Enumeration yielded 2,000 regular files.
    pub const MAX_FILES: &str = "max_files";
    /// A directory 32 levels down was not entered.
    pub const MAX_DEPTH: &str = "max_depth";
    /// Enumeration yielded 65,536 bytes of paths.
    pub const MAX_PATH_BYTES: &str = "max_path_bytes";
    /// A file was searched only in its first 1 MiB.
    pub const MAX_FILE_BYTES: &str = "max_file_bytes";
    /// Search read 8 MiB in all.
    pub const MAX_TOTAL_BYTES: &str = "max_total_bytes";
    /// Search found more than 200 matches.
    pub const MAX_MATCHES: &str = "max_matches";
    /// An entry was skipped (link, special file, unreadable, …).
    pub const SKIPPED_ENTRIES: &str = "skipped_entries";
    /// The tool's `timeout_seconds` passed (cooperative check).
    pub const DEADLINE: &str = "deadline";
}

/// Counters and evidence gathered while a query runs.
#[derive(Debug, Default)]
pub struct Tally {
    skipped: BTreeMap<Skip, u64>,
    reasons: BTreeSet<&'static str>,
    /// Ranges read, in order.
    pub ranges: Vec<SourceRange>,
    /// Whether rendering replaced invalid UTF-8.
    pub replaced: bool,
}

impl Tally {
    /// Counts one skipped entry (and, except for control directories,
    /// marks the result partial).
    pub fn skip(&mut self, why: Skip) {
        *self.skipped.entry(why).or_default() += 1;
        if why != Skip::ControlDir {
            self.reasons.insert(reason::SKIPPED_ENTRIES);
        }
    }

    /// Adds what `other` counted: its skips, reasons, ranges (after
    /// these) and replacements.
    pub fn absorb(&mut self, other: Tally) {
        for (why, n) in other.skipped {
            *self.skipped.entry(why).or_default() += n;
        }
        self.reasons.extend(other.reasons);
        self.ranges.extend(other.ranges);
        self.replaced |= other.replaced;
    }

    /// Marks the result partial for `why`.
    pub fn cut(&mut self, why: &'static str) {
        self.reasons.insert(why);
    }

    /// Whether `why` cut the result.
    pub fn was_cut(&self, why: &str) -> bool {
        self.reasons.contains(why)
    }

    /// Whether anything cut the result.
    pub fn partial(&self) -> bool {
        !self.reasons.is_empty()
    }

    /// Renders `bytes` as text, replacing invalid UTF-8 (and noting it).
    pub fn render(&mut self, bytes: &[u8]) -> String {
        let text = String::from_utf8_lossy(bytes);
        if matches!(text, std::borrow::Cow::Owned(_)) {
            self.replaced = true;
        }
        text.into_owned()
    }

    /// Adds `partial`, `partial_reasons`, `skipped` and
    /// `replaced_invalid_utf8` to `body`, then `result_sha256` over the
    /// canonical JSON of everything else. Returns the sealed result and
    /// its digest.
    pub fn seal(&self, mut body: Map<String, Value>) -> (Value, String) {
        body.insert("partial".into(), Value::Bool(self.partial()));
        body.insert("partial_reasons".into(), self.reasons.iter().map(|r| Value::from(*r)).collect());
        let skipped: Map<String, Value> =
            self.skipped.iter().map(|(k, n)| (k.as_str().to_owned(), Value::from(*n))).collect();
        body.insert("skipped".into(), Value::Object(skipped));
        body.insert("replaced_invalid_utf8".into(), Value::Bool(self.replaced));
        let mut result = Value::Object(body);
        let digest = sha256_tagged(&airlock_core::canonical_value(&result));
        if let Value::Object(body) = &mut result {
            body.insert("result_sha256".into(), Value::String(digest.clone()));
        }
        (result, digest)
    }
}

/// The object `body` is (taken, not copied); any other value is empty.
pub(crate) fn into_map(body: Value) -> Map<String, Value> {
    match body {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The digest a sealed result claims, recomputed: `Some(true)` when
/// `result_sha256` matches the canonical JSON of the rest.
pub fn verify_result(result: &Value) -> Option<bool> {
    let mut map = result.as_object()?.clone();
    let claimed = map.remove("result_sha256")?;
    Some(claimed.as_str()? == sha256_tagged(&airlock_core::canonical_value(&Value::Object(map))))
}
