//! Files the broker hands to the relay, and the relay's reads of them.
//!
//! The broker opens a streamed read's file (and a chunked write's unnamed
//! file) after resolving its path in its jail, and passes the descriptor
//! with the answer that opened it (`SCM_RIGHTS`, announced by `handle` in
//! the answer). The relay then moves the stream's middle frames itself,
//! one copy from the page cache instead of the broker's read, its socket
//! write and the relay's socket read: a 64 MiB stream through three
//! processes on two cores was bound by those copies. No path is resolved
//! here; the descriptor is only read (or written), and what it is gets
//! checked against what the broker said it opened.

use std::fs::File;
use std::io::{ErrorKind, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use airlock_fsproto::{wait_ready, PollFlags, ReadStamp, WriteIdentity};
use rustix::io::Errno;
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

/// The broker's answers as a byte stream, read with `recvmsg` so that a
/// descriptor passed with an answer is kept (a plain `read` would close
/// it). A read takes what is there; with nothing there it waits in `poll`
/// until `deadline` ([`airlock_fsproto::wait_ready`]: a receive blocked
/// on the socket would also be woken each time the broker reads a request).
pub(crate) struct AnswerReader<'a> {
    pub socket: &'a UnixStream,
    /// Descriptors received, in order.
    pub passed: &'a mut Vec<OwnedFd>,
    /// When waiting for the broker gives up (`TimedOut`).
    pub deadline: Instant,
}

impl Read for AnswerReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = loop {
            match rustix::net::recvmsg(
                self.socket.as_fd(),
                &mut [IoSliceMut::new(buf)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
            ) {
                Ok(got) => break got,
                Err(Errno::AGAIN) => {
                    if !wait_ready(self.socket.as_fd(), PollFlags::IN, Some(self.deadline))? {
                        return Err(std::io::Error::new(ErrorKind::TimedOut, "no answer before the deadline"));
                    }
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        };
        let before = self.passed.len();
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                self.passed.extend(fds);
            }
        }
        // The control buffer's alignment leaves room for two; the kernel
        // closes what does not fit (CTRUNC). Either way, more than one.
        if self.passed.len() > before + 1 || got.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
            return Err(std::io::Error::other("the broker passed more than one descriptor with an answer"));
        }
        Ok(got.bytes)
    }
}

/// A streamed read's file, handed over by the broker with the stream's
/// first frame: what it was then, to check every later frame against.
pub(crate) struct HeldRead {
    file: File,
    pub root: String,
    pub path: String,
    /// The stream's `version` (of `stamp`).
    pub version: String,
    pub stamp: ReadStamp,
}

/// Why a handed file was not taken.
pub(crate) enum Refused {
    /// It is not the file the broker's answer described: the broker broke
    /// the protocol.
    NotTheFile(String),
    /// It changed since the broker read it: the next frame goes through the
    /// broker, whose answer says so.
    Changed,
}

impl HeldRead {
    /// Takes `fd` as the file `stamp` describes: a regular file with that
    /// identity, size and change time.
    pub fn take(fd: OwnedFd, stamp: ReadStamp, root: &str, path: &str, version: &str) -> Result<HeldRead, Refused> {
        let st = rustix::fs::fstat(&fd).map_err(|e| Refused::NotTheFile(format!("fstat of the handed file: {e}")))?;
        let regular = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile;
        if !regular || (st.st_dev, st.st_ino) != (stamp.dev, stamp.ino) {
            return Err(Refused::NotTheFile("the handed file is not the file the read answered from".into()));
        }
        if stamp_of(&st) != stamp {
            return Err(Refused::Changed);
        }
        let (root, path, version) = (root.to_owned(), path.to_owned(), version.to_owned());
        Ok(HeldRead { file: File::from(fd), root, path, version, stamp })
    }

    /// Reads at most `max` bytes from `offset` into `buf` (which then holds
    /// exactly them) and returns the file's stamp taken after: a frame whose
    /// stamp moved is one the caller refuses (`broker.changed`), as the
    /// broker's own reads are.
    pub fn read_at(&self, offset: u64, max: u64, buf: &mut Vec<u8>) -> std::io::Result<ReadStamp> {
        let want = usize::try_from(max.min(self.stamp.size.saturating_sub(offset))).unwrap_or(0);
        // Only what the buffer grows by is zeroed (a recycled frame buffer
        // is already this long).
        buf.resize(want, 0);
        let mut got = 0;
        while got < want {
            match rustix::io::pread(&self.file, &mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(got);
        let st = rustix::fs::fstat(&self.file)?;
        Ok(stamp_of(&st))
    }
}

/// A chunked write's unnamed file, handed over by the broker with its open:
/// the relay appends each frame to it, the broker names it at the commit.
pub(crate) struct HeldWrite {
    file: File,
}

impl HeldWrite {
    /// Takes `fd` as the unnamed file `identity` describes: a regular file
    /// with that identity, still empty.
    pub fn take(fd: OwnedFd, identity: &WriteIdentity) -> Result<HeldWrite, String> {
        let st = rustix::fs::fstat(&fd).map_err(|e| format!("fstat of the handed file: {e}"))?;
        let regular = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile;
        if !regular || (st.st_dev, st.st_ino) != (identity.file_dev, identity.file_ino) || st.st_size != 0 {
            return Err("the handed file is not the empty file the open answered".into());
        }
        Ok(HeldWrite { file: File::from(fd) })
    }

    /// Writes all of `data` at `offset`, the end of what was written
    /// before; starts the writeback of the MiB it completes.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let mut done = 0;
        while done < data.len() {
            match rustix::io::pwrite(&self.file, &data[done..], offset + done as u64) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        airlock_sandbox::start_writeback_after_append(self.file.as_fd(), offset, offset + data.len() as u64);
        Ok(())
    }
}

fn stamp_of(st: &rustix::fs::Stat) -> ReadStamp {
    ReadStamp {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
        ctime: st.st_ctime,
        ctime_nsec: st.st_ctime_nsec as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn stamp_of_path(path: &std::path::Path) -> ReadStamp {
        stamp_of(&rustix::fs::stat(path).unwrap())
    }

    fn open(path: &std::path::Path) -> OwnedFd {
        File::open(path).unwrap().into()
    }

    #[test]
    fn a_handed_read_is_taken_only_as_the_file_the_answer_described() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, vec![7u8; 100_000]).unwrap();
        std::fs::write(&b, vec![8u8; 100_000]).unwrap();
        let stamp = stamp_of_path(&a);
        let other = HeldRead::take(open(&b), stamp, "r", "a", "v");
        assert!(matches!(other, Err(Refused::NotTheFile(_))), "another file under the same stamp");
        let dir_fd = open(dir.path());
        assert!(matches!(HeldRead::take(dir_fd, stamp, "r", "a", "v"), Err(Refused::NotTheFile(_))));
        std::fs::OpenOptions::new().append(true).open(&a).unwrap().write_all(b"more").unwrap();
        assert!(matches!(HeldRead::take(open(&a), stamp, "r", "a", "v"), Err(Refused::Changed)));
        let held = HeldRead::take(open(&a), stamp_of_path(&a), "r", "a", "v").ok().unwrap();
        let mut buf = Vec::new();
        assert_eq!(held.read_at(99_990, 65_536, &mut buf).unwrap(), stamp_of_path(&a));
        assert_eq!(buf, [7, 7, 7, 7, 7, 7, 7, 7, 7, 7, b'm', b'o', b'r', b'e']);
        // Changed after it was taken: the stamp a frame reports moved.
        std::fs::OpenOptions::new().append(true).open(&a).unwrap().write_all(b"!").unwrap();
        let after = held.read_at(0, 10, &mut buf).unwrap();
        assert_eq!((buf.len(), after.size), (10, 100_005));
    }

    #[test]
    fn a_handed_write_is_taken_only_empty_and_as_the_opened_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, b"").unwrap();
        let st = rustix::fs::stat(&path).unwrap();
        let identity = WriteIdentity { dir_dev: 0, dir_ino: 0, file_dev: st.st_dev, file_ino: st.st_ino, bytes: 0 };
        let rw = || -> OwnedFd { std::fs::OpenOptions::new().write(true).open(&path).unwrap().into() };
        let wrong = WriteIdentity { file_ino: st.st_ino + 1, ..identity };
        assert!(HeldWrite::take(rw(), &wrong).is_err());
        let held = HeldWrite::take(rw(), &identity).ok().unwrap();
        held.write_at(0, b"abc").unwrap();
        held.write_at(3, b"def").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"abcdef");
        assert!(HeldWrite::take(rw(), &identity).is_err(), "no longer empty");
    }

    #[test]
    fn more_than_one_descriptor_with_an_answer_is_refused() {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let (ours, theirs) = UnixStream::pair().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (x, y) = (open(dir.path()), open(dir.path()));
        let send = |fds: &[std::os::fd::BorrowedFd<'_>]| {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
            rustix::net::sendmsg(&theirs, &[std::io::IoSlice::new(b"ab")], &mut control, SendFlags::empty()).unwrap();
        };
        let mut passed = Vec::new();
        send(&[x.as_fd()]);
        let mut buf = [0u8; 2];
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        let mut reader = AnswerReader { socket: &ours, passed: &mut passed, deadline };
        assert_eq!(reader.read(&mut buf).unwrap(), 2);
        send(&[x.as_fd(), y.as_fd()]);
        assert!(reader.read(&mut buf).is_err(), "two descriptors with one answer: refused");
    }

    #[test]
    fn an_answer_is_waited_for_until_the_deadline_and_no_longer() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let mut passed = Vec::new();
        let late = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(30));
            theirs.write_all(b"late").unwrap();
            theirs
        });
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        let mut buf = [0u8; 4];
        AnswerReader { socket: &ours, passed: &mut passed, deadline }.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"late");
        let _theirs = late.join().unwrap();
        let started = Instant::now();
        let deadline = started + std::time::Duration::from_millis(40);
        let err = AnswerReader { socket: &ours, passed: &mut passed, deadline }.read(&mut buf).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= std::time::Duration::from_millis(40));
    }
}
