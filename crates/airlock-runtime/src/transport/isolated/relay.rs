//! The relay: airlock between the worker and the broker.
//!
//! Every worker request is charged to the submission's call budget before
//! it is decoded, decoded strictly with every number bounded (an id over
//! 2^53 − 1 or a `max` over its operation's limit ends the submission, so
//! no unbounded number reaches the budgets or the journal), charged to the
//! byte and entry budgets (never refunded), then checked (strictly
//! increasing id, root and right, size limits, path rules), then forwarded to the
//! broker as a broker request naming the root by index. A write is split:
//! the broker prepares an unnamed synced file and reports its identity, the
//! recovery record is saved durably here, and only then does the broker
//! link it under a staging name and rename it over the target. A chunked
//! write (`write_open`, `write_append` …, `write_commit`) builds the same
//! unnamed file frame by frame (each appended byte charged to the write
//! budget) and lands the same way.
//!
//! A read answers the file's size, whether it reached the end, and a
//! `version` (a hash of the file's identity, size and change time); a read
//! that sends back a version the file no longer has is `broker.changed`,
//! so a streamed read of a file that grows, shrinks or is replaced between
//! frames fails instead of returning a mixture. A list charges the names it
//! returns (never more than the budget left: a listing the budget would
//! cut is `broker.budget`).
//!
//! File bytes travel in data frames (`airlock_fsproto::split`): a write's
//! or an append's payload goes to the broker as it came, after its own
//! checks, and a read's payload back to the worker as the broker sent it;
//! only the small JSON headers are decoded and rewritten here. Neither is
//! copied here: a worker frame is handled where it lies in the inbox
//! ([`Inbox`]), a broker answer in the one buffer every answer is read
//! into, and each goes out in one vectored send of its head and payload.
//!
//! The broker resolves and opens; the relay moves a stream's bytes
//! ([`super::handed`]): a stream's first read frame asks for its file, and
//! the relay serves the frames after it from that descriptor (checked
//! against the stream's `version` after each is read), except the last,
//! which goes to the broker so a file renamed over the path still fails
//! the read; a chunked write's appends go straight into the unnamed file
//! the broker handed over with its open.
//!
//! The window (issue 17): a worker may send up to `outstanding` requests
//! before it reads their answers. Read frames and appends are charged,
//! checked and forwarded to the broker as they arrive, without waiting for
//! the answers before them, so the worker, airlock and the broker work at
//! once; their answers are taken from the broker in order, checked
//! (`version`, sizes) and logged in order, and answered in order. Every
//! other operation (a write, a list, an open, a commit, an abort) waits
//! until everything before it is answered, so a commit lands only the
//! appends that were answered. More than `outstanding` requests received
//! and not yet answered is `broker.budget`: a worker that floods requests
//! gets no more than that many frames read into airlock, and the rest wait
//! in the socket's bounded buffer.
//!
//! The first operation that fails, in request order, ends the submission:
//! the worker gets the error as the answer to that request (after the
//! answers to the requests before it), then its socket is shut and the
//! worker killed, whatever it does with the error. Requests after it are
//! never answered: read frames already forwarded are discarded, and
//! appends already forwarded went into the broker's unnamed file, which is
//! never named (it is dropped when the broker exits).

use std::collections::VecDeque;
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::ops::ControlFlow;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::time::Instant;

use airlock_core::broker::BrokerBudgets;
use airlock_fsproto::{
    check_path, codes, decode_body, frame_head, read_frame_into, wait_ready, write_parts, BrokerOp, BrokerRequest,
    BrokerResponse, Op, PollFlags, ReadStamp, Request, Response, WriteIdentity, MAX_FRAME, MAX_ID, MAX_IO_BYTES,
    MAX_LIST_NAMES, MAX_OPEN_WRITES, STAGE_PREFIX, VERSION_LEN,
};
use rustix::io::Errno;
use rustix::net::{SendAncillaryBuffer, SendFlags};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::handed::{AnswerReader, HeldRead, HeldWrite, Refused};
use super::hasher::{HasherLost, StreamHasher, StreamId};
use super::inbox::Inbox;
use super::records::{RecordBook, StageRecord};
use super::roots::OpenRoot;

/// One operation as the evidence keeps it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OpLog {
    pub id: u64,
    pub op: &'static str,
    pub root: String,
    pub path: String,
    /// Bytes read or written, names listed.
    pub amount: u64,
    /// SHA-256 of the bytes read or written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `ok` or the failure's code.
    pub result: String,
}

/// A write that landed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WriteReceipt {
    pub root: String,
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

/// The operation that ended the submission.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OpFailure {
    pub id: u64,
    pub op: String,
    pub root: String,
    pub path: String,
    pub code: String,
    pub message: String,
}

/// Budgets spent so far.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub(crate) struct Usage {
    pub calls: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub entries: u64,
    pub max_outstanding: u64,
}

/// How the relay ended.
#[derive(Debug)]
pub(crate) enum RelayEnd {
    /// The worker closed its socket (it exited).
    Closed,
    /// An operation failed; the worker must be killed.
    Failed(OpFailure),
    /// The broker died or broke the protocol.
    BrokerLost(String),
    /// The submission's deadline passed.
    Deadline,
}

/// Callback for each write that lands (journaling).
pub(crate) type OnWrite<'a> = dyn FnMut(&WriteReceipt, &str) -> Result<(), String> + 'a;

/// A chunked write between `write_open` and its commit or abort.
struct OpenWrite {
    root: u32,
    root_name: String,
    path: String,
    prepared: u64,
    identity: WriteIdentity,
    /// Bytes the broker confirmed.
    bytes: u64,
    /// Bytes forwarded (confirmed or in flight); the hasher's `stream`
    /// is fed these.
    sent: u64,
    stream: StreamId,
    /// The unnamed file the broker handed over with its open: appends are
    /// written to it here.
    file: Option<HeldWrite>,
}

/// A read frame or an append forwarded to the broker whose answer has not
/// been taken yet, or a read frame the relay serves from a held file once
/// the answers before it are out: what checking that answer needs.
struct InFlight {
    /// The broker request's id (0 for a frame served here).
    broker_id: u64,
    req: Request,
    /// An append: the bytes its write holds once this one is appended.
    total: u64,
    /// A read frame served from this file, not by the broker.
    held: Option<Rc<HeldRead>>,
}

/// A broker answer's data frame payload, where it lies in the frame.
struct Payload {
    body: Vec<u8>,
    start: usize,
}

impl std::ops::Deref for Payload {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.body[self.start..]
    }
}

/// The streamed read the last read frame continued: later frames of the
/// same file extend its one log entry.
struct Reading {
    root: String,
    path: String,
    version: String,
    next: u64,
    hash: ReadHash,
    log: usize,
    /// The file the broker handed over with the stream's first frame.
    held: Option<Rc<HeldRead>>,
}

/// Where a streamed read's SHA-256 is kept: a read whose first frame is
/// the whole file is hashed here (no thread for a small file), any other
/// on the hashing thread, its digest logged when the relay ends.
enum ReadHash {
    Here(Sha256),
    Thread(StreamId),
}

pub(crate) struct Relay<'a> {
    pub worker: UnixStream,
    pub broker: UnixStream,
    pub roots: &'a [OpenRoot],
    pub budgets: BrokerBudgets,
    pub records: &'a RecordBook,
    pub deadline: Instant,
    pub on_write: &'a mut OnWrite<'a>,
    pub usage: Usage,
    pub log: Vec<OpLog>,
    pub writes: Vec<WriteReceipt>,
    last_id: Option<u64>,
    broker_id: u64,
    open_writes: std::collections::BTreeMap<u64, OpenWrite>,
    reading: Option<Reading>,
    inflight: VecDeque<InFlight>,
    /// The buffer the broker's next answer is read into.
    spare: Vec<u8>,
    /// The hashing thread, started by the first stream that needs it.
    hasher: Option<StreamHasher>,
    next_stream: StreamId,
    /// Reads hashed on the thread: their log entries and streams.
    threaded_reads: Vec<(usize, StreamId)>,
    /// Descriptors the broker passed, taken by the answer that announced
    /// them.
    passed: Vec<OwnedFd>,
    /// The descriptor the last answer taken announced (`handle`).
    handed: Option<OwnedFd>,
}

/// Why one request failed.
struct Fail {
    code: String,
    message: String,
}

/// The failure that ends the submission: the id to answer, the request if
/// it was decoded, why.
type Failed = (u64, Option<Request>, Fail);

fn fail(code: &str, message: impl Into<String>) -> Fail {
    Fail { code: code.to_owned(), message: message.into() }
}

fn lost_hasher(_: HasherLost) -> Fail {
    fail("broker.lost", "the relay's hashing thread was lost")
}

enum Fill {
    Open,
    Eof,
}

impl<'a> Relay<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        worker: UnixStream,
        broker: UnixStream,
        roots: &'a [OpenRoot],
        budgets: BrokerBudgets,
        records: &'a RecordBook,
        deadline: Instant,
        on_write: &'a mut OnWrite<'a>,
    ) -> Relay<'a> {
        Relay {
            worker,
            broker,
            roots,
            budgets,
            records,
            deadline,
            on_write,
            usage: Usage::default(),
            log: Vec::new(),
            writes: Vec::new(),
            last_id: None,
            broker_id: 0,
            open_writes: std::collections::BTreeMap::new(),
            reading: None,
            inflight: VecDeque::new(),
            spare: Vec::new(),
            hasher: None,
            next_stream: 0,
            threaded_reads: Vec::new(),
            passed: Vec::new(),
            handed: None,
        }
    }

    /// Serves the worker until it closes its socket, an operation fails,
    /// the broker is lost or the deadline passes; then logs the digests of
    /// the reads hashed on the thread.
    pub fn run(&mut self) -> RelayEnd {
        let end = self.serve();
        match self.log_threaded_reads() {
            Ok(()) => end,
            Err(HasherLost) => RelayEnd::BrokerLost("the relay's hashing thread was lost".into()),
        }
    }

    fn log_threaded_reads(&mut self) -> Result<(), HasherLost> {
        for (log, stream) in std::mem::take(&mut self.threaded_reads) {
            let digest = self.hasher.as_ref().ok_or(HasherLost)?.finish(stream)?;
            self.log[log].sha256 = Some(format!("sha256:{}", hex::encode(digest)));
        }
        Ok(())
    }

    /// A new stream on the hashing thread, started on first use.
    fn new_stream(&mut self) -> Result<StreamId, Fail> {
        if self.hasher.is_none() {
            let started = StreamHasher::start()
                .map_err(|e| fail(codes::IO, format!("the relay's hashing thread could not start: {e}")))?;
            self.hasher = Some(started);
        }
        self.next_stream += 1;
        Ok(self.next_stream)
    }

    /// The hashing thread a stream was made on.
    fn hasher(&self) -> Result<&StreamHasher, Fail> {
        self.hasher.as_ref().ok_or_else(|| fail(codes::IO, "the relay's hashing thread is not running"))
    }

    fn serve(&mut self) -> RelayEnd {
        if let Err(e) = self.worker.set_nonblocking(true) {
            return RelayEnd::BrokerLost(format!("worker socket: {e}"));
        }
        let mut inbox = Inbox::new(self.budgets.outstanding);
        let mut eof = false;
        loop {
            if !eof {
                // Waits for the worker only when nothing else is pending.
                let wait = inbox.queued() == 0 && self.inflight.is_empty();
                match self.fill(&mut inbox, wait) {
                    Ok(Fill::Open) => {}
                    Ok(Fill::Eof) => eof = true,
                    Err(f) => return self.end_with(0, None, f),
                }
            }
            let outstanding = (inbox.queued() + self.inflight.len()) as u64;
            self.usage.max_outstanding = self.usage.max_outstanding.max(outstanding);
            if outstanding > self.budgets.outstanding {
                let f = fail(
                    codes::BUDGET,
                    format!("more than {} operations outstanding at once", self.budgets.outstanding),
                );
                return self.end_with(0, None, f);
            }
            let step = match inbox.pop() {
                Some(body) => self.take(inbox.body(body)),
                None if !self.inflight.is_empty() => self.complete_next(),
                None if eof => return RelayEnd::Closed,
                None if Instant::now() >= self.deadline => return RelayEnd::Deadline,
                None => continue,
            };
            if let ControlFlow::Break(end) = step {
                return end;
            }
        }
    }

    /// Takes one request in order: a read frame or an append is forwarded
    /// to the broker (its answer is taken later, in order); anything else
    /// first waits for the answers before it, then is handled and
    /// answered. A failure first lets the requests before it be answered.
    fn take(&mut self, frame: &[u8]) -> ControlFlow<RelayEnd> {
        let result = match self.admit(frame) {
            Ok((req, _, _)) if self.held_for(&req).is_some() => {
                let held = self.held_for(&req);
                self.inflight.push_back(InFlight { broker_id: 0, req, total: 0, held });
                return ControlFlow::Continue(());
            }
            Ok((req, data, index)) if self.appends_here(&req) => {
                self.drain()?;
                self.append_here(&req, index, data.unwrap_or_default())
                    .map(|r| (r, None))
                    .map_err(|f| (req.id, Some(req.clone()), f))
            }
            Ok((req, data, index)) if matches!(req.op, Op::Read | Op::WriteAppend) => {
                match self.forward(&req, index, data.unwrap_or_default()) {
                    Ok(()) => return ControlFlow::Continue(()),
                    Err(f) => Err((req.id, Some(req), f)),
                }
            }
            Ok((req, data, index)) => {
                self.drain()?;
                self.dispatch(&req, index, data.unwrap_or_default()).map_err(|f| (req.id, Some(req.clone()), f))
            }
            Err(failed) => Err(failed),
        };
        match result {
            Ok((response, data)) => {
                let answered = self.answer(&response, data.as_deref());
                self.recycle(data);
                answered
            }
            Err((id, req, f)) => {
                self.drain()?;
                ControlFlow::Break(self.finish(id, req, f))
            }
        }
    }

    /// Takes the answers of every forwarded request, in order.
    fn drain(&mut self) -> ControlFlow<RelayEnd> {
        while !self.inflight.is_empty() {
            self.complete_next()?;
        }
        ControlFlow::Continue(())
    }

    /// Takes the broker's answer to the oldest forwarded request, checks
    /// and logs it, and answers the worker.
    fn complete_next(&mut self) -> ControlFlow<RelayEnd> {
        let Some(sent) = self.inflight.pop_front() else { return ControlFlow::Continue(()) };
        let result = match &sent.held {
            Some(held) => self.read_held(&sent.req, held).map(|(r, bytes)| (r, Some(bytes))),
            None => self.broker_receive(sent.broker_id).and_then(|(response, data)| match sent.req.op {
                Op::Read => self.read_answered(&sent.req, response, data).map(|(r, bytes)| (r, Some(bytes))),
                _ => self.append_answered(&sent.req, response, data, sent.total).map(|r| (r, None)),
            }),
        };
        match result {
            Ok((response, data)) => {
                let answered = self.answer(&response, data.as_deref());
                // Hashed once the worker has the frame (logged whether or
                // not it was delivered).
                let data = match data {
                    Some(bytes) if sent.req.op == Op::Read => match self.hash_read(bytes) {
                        Ok(left) => left,
                        Err(f) => return ControlFlow::Break(self.finish(sent.req.id, Some(sent.req), f)),
                    },
                    other => other,
                };
                self.recycle(data);
                answered
            }
            Err(f) => ControlFlow::Break(self.finish(sent.req.id, Some(sent.req), f)),
        }
    }

    /// Keeps a payload's buffer for the broker's next answer, so a stream
    /// of read frames reuses its buffers (a fresh one per frame cost more
    /// in page faults than the bytes' copies); a payload the hashing thread
    /// took is replaced by one it gave back.
    fn recycle(&mut self, data: Option<Payload>) {
        match (data, &self.hasher) {
            (Some(payload), _) => self.spare = payload.body,
            (None, Some(hasher)) if self.spare.capacity() == 0 => self.spare = hasher.buffer(),
            (None, _) => {}
        }
    }

    /// Sends an answer; a worker that went away without reading it ends
    /// the relay.
    fn answer(&mut self, response: &Response, data: Option<&[u8]>) -> ControlFlow<RelayEnd> {
        match self.send(response, data) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(RelayEnd::Closed),
        }
    }

    /// How a failure ends the relay: a lost broker, or the failed operation.
    fn finish(&mut self, id: u64, req: Option<Request>, f: Fail) -> RelayEnd {
        if f.code == "broker.lost" {
            return RelayEnd::BrokerLost(f.message);
        }
        self.end_with(id, req, f)
    }

    fn end_with(&mut self, id: u64, req: Option<Request>, f: Fail) -> RelayEnd {
        let _ = self.send(&Response::error(id, &f.code, f.message.clone()), None);
        let _ = self.worker.shutdown(std::net::Shutdown::Both);
        let (op, root, path) = match &req {
            Some(r) => (r.op.as_str().to_owned(), r.root.clone(), r.path.clone()),
            None => (String::new(), String::new(), String::new()),
        };
        self.log.push(OpLog {
            id,
            op: req.as_ref().map_or("?", |r| r.op.as_str()),
            root: root.clone(),
            path: path.clone(),
            amount: 0,
            sha256: None,
            result: f.code.clone(),
        });
        RelayEnd::Failed(OpFailure { id, op, root, path, code: f.code, message: f.message })
    }

    /// Reads what the worker has sent into whole frames. Waits for data
    /// only when `wait` (nothing queued).
    fn fill(&mut self, inbox: &mut Inbox, wait: bool) -> Result<Fill, Fail> {
        if wait
            && !wait_ready(self.worker.as_fd(), PollFlags::IN, Some(self.deadline))
                .map_err(|e| fail(codes::IO, e.to_string()))?
        {
            return Ok(Fill::Open);
        }
        loop {
            let room = inbox.room();
            if room.is_empty() {
                // Full of frames not handled yet: those go first.
                return Ok(Fill::Open);
            }
            let room_len = room.len();
            let drained = match self.worker.read(room) {
                Ok(0) => {
                    if inbox.partial() {
                        return Err(fail(codes::PROTOCOL, "the stream ended inside a frame"));
                    }
                    return Ok(Fill::Eof);
                }
                Ok(n) => {
                    inbox.received(n);
                    // A stream socket's read stops short only when it has
                    // nothing more: another read now would find nothing.
                    n < room_len
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Fill::Open),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(Fill::Eof),
                Err(e) => return Err(fail(codes::IO, format!("reading the worker: {e}"))),
            };
            // Whole frames, until one more than `outstanding` (with those in
            // flight) is held: that ends the submission, so a flooding
            // worker never has more than that many frames taken by airlock
            // (plus the rest of one read, bounded by the inbox's buffer).
            while ((inbox.queued() + self.inflight.len()) as u64) <= self.budgets.outstanding {
                if !inbox.take_frame().map_err(|e| fail(codes::PROTOCOL, e.to_string()))? {
                    break;
                }
            }
            if drained || (inbox.queued() + self.inflight.len()) as u64 > self.budgets.outstanding {
                return Ok(Fill::Open);
            }
        }
    }

    /// Sends `response`, in a data frame with `data` when there is some.
    /// The payload goes from where it lies, after the frame's head, in one
    /// vectored send when the socket has room.
    fn send(&mut self, response: &Response, data: Option<&[u8]>) -> std::io::Result<()> {
        let head = frame_head(response, data).map_err(|e| std::io::Error::other(e.to_string()))?;
        send_by(self.worker.as_fd(), &head, data.unwrap_or_default(), self.deadline)
    }

    /// Charges, decodes and checks one request, in order: the request, its
    /// data frame's payload and its root's index.
    #[allow(clippy::result_large_err, clippy::type_complexity)]
    fn admit<'f>(&mut self, frame: &'f [u8]) -> Result<(Request, Option<&'f [u8]>, u32), Failed> {
        // Charged before anything is looked at.
        self.usage.calls += 1;
        let over_calls = self.usage.calls > self.budgets.calls;
        let (req, data) = decode_body::<Request>(frame).map_err(|e| (0, None, fail(e.code(), e.to_string())))?;
        if let Err(e) = req.validate(data) {
            // Bounded at decoding: an id over MAX_ID is not echoed back.
            let id = if req.id <= MAX_ID { req.id } else { 0 };
            return Err((id, Some(req), fail(e.code(), e.to_string())));
        }
        let id = req.id;
        let err = |f: Fail| (id, Some(req.clone()), f);
        if over_calls {
            return Err(err(fail(codes::BUDGET, format!("the budget of {} calls is spent", self.budgets.calls))));
        }
        if let Some(last) = self.last_id {
            if id <= last {
                return Err(err(fail(codes::PROTOCOL, format!("call id {id} does not increase (last {last})"))));
            }
        }
        self.last_id = Some(id);
        self.charge(&req, data).map_err(err)?;
        let index = self.check(&req, data).map_err(err)?;
        Ok((req, data, index))
    }

    /// Forwards a read frame or an append to the broker without waiting
    /// for its answer ([`Relay::complete_next`] takes it).
    fn forward(&mut self, req: &Request, root: u32, data: &[u8]) -> Result<(), Fail> {
        let (request, data, total) = if req.op == Op::Read {
            let request = BrokerRequest {
                path: Some(req.path.clone()),
                max: req.max,
                offset: req.offset,
                // A stream's first frame: its file, to read the middle
                // frames from here.
                handle: req.version.is_none().then_some(true),
                ..Self::broker_request(BrokerOp::Read, root)
            };
            (request, None, 0)
        } else {
            let open = self.stream_mut(req, root)?;
            open.sent += data.len() as u64;
            let (prepared, total) = (open.prepared, open.sent);
            (
                BrokerRequest { prepared: Some(prepared), ..Self::broker_request(BrokerOp::WriteAppend, root) },
                Some(data),
                total,
            )
        };
        let broker_id = self.broker_send(request, data)?;
        self.inflight.push_back(InFlight { broker_id, req: req.clone(), total, held: None });
        // Hashed on the thread while the broker writes it.
        if let Some(bytes) = data {
            let stream = self.stream_mut(req, root)?.stream;
            self.hasher()?.feed_copy(stream, bytes).map_err(lost_hasher)?;
        }
        Ok(())
    }

    /// Handles an operation that is not pipelined (nothing is in flight).
    fn dispatch(&mut self, req: &Request, index: u32, bytes: &[u8]) -> Result<(Response, Option<Payload>), Fail> {
        debug_assert!(self.inflight.is_empty());
        let response = match req.op {
            Op::List => self.list(req, index)?,
            Op::Write => self.write(req, index, bytes)?,
            Op::WriteOpen => self.write_open(req, index)?,
            Op::WriteCommit => self.write_commit(req, index)?,
            Op::WriteAbort => self.write_abort(req, index)?,
            Op::Read | Op::WriteAppend => {
                return Err(fail(codes::PROTOCOL, "a read or an append is forwarded, not dispatched"))
            }
        };
        Ok((response, None))
    }

    fn charge(&mut self, req: &Request, data: Option<&[u8]>) -> Result<(), Fail> {
        let (spent, budget, what) = match req.op {
            Op::Read => {
                self.usage.read_bytes = self.usage.read_bytes.saturating_add(req.max.unwrap_or(0));
                (self.usage.read_bytes, self.budgets.read_bytes, "read bytes")
            }
            Op::Write | Op::WriteAppend => {
                self.usage.write_bytes = self.usage.write_bytes.saturating_add(data.map_or(0, |d| d.len() as u64));
                (self.usage.write_bytes, self.budgets.write_bytes, "write bytes")
            }
            // A list is charged the names it returns (see `list`); the
            // other steps of a chunked write only the call.
            Op::List | Op::WriteOpen | Op::WriteCommit | Op::WriteAbort => return Ok(()),
        };
        if spent > budget {
            return Err(fail(codes::BUDGET, format!("the budget of {budget} {what} is spent")));
        }
        Ok(())
    }

    /// The root's index once the right, the limits and the path pass.
    fn check(&self, req: &Request, data: Option<&[u8]>) -> Result<u32, Fail> {
        let (index, root) = self
            .roots
            .iter()
            .enumerate()
            .find(|(_, r)| r.grant.name == req.root)
            .ok_or_else(|| fail(codes::DENIED, format!("no root named {:?} is granted", req.root)))?;
        let rights = root.grant.rights;
        let (held, right) = match req.op {
            Op::Read => (rights.read, "r"),
            Op::List => (rights.list, "l"),
            _ => (rights.write, "w"),
        };
        if !held {
            return Err(fail(codes::DENIED, format!("root {:?} does not grant {right}", req.root)));
        }
        let (amount, limit, what) = match req.op {
            Op::Read => (req.max.unwrap_or(0), MAX_IO_BYTES, "bytes a read"),
            Op::List => (req.max.unwrap_or(0), MAX_LIST_NAMES, "names a list"),
            _ => (data.map_or(0, |d| d.len() as u64), MAX_IO_BYTES, "bytes a write frame"),
        };
        if amount > limit {
            return Err(fail(codes::LIMIT, format!("{amount} is more than {limit} {what}")));
        }
        check_path(&req.path, req.op == Op::List).map_err(|e| fail(e.code, e.message))?;
        Ok(index as u32)
    }

    /// One broker exchange for a message request.
    fn call(&mut self, request: BrokerRequest) -> Result<BrokerResponse, Fail> {
        self.call_with(request, None)
    }

    /// One broker exchange for a request (in a data frame with `data`)
    /// whose answer carries no data.
    fn call_with(&mut self, request: BrokerRequest, data: Option<&[u8]>) -> Result<BrokerResponse, Fail> {
        let (response, data) = self.exchange(request, data)?;
        if data.is_some() {
            return Err(fail("broker.lost", "the broker answered with data where none belongs"));
        }
        Ok(response)
    }

    /// One broker exchange: `request` (in a data frame with `data`), its
    /// answer and the answer's data frame payload. Only with nothing in
    /// flight (the answer taken must be this request's).
    fn exchange(
        &mut self,
        request: BrokerRequest,
        data: Option<&[u8]>,
    ) -> Result<(BrokerResponse, Option<Payload>), Fail> {
        debug_assert!(self.inflight.is_empty());
        let id = self.broker_send(request, data)?;
        self.broker_receive(id)
    }

    /// Sends `request` (in a data frame with `data`) to the broker under the
    /// next broker id, which it returns: the frame's head and the payload in
    /// one vectored send. The broker reads every request before it answers
    /// it and at most `outstanding` are in flight, so with the socket buffers
    /// [`size_buffers`] asks for this never waits on an answer not taken.
    fn broker_send(&mut self, mut request: BrokerRequest, data: Option<&[u8]>) -> Result<u64, Fail> {
        self.broker_id += 1;
        request.id = self.broker_id;
        let lost = |why: String| fail("broker.lost", why);
        let deadline = self.broker_deadline();
        let head = frame_head(&request, data).map_err(|e| lost(format!("framing a broker request: {e}")))?;
        send_by(self.broker.as_fd(), &head, data.unwrap_or_default(), deadline)
            .map_err(|e| lost(format!("writing to the broker: {e}")))?;
        Ok(request.id)
    }

    /// How long an exchange with the broker may wait: until the
    /// submission's deadline, but at least a millisecond from now, so a
    /// request made as the deadline passes still gets its answer read.
    fn broker_deadline(&self) -> Instant {
        self.deadline.max(Instant::now() + std::time::Duration::from_millis(1))
    }

    /// The broker's next answer, which must be to its request `id`; an
    /// error answer is that request's failure.
    fn broker_receive(&mut self, id: u64) -> Result<(BrokerResponse, Option<Payload>), Fail> {
        let lost = |why: String| fail("broker.lost", why);
        // The buffer of the last answer, back from `recycle`.
        let mut body = std::mem::take(&mut self.spare);
        self.handed = None;
        let deadline = self.broker_deadline();
        let mut answers = AnswerReader { socket: &self.broker, passed: &mut self.passed, deadline };
        match read_frame_into(&mut answers, MAX_FRAME, &mut body) {
            Ok(true) => {}
            Ok(false) => return Err(lost("the broker exited".into())),
            Err(e) => return Err(lost(format!("reading the broker: {e}"))),
        }
        let (response, start) = match decode_body::<BrokerResponse>(&body) {
            Ok((response, data)) => (response, data.map(|d| body.len() - d.len())),
            Err(e) => return Err(lost(format!("the broker answered badly: {e}"))),
        };
        if response.id != id {
            return Err(lost(format!("the broker answered call {} for call {id}", response.id)));
        }
        let handed = self.passed.pop();
        if !self.passed.is_empty() || handed.is_some() != (response.handle == Some(true)) {
            return Err(lost("the broker passed a descriptor its answer did not announce, or none it did".into()));
        }
        self.handed = handed;
        if let Some(e) = response.error {
            return Err(Fail { code: e.code, message: e.message });
        }
        let payload = match start {
            Some(start) => Some(Payload { body, start }),
            None => {
                self.spare = body;
                None
            }
        };
        Ok((response, payload))
    }

    fn broker_request(op: BrokerOp, root: u32) -> BrokerRequest {
        BrokerRequest {
            id: 0,
            op,
            root,
            path: None,
            max: None,
            offset: None,
            prepared: None,
            stage: None,
            handle: None,
        }
    }

    /// The broker's answer to a read frame, checked: the worker's answer
    /// and the bytes, as the broker sent them.
    fn read_answered(
        &mut self,
        req: &Request,
        response: BrokerResponse,
        bytes: Option<Payload>,
    ) -> Result<(Response, Payload), Fail> {
        let bytes = bytes.ok_or_else(|| fail("broker.lost", "a read answer without data"))?;
        let stamp = response.stamp.ok_or_else(|| fail("broker.lost", "a read answer without the file's stamp"))?;
        if bytes.len() as u64 > req.max.unwrap_or(0) {
            return Err(fail("broker.lost", "the broker returned more than asked"));
        }
        let handed = self.handed.take();
        let answered = self.read_checked(req, stamp, bytes)?;
        if let Some(fd) = handed {
            self.hold(req, fd, stamp)?;
        }
        Ok(answered)
    }

    /// A read frame served from the stream's held file: read here, then
    /// checked like the broker's answers (a file that moved since the
    /// stream's first frame is `broker.changed`).
    fn read_held(&mut self, req: &Request, held: &HeldRead) -> Result<(Response, Payload), Fail> {
        let mut body = std::mem::take(&mut self.spare);
        let offset = req.offset.unwrap_or(0);
        let stamp = held
            .read_at(offset, req.max.unwrap_or(0), &mut body)
            .map_err(|e| fail(codes::IO, format!("reading {}:{}: {e}", req.root, req.path)))?;
        self.read_checked(req, stamp, Payload { body, start: 0 })
    }

    /// The stream's held file for a read frame the relay may serve itself:
    /// one that continues the stream's version and does not reach the end
    /// (the last frame goes to the broker, whose fresh look at the path
    /// also catches a file replaced under the stream).
    fn held_for(&self, req: &Request) -> Option<Rc<HeldRead>> {
        if req.op != Op::Read {
            return None;
        }
        let held = self.reading.as_ref()?.held.as_ref()?;
        let end = req.offset.unwrap_or(0).saturating_add(req.max.unwrap_or(0));
        let same = held.root == req.root && held.path == req.path && req.version.as_deref() == Some(&held.version);
        (same && end < held.stamp.size).then(|| Rc::clone(held))
    }

    /// Keeps the file the broker handed over with a stream's first frame
    /// for the stream's later frames.
    fn hold(&mut self, req: &Request, fd: OwnedFd, stamp: ReadStamp) -> Result<(), Fail> {
        let Some(reading) = self.reading.as_mut().filter(|r| r.root == req.root && r.path == req.path) else {
            return Ok(());
        };
        match HeldRead::take(fd, stamp, &req.root, &req.path, &reading.version) {
            Ok(held) => reading.held = Some(Rc::new(held)),
            Err(Refused::Changed) => {}
            Err(Refused::NotTheFile(why)) => return Err(fail("broker.lost", why)),
        }
        Ok(())
    }

    /// A read frame's bytes and the stamp of the file they came from,
    /// checked against the version the frame continues, then logged: the
    /// worker's answer and the bytes.
    fn read_checked(&mut self, req: &Request, stamp: ReadStamp, bytes: Payload) -> Result<(Response, Payload), Fail> {
        let offset = req.offset.unwrap_or(0);
        let version = version_of(&stamp);
        if let Some(expected) = req.version.as_deref().filter(|v| *v != version) {
            return Err(fail(
                codes::CHANGED,
                format!(
                    "{}:{} changed since the read that answered version {expected} (it is {} bytes now); the \
                     bytes read so far are not one version of the file: read it again from the start",
                    req.root, req.path, stamp.size
                ),
            ));
        }
        let eof = offset.saturating_add(bytes.len() as u64) >= stamp.size;
        self.log_read(req, offset, &version, bytes.len() as u64, eof)?;
        let response = Response {
            id: req.id,
            size: Some(stamp.size),
            eof: Some(eof),
            version: Some(version),
            ..Response::default()
        };
        Ok((response, bytes))
    }

    /// Logs a read frame of `amount` bytes: one entry for the frames of one
    /// streamed read (same file and version, each starting where the last
    /// ended), whose SHA-256 of all its bytes [`Self::hash_read`] keeps. A
    /// stream whose first frame is the whole file (`eof`) is hashed here.
    fn log_read(&mut self, req: &Request, offset: u64, version: &str, amount: u64, eof: bool) -> Result<(), Fail> {
        let continues = self.reading.as_ref().is_some_and(|r| {
            r.root == req.root && r.path == req.path && r.version == version && r.next == offset && offset > 0
        });
        if !continues {
            self.logged(req, 0, None);
            let log = self.log.len() - 1;
            let hash = if eof {
                ReadHash::Here(Sha256::new())
            } else {
                let stream = self.new_stream()?;
                self.threaded_reads.push((log, stream));
                ReadHash::Thread(stream)
            };
            let (root, path) = (req.root.clone(), req.path.clone());
            let version = version.to_owned();
            self.reading = Some(Reading { root, path, version, next: offset, hash, log, held: None });
        }
        if let Some(r) = self.reading.as_mut() {
            r.next += amount;
            self.log[r.log].amount += amount;
        }
        Ok(())
    }

    /// Adds a logged read frame's bytes to its entry's SHA-256: here, or
    /// handed to the hashing thread (which then owns the buffer: `None`
    /// comes back).
    fn hash_read(&mut self, bytes: Payload) -> Result<Option<Payload>, Fail> {
        let Some(r) = self.reading.as_mut() else { return Ok(Some(bytes)) };
        match &mut r.hash {
            ReadHash::Here(hash) => {
                hash.update(&*bytes);
                self.log[r.log].sha256 = Some(format!("sha256:{}", hex::encode(hash.clone().finalize())));
                Ok(Some(bytes))
            }
            ReadHash::Thread(stream) => {
                let stream = *stream;
                self.hasher()?.feed(stream, bytes.body, bytes.start).map_err(lost_hasher)?;
                Ok(None)
            }
        }
    }

    /// Asks for at most `max` names, never more than the entry budget has
    /// left, and charges the names returned; a listing the budget (not the
    /// caller's `max`) cut short is `broker.budget`.
    fn list(&mut self, req: &Request, root: u32) -> Result<Response, Fail> {
        let max = req.max.unwrap_or(0);
        let left = self.budgets.entries.saturating_sub(self.usage.entries);
        let ask = max.min(left);
        let response = self.call(BrokerRequest {
            path: Some(req.path.clone()),
            max: Some(ask),
            ..Self::broker_request(BrokerOp::List, root)
        })?;
        let names = response.names.ok_or_else(|| fail("broker.lost", "a list answer without names"))?;
        let kinds = response.kinds.ok_or_else(|| fail("broker.lost", "a list answer without kinds"))?;
        if names.len() as u64 > ask || kinds.len() != names.len() {
            return Err(fail("broker.lost", "the broker listed more than asked, or kinds that do not match"));
        }
        let truncated = response.truncated.unwrap_or(false);
        self.usage.entries += names.len() as u64;
        if truncated && ask < max {
            return Err(fail(
                codes::BUDGET,
                format!(
                    "the budget of {} directory entries is spent: {} has more names",
                    self.budgets.entries, req.path
                ),
            ));
        }
        self.logged(req, names.len() as u64, None);
        Ok(Response {
            id: req.id,
            names: Some(names),
            kinds: Some(kinds),
            skipped: Some(response.skipped.unwrap_or(0)),
            truncated: Some(truncated),
            ..Response::default()
        })
    }

    fn write(&mut self, req: &Request, root: u32, data: &[u8]) -> Result<Response, Fail> {
        let sha256 = sha256_hex(data);
        let prepared = self.call_with(
            BrokerRequest { path: Some(req.path.clone()), ..Self::broker_request(BrokerOp::WritePrepare, root) },
            Some(data),
        )?;
        let prepare_id = prepared.id;
        let identity = prepared.identity.ok_or_else(|| fail("broker.lost", "a prepare answer without identity"))?;
        if identity.bytes != data.len() as u64 {
            return Err(fail("broker.lost", "the broker prepared a different number of bytes"));
        }
        let written = self.land(&req.root, &req.path, root, prepare_id, identity, sha256.clone())?;
        self.logged(req, written, Some(sha256));
        Ok(Response { id: req.id, written: Some(written), ..Response::default() })
    }

    /// Opens a chunked write: the broker's unnamed file, empty; the stream
    /// number is this request's id.
    fn write_open(&mut self, req: &Request, root: u32) -> Result<Response, Fail> {
        if self.open_writes.len() >= MAX_OPEN_WRITES {
            return Err(fail(codes::LIMIT, format!("at most {MAX_OPEN_WRITES} chunked writes are open at once")));
        }
        let opened = self.call(BrokerRequest {
            path: Some(req.path.clone()),
            handle: Some(true),
            ..Self::broker_request(BrokerOp::WriteOpen, root)
        })?;
        let identity = opened.identity.ok_or_else(|| fail("broker.lost", "an open answer without identity"))?;
        let file = match self.handed.take() {
            Some(fd) => Some(HeldWrite::take(fd, &identity).map_err(|why| fail("broker.lost", why))?),
            None => None,
        };
        let (root_name, path) = (req.root.clone(), req.path.clone());
        let stream = self.new_stream()?;
        let prepared = opened.id;
        let open = OpenWrite { root, root_name, path, prepared, identity, bytes: 0, sent: 0, stream, file };
        self.open_writes.insert(req.id, open);
        self.logged(req, 0, None);
        Ok(Response { id: req.id, stream: Some(req.id), ..Response::default() })
    }

    /// Whether `req` is an append to a chunked write whose file the relay
    /// holds.
    fn appends_here(&self, req: &Request) -> bool {
        req.op == Op::WriteAppend
            && self.open_writes.get(&req.stream.unwrap_or_default()).is_some_and(|open| open.file.is_some())
    }

    /// Appends one frame to a chunked write's held file (nothing is in
    /// flight): written where the last frame ended, handed to the hashing
    /// thread, answered by the bytes the write holds now.
    fn append_here(&mut self, req: &Request, root: u32, data: &[u8]) -> Result<Response, Fail> {
        let open = self.stream_mut(req, root)?;
        let file = open.file.as_ref().ok_or_else(|| fail(codes::PROTOCOL, "the chunked write's file is not held"))?;
        file.write_at(open.bytes, data)
            .map_err(|e| fail(codes::IO, format!("appending to {}:{}: {e}", open.root_name, open.path)))?;
        open.bytes += data.len() as u64;
        open.sent = open.bytes;
        let (total, stream) = (open.bytes, open.stream);
        self.hasher()?.feed_copy(stream, data).map_err(lost_hasher)?;
        Ok(Response { id: req.id, written: Some(total), ..Response::default() })
    }

    /// The open chunked write `req.stream`, taken out; it must be for the
    /// same root and path.
    fn take_stream(&mut self, req: &Request, root: u32) -> Result<OpenWrite, Fail> {
        self.stream_mut(req, root)?;
        let stream = req.stream.unwrap_or_default();
        self.open_writes
            .remove(&stream)
            .ok_or_else(|| fail(codes::PROTOCOL, format!("no chunked write {stream} is open")))
    }

    /// The open chunked write `req.stream`; it must be for the same root
    /// and path.
    fn stream_mut(&mut self, req: &Request, root: u32) -> Result<&mut OpenWrite, Fail> {
        let stream = req.stream.unwrap_or_default();
        let open = self
            .open_writes
            .get_mut(&stream)
            .ok_or_else(|| fail(codes::PROTOCOL, format!("no chunked write {stream} is open")))?;
        if open.root != root || open.path != req.path {
            return Err(fail(
                codes::PROTOCOL,
                format!(
                    "chunked write {stream} is for {}:{}, not {}:{}",
                    open.root_name, open.path, req.root, req.path
                ),
            ));
        }
        Ok(open)
    }

    /// The broker's answer to an append that makes the write `total`
    /// bytes, checked.
    fn append_answered(
        &mut self,
        req: &Request,
        appended: BrokerResponse,
        data: Option<Payload>,
        total: u64,
    ) -> Result<Response, Fail> {
        if data.is_some() {
            return Err(fail("broker.lost", "the broker answered with data where none belongs"));
        }
        if appended.written != Some(total) {
            return Err(fail("broker.lost", "the broker appended a different number of bytes"));
        }
        let open = self
            .open_writes
            .get_mut(&req.stream.unwrap_or_default())
            .ok_or_else(|| fail("broker.lost", "an append answered for a write no longer open"))?;
        open.bytes = total;
        Ok(Response { id: req.id, written: Some(total), ..Response::default() })
    }

    fn write_commit(&mut self, req: &Request, root: u32) -> Result<Response, Fail> {
        let open = self.take_stream(req, root)?;
        let digest = self.hasher()?.finish(open.stream).map_err(lost_hasher)?;
        let sha256 = format!("sha256:{}", hex::encode(digest));
        let identity = WriteIdentity { bytes: open.bytes, ..open.identity };
        let written = self.land(&req.root, &req.path, root, open.prepared, identity, sha256.clone())?;
        self.logged(req, written, Some(sha256));
        Ok(Response { id: req.id, written: Some(written), ..Response::default() })
    }

    fn write_abort(&mut self, req: &Request, root: u32) -> Result<Response, Fail> {
        let open = self.take_stream(req, root)?;
        self.hasher()?.forget(open.stream).map_err(lost_hasher)?;
        self.call(BrokerRequest { prepared: Some(open.prepared), ..Self::broker_request(BrokerOp::WriteAbort, root) })?;
        self.logged(req, open.bytes, None);
        Ok(Response { id: req.id, aborted: Some(true), ..Response::default() })
    }

    /// Lands a prepared (or chunked) write of `identity.bytes` bytes: the
    /// recovery record saved durably, then the broker's commit, then the
    /// receipt journaled. Returns the bytes at the target.
    fn land(
        &mut self,
        root_name: &str,
        path: &str,
        root: u32,
        prepare_id: u64,
        identity: WriteIdentity,
        sha256: String,
    ) -> Result<u64, Fail> {
        let stage = format!(
            "{STAGE_PREFIX}{}",
            format_args!("{}{}", airlock_hostfs::random_suffix(), airlock_hostfs::random_suffix())
        );
        let open_root = &self.roots[root as usize];
        let (root_dev, root_ino) = open_root.dir.dev_ino();
        let mut comps: Vec<String> = path.split('/').map(str::to_owned).collect();
        let target = comps.pop().unwrap_or_default();
        let record = StageRecord {
            root: root_name.to_owned(),
            root_path: open_root.real.display().to_string(),
            root_dev,
            root_ino,
            dir: comps,
            dir_dev: identity.dir_dev,
            dir_ino: identity.dir_ino,
            file_dev: identity.file_dev,
            file_ino: identity.file_ino,
            stage: stage.clone(),
            target,
        };
        let saved = match self.records.save(&record) {
            Ok(name) => name,
            Err(r) => {
                let _ = self.call(BrokerRequest {
                    prepared: Some(prepare_id),
                    ..Self::broker_request(BrokerOp::WriteAbort, root)
                });
                return Err(fail(codes::IO, format!("the recovery record could not be saved: {}", r.message)));
            }
        };
        crate::ledger::crash_point("broker_after_record");
        let committed = self.call(BrokerRequest {
            prepared: Some(prepare_id),
            stage: Some(stage.clone()),
            ..Self::broker_request(BrokerOp::WriteCommit, root)
        })?;
        self.records.landed(saved);
        let written = committed.written.ok_or_else(|| fail("broker.lost", "a commit answer without a size"))?;
        if written != identity.bytes {
            return Err(fail("broker.lost", "the broker committed a different number of bytes"));
        }
        let receipt = WriteReceipt { root: root_name.to_owned(), path: path.to_owned(), bytes: written, sha256 };
        let journaled = (self.on_write)(&receipt, &stage);
        self.writes.push(receipt);
        journaled.map_err(|why| fail(codes::IO, format!("the write landed but could not be journaled: {why}")))?;
        Ok(written)
    }

    fn logged(&mut self, req: &Request, amount: u64, sha256: Option<String>) {
        self.log.push(OpLog {
            id: req.id,
            op: req.op.as_str(),
            root: req.root.clone(),
            path: req.path.clone(),
            amount,
            sha256,
            result: "ok".into(),
        });
    }
}

/// Sends `head` then `payload` on `socket` in vectored sends that never
/// block: what finds no room waits in `poll` for it, until `deadline`
/// (then `TimedOut`). A frame that fits (nearly all do: [`size_buffers`])
/// is one system call, with no socket option set around it. A peer gone
/// is an error (`EPIPE`; `MSG_NOSIGNAL`, so no `SIGPIPE` even in a
/// process that does not ignore it, as a Rust binary does).
fn send_by(socket: BorrowedFd<'_>, head: &[u8], payload: &[u8], deadline: Instant) -> std::io::Result<()> {
    write_parts(&mut SendBy { socket, deadline }, &[head, payload])
}

/// A socket written by [`send_by`]: each write is one non-blocking
/// `sendmsg`, waiting in `poll` for room until the deadline.
struct SendBy<'a> {
    socket: BorrowedFd<'a>,
    deadline: Instant,
}

impl Write for SendBy<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        let flags = SendFlags::DONTWAIT | SendFlags::NOSIGNAL;
        loop {
            match rustix::net::sendmsg(self.socket, bufs, &mut SendAncillaryBuffer::default(), flags) {
                Err(Errno::AGAIN) => {
                    if !wait_ready(self.socket, PollFlags::OUT, Some(self.deadline))? {
                        return Err(ErrorKind::TimedOut.into());
                    }
                }
                // `EINTR` is `Interrupted`, which `write_parts` retries.
                sent => return Ok(sent?),
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The send buffer each end of the worker's and the broker's sockets asks
/// for: room for more than the largest window (8 frames of at most
/// [`MAX_FRAME`] bytes each way), so that with a window in flight no side
/// blocks writing while its peer blocks writing the other way. The kernel
/// caps it at `net.core.wmem_max`; a smaller buffer only costs speed.
pub(crate) const SOCKET_BUFFER: usize = 1 << 20;

/// Asks for [`SOCKET_BUFFER`] on `socket` (best effort).
pub(crate) fn size_buffers(socket: &impl std::os::fd::AsFd) {
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(socket, SOCKET_BUFFER);
    let _ = rustix::net::sockopt::set_socket_recv_buffer_size(socket, SOCKET_BUFFER);
}

/// A read's `version`: the first [`VERSION_LEN`] hex digits of the SHA-256
/// of the file's identity, size and change time (no host number reaches the
/// worker as such).
fn version_of(stamp: &ReadStamp) -> String {
    let text = format!("{}:{}:{}:{}:{}", stamp.dev, stamp.ino, stamp.size, stamp.ctime, stamp.ctime_nsec);
    let mut hex = hex::encode(Sha256::digest(text.as_bytes()));
    hex.truncate(VERSION_LEN);
    hex
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Fills `socket`'s send buffer until a send would block.
    fn fill(socket: &UnixStream) -> usize {
        let chunk = [7u8; 64 * 1024];
        let mut sent = 0;
        loop {
            match rustix::net::send(socket, &chunk, SendFlags::DONTWAIT) {
                Ok(n) => sent += n,
                Err(Errno::AGAIN) => return sent,
                Err(e) => panic!("filling the socket: {e}"),
            }
        }
    }

    #[test]
    fn a_send_that_finds_no_room_waits_until_its_deadline_and_no_longer() {
        let (a, _b) = UnixStream::pair().unwrap();
        fill(&a);
        let started = Instant::now();
        let err = send_by(a.as_fd(), b"head", b"payload", started + Duration::from_millis(60)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(60), "it waited for room until the deadline");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_send_sends_head_and_payload_whole_as_the_peer_drains() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let queued = fill(&a);
        let payload: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let expected = payload.len();
        let reader = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            let mut got = vec![0u8; queued + 4 + expected];
            b.read_exact(&mut got).unwrap();
            got
        });
        send_by(a.as_fd(), b"head", &payload, Instant::now() + Duration::from_secs(10)).unwrap();
        let got = reader.join().unwrap();
        assert_eq!(&got[queued..queued + 4], b"head");
        assert_eq!(&got[queued + 4..], &payload[..]);
    }

    #[test]
    fn a_send_to_a_peer_gone_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let err = send_by(a.as_fd(), b"head", b"", Instant::now() + Duration::from_secs(5)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(Errno::PIPE.raw_os_error()));
    }
}
