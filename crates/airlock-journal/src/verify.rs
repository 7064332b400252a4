//! Offline verification of a journal's bytes against a pinned public key.
//!
//! All segments are checked as one chain: every `JournalSegmentStarted`
//! header names its file's number and the previous segment's head; a header
//! anywhere else fails. A pruned chain verifies from its first kept
//! segment's header (`starts_after`): that proves every kept record is
//! signed and chained from the last removed record's hash, which must equal
//! the exported copy's head; it proves nothing about the removed records. A
//! chain that starts after segment 1 without a `JournalPruned` record
//! covering the gap fails, so removing old segments by hand is caught;
//! cutting off the newest segments is truncation, caught only by an
//! external anchor.

use crate::key::PublicKey;
use crate::record::{canonical, line_hash, FIELDS, GENESIS_PREV, MAX_RECORD_BYTES};
use crate::segment::{JOURNAL_PRUNED, SEGMENT_STARTED};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::Value;

/// What [`verify`] or a [`ChainVerifier`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Records that verified, in order from the first (all of them when
    /// the journal is intact).
    pub records: u64,
    /// The first record that failed; verification stopped there.
    pub first_bad: Option<BadRecord>,
    /// The bytes end with a line that has no newline (a torn append). It is
    /// also `first_bad` when nothing before it failed; it is never dropped
    /// silently.
    pub truncated_tail: bool,
    /// `sha256:<hex>` of the last line that verified: the head to compare
    /// with (or publish as) an external anchor.
    pub head: Option<String>,
    /// Segments that held records, verified or not.
    pub segments: u64,
    /// Where the chain starts when it does not start at the first record:
    /// the first kept segment's header names the record before it (a
    /// pruned journal, or one exported segment).
    pub starts_after: Option<ChainStart>,
}

/// The record a chain that was cut at a segment boundary continues from,
/// as the first kept segment's signed header names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainStart {
    /// The first kept segment's number.
    pub segment: u64,
    /// `seq` of the last record before it.
    pub seq: u64,
    /// `sha256:<hex>` of that record's line.
    pub head: String,
}

impl VerifyReport {
    /// Whether every line verified and none is torn.
    pub fn is_ok(&self) -> bool {
        self.first_bad.is_none() && !self.truncated_tail
    }
}

/// The first record that failed verification, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord {
    /// Its segment's number, when known (always, for a journal's own
    /// segments).
    pub segment: Option<u64>,
    /// Its line within its segment, from 1.
    pub line: u64,
    /// The `seq` it claims, if that much of it could be read.
    pub seq: Option<u64>,
    /// Why it failed, for people.
    pub reason: String,
}

/// Verifies one journal file (one segment, or a whole unsegmented journal)
/// from its bytes and the pinned `public_key` alone (no other state is
/// consulted): a [`ChainVerifier`] fed once.
///
/// Each line must: be at most [`MAX_RECORD_BYTES`] with its newline; parse
/// as JSON; be byte for byte its own RFC 8785 canonical form (so any
/// reformatting is caught); hold exactly the eight record fields with their
/// types; have `seq` one more than the line before; have `prev` equal to
/// the SHA-256 of the previous line's bytes; carry the pinned key's
/// `key_id`; and carry a valid Ed25519 signature (strict) over its
/// canonical form without `sig`. The first line is seq 1 with `prev` 64
/// zeros, or a segment header ([`crate::SEGMENT_STARTED`]), whose `seq`
/// and `prev` are then taken as given ([`VerifyReport::starts_after`]).
/// The first failure is reported and verification stops there.
///
/// What this cannot see: a journal cut back to an earlier record boundary
/// verifies as a shorter journal. Compare [`VerifyReport::head`] and
/// [`VerifyReport::records`] with an anchor kept elsewhere to catch that.
pub fn verify(bytes: &[u8], public_key: &PublicKey) -> VerifyReport {
    let mut verifier = ChainVerifier::new(public_key);
    verifier.feed(None, bytes);
    verifier.finish(false)
}

/// Verifies a chain of segments fed in order (see [`verify`] for what each
/// line must be).
///
/// Across segments: every segment after the first that holds records opens
/// with a header whose body names its number (the next after the previous
/// segment's, and the file's) and whose `prev` and `previous_head` are the
/// previous segment's last line hash; a header anywhere else fails. The
/// first segment fed is segment 1 starting at seq 1, or, after pruning, a
/// segment whose header is taken as the anchor: then what is proved is
/// that every kept record is signed and chained from that header on, and
/// that the header names the hash of the last removed record (compare it
/// with the head of the exported segment); nothing is proved about the
/// removed segments themselves. [`ChainVerifier::finish`] with
/// `require_pruning_record` also demands that a signed `JournalPruned`
/// record in the kept chain covers every missing segment, so removing old
/// segments by hand is caught.
#[derive(Debug)]
pub struct ChainVerifier<'k> {
    public_key: &'k PublicKey,
    key_id: String,
    report: VerifyReport,
    /// `(next seq, hash of the last line)` once a record verified.
    at: Option<(u64, String)>,
    /// Number of the last segment that held records.
    last_segment: Option<u64>,
    /// Highest `through` of a `JournalPruned` record seen.
    pruned_through: u64,
    failed: bool,
}

impl<'k> ChainVerifier<'k> {
    /// A verifier for a chain signed by `public_key`.
    pub fn new(public_key: &'k PublicKey) -> ChainVerifier<'k> {
        ChainVerifier {
            public_key,
            key_id: public_key.key_id(),
            report: VerifyReport {
                records: 0,
                first_bad: None,
                truncated_tail: false,
                head: None,
                segments: 0,
                starts_after: None,
            },
            at: None,
            last_segment: None,
            pruned_through: 0,
            failed: false,
        }
    }

    /// Verifies the next segment, numbered `number` when known. Returns
    /// whether to go on (false once something failed).
    pub fn feed(&mut self, number: Option<u64>, bytes: &[u8]) -> bool {
        if self.failed {
            return false;
        }
        if bytes.is_empty() {
            return true;
        }
        self.report.segments += 1;
        self.report.truncated_tail = bytes.last() != Some(&b'\n');
        let mut rest = bytes;
        let mut line_no = 0u64;
        while !rest.is_empty() {
            line_no += 1;
            let Some(end) = rest.iter().position(|&b| b == b'\n') else {
                self.fail(
                    number,
                    line_no,
                    claimed_seq(rest),
                    format!("the last line is truncated: {} bytes and no newline", rest.len()),
                );
                return false;
            };
            let line = &rest[..end];
            rest = &rest[end + 1..];
            if let Err(reason) = self.check(number, line_no, line) {
                self.fail(number, line_no, claimed_seq(line), reason);
                return false;
            }
        }
        true
    }

    /// The report. With `require_pruning_record`, a chain that starts after
    /// segment 1 fails unless a `JournalPruned` record in it covers every
    /// segment before its first.
    pub fn finish(mut self, require_pruning_record: bool) -> VerifyReport {
        if let (false, true, Some(start)) = (self.failed, require_pruning_record, self.report.starts_after.clone()) {
            if self.pruned_through + 1 < start.segment {
                self.report.first_bad = Some(BadRecord {
                    segment: Some(start.segment),
                    line: 1,
                    seq: Some(start.seq + 1),
                    reason: format!(
                        "segments {}..={} are missing and no JournalPruned record in the journal says they were pruned",
                        self.pruned_through + 1,
                        start.segment - 1
                    ),
                });
            }
        }
        self.report
    }

    fn fail(&mut self, segment: Option<u64>, line: u64, seq: Option<u64>, reason: String) {
        self.failed = true;
        self.report.first_bad = Some(BadRecord { segment, line, seq, reason });
    }

    fn check(&mut self, number: Option<u64>, line_no: u64, line: &[u8]) -> Result<(), String> {
        let first_of_segment = line_no == 1;
        let (expected_seq, prev) = match &self.at {
            Some((seq, prev)) => (*seq, prev.clone()),
            // The very first record: seq 1 from genesis, or a header taken
            // as the anchor of a chain cut at a segment boundary.
            None => match claimed_start(line) {
                Some((seq, prev)) if seq > 1 => (seq, prev),
                _ => (1, GENESIS_PREV.to_string()),
            },
        };
        let record = check_line(line, expected_seq, &prev, &self.key_id, self.public_key)?;
        let is_header = record["kind"] == SEGMENT_STARTED;
        let body = &record["body"];
        if first_of_segment && (self.at.is_some() || expected_seq > 1) {
            if !is_header {
                return Err("a segment after the first does not open with a JournalSegmentStarted header".into());
            }
            let named = body["segment"].as_u64().ok_or("the header names no segment")?;
            let expected = match (self.last_segment, number) {
                (Some(last), _) => Some(last + 1),
                (None, n) => n,
            };
            if expected.is_some_and(|e| e != named) || number.is_some_and(|n| n != named) {
                return Err(format!(
                    "the header names segment {named}, but this is segment {} after segment {:?}",
                    number.map_or_else(|| "?".into(), |n| n.to_string()),
                    self.last_segment
                ));
            }
            if body["previous_head"].as_str() != Some(prev.as_str())
                || body["previous_segment"].as_u64() != named.checked_sub(1)
                || body["previous_seq"].as_u64() != expected_seq.checked_sub(1)
            {
                return Err("the header does not name the previous segment's last record".into());
            }
            if self.at.is_none() {
                self.report.starts_after = Some(ChainStart { segment: named, seq: expected_seq - 1, head: prev });
            }
            self.last_segment = Some(named);
        } else if is_header {
            return Err("a JournalSegmentStarted header that does not open a segment".into());
        } else if first_of_segment {
            // Segment 1, from genesis.
            if number.is_some_and(|n| n != 1) {
                return Err(format!("segment {} starts at seq 1 without a header", number.unwrap_or(0)));
            }
            self.last_segment = Some(1);
        }
        if record["kind"] == JOURNAL_PRUNED {
            self.pruned_through = self.pruned_through.max(body["through"].as_u64().unwrap_or(0));
        }
        let hash = line_hash(line);
        self.report.records += 1;
        self.report.head = Some(hash.clone());
        self.at = Some((expected_seq + 1, hash));
        Ok(())
    }
}

/// `seq` and `prev` as a line claims them, if it is a segment header.
fn claimed_start(line: &[u8]) -> Option<(u64, String)> {
    let value: Value = serde_json::from_slice(line).ok()?;
    if value.get("kind")?.as_str()? != SEGMENT_STARTED {
        return None;
    }
    Some((value.get("seq")?.as_u64()?, value.get("prev")?.as_str()?.to_owned()))
}

fn claimed_seq(line: &[u8]) -> Option<u64> {
    serde_json::from_slice::<Value>(line).ok()?.get("seq")?.as_u64()
}

/// Checks one line; the record (without `sig`) when it verifies.
fn check_line(
    line: &[u8],
    expected_seq: u64,
    prev: &str,
    key_id: &str,
    public_key: &PublicKey,
) -> Result<Value, String> {
    if line.len() + 1 > MAX_RECORD_BYTES {
        return Err(format!(
            "the line is {} bytes with its newline, over the record bound of {MAX_RECORD_BYTES}",
            line.len() + 1
        ));
    }
    let value: Value = serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let canon = canonical(&value)?;
    if canon != line {
        return Err("not in RFC 8785 canonical form (the line was reformatted or altered)".into());
    }
    let Value::Object(mut obj) = value else {
        return Err("not a JSON object".into());
    };
    if obj.len() != FIELDS.len() || !FIELDS.iter().all(|f| obj.contains_key(*f)) {
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        return Err(format!("fields are {keys:?}, not exactly {FIELDS:?}"));
    }
    let seq = obj["seq"].as_u64().ok_or("seq is not an unsigned integer")?;
    if seq != expected_seq {
        return Err(format!("seq is {seq}, expected {expected_seq}"));
    }
    if obj["prev"].as_str() != Some(prev) {
        return Err(format!("prev does not match the previous line's hash {prev}"));
    }
    match obj["time"].as_str() {
        Some(t) if crate::time::parse_rfc3339(t).is_some() => {}
        _ => return Err("time is not an RFC 3339 UTC timestamp to the second".into()),
    }
    if obj["kind"].as_str().is_none_or(str::is_empty) {
        return Err("kind is not a non-empty string".into());
    }
    if !(obj["invocation_id"].is_string() || obj["invocation_id"].is_null()) {
        return Err("invocation_id is neither a string nor null".into());
    }
    if !obj["body"].is_object() {
        return Err("body is not an object".into());
    }
    match obj["key_id"].as_str() {
        Some(k) if k == key_id => {}
        Some(k) => return Err(format!("signed by key {k}, not by the pinned key {key_id}")),
        None => return Err("key_id is not a string".into()),
    }
    let sig = obj
        .remove("sig")
        .and_then(|s| s.as_str().and_then(|s| BASE64.decode(s).ok()))
        .ok_or("sig is not standard base64")?;
    let record = Value::Object(obj);
    let unsigned = canonical(&record)?;
    if !public_key.verify(&unsigned, &sig) {
        return Err("the signature does not verify".into());
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    //! Ed25519 verification is slow in unoptimized builds (~10 ms a
    //! signature), so the large journals are built in memory and most
    //! tamper cases use a short one; the 1,000-record journal is verified
    //! whole once and tampered near its start.

    use super::*;
    use crate::key::JournalKey;
    use crate::record::{encode_line, kind, Draft};
    use crate::time::format_rfc3339;
    use serde_json::json;

    fn key() -> JournalKey {
        JournalKey::from_seed(&[42u8; 32])
    }

    /// `n` records signed by `key`, chained from the start, one per line.
    fn journal(key: &JournalKey, n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut prev = GENESIS_PREV.to_string();
        for seq in 1..=n {
            append(&mut out, key, seq, &prev);
            prev = line_hash(last_line(&out));
        }
        out
    }

    fn append(out: &mut Vec<u8>, key: &JournalKey, seq: u64, prev: &str) {
        let kinds = [kind::INVOCATION_PREPARED, kind::WORKER_STARTED, kind::INVOCATION_FINISHED];
        let invocation = format!("inv-{}", seq / 3);
        let line = encode_line(
            key,
            Draft {
                seq,
                prev,
                time: &format_rfc3339(1_700_000_000 + seq * 7),
                kind: kinds[(seq % 3) as usize],
                invocation_id: (!seq.is_multiple_of(4)).then_some(invocation.as_str()),
                body: json!({"n": seq, "path": format!("results/out-{seq}.json"), "ok": seq.is_multiple_of(2)}),
            },
        )
        .unwrap();
        out.extend_from_slice(&line);
        out.push(b'\n');
    }

    fn last_line(bytes: &[u8]) -> &[u8] {
        let body = bytes.strip_suffix(b"\n").unwrap();
        let start = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        &body[start..]
    }

    fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
        bytes.split_inclusive(|&b| b == b'\n').map(<[u8]>::to_vec).collect()
    }

    /// Byte offset, within `line`, of a byte inside `field`'s value.
    fn field_offset(line: &[u8], field: &str) -> usize {
        let text = std::str::from_utf8(line).unwrap();
        let key = format!("\"{field}\":");
        let at = text.find(&key).unwrap() + key.len();
        match field {
            "seq" => at,
            "invocation_id" if text[at..].starts_with("null") => at + 1,
            "body" => at + 3,
            _ => at + 1 + 9.min(text[at + 1..].find('"').unwrap().saturating_sub(1)),
        }
    }

    /// Start offset of line `n` (1-based) in `bytes`.
    fn line_start(bytes: &[u8], n: u64) -> usize {
        lines(bytes).iter().take(n as usize - 1).map(Vec::len).sum()
    }

    fn assert_bad_at(report: &VerifyReport, line: u64, what: &str) {
        let bad = report.first_bad.as_ref().unwrap_or_else(|| panic!("{what}: verified"));
        assert_eq!(bad.line, line, "{what}: {bad:?}");
        assert_eq!(report.records, line - 1, "{what}");
        assert!(!report.is_ok());
    }

    #[test]
    fn a_clean_journal_of_1000_records_verifies_and_tampering_near_its_start_is_caught() {
        let key = key();
        let bytes = journal(&key, 1000);
        let report = verify(&bytes, &key.public_key());
        assert_eq!(report.first_bad, None);
        assert!(report.is_ok());
        assert_eq!(report.records, 1000);
        assert!(!report.truncated_tail);
        assert_eq!(report.head, Some(line_hash(last_line(&bytes))));
        for line in [1u64, 2] {
            let start = line_start(&bytes, line);
            for field in FIELDS {
                let mut t = bytes.clone();
                t[start + field_offset(&bytes[start..], field)] ^= 0x01;
                assert_bad_at(&verify(&t, &key.public_key()), line, &format!("line {line} {field}"));
            }
        }
    }

    #[test]
    fn flipping_a_byte_in_any_field_of_any_line_fails_at_that_line() {
        let key = key();
        let bytes = journal(&key, 25);
        for line in [1u64, 2, 13, 24, 25] {
            let start = line_start(&bytes, line);
            for field in FIELDS {
                let mut t = bytes.clone();
                t[start + field_offset(&bytes[start..], field)] ^= 0x01;
                let report = verify(&t, &key.public_key());
                assert_bad_at(&report, line, &format!("line {line} {field}"));
                assert!(!report.truncated_tail);
            }
        }
    }

    #[test]
    fn every_single_bit_flip_in_the_first_line_fails_there() {
        let key = key();
        let bytes = journal(&key, 2);
        let first = lines(&bytes)[0].len();
        for at in 0..first {
            for bit in [0x01u8, 0x20, 0x80] {
                let mut t = bytes.clone();
                t[at] ^= bit;
                assert_bad_at(&verify(&t, &key.public_key()), 1, &format!("byte {at} ^ {bit:#x}"));
            }
        }
    }

    #[test]
    fn deleting_a_middle_line_fails_at_the_next() {
        let key = key();
        let mut l = lines(&journal(&key, 10));
        l.remove(4);
        let report = verify(&l.concat(), &key.public_key());
        assert_bad_at(&report, 5, "deleted line 5");
        let bad = report.first_bad.unwrap();
        assert_eq!(bad.seq, Some(6));
        assert!(bad.reason.contains("seq is 6, expected 5"), "{}", bad.reason);
    }

    #[test]
    fn a_validly_signed_replacement_breaks_the_next_lines_prev() {
        let key = key();
        let l = lines(&journal(&key, 4));
        // Only the key holder can re-sign line 2 with other content; even
        // then line 3's prev names the original.
        let mut out = l[0].clone();
        let line = encode_line(
            &key,
            Draft {
                seq: 2,
                prev: &line_hash(last_line(&out)),
                time: "2024-01-01T00:00:00Z",
                kind: kind::INVOCATION_REFUSED,
                invocation_id: None,
                body: json!({"rewritten": true}),
            },
        )
        .unwrap();
        out.extend_from_slice(&line);
        out.push(b'\n');
        out.extend_from_slice(&l[2]);
        let report = verify(&out, &key.public_key());
        assert_bad_at(&report, 3, "prev chain");
        assert!(report.first_bad.unwrap().reason.contains("prev"));
    }

    #[test]
    fn swapping_two_lines_fails_at_the_first_swapped() {
        let key = key();
        let mut l = lines(&journal(&key, 10));
        l.swap(2, 6);
        let report = verify(&l.concat(), &key.public_key());
        assert_bad_at(&report, 3, "swapped 3 and 7");
        assert_eq!(report.first_bad.unwrap().seq, Some(7));
    }

    #[test]
    fn a_truncated_last_line_is_reported() {
        let key = key();
        let bytes = journal(&key, 10);
        // Only the newline lost.
        let report = verify(&bytes[..bytes.len() - 1], &key.public_key());
        assert!(report.truncated_tail);
        assert_bad_at(&report, 10, "lost newline");
        assert_eq!(report.first_bad.as_ref().unwrap().seq, Some(10));
        // Cut in the middle of the line.
        let report = verify(&bytes[..bytes.len() - 40], &key.public_key());
        assert!(report.truncated_tail);
        assert_bad_at(&report, 10, "half a line");
        assert!(report.first_bad.unwrap().reason.contains("truncated"));
        // An earlier failure is named first, and the torn tail still reported.
        let mut t = bytes[..bytes.len() - 40].to_vec();
        let start = line_start(&t, 2);
        let at = start + field_offset(&t[start..], "body");
        t[at] ^= 0x01;
        let report = verify(&t, &key.public_key());
        assert!(report.truncated_tail);
        assert_bad_at(&report, 2, "earlier failure");
    }

    #[test]
    fn a_different_public_key_fails_at_the_first_record() {
        let bytes = journal(&key(), 5);
        let other = JournalKey::from_seed(&[43u8; 32]).public_key();
        let report = verify(&bytes, &other);
        assert_bad_at(&report, 1, "other key");
        assert!(report.first_bad.unwrap().reason.contains("pinned key"));
    }

    #[test]
    fn a_record_signed_with_another_key_fails_there() {
        let key = key();
        let other = JournalKey::from_seed(&[44u8; 32]);
        let mut bytes = journal(&key, 10);
        let prev = line_hash(last_line(&bytes));
        append(&mut bytes, &other, 11, &prev);
        let report = verify(&bytes, &key.public_key());
        assert_bad_at(&report, 11, "other key's record");
        assert!(report.first_bad.unwrap().reason.contains("pinned key"));

        // The same, claiming our key_id: the signature fails instead.
        let mut bytes = journal(&key, 10);
        let line = encode_line(
            &other,
            Draft {
                seq: 11,
                prev: &prev,
                time: "2024-01-01T00:00:00Z",
                kind: kind::OPERATOR_RESOLVED,
                invocation_id: None,
                body: json!({}),
            },
        )
        .unwrap();
        let forged = String::from_utf8(line).unwrap().replace(&other.key_id(), &key.key_id());
        bytes.extend_from_slice(forged.as_bytes());
        bytes.push(b'\n');
        let report = verify(&bytes, &key.public_key());
        assert_bad_at(&report, 11, "forged key_id");
        assert!(report.first_bad.unwrap().reason.contains("signature"));
    }

    #[test]
    fn reformatting_a_line_is_caught() {
        let key = key();
        let bytes = journal(&key, 3);
        let l = lines(&bytes);
        let value: Value = serde_json::from_slice(l[1].strip_suffix(b"\n").unwrap()).unwrap();
        for reformatted in [
            serde_json::to_string_pretty(&value).unwrap().replace('\n', ""),
            String::from_utf8(l[1].clone()).unwrap().trim_end().replacen('{', "{ ", 1),
            String::from_utf8(l[1].clone()).unwrap().trim_end().replace("\"seq\":2", "\"seq\":2.0"),
        ] {
            let t = [l[0].clone(), format!("{reformatted}\n").into_bytes(), l[2].clone()].concat();
            let report = verify(&t, &key.public_key());
            assert_bad_at(&report, 2, &reformatted);
        }
    }

    #[test]
    fn odd_inputs() {
        let key = key();
        let pk = key.public_key();
        let empty = verify(b"", &pk);
        assert!(empty.is_ok());
        assert_eq!((empty.records, empty.head), (0, None));
        assert_bad_at(&verify(b"\n", &pk), 1, "empty line");
        assert_bad_at(&verify(b"[]\n", &pk), 1, "array");
        let bytes = journal(&key, 2);
        let l = lines(&bytes);
        assert_bad_at(&verify(&[l[0].clone(), b"\n".to_vec(), l[1].clone()].concat(), &pk), 2, "blank line");
        let long = format!("{}\n", " ".repeat(MAX_RECORD_BYTES));
        assert!(verify(long.as_bytes(), &pk).first_bad.unwrap().reason.contains("record bound"));
        // An extra field, even one that canonicalizes.
        let with_extra = String::from_utf8(l[0].clone()).unwrap().replacen("{", "{\"a\":1,", 1);
        assert_bad_at(&verify(with_extra.as_bytes(), &pk), 1, "extra field");
    }
}
