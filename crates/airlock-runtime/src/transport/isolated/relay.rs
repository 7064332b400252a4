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
//! link it under a staging name and rename it over the target.
//!
//! The first operation that fails ends the submission: the worker gets the
//! error, then its socket is shut and the worker killed, whatever it does
//! with the error.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use airlock_core::broker::BrokerBudgets;
use airlock_fsproto::{
    b64_decode, b64_encode, check_path, codes, decode, encode, framed, read_frame, take_frame, write_frame, BrokerOp,
    BrokerRequest, BrokerResponse, Op, Request, Response, MAX_FRAME, MAX_ID, MAX_IO_BYTES, MAX_LIST_NAMES,
    STAGE_PREFIX,
};
use rustix::event::{PollFd, PollFlags};
use serde::Serialize;
use sha2::{Digest, Sha256};

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
}

/// Why one request failed.
struct Fail {
    code: String,
    message: String,
}

fn fail(code: &str, message: impl Into<String>) -> Fail {
    Fail { code: code.to_owned(), message: message.into() }
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
        }
    }

    /// Serves the worker until it closes its socket, an operation fails,
    /// the broker is lost or the deadline passes.
    pub fn run(&mut self) -> RelayEnd {
        if let Err(e) = self.worker.set_nonblocking(true) {
            return RelayEnd::BrokerLost(format!("worker socket: {e}"));
        }
        let mut buf: Vec<u8> = Vec::new();
        let mut queue: VecDeque<Vec<u8>> = VecDeque::new();
        let mut eof = false;
        loop {
            if !eof {
                let wait = queue.is_empty();
                match self.fill(&mut buf, &mut queue, wait) {
                    Ok(Fill::Open) => {}
                    Ok(Fill::Eof) => eof = true,
                    Err(f) => return self.end_with(0, None, f),
                }
            }
            self.usage.max_outstanding = self.usage.max_outstanding.max(queue.len() as u64);
            if queue.len() as u64 > self.budgets.outstanding {
                let f = fail(
                    codes::BUDGET,
                    format!("more than {} operations outstanding at once", self.budgets.outstanding),
                );
                return self.end_with(0, None, f);
            }
            let Some(frame) = queue.pop_front() else {
                if eof {
                    return RelayEnd::Closed;
                }
                if Instant::now() >= self.deadline {
                    return RelayEnd::Deadline;
                }
                continue;
            };
            match self.handle(&frame) {
                Ok(response) => {
                    if self.send(&response).is_err() {
                        // The worker went away without reading its answer.
                        return RelayEnd::Closed;
                    }
                }
                Err((id, req, f)) => {
                    if f.code == "broker.lost" {
                        return RelayEnd::BrokerLost(f.message);
                    }
                    return self.end_with(id, req, f);
                }
            }
        }
    }

    fn end_with(&mut self, id: u64, req: Option<Request>, f: Fail) -> RelayEnd {
        let _ = self.send(&Response::error(id, &f.code, f.message.clone()));
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
    fn fill(&mut self, buf: &mut Vec<u8>, queue: &mut VecDeque<Vec<u8>>, wait: bool) -> Result<Fill, Fail> {
        if wait
            && !wait_ready(&self.worker, PollFlags::IN, self.deadline).map_err(|e| fail(codes::IO, e.to_string()))?
        {
            return Ok(Fill::Open);
        }
        loop {
            let mut chunk = [0u8; 64 * 1024];
            match self.worker.read(&mut chunk) {
                Ok(0) => {
                    if !buf.is_empty() {
                        return Err(fail(codes::PROTOCOL, "the stream ended inside a frame"));
                    }
                    return Ok(Fill::Eof);
                }
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Fill::Open),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(Fill::Eof),
                Err(e) => return Err(fail(codes::IO, format!("reading the worker: {e}"))),
            }
            while let Some(frame) = take_frame(buf, MAX_FRAME).map_err(|e| fail(codes::PROTOCOL, e.to_string()))? {
                queue.push_back(frame);
            }
            if queue.len() as u64 > self.budgets.outstanding {
                return Ok(Fill::Open);
            }
        }
    }

    fn send(&mut self, response: &Response) -> std::io::Result<()> {
        let framed = framed(&encode(response))?;
        let mut sent = 0;
        while sent < framed.len() {
            match self.worker.write(&framed[sent..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if !wait_ready(&self.worker, PollFlags::OUT, self.deadline)? {
                        return Err(ErrorKind::TimedOut.into());
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Charges, checks and forwards one request.
    #[allow(clippy::result_large_err)]
    fn handle(&mut self, frame: &[u8]) -> Result<Response, (u64, Option<Request>, Fail)> {
        // Charged before anything is looked at.
        self.usage.calls += 1;
        let over_calls = self.usage.calls > self.budgets.calls;
        let req: Request = decode::<Request>(frame).map_err(|e| (0, None, fail(e.code(), e.to_string())))?;
        if let Err(e) = req.validate() {
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
        let data = match req.op {
            Op::Write => Some(
                b64_decode(req.data.as_deref().unwrap_or_default())
                    .map_err(|e| err(fail(codes::PROTOCOL, e.to_string())))?,
            ),
            _ => None,
        };
        self.charge(&req, data.as_deref()).map_err(err)?;
        let index = self.check(&req, data.as_deref()).map_err(err)?;
        let result = match req.op {
            Op::Read => self.read(&req, index),
            Op::List => self.list(&req, index),
            Op::Write => self.write(&req, index, data.unwrap_or_default()),
        };
        result.map_err(err)
    }

    fn charge(&mut self, req: &Request, data: Option<&[u8]>) -> Result<(), Fail> {
        let (spent, budget, what) = match req.op {
            Op::Read => {
                self.usage.read_bytes = self.usage.read_bytes.saturating_add(req.max.unwrap_or(0));
                (self.usage.read_bytes, self.budgets.read_bytes, "read bytes")
            }
            Op::Write => {
                self.usage.write_bytes = self.usage.write_bytes.saturating_add(data.map_or(0, |d| d.len() as u64));
                (self.usage.write_bytes, self.budgets.write_bytes, "write bytes")
            }
            Op::List => {
                self.usage.entries = self.usage.entries.saturating_add(req.max.unwrap_or(0));
                (self.usage.entries, self.budgets.entries, "directory entries")
            }
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
            Op::Write => (rights.write, "w"),
            Op::List => (rights.list, "l"),
        };
        if !held {
            return Err(fail(codes::DENIED, format!("root {:?} does not grant {right}", req.root)));
        }
        let (amount, limit, what) = match req.op {
            Op::Read => (req.max.unwrap_or(0), MAX_IO_BYTES, "bytes a read"),
            Op::Write => (data.map_or(0, |d| d.len() as u64), MAX_IO_BYTES, "bytes a write"),
            Op::List => (req.max.unwrap_or(0), MAX_LIST_NAMES, "names a list"),
        };
        if amount > limit {
            return Err(fail(codes::LIMIT, format!("{amount} is more than {limit} {what}")));
        }
        check_path(&req.path, req.op == Op::List).map_err(|e| fail(e.code, e.message))?;
        Ok(index as u32)
    }

    fn call(&mut self, mut request: BrokerRequest) -> Result<BrokerResponse, Fail> {
        self.broker_id += 1;
        request.id = self.broker_id;
        let lost = |why: String| fail("broker.lost", why);
        let left = self.deadline.saturating_duration_since(Instant::now()).max(std::time::Duration::from_millis(1));
        let _ = self.broker.set_read_timeout(Some(left));
        let _ = self.broker.set_write_timeout(Some(left));
        write_frame(&mut self.broker, &encode(&request)).map_err(|e| lost(format!("writing to the broker: {e}")))?;
        let body = read_frame(&mut self.broker, MAX_FRAME)
            .map_err(|e| lost(format!("reading the broker: {e}")))?
            .ok_or_else(|| lost("the broker exited".into()))?;
        let response: BrokerResponse = decode(&body).map_err(|e| lost(format!("the broker answered badly: {e}")))?;
        if response.id != request.id {
            return Err(lost(format!("the broker answered call {} for call {}", response.id, request.id)));
        }
        if let Some(e) = response.error {
            return Err(Fail { code: e.code, message: e.message });
        }
        Ok(response)
    }

    fn broker_request(op: BrokerOp, root: u32) -> BrokerRequest {
        BrokerRequest { id: 0, op, root, path: None, max: None, data: None, prepared: None, stage: None }
    }

    /// Forwards a read or a list of `req.path` bounded by `req.max`.
    fn bounded(&mut self, op: BrokerOp, req: &Request, root: u32) -> Result<BrokerResponse, Fail> {
        self.call(BrokerRequest { path: Some(req.path.clone()), max: req.max, ..Self::broker_request(op, root) })
    }

    fn read(&mut self, req: &Request, root: u32) -> Result<Response, Fail> {
        let response = self.bounded(BrokerOp::Read, req, root)?;
        let data = response.data.ok_or_else(|| fail("broker.lost", "a read answer without data"))?;
        let bytes = b64_decode(&data).map_err(|e| fail("broker.lost", e.to_string()))?;
        if bytes.len() as u64 > req.max.unwrap_or(0) {
            return Err(fail("broker.lost", "the broker returned more than asked"));
        }
        self.logged(req, bytes.len() as u64, Some(sha256_hex(&bytes)));
        Ok(Response { id: req.id, data: Some(b64_encode(&bytes)), ..Response::default() })
    }

    fn list(&mut self, req: &Request, root: u32) -> Result<Response, Fail> {
        let response = self.bounded(BrokerOp::List, req, root)?;
        let names = response.names.ok_or_else(|| fail("broker.lost", "a list answer without names"))?;
        if names.len() as u64 > req.max.unwrap_or(0) {
            return Err(fail("broker.lost", "the broker listed more than asked"));
        }
        self.logged(req, names.len() as u64, None);
        Ok(Response {
            id: req.id,
            names: Some(names),
            skipped: Some(response.skipped.unwrap_or(0)),
            truncated: Some(response.truncated.unwrap_or(false)),
            ..Response::default()
        })
    }

    fn write(&mut self, req: &Request, root: u32, data: Vec<u8>) -> Result<Response, Fail> {
        let sha256 = sha256_hex(&data);
        let prepared = self.call(BrokerRequest {
            path: Some(req.path.clone()),
            data: Some(b64_encode(&data)),
            ..Self::broker_request(BrokerOp::WritePrepare, root)
        })?;
        let prepare_id = prepared.id;
        let identity = prepared.identity.ok_or_else(|| fail("broker.lost", "a prepare answer without identity"))?;
        if identity.bytes != data.len() as u64 {
            return Err(fail("broker.lost", "the broker prepared a different number of bytes"));
        }
        let stage = format!(
            "{STAGE_PREFIX}{}",
            format_args!("{}{}", airlock_hostfs::random_suffix(), airlock_hostfs::random_suffix())
        );
        let open_root = &self.roots[root as usize];
        let (root_dev, root_ino) = open_root.dir.dev_ino();
        let mut comps: Vec<String> = req.path.split('/').map(str::to_owned).collect();
        let target = comps.pop().unwrap_or_default();
        let record = StageRecord {
            root: req.root.clone(),
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
        if let Err(r) = self.records.save(&record) {
            let _ = self
                .call(BrokerRequest { prepared: Some(prepare_id), ..Self::broker_request(BrokerOp::WriteAbort, root) });
            return Err(fail(codes::IO, format!("the recovery record could not be saved: {}", r.message)));
        }
        crate::ledger::crash_point("broker_after_record");
        let committed = self.call(BrokerRequest {
            prepared: Some(prepare_id),
            stage: Some(stage.clone()),
            ..Self::broker_request(BrokerOp::WriteCommit, root)
        })?;
        let written = committed.written.ok_or_else(|| fail("broker.lost", "a commit answer without a size"))?;
        let receipt =
            WriteReceipt { root: req.root.clone(), path: req.path.clone(), bytes: written, sha256: sha256.clone() };
        let journaled = (self.on_write)(&receipt, &stage);
        self.writes.push(receipt);
        journaled.map_err(|why| fail(codes::IO, format!("the write landed but could not be journaled: {why}")))?;
        self.logged(req, written, Some(sha256));
        Ok(Response { id: req.id, written: Some(written), ..Response::default() })
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

/// Waits until `socket` is ready for `flags` or `deadline` passes; whether
/// it is ready (an interrupted wait counts as not ready, to be retried).
fn wait_ready(socket: &UnixStream, flags: PollFlags, deadline: Instant) -> std::io::Result<bool> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Ok(false);
    }
    let timeout = rustix::event::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) };
    let mut fds = [PollFd::new(socket, flags)];
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}
