//! The session holder: one long-lived `airlock session serve` process per
//! state directory that owns every live session (its worker, terminal and
//! staging) and answers `airlock session …` over a private Unix socket,
//! `STATE/sessions/holder.sock` (directory 0700, socket 0600, and every
//! peer's uid checked with `SO_PEERCRED`).
//!
//! Requests are served one at a time on the main thread: each worker's
//! init dies with the thread that started it (`PR_SET_PDEATHSIG`), so a
//! holder killed with SIGKILL takes its sessions' processes with it, and
//! their staging reservations (held under its pid) are reaped like any dead
//! caller's. The holder leaves once its last session has ended.

use airlock_core::{Envelope, ReasonCode, Refusal};
use airlock_runtime::session::Desk;
use airlock_runtime::Runtime;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Longest request line, in bytes.
const MAX_REQUEST_BYTES: u64 = 1 << 20;
/// How long a holder with no session waits for its first request.
const FIRST_REQUEST_WAIT: Duration = Duration::from_secs(10);

/// `STATE/sessions`, made 0700 if missing; refused unless it is a directory
/// of this user that no one else can enter.
pub fn session_dir(runtime: &Runtime) -> Result<PathBuf, Refusal> {
    let dir = runtime.config().state_dir.join("sessions");
    let unsafe_dir = |why: String| Refusal::new(ReasonCode::SessionHolder, format!("{}: {why}", dir.display()));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(unsafe_dir(format!("cannot be made: {e}"))),
    }
    let md = std::fs::symlink_metadata(&dir).map_err(|e| unsafe_dir(e.to_string()))?;
    if !md.is_dir() || md.uid() != rustix::process::getuid().as_raw() || md.mode() & 0o077 != 0 {
        return Err(unsafe_dir("must be a directory of this user with mode 0700".into()));
    }
    Ok(dir)
}

/// The holder's socket in `dir`.
pub fn socket_path(dir: &std::path::Path) -> PathBuf {
    dir.join("holder.sock")
}

/// Serves sessions until the last one ends (or none came).
pub fn serve(runtime: &Runtime) -> Result<(), Refusal> {
    let dir = session_dir(runtime)?;
    let path = socket_path(&dir);
    let holder = |e: std::io::Error| Refusal::new(ReasonCode::SessionHolder, format!("{}: {e}", path.display()));
    if UnixStream::connect(&path).is_ok() {
        return Ok(()); // another holder serves this state directory
    }
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(holder)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(holder)?;
    listener.set_nonblocking(true).map_err(holder)?;
    let mut desk = Desk::default();
    let mut served = false;
    let began = Instant::now();
    loop {
        desk.reap_expired(runtime);
        match listener.accept() {
            Ok((stream, _)) => {
                // A connection that sends nothing is a probe (is a holder listening?).
                served |= serve_one(runtime, &mut desk, stream).unwrap_or(true);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let fd = std::os::fd::AsFd::as_fd(&listener);
                let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
                let timeout = rustix::time::Timespec { tv_sec: 1, tv_nsec: 0 };
                let _ = rustix::event::poll(&mut fds, Some(&timeout));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
        if desk.is_empty() && (served || began.elapsed() > FIRST_REQUEST_WAIT) {
            break;
        }
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}

fn serve_one(runtime: &Runtime, desk: &mut Desk, stream: UnixStream) -> std::io::Result<bool> {
    stream.set_nonblocking(false)?;
    let peer = rustix::net::sockopt::socket_peercred(&stream)?;
    let mut out = stream.try_clone()?;
    if peer.uid != rustix::process::getuid() {
        let r = Refusal::new(ReasonCode::SessionHolder, "the session holder serves its own user only");
        return reply(&mut out, &Envelope::from_refusal(&r)).map(|()| false);
    }
    let mut line = String::new();
    BufReader::new(stream.take(MAX_REQUEST_BYTES)).read_line(&mut line)?;
    if line.is_empty() {
        return Ok(false);
    }
    let envelope = match serde_json::from_str::<Value>(&line) {
        // The peer is this user: it may name any principal, as the CLI may.
        Ok(request) => {
            let principal = request.get("principal").and_then(Value::as_str).map(str::to_owned);
            desk.answer(runtime, &request, principal.as_deref())
        }
        Err(e) => Envelope::from_refusal(&Refusal::new(ReasonCode::Usage, format!("a malformed request: {e}"))),
    };
    reply(&mut out, &envelope).map(|()| true)
}

fn reply(out: &mut UnixStream, envelope: &Envelope) -> std::io::Result<()> {
    let mut text = envelope.to_json(false);
    text.push('\n');
    out.write_all(text.as_bytes())
}
