//! Segments: the names and bounds of the journal's files.
//!
//! The journal is a chain of segments. The live one is `journal.jsonl` in
//! the state directory; when an append would take it past the segment
//! bound, it is renamed to `journal.d/NNNNNN.jsonl` (its number, six or
//! more digits) and sealed, and the next append starts a new live segment
//! whose first record is a [`SEGMENT_STARTED`] header: it continues the
//! sequence numbers, its `prev` is the hash of the sealed segment's last
//! line, and its body names its own number and the previous segment's
//! (so the signature covers the link). Segment 1 has no header.

/// Directory of sealed segments, in the state directory.
pub const SEGMENTS_DIR: &str = "journal.d";
/// Default size at which the live segment is sealed (64 MiB).
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Smallest segment bound accepted (256 KiB: four of the largest records).
pub const MIN_SEGMENT_BYTES: u64 = 4 * crate::MAX_RECORD_BYTES as u64;
/// Largest segment bound accepted, and the largest segment file that is
/// read (256 MiB).
pub const MAX_SEGMENT_BYTES: u64 = 256 * 1024 * 1024;

/// Record kind: the first record of every segment after the first.
/// Body: `segment` (its number), `previous_segment`, `previous_seq`,
/// `previous_head` (the sealed segment's last line hash, equal to `prev`).
pub const SEGMENT_STARTED: &str = "JournalSegmentStarted";
/// Record kind: sealed segments are about to be removed. Body: `through`
/// (every segment up to this number is removed), `segments` (those removed
/// now, each with `exported`). Written (and synced) before the removal, so
/// a chain that starts after segment 1 is explained by a signed record.
pub const JOURNAL_PRUNED: &str = "JournalPruned";

/// `NNNNNN.jsonl` of segment `n`.
pub fn segment_file(n: u64) -> String {
    format!("{n:06}.jsonl")
}

/// `NNNNNN.exported`: the marker [`crate::Journal::mark_exported`] writes
/// once segment `n` was copied out.
pub fn export_marker(n: u64) -> String {
    format!("{n:06}.exported")
}

/// The number of a sealed segment's file name, if it is one.
pub fn parse_segment_file(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".jsonl")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n > 0)
}

/// One segment's bytes, as [`crate::Journal::for_each_segment`] hands them
/// over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Its number, from 1.
    pub number: u64,
    /// Whether it is sealed (in [`SEGMENTS_DIR`]) or the live
    /// `journal.jsonl`.
    pub sealed: bool,
    /// Its content.
    pub bytes: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_nothing_else_parses() {
        assert_eq!(segment_file(7), "000007.jsonl");
        assert_eq!(parse_segment_file("000007.jsonl"), Some(7));
        assert_eq!(parse_segment_file(&segment_file(1_234_567)), Some(1_234_567));
        for bad in ["7.jsonl", "000000.jsonl", "00000a.jsonl", "000007.json", "000007.exported", "+00007.jsonl"] {
            assert_eq!(parse_segment_file(bad), None, "{bad}");
        }
    }
}
