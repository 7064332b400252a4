//! A Docker worker on a terminal (a session's worker): the container is
//! made with a TTY and an open stdin, and a bridge thread holds the attach
//! connection and copies bytes between it and one end of a socket pair; the
//! caller reads and writes the other end as it would a pty's master. The
//! engine's TTY is the tool's terminal (the bytes are what the program
//! wrote; airlock never interprets them).
//!
//! The bridge has a runtime and a connection of its own: the worker's
//! runtime runs only while the caller waits on it, and a session's reads
//! happen between those waits. When the container's terminal ends (its
//! output stream closes) the caller reads end-of-file. When the caller
//! drops its end, the program gets its hangup as on a pty whose master is
//! closed: `SIGHUP`, through the engine.
#![forbid(unsafe_code)]

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::thread::JoinHandle;

use bollard::container::{AttachContainerResults, LogOutput};
use bollard::query_parameters::{AttachContainerOptions, KillContainerOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::client::{engine_error, next, Engine};
use crate::error::{errno, SandboxError};

/// Bytes moved per read of the caller's end.
const CHUNK: usize = 16 << 10;

/// The bridge thread; joined when the worker is done with.
#[derive(Debug)]
pub(crate) struct Bridge {
    thread: Option<JoinHandle<()>>,
}

impl Bridge {
    /// Waits for the bridge to end (the container is gone by then, so its
    /// output stream has closed).
    pub(crate) fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Attaches to container `id` (created with a TTY and an open stdin, not
/// yet started) through the engine at `socket`, and starts the bridge;
/// returns it and the caller's end of the terminal.
pub(crate) fn attach(socket: &Path, id: &str) -> Result<(Bridge, std::fs::File), SandboxError> {
    let (ours, theirs) = UnixStream::pair()
        .map_err(|e| SandboxError::Descriptor { call: "socketpair(AF_UNIX, SOCK_STREAM)".into(), errno: errno(e) })?;
    let (attached_tx, attached_rx) = std::sync::mpsc::channel();
    let (socket, id) = (socket.to_owned(), id.to_owned());
    let thread = std::thread::Builder::new()
        .name("airlock-docker-tty".into())
        .spawn(move || {
            let engine = match Engine::connect(&socket) {
                Ok(e) => e,
                Err(e) => {
                    let _ = attached_tx.send(Err(e));
                    return;
                }
            };
            engine.block_on(async {
                let opts = AttachContainerOptions {
                    stream: true,
                    stdin: true,
                    stdout: true,
                    stderr: true,
                    logs: false,
                    detach_keys: None,
                };
                match engine.api.attach_container(&id, Some(opts)).await {
                    Ok(attached) => {
                        let _ = attached_tx.send(Ok(()));
                        pump(attached, theirs).await;
                        hang_up(&engine, &id).await;
                    }
                    Err(e) => {
                        let _ = attached_tx.send(Err(engine_error(&format!("POST /containers/{id}/attach"), e)));
                    }
                }
            });
        })
        .map_err(|e| SandboxError::Unavailable(format!("cannot start the terminal bridge thread: {e}")))?;
    let bridge = Bridge { thread: Some(thread) };
    match attached_rx.recv() {
        Ok(Ok(())) => Ok((bridge, std::fs::File::from(OwnedFd::from(ours)))),
        Ok(Err(e)) => {
            bridge.join();
            Err(e)
        }
        Err(_) => {
            bridge.join();
            Err(SandboxError::Protocol("the terminal bridge ended before it attached".into()))
        }
    }
}

/// `SIGHUP` to the container's program (one that has ended is fine).
async fn hang_up(engine: &Engine, id: &str) {
    let _ = engine.api.kill_container(id, Some(KillContainerOptions { signal: "SIGHUP".into() })).await;
}

/// Copies the container's terminal output to `theirs` and what the caller
/// writes to `theirs` into the container's stdin, until the output ends
/// or the caller's end is gone.
async fn pump(mut attached: AttachContainerResults, theirs: UnixStream) {
    if theirs.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(theirs) = tokio::net::UnixStream::from_std(theirs) else {
        return;
    };
    let (mut from_caller, mut to_caller) = theirs.into_split();
    let mut buf = vec![0u8; CHUNK];
    loop {
        tokio::select! {
            frame = next(&mut attached.output) => match frame {
                Some(Ok(LogOutput::Console { message } | LogOutput::StdOut { message } | LogOutput::StdErr { message })) => {
                    if to_caller.write_all(&message).await.is_err() {
                        return;
                    }
                }
                Some(Ok(LogOutput::StdIn { .. })) => {}
                // The terminal closed (the container ended) or the connection broke.
                Some(Err(_)) | None => return,
            },
            read = from_caller.read(&mut buf) => match read {
                Ok(n) if n > 0 => {
                    if attached.input.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
                // The caller dropped its end.
                _ => return,
            },
        }
    }
}
