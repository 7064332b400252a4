//! Every case runs against both backends and must give the same answer.

use super::Resolver;
use crate::{Dir, HeldOutput, HostAuthority, InputFile};
use airlock_core::{ReasonCode, RelPath};
use rustix::fd::AsFd;
use rustix::fs::OFlags;
use std::fs;
use std::os::unix::fs::symlink;

use crate::testutil::backends;

struct Tree {
    tmp: tempfile::TempDir,
}

impl Tree {
    /// ceiling/ holds: a.txt, sub/b.txt, link -> a.txt, dirlink -> sub,
    /// out -> /etc (escape), file/ (regular file used as a directory),
    /// dangling -> nowhere, fifo, hard (2 links), big (100 bytes).
    fn new() -> Tree {
        let tmp = tempfile::tempdir().unwrap();
        let c = tmp.path().join("ceiling");
        fs::create_dir_all(c.join("sub")).unwrap();
        fs::write(c.join("a.txt"), "alpha").unwrap();
        fs::write(c.join("sub/b.txt"), "beta").unwrap();
        symlink("a.txt", c.join("link")).unwrap();
        symlink("sub", c.join("dirlink")).unwrap();
        symlink("/etc", c.join("out")).unwrap();
        fs::write(c.join("file"), "not a dir").unwrap();
        symlink("nowhere", c.join("dangling")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            c.join("fifo").as_path(),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        fs::write(c.join("hard"), "two links").unwrap();
        fs::hard_link(c.join("hard"), tmp.path().join("hard-outside")).unwrap();
        fs::write(c.join("big"), vec![b'x'; 100]).unwrap();
        Tree { tmp }
    }

    fn ceiling(&self) -> Dir {
        Dir::open_ambient(&HostAuthority::ambient(), &self.tmp.path().join("ceiling")).unwrap()
    }
}

fn p(s: &str) -> RelPath {
    RelPath::parse(s).unwrap()
}

fn open_input(r: &Resolver, c: &Dir, path: &str, max: u64) -> Result<Vec<u8>, ReasonCode> {
    let rel = p(path);
    let input = InputFile::open(r, c, &rel, &rel, max).map_err(|e| e.code())?;
    let mut out = Vec::new();
    input.snapshot_into(&mut out, max).map_err(|e| e.code())?;
    Ok(out)
}

#[test]
fn inputs_give_the_same_answer_on_both_backends() {
    let tree = Tree::new();
    let c = tree.ceiling();
    let cases: &[(&str, Result<&[u8], ReasonCode>)] = &[
        ("a.txt", Ok(b"alpha")),
        ("sub/b.txt", Ok(b"beta")),
        ("link", Err(ReasonCode::PathSymlink)),
        ("dirlink/b.txt", Err(ReasonCode::PathSymlink)),
        ("out/passwd", Err(ReasonCode::PathSymlink)),
        ("file/x", Err(ReasonCode::PathNotDirectory)),
        ("dangling", Err(ReasonCode::PathSymlink)),
        ("missing", Err(ReasonCode::InputMissing)),
        ("sub/missing/x", Err(ReasonCode::InputMissing)),
        ("sub", Err(ReasonCode::InputNotRegular)),
        ("fifo", Err(ReasonCode::InputNotRegular)),
        ("hard", Err(ReasonCode::InputHardlink)),
        ("big", Err(ReasonCode::InputTooLarge)),
    ];
    for r in backends() {
        for (path, want) in cases {
            let got = open_input(&r, &c, path, 99);
            assert_eq!(got.as_deref().map_err(|e| *e), *want, "{path} with {:?}", r.kind());
        }
    }
}

#[test]
fn size_limit_is_inclusive() {
    let tree = Tree::new();
    let c = tree.ceiling();
    for r in backends() {
        assert_eq!(open_input(&r, &c, "big", 100).unwrap().len(), 100);
        assert_eq!(open_input(&r, &c, "big", 99), Err(ReasonCode::InputTooLarge));
    }
}

#[test]
fn snapshot_hash_matches_content() {
    let tree = Tree::new();
    let c = tree.ceiling();
    let rel = p("a.txt");
    let input = InputFile::open(&backends()[0], &c, &rel, &rel, 1024).unwrap();
    let mut out = Vec::new();
    let info = input.snapshot_into(&mut out, 1024).unwrap();
    assert_eq!(info.bytes, 5);
    assert_eq!(info.sha256_tagged(), airlock_core::sha256_tagged(b"alpha"));
}

/// Snapshots `big` (100 bytes when opened) into a private file after
/// `change` ran on the host file, with the kernel copy.
fn snapshot_to_file_after(change: impl FnOnce(&std::path::Path)) -> Result<(u64, String, Vec<u8>), ReasonCode> {
    let tree = Tree::new();
    let c = tree.ceiling();
    let rel = p("big");
    let input = InputFile::open(&backends()[0], &c, &rel, &rel, 1 << 20).unwrap();
    change(&tree.tmp.path().join("ceiling/big"));
    let dest_path = tree.tmp.path().join("snapshot");
    let dest = fs::OpenOptions::new().read(true).write(true).create_new(true).open(&dest_path).unwrap();
    let info = input.snapshot_to_file(&dest, 1 << 20, &mut |_| {}).map_err(|e| e.code())?;
    Ok((info.bytes, info.sha256_tagged(), fs::read(&dest_path).unwrap()))
}

#[test]
fn a_kernel_snapshot_is_hashed_from_the_private_copy() {
    let (bytes, sha, copy) = snapshot_to_file_after(|_| {}).unwrap();
    assert_eq!((bytes, copy.as_slice()), (100, &[b'x'; 100][..]));
    assert_eq!(sha, airlock_core::sha256_tagged(&[b'x'; 100]));
}

#[test]
fn a_kernel_snapshot_of_an_input_that_grew_is_refused() {
    let grow = |path: &std::path::Path| {
        use std::io::Write;
        fs::OpenOptions::new().append(true).open(path).unwrap().write_all(b"more").unwrap();
    };
    assert_eq!(snapshot_to_file_after(grow), Err(ReasonCode::InputChanged));
}

#[test]
fn a_kernel_snapshot_of_an_input_that_shrank_is_refused() {
    let shrink = |path: &std::path::Path| fs::OpenOptions::new().write(true).open(path).unwrap().set_len(60).unwrap();
    assert_eq!(snapshot_to_file_after(shrink), Err(ReasonCode::InputChanged));
}

#[test]
fn outputs_refuse_every_existing_kind() {
    let tree = Tree::new();
    let c = tree.ceiling();
    for r in backends() {
        for existing in ["a.txt", "sub", "link", "dangling", "fifo", "sub/b.txt"] {
            let err = HeldOutput::hold(&r, &c, &p(existing), &p(existing)).unwrap_err();
            assert_eq!(err.code(), ReasonCode::OutputExists, "{existing}");
        }
        let held = HeldOutput::hold(&r, &c, &p("sub/new.json"), &p("sub/new.json")).unwrap();
        assert_eq!(held.name(), "new.json");
        let sub = fs::metadata(tree.tmp.path().join("ceiling/sub")).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(held.parent().dev_ino(), (sub.dev(), sub.ino()));
        let missing = HeldOutput::hold(&r, &c, &p("nope/new.json"), &p("nope/new.json")).unwrap_err();
        assert_eq!(missing.code(), ReasonCode::OutputParentMissing);
        let through_link = HeldOutput::hold(&r, &c, &p("dirlink/new.json"), &p("dirlink/new.json")).unwrap_err();
        assert_eq!(through_link.code(), ReasonCode::PathSymlink);
        let escape = HeldOutput::hold(&r, &c, &p("out/new.json"), &p("out/new.json")).unwrap_err();
        assert_eq!(escape.code(), ReasonCode::PathSymlink);
    }
}

#[test]
fn held_parent_survives_a_swap_of_its_path() {
    let tree = Tree::new();
    let c = tree.ceiling();
    let r = backends()[0];
    let held = HeldOutput::hold(&r, &c, &p("sub/new.json"), &p("sub/new.json")).unwrap();
    let base = tree.tmp.path().join("ceiling");
    fs::rename(base.join("sub"), base.join("moved")).unwrap();
    symlink("/etc", base.join("sub")).unwrap();
    // The handle still names the moved directory, not /etc.
    let f = rustix::fs::openat(held.parent().as_fd(), "b.txt", OFlags::RDONLY, rustix::fs::Mode::empty()).unwrap();
    let mut s = String::new();
    use std::io::Read;
    fs::File::from(f).read_to_string(&mut s).unwrap();
    assert_eq!(s, "beta");
}

#[test]
fn symlink_component_with_o_path_returns_the_link_itself() {
    let tree = Tree::new();
    let c = tree.ceiling();
    for r in backends() {
        let fd = r.open_beneath(c.as_fd(), &p("link"), OFlags::PATH).unwrap();
        let st = rustix::fs::fstat(&fd).unwrap();
        assert_eq!(rustix::fs::FileType::from_raw_mode(st.st_mode), rustix::fs::FileType::Symlink);
    }
}
