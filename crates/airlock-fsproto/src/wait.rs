//! Waiting for a frame in `poll`, not in a blocking receive.
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

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;

/// Waits until `fd` has input (or its peer hung up, or it failed: the read
/// that follows says which), or `deadline` passes (`TimedOut`). A signal's
/// interruption is waited through.
pub fn wait_readable(fd: BorrowedFd<'_>, deadline: Option<Instant>) -> io::Result<()> {
    loop {
        let timeout = match deadline {
            None => None,
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer before the deadline"));
                }
                let tv_sec = i64::try_from(left.as_secs()).unwrap_or(i64::MAX);
                Some(Timespec { tv_sec, tv_nsec: i64::from(left.subsec_nanos()) })
            }
        };
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) => continue,
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
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
        wait_readable(b.as_fd(), None).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(30), "it waited for the write");
        let mut got = [0u8; 5];
        (&b).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"frame");
        drop(writer.join().unwrap());
        // The peer gone: no wait, and the read says end of stream.
        wait_readable(b.as_fd(), Some(Instant::now() + Duration::from_secs(5))).unwrap();
        assert_eq!((&b).read(&mut got).unwrap(), 0);
    }

    #[test]
    fn a_wait_past_its_deadline_times_out() {
        let (_a, b) = UnixStream::pair().unwrap();
        let started = Instant::now();
        let err = wait_readable(b.as_fd(), Some(started + Duration::from_millis(40))).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(40));
        let err = wait_readable(b.as_fd(), Some(Instant::now())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }
}
