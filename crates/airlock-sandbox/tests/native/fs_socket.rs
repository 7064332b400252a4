//! `WorkerSpec::fs_socket`: the worker (and only the worker) gets one end of
//! a connected socket as descriptor 3, named by `AIRLOCK_FS_FD`.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use airlock_sandbox::{SandboxErrorKind, Tier, Worker, FS_SOCKET_ENV};

use crate::util::{run, sh, show, text, tier};

/// A connected pair: the test's end, and the end for the worker.
fn pair() -> (UnixStream, OwnedFd) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    (ours, OwnedFd::from(theirs))
}

#[test]
fn a_worker_talks_over_its_socket_at_fd_3() {
    let (ours, theirs) = pair();
    let script = r#"echo "hello $AIRLOCK_FS_FD" >&3; read -r line <&3; echo "got $line"; readlink /proc/self/fd/3"#;
    let mut spec = sh(script, &[]);
    spec.fs_socket = Some(theirs);
    let worker = tier().start(spec).unwrap();
    ours.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut reader = BufReader::new(ours.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "hello 3\n");
    (&ours).write_all(b"answer\n").unwrap();
    let o = worker.wait().unwrap();
    assert!(o.exit.success(), "{}", show(&o));
    let out = text(&o.stdout);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("got answer"), "{out}");
    assert!(lines.next().unwrap_or("").starts_with("socket:["), "fd 3 is not the socket: {out}");
    // Everything that held the worker's end is gone: end-of-file.
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
}

#[test]
fn nothing_but_stdio_and_the_socket_reaches_the_worker() {
    let (_ours, theirs) = pair();
    let mut spec = sh("python3 -c 'import os; print(\" \".join(sorted(os.listdir(\"/proc/self/fd\"))))'", &[]);
    spec.fs_socket = Some(theirs);
    let o = run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    let fds: BTreeSet<String> = text(&o.stdout).split_whitespace().map(str::to_string).collect();
    // 0, 1, 2, the socket and the descriptor of the listing itself.
    let allowed: BTreeSet<String> = ["0", "1", "2", "3", "4"].iter().map(|s| s.to_string()).collect();
    assert!(fds.contains("3") && fds.is_subset(&allowed), "unexpected descriptors {fds:?}");
}

#[test]
fn without_a_socket_fd_3_is_closed_and_unnamed() {
    let o = run(sh("test -e /proc/self/fd/3 && echo open; env | grep -c \"^$1=\"; true", &[FS_SOCKET_ENV]));
    assert_eq!(text(&o.stdout), "0\n", "{}", show(&o));
}

#[test]
fn only_the_worker_holds_its_end() {
    // The worker closes fd 3 and keeps running: if the init or PID 1 (or the
    // caller) still held a copy, the test's end would not see end-of-file.
    let (ours, theirs) = pair();
    let mut spec = sh("echo up >&3; exec 3>&-; sleep 3; echo done", &[]);
    spec.fs_socket = Some(theirs);
    let worker = tier().start(spec).unwrap();
    ours.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut reader = BufReader::new(ours);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "up\n");
    let started = Instant::now();
    let mut rest = Vec::new();
    let eof = reader.read_to_end(&mut rest);
    assert!(eof.is_ok() && rest.is_empty(), "no end-of-file while the worker runs: {eof:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "end-of-file came only when the worker ended");
    let o = worker.wait().unwrap();
    assert_eq!(text(&o.stdout), "done\n", "the worker ended before the check: {}", show(&o));
}

#[test]
fn a_child_of_the_worker_inherits_the_socket() {
    // `airlock-fs` commands run as children of a shell script.
    let (ours, theirs) = pair();
    let mut spec = sh("sh -c 'echo from-child >&3'; echo from-worker >&3", &[]);
    spec.fs_socket = Some(theirs);
    let o = run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    let mut got = String::new();
    BufReader::new(ours).read_to_string(&mut got).unwrap();
    assert_eq!(got, "from-child\nfrom-worker\n");
}

#[test]
fn a_socket_is_required_to_be_a_socket() {
    let mut spec = sh("true", &[]);
    spec.fs_socket = Some(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
    let err = tier().start(spec).unwrap_err();
    assert_eq!(err.kind(), SandboxErrorKind::InvalidSpec, "{err}");
}
