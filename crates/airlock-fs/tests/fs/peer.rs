//! A test peer: airlock's side of the worker protocol on one end of a
//! socketpair, served from a thread. It decodes every request strictly,
//! checks ids strictly increase and that each body is byte for byte what
//! `encode` makes of it, and answers with results computed from the
//! request. Special roots make it misbehave.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use std::collections::BTreeMap;

use airlock_fsproto::{
    b64_decode, b64_encode, decode, encode, read_frame, write_frame, EntryKind, Op, Request, Response, MAX_FRAME,
    VERSION_LEN,
};

/// Names a listing of any directory holds, before `max` cuts it.
pub const LISTED: usize = 5;

/// What the peer saw.
#[derive(Debug, Default)]
pub struct Log {
    /// Every request, in order.
    pub requests: Vec<Request>,
    /// Everything that broke the protocol (must stay empty).
    pub violations: Vec<String>,
}

/// The bytes the peer serves for `path`, before `max` cuts them: a path
/// starting `big` holds 200,000 bytes.
pub fn contents(path: &str) -> Vec<u8> {
    if path.starts_with("big") {
        return (0..200_000u32).map(|i| (i % 251) as u8).collect();
    }
    format!("contents of {path}\n").into_bytes()
}

/// The kinds the peer lists: `dir` for the first name, `file` for the rest.
pub fn kinds(n: usize) -> Vec<EntryKind> {
    (0..n).map(|i| if i == 0 { EntryKind::Dir } else { EntryKind::File }).collect()
}

/// The names the peer lists in `path`, before `max` cuts them.
pub fn names(path: &str) -> Vec<String> {
    (0..LISTED).map(|i| format!("{path}-{i}")).collect()
}

/// A running peer.
pub struct Peer {
    thread: JoinHandle<Log>,
}

impl Peer {
    /// Starts a peer; returns it and the worker's end of the socket.
    pub fn start() -> (Peer, OwnedFd) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let thread = std::thread::spawn(move || serve(ours));
        (Peer { thread }, OwnedFd::from(theirs))
    }

    /// Waits for the worker's end to close everywhere; returns the log.
    pub fn finish(self) -> Log {
        self.thread.join().unwrap()
    }
}

fn serve(mut sock: UnixStream) -> Log {
    let mut log = Log::default();
    let mut last_id = 0u64;
    // Open chunked writes: stream → bytes so far.
    let mut streams: BTreeMap<u64, u64> = BTreeMap::new();
    let mut frames = 0u64;
    loop {
        let body = match read_frame(&mut sock, MAX_FRAME) {
            Ok(Some(b)) => b,
            Ok(None) => return log,
            Err(e) => {
                log.violations.push(format!("frame: {e}"));
                return log;
            }
        };
        let req: Request = match decode(&body).and_then(|r: Request| r.validate().map(|()| r)) {
            Ok(r) => r,
            Err(e) => {
                log.violations.push(format!("request {}: {e}", String::from_utf8_lossy(&body)));
                return log;
            }
        };
        if req.id <= last_id {
            log.violations.push(format!("id {} after {last_id}", req.id));
        }
        last_id = req.id;
        if encode(&req) != body {
            log.violations.push(format!("not the canonical encoding: {}", String::from_utf8_lossy(&body)));
        }
        log.requests.push(req.clone());
        let answer = match req.root.as_str() {
            "hangup" => return log,
            "huge" => {
                let _ = sock.write_all(&((MAX_FRAME + 1) as u32).to_be_bytes());
                return log;
            }
            "garbage" => format!(r#"{{"id":{},"data":"","extra":1}}"#, req.id).into_bytes(),
            "wrongid" => encode(&Response { id: req.id + 1, ..read_answer(&req, b"", 0) }),
            "asread" => encode(&read_answer(&req, b"\0", 1)),
            "badb64" => encode(&Response { data: Some("a".into()), ..read_answer(&req, b"", 1) }),
            "toomuch" => encode(&read_answer(&req, &[0; 100], 100)),
            // A file that grows by a byte every frame, its version unchanged.
            "growing" => {
                frames += 1;
                let bytes = vec![b'g'; req.max.unwrap_or(0) as usize];
                encode(&Response { eof: Some(false), ..read_answer(&req, &bytes, 1_000_000 + frames) })
            }
            "denied" => {
                encode(&Response::error(req.id, "broker.denied", format!("{} is not granted", req.op.as_str())))
            }
            _ => encode(&answer(&req, &mut streams)),
        };
        if write_frame(&mut sock, &answer).is_err() {
            log.violations.push("the worker went away before its answer".into());
            return log;
        }
    }
}

/// A read answer of `bytes` from a file of `size` bytes.
fn read_answer(req: &Request, bytes: &[u8], size: u64) -> Response {
    let end = req.offset.unwrap_or(0) + bytes.len() as u64;
    Response {
        id: req.id,
        data: Some(b64_encode(bytes)),
        size: Some(size),
        eof: Some(end >= size),
        version: Some("0".repeat(VERSION_LEN)),
        ..Response::default()
    }
}

fn answer(req: &Request, streams: &mut BTreeMap<u64, u64>) -> Response {
    let max = req.max.unwrap_or(0) as usize;
    let frame = || match b64_decode(req.data.as_deref().unwrap_or("")) {
        Ok(bytes) if bytes.len() > 65536 => Err(Box::new(Response::error(req.id, "broker.limit", "over 64 KiB"))),
        Ok(bytes) => Ok(bytes.len() as u64),
        Err(e) => Err(Box::new(Response::error(req.id, "broker.protocol", e.to_string()))),
    };
    let written = |n: u64| Response { id: req.id, written: Some(n), ..Response::default() };
    let stream = req.stream.unwrap_or_default();
    match req.op {
        Op::Read => {
            let all = contents(&req.path);
            let start = (req.offset.unwrap_or(0) as usize).min(all.len());
            let bytes = &all[start..(start + max).min(all.len())];
            read_answer(req, bytes, all.len() as u64)
        }
        Op::Write => frame().map_or_else(|e| *e, written),
        Op::WriteOpen => {
            streams.insert(req.id, 0);
            Response { id: req.id, stream: Some(req.id), ..Response::default() }
        }
        Op::WriteAppend => match (frame(), streams.get_mut(&stream)) {
            (Ok(n), Some(total)) => {
                *total += n;
                written(*total)
            }
            (Err(e), _) => *e,
            (_, None) => Response::error(req.id, "broker.protocol", "no such stream"),
        },
        Op::WriteCommit => streams
            .remove(&stream)
            .map_or_else(|| Response::error(req.id, "broker.protocol", "no such stream"), written),
        Op::WriteAbort => {
            streams.remove(&stream);
            Response { id: req.id, aborted: Some(true), ..Response::default() }
        }
        Op::List => {
            let all = names(&req.path);
            let truncated = all.len() > max;
            let names: Vec<String> = all.into_iter().take(max).collect();
            Response {
                id: req.id,
                kinds: Some(kinds(names.len())),
                names: Some(names),
                skipped: Some(1),
                truncated: Some(truncated),
                ..Response::default()
            }
        }
    }
}
