//! Many writers at once: threads with their own handles (like processes),
//! threads sharing one handle, and real child processes.

use crate::util::State;
use airlock_hostfs::{HostAuthority, PrivateDir};
use airlock_journal::{kind, verify, Journal, JournalKey, Record};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};

/// Checks seq runs 1..=n with no gap or duplicate, the whole journal
/// verifies, and returns how many records each invocation id wrote.
fn check_journal(s: &State, n: u64) -> BTreeMap<String, u64> {
    let bytes = std::fs::read(s.path("journal.jsonl")).unwrap();
    let pinned = JournalKey::open(&s.dir).unwrap().public_key();
    let report = verify(&bytes, &pinned);
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.records, n);
    let journal = Journal::open(&s.dir, JournalKey::open(&s.dir).unwrap()).unwrap();
    let records: Vec<Record> = journal.records().unwrap();
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=n).collect::<Vec<_>>());
    let mut per_writer = BTreeMap::new();
    for r in &records {
        *per_writer.entry(r.invocation_id.clone().unwrap()).or_insert(0) += 1;
    }
    per_writer
}

#[test]
fn eight_handles_append_1600_records_without_gaps() {
    let s = State::new();
    JournalKey::open_or_create(&s.dir).unwrap();
    let (threads, each) = (8usize, 200u64);
    let barrier = Arc::new(Barrier::new(threads));
    std::thread::scope(|scope| {
        for t in 0..threads {
            let dir = s.reopen();
            let barrier = barrier.clone();
            scope.spawn(move || {
                let journal = Journal::open(&dir, JournalKey::open(&dir).unwrap()).unwrap();
                let id = format!("thread-{t}");
                barrier.wait();
                let mut last = 0;
                for i in 0..each {
                    let a = journal.append(kind::WORKER_STARTED, Some(&id), json!({"i": i})).unwrap();
                    assert!(a.seq > last, "seq went backwards in one writer");
                    last = a.seq;
                }
            });
        }
    });
    let per_writer = check_journal(&s, threads as u64 * each);
    assert_eq!(per_writer.len(), threads);
    assert!(per_writer.values().all(|&c| c == each));
}

#[test]
fn threads_sharing_one_handle_do_not_interleave() {
    let s = State::new();
    let journal = Journal::open(&s.dir, JournalKey::open_or_create(&s.dir).unwrap()).unwrap();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let journal = &journal;
            scope.spawn(move || {
                let id = format!("shared-{t}");
                for i in 0..50 {
                    journal.append(kind::WORKER_FINISHED, Some(&id), json!({"i": i})).unwrap();
                }
            });
        }
    });
    let per_writer = check_journal(&s, 200);
    assert!(per_writer.values().all(|&c| c == 50));
}

const CHILD_DIR: &str = "AIRLOCK_JOURNAL_TEST_CHILD_STATE";
const CHILD_COUNT: &str = "AIRLOCK_JOURNAL_TEST_CHILD_COUNT";

/// Not a test on its own: the body a child process runs when
/// `four_processes_append_concurrently` re-executes this test binary with
/// the state directory in the environment. Without it, it does nothing.
#[test]
fn child_appender_helper() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let count: u64 = std::env::var(CHILD_COUNT).unwrap().parse().unwrap();
    let state = PrivateDir::open_or_create(&HostAuthority::ambient(), Path::new(&dir)).unwrap();
    let journal = Journal::open(&state, JournalKey::open_or_create(&state).unwrap()).unwrap();
    let id = format!("pid-{}", std::process::id());
    for i in 0..count {
        journal.append(kind::WORKER_STARTED, Some(&id), json!({"i": i})).unwrap();
    }
}

#[test]
fn four_processes_append_concurrently() {
    let s = State::new();
    let (procs, each) = (4, 100u64);
    let exe = std::env::current_exe().unwrap();
    // The children race to create the key too.
    let children: Vec<_> = (0..procs)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "concurrency::child_appender_helper", "--test-threads=1", "--quiet"])
                .env(CHILD_DIR, s.path(""))
                .env(CHILD_COUNT, each.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "child failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"), "child ran no test");
    }
    let per_writer = check_journal(&s, procs * each);
    assert_eq!(per_writer.len(), procs as usize, "{per_writer:?}");
    assert!(per_writer.values().all(|&c| c == each));
}
