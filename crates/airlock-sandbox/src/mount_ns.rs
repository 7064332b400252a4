//! PID 1's mount namespace, held by the caller while the sandbox ends and
//! released on a thread of its own once the wait is over.
//!
//! A mount namespace is torn down by whoever drops its last reference. Left
//! alone, that is PID 1 as it exits: it unmounts the sandbox's tree (image
//! binds, inputs, the tmpfs root, `/proc`), which waits for an expedited RCU
//! grace period and shuts down each tmpfs and proc instance. The caller
//! confirms cleanup by PID 1's exit, so it would wait for all of that
//! (here 0.2 ms for a bare copy of the host's table and ~1.4 ms more with
//! 40 tmpfs mounts, measured by exiting the namespace's last process with
//! and without another descriptor of it).
//!
//! Holding a descriptor of the namespace (`/proc/PID/ns/mnt`) moves the
//! unmounting to the close of that descriptor, which [`MountNsHold::release`]
//! hands to a thread that closes it [`RELEASE_QUIET`] later, once the call
//! has published and answered (closing it at once made a one-shot call
//! slower here: the unmounting took a core from the publication). Nothing
//! a guarantee rests on changes. Processes are not kept: the kernel still
//! empties the pid namespace before PID 1 finishes exiting, and the caller
//! still waits for that. What stays a little longer is a tree of mounts
//! with no process in it, reachable only through the descriptor, which is
//! close-on-exec (every child of a caller is executed) and closed on that
//! thread or in the caller's exit. Where the descriptor cannot be had,
//! nothing is held and PID 1 unmounts as before: PID 1 is not dumpable and
//! its memory's user namespace is the host's (the init unshares after its
//! exec), so only a caller with `CAP_SYS_PTRACE` there (root) may open it;
//! and a PID 1 already gone has nothing to hold.
#![forbid(unsafe_code)]

use std::os::fd::OwnedFd;
use std::sync::mpsc::Sender;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};
use rustix::process::{Pid, PidfdFlags};

use crate::proc_status;
use crate::ready::exited_by;
use crate::wire::StatusMsg;

/// How many times a PID 1 still in the caller's own mount namespace (it
/// unshares its own first thing) is looked at again, at the next status
/// record, before the hold is given up.
const ATTEMPTS: u8 = 4;

/// The caller's hold on one sandbox's mount namespace.
#[derive(Debug)]
pub(crate) struct MountNsHold {
    state: State,
}

#[derive(Debug)]
enum State {
    /// Reading the status records for PID 1's host pid.
    Looking {
        scanned: usize,
        pid1: Option<i32>,
        attempts: u8,
    },
    Held(OwnedFd),
    GaveUp,
}

/// What one attempt at PID 1's namespace found.
enum Attempt {
    Took(OwnedFd),
    /// PID 1 is still in the caller's namespace: try again later.
    NotYet,
    /// PID 1 is gone or its namespace cannot be opened.
    Never,
}

impl MountNsHold {
    /// A hold that has found nothing yet.
    pub(crate) fn new() -> Self {
        MountNsHold { state: State::Looking { scanned: 0, pid1: None, attempts: 0 } }
    }

    /// Reads the status records received so far (`status`, the whole
    /// stream from its start) for PID 1's host pid and, once PID 1 has a
    /// mount namespace of its own, takes a descriptor of it. PID 1 must be
    /// `init_pid`'s child, and alive after the namespace was opened, so a
    /// recycled pid is never mistaken for it.
    pub(crate) fn look(&mut self, status: &[u8], init_pid: u32) {
        let State::Looking { scanned, pid1, attempts } = &mut self.state else {
            return;
        };
        if pid1.is_none() {
            let Some(end) = status.iter().rposition(|b| *b == b'\n') else {
                return;
            };
            if end < *scanned {
                return;
            }
            *pid1 = status[*scanned..end].split(|b| *b == b'\n').find_map(|line| {
                match serde_json::from_slice::<StatusMsg>(line) {
                    Ok(StatusMsg::Pid1 { host_pid }) => Some(host_pid),
                    _ => None,
                }
            });
            *scanned = end + 1;
        }
        let Some(host_pid) = *pid1 else {
            return;
        };
        *attempts += 1;
        self.state = match take(host_pid, init_pid) {
            Attempt::Took(fd) => State::Held(fd),
            Attempt::NotYet if *attempts < ATTEMPTS => return,
            Attempt::NotYet | Attempt::Never => State::GaveUp,
        };
    }

    /// Hands the held descriptor to the release thread, which closes it
    /// [`RELEASE_QUIET`] from now (here, at once, if that thread cannot be
    /// started). Called once PID 1 and the init are gone: then the caller's
    /// descriptor is the namespace's last reference.
    pub(crate) fn release(self) {
        if let State::Held(fd) = self.state {
            release_later(fd);
        }
    }
}

/// Opens `/proc/HOST_PID/ns/mnt` when `host_pid` is `init_pid`'s child and
/// the init of its own pid namespace, alive until after the open, and in a
/// mount namespace that is not the caller's.
fn take(host_pid: i32, init_pid: u32) -> Attempt {
    let Some(pid) = Pid::from_raw(host_pid) else {
        return Attempt::Never;
    };
    // The pidfd pins the process: if it exits after the checks below, the
    // pidfd says so, and whatever the pid names by then is never kept.
    let Ok(pidfd) = rustix::process::pidfd_open(pid, PidfdFlags::empty()) else {
        return Attempt::Never;
    };
    let status = proc_status::read(host_pid);
    let field = |name| proc_status::field(&status, name);
    if field("PPid:") != init_pid.to_string() || field("NSpid:").split_whitespace().last() != Some("1") {
        return Attempt::Never;
    }
    let Ok(ns) = rustix::fs::open(format!("/proc/{host_pid}/ns/mnt"), OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
    else {
        return Attempt::Never;
    };
    if exited_by(&pidfd, Instant::now()) {
        return Attempt::Never;
    }
    let same = |a: &rustix::fs::Stat, b: &rustix::fs::Stat| a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    match (rustix::fs::fstat(&ns), rustix::fs::stat("/proc/self/ns/mnt")) {
        (Ok(theirs), Ok(ours)) if same(&theirs, &ours) => Attempt::NotYet,
        (Ok(_), Ok(_)) => Attempt::Took(ns),
        _ => Attempt::Never,
    }
}

/// How long after its sandbox ended a namespace is released: long enough
/// for the caller to publish and answer first (an `airlock mcp` call's tail
/// after its wait is ~2 ms here), so the unmounting does not take a core
/// from it.
const RELEASE_QUIET: Duration = Duration::from_millis(5);

/// Drops `fd` [`RELEASE_QUIET`] from now on a thread that lives as long as
/// the process and does nothing else (or here, when it cannot be started).
/// A process that exits first closes it in its exit.
fn release_later(fd: OwnedFd) {
    static RELEASER: OnceLock<Option<Sender<(Instant, OwnedFd)>>> = OnceLock::new();
    let sender = RELEASER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<(Instant, OwnedFd)>();
        std::thread::Builder::new()
            .name("airlock-mntns-release".into())
            .spawn(move || {
                for (due, fd) in rx {
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    drop(fd);
                }
            })
            .ok()
            .map(|_| tx)
    });
    match sender {
        Some(tx) => {
            if let Err(unsent) = tx.send((Instant::now() + RELEASE_QUIET, fd)) {
                drop(unsent.0);
            }
        }
        None => drop(fd),
    }
}
