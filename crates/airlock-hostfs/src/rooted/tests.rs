//! Real files, real links, both resolvers. Every case runs against each
//! backend and must give the same answer.

use super::*;
use crate::resolve::ResolverKind;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::testutil::{assert_mount_child, backends, run_in_mount_namespace};

fn open_root(path: &Path) -> OwnedFd {
    rustix::fs::open(path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap()
}

/// root/ holds: a.txt, sub/b.txt, link -> a.txt, dirlink -> sub, out -> the
/// secret dir outside, file (used as a directory), dangling, fifo, hard (2
/// links, the other outside), big (100 bytes), empty-dir/. Beside root:
/// secret/passwd.
struct Tree {
    tmp: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path().join("root");
        fs::create_dir_all(r.join("sub")).unwrap();
        fs::create_dir_all(r.join("empty-dir")).unwrap();
        fs::create_dir_all(tmp.path().join("secret")).unwrap();
        fs::write(tmp.path().join("secret/passwd"), "secret").unwrap();
        fs::write(r.join("a.txt"), "alpha").unwrap();
        fs::write(r.join("sub/b.txt"), "beta").unwrap();
        symlink("a.txt", r.join("link")).unwrap();
        symlink("sub", r.join("dirlink")).unwrap();
        symlink(tmp.path().join("secret"), r.join("out")).unwrap();
        fs::write(r.join("file"), "not a dir").unwrap();
        symlink("nowhere", r.join("dangling")).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, r.join("fifo"), FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        fs::write(r.join("hard"), "two links").unwrap();
        fs::hard_link(r.join("hard"), tmp.path().join("hard-outside")).unwrap();
        fs::write(r.join("big"), vec![b'x'; 100]).unwrap();
        Tree { tmp }
    }

    fn root_path(&self) -> PathBuf {
        self.tmp.path().join("root")
    }

    fn root(&self) -> OwnedFd {
        open_root(&self.root_path())
    }

    fn secret_untouched(&self) {
        let names: Vec<_> =
            fs::read_dir(self.tmp.path().join("secret")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["passwd"], "nothing may appear beside the secret");
        assert_eq!(fs::read(self.tmp.path().join("secret/passwd")).unwrap(), b"secret");
    }
}

fn comps(path: &str) -> Vec<&str> {
    if path.is_empty() {
        Vec::new()
    } else {
        path.split('/').collect()
    }
}

fn read(r: &Resolver, root: &OwnedFd, path: &str, max: u64) -> Result<Vec<u8>, &'static str> {
    read_file(r, root, &comps(path), 0, max).map(|f| f.bytes).map_err(|e| e.code())
}

#[test]
fn reads_refuse_links_specials_and_hard_links() {
    let tree = Tree::new();
    let root = tree.root();
    let cases: &[(&str, Result<&[u8], &str>)] = &[
        ("a.txt", Ok(b"alpha")),
        ("sub/b.txt", Ok(b"beta")),
        ("link", Err("broker.symlink")),
        ("dirlink/b.txt", Err("broker.symlink")),
        ("out/passwd", Err("broker.symlink")),
        ("dangling", Err("broker.symlink")),
        ("file/x", Err("broker.not_regular")),
        ("missing", Err("broker.not_found")),
        ("sub/missing/x", Err("broker.not_found")),
        ("sub", Err("broker.not_regular")),
        ("", Err("broker.not_regular")),
        ("fifo", Err("broker.not_regular")),
        ("hard", Err("broker.hardlink")),
    ];
    for r in backends() {
        for (path, want) in cases {
            let got = read(&r, &root, path, 1000);
            assert_eq!(got.as_deref().map_err(|e| *e), *want, "{path:?} with {:?}", r.kind());
        }
    }
    tree.secret_untouched();
}

#[test]
fn reads_return_at_most_max_bytes_and_the_identity() {
    let tree = Tree::new();
    let root = tree.root();
    let meta = fs::metadata(tree.root_path().join("big")).unwrap();
    for r in backends() {
        let first = read_file(&r, &root, &["big"], 0, 10).unwrap();
        assert_eq!(first.bytes, vec![b'x'; 10], "a longer file gives its first max bytes");
        assert_eq!((first.stamp.dev, first.stamp.ino, first.stamp.size), (meta.dev(), meta.ino(), 100));
        assert_eq!(read_file(&r, &root, &["big"], 95, 10).unwrap().bytes.len(), 5, "from an offset, fewer at EOF");
        assert_eq!(read_file(&r, &root, &["big"], 100, 10).unwrap().bytes, b"", "nothing at EOF");
        assert_eq!(read_file(&r, &root, &["big"], 1 << 40, 10).unwrap().bytes, b"", "nothing past EOF");
        assert_eq!(read(&r, &root, "big", 100).unwrap().len(), 100);
        assert_eq!(read(&r, &root, "big", 4096).unwrap().len(), 100, "fewer at EOF");
        assert_eq!(read(&r, &root, "big", 0).unwrap(), b"");
    }
}

#[test]
fn lists_are_sorted_filtered_and_bounded() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    for name in ["b", "a", "c.txt", "CON", ".git", ".airlock-stage-0123", ".AIRLOCK-STAGE-x", "trail.", "zz"] {
        fs::write(d.join(name), "").unwrap();
    }
    fs::create_dir(d.join("dir")).unwrap();
    symlink("/etc", d.join("etc-link")).unwrap();
    fs::write(d.join(std::ffi::OsStr::from_bytes(b"bad\xff")), "").unwrap();
    fs::write(d.join("dir/inner"), "").unwrap();
    let root = open_root(d);
    for r in backends() {
        let all = list_dir(&r, &root, &[], 100).unwrap();
        assert_eq!(all.names, ["a", "b", "c.txt", "dir", "etc-link", "zz"]);
        use airlock_fsproto::EntryKind::{Dir, File, Link};
        assert_eq!(all.kinds, [File, File, File, Dir, Link, File]);
        assert_eq!(all.skipped, 6, "CON, .git, two staging names, trail., non-UTF-8");
        assert!(!all.truncated);
        let two = list_dir(&r, &root, &[], 2).unwrap();
        assert_eq!(two.names, ["a", "b"], "the smallest names, whatever order the kernel returns");
        assert!(two.truncated);
        assert_eq!(two.skipped, 6);
        let exact = list_dir(&r, &root, &[], 6).unwrap();
        assert!(!exact.truncated, "exactly at the bound is not truncated");
        assert_eq!(list_dir(&r, &root, &["dir"], 10).unwrap().names, ["inner"]);
        let code = |p: &str| list_dir(&r, &root, &comps(p), 10).unwrap_err().code();
        assert_eq!(code("etc-link"), "broker.symlink");
        assert_eq!(code("c.txt"), "broker.not_regular");
        assert_eq!(code("missing"), "broker.not_found");
        assert_eq!(code("c.txt/x"), "broker.not_regular");
    }
}

#[test]
fn a_symlink_at_every_position_is_refused() {
    for r in backends() {
        for pos in 0..4 {
            let t = tempfile::tempdir().unwrap();
            let root_path = t.path().join("root");
            let chain = ["d0", "d1", "d2", "f.txt"];
            let mut real = root_path.clone();
            for c in &chain[..3] {
                real.push(c);
            }
            fs::create_dir_all(&real).unwrap();
            fs::write(real.join("f.txt"), "content").unwrap();
            // Move the entry at `pos` aside (inside the root) and put a link
            // to it in its place.
            let mut at = root_path.clone();
            for c in &chain[..pos] {
                at.push(c);
            }
            let aside = at.join(format!("aside{pos}"));
            fs::rename(at.join(chain[pos]), &aside).unwrap();
            symlink(&aside, at.join(chain[pos])).unwrap();
            let root = open_root(&root_path);
            let what = format!("link at {pos} with {:?}", r.kind());
            assert_eq!(read_file(&r, &root, &chain, 0, 100).unwrap_err().code(), "broker.symlink", "read {what}");
            if pos < 3 {
                let upto = &chain[..=pos];
                assert_eq!(list_dir(&r, &root, upto, 10).unwrap_err().code(), "broker.symlink", "list {what}");
                assert_eq!(open_dir_beneath(&r, &root, upto).unwrap_err().code(), "broker.symlink", "{what}");
            }
            assert_eq!(prepare_write(&r, &root, &chain, b"x").unwrap_err().code(), "broker.symlink", "write {what}");
            // The file, reached through the moved entry, is unchanged.
            let file = if pos == 3 { aside.clone() } else { aside.join(chain[pos + 1..].join("/")) };
            assert_eq!(fs::read(file).unwrap(), b"content", "{what}");
        }
    }
}

#[test]
fn a_write_replaces_the_name_and_never_the_inode() {
    let tree = Tree::new();
    let root = tree.root();
    for r in backends() {
        let target = tree.root_path().join("sub/b.txt");
        fs::write(&target, "old content").unwrap();
        let old_ino = fs::metadata(&target).unwrap().ino();
        let held = fs::File::open(&target).unwrap();
        let prepared = prepare_write(&r, &root, &["sub", "b.txt"], b"new content").unwrap();
        let sub = fs::metadata(tree.root_path().join("sub")).unwrap();
        assert_eq!(prepared.dir_id(), FileId { dev: sub.dev(), ino: sub.ino() });
        assert_eq!(fs::read(&target).unwrap(), b"old content", "nothing visible before commit");
        let names_before = fs::read_dir(tree.root_path().join("sub")).unwrap().count();
        let file_id = prepared.file_id();
        assert_eq!(prepared.commit(".airlock-stage-t1").unwrap(), 11);
        let meta = fs::metadata(&target).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new content");
        assert_ne!(meta.ino(), old_ino, "a new inode carries the name");
        assert_eq!(FileId { dev: meta.dev(), ino: meta.ino() }, file_id);
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "private permissions");
        let mut old = String::new();
        use std::io::Read as _;
        (&held).read_to_string(&mut old).unwrap();
        assert_eq!(old, "old content", "the old inode was never written");
        assert_eq!(fs::read_dir(tree.root_path().join("sub")).unwrap().count(), names_before, "no stage left");
        // A new file.
        prepare_write(&r, &root, &["new.txt"], b"fresh").unwrap().commit(".airlock-stage-t2").unwrap();
        assert_eq!(fs::read(tree.root_path().join("new.txt")).unwrap(), b"fresh");
        fs::remove_file(tree.root_path().join("new.txt")).unwrap();
    }
}

#[test]
fn a_hard_linked_target_keeps_its_other_link() {
    let tree = Tree::new();
    let root = tree.root();
    for r in backends() {
        fs::write(tree.tmp.path().join("hard-outside"), "two links").unwrap();
        prepare_write(&r, &root, &["hard"], b"replaced").unwrap().commit(".airlock-stage-h").unwrap();
        assert_eq!(fs::read(tree.root_path().join("hard")).unwrap(), b"replaced");
        assert_eq!(fs::read(tree.tmp.path().join("hard-outside")).unwrap(), b"two links");
        assert_eq!(fs::metadata(tree.tmp.path().join("hard-outside")).unwrap().nlink(), 1);
        fs::remove_file(tree.root_path().join("hard")).unwrap();
        fs::hard_link(tree.tmp.path().join("hard-outside"), tree.root_path().join("hard")).unwrap();
    }
}

#[test]
fn writes_refuse_links_directories_and_specials() {
    let tree = Tree::new();
    let root = tree.root();
    let cases: &[(&str, &str)] = &[
        ("link", "broker.symlink"),
        ("dangling", "broker.symlink"),
        ("out/passwd", "broker.symlink"),
        ("out/new", "broker.symlink"),
        ("dirlink/new", "broker.symlink"),
        ("sub", "broker.not_regular"),
        ("fifo", "broker.not_regular"),
        ("file/x", "broker.not_regular"),
        ("missing/x", "broker.not_found"),
        ("", "broker.not_regular"),
    ];
    for r in backends() {
        for (path, code) in cases {
            let got = prepare_write(&r, &root, &comps(path), b"evil").unwrap_err();
            assert_eq!(got.code(), *code, "{path:?} with {:?}: {got}", r.kind());
        }
    }
    assert_eq!(fs::read_link(tree.root_path().join("link")).unwrap(), Path::new("a.txt"));
    assert_eq!(fs::read(tree.root_path().join("a.txt")).unwrap(), b"alpha");
    assert!(!tree.root_path().join("nowhere").exists(), "a dangling link is never created through");
    tree.secret_untouched();
}

#[test]
fn a_dropped_write_leaves_nothing() {
    let tree = Tree::new();
    let root = tree.root();
    let before: Vec<_> = fs::read_dir(tree.root_path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    for r in backends() {
        drop(prepare_write(&r, &root, &["a.txt"], b"never").unwrap());
        drop(prepare_write(&r, &root, &["brand-new"], b"never").unwrap());
    }
    let mut after: Vec<_> = fs::read_dir(tree.root_path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    let mut before = before;
    before.sort();
    after.sort();
    assert_eq!(before, after);
    assert_eq!(fs::read(tree.root_path().join("a.txt")).unwrap(), b"alpha");
}

#[test]
fn a_failed_rename_removes_its_stage_entry() {
    let tree = Tree::new();
    let root = tree.root();
    for r in backends() {
        let prepared = prepare_write(&r, &root, &["later-dir"], b"x").unwrap();
        // The target becomes a non-empty directory between prepare and commit.
        fs::create_dir(tree.root_path().join("later-dir")).unwrap();
        fs::write(tree.root_path().join("later-dir/keep"), "k").unwrap();
        let err = prepared.commit(".airlock-stage-r").unwrap_err();
        assert_eq!(err.code(), "broker.io", "{err}");
        assert!(!tree.root_path().join(".airlock-stage-r").exists(), "stage entry removed");
        assert_eq!(fs::read(tree.root_path().join("later-dir/keep")).unwrap(), b"k");
        fs::remove_dir_all(tree.root_path().join("later-dir")).unwrap();
        // An existing stage name is refused by linkat and left alone.
        fs::write(tree.root_path().join(".airlock-stage-busy"), "someone's").unwrap();
        let err = prepare_write(&r, &root, &["a.txt"], b"x").unwrap().commit(".airlock-stage-busy").unwrap_err();
        assert_eq!(err.code(), "broker.io");
        assert_eq!(fs::read(tree.root_path().join(".airlock-stage-busy")).unwrap(), b"someone's");
        assert_eq!(fs::read(tree.root_path().join("a.txt")).unwrap(), b"alpha");
        fs::remove_file(tree.root_path().join(".airlock-stage-busy")).unwrap();
    }
}

#[test]
fn stage_entries_are_removed_only_when_they_are_the_staged_file() {
    let t = tempfile::tempdir().unwrap();
    let dir = rustix::fs::open(t.path(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap();
    let stage = t.path().join(".airlock-stage-1");
    fs::write(&stage, "mine").unwrap();
    let m = fs::metadata(&stage).unwrap();
    let mine = FileId { dev: m.dev(), ino: m.ino() };
    let other = FileId { dev: m.dev(), ino: m.ino() + 1 };
    let err = remove_stage_entry(&dir, ".airlock-stage-1", other).unwrap_err();
    assert_eq!(err, RootedError::io(err_call(&err), Errno::EXIST));
    assert!(stage.exists(), "a mismatch is left alone");
    assert!(remove_stage_entry(&dir, ".airlock-stage-1", mine).unwrap());
    assert!(!stage.exists());
    assert!(!remove_stage_entry(&dir, ".airlock-stage-1", mine).unwrap(), "absent");
    symlink(t.path(), t.path().join(".airlock-stage-2")).unwrap();
    assert_eq!(remove_stage_entry(&dir, ".airlock-stage-2", mine).unwrap_err().code(), "broker.symlink");
    fs::create_dir(t.path().join(".airlock-stage-3")).unwrap();
    assert_eq!(remove_stage_entry(&dir, ".airlock-stage-3", mine).unwrap_err().code(), "broker.not_regular");
    assert!(t.path().join(".airlock-stage-2").symlink_metadata().is_ok() && t.path().join(".airlock-stage-3").is_dir());
    assert_eq!(remove_stage_entry(&dir, "../x", mine).unwrap_err().code(), "broker.io");
}

fn err_call(e: &RootedError) -> String {
    match e {
        RootedError::Io { call, .. } => call.clone(),
        other => panic!("not an I/O error: {other}"),
    }
}

/// ATTACKS.md 10: a racer swaps a directory on the way for a link to a
/// canary directory outside the root while 1,000 writes run.
#[test]
fn a_racing_directory_swap_never_writes_outside() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    for r in backends() {
        let t = tempfile::tempdir().unwrap();
        let root_path = t.path().join("root");
        let canary = t.path().join("canary");
        fs::create_dir_all(root_path.join("sub")).unwrap();
        fs::create_dir(&canary).unwrap();
        let root = open_root(&root_path);
        let stop = Arc::new(AtomicBool::new(false));
        let racer = {
            let (stop, root_path, canary) = (stop.clone(), root_path.clone(), canary.clone());
            std::thread::spawn(move || {
                let (sub, real) = (root_path.join("sub"), root_path.join("sub.real"));
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    fs::rename(&sub, &real).unwrap();
                    symlink(&canary, &sub).unwrap();
                    std::thread::yield_now();
                    fs::remove_file(&sub).unwrap();
                    fs::rename(&real, &sub).unwrap();
                    std::thread::yield_now();
                    swaps += 1;
                }
                swaps
            })
        };
        let (mut ok, mut refused) = (0, 0);
        for i in 0..1000 {
            let result = prepare_write(&r, &root, &["sub", "f"], format!("write {i}").as_bytes())
                .and_then(|p| p.commit(&format!(".airlock-stage-{i}")));
            match result {
                Ok(_) => ok += 1,
                Err(e) => {
                    assert!(matches!(e.code(), "broker.symlink" | "broker.not_found" | "broker.race"), "{e}");
                    refused += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = racer.join().unwrap();
        assert_eq!(fs::read_dir(&canary).unwrap().count(), 0, "nothing written outside the root");
        let stray: Vec<_> = fs::read_dir(root_path.join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.as_bytes().starts_with(b".airlock-stage-"))
            .collect();
        assert!(stray.is_empty(), "no staging entry left: {stray:?}");
        eprintln!("{:?}: {ok} written, {refused} refused, {swaps} swaps", r.kind());
        assert!(swaps > 0 && refused > 0, "the race actually ran");
    }
}

/// ATTACKS.md 28 for broker writes: a racer that polls the directory renames
/// every staging entry away and hard-links its own file under the staging
/// name, so the commit's rename would put the racer's bytes at the target.
/// Over 400 commits, a commit that reports success always left the
/// prepared inode, with its bytes, at the target; a swap it lost is
/// `broker.race`.
#[test]
fn a_swapped_stage_entry_is_never_reported_as_written() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let r = Resolver::with_kind(ResolverKind::Emulated);
    let t = tempfile::tempdir().unwrap();
    let root_path = t.path().join("root");
    fs::create_dir_all(&root_path).unwrap();
    let evil = t.path().join("root/evil");
    fs::write(&evil, "racer's bytes").unwrap();
    let root = open_root(&root_path);
    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let (stop, root_path, evil) = (stop.clone(), root_path.clone(), evil.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            let mut planted = std::collections::HashSet::new();
            while !stop.load(Ordering::Relaxed) {
                let Ok(entries) = fs::read_dir(&root_path) else { continue };
                for e in entries.flatten() {
                    let name = e.file_name();
                    if !name.as_bytes().starts_with(b".airlock-stage-") || !planted.insert(name.clone()) {
                        continue;
                    }
                    let stage = root_path.join(&name);
                    if fs::rename(&stage, root_path.join(format!("moved-{swaps}"))).is_ok()
                        && fs::hard_link(&evil, &stage).is_ok()
                    {
                        swaps += 1;
                    }
                }
            }
            swaps
        })
    };
    let (mut ok, mut replaced, mut other) = (0, 0, 0);
    for i in 0..400 {
        let bytes = format!("write {i}");
        let prepared = prepare_write(&r, &root, &["target"], bytes.as_bytes()).unwrap();
        let id = prepared.file_id();
        match prepared.commit(&format!(".airlock-stage-{i}")) {
            Ok(_) => {
                let meta = fs::symlink_metadata(root_path.join("target")).unwrap();
                assert_eq!(FileId { dev: meta.dev(), ino: meta.ino() }, id, "write {i} reported but not in place");
                assert_eq!(fs::read(root_path.join("target")).unwrap(), bytes.as_bytes());
                ok += 1;
            }
            Err(e @ RootedError::Replaced { .. }) => {
                assert_eq!(e.code(), "broker.race");
                replaced += 1;
            }
            // The racer took the entry before the rename (ENOENT) or
            // planted one before the link (EEXIST).
            Err(e) => {
                assert!(matches!(&e, RootedError::Io { errno: Errno::NOENT | Errno::EXIST, .. }), "{e}");
                other += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = racer.join().unwrap();
    eprintln!("stage swap: {ok} written, {replaced} replaced, {other} refused otherwise, {swaps} swaps");
    assert!(ok > 0, "some writes landed");
}

/// Runs in a private mount namespace (root only): a bind mount inside the
/// root is a mount crossing for every operation, on both backends.
#[test]
fn a_mount_inside_the_root_is_refused() {
    run_in_mount_namespace("rooted::tests::mount_crossing_child");
}

#[test]
#[ignore = "run by a_mount_inside_the_root_is_refused in a private mount namespace"]
fn mount_crossing_child() {
    assert_mount_child();
    let t = tempfile::tempdir().unwrap();
    let root_path = t.path().join("root");
    let other = t.path().join("other");
    fs::create_dir_all(root_path.join("mnt")).unwrap();
    fs::create_dir_all(&other).unwrap();
    fs::write(other.join("x"), "other mount").unwrap();
    fs::write(root_path.join("file"), "").unwrap();
    fs::write(t.path().join("file-src"), "bound file").unwrap();
    rustix::mount::mount_bind(&other, root_path.join("mnt")).unwrap();
    rustix::mount::mount_bind(t.path().join("file-src"), root_path.join("file")).unwrap();
    let root = open_root(&root_path);
    for r in backends() {
        let code = |e: RootedError| e.code();
        assert_eq!(code(read_file(&r, &root, &["mnt", "x"], 0, 100).unwrap_err()), "broker.mount_crossing");
        assert_eq!(code(read_file(&r, &root, &["file"], 0, 100).unwrap_err()), "broker.mount_crossing");
        assert_eq!(code(list_dir(&r, &root, &["mnt"], 10).unwrap_err()), "broker.mount_crossing");
        assert_eq!(code(open_dir_beneath(&r, &root, &["mnt"]).unwrap_err()), "broker.mount_crossing");
        assert_eq!(code(prepare_write(&r, &root, &["mnt", "y"], b"z").unwrap_err()), "broker.mount_crossing");
        assert_eq!(code(prepare_write(&r, &root, &["file"], b"z").unwrap_err()), "broker.mount_crossing");
    }
    assert!(!other.join("y").exists());
    assert_eq!(fs::read(t.path().join("file-src")).unwrap(), b"bound file");
}
