//! The snapshot obeys the read grammar: control directories (by name, in
//! any letter case, and by identity whatever their name) are never
//! entered, and a file with more than one hard link never reaches the
//! archive.

use crate::util::{answer, op, take, take_fenced, Repo};
use airlock_core::ReasonCode;
use airlock_git::{ControlIds, Limits, Operation, Skip};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const SECRET: &[u8] = b"SECRET-0b5e-never-in-a-snapshot";

fn id(p: &Path) -> (u64, u64) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.dev(), m.ino())
}

fn archive_holds(archive: &Path, needle: &[u8]) -> bool {
    std::fs::read(archive).unwrap().windows(needle.len()).any(|w| w == needle)
}

fn committed() -> Repo {
    let r = Repo::new();
    r.write("a.txt", "a\n");
    r.git(&["add", "a.txt"]);
    r.git(&["commit", "-q", "-m", "a"]);
    r
}

#[test]
fn a_state_directory_is_never_entered_whatever_its_name() {
    let r = committed();
    r.write("state/journal.key", SECRET);
    r.write("state/staging/other-call/input", SECRET);
    r.write("settings.toml", SECRET);
    let mut control = ControlIds::new();
    control.insert(id(&r.path().join("state"))).insert(id(&r.path().join("settings.toml")));
    for op in [Operation::GitStatus, Operation::GitDiff, Operation::GitLog] {
        let (stats, archive) = take_fenced(&r.path(), op, Limits::default(), &control).unwrap();
        assert!(!archive_holds(&archive, SECRET), "{op:?}");
        assert!(!archive_holds(&archive, b"journal.key") && !archive_holds(&archive, b"settings.toml"), "{op:?}");
        if op.scope().work_tree {
            assert_eq!(stats.skipped_by.get(&Skip::ControlDir), Some(&2), "{stats:?}");
            assert!(stats.skipped_paths.is_empty(), "an identity skip lists no path: {stats:?}");
            assert!(!stats.partial());
        }
    }
    // Without the identities, the same tree is recorded (the test can
    // fail): untracked, so by name and stat data, its content not needed.
    let (_, archive) = take(&r.path(), Operation::GitStatus, Limits::default()).unwrap();
    assert!(archive_holds(&archive, b"journal.key") && archive_holds(&archive, b"settings.toml"));

    // The repository or its .git being one of airlock's own is refused.
    let mut own = ControlIds::new();
    own.insert(id(&r.path()));
    let e = take_fenced(&r.path(), Operation::GitStatus, Limits::default(), &own).unwrap_err();
    assert_eq!(e.code(), ReasonCode::PathControlDir, "{e}");
    let mut own = ControlIds::new();
    own.insert(id(&r.path().join(".git")));
    let e = take_fenced(&r.path(), Operation::GitLog, Limits::default(), &own).unwrap_err();
    assert_eq!(e.code(), ReasonCode::PathControlDir, "{e}");
}

#[test]
fn control_names_in_any_case_are_skipped_everywhere() {
    let r = committed();
    r.write(".airlock/journal.key", SECRET);
    r.write(".AIRLOCK/x", SECRET);
    r.write("sub/.Airlock/x", SECRET);
    r.write("sub/.Git/config", SECRET);
    r.write("sub/.git/config", SECRET);
    std::fs::create_dir_all(r.path().join(".git/.airlock")).unwrap();
    std::fs::write(r.path().join(".git/.airlock/x"), SECRET).unwrap();
    let (stats, archive) = take(&r.path(), Operation::GitStatus, Limits::default()).unwrap();
    assert!(!archive_holds(&archive, SECRET), "{stats:?}");
    assert_eq!(stats.skipped_by.get(&Skip::ControlDir), Some(&6), "{stats:?}");
    assert!(!stats.partial(), "control directories do not make an answer partial");
    let status = answer(&r.path(), op("git_status")).unwrap();
    assert!(!status.to_string().to_ascii_lowercase().contains("airlock"), "{status}");
    assert!(!status.to_string().contains(".Git"), "{status}");
}

#[test]
fn a_hard_linked_file_never_reaches_the_archive() {
    let r = committed();
    let outside = r.tmp.path().join("outside-secret");
    std::fs::write(&outside, SECRET).unwrap();
    std::fs::hard_link(&outside, r.path().join("looks-harmless.txt")).unwrap();
    r.write("twins/one", "twin\n");
    std::fs::hard_link(r.path().join("twins/one"), r.path().join("twins/two")).unwrap();
    let (stats, archive) = take(&r.path(), Operation::GitStatus, Limits::default()).unwrap();
    assert!(!archive_holds(&archive, SECRET), "{stats:?}");
    assert!(!archive_holds(&archive, b"looks-harmless") && !archive_holds(&archive, b"twin\n"), "{stats:?}");
    assert_eq!((stats.linked_files, stats.skipped_by.get(&Skip::Hardlink)), (3, Some(&3)), "{stats:?}");
    assert!(stats.partial());
    let mut status = answer(&r.path(), op("git_status")).unwrap();
    assert!(!status.to_string().contains("looks-harmless"), "{status}");
    stats.annotate(&mut status);
    assert_eq!(status["partial"], serde_json::json!(true));
    assert_eq!(status["partial_reasons"], serde_json::json!(["skipped_entries"]));
    assert_eq!(status["skipped"]["hardlink"], serde_json::json!(3));
}

#[test]
fn a_local_clone_has_its_linked_objects_left_out_until_repacked() {
    let src = committed();
    src.write("b.txt", "b\n");
    src.git(&["add", "b.txt"]);
    src.git(&["commit", "-q", "-m", "b"]);
    let dst = src.tmp.path().join("clone");
    src.git(&["clone", "-q", "--local", src.path().to_str().unwrap(), dst.to_str().unwrap()]);
    let head = src.git(&["rev-parse", "HEAD"]);
    let (a, b) = (&head[..2], &head[2..head.len() - 1]);
    let object = dst.join(".git/objects").join(a).join(b);
    assert!(std::fs::metadata(&object).unwrap().nlink() > 1, "git clone --local hard-links objects");
    let (stats, archive) = take(&dst, Operation::GitLog, Limits::default()).unwrap();
    assert!(stats.linked_files > 0, "{stats:?}");
    assert!(!archive_holds(&archive, format!("{a}/{b}").as_bytes()), "a linked object was copied");
    let e = answer(&dst, op("git_log")).unwrap_err();
    assert_eq!(e.code(), ReasonCode::GitRepositoryInvalid, "the left-out objects are missing: {e}");

    // After `git repack -a -d` (what the refusal advises) nothing is linked.
    let out = std::process::Command::new("git")
        .args(["repack", "-q", "-a", "-d"])
        .current_dir(&dst)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", src.tmp.path().join("home"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (stats, _) = take(&dst, Operation::GitLog, Limits::default()).unwrap();
    assert_eq!(stats.linked_files, 0, "{stats:?}");
    let log = answer(&dst, op("git_log")).unwrap();
    assert_eq!(log["commits"][0]["id"], serde_json::json!(head.trim()));
}

/// A bind mount inside the work tree is never recorded, not even by its
/// stat data: an unchanged tracked file and an untracked one (both
/// stat-only candidates) with another file mounted over them are skipped
/// as `mount`, and nothing of the mounted file reaches the archive.
#[test]
fn a_file_mounted_into_the_work_tree_is_skipped_even_when_stat_only() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: bind mounts need root");
        return;
    }
    let r = committed();
    r.write("tracked.txt", "tracked\n");
    r.git(&["add", "tracked.txt"]);
    r.git(&["commit", "-q", "-m", "tracked"]);
    r.write("untracked.txt", "u\n");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    r.git(&["update-index", "-q", "--refresh"]);
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret-7f3e.bin");
    std::fs::write(&secret, vec![7u8; 12_345]).unwrap();
    let mut mounted = Vec::new();
    for name in ["tracked.txt", "untracked.txt"] {
        let target = r.path().join(name);
        let ok = std::process::Command::new("mount").arg("--bind").arg(&secret).arg(&target).status().unwrap();
        if !ok.success() {
            eprintln!("skipped: mount --bind is not permitted here");
            return;
        }
        mounted.push(target);
    }
    let taken = take(&r.path(), Operation::GitStatus, Limits::default());
    for target in &mounted {
        let _ = std::process::Command::new("umount").arg(target).status();
    }
    let (stats, archive) = taken.unwrap();
    assert_eq!(stats.skipped_by.get(&Skip::Mount), Some(&2), "{stats:?}");
    assert!(stats.partial());
    let bytes = std::fs::read(&archive).unwrap();
    assert!(!bytes.windows(8).any(|w| w == 12_345u64.to_be_bytes()), "the mounted file's size is in the archive");
    // Unmounted, both are recorded stat-only (the test can fail).
    let (stats, _) = take(&r.path(), Operation::GitStatus, Limits::default()).unwrap();
    assert_eq!(stats.stat_only, 3, "a.txt, tracked.txt, untracked.txt: {stats:?}");
    assert_eq!(stats.skipped_by.get(&Skip::Mount), None, "{stats:?}");
}
