//! A test peer: airlock's side of the worker protocol on one end of a
//! socketpair, served from a thread. It decodes every request strictly
//! (messages and data frames), checks ids strictly increase and that each
//! body is byte for byte what `encode_body` makes of it, and answers with
//! results computed from the request. Special roots make it misbehave.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use std::collections::BTreeMap;

use airlock_fsproto::{
    decode_body, encode, encode_body, read_frame, write_frame, EntryKind, Op, Request, Response, DATA_TAG, MAX_FRAME,
    MAX_IO_BYTES, VERSION_LEN,
};

/// Names a listing of any directory holds, before `max` cuts it.
pub const LISTED: usize = 5;

/// What the peer saw.
#[derive(Debug, Default)]
pub struct Log {
    /// Every request, in order.
    pub requests: Vec<Request>,
    /// The payload of each request's data frame (`None`: a message).
    pub payloads: Vec<Option<Vec<u8>>>,
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
        let decoded = decode_body::<Request>(&body).and_then(|(r, data)| r.validate(data).map(|()| (r, data)));
        let (req, data) = match decoded {
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
        if encode_body(&req, data).ok().as_ref() != Some(&body) {
            log.violations.push(format!("not the canonical encoding: {}", String::from_utf8_lossy(&body)));
        }
        log.requests.push(req.clone());
        log.payloads.push(data.map(<[u8]>::to_vec));
        let answer = match req.root.as_str() {
            "hangup" => return log,
            "huge" => {
                let _ = sock.write_all(&((MAX_FRAME + 1) as u32).to_be_bytes());
                return log;
            }
            "garbage" => format!(r#"{{"id":{},"size":0,"extra":1}}"#, req.id).into_bytes(),
            "wrongid" => data_frame(&Response { id: req.id + 1, ..read_answer(&req, 0) }, b""),
            "asread" => data_frame(&read_answer(&req, 1), b"\0"),
            // A data frame whose header length runs past the frame.
            "badframe" => [&[DATA_TAG, 0, 200][..], format!(r#"{{"id":{}}}"#, req.id).as_bytes()].concat(),
            // A read answer sent as a message, without its data frame.
            "nodata" => encode(&read_answer(&req, 1)),
            "toomuch" => data_frame(&read_answer(&req, 100), &[0; 100]),
            // A file that grows by a byte every frame, its version unchanged.
            "growing" => {
                frames += 1;
                let bytes = vec![b'g'; req.max.unwrap_or(0) as usize];
                let end = req.offset.unwrap_or(0) + bytes.len() as u64;
                data_frame(&Response { eof: Some(false), ..read_answer(&req, end + 1_000_000 + frames) }, &bytes)
            }
            // A 200,000-byte file whose first frame is right and whose
            // later frames are not, as the root's name says.
            late if late.starts_with("late") && req.offset.unwrap_or(0) > 0 => {
                let want = req.max.unwrap_or(0) as usize;
                let stream = Response { eof: Some(false), ..read_answer(&req, 200_000) };
                match late {
                    // One byte more than asked (the last frame: the others
                    // are full, and a data frame holds at most 64 KiB).
                    "latetoomuch" => data_frame(&stream, &vec![b'l'; (want + 1).min(MAX_IO_BYTES as usize)]),
                    "lateshort" => data_frame(&stream, &vec![b'l'; want - 1]),
                    "latebadframe" => [&[DATA_TAG, 0, 200][..], format!(r#"{{"id":{}}}"#, req.id).as_bytes()].concat(),
                    "lategarbage" => format!(r#"{{"id":{},"size":0,"extra":1}}"#, req.id).into_bytes(),
                    "latechanged" => encode(&Response::error(req.id, "broker.changed", "it changed")),
                    _ => data_frame(&stream, &vec![b'l'; want]),
                }
            }
            late if late.starts_with("late") => {
                let stream = Response { eof: Some(false), ..read_answer(&req, 200_000) };
                data_frame(&stream, &vec![b'l'; req.max.unwrap_or(0) as usize])
            }
            "denied" => {
                encode(&Response::error(req.id, "broker.denied", format!("{} is not granted", req.op.as_str())))
            }
            _ => {
                let (response, data) = answer(&req, data, &mut streams);
                encode_body(&response, data.as_deref()).unwrap()
            }
        };
        if write_frame(&mut sock, &answer).is_err() {
            log.violations.push("the worker went away before its answer".into());
            return log;
        }
    }
}

/// The header of a read answer that reaches the end of a file of `size`
/// bytes (its bytes go in the data frame).
fn read_answer(req: &Request, size: u64) -> Response {
    Response {
        id: req.id,
        size: Some(size),
        eof: Some(true),
        version: Some("0".repeat(VERSION_LEN)),
        ..Response::default()
    }
}

/// A data frame's body.
fn data_frame(header: &Response, bytes: &[u8]) -> Vec<u8> {
    encode_body(header, Some(bytes)).unwrap()
}

/// The answer to `req` (whose data frame held `data`), and its bytes.
fn answer(req: &Request, data: Option<&[u8]>, streams: &mut BTreeMap<u64, u64>) -> (Response, Option<Vec<u8>>) {
    let max = req.max.unwrap_or(0) as usize;
    // `decode_body` refused more than 64 KiB already.
    let frame = || data.map_or(0, |d| d.len() as u64);
    let written = |n: u64| Response { id: req.id, written: Some(n), ..Response::default() };
    let stream = req.stream.unwrap_or_default();
    if req.op == Op::Read {
        let all = contents(&req.path);
        let start = (req.offset.unwrap_or(0) as usize).min(all.len());
        let bytes = all[start..(start + max).min(all.len())].to_vec();
        let eof = start + bytes.len() >= all.len();
        return (Response { eof: Some(eof), ..read_answer(req, all.len() as u64) }, Some(bytes));
    }
    let response = match req.op {
        Op::Read => unreachable!("answered above"),
        Op::Write => written(frame()),
        Op::WriteOpen => {
            streams.insert(req.id, 0);
            Response { id: req.id, stream: Some(req.id), ..Response::default() }
        }
        Op::WriteAppend => match streams.get_mut(&stream) {
            Some(total) => {
                *total += frame();
                written(*total)
            }
            None => Response::error(req.id, "broker.protocol", "no such stream"),
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
    };
    (response, None)
}
