//! Waiting on a descriptor in `poll`, up to a deadline; and why a frame
//! is waited for that way, not in a blocking receive.
//!
//! A blocking receive on a Unix stream socket sleeps on the socket's wait
//! queue with a wake-up that ignores why it is woken, and the kernel wakes
//! that queue each time the peer reads bytes this end sent (`sock_wfree` →
//! `unix_write_space`: room to write again). In a request and answer
//! exchange that is every request: the end that sent it and now waits for
//! the answer is woken once for nothing, a context switch and, when the two
//! run on different CPUs, an interprocessor interrupt (on a virtual
//! machine, an exit to the hypervisor). A `poll` wait asks for input only,
//! and the kernel does not wake it for room to write. So the relay and the
//! broker wait for each other's frames in `poll` and then read what is
//! there. The worker's clients keep their blocking receive: in the Python
//! client the extra calls cost more than the wake-up they save (DESIGN,
//! "The relay and the broker wait in poll").

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Instant;

pub use rustix::event::PollFlags;
use rustix::event::{poll, PollFd, Timespec};
use rustix::io::Errno;

/// Waits until `fd` is ready for `flags` (or hung up, or failed: the call
/// that follows says which): `Ok(true)`; `Ok(false)` once `deadline`
/// passes (at once if it has; `None`: no deadline). A signal's
/// interruption is waited through. The one deadline-bounded `poll` of the
/// broker, the relay (its worker and broker sockets) and the wait for the
/// broker's exit.
pub fn wait_ready(fd: BorrowedFd<'_>, flags: PollFlags, deadline: Option<Instant>) -> io::Result<bool> {
    loop {
        let timeout = match deadline {
            None => None,
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(false);
                }
                let tv_sec = i64::try_from(left.as_secs()).unwrap_or(i64::MAX);
                Some(Timespec { tv_sec, tv_nsec: i64::from(left.subsec_nanos()) })
            }
        };
        let mut fds = [PollFd::new(&fd, flags)];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) | Err(Errno::INTR) => continue,
            Ok(_) => return Ok(true),
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    #[test]
    fn a_wait_returns_once_input_arrives_or_the_peer_hangs_up() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            a.write_all(b"frame").unwrap();
            a
        });
        let started = Instant::now();
        assert!(wait_ready(b.as_fd(), PollFlags::IN, None).unwrap());
        assert!(started.elapsed() >= Duration::from_millis(30), "it waited for the write");
        let mut got = [0u8; 5];
        (&b).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"frame");
        drop(writer.join().unwrap());
        // The peer gone: no wait, and the read says end of stream.
        assert!(wait_ready(b.as_fd(), PollFlags::IN, Some(Instant::now() + Duration::from_secs(5))).unwrap());
        assert_eq!((&b).read(&mut got).unwrap(), 0);
    }

    #[test]
    fn a_wait_past_its_deadline_says_so() {
        let (_a, b) = UnixStream::pair().unwrap();
        let started = Instant::now();
        assert!(!wait_ready(b.as_fd(), PollFlags::IN, Some(started + Duration::from_millis(40))).unwrap());
        assert!(started.elapsed() >= Duration::from_millis(40));
        assert!(!wait_ready(b.as_fd(), PollFlags::IN, Some(Instant::now())).unwrap());
        // Room to write is there at once.
        assert!(wait_ready(b.as_fd(), PollFlags::OUT, Some(Instant::now() + Duration::from_secs(5))).unwrap());
    }
}
