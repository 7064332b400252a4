//! Waiting, with a deadline, for a descriptor to turn readable: a pipe's
//! data or end of file, a pidfd's exit.
#![forbid(unsafe_code)]

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

/// `d` as a `poll` timeout.
pub(crate) fn timespec(d: Duration) -> rustix::time::Timespec {
    rustix::time::Timespec { tv_sec: d.as_secs() as i64, tv_nsec: d.subsec_nanos() as i64 }
}

/// Polls a pidfd until it is readable (the process has exited) or `until`.
pub(crate) fn exited_by(pidfd: &impl AsFd, until: Instant) -> bool {
    readable_by(pidfd, until)
}

/// Polls `fd` until it is readable (data, end of file or, for a pidfd, an
/// exit) or `until`; `false` at the deadline or on a poll error.
pub(crate) fn readable_by(fd: &impl AsFd, until: Instant) -> bool {
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timespec(left))) {
            Ok(n) if n > 0 => return true,
            Ok(_) => return false,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}
