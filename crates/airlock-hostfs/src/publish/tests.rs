//! Candidates on real files: what exists by name at each step, and what a
//! swap of a named candidate leads to.

use super::*;
use crate::resolve::{Resolver, ResolverKind};
use crate::{Dir, HostAuthority};
use airlock_core::RelPath;
use std::fs;
use std::os::unix::fs::MetadataExt;

pub(super) struct Setup {
    pub(super) tmp: tempfile::TempDir,
}

/// A destination directory `out/` held for `result.txt`, and a source file.
pub(super) fn setup() -> (Setup, HeldOutput, fs::File) {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir(tmp.path().join("out")).unwrap();
    fs::write(tmp.path().join("source"), "the tool's bytes").unwrap();
    let ceiling = Dir::open_ambient(&HostAuthority::ambient(), &tmp.path().join("out")).unwrap();
    let rel = RelPath::parse("result.txt").unwrap();
    let held = HeldOutput::hold(&Resolver::with_kind(ResolverKind::Emulated), &ceiling, &rel, &rel).unwrap();
    let source = fs::File::open(tmp.path().join("source")).unwrap();
    (Setup { tmp }, held, source)
}

impl Setup {
    /// The names in `out/`, sorted.
    pub(super) fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.tmp.path().join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// `out/NAME`.
    pub(super) fn path(&self, name: &str) -> std::path::PathBuf {
        self.tmp.path().join("out").join(name)
    }
}

pub(super) fn sha_of(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[test]
fn an_unnamed_candidate_has_no_name_until_it_is_linked() {
    let (s, held, source) = setup();
    let c = held.write_candidate(&source, 1024, held.parent().dev_ino(), "inv-1", CandidateMode::Tmpfile).unwrap();
    assert_eq!(c.mode(), CandidateMode::Tmpfile);
    assert_eq!(c.name(), None);
    assert!(s.names().is_empty(), "nothing named before the link: {:?}", s.names());
    let file = c.file().clone();
    assert_eq!(file.sha256_hex, sha_of(b"the tool's bytes"));
    let published = c.publish().unwrap();
    assert_eq!(s.names(), ["result.txt"]);
    let meta = fs::metadata(s.path("result.txt")).unwrap();
    assert_eq!((meta.dev(), meta.ino()), published.dev_ino);
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(fs::read(s.path("result.txt")).unwrap(), b"the tool's bytes");
}

#[test]
fn a_taken_name_refuses_the_link_and_an_unnamed_candidate_leaves_nothing() {
    let (s, held, source) = setup();
    let c = held.write_candidate(&source, 1024, held.parent().dev_ino(), "inv-2", CandidateMode::Tmpfile).unwrap();
    fs::write(s.path("result.txt"), "someone else's").unwrap();
    assert_eq!(c.publish().unwrap_err().code(), ReasonCode::OutputExists);
    assert_eq!(s.names(), ["result.txt"]);
    assert_eq!(fs::read(s.path("result.txt")).unwrap(), b"someone else's");
}

#[test]
fn a_swapped_named_candidate_is_refused_and_the_foreign_file_left() {
    let (s, held, source) = setup();
    let c = held.write_candidate(&source, 1024, held.parent().dev_ino(), "inv-3", CandidateMode::Named).unwrap();
    assert_eq!(c.name(), Some(".airlock-candidate-inv-3"));
    // Another user moves the candidate away and puts its own file there.
    fs::rename(s.path(".airlock-candidate-inv-3"), s.path("moved")).unwrap();
    fs::write(s.path(".airlock-candidate-inv-3"), "foreign bytes").unwrap();
    let err = c.publish().unwrap_err();
    assert_eq!(err.code(), ReasonCode::OutputIdentityMismatch, "{err}");
    assert_eq!(fs::read(s.path("result.txt")).unwrap(), b"foreign bytes", "left in place");
    assert_eq!(fs::read(s.path("moved")).unwrap(), b"the tool's bytes");
    assert_eq!(s.names(), ["moved", "result.txt"]);
}

#[test]
fn a_dropped_named_candidate_is_removed_only_while_its_name_is_its_inode() {
    let (s, held, source) = setup();
    let c = held.write_candidate(&source, 1024, held.parent().dev_ino(), "inv-4", CandidateMode::Named).unwrap();
    drop(c);
    assert!(s.names().is_empty(), "{:?}", s.names());

    let c = held.write_candidate(&source, 1024, held.parent().dev_ino(), "inv-5", CandidateMode::Named).unwrap();
    fs::rename(s.path(".airlock-candidate-inv-5"), s.path("moved")).unwrap();
    fs::write(s.path(".airlock-candidate-inv-5"), "foreign bytes").unwrap();
    drop(c);
    assert_eq!(fs::read(s.path(".airlock-candidate-inv-5")).unwrap(), b"foreign bytes", "never unlinked");
}

#[test]
fn a_candidate_moved_away_before_the_rename_is_an_identity_mismatch() {
    let (s, held, source) = setup();
    let c = held.write_candidate(&source, 1024, held.parent().dev_ino(), "inv-6", CandidateMode::Named).unwrap();
    fs::rename(s.path(".airlock-candidate-inv-6"), s.path("moved")).unwrap();
    assert_eq!(c.publish().unwrap_err().code(), ReasonCode::OutputIdentityMismatch);
    assert_eq!(s.names(), ["moved"]);
}

#[test]
fn a_candidate_over_max_bytes_is_refused_and_leaves_nothing() {
    for mode in [CandidateMode::Tmpfile, CandidateMode::Named] {
        let (s, held, source) = setup();
        let err = held.write_candidate(&source, 15, held.parent().dev_ino(), "inv-7", mode).unwrap_err();
        assert_eq!(err.code(), ReasonCode::LimitOutputSize);
        assert!(s.names().is_empty(), "{mode:?}: {:?}", s.names());
        // Exactly at the bound is fine.
        let c = held.write_candidate(&source, 16, held.parent().dev_ino(), "inv-8", mode).unwrap();
        assert_eq!(c.file().bytes, 16);
    }
    let (s, held, source) = setup();
    let err = held.write_candidate(&source, 16, held.parent().dev_ino(), "inv-9", CandidateMode::Staged).unwrap_err();
    assert_eq!(err.code(), ReasonCode::Internal, "a copy is never the staged output");
    assert!(s.names().is_empty(), "{:?}", s.names());
}
