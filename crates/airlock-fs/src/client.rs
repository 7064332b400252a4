//! The Rust client: one call at a time over the worker's socket.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use airlock_fsproto::{
    b64_decode, b64_encode, decode, encode, read_frame, write_frame, Op, Request, Response, ENV_FD, MAX_FRAME,
};
use rustix::process::{getpid, pidfd_getfd, pidfd_open, PidfdFlags, PidfdGetfdFlags};

use crate::error::FsError;
use crate::ids::Ids;

/// What a directory listing returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Entry names, sorted by bytes, at most the `max` asked for.
    pub names: Vec<String>,
    /// Entries left out because their names break the path rules.
    pub skipped: u64,
    /// More names existed than `max`.
    pub truncated: bool,
}

/// A connection to airlock over the worker's file-system socket.
///
/// Calls are made one at a time, and the processes sharing the socket must
/// take turns too (a script running `airlock-fs` commands one after
/// another does). After a transport or protocol error the connection is
/// unusable and every later call fails with `broker.protocol`.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    ids: Ids,
    broken: bool,
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
        Client::from_fd(dup)
    }

    /// Connects through `fd`, a connected stream socket.
    pub fn from_fd(fd: OwnedFd) -> Result<Client, FsError> {
        let st = rustix::fs::fstat(&fd).map_err(|e| FsError::io(format!("fstat(fs socket): {e}")))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
            return Err(FsError::io("the file-system descriptor is not a socket"));
        }
        Ok(Client { stream: UnixStream::from(fd), ids: Ids::default(), broken: false })
    }

    /// Reads at most `max` bytes of the regular file `path` in `root`.
    pub fn read(&mut self, root: &str, path: &str, max: u64) -> Result<Vec<u8>, FsError> {
        let r = self.call(Op::Read, root, path, Some(max), None)?;
        let data = match (r.data, r.written, r.names) {
            (Some(d), None, None) => d,
            _ => return Err(self.fail(FsError::protocol("a read was answered without data"))),
        };
        let bytes = b64_decode(&data).map_err(|e| self.fail(e.into()))?;
        if bytes.len() as u64 > max {
            return Err(self.fail(FsError::protocol(format!("{} bytes answered a read of at most {max}", bytes.len()))));
        }
        Ok(bytes)
    }

    /// Creates or replaces the regular file `path` in `root` with `data`.
    /// The size is airlock's to judge; a request too large to frame
    /// ([`MAX_FRAME`](airlock_fsproto::MAX_FRAME)) is refused here with
    /// `broker.protocol` and nothing is sent.
    pub fn write(&mut self, root: &str, path: &str, data: &[u8]) -> Result<(), FsError> {
        let r = self.call(Op::Write, root, path, None, Some(b64_encode(data)))?;
        match (r.data, r.written, r.names) {
            (None, Some(n), None) if n == data.len() as u64 => Ok(()),
            (None, Some(n), None) => {
                Err(self.fail(FsError::protocol(format!("a write of {} bytes was answered with {n}", data.len()))))
            }
            _ => Err(self.fail(FsError::protocol("a write was answered without a byte count"))),
        }
    }

    /// Lists at most `max` entry names of the directory `path` (`.` for the
    /// root itself) in `root`.
    pub fn list(&mut self, root: &str, path: &str, max: u64) -> Result<Listing, FsError> {
        let r = self.call(Op::List, root, path, Some(max), None)?;
        let listing = match (r.data, r.written, r.names, r.skipped, r.truncated) {
            (None, None, Some(names), Some(skipped), Some(truncated)) => Listing { names, skipped, truncated },
            _ => return Err(self.fail(FsError::protocol("a list was answered without names"))),
        };
        if listing.names.len() as u64 > max {
            let n = listing.names.len();
            return Err(self.fail(FsError::protocol(format!("{n} names answered a list of at most {max}"))));
        }
        Ok(listing)
    }

    /// One exchange: the request out, its answer back, an `error` answer
    /// turned into the peer's [`FsError`].
    fn call(
        &mut self,
        op: Op,
        root: &str,
        path: &str,
        max: Option<u64>,
        data: Option<String>,
    ) -> Result<Response, FsError> {
        if self.broken {
            return Err(FsError::protocol("the connection failed earlier and is unusable"));
        }
        let id = self.ids.next();
        let body = encode(&Request { id, op, root: root.to_string(), path: path.to_string(), max, data });
        if body.len() > MAX_FRAME {
            // Nothing was sent: the connection is still in step.
            return Err(FsError::protocol(format!(
                "the {} request is {} bytes, over the {MAX_FRAME}-byte frame limit",
                op.as_str(),
                body.len()
            )));
        }
        write_frame(&mut self.stream, &body)
            .map_err(|e| self.fail(FsError::io(format!("sending the request: {e}"))))?;
        let answer = match read_frame(&mut self.stream, MAX_FRAME) {
            Ok(Some(a)) => a,
            Ok(None) => return Err(self.fail(FsError::io("airlock closed the connection before answering"))),
            Err(e) => return Err(self.fail(e.into())),
        };
        let response: Response = decode(&answer).map_err(|e| self.fail(e.into()))?;
        response.validate().map_err(|e| self.fail(e.into()))?;
        if response.id != id {
            return Err(self.fail(FsError::protocol(format!("answer to call {} arrived for call {id}", response.id))));
        }
        match response.error {
            Some(e) => Err(FsError { code: e.code, message: e.message }),
            None => Ok(response),
        }
    }

    /// Marks the connection unusable and passes `e` on.
    fn fail(&mut self, e: FsError) -> FsError {
        self.broken = true;
        e
    }
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
