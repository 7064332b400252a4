//! What the worker can and cannot see or do (ATTACKS.md cases 16 and the
//! "inside the worker" promises of the crate doc).
use std::collections::BTreeSet;
use std::io::Read;
use std::net::TcpListener;

use airlock_sandbox::{ExitStatusKind, ImageMount};

use crate::util::*;

#[test]
fn worker_runs_as_65534_without_capabilities() {
    let o = run(sh("id -u; id -g; cat /proc/self/uid_map /proc/self/gid_map; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status", &[]));
    assert!(o.exit.success(), "{}", show(&o));
    let out = text(&o.stdout);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("65534"), "{out}");
    assert_eq!(lines.next(), Some("65534"), "{out}");
    // One id mapped: 65534 inside is the caller outside, or 65534 for a root caller.
    let outside = if is_root() {
        "65534".to_string()
    } else {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string()
    };
    for _ in 0..2 {
        let map: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(map[0], "65534", "{out}");
        assert_eq!(map[2], "1", "{out}");
        if is_root() {
            assert_eq!(map[1], outside, "a root caller's worker must not be root outside: {out}");
        }
    }
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(out.contains(&format!("{cap}:\t0000000000000000")), "{cap} not zero:\n{out}");
    }
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("Seccomp:\t2"), "{out}");
    assert!(o.cleanup_confirmed);
    assert!(o.limits.landlock_abi >= 1, "{:?}", o.limits);
}

#[test]
fn only_stdio_descriptors_reach_the_worker() {
    let o = run(sh("python3 -c 'import os; print(\" \".join(sorted(os.listdir(\"/proc/self/fd\"))))'", &[]));
    assert!(o.exit.success(), "{}", show(&o));
    // 0, 1, 2 and the descriptor of the listing itself.
    let fds: BTreeSet<String> = text(&o.stdout).split_whitespace().map(str::to_string).collect();
    let allowed: BTreeSet<String> = ["0", "1", "2", "3"].iter().map(|s| s.to_string()).collect();
    assert!(fds.is_subset(&allowed), "unexpected descriptors {fds:?}");
    // stdin is /dev/null.
    let o = run(sh("readlink /proc/self/fd/0", &[]));
    assert_eq!(text(&o.stdout).trim(), "/dev/null", "{}", show(&o));
}

#[test]
fn mountinfo_shows_only_the_expected_mounts() {
    let dir = Dir::new();
    dir.write("in.txt", b"hello");
    let mut spec = sh("cat /proc/self/mountinfo", &[]);
    spec.inputs.push(dir.input("in.txt", "data/in.txt"));
    spec.output = Some(dir.output("out.staging", "out.txt", 100));
    let o = run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    let info = text(&o.stdout);
    let host = dir.tmp.path().to_str().unwrap();
    assert!(!info.contains(host), "the staging directory {host} appears:\n{info}");
    let points: BTreeSet<String> = info.lines().filter_map(|l| l.split(' ').nth(4).map(str::to_string)).collect();
    let mut expected: BTreeSet<String> = [
        "/",
        "/dev",
        "/dev/null",
        "/dev/zero",
        "/dev/urandom",
        "/proc",
        "/tmp",
        "/workspace/data/in.txt",
        "/workspace/out.txt",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for m in ImageMount::default_image() {
        if std::fs::symlink_metadata(&m.path).unwrap().is_dir() {
            expected.insert(m.path.to_str().unwrap().to_string());
        }
    }
    for f in ["/etc/ld.so.cache", "/etc/alternatives"] {
        if std::path::Path::new(f).exists() {
            expected.insert(f.to_string());
        }
    }
    // The masks over /proc (ATTACKS case 27).
    expected.extend(present(MASKED_PROC));
    expected.extend(present(READONLY_PROC));
    // Sub-mounts of the image (if the host has any) appear beneath it.
    let unexpected: Vec<&String> = points
        .iter()
        .filter(|p| !expected.contains(*p))
        .filter(|p| !ImageMount::default_image().iter().any(|m| p.starts_with(&format!("{}/", m.path.display()))))
        .collect();
    assert!(unexpected.is_empty(), "unexpected mounts {unexpected:?}:\n{info}");
    assert!(expected.iter().all(|e| points.contains(e)), "missing mounts; got {points:?}");
    // The root, the inputs and the image are read-only.
    for l in info.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        if ["/", "/workspace/data/in.txt", "/usr"].contains(&f[4]) {
            assert!(f[5].split(',').any(|o| o == "ro"), "{} is not read-only: {l}", f[4]);
        }
    }
}

#[test]
fn a_file_beside_the_input_and_host_secrets_are_out_of_reach() {
    let dir = Dir::new();
    dir.write("in.txt", b"granted");
    dir.write("secret.txt", b"SECRET-BESIDE");
    let mut spec = sh(
        "cat data/in.txt; echo; ls -a data; cat data/secret.txt && echo READ-SECRET; \
         cat /etc/shadow && echo READ-SHADOW; ls / && echo LISTED-ROOT; cat \"$1/secret.txt\" && echo READ-HOST; true",
        &[dir.tmp.path().to_str().unwrap()],
    );
    spec.inputs.push(dir.input("in.txt", "data/in.txt"));
    let o = run(spec);
    let out = text(&o.stdout);
    assert!(out.starts_with("granted\n"), "{}", show(&o));
    assert!(out.contains("in.txt"), "{}", show(&o));
    for bad in ["secret.txt", "SECRET-BESIDE", "READ-SECRET", "READ-SHADOW", "LISTED-ROOT", "READ-HOST"] {
        assert!(!out.contains(bad), "{bad} in output:\n{}", show(&o));
    }
}

#[test]
fn the_network_is_unreachable() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "python3 -c 'import socket; s=socket.socket(); s.settimeout(3); s.connect((\"127.0.0.1\", {port})); print(\"CONNECTED\")'"
    );
    let o = run(sh(&script, &[]));
    assert!(!o.exit.success(), "{}", show(&o));
    assert!(!text(&o.stdout).contains("CONNECTED"), "{}", show(&o));
    // And nothing arrived on the host side.
    match listener.accept() {
        Ok((mut s, peer)) => {
            let mut b = Vec::new();
            let _ = s.read_to_end(&mut b);
            panic!("the worker connected from {peer}");
        }
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
    }
}

#[test]
fn namespaces_mounts_and_ptrace_are_denied() {
    let script = r#"
        unshare -U true && echo UNSHARE-OK
        python3 -c 'import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for name, flag in (("NEWNS", 0x20000), ("NEWUSER", 0x10000000), ("NEWNET", 0x40000000)):
    r = libc.unshare(flag)
    print("unshare", name, r, errno.errorcode.get(ctypes.get_errno()))
'
        mount -t tmpfs none /tmp 2>/dev/null && echo MOUNT-OK
        python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); r = libc.ptrace(0, 0, 0, 0); print("ptrace", r, ctypes.get_errno())'
        if command -v strace >/dev/null; then strace -o /dev/null true 2>/dev/null && echo STRACE-OK; fi
        python3 -c 'import os; print("personality", os.system("setarch -R true 2>/dev/null"))'
        true
    "#;
    let o = run(sh(script, &[]));
    let out = text(&o.stdout);
    for bad in ["UNSHARE-OK", "PY-UNSHARE-OK", "MOUNT-OK", "STRACE-OK"] {
        assert!(!out.contains(bad), "{bad}:\n{}", show(&o));
    }
    for ns in ["NEWNS", "NEWUSER", "NEWNET"] {
        assert!(out.contains(&format!("unshare {ns} -1 EPERM")), "{ns}: {}", show(&o));
    }
    assert!(out.contains("ptrace -1 1"), "{}", show(&o));
    assert!(!out.contains("personality 0\n"), "setarch -R succeeded:\n{}", show(&o));
}

#[test]
fn seccomp_lets_a_harmless_program_run_and_denies_a_malicious_one() {
    let o = run(sh("true", &[]));
    assert_eq!(o.exit, ExitStatusKind::Exited(0), "{}", show(&o));
    // unshare(CLONE_NEWUSER) through the C library: EPERM from the filter.
    let malicious = "import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n\
                     sys.exit(ctypes.get_errno() if libc.unshare(0x10000000) != 0 else 0)";
    let o = run(sh(&format!("python3 -c \"$(printf '{malicious}')\""), &[]));
    assert_eq!(o.exit, ExitStatusKind::Exited(1), "EPERM expected: {}", show(&o));
}

#[test]
fn pid_1_cannot_be_inspected() {
    let o = run(sh(
        "ls /proc/1/fd && echo LISTED; cat /proc/1/environ && echo READ; ls /proc | grep -E '^[0-9]+$' | wc -l",
        &[],
    ));
    let out = text(&o.stdout);
    assert!(!out.contains("LISTED") && !out.contains("READ"), "{}", show(&o));
}
