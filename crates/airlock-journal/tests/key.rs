//! `journal.key` and `journal.pub`: creation, checks on every load, races.

use crate::util::State;
use airlock_journal::{JournalErrorKind, JournalKey, PublicKey};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::{Arc, Barrier};

#[test]
fn creates_a_private_32_byte_seed_and_a_public_key_file() {
    let s = State::new();
    let key = JournalKey::open_or_create(&s.dir).unwrap();
    let meta = std::fs::symlink_metadata(s.path("journal.key")).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!(meta.len(), 32);
    let text = std::fs::read_to_string(s.path("journal.pub")).unwrap();
    assert_eq!(text, format!("{}\n", key.public_key().to_text()));
    assert_eq!(PublicKey::parse(&text).unwrap(), key.public_key());
    assert!(key.key_id().starts_with("sha256:") && key.key_id().len() == 7 + 64);
    // Loading again gives the same key; `open` does not create.
    assert_eq!(JournalKey::open_or_create(&s.dir).unwrap().key_id(), key.key_id());
    assert_eq!(JournalKey::open(&s.dir).unwrap().key_id(), key.key_id());
    let empty = State::new();
    assert_eq!(JournalKey::open(&empty.dir).unwrap_err().kind(), JournalErrorKind::KeyMissing);
    assert!(!empty.path("journal.key").exists());
}

#[test]
fn debug_does_not_show_the_seed() {
    let s = State::new();
    let key = JournalKey::open_or_create(&s.dir).unwrap();
    let seed = std::fs::read(s.path("journal.key")).unwrap();
    let shown = format!("{key:?}");
    assert!(!shown.contains(&hex::encode(&seed)), "{shown}");
    assert!(!shown.contains(&format!("{:?}", &seed[..])), "{shown}");
    assert!(shown.contains("redacted"));
}

fn assert_unsafe(s: &State, what: &str) {
    let err = JournalKey::open_or_create(&s.dir).unwrap_err();
    assert_eq!(err.kind(), JournalErrorKind::KeyUnsafe, "{what}: {err}");
    assert!(err.to_string().contains("journal.key"), "{what}: {err}");
}

#[test]
fn refuses_a_symlinked_key() {
    let s = State::new();
    let elsewhere = s.tmp.path().join("seed");
    std::fs::write(&elsewhere, [1u8; 32]).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, s.path("journal.key")).unwrap();
    assert_unsafe(&s, "symlink");
    // A dangling link is not "missing": nothing is created through it.
    std::fs::remove_file(&elsewhere).unwrap();
    assert_unsafe(&s, "dangling symlink");
    assert!(!elsewhere.exists());
}

#[test]
fn refuses_a_key_open_to_others_linked_twice_or_of_the_wrong_size() {
    let s = State::new();
    JournalKey::open_or_create(&s.dir).unwrap();
    let key = s.path("journal.key");
    for mode in [0o640, 0o604, 0o644, 0o660] {
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        assert_unsafe(&s, &format!("mode {mode:o}"));
    }
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
    JournalKey::open_or_create(&s.dir).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();

    std::fs::hard_link(&key, s.tmp.path().join("second-name")).unwrap();
    assert_unsafe(&s, "two links");
    std::fs::remove_file(s.tmp.path().join("second-name")).unwrap();
    JournalKey::open_or_create(&s.dir).unwrap();

    for len in [0usize, 31, 33, 64] {
        std::fs::write(&key, vec![7u8; len]).unwrap();
        assert_unsafe(&s, &format!("{len} bytes"));
    }
}

#[test]
fn refuses_a_key_that_is_not_a_regular_file() {
    let s = State::new();
    std::fs::create_dir(s.path("journal.key")).unwrap();
    assert_unsafe(&s, "directory");
    std::fs::remove_dir(s.path("journal.key")).unwrap();
    rustix::fs::mkfifoat(rustix::fs::CWD, s.path("journal.key"), rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
    assert_unsafe(&s, "fifo (and the open did not block)");
}

#[test]
fn refuses_a_key_owned_by_someone_else() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to give a file away");
        return;
    }
    let s = State::new();
    JournalKey::open_or_create(&s.dir).unwrap();
    std::os::unix::fs::chown(s.path("journal.key"), Some(4242), None).unwrap();
    assert_unsafe(&s, "owner");
}

#[test]
fn concurrent_creators_end_with_one_key() {
    for round in 0..10 {
        let s = State::new();
        let n = 8;
        let barrier = Arc::new(Barrier::new(n));
        let ids: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let dir = s.reopen();
                    let barrier = barrier.clone();
                    scope.spawn(move || {
                        barrier.wait();
                        JournalKey::open_or_create(&dir).unwrap().key_id()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(ids.iter().all(|id| id == &ids[0]), "round {round}: {ids:?}");
        let names = s.dir.entries().unwrap();
        assert_eq!(names, vec!["journal.key", "journal.pub"], "round {round}: leftovers");
        assert_eq!(JournalKey::open(&s.dir).unwrap().key_id(), ids[0]);
    }
}

#[test]
fn a_stale_or_linked_public_key_file_is_rewritten_not_followed() {
    let s = State::new();
    std::fs::write(s.path("journal.pub"), "ed25519:00\n").unwrap();
    let key = JournalKey::open_or_create(&s.dir).unwrap();
    let want = format!("{}\n", key.public_key().to_text());
    assert_eq!(std::fs::read_to_string(s.path("journal.pub")).unwrap(), want);

    let outside = s.tmp.path().join("outside");
    std::fs::write(&outside, "keep").unwrap();
    std::fs::remove_file(s.path("journal.pub")).unwrap();
    std::os::unix::fs::symlink(&outside, s.path("journal.pub")).unwrap();
    JournalKey::open_or_create(&s.dir).unwrap();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
    assert!(std::fs::symlink_metadata(s.path("journal.pub")).unwrap().is_file());
    assert_eq!(std::fs::read_to_string(s.path("journal.pub")).unwrap(), want);
}
