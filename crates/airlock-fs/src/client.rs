//! The Rust client over the worker's socket: one call at a time, except
//! the frames of a streamed read or a chunked write, which keep up to the
//! window airlock allows in flight.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use airlock_fsproto::{
    codes, decode_body, frame_head, read_frame, write_parts, EntryKind, Op, Request, Response, ENV_FD, ENV_WINDOW,
    MAX_FRAME, MAX_IO_BYTES,
};
use rustix::process::{getpid, pidfd_getfd, pidfd_open, PidfdFlags, PidfdGetfdFlags};

use crate::error::FsError;
use crate::ids::Ids;

/// What a directory listing returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Entry names, sorted by bytes, at most the `max` asked for.
    pub names: Vec<String>,
    /// What each name is (file, dir, link, other), in the same order.
    pub kinds: Vec<EntryKind>,
    /// Entries left out because their names break the path rules.
    pub skipped: u64,
    /// More names existed than `max`.
    pub truncated: bool,
}

/// One read frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The bytes from the offset asked.
    pub bytes: Vec<u8>,
    /// The file's size when read.
    pub size: u64,
    /// These bytes reach the end of the file.
    pub eof: bool,
    /// The file's version, to send with the next frame of the same read.
    pub version: String,
}

/// How a streamed read ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streamed {
    /// Bytes delivered.
    pub bytes: u64,
    /// The file's size.
    pub size: u64,
    /// Whether the read reached the end of the file (`false`: it stopped
    /// at the `max` asked for).
    pub complete: bool,
}

/// A connection to airlock over the worker's file-system socket.
///
/// Calls are made one at a time, except that a streamed read and a chunked
/// write keep up to the window (`AIRLOCK_FS_WINDOW`, airlock's
/// `outstanding` budget) of frames in flight, and take every answer before
/// they return. The processes sharing the socket must take turns (a script
/// running `airlock-fs` commands one after another does). After a transport
/// or protocol error the connection is unusable and every later call fails
/// with `broker.protocol`.
///
/// No deadlock with a window in flight: a read's requests are small (a few
/// hundred bytes each), and an append's answers are too, so the direction
/// that is not drained while the client writes holds at most a window of
/// small frames, far below any socket buffer.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    ids: Ids,
    broken: bool,
    window: usize,
}

impl Client {
    /// Connects through the descriptor named by `AIRLOCK_FS_FD` (`3` in an
    /// isolated worker).
    ///
    /// The client owns a close-on-exec duplicate of it (taken with
    /// `pidfd_getfd` on this process, so no unsafe code adopts a raw
    /// number); the original number stays open for child processes, such
    /// as `airlock-fs` commands run from a script.
    pub fn from_env() -> Result<Client, FsError> {
        let raw = std::env::var(ENV_FD)
            .map_err(|_| FsError::io(format!("{ENV_FD} is not set: not running in an isolated worker")))?;
        let fd = parse_fd(&raw).ok_or_else(|| FsError::io(format!("{ENV_FD}={raw:?} is not a descriptor number")))?;
        let me =
            pidfd_open(getpid(), PidfdFlags::empty()).map_err(|e| FsError::io(format!("pidfd_open(self): {e}")))?;
        let dup = pidfd_getfd(&me, fd, PidfdGetfdFlags::empty())
            .map_err(|e| FsError::io(format!("descriptor {fd} from {ENV_FD}: {e}")))?;
        let window = airlock_fsproto::window(std::env::var(ENV_WINDOW).ok().as_deref());
        Ok(Client::from_fd(dup)?.with_window(window))
    }

    /// The same client keeping up to `window` (at least 1) frames of a
    /// streamed read or a chunked write in flight; more than airlock's
    /// `outstanding` budget ends the submission.
    pub fn with_window(self, window: usize) -> Client {
        Client { window: window.max(1), ..self }
    }

    /// Connects through `fd`, a connected stream socket.
    pub fn from_fd(fd: OwnedFd) -> Result<Client, FsError> {
        let st = rustix::fs::fstat(&fd).map_err(|e| FsError::io(format!("fstat(fs socket): {e}")))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
            return Err(FsError::io("the file-system descriptor is not a socket"));
        }
        Ok(Client { stream: UnixStream::from(fd), ids: Ids::default(), broken: false, window: 1 })
    }

    /// Reads the whole regular file `path` in `root`, streamed in frames of
    /// at most 64 KiB. A file that changes between frames is refused
    /// (`broker.changed`); a budget that ends first is `broker.budget`.
    pub fn read(&mut self, root: &str, path: &str) -> Result<Vec<u8>, FsError> {
        let mut bytes = Vec::new();
        self.read_into(root, path, 0, None, &mut bytes)?;
        Ok(bytes)
    }

    /// Reads at most `max` bytes of `path` from `offset` (fewer only at the
    /// end of the file), streamed like [`Client::read`].
    pub fn read_range(&mut self, root: &str, path: &str, offset: u64, max: u64) -> Result<Vec<u8>, FsError> {
        let mut bytes = Vec::new();
        self.read_into(root, path, offset, Some(max), &mut bytes)?;
        Ok(bytes)
    }

    /// Streams `path` from `offset` into `out`, frame by frame, to the end
    /// of the file or `max` bytes. The first frame tells the file's size
    /// and version; the frames after it are sent with that version, up to
    /// the window at once, so a file that grows, shrinks or is replaced
    /// meanwhile fails the read (`broker.changed`) instead of mixing two
    /// versions; the bytes already written to `out` are then not the file.
    /// The frames go a window at a time: all of a window's answers are
    /// taken before its bytes are written to `out`.
    pub fn read_into(
        &mut self,
        root: &str,
        path: &str,
        offset: u64,
        max: Option<u64>,
        out: &mut impl Write,
    ) -> Result<Streamed, FsError> {
        let want = max.map_or(MAX_IO_BYTES, |m| m.min(MAX_IO_BYTES));
        let first = self.read_frame(root, path, offset, want, None)?;
        let (size, version) = (first.size, first.version);
        let n = first.bytes.len() as u64;
        write_out(out, &first.bytes)?;
        if first.eof {
            return Ok(Streamed { bytes: n, size, complete: true });
        }
        if max == Some(n) {
            return Ok(Streamed { bytes: n, size, complete: false });
        }
        if n < want {
            return Err(self.fail(FsError::protocol(format!("a read of {want} bytes got {n} before the end"))));
        }
        // The rest: [offset + n, end), in frames of at most MAX_IO_BYTES,
        // a window at a time: every answer of a window is taken before its
        // bytes go to `out`, so nothing is in flight while `out` blocks (a
        // full pipe) and another process may use the socket meanwhile, as
        // with one frame at a time.
        let end = max.map_or(size, |m| size.min(offset.saturating_add(m)));
        let mut pos = offset + n;
        let mut frames = Vec::with_capacity(self.window);
        while pos < end {
            let mut pending = VecDeque::with_capacity(self.window);
            let mut next = pos;
            while pending.len() < self.window && next < end {
                let want = (end - next).min(MAX_IO_BYTES);
                let request = Request {
                    max: Some(want),
                    offset: Some(next),
                    version: Some(version.clone()),
                    ..self.request(Op::Read, root, path)
                };
                pending.push_back((self.send(request, None)?, want));
                next += want;
            }
            frames.clear();
            while let Some((id, want)) = pending.pop_front() {
                let frame = self.take_frame(id, want)?;
                if frame.size != size {
                    let message = format!("{root}:{path} was {size} bytes, now {}", frame.size);
                    return Err(self.fail(FsError::new(codes::CHANGED, message)));
                }
                if (frame.bytes.len() as u64) < want {
                    let got = frame.bytes.len();
                    let message = format!("a read of {want} bytes got {got} before the end");
                    return Err(self.fail(FsError::protocol(message)));
                }
                frames.push(frame.bytes);
            }
            for bytes in &frames {
                write_out(out, bytes)?;
                pos += bytes.len() as u64;
            }
        }
        let done = pos - offset;
        Ok(Streamed { bytes: done, size, complete: pos >= size })
    }

    /// One read frame: at most `max` bytes from `offset`; with `version`,
    /// refused (`broker.changed`) unless the file is still that version.
    pub fn read_frame(
        &mut self,
        root: &str,
        path: &str,
        offset: u64,
        max: u64,
        version: Option<&str>,
    ) -> Result<Frame, FsError> {
        let request = Request {
            max: Some(max),
            offset: (offset > 0).then_some(offset),
            version: version.map(str::to_owned),
            ..self.request(Op::Read, root, path)
        };
        let id = self.send(request, None)?;
        self.take_frame(id, max)
    }

    /// The answer to the read frame `id` of at most `max` bytes.
    fn take_frame(&mut self, id: u64, max: u64) -> Result<Frame, FsError> {
        let (r, data) = self.receive(id)?;
        let (bytes, size, eof, version) = match (data, r.size, r.eof, r.version) {
            (Some(d), Some(s), Some(e), Some(v)) => (d, s, e, v),
            _ => return Err(self.fail(FsError::protocol("a read was answered without data"))),
        };
        if bytes.len() as u64 > max {
            return Err(self.fail(FsError::protocol(format!("{} bytes answered a read of at most {max}", bytes.len()))));
        }
        Ok(Frame { bytes, size, eof, version })
    }

    /// Creates or replaces the regular file `path` in `root` with `data`:
    /// one `write` when it fits a frame (64 KiB), a chunked write otherwise.
    pub fn write(&mut self, root: &str, path: &str, data: &[u8]) -> Result<(), FsError> {
        let written = self.write_from(root, path, &mut &data[..])?;
        if written != data.len() as u64 {
            return Err(self.fail(FsError::protocol(format!("{} bytes were sent, {written} written", data.len()))));
        }
        Ok(())
    }

    /// Creates or replaces `path` in `root` with everything `src` yields,
    /// streamed: up to 64 KiB is one `write`; more is a chunked write
    /// (`write_open`, `write_append` per 64 KiB with up to the window in
    /// flight, `write_commit` once every append was answered), named only
    /// at the commit. `src` is read while appends are in flight (a process
    /// sharing the socket waits for the call to return). If `src` fails
    /// the write is aborted and nothing is named. Returns the bytes written.
    pub fn write_from(&mut self, root: &str, path: &str, src: &mut impl Read) -> Result<u64, FsError> {
        let mut chunk = vec![0u8; MAX_IO_BYTES as usize];
        let n = fill(src, &mut chunk)?;
        if n < chunk.len() {
            let r = self.call_with(self.request(Op::Write, root, path), Some(&chunk[..n]))?;
            return self.expect_written(r, n as u64);
        }
        let r = self.call(self.request(Op::WriteOpen, root, path))?;
        let stream = match (r.stream, r.written, r.size) {
            (Some(s), None, None) => s,
            _ => return Err(self.fail(FsError::protocol("a write_open was answered without a stream"))),
        };
        // (id, the bytes the write holds once that append is answered).
        let mut pending: VecDeque<(u64, u64)> = VecDeque::new();
        let (mut sent, mut n) = (0u64, n);
        loop {
            if n > 0 {
                if pending.len() >= self.window {
                    self.take_appended(&mut pending)?;
                }
                let append = Request { stream: Some(stream), ..self.request(Op::WriteAppend, root, path) };
                sent += n as u64;
                pending.push_back((self.send(append, Some(&chunk[..n]))?, sent));
            }
            if n < chunk.len() {
                break;
            }
            n = match fill(src, &mut chunk) {
                Ok(n) => n,
                Err(e) => {
                    // Best effort: the reason to report is the input's.
                    while !pending.is_empty() {
                        self.take_appended(&mut pending)?;
                    }
                    let _ = self.call(Request { stream: Some(stream), ..self.request(Op::WriteAbort, root, path) });
                    return Err(e);
                }
            };
        }
        while !pending.is_empty() {
            self.take_appended(&mut pending)?;
        }
        let r = self.call(Request { stream: Some(stream), ..self.request(Op::WriteCommit, root, path) })?;
        self.expect_written(r, sent)
    }

    /// Takes the answer to the oldest append in flight.
    fn take_appended(&mut self, pending: &mut VecDeque<(u64, u64)>) -> Result<(), FsError> {
        if let Some((id, total)) = pending.pop_front() {
            let r = self.receive(id)?.0;
            self.expect_written(r, total)?;
        }
        Ok(())
    }

    /// `written` of a write answer, which must be `want`.
    fn expect_written(&mut self, r: Response, want: u64) -> Result<u64, FsError> {
        match (r.size, r.written, r.names, r.stream) {
            (None, Some(n), None, None) if n == want => Ok(n),
            (None, Some(n), None, None) => {
                Err(self.fail(FsError::protocol(format!("a write of {want} bytes was answered with {n}"))))
            }
            _ => Err(self.fail(FsError::protocol("a write was answered without a byte count"))),
        }
    }

    /// Lists at most `max` entry names of the directory `path` (`.` for the
    /// root itself) in `root`.
    pub fn list(&mut self, root: &str, path: &str, max: u64) -> Result<Listing, FsError> {
        let r = self.call(Request { max: Some(max), ..self.request(Op::List, root, path) })?;
        let listing = match (r.size, r.written, r.names, r.kinds, r.skipped, r.truncated) {
            (None, None, Some(names), Some(kinds), Some(skipped), Some(truncated)) => {
                Listing { names, kinds, skipped, truncated }
            }
            _ => return Err(self.fail(FsError::protocol("a list was answered without names"))),
        };
        if listing.names.len() as u64 > max {
            let n = listing.names.len();
            return Err(self.fail(FsError::protocol(format!("{n} names answered a list of at most {max}"))));
        }
        Ok(listing)
    }

    /// A request for `op` on `root`/`path` with no other field (its id is
    /// set when it is sent).
    fn request(&self, op: Op, root: &str, path: &str) -> Request {
        Request {
            id: 0,
            op,
            root: root.to_string(),
            path: path.to_string(),
            max: None,
            offset: None,
            version: None,
            stream: None,
        }
    }

    /// One exchange of a message request whose answer carries no data.
    fn call(&mut self, request: Request) -> Result<Response, FsError> {
        self.call_with(request, None)
    }

    /// One exchange of a request (in a data frame with `data`) whose
    /// answer carries no data.
    fn call_with(&mut self, request: Request, data: Option<&[u8]>) -> Result<Response, FsError> {
        // `validate` (in `exchange`) refused data on an answer that carries none.
        Ok(self.exchange(request, data)?.0)
    }

    /// One exchange: the request out, its answer and the answer's data
    /// back, an `error` answer turned into the peer's [`FsError`].
    fn exchange(&mut self, request: Request, data: Option<&[u8]>) -> Result<(Response, Option<Vec<u8>>), FsError> {
        let id = self.send(request, data)?;
        self.receive(id)
    }

    /// Sends the request with the next id (a data frame with `data`: its
    /// head and the payload in one vectored write); returns the id.
    fn send(&mut self, request: Request, data: Option<&[u8]>) -> Result<u64, FsError> {
        if self.broken {
            return Err(FsError::protocol("the connection failed earlier and is unusable"));
        }
        let id = self.ids.next();
        let op = request.op;
        let head = match frame_head(&Request { id, ..request }, data) {
            Ok(head) if head.len() - 4 + data.map_or(0, <[u8]>::len) <= MAX_FRAME => head,
            // Nothing was sent: the connection is still in step.
            _ => {
                return Err(FsError::protocol(format!(
                    "the {} request is over the {MAX_FRAME}-byte frame limit",
                    op.as_str()
                )))
            }
        };
        write_parts(&mut self.stream, &[&head, data.unwrap_or_default()])
            .map_err(|e| self.fail(FsError::io(format!("sending the request: {e}"))))?;
        Ok(id)
    }

    /// The next answer, which must be to the request `id`, and its data.
    fn receive(&mut self, id: u64) -> Result<(Response, Option<Vec<u8>>), FsError> {
        let answer = match read_frame(&mut self.stream, MAX_FRAME) {
            Ok(Some(a)) => a,
            Ok(None) => return Err(self.fail(FsError::io("airlock closed the connection before answering"))),
            Err(e) => return Err(self.fail(e.into())),
        };
        let (response, data) = decode_body::<Response>(&answer).map_err(|e| self.fail(e.into()))?;
        response.validate(data).map_err(|e| self.fail(e.into()))?;
        if response.id != id {
            return Err(self.fail(FsError::protocol(format!("answer to call {} arrived for call {id}", response.id))));
        }
        match response.error {
            Some(e) => Err(FsError { code: e.code, message: e.message }),
            None => Ok((response, data.map(<[u8]>::to_vec))),
        }
    }

    /// Marks the connection unusable and passes `e` on.
    fn fail(&mut self, e: FsError) -> FsError {
        self.broken = true;
        e
    }
}

/// Writes what was read to `out`.
fn write_out(out: &mut impl Write, bytes: &[u8]) -> Result<(), FsError> {
    out.write_all(bytes).map_err(|e| FsError::io(format!("writing what was read: {e}")))
}

/// Reads from `src` until `buf` is full or the input ends; the bytes read.
fn fill(src: &mut impl Read, buf: &mut [u8]) -> Result<usize, FsError> {
    let mut got = 0;
    while got < buf.len() {
        match src.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FsError::io(format!("reading the data to write: {e}"))),
        }
    }
    Ok(got)
}

/// A descriptor number: decimal digits only, no sign, no leading zeros
/// (beyond `0` itself), within `i32`.
fn parse_fd(raw: &str) -> Option<i32> {
    let ok = !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()) && (raw == "0" || !raw.starts_with('0'));
    ok.then(|| raw.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_numbers_are_plain_decimals() {
        assert_eq!(parse_fd("3"), Some(3));
        assert_eq!(parse_fd("0"), Some(0));
        assert_eq!(parse_fd("2147483647"), Some(i32::MAX));
        for bad in ["", "03", "+3", "-3", " 3", "3 ", "0x3", "2147483648", "three"] {
            assert_eq!(parse_fd(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_descriptor_that_is_not_a_socket_is_refused() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let err = Client::from_fd(OwnedFd::from(file)).unwrap_err();
        assert_eq!(err.code, "broker.io");
    }
}
