//! A microVM worker on a terminal (a session's worker): the guest runs the
//! tool on a pty of its own (`guest.rs`, protocol version 2), whose output
//! comes back as stdout frames. Here one end of a socket pair stands for
//! the terminal: the worker's conversation with the guest runs from the
//! start on a thread of its own, writing the tool's output into that end,
//! and a second thread turns what the caller writes into stdin frames.
//! When the caller drops its end, the guest is told the terminal hung up
//! (`SIGHUP` to the tool's process group), as a pty whose master is closed
//! would; the conversation then ends as any call's does (result, output
//! with its SHA-256, end), and [`Worker::wait`] answers it.
#![forbid(unsafe_code)]

use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use super::frame::{self, Kind};
use super::worker::MicrovmWorker;
use crate::error::{errno, SandboxError};
use crate::outcome::WorkerOutcome;
use crate::worker::{KillHandle, Worker};

/// Bytes typed per stdin frame at most.
const TYPED_CHUNK: usize = 16 << 10;

/// A running microVM worker on a terminal.
pub struct MicrovmTerminal {
    kill: KillHandle,
    talk: Option<JoinHandle<Result<WorkerOutcome, SandboxError>>>,
}

impl std::fmt::Debug for MicrovmTerminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MicrovmTerminal").field("running", &self.talk.is_some()).finish()
    }
}

/// Starts the threads that carry `worker`'s terminal; returns the worker's
/// handle and the caller's end of the terminal.
pub(super) fn attach(mut worker: MicrovmWorker) -> Result<(MicrovmTerminal, std::fs::File), SandboxError> {
    let socket = |e: std::io::Error| SandboxError::Descriptor { call: "socketpair(AF_UNIX)".into(), errno: errno(e) };
    let (ours, theirs) = UnixStream::pair().map_err(socket)?;
    let typed = theirs.try_clone().map_err(socket)?;
    let to_guest = worker.carry_terminal(std::fs::File::from(OwnedFd::from(theirs)))?;
    let kill = worker.kill_handle();
    let thread = |what: &str, e: std::io::Error| {
        SandboxError::Unavailable(format!("cannot start the microvm terminal's {what} thread: {e}"))
    };
    std::thread::Builder::new()
        .name("airlock-microvm-typing".into())
        .spawn(move || type_into(typed, to_guest))
        .map_err(|e| thread("typing", e))?;
    let talk = std::thread::Builder::new()
        .name("airlock-microvm-terminal".into())
        .spawn(move || worker.wait())
        .map_err(|e| thread("conversation", e))?;
    Ok((MicrovmTerminal { kill, talk: Some(talk) }, std::fs::File::from(OwnedFd::from(ours))))
}

/// Sends what the caller writes as stdin frames; at its end-of-file, the
/// hangup.
fn type_into(mut from_caller: UnixStream, mut to_guest: UnixStream) {
    let mut buf = vec![0u8; TYPED_CHUNK];
    loop {
        match from_caller.read(&mut buf) {
            Ok(n) if n > 0 => {
                if frame::write_frame(&mut to_guest, Kind::Stdin, &buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => {
                let _ = frame::write_frame(&mut to_guest, Kind::Hangup, &[]);
                return;
            }
        }
    }
}

impl Worker for MicrovmTerminal {
    fn kill_handle(&self) -> KillHandle {
        self.kill.clone()
    }

    fn kill(&mut self) -> Result<(), SandboxError> {
        self.kill.kill()
    }

    fn wait(mut self) -> Result<WorkerOutcome, SandboxError> {
        let talk =
            self.talk.take().ok_or_else(|| SandboxError::Protocol("the terminal was already waited for".into()))?;
        talk.join().unwrap_or_else(|_| Err(SandboxError::Protocol("the microvm terminal's thread panicked".into())))
    }
}

impl Drop for MicrovmTerminal {
    /// Not waited for: the VM is killed (its conversation thread then
    /// reaps it and removes the call directory).
    fn drop(&mut self) {
        if self.talk.is_some() {
            let _ = self.kill.kill();
        }
    }
}
