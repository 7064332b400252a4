//! A worker's start gate: the native tier builds and confines the worker,
//! then executes the tool only once the caller opens the gate. What the
//! tool's start must follow (the journal's synced `WorkerStarted`) then
//! overlaps the sandbox's furnishing instead of preceding it, and still
//! precedes every instruction of the tool.
//!
//! The gate is a pipe. The worker holds its read end through confinement
//! and reads one byte just before `execve`; end-of-file instead (the
//! caller dropped its end unopened, or died) withdraws the start: the
//! worker exits without executing anything
//! ([`SandboxError::StartWithdrawn`]).
#![forbid(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::error::{errno, SandboxError};

/// The worker's end of a start gate, for [`WorkerSpec::start_gate`](crate::WorkerSpec::start_gate).
#[derive(Debug)]
pub struct StartGate(OwnedFd);

/// The caller's end of a start gate: [`GateOpener::open`] lets the tool be
/// executed; dropping it unopened withdraws the start.
#[derive(Debug)]
pub struct GateOpener(OwnedFd);

/// A closed start gate: the worker's end for the spec and the caller's end.
pub fn start_gate() -> Result<(StartGate, GateOpener), SandboxError> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| SandboxError::Descriptor { call: "pipe2(O_CLOEXEC) (start gate)".into(), errno: errno(e) })?;
    Ok((StartGate(read), GateOpener(write)))
}

impl AsFd for StartGate {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl GateOpener {
    /// Opens the gate: the worker executes its tool as soon as it is
    /// confined. A worker already gone makes this fail (`EPIPE`); its end
    /// is then what [`Worker::wait`](crate::Worker::wait) reports.
    pub fn open(self) -> Result<(), SandboxError> {
        loop {
            match rustix::io::write(&self.0, &[1]) {
                Ok(1) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => return Err(gate_write_error(rustix::io::Errno::IO)),
                Err(e) => return Err(gate_write_error(e)),
            }
        }
    }
}

fn gate_write_error(e: rustix::io::Errno) -> SandboxError {
    SandboxError::Descriptor { call: "write(start gate, 1)".into(), errno: errno(e) }
}

/// In the worker: waits until the gate is opened, then closes it.
/// End-of-file (or an error) means the start was withdrawn.
pub(crate) fn wait_open(gate: OwnedFd) -> Result<(), SandboxError> {
    let mut byte = [0u8; 1];
    loop {
        match rustix::io::read(&gate, &mut byte) {
            Ok(1) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Ok(_) | Err(_) => return Err(SandboxError::StartWithdrawn),
        }
    }
}
