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
use airlock_runtime::session::{SendResult, Session};
use airlock_runtime::{CallRequest, Runtime};
use serde_json::{json, Value};
use std::collections::BTreeMap;
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
    let mut sessions: BTreeMap<String, Session> = BTreeMap::new();
    let mut served = false;
    let began = Instant::now();
    loop {
        reap_expired(runtime, &mut sessions);
        match listener.accept() {
            Ok((stream, _)) => {
                // A connection that sends nothing is a probe (is a holder listening?).
                served |= serve_one(runtime, &mut sessions, stream).unwrap_or(true);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let fd = std::os::fd::AsFd::as_fd(&listener);
                let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
                let timeout = rustix::time::Timespec { tv_sec: 1, tv_nsec: 0 };
                let _ = rustix::event::poll(&mut fds, Some(&timeout));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
        if sessions.is_empty() && (served || began.elapsed() > FIRST_REQUEST_WAIT) {
            break;
        }
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}

fn reap_expired(runtime: &Runtime, sessions: &mut BTreeMap<String, Session>) {
    let expired: Vec<String> = sessions.iter().filter(|(_, s)| s.expired()).map(|(id, _)| id.clone()).collect();
    for id in expired {
        if let Some(s) = sessions.remove(&id) {
            let _ = runtime.session_close(s, "timed out (idle_timeout_seconds or session_timeout_seconds)");
        }
    }
}

/// Answers one connection; `Ok(false)`: it asked nothing.
fn serve_one(runtime: &Runtime, sessions: &mut BTreeMap<String, Session>, stream: UnixStream) -> std::io::Result<bool> {
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
        Ok(request) => answer(runtime, sessions, &request),
        Err(e) => Envelope::from_refusal(&Refusal::new(ReasonCode::Usage, format!("a malformed request: {e}"))),
    };
    reply(&mut out, &envelope).map(|()| true)
}

fn reply(out: &mut UnixStream, envelope: &Envelope) -> std::io::Result<()> {
    let mut text = envelope.to_json(false);
    text.push('\n');
    out.write_all(text.as_bytes())
}

fn field<'a>(request: &'a Value, key: &str) -> &'a str {
    request.get(key).and_then(Value::as_str).unwrap_or("")
}

fn not_found(id: &str) -> Envelope {
    Envelope::from_refusal(&Refusal::new(
        ReasonCode::SessionNotFound,
        format!("no live session {id:?} (it was finalized, closed or timed out; `airlock session list` shows the live ones)"),
    ))
}

fn answer(runtime: &Runtime, sessions: &mut BTreeMap<String, Session>, request: &Value) -> Envelope {
    let id = field(request, "session").to_owned();
    match field(request, "op") {
        "start" => {
            let max = runtime.config().limits.max_sessions;
            if sessions.len() >= max {
                return Envelope::from_refusal(&Refusal::new(
                    ReasonCode::SessionLimit,
                    format!(
                        "{max} sessions are live ([limits] max_sessions in airlock.toml); finalize or close one first"
                    ),
                ));
            }
            let strings = |key: &str| -> Vec<String> {
                request
                    .get(key)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            };
            let named = request
                .get("named")
                .and_then(Value::as_object)
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default();
            let call = CallRequest {
                tool: field(request, "tool").to_owned(),
                positional: strings("positional"),
                named,
                invocation_id: field(request, "invocation_id").to_owned(),
                principal: request.get("principal").and_then(Value::as_str).map(str::to_owned),
                progress: None,
                tier: None,
            };
            match runtime.session_start(&call) {
                Ok((session, envelope)) => {
                    sessions.insert(session.id().to_owned(), session);
                    envelope
                }
                Err(envelope) => envelope,
            }
        }
        "send" => {
            let Some(session) = sessions.get_mut(&id) else { return not_found(&id) };
            let raw = request.get("raw").and_then(Value::as_bool).unwrap_or(false);
            match runtime.session_send(session, field(request, "command"), field(request, "arg"), raw) {
                SendResult::Answer(envelope) => envelope,
                SendResult::Ended(refusal) => match sessions.remove(&id) {
                    Some(session) => runtime.session_end_with(session, refusal),
                    None => not_found(&id),
                },
            }
        }
        "finalize" => match sessions.remove(&id) {
            Some(session) => {
                let command = request.get("command").and_then(Value::as_str);
                let (envelope, kept) = runtime.session_finalize(session, command, field(request, "arg"));
                if let Some(session) = kept {
                    sessions.insert(id, session);
                }
                envelope
            }
            None => not_found(&id),
        },
        "close" => match sessions.remove(&id) {
            Some(session) => runtime.session_close(session, "closed"),
            None => not_found(&id),
        },
        "list" => Envelope {
            content: Some(json!({ "sessions": sessions.values().map(Session::info).collect::<Vec<_>>() })),
            ..Envelope::ok()
        },
        other => Envelope::from_refusal(&Refusal::new(ReasonCode::Usage, format!("unknown request {other:?}"))),
    }
}
