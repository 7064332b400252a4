//! Each snapshot limit at its edge and one past (defaults: 10,000 files,
//! 64 MiB a file, 128 MiB in all).

use crate::util::take;
use airlock_core::ReasonCode;
use airlock_git::{Limits, Operation, MAX_FILES, MAX_FILE_BYTES, MAX_SNAPSHOT_BYTES};
use std::path::Path;

/// A directory that walks like a repository: an empty `.git` directory.
fn fake_repo(root: &Path) -> std::path::PathBuf {
    let p = root.join("repo");
    std::fs::create_dir_all(p.join(".git")).unwrap();
    p
}

fn sized(path: &Path, bytes: u64) {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(bytes).unwrap();
}

#[test]
fn ten_thousand_files_pass_and_one_more_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let repo = fake_repo(t.path());
    for d in 0..10 {
        let dir = repo.join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for i in 0..(MAX_FILES / 10) {
            std::fs::write(dir.join(format!("f{i}")), b"").unwrap();
        }
    }
    let (stats, _) = take(&repo, Operation::GitStatus, Limits::default()).unwrap();
    assert_eq!(stats.files, MAX_FILES);
    std::fs::write(repo.join("one-more"), b"").unwrap();
    let e = take(&repo, Operation::GitStatus, Limits::default()).unwrap_err();
    assert_eq!(e.code(), ReasonCode::GitSnapshotTooLarge, "{e}");
    // log leaves the work tree out, so the same repository passes.
    take(&repo, Operation::GitLog, Limits::default()).unwrap();
}

#[test]
fn a_file_of_64_mib_passes_and_one_byte_more_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let repo = fake_repo(t.path());
    sized(&repo.join("big"), MAX_FILE_BYTES);
    let (stats, archive) = take(&repo, Operation::GitStatus, Limits::default()).unwrap();
    assert_eq!(stats.bytes, MAX_FILE_BYTES);
    assert!(std::fs::metadata(&archive).unwrap().len() > MAX_FILE_BYTES);
    std::fs::remove_file(archive).unwrap();
    sized(&repo.join("big"), MAX_FILE_BYTES + 1);
    let e = take(&repo, Operation::GitStatus, Limits::default()).unwrap_err();
    assert_eq!(e.code(), ReasonCode::GitSnapshotTooLarge, "{e}");
}

#[test]
fn one_hundred_twenty_eight_mib_pass_and_one_byte_more_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let repo = fake_repo(t.path());
    sized(&repo.join("a"), MAX_FILE_BYTES);
    sized(&repo.join("b"), MAX_SNAPSHOT_BYTES - MAX_FILE_BYTES);
    let (stats, archive) = take(&repo, Operation::GitStatus, Limits::default()).unwrap();
    assert_eq!(stats.bytes, MAX_SNAPSHOT_BYTES);
    std::fs::remove_file(archive).unwrap();
    std::fs::write(repo.join("c"), b"x").unwrap();
    let e = take(&repo, Operation::GitStatus, Limits::default()).unwrap_err();
    assert_eq!(e.code(), ReasonCode::GitSnapshotTooLarge, "{e}");
}
