//! The serve loop: one request frame in, one response frame out, every
//! request checked again here (root index, the right for the operation,
//! the path rules, the size limits) under airlock's own checks.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use airlock_fsproto::{
    check_path, check_stage_name, codes, decode_body, encode, frame_head, read_frame_into, write_frame, write_parts,
    BrokerOp, BrokerRequest, BrokerResponse, Rights, WriteIdentity, MAX_FRAME, MAX_IO_BYTES, MAX_LIST_NAMES,
};
use airlock_hostfs::rooted::{self, PreparedWrite, RootedError};
use airlock_hostfs::Resolver;

/// Most prepared writes held at once (each holds two descriptors).
pub const MAX_OUTSTANDING: usize = 8;

/// Why serving stopped before the end of the stream. The broker exits
/// nonzero on either; airlock treats a dead broker as a failed submission.
#[derive(Debug)]
pub enum Fatal {
    /// A malformed, oversized or out-of-order message.
    Protocol(String),
    /// Reading from or writing to the socket failed.
    Io(std::io::Error),
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fatal::Protocol(m) => write!(f, "protocol error: {m}"),
            Fatal::Io(e) => write!(f, "socket: {e}"),
        }
    }
}

/// A request refused before any file operation.
struct Refusal {
    code: &'static str,
    message: String,
}

struct Root {
    fd: OwnedFd,
    rights: Rights,
}

/// One answer: the response, a read's bytes (sent after it as a data
/// frame), which lie in the broker's read buffer until the next request,
/// and the file a request asked to be handed over with it.
#[derive(Debug)]
pub struct Answer<'a> {
    /// The response (a read's is the data frame's header).
    pub response: BrokerResponse,
    /// A read's bytes.
    pub data: Option<&'a [u8]>,
    /// The descriptor passed with the answer (`response.handle`).
    pub file: Option<OwnedFd>,
}

impl From<BrokerResponse> for Answer<'_> {
    fn from(response: BrokerResponse) -> Self {
        Answer { response, data: None, file: None }
    }
}

/// The broker's end of its socket to airlock: a byte stream that can also
/// pass a descriptor.
pub trait Channel: Read + Write {
    /// Writes all of `parts`, `file`'s descriptor attached to their first
    /// byte (`SCM_RIGHTS`).
    fn write_with_file(&mut self, parts: &[&[u8]], file: BorrowedFd<'_>) -> std::io::Result<()>;
}

struct Pending {
    root: u32,
    write: PreparedWrite,
}

/// The broker's state: its roots, its resolver and the writes prepared but
/// not yet committed or aborted (dropped, and so never visible, when the
/// broker exits).
pub struct Broker {
    roots: Vec<Root>,
    resolver: Resolver,
    prepared: BTreeMap<u64, Pending>,
    /// Permission bits of the files it writes (default `0600`).
    file_mode: u32,
    /// The bytes of the last read, reused from frame to frame (a fresh
    /// buffer per frame cost more in page faults than the read itself).
    read_buf: Vec<u8>,
}

fn refused(id: u64, code: &str, message: impl Into<String>) -> BrokerResponse {
    BrokerResponse::error(id, code, message)
}

fn from_rooted(id: u64, e: RootedError) -> BrokerResponse {
    refused(id, e.code(), e.to_string())
}

impl Broker {
    /// A broker over `roots` (root `i` is index `i` in requests).
    pub fn new(roots: Vec<(OwnedFd, Rights)>, resolver: Resolver) -> Broker {
        let roots = roots.into_iter().map(|(fd, rights)| Root { fd, rights }).collect();
        Broker { roots, resolver, prepared: BTreeMap::new(), file_mode: 0o600, read_buf: Vec::new() }
    }

    /// The files it writes get permission bits `mode` (less the umask)
    /// instead of `0600`.
    pub fn set_file_mode(&mut self, mode: u32) {
        self.file_mode = mode;
    }

    /// Serves frames from `stream` until it ends (`Ok`) or a fatal error.
    /// A protocol error is answered (`broker.protocol`) before it is returned.
    /// Each answer goes out in one vectored write: the frame's head, then a
    /// read's bytes from where they were read.
    pub fn serve(&mut self, stream: &mut impl Channel) -> Result<(), Fatal> {
        // One request buffer for every frame, like the read buffer.
        let mut body = Vec::new();
        loop {
            match read_frame_into(stream, MAX_FRAME, &mut body) {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(airlock_fsproto::ProtoError::Io(e)) => return Err(Fatal::Io(e)),
                Err(e) => return Err(self.protocol_failure(stream, 0, e.to_string())),
            }
            let (request, data) = match decode_body::<BrokerRequest>(&body) {
                Ok(r) => r,
                Err(e) => return Err(self.protocol_failure(stream, 0, e.to_string())),
            };
            let answer = match self.handle(&request, data) {
                Ok(answer) => answer,
                Err(Fatal::Protocol(m)) => return Err(self.protocol_failure(stream, request.id, m)),
                Err(e) => return Err(e),
            };
            // A read answers at most MAX_IO_BYTES (checked in `handle`).
            let head = frame_head(&answer.response, answer.data).map_err(|e| Fatal::Protocol(e.to_string()))?;
            let parts = [&head[..], answer.data.unwrap_or_default()];
            match &answer.file {
                Some(file) => stream.write_with_file(&parts, file.as_fd()),
                None => write_parts(stream, &parts),
            }
            .map_err(Fatal::Io)?;
        }
    }

    fn protocol_failure(&self, stream: &mut impl Write, id: u64, message: String) -> Fatal {
        let _ = write_frame(stream, &encode(&refused(id, codes::PROTOCOL, message.clone())));
        Fatal::Protocol(message)
    }

    /// Answers one request (`data`: the payload of its data frame, `None`
    /// for a message). A refusal (no such root or right, a rejected path,
    /// a limit, a file-system refusal) is a response; a request that
    /// cannot be answered at all is [`Fatal::Protocol`].
    pub fn handle(&mut self, req: &BrokerRequest, data: Option<&[u8]>) -> Result<Answer<'_>, Fatal> {
        req.validate(data).map_err(|e| Fatal::Protocol(e.to_string()))?;
        let id = req.id;
        match req.op {
            BrokerOp::Read => {
                // Out of `self` while `checked` borrows it (a refusal just
                // drops it: the next read grows a new one).
                let mut buf = std::mem::take(&mut self.read_buf);
                let (root, comps) = match self.checked(req, |r| r.read, false) {
                    Ok(ok) => ok,
                    Err(r) => return Ok(refused(id, r.code, r.message).into()),
                };
                let max = req.max.unwrap_or(0);
                if max > MAX_IO_BYTES {
                    let message = format!("a read is at most {MAX_IO_BYTES} bytes, not {max}");
                    return Ok(refused(id, codes::LIMIT, message).into());
                }
                let offset = req.offset.unwrap_or(0);
                let read = rooted::read_file_into(&self.resolver, &root.fd, &comps, offset, max, &mut buf);
                self.read_buf = buf;
                Ok(match read {
                    Ok((stamp, file)) => {
                        // Handed over only for a stream that goes on.
                        let more = offset.saturating_add(self.read_buf.len() as u64) < stamp.size;
                        let file = (req.handle == Some(true) && more).then(|| OwnedFd::from(file));
                        let handle = file.is_some().then_some(true);
                        Answer {
                            response: BrokerResponse { id, stamp: Some(stamp), handle, ..Default::default() },
                            data: Some(&self.read_buf),
                            file,
                        }
                    }
                    Err(e) => from_rooted(id, e).into(),
                })
            }
            BrokerOp::List => {
                let (root, comps) = match self.checked(req, |r| r.list, true) {
                    Ok(ok) => ok,
                    Err(r) => return Ok(refused(id, r.code, r.message).into()),
                };
                let max = req.max.unwrap_or(0);
                if max > MAX_LIST_NAMES {
                    let message = format!("a list is at most {MAX_LIST_NAMES} names, not {max}");
                    return Ok(refused(id, codes::LIMIT, message).into());
                }
                Ok(match rooted::list_dir(&self.resolver, &root.fd, &comps, max as usize) {
                    Ok(l) => BrokerResponse {
                        id,
                        names: Some(l.names),
                        kinds: Some(l.kinds),
                        skipped: Some(l.skipped),
                        truncated: Some(l.truncated),
                        ..Default::default()
                    },
                    Err(e) => from_rooted(id, e),
                }
                .into())
            }
            BrokerOp::WritePrepare | BrokerOp::WriteOpen => self.prepare(req, data.unwrap_or_default()),
            BrokerOp::WriteAppend => self.append(req, data.unwrap_or_default()).map(Answer::from),
            BrokerOp::WriteCommit => {
                let pending = self.take_pending(req)?;
                let stage = req.stage.as_deref().unwrap_or_default();
                check_stage_name(stage).map_err(|e| Fatal::Protocol(e.to_string()))?;
                Ok(match pending.write.commit(stage) {
                    Ok(bytes) => BrokerResponse { id, written: Some(bytes), ..Default::default() },
                    Err(e) => from_rooted(id, e),
                }
                .into())
            }
            BrokerOp::WriteAbort => {
                drop(self.take_pending(req)?);
                Ok(BrokerResponse { id, aborted: Some(true), ..Default::default() }.into())
            }
        }
    }

    /// Prepares (or opens) a write; an open asked with `handle` hands the
    /// unnamed file over with its answer, for airlock to append to.
    fn prepare(&mut self, req: &BrokerRequest, bytes: &[u8]) -> Result<Answer<'static>, Fatal> {
        let id = req.id;
        if self.prepared.contains_key(&id) {
            return Err(Fatal::Protocol(format!("request id {id} already names a prepared write")));
        }
        let (root, comps) = match self.checked(req, |r| r.write, false) {
            Ok(ok) => ok,
            Err(r) => return Ok(refused(id, r.code, r.message).into()),
        };
        if let Some(refusal) = over_frame(id, bytes) {
            return Ok(refusal.into());
        }
        if self.prepared.len() >= MAX_OUTSTANDING {
            return Ok(refused(id, codes::LIMIT, format!("at most {MAX_OUTSTANDING} prepared writes at once")).into());
        }
        let made = match req.op {
            BrokerOp::WriteOpen => rooted::open_write(&self.resolver, &root.fd, &comps, self.file_mode),
            _ => rooted::prepare_write_with_mode(&self.resolver, &root.fd, &comps, bytes, self.file_mode),
        };
        let write = match made {
            Ok(w) => w,
            Err(e) => return Ok(from_rooted(id, e).into()),
        };
        let file = match req.handle {
            Some(true) if req.op == BrokerOp::WriteOpen => match write.share() {
                Ok(file) => Some(file),
                Err(e) => return Ok(from_rooted(id, e).into()),
            },
            _ => None,
        };
        let (d, f) = (write.dir_id(), write.file_id());
        let identity =
            WriteIdentity { dir_dev: d.dev, dir_ino: d.ino, file_dev: f.dev, file_ino: f.ino, bytes: write.bytes() };
        self.prepared.insert(id, Pending { root: req.root, write });
        let handle = file.is_some().then_some(true);
        let response = BrokerResponse { id, identity: Some(identity), handle, ..Default::default() };
        Ok(Answer { response, data: None, file })
    }

    /// Appends one frame to an opened (or prepared) write on the same root;
    /// answers the bytes it holds now. A failed append drops the write.
    fn append(&mut self, req: &BrokerRequest, bytes: &[u8]) -> Result<BrokerResponse, Fatal> {
        let id = req.id;
        let mut pending = self.take_pending(req)?;
        if let Some(refusal) = over_frame(id, bytes) {
            return Ok(refusal);
        }
        let before = pending.write.bytes();
        if let Err(e) = pending.write.append(bytes) {
            return Ok(from_rooted(id, e));
        }
        let written = pending.write.bytes();
        airlock_sandbox::start_writeback_after_append(pending.write.file(), before, written);
        self.prepared.insert(req.prepared.unwrap_or_default(), pending);
        Ok(BrokerResponse { id, written: Some(written), ..Default::default() })
    }

    /// The pending write a commit, abort or append names, which must have
    /// been prepared on the same root.
    fn take_pending(&mut self, req: &BrokerRequest) -> Result<Pending, Fatal> {
        let prepared = req.prepared.unwrap_or_default();
        match self.prepared.remove(&prepared) {
            Some(p) if p.root == req.root => Ok(p),
            Some(p) => {
                let root = p.root;
                self.prepared.insert(prepared, p);
                Err(Fatal::Protocol(format!("write {prepared} was prepared on root {root}, not {}", req.root)))
            }
            None => Err(Fatal::Protocol(format!("no prepared write {prepared}"))),
        }
    }

    /// The root a request names, if it holds the right, and the request's
    /// path as components; otherwise the refusal to send.
    fn checked<'a>(
        &'a self,
        req: &'a BrokerRequest,
        right: fn(&Rights) -> bool,
        allow_dot: bool,
    ) -> Result<(&'a Root, Vec<&'a str>), Refusal> {
        let root = match self.roots.get(req.root as usize) {
            Some(root) if right(&root.rights) => root,
            Some(root) => {
                let rights = root.rights.to_string();
                let message = format!("root {} is granted {rights:?}, not this operation", req.root);
                return Err(Refusal { code: codes::DENIED, message });
            }
            None => return Err(Refusal { code: codes::DENIED, message: format!("no root {}", req.root) }),
        };
        let path = req.path.as_deref().unwrap_or_default();
        let comps = check_path(path, allow_dot).map_err(|e| Refusal { code: e.code, message: e.message })?;
        Ok((root, comps))
    }
}

/// The refusal of a write frame over [`MAX_IO_BYTES`].
fn over_frame(id: u64, bytes: &[u8]) -> Option<BrokerResponse> {
    (bytes.len() as u64 > MAX_IO_BYTES).then(|| {
        refused(id, codes::LIMIT, format!("a write frame is at most {MAX_IO_BYTES} bytes, not {}", bytes.len()))
    })
}

#[cfg(test)]
mod tests;
