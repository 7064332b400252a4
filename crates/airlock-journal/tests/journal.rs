//! `journal.jsonl`: appends, reading back, and refusing to go on after damage.

use crate::util::State;
use airlock_journal::{kind, verify, Journal, JournalErrorKind, JournalKey, PublicKey, GENESIS_PREV};
use serde_json::json;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

fn open(s: &State) -> Journal {
    Journal::open(&s.dir, JournalKey::open_or_create(&s.dir).unwrap()).unwrap()
}

fn pinned(s: &State) -> PublicKey {
    PublicKey::parse(&std::fs::read_to_string(s.path("journal.pub")).unwrap()).unwrap()
}

#[test]
fn appends_are_chained_signed_and_read_back() {
    let s = State::new();
    let journal = open(&s);
    let meta = std::fs::symlink_metadata(s.path("journal.jsonl")).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    let a =
        journal.append(kind::INVOCATION_PREPARED, Some("inv-1"), json!({"descriptor_sha256": "sha256:ab"})).unwrap();
    let b = journal.append(kind::INVOCATION_FINISHED, None, json!({"status": "ok"})).unwrap();
    assert_eq!((a.seq, b.seq), (1, 2));

    let records = journal.records().unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].prev, GENESIS_PREV);
    assert_eq!(records[0].kind, "InvocationPrepared");
    assert_eq!(records[0].invocation_id.as_deref(), Some("inv-1"));
    assert_eq!(records[0].body, json!({"descriptor_sha256": "sha256:ab"}));
    assert_eq!(records[1].prev, a.line_sha256);
    assert_eq!(records[1].invocation_id, None);
    assert_eq!(records[1].key_id, journal.key().key_id());

    let bytes = std::fs::read(s.path("journal.jsonl")).unwrap();
    assert_eq!(journal.read_bytes().unwrap(), bytes);
    let report = verify(&bytes, &pinned(&s));
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.records, 2);
    assert_eq!(report.head.as_deref(), Some(b.line_sha256.as_str()));
}

#[test]
fn a_reopened_journal_continues_the_chain() {
    let s = State::new();
    for round in 0..3u64 {
        let journal = open(&s);
        for i in 0..4u64 {
            let a = journal.append(kind::WORKER_STARTED, None, json!({"round": round, "i": i})).unwrap();
            assert_eq!(a.seq, round * 4 + i + 1);
        }
    }
    let report = verify(&std::fs::read(s.path("journal.jsonl")).unwrap(), &pinned(&s));
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.records, 12);
}

#[test]
fn an_empty_journal_has_no_records() {
    let s = State::new();
    let journal = open(&s);
    assert!(journal.records().unwrap().is_empty());
    assert!(journal.read_bytes().unwrap().is_empty());
}

#[test]
fn a_torn_tail_is_reported_until_the_next_append_cuts_it_away_and_keeps_its_bytes() {
    use sha2::Digest as _;
    let s = State::new();
    let journal = open(&s);
    for _ in 0..3 {
        journal.append(kind::WORKER_STARTED, None, json!({})).unwrap();
    }
    let torn = br#"{"body":{},"invoc"#;
    let mut f = std::fs::OpenOptions::new().append(true).open(s.path("journal.jsonl")).unwrap();
    f.write_all(torn).unwrap();
    let before = std::fs::read(s.path("journal.jsonl")).unwrap();
    // Readers and verification report it as it is.
    assert_eq!(journal.records().unwrap_err().kind(), JournalErrorKind::TornTail);
    let report = verify(&before, &pinned(&s));
    assert!(report.truncated_tail);
    assert_eq!(report.first_bad.unwrap().line, 4);
    // The next append cuts it away, says so in a record, then appends.
    let appended = journal.append(kind::WORKER_FINISHED, None, json!({})).unwrap();
    assert_eq!(appended.seq, 5);
    let records = journal.records().unwrap();
    let kinds: Vec<&str> = records.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(kinds[3..], ["JournalTailRepaired", "WorkerFinished"]);
    let repair = &records[3].body;
    assert_eq!(
        (repair["offset"].as_u64(), repair["bytes"].as_u64()),
        (Some(before.len() as u64 - torn.len() as u64), Some(torn.len() as u64))
    );
    let kept = s.path(repair["kept_as"].as_str().unwrap());
    assert_eq!(std::fs::read(kept).unwrap(), torn, "the torn bytes are kept");
    assert_eq!(repair["sha256"], format!("sha256:{}", hex::encode(sha2::Sha256::digest(torn))));
    assert!(journal.verify_chain(&pinned(&s)).unwrap().is_ok());
    // A line without a newline longer than any record is damage, not a
    // torn write: it is not cut.
    let mut f = std::fs::OpenOptions::new().append(true).open(s.path("journal.jsonl")).unwrap();
    f.write_all(&vec![b'x'; 70 * 1024]).unwrap();
    let err = journal.append(kind::WORKER_FINISHED, None, json!({})).unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::TornTail, "{err}");
}

#[test]
fn an_unreadable_last_line_stops_appends() {
    let s = State::new();
    let journal = open(&s);
    journal.append(kind::WORKER_STARTED, None, json!({})).unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(s.path("journal.jsonl")).unwrap();
    f.write_all(b"not json\n").unwrap();
    let err = journal.append(kind::WORKER_FINISHED, None, json!({})).unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::Corrupt, "{err}");
    let err = journal.records().unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::Corrupt);
    assert!(err.to_string().contains("line 2"), "{err}");
}

#[test]
fn records_longer_than_the_first_tail_read_are_continued() {
    // An append first reads the last 4 KiB of the segment to find the last
    // line; a longer last line (first in the file, or after others) is read
    // whole before the next record chains to it.
    let s = State::new();
    let journal = open(&s);
    let long = |n: usize| json!({"stdout": "x".repeat(n)});
    let a = journal.append(kind::WORKER_FINISHED, None, long(9_000)).unwrap();
    let b = journal.append(kind::WORKER_STARTED, None, json!({})).unwrap();
    let c = journal.append(kind::WORKER_FINISHED, None, long(30_000)).unwrap();
    let d = journal.append(kind::WORKER_STARTED, None, json!({})).unwrap();
    assert_eq!((a.seq, b.seq, c.seq, d.seq), (1, 2, 3, 4));
    let records = journal.records().unwrap();
    assert_eq!(records[1].prev, a.line_sha256);
    assert_eq!(records[3].prev, c.line_sha256);
    let report = verify(&std::fs::read(s.path("journal.jsonl")).unwrap(), &pinned(&s));
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.records, 4);
}

#[test]
fn an_overlong_last_line_stops_appends() {
    let s = State::new();
    let journal = open(&s);
    let mut f = std::fs::OpenOptions::new().append(true).open(s.path("journal.jsonl")).unwrap();
    f.write_all(b"x\n").unwrap();
    f.write_all(&vec![b'y'; 70_000]).unwrap();
    f.write_all(b"\n").unwrap();
    let err = journal.append(kind::WORKER_FINISHED, None, json!({})).unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::Corrupt, "{err}");
    assert!(err.to_string().contains("longer than"), "{err}");
}

#[test]
fn a_journal_written_under_another_key_is_not_continued() {
    let a = State::new();
    open(&a).append(kind::WORKER_STARTED, None, json!({})).unwrap();
    let b = State::new();
    std::fs::copy(a.path("journal.jsonl"), b.path("journal.jsonl")).unwrap();
    let err = open(&b).append(kind::WORKER_FINISHED, None, json!({})).unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::KeyMismatch, "{err}");
}

#[test]
fn oversized_and_malformed_records_are_refused_and_leave_nothing() {
    let s = State::new();
    let journal = open(&s);
    journal.append(kind::WORKER_STARTED, None, json!({})).unwrap();
    let before = std::fs::read(s.path("journal.jsonl")).unwrap();
    let err = journal.append(kind::WORKER_FINISHED, None, json!({"stdout": "x".repeat(70_000)})).unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::RecordTooLarge, "{err}");
    let err = journal.append(kind::WORKER_FINISHED, None, json!({"ino": u64::MAX})).unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::InvalidRecord, "{err}");
    let err = journal.append(kind::WORKER_FINISHED, None, json!("text")).unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::InvalidRecord, "{err}");
    let err = journal.append("", None, json!({})).unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::InvalidRecord, "{err}");
    assert_eq!(std::fs::read(s.path("journal.jsonl")).unwrap(), before);
    assert_eq!(journal.append(kind::WORKER_FINISHED, None, json!({})).unwrap().seq, 2);
}

#[test]
fn refuses_an_unsafe_journal_file() {
    let check = |setup: &dyn Fn(&State), what: &str| {
        let s = State::new();
        setup(&s);
        let key = JournalKey::open_or_create(&s.dir).unwrap();
        let err = Journal::open(&s.dir, key).unwrap_err();
        assert_eq!(err.kind(), JournalErrorKind::FileUnsafe, "{what}: {err}");
        assert!(err.to_string().contains("journal.jsonl"), "{what}: {err}");
    };
    check(
        &|s| {
            let outside = s.tmp.path().join("outside");
            std::fs::write(&outside, "").unwrap();
            std::os::unix::fs::symlink(outside, s.path("journal.jsonl")).unwrap();
        },
        "symlink",
    );
    check(
        &|s| std::os::unix::fs::symlink(s.tmp.path().join("nowhere"), s.path("journal.jsonl")).unwrap(),
        "dangling symlink",
    );
    check(
        &|s| {
            std::fs::write(s.path("journal.jsonl"), "").unwrap();
            std::fs::set_permissions(s.path("journal.jsonl"), std::fs::Permissions::from_mode(0o644)).unwrap();
        },
        "mode 644",
    );
    check(
        &|s| {
            std::fs::write(s.path("journal.jsonl"), "").unwrap();
            std::fs::set_permissions(s.path("journal.jsonl"), std::fs::Permissions::from_mode(0o600)).unwrap();
            std::fs::hard_link(s.path("journal.jsonl"), s.tmp.path().join("second")).unwrap();
        },
        "two links",
    );
    check(&|s| std::fs::create_dir(s.path("journal.jsonl")).unwrap(), "directory");
    check(
        &|s| {
            rustix::fs::mkfifoat(rustix::fs::CWD, s.path("journal.jsonl"), rustix::fs::Mode::from_raw_mode(0o600))
                .unwrap()
        },
        "fifo",
    );
    assert!(!State::new().tmp.path().join("nowhere").exists());
}

#[test]
fn a_journal_unlinked_while_open_is_refused() {
    let s = State::new();
    let journal = open(&s);
    journal.append(kind::WORKER_STARTED, None, json!({})).unwrap();
    std::fs::remove_file(s.path("journal.jsonl")).unwrap();
    let err = journal.append(kind::WORKER_FINISHED, None, json!({})).unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::FileUnsafe, "{err}");
}

/// Bytes of the last line of `s`'s journal, newline included.
fn last_line_len(s: &State) -> usize {
    let bytes = std::fs::read(s.path("journal.jsonl")).unwrap();
    let body = &bytes[..bytes.len() - 1];
    bytes.len() - body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
}

#[test]
fn records_of_exactly_the_maximum_size_chain_on() {
    use airlock_journal::MAX_RECORD_BYTES;
    // Measure a record with an empty pad; every fixed-width field (time,
    // hashes, key id, signature) has the same length in any journal.
    let probe = State::new();
    open(&probe).append(kind::WORKER_FINISHED, None, json!({"p": ""})).unwrap();
    let pad = MAX_RECORD_BYTES - last_line_len(&probe);

    // As the first line (the tail read starts at offset 0)...
    let s = State::new();
    let journal = open(&s);
    journal.append(kind::WORKER_FINISHED, None, json!({"p": "x".repeat(pad)})).unwrap();
    assert_eq!(last_line_len(&s), MAX_RECORD_BYTES);
    assert_eq!(journal.append(kind::WORKER_FINISHED, None, json!({"p": ""})).unwrap().seq, 2);
    // ...and after another (the tail read sees just the previous newline).
    journal.append(kind::WORKER_FINISHED, None, json!({"p": "x".repeat(pad)})).unwrap();
    assert_eq!(last_line_len(&s), MAX_RECORD_BYTES);
    assert_eq!(journal.append(kind::WORKER_FINISHED, None, json!({})).unwrap().seq, 4);
    let err = journal.append(kind::WORKER_FINISHED, None, json!({"p": "x".repeat(pad + 1)})).unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::RecordTooLarge);
    let report = verify(&std::fs::read(s.path("journal.jsonl")).unwrap(), &pinned(&s));
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.records, 4);
}
