//! Test helper (not shipped): confines itself exactly as the broker does
//! (same command line, same [`airlock_broker::confine`]), then reads one
//! command a line from fd 0 and answers each with one line, to show what
//! the jail refuses. `socket`, `exec`, `ioctl` and `sendmsg-stderr` are
//! expected to kill it with SIGSYS before it answers.
//!
//! Commands: `fds`, `env`, `read-path P`, `write-path P`,
//! `openat ROOT REL path|read|dir|write|tmpfile`, `hostfs-read ROOT PATH`,
//! `hostfs-list ROOT PATH`, `hostfs-write ROOT PATH`, `socket`, `exec`, `ioctl`,
//! `pass-root ROOT` (the answer goes with the root's descriptor, as the
//! broker hands a stream's file over), `sendmsg-stderr`.
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use airlock_broker::{Args, Channel, Socket};
use airlock_hostfs::{rooted, Resolver};
use rustix::fs::{Mode, OFlags};

fn main() {
    let args = Args::parse(std::env::args_os().skip(1)).unwrap_or_else(|e| {
        eprintln!("probe: {e}");
        std::process::exit(64)
    });
    let (roots, resolver) = airlock_broker::confine(&args).unwrap_or_else(|e| {
        eprintln!("probe: confine: {e}");
        std::process::exit(71)
    });
    let mut out = Socket::stdin();
    for line in BufReader::new(Socket::stdin()).lines() {
        let Ok(line) = line else { std::process::exit(74) };
        if let Some(i) = line.strip_prefix("pass-root ") {
            let root = &roots[i.parse::<usize>().expect("root index")];
            if out.write_with_file(&[b"ok passed\n"], root.as_fd()).is_err() {
                std::process::exit(74)
            }
            continue;
        }
        let answer = run(&line, &roots, &resolver);
        if writeln!(out, "{answer}").is_err() {
            std::process::exit(74)
        }
    }
}

fn errno(e: impl Into<std::io::Error>) -> String {
    format!("err {}", e.into().raw_os_error().unwrap_or(-1))
}

fn run(line: &str, roots: &[OwnedFd], resolver: &Resolver) -> String {
    let words: Vec<&str> = line.split(' ').collect();
    let root = |i: &str| &roots[i.parse::<usize>().expect("root index")];
    match words.as_slice() {
        ["fds"] => open_fds(),
        ["env"] => format!("ok {}", std::env::vars_os().count()),
        ["read-path", p] => std::fs::read(p).map_or_else(errno, |b| format!("ok {}", b.len())),
        ["write-path", p] => std::fs::write(p, b"x").map_or_else(errno, |()| "ok".into()),
        ["openat", i, rel, mode] => {
            let flags = match *mode {
                "path" => OFlags::PATH,
                "read" => OFlags::RDONLY,
                "dir" => OFlags::RDONLY | OFlags::DIRECTORY,
                "write" => OFlags::WRONLY,
                "tmpfile" => OFlags::TMPFILE | OFlags::WRONLY,
                other => panic!("unknown mode {other}"),
            };
            rustix::fs::openat(root(i), *rel, flags | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))
                .map_or_else(errno, |_| "ok".into())
        }
        ["hostfs-read", i, p] => match rooted::read_file(resolver, root(i), &comps(p), 0, 1024) {
            Ok(read) => format!("ok {}", String::from_utf8_lossy(&read.bytes)),
            Err(e) => format!("err {}: {e}", e.code()),
        },
        ["hostfs-list", i, p] => match rooted::list_dir(resolver, root(i), &comps(p), 100) {
            Ok(l) => format!("ok {}", l.names.join(",")),
            Err(e) => format!("err {}: {e}", e.code()),
        },
        ["hostfs-write", i, p] => {
            let done = rooted::prepare_write(resolver, root(i), &comps(p), b"probe")
                .and_then(|w| w.commit(".airlock-stage-probe"));
            match done {
                Ok(n) => format!("ok {n}"),
                Err(e) => format!("err {}: {e}", e.code()),
            }
        }
        ["socket"] => std::os::unix::net::UnixStream::connect("/nowhere").map_or_else(errno, |_| "ok".into()),
        ["exec"] => std::process::Command::new("/bin/true").status().map_or_else(errno, |s| format!("ok {s}")),
        ["ioctl"] => rustix::io::ioctl_fionbio(rustix::stdio::stdin(), true).map_or_else(errno, |()| "ok".into()),
        ["sendmsg-stderr"] => {
            let mut control = rustix::net::SendAncillaryBuffer::default();
            let bytes = [std::io::IoSlice::new(b"x")];
            rustix::net::sendmsg(rustix::stdio::stderr(), &bytes, &mut control, rustix::net::SendFlags::empty())
                .map_or_else(errno, |_| "ok".into())
        }
        _ => format!("unknown command {line:?}"),
    }
}

fn comps(path: &str) -> Vec<&str> {
    if path == "." {
        Vec::new()
    } else {
        path.split('/').collect()
    }
}

/// The open descriptors, found without `/proc` (there is none): duplicate
/// fd 0 until the table is full; every number not handed out is open.
fn open_fds() -> String {
    let mut fresh = Vec::new();
    while let Ok(fd) = rustix::io::fcntl_dupfd_cloexec(rustix::stdio::stdin(), 0) {
        fresh.push(fd);
    }
    let given: Vec<i32> = fresh.iter().map(|f| f.as_raw_fd()).collect();
    let top = given.iter().copied().max().unwrap_or(0);
    let open: Vec<String> = (0..top).filter(|n| !given.contains(n)).map(|n| n.to_string()).collect();
    format!("ok {} limit {}", open.join(","), top + 1)
}
