//! A test peer: airlock's side of the worker protocol on one end of a
//! socketpair, served from a thread. It decodes every request strictly,
//! checks ids strictly increase and that each body is byte for byte what
//! `encode` makes of it, and answers with results computed from the
//! request. Special roots make it misbehave.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use airlock_fsproto::{
    b64_decode, b64_encode, decode, encode, read_frame, write_frame, Op, Request, Response, MAX_FRAME,
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

/// The bytes the peer serves for `path`, before `max` cuts them.
pub fn contents(path: &str) -> Vec<u8> {
    format!("contents of {path}\n").into_bytes()
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
            "wrongid" => encode(&Response { id: req.id + 1, data: Some(String::new()), ..Response::default() }),
            "asread" => encode(&Response { id: req.id, data: Some("AA==".into()), ..Response::default() }),
            "badb64" => encode(&Response { id: req.id, data: Some("a".into()), ..Response::default() }),
            "toomuch" => encode(&Response { id: req.id, data: Some(b64_encode(&[0; 100])), ..Response::default() }),
            "denied" => {
                encode(&Response::error(req.id, "broker.denied", format!("{} is not granted", req.op.as_str())))
            }
            _ => encode(&answer(&req)),
        };
        if write_frame(&mut sock, &answer).is_err() {
            log.violations.push("the worker went away before its answer".into());
            return log;
        }
    }
}

fn answer(req: &Request) -> Response {
    let max = req.max.unwrap_or(0) as usize;
    match req.op {
        Op::Read => {
            let mut bytes = contents(&req.path);
            bytes.truncate(max);
            Response { id: req.id, data: Some(b64_encode(&bytes)), ..Response::default() }
        }
        Op::Write => match b64_decode(req.data.as_deref().unwrap_or("")) {
            Ok(bytes) if bytes.len() > 65536 => Response::error(req.id, "broker.limit", "a write over 64 KiB"),
            Ok(bytes) => Response { id: req.id, written: Some(bytes.len() as u64), ..Response::default() },
            Err(e) => Response::error(req.id, "broker.protocol", e.to_string()),
        },
        Op::List => {
            let all = names(&req.path);
            let truncated = all.len() > max;
            Response {
                id: req.id,
                names: Some(all.into_iter().take(max).collect()),
                skipped: Some(1),
                truncated: Some(truncated),
                ..Response::default()
            }
        }
    }
}
