//! What the jail refuses, shown by the probe helper (same command line and
//! confinement as the broker, then commands from the test).

use std::os::unix::process::ExitStatusExt;

use crate::util::{start, Roots, PROBE};

#[test]
fn only_the_socket_stdio_and_roots_are_open_and_the_environment_is_empty() {
    let roots = Roots::new(&["r", "l"]);
    let mut p = start(PROBE, &roots);
    let got = p.probe(&["fds", "env"]);
    assert_eq!(got, ["ok 0,1,2,3,4 limit 66", "ok 0"], "RLIMIT_NOFILE is 64 + roots");
    let (status, stderr) = p.finish();
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn a_system_call_outside_the_allowlist_kills_it() {
    let roots = Roots::new(&["rwl"]);
    for call in ["socket", "exec", "ioctl", "sendmsg-stderr"] {
        let mut p = start(PROBE, &roots);
        let got = p.probe(&["env", call, "env"]);
        assert_eq!(got, ["ok 0"], "{call}: nothing answered after the call");
        let (status, stderr) = p.finish();
        assert_eq!(status.signal(), Some(libc::SIGSYS), "{call}: {status:?} {stderr}");
    }
}

#[test]
fn a_descriptor_passes_only_on_the_socket_to_airlock() {
    let roots = Roots::new(&["r"]);
    let mut p = start(PROBE, &roots);
    let got = p.probe(&["pass-root 0", "env"]);
    assert_eq!(got, ["ok passed", "ok 0"], "sendmsg on fd 0 (with a descriptor) is allowed");
    let (status, stderr) = p.finish();
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn no_host_path_is_reachable() {
    let roots = Roots::new(&["rwl"]);
    let secret = roots.outside().join("secret");
    let mut p = start(PROBE, &roots);
    let got = p.probe(&[
        "read-path /etc/passwd",
        "read-path /proc/self/status",
        &format!("read-path {}", secret.display()),
        &format!("read-path {}/a.txt", roots.path(0).display()),
        "write-path /x",
    ]);
    let enoent = format!("err {}", libc::ENOENT);
    assert_eq!(got[..4], [enoent.as_str(); 4], "the root is empty: no host path names anything");
    assert!(matches!(got[4].as_str(), "err 30" | "err 13"), "the empty root is read-only: {}", got[4]);
    p.finish();
    roots.outside_untouched();
}

#[test]
fn dot_dot_from_a_root_reaches_nothing_the_kernel_allows() {
    let roots = Roots::new(&["rwl", "l"]);
    let mut p = start(PROBE, &roots);
    let eacces = format!("err {}", libc::EACCES);
    let got = p.probe(&[
        "openat 0 ../outside/secret read",
        "openat 0 ../outside/secret write",
        "openat 0 .. dir",
        "openat 0 ../outside dir",
        "openat 0 ../outside tmpfile",
        "openat 0 ../root1/a.txt read",
        "openat 0 a.txt read",
    ]);
    assert_eq!(got[..6], [eacces.as_str(); 6], "Landlock refuses everything outside root 0: {got:?}");
    assert_eq!(got[6], "ok", "inside root 0 reading is allowed");
    p.finish();
    roots.outside_untouched();
}

/// The file operations themselves, called directly in the jail: Landlock
/// holds each root to its rights even if the broker's own checks were gone.
#[test]
fn each_root_allows_only_its_rights_in_the_kernel() {
    let roots = Roots::new(&["r", "l", "w"]);
    let mut p = start(PROBE, &roots);
    let got = p.probe(&[
        "hostfs-read 0 a.txt",
        "hostfs-list 0 .",
        "hostfs-write 0 a.txt",
        "hostfs-write 0 new.txt",
        "openat 0 a.txt write",
        "openat 0 . tmpfile",
        "hostfs-list 1 .",
        "hostfs-read 1 a.txt",
        "hostfs-write 1 new.txt",
        "hostfs-write 2 new.txt",
        "hostfs-write 2 a.txt",
        "hostfs-read 2 a.txt",
        "openat 2 a.txt write",
    ]);
    // Refused by Landlock (EACCES), not by anything else.
    let denied = |i: usize| {
        let eacces = got[i] == format!("err {}", libc::EACCES) || got[i].ends_with("(os error 13)");
        assert!(got[i].starts_with("err") && eacces, "command {i} must be refused with EACCES: {got:?}");
    };
    assert_eq!(got[0], "ok root 0");
    for i in [1, 2, 3, 4, 5] {
        denied(i);
    }
    assert_eq!(got[6], "ok a.txt,sub");
    denied(7);
    denied(8);
    assert_eq!(got[9], "ok 5", "w creates");
    assert_eq!(got[10], "ok 5", "w replaces");
    denied(11);
    assert_eq!(got[12], "ok", "w may write a file it opens");
    let (status, stderr) = p.finish();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(std::fs::read(roots.path(0).join("a.txt")).unwrap(), b"root 0");
    assert!(!roots.path(0).join("new.txt").exists() && !roots.path(1).join("new.txt").exists());
    assert_eq!(std::fs::read(roots.path(2).join("new.txt")).unwrap(), b"probe");
    assert_eq!(std::fs::read(roots.path(2).join("a.txt")).unwrap(), b"probe");
    roots.outside_untouched();
}
