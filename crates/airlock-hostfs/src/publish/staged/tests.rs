//! The staged output adopted as the candidate, on real files: linked when
//! unnamed, renamed from its staging directory when named, and not adopted
//! (a copy is made instead) when it would not be what a file made in the
//! destination is, or is no longer the file its staging name holds.

use super::StagedFile;
use crate::publish::tests::{setup, sha_of, Setup};
use crate::publish::CandidateMode;
use crate::testutil::{assert_mount_child, run_in_mount_namespace};
use crate::{HostAuthority, PrivateDir};
use airlock_core::ReasonCode;
use rustix::fs::OFlags;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// An unnamed staged file beside `out/` (same mount) holding `bytes`.
fn unnamed(setup: &Setup, bytes: &[u8]) -> StagedFile {
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(OFlags::TMPFILE.bits() as i32)
        .open(setup.tmp.path())
        .unwrap();
    f.write_all(bytes).unwrap();
    StagedFile::Unnamed(f)
}

/// A private staging directory at `at` (made `0700` if missing) and the
/// staged file `output` in it, made by the shipping constructor, holding
/// `bytes`.
fn named_in(at: &Path, bytes: &[u8]) -> (PrivateDir, StagedFile) {
    let _ = fs::DirBuilder::new().mode(0o700).create(at);
    let staging = PrivateDir::open_or_create(&HostAuthority::ambient(), at).unwrap();
    let staged = staging.create_staged_named("output").unwrap();
    staged.file().write_all(bytes).unwrap();
    (staging, staged)
}

fn ino(path: &Path) -> u64 {
    fs::symlink_metadata(path).unwrap().ino()
}

#[test]
fn an_unnamed_staged_output_on_the_same_mount_is_published_as_itself() {
    let (s, held, _source) = setup();
    let file = unnamed(&s, b"staged bytes");
    let c = held.adopt_staged(&file, 100, held.parent.dev_ino()).unwrap().unwrap();
    assert_eq!(c.mode(), CandidateMode::Tmpfile);
    assert_eq!(c.file().sha256_hex, sha_of(b"staged bytes"));
    assert_eq!(s.names(), Vec::<String>::new(), "nothing named before the link");
    let published = c.publish().unwrap();
    let meta = fs::metadata(s.path("result.txt")).unwrap();
    assert_eq!((meta.ino(), meta.nlink()), (published.dev_ino.1, 1));
    assert_eq!(fs::read(s.path("result.txt")).unwrap(), b"staged bytes");
}

#[test]
fn a_staged_output_over_the_bound_is_refused_and_not_adopted_elsewhere() {
    let (s, held, _source) = setup();
    let file = unnamed(&s, b"0123456789");
    let err = held.adopt_staged(&file, 9, held.parent.dev_ino()).unwrap_err();
    assert_eq!(err.code(), ReasonCode::LimitOutputSize);
    // A file with a name cannot be linked from its descriptor.
    let named = fs::OpenOptions::new().read(true).write(true).create_new(true).open(s.tmp.path().join("n")).unwrap();
    assert!(held.adopt_staged(&StagedFile::Unnamed(named), 100, held.parent.dev_ino()).unwrap().is_none());
    // A set-group-ID parent: a copy is made instead, of either kind.
    let (_staging, named) = named_in(&s.tmp.path().join("staging"), b"0123456789");
    let out = s.tmp.path().join("out");
    let mode = fs::metadata(&out).unwrap().mode();
    fs::set_permissions(&out, fs::Permissions::from_mode(mode | 0o2000)).unwrap();
    assert!(held.adopt_staged(&file, 100, held.parent.dev_ino()).unwrap().is_none());
    assert!(held.adopt_staged(&named, 100, held.parent.dev_ino()).unwrap().is_none());
    assert_eq!(s.names(), Vec::<String>::new());
}

#[test]
fn a_named_staged_output_is_published_by_rename_as_itself() {
    let (s, held, _source) = setup();
    let at = s.tmp.path().join("staging");
    let (staging, staged) = named_in(&at, b"staged bytes");
    let before = ino(&at.join("output"));
    let c = held.adopt_staged(&staged, 100, held.parent.dev_ino()).unwrap().unwrap().with_mode(0o640);
    assert_eq!(c.mode(), CandidateMode::Staged);
    assert_eq!(c.name(), None, "no name in the destination directory");
    assert_eq!(c.file().sha256_hex, sha_of(b"staged bytes"));
    assert_eq!(c.file().dev_ino.1, before);
    assert_eq!(s.names(), Vec::<String>::new(), "nothing at the destination before the rename");
    let published = c.publish().unwrap();
    assert_eq!(s.names(), ["result.txt"]);
    let meta = fs::symlink_metadata(s.path("result.txt")).unwrap();
    assert_eq!((meta.dev(), meta.ino()), published.dev_ino);
    assert_eq!((meta.ino(), meta.nlink()), (before, 1), "the staged inode itself, one link");
    assert_eq!(meta.mode() & 0o7777, 0o640);
    assert_eq!(fs::read(s.path("result.txt")).unwrap(), b"staged bytes");
    assert_eq!(staging.entries().unwrap(), Vec::<String>::new(), "the staging name is gone");
}

#[test]
fn a_taken_name_refuses_the_rename_and_the_staged_file_stays_in_staging() {
    let (s, held, _source) = setup();
    let at = s.tmp.path().join("staging");
    let (staging, staged) = named_in(&at, b"staged bytes");
    let before = ino(&at.join("output"));
    let c = held.adopt_staged(&staged, 100, held.parent.dev_ino()).unwrap().unwrap();
    fs::write(s.path("result.txt"), "someone else's").unwrap();
    assert_eq!(c.publish().unwrap_err().code(), ReasonCode::OutputExists);
    assert_eq!(fs::read(s.path("result.txt")).unwrap(), b"someone else's");
    assert_eq!(staging.entries().unwrap(), ["output"]);
    assert_eq!(ino(&at.join("output")), before);
    assert_eq!(fs::read(at.join("output")).unwrap(), b"staged bytes");
}

#[test]
fn a_dropped_staged_candidate_removes_nothing() {
    let (s, held, _source) = setup();
    let at = s.tmp.path().join("staging");
    let (staging, staged) = named_in(&at, b"staged bytes");
    drop(held.adopt_staged(&staged, 100, held.parent.dev_ino()).unwrap().unwrap());
    assert_eq!(staging.entries().unwrap(), ["output"]);
    assert_eq!(s.names(), Vec::<String>::new());
}

#[test]
fn a_staging_name_that_is_not_the_open_file_is_not_adopted() {
    let (s, held, _source) = setup();
    let at = s.tmp.path().join("staging");
    // Replaced by another file.
    let (_staging, staged) = named_in(&at, b"staged bytes");
    fs::rename(at.join("output"), at.join("moved")).unwrap();
    fs::write(at.join("output"), "another file").unwrap();
    assert!(held.adopt_staged(&staged, 100, held.parent.dev_ino()).unwrap().is_none());
    // Gone.
    fs::remove_file(at.join("output")).unwrap();
    assert!(held.adopt_staged(&staged, 100, held.parent.dev_ino()).unwrap().is_none());
    // A link to it, never followed.
    std::os::unix::fs::symlink(at.join("moved"), at.join("output")).unwrap();
    assert!(held.adopt_staged(&staged, 100, held.parent.dev_ino()).unwrap().is_none());
    // The file itself under its name, with a second link.
    fs::remove_file(at.join("output")).unwrap();
    fs::hard_link(at.join("moved"), at.join("output")).unwrap();
    assert!(held.adopt_staged(&staged, 100, held.parent.dev_ino()).unwrap().is_none());
    fs::remove_file(at.join("moved")).unwrap();
    assert!(held.adopt_staged(&staged, 100, held.parent.dev_ino()).unwrap().is_some(), "one link again");
    assert_eq!(s.names(), Vec::<String>::new());
}

#[test]
fn a_named_staged_output_on_another_file_system_is_not_adopted() {
    let (s, held, _source) = setup();
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("SKIPPED: no /dev/shm to stage on another file system");
        return;
    };
    if fs::metadata(shm.path()).unwrap().dev() == fs::metadata(s.tmp.path()).unwrap().dev() {
        eprintln!("SKIPPED: /dev/shm is on the test directory's file system");
        return;
    }
    let (staging, staged) = named_in(&shm.path().join("staging"), b"staged bytes");
    assert!(held.adopt_staged(&staged, 100, held.parent.dev_ino()).unwrap().is_none());
    assert_eq!(staging.entries().unwrap(), ["output"]);
}

#[test]
fn a_named_staged_output_on_a_bind_mount_of_the_same_file_system_is_not_adopted() {
    run_in_mount_namespace("publish::staged::tests::bind_mount_child");
}

/// Run by the test above in a private mount namespace: the staging
/// directory is a bind mount of a directory of the destination's file
/// system, so another mount, where a rename fails with `EXDEV`.
#[test]
#[ignore = "run by a_named_staged_output_on_a_bind_mount_of_the_same_file_system_is_not_adopted"]
fn bind_mount_child() {
    assert_mount_child();
    let (s, held, _source) = setup();
    let (elsewhere, at) = (s.tmp.path().join("elsewhere"), s.tmp.path().join("staging"));
    for dir in [&elsewhere, &at] {
        fs::DirBuilder::new().mode(0o700).create(dir).unwrap();
    }
    let status = std::process::Command::new("mount").arg("--bind").arg(&elsewhere).arg(&at).status().unwrap();
    assert!(status.success(), "mount --bind");
    assert_eq!(fs::metadata(&at).unwrap().dev(), fs::metadata(s.path("")).unwrap().dev(), "the same file system");
    let (staging, staged) = named_in(&at, b"staged bytes");
    assert!(held.adopt_staged(&staged, 100, held.parent.dev_ino()).unwrap().is_none());
    assert_eq!(staging.entries().unwrap(), ["output"]);
    assert_eq!(s.names(), Vec::<String>::new());
}

#[test]
fn an_announced_candidate_is_announced_once_with_its_final_identity_and_hash() {
    let (s, held, _source) = setup();
    let (_staging, staged) = named_in(&s.tmp.path().join("staging"), b"announced bytes");
    let staged_ino = staged.file().metadata().unwrap().ino();
    let mut seen = Vec::new();
    let c = held
        .adopt_staged_announced(&staged, 100, held.parent.dev_ino(), |c| {
            seen.push((c.mode(), c.file().bytes, c.file().sha256_hex.clone(), c.file().dev_ino.1));
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
    assert_eq!(seen, vec![(CandidateMode::Staged, 15, sha_of(b"announced bytes"), staged_ino)]);
    assert_eq!(c.file().dev_ino.1, staged_ino);
    c.publish().unwrap();
    assert_eq!(fs::read(s.path("result.txt")).unwrap(), b"announced bytes");
}

#[test]
fn a_failed_announcement_gives_no_candidate_and_publishes_nothing() {
    let (s, held, _source) = setup();
    let (_staging, staged) = named_in(&s.tmp.path().join("staging"), b"never published");
    let refused = held.adopt_staged_announced(&staged, 100, held.parent.dev_ino(), |_| Err("journal full"));
    assert!(matches!(refused, Err(super::AdoptError::Announcing("journal full"))), "{refused:?}");
    assert_eq!(s.names(), Vec::<String>::new(), "nothing at the destination");
    // The staged output is still the call's, in its staging directory.
    assert_eq!(fs::read(s.tmp.path().join("staging/output")).unwrap(), b"never published");
}

#[test]
fn a_staged_output_that_cannot_be_adopted_is_never_announced() {
    let (s, held, _source) = setup();
    let file = unnamed(&s, b"too long for the bound");
    let refused = held.adopt_staged_announced(&file, 4, held.parent.dev_ino(), |_| -> Result<(), ()> {
        panic!("announced a refused candidate")
    });
    assert!(
        matches!(&refused, Err(super::AdoptError::Unannounced(e)) if e.code() == ReasonCode::LimitOutputSize),
        "{refused:?}"
    );
}
