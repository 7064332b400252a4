//! Segments: the journal never stops a healthy host. It is sealed into
//! `journal.d/NNNNNN.jsonl` at a size bound, every later segment opens with
//! a signed header naming the previous one's last hash, verification runs
//! across all of them, and old segments are pruned only once exported or
//! explicitly allowed.

use crate::util::State;
use airlock_journal::{
    kind, parse_segment_file, segment_file, verify, Journal, JournalErrorKind, JournalKey, PublicKey, JOURNAL_PRUNED,
    MIN_SEGMENT_BYTES, SEGMENTS_DIR, SEGMENT_STARTED,
};
use serde_json::json;
use std::io::Write;

const MIB: u64 = 1024 * 1024;

fn open(s: &State, segment_bytes: u64) -> Journal {
    Journal::open(&s.dir, JournalKey::open_or_create(&s.dir).unwrap()).unwrap().with_segment_bytes(segment_bytes)
}

fn pinned(s: &State) -> PublicKey {
    PublicKey::parse(&std::fs::read_to_string(s.path("journal.pub")).unwrap()).unwrap()
}

fn sealed(s: &State) -> Vec<u64> {
    let mut n: Vec<u64> = std::fs::read_dir(s.path(SEGMENTS_DIR))
        .map(|d| d.flatten().filter_map(|e| parse_segment_file(&e.file_name().to_string_lossy())).collect())
        .unwrap_or_default();
    n.sort_unstable();
    n
}

/// What the runtime writes in `WorkerStarted` for one 32 KB argument: the
/// first 4 KiB of the argv, its digest and the truncation flag.
fn worker_started(i: u64) -> serde_json::Value {
    json!({
        "tier": "native",
        "argv": ["tool", format!("{i:08}{}", "a".repeat(4088))],
        "argv_bytes": 32 * 1024 + 5,
        "argv_sha256": format!("sha256:{:064x}", i),
        "argv_truncated": true,
    })
}

#[test]
fn twenty_thousand_calls_with_32_kb_arguments_run_across_segments_and_verify() {
    // Scaled down: 1 MiB segments stand for the default 64 MiB; the old
    // journal stopped for good at 256 MiB, here ~90 MiB of records run
    // through ~90 segments and the whole chain verifies.
    let s = State::new();
    let journal = open(&s, MIB);
    for i in 1..=20_000u64 {
        let a = journal.append_deferred(kind::WORKER_STARTED, Some(&format!("inv-{i}")), worker_started(i)).unwrap();
        assert!(a.seq >= i);
        if i % 500 == 0 {
            journal.sync().unwrap();
        }
    }
    journal.sync().unwrap();
    let segments = sealed(&s);
    assert!(segments.len() >= 80, "{} segments", segments.len());
    assert_eq!(segments, (1..=segments.len() as u64).collect::<Vec<_>>());
    let mut total = std::fs::metadata(s.path("journal.jsonl")).unwrap().len();
    for n in &segments {
        let len = std::fs::metadata(s.path(&format!("{SEGMENTS_DIR}/{}", segment_file(*n)))).unwrap().len();
        assert!(len <= MIB, "segment {n} is {len} bytes");
        total += len;
    }
    assert!(total > 80 * MIB, "{total} bytes in all");
    let report = journal.verify_chain(&pinned(&s)).unwrap();
    assert!(report.is_ok(), "{report:?}");
    // Every call's record plus one header a segment after the first.
    assert_eq!(report.records, 20_000 + segments.len() as u64);
    assert_eq!(report.segments, segments.len() as u64 + 1);
    assert_eq!(report.starts_after, None);
    let calls = journal.records_where(|r| r.kind == kind::WORKER_STARTED).unwrap();
    assert_eq!(calls.len(), 20_000);
    assert_eq!(calls[19_999].invocation_id.as_deref(), Some("inv-20000"));
}

/// A journal of `n` records of ~4.6 KB each, in 256 KiB segments.
fn segmented(n: u64) -> (State, Journal) {
    let s = State::new();
    let journal = open(&s, MIN_SEGMENT_BYTES);
    for i in 1..=n {
        journal.append_deferred(kind::WORKER_STARTED, Some(&format!("inv-{i}")), worker_started(i)).unwrap();
    }
    journal.sync().unwrap();
    (s, journal)
}

#[test]
fn each_segment_opens_with_a_signed_header_naming_the_previous_head() {
    let (s, journal) = segmented(200);
    let segments = sealed(&s);
    assert!(segments.len() >= 3, "{segments:?}");
    let records = journal.records().unwrap();
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=records.len() as u64).collect::<Vec<_>>(), "one sequence across segments");
    let headers: Vec<_> = records.iter().filter(|r| r.kind == SEGMENT_STARTED).collect();
    assert_eq!(headers.len(), segments.len());
    for (i, h) in headers.iter().enumerate() {
        assert_eq!(h.body["segment"], i as u64 + 2);
        assert_eq!(h.body["previous_segment"], i as u64 + 1);
        assert_eq!(h.body["previous_head"], json!(h.prev));
    }
    // Each sealed file alone verifies as a chain starting after the one
    // before it; segment 1 from genesis.
    for n in &segments {
        let bytes = journal.sealed_segment(*n).unwrap();
        let report = verify(&bytes, &pinned(&s));
        assert!(report.is_ok(), "segment {n}: {report:?}");
        assert_eq!(report.starts_after.map(|a| a.segment), (*n > 1).then_some(*n));
    }
}

#[test]
fn a_flipped_byte_in_an_old_segment_is_found() {
    let (s, journal) = segmented(200);
    assert!(journal.verify_chain(&pinned(&s)).unwrap().is_ok());
    let path = s.path(&format!("{SEGMENTS_DIR}/{}", segment_file(1)));
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let report = journal.verify_chain(&pinned(&s)).unwrap();
    let bad = report.first_bad.expect("the flipped byte is found");
    assert_eq!(bad.segment, Some(1));
    assert!(bad.line > 1);
}

#[test]
fn a_removed_swapped_or_renumbered_segment_breaks_the_chain() {
    let (s, journal) = segmented(260);
    let n = sealed(&s);
    assert!(n.len() >= 4, "{n:?}");
    let file = |k: u64| s.path(&format!("{SEGMENTS_DIR}/{}", segment_file(k)));
    // A middle segment removed: the next one's header names another head.
    let saved = std::fs::read(file(2)).unwrap();
    std::fs::remove_file(file(2)).unwrap();
    let bad = journal.verify_chain(&pinned(&s)).unwrap().first_bad.expect("a gap");
    assert_eq!((bad.segment, bad.line), (Some(3), 1), "{bad:?}");
    // Renumbered into the gap: the header names its real number.
    std::fs::rename(file(3), file(2)).unwrap();
    let bad = journal.verify_chain(&pinned(&s)).unwrap().first_bad.expect("renumbered");
    assert_eq!(bad.segment, Some(2), "{bad:?}");
    std::fs::rename(file(2), file(3)).unwrap();
    std::fs::write(file(2), &saved).unwrap();
    std::fs::set_permissions(file(2), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    assert!(journal.verify_chain(&pinned(&s)).unwrap().is_ok());
    // The oldest removed by hand, without a JournalPruned record.
    std::fs::remove_file(file(1)).unwrap();
    let bad = journal.verify_chain(&pinned(&s)).unwrap().first_bad.expect("unexplained start");
    assert!(bad.reason.contains("no JournalPruned record"), "{bad:?}");
}

#[test]
fn prune_removes_only_exported_segments_unless_allowed_and_the_rest_verifies() {
    let (s, journal) = segmented(260);
    let n = sealed(&s);
    assert!(n.len() >= 4, "{n:?}");
    let err = journal.prune(3, false).unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::NotExported, "{err}");
    assert_eq!(sealed(&s), n, "nothing removed");
    // Export 1 and 2 (the marker must match the bytes).
    for k in [1, 2] {
        let bytes = journal.sealed_segment(k).unwrap();
        assert_eq!(journal.mark_exported(k, b"other").unwrap_err().kind(), JournalErrorKind::Corrupt);
        journal.mark_exported(k, &bytes).unwrap();
    }
    let pruned = journal.prune(3, false).unwrap();
    assert_eq!((pruned.removed, pruned.unexported), (vec![1, 2], vec![]));
    assert_eq!(sealed(&s)[0], 3);
    let report = journal.verify_chain(&pinned(&s)).unwrap();
    assert!(report.is_ok(), "{report:?}");
    let start = report.starts_after.unwrap();
    assert_eq!(start.segment, 3);
    let last = journal.records().unwrap().pop().unwrap();
    assert_eq!(last.kind, JOURNAL_PRUNED);
    assert_eq!(last.body["through"], 2);
    // Appends go on; an unexported segment goes only when allowed.
    journal.append(kind::WORKER_FINISHED, None, json!({})).unwrap();
    let pruned = journal.prune(4, true).unwrap();
    assert_eq!((pruned.removed, pruned.unexported), (vec![3], vec![3]));
    assert!(journal.verify_chain(&pinned(&s)).unwrap().is_ok());
    // Removing the next by hand is still caught.
    std::fs::remove_file(s.path(&format!("{SEGMENTS_DIR}/{}", segment_file(4)))).unwrap();
    assert!(!journal.verify_chain(&pinned(&s)).unwrap().is_ok());
}

#[test]
fn a_handle_whose_segment_was_sealed_by_another_goes_on_in_the_new_one() {
    let s = State::new();
    let a = open(&s, MIN_SEGMENT_BYTES);
    let b =
        Journal::open(&s.reopen(), JournalKey::open(&s.dir).unwrap()).unwrap().with_segment_bytes(MIN_SEGMENT_BYTES);
    for i in 1..=120u64 {
        let writer = if i % 3 == 0 { &b } else { &a };
        writer.append(kind::WORKER_STARTED, Some(&format!("inv-{i}")), worker_started(i)).unwrap();
    }
    assert!(sealed(&s).len() >= 2);
    let report = a.verify_chain(&pinned(&s)).unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(b.records_where(|r| r.kind == kind::WORKER_STARTED).unwrap().len(), 120);
}

#[test]
fn a_lost_live_segment_continues_from_the_last_sealed_one() {
    // As after a crash between sealing and the next append, or an operator
    // removing the live file: the chain goes on from the last sealed record.
    let (s, journal) = segmented(120);
    let before = journal.records().unwrap();
    let last_sealed = before.iter().rev().find(|r| r.kind == SEGMENT_STARTED).unwrap().seq - 1;
    std::fs::remove_file(s.path("journal.jsonl")).unwrap();
    let a = journal.append(kind::WORKER_FINISHED, None, json!({})).unwrap();
    assert_eq!(a.seq, last_sealed + 2, "a header, then the record");
    let report = journal.verify_chain(&pinned(&s)).unwrap();
    assert!(report.is_ok(), "{report:?}");
}

#[test]
fn a_torn_sealed_segment_is_reported_and_a_torn_live_one_is_cut_by_the_next_append() {
    let (s, journal) = segmented(120);
    let mut f = std::fs::OpenOptions::new().append(true).open(s.path("journal.jsonl")).unwrap();
    f.write_all(br#"{"body":{},"invoc"#).unwrap();
    let report = journal.verify_chain(&pinned(&s)).unwrap();
    assert!(report.truncated_tail && !report.is_ok());
    journal.append(kind::WORKER_FINISHED, None, json!({})).unwrap();
    let report = journal.verify_chain(&pinned(&s)).unwrap();
    assert!(report.is_ok(), "{report:?}");
    let kinds: Vec<String> = journal.records().unwrap().into_iter().map(|r| r.kind).collect();
    assert!(kinds.ends_with(&["JournalTailRepaired".to_owned(), "WorkerFinished".to_owned()]), "{kinds:?}");
}
