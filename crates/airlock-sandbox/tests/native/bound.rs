//! Staged files over the bind threshold (8 MiB): the staged inode itself
//! is mounted into the worker, read-only for an input, instead of a copy on
//! the root tmpfs. The same attacks as `files.rs`, on the bound files; as
//! root the caller clones them as detached mounts, and the unprivileged
//! run of this suite binds them by path.
use airlock_sandbox::WorkerSpec;

use crate::util::*;

/// Past the threshold.
const BIG: usize = (8 << 20) + 4096;

fn big_input() -> Vec<u8> {
    (0..BIG as u32).map(|i| (i * 13 % 251) as u8).collect()
}

fn with_big_files(mut spec: WorkerSpec, dir: &Dir, input: &[u8]) -> WorkerSpec {
    dir.write("in.bin", input);
    spec.inputs.push(dir.input("in.bin", "data/in.bin"));
    spec.output = Some(dir.output("out.staging", "results/out.bin", 16 << 20));
    spec.limits.file_size = (16 << 20) + 1;
    spec
}

#[test]
fn large_files_are_bound_from_staging_not_copied_into_memory() {
    let dir = Dir::new();
    let input = big_input();
    let script = r#"
        stat -f -c %T data/in.bin results/out.bin /
        cat data/in.bin > results/out.bin
    "#;
    let o = run(with_big_files(sh(script, &[]), &dir, &input));
    assert!(o.exit.success(), "{}", show(&o));
    let kinds: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
    // The input and output live on the staging file system; the root is tmpfs.
    assert_eq!(kinds.len(), 3, "{}", show(&o));
    assert_ne!(kinds[0], "tmpfs", "the input was copied: {}", show(&o));
    assert_ne!(kinds[1], "tmpfs", "the output is not the staging file: {}", show(&o));
    assert_eq!(kinds[2], "tmpfs", "{}", show(&o));
    let export = o.output.clone().unwrap();
    assert!(export.exported(), "{export:?}");
    assert_eq!(export.bytes, input.len() as u64);
    assert_eq!(dir.read("out.staging"), input);
}

#[test]
fn a_small_file_is_still_copied() {
    let dir = Dir::new();
    dir.write("in.txt", b"small");
    let mut spec = sh("stat -f -c %T data/in.txt results/out.txt", &[]);
    spec.inputs.push(dir.input("in.txt", "data/in.txt"));
    spec.output = Some(dir.output("out.staging", "results/out.txt", 1000));
    let o = run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    assert_eq!(text(&o.stdout), "tmpfs\ntmpfs\n", "{}", show(&o));
}

#[test]
fn a_bound_input_cannot_be_changed() {
    let dir = Dir::new();
    let input = big_input();
    let script = r#"
        echo x >> data/in.bin && echo APPENDED
        true > data/in.bin && echo TRUNCATED
        rm -f data/in.bin && echo REMOVED
        chmod 666 data/in.bin && echo CHMODDED
        touch -d 2001-01-01 data/in.bin && echo TOUCHED
        mv data/in.bin data/moved && echo MOVED
        python3 -c 'import os; os.truncate("data/in.bin", 0)' 2>/dev/null && echo PYTRUNC
        python3 -c 'import os; os.setxattr("data/in.bin", "user.evil", b"1")' 2>/dev/null && echo XATTR
        python3 -c 'import mmap; f=open("data/in.bin","r+b"); m=mmap.mmap(f.fileno(), 0); m[0]=0' 2>/dev/null && echo MAPPED
        sha256sum data/in.bin
    "#;
    let o = run(with_big_files(sh(script, &[]), &dir, &input));
    let out = text(&o.stdout);
    for bad in ["APPENDED", "TRUNCATED", "REMOVED", "CHMODDED", "TOUCHED", "MOVED", "PYTRUNC", "XATTR", "MAPPED"] {
        assert!(!out.contains(bad), "{bad}:\n{}", show(&o));
    }
    assert_eq!(dir.read("in.bin"), input, "the staged input changed");
    assert!(xattr_names(&dir.path("in.bin")).is_empty());
}

#[test]
fn a_bound_output_cannot_be_replaced_and_carries_no_attributes_of_the_tool() {
    let dir = Dir::new();
    let script = r#"
        echo good > results/out.bin
        chmod 600 results/out.bin && echo CHMOD-OK
        rm -f results/out.bin && echo REMOVED
        echo evil > /tmp/evil; mv /tmp/evil results/out.bin && echo REPLACED
        ln results/out.bin /tmp/hard 2>/dev/null && echo HARDLINKED
        python3 -c 'import os; os.setxattr("results/out.bin", "user.evil", b"1")' && echo XATTR-SET
        python3 -c '
import os, struct
# A POSIX ACL granting uid 4242 read-write: header, then (tag, perm, id) entries.
acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in
    [(1, 6, 0xffffffff), (2, 6, 4242), (4, 4, 0xffffffff), (0x10, 6, 0xffffffff), (0x20, 4, 0xffffffff)])
os.setxattr("results/out.bin", "system.posix_acl_access", acl)' 2>/dev/null && echo ACL-SET
        true
    "#;
    let o = run(with_big_files(sh(script, &[]), &dir, &big_input()));
    let out = text(&o.stdout);
    for bad in ["REMOVED", "REPLACED", "HARDLINKED"] {
        assert!(!out.contains(bad), "{bad}:\n{}", show(&o));
    }
    // The tool could set its attribute (the file is writable to it): the
    // sandbox removed it before the output was handed back.
    assert!(out.contains("XATTR-SET"), "{}", show(&o));
    // As with an output on its tmpfs, the tool owns its output while it runs
    // (a tool may set its mode); afterwards the caller owns it again.
    assert!(out.contains("CHMOD-OK"), "{}", show(&o));
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(dir.path("out.staging")).unwrap());
    assert_eq!(owner, rustix::process::geteuid().as_raw(), "the caller did not get its output back");
    let export = o.output.clone().unwrap();
    assert!(export.exported(), "{}", show(&o));
    assert_eq!(dir.read("out.staging"), b"good\n");
    let left = xattr_names(&dir.path("out.staging"));
    assert!(!left.iter().any(|n| n.starts_with("user.") || n.starts_with("system.posix_acl")), "{left:?}");
}

#[test]
fn a_bound_output_over_its_bound_is_emptied() {
    let dir = Dir::new();
    let mut spec = with_big_files(sh("head -c 9437184 /dev/zero > results/out.bin", &[]), &dir, &big_input());
    spec.output.as_mut().unwrap().max_bytes = BIG as u64;
    assert_over_bound(&run(spec), &dir);
}

#[test]
fn nothing_writes_a_bound_output_late() {
    let dir = Dir::new();
    let m = marker("bound-late");
    let script = r#"
        echo early > results/out.bin
        setsid sh -c 'sleep 1; echo late >> /workspace/results/out.bin' "$1" </dev/null >/dev/null 2>&1 &
        (trap '' HUP TERM; exec sh -c 'sleep 30' "$1") &
        exit 0
    "#;
    let o = run(with_big_files(sh(script, &[&m]), &dir, &big_input()));
    assert!(o.exit.success(), "{}", show(&o));
    assert!(o.cleanup_confirmed, "{}", show(&o));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(dir.read("out.staging"), b"early\n", "something wrote late");
    assert!(processes_with(&m).is_empty());
}

/// The extended attribute names of `path`.
fn xattr_names(path: &std::path::Path) -> Vec<String> {
    let mut buf = vec![0u8; 65536];
    let n = rustix::fs::listxattr(path, &mut buf[..]).unwrap_or(0);
    buf[..n].split(|b| *b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
}
