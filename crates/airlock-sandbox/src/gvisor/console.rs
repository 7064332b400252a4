//! A gVisor worker's terminal: `runsc run --console-socket PATH` makes a
//! pseudo-terminal for the tool (the OCI `process.terminal`) and sends its
//! master over a Unix socket, which this module listens on in the call's
//! private directory and receives as an `SCM_RIGHTS` descriptor.
//!
//! Giving `runsc run` a pty as its own stdin instead (runsc's other way)
//! loses the terminal in about one start in ten here: the tool's stdio
//! then falls back to runsc's, and the master reads `EIO` from the start.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rustix::event::{PollFd, PollFlags};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

use crate::error::{errno, SandboxError};

/// The socket's name in the call directory.
const SOCKET_NAME: &str = "console.sock";

/// The listening socket `runsc run` connects to.
pub(crate) struct Console {
    listener: UnixListener,
    path: PathBuf,
}

impl Console {
    /// Listens at [`SOCKET_NAME`] in `call_dir` (the caller's private
    /// directory: nobody else can connect).
    pub(crate) fn listen(call_dir: &Path) -> Result<Console, SandboxError> {
        let path = call_dir.join(SOCKET_NAME);
        let listener = UnixListener::bind(&path)
            .map_err(|e| SandboxError::Descriptor { call: format!("bind({})", path.display()), errno: errno(e) })?;
        Ok(Console { listener, path })
    }

    /// The path to pass as `--console-socket`.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Waits until `deadline` for runsc's connection and the terminal's
    /// master on it; gives up early when `runsc` (its pidfd) has exited.
    pub(crate) fn receive(self, runsc: &OwnedFd, deadline: Instant) -> Result<File, SandboxError> {
        let gone = |why: &str| SandboxError::Unavailable(format!("runsc did not hand over the terminal: {why}"));
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(gone("it did not connect in time"));
            }
            let timeout = rustix::time::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
            let mut fds = [PollFd::new(&self.listener, PollFlags::IN), PollFd::new(runsc, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(_) if !fds[0].revents().is_empty() => break,
                Ok(_) if !fds[1].revents().is_empty() => return Err(gone("it exited first")),
                Ok(_) | Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    return Err(SandboxError::Descriptor { call: "poll(console socket)".into(), errno: errno(e) })
                }
            }
        }
        let (stream, _) = self
            .listener
            .accept()
            .map_err(|e| SandboxError::Descriptor { call: "accept(console socket)".into(), errno: errno(e) })?;
        stream
            .set_read_timeout(Some(
                deadline.saturating_duration_since(Instant::now()).max(std::time::Duration::from_millis(1)),
            ))
            .map_err(|e| SandboxError::Descriptor { call: "setsockopt(SO_RCVTIMEO)".into(), errno: errno(e) })?;
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut name = [0u8; 256];
        rustix::net::recvmsg(stream.as_fd(), &mut [IoSliceMut::new(&mut name)], &mut control, RecvFlags::CMSG_CLOEXEC)
            .map_err(|e| SandboxError::Descriptor { call: "recvmsg(console socket)".into(), errno: errno(e) })?;
        let master = control.drain().find_map(|m| match m {
            RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
            _ => None,
        });
        master.map(File::from).ok_or_else(|| gone("its message carried no descriptor"))
    }
}
