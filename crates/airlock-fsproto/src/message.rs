//! The messages. Every type rejects unknown fields; the `validate` methods
//! reject fields that do not belong to the operation named, so a message
//! has exactly one accepted shape per operation.

use serde::{Deserialize, Serialize};

use crate::frame::ProtoError;
use crate::{codes, MAX_ID, MAX_IO_BYTES, MAX_LIST_NAMES, MAX_OFFSET, VERSION_LEN};

/// Refuses `value` over `max` in `field` with `code`.
fn at_most(field: &'static str, value: u64, max: u64, code: &'static str) -> Result<(), ProtoError> {
    if value > max {
        return Err(ProtoError::OutOfRange { field, value, max, code });
    }
    Ok(())
}

/// Refuses a data frame's payload over [`MAX_IO_BYTES`] (`broker.limit`).
fn check_data(data: Option<&[u8]>) -> Result<(), ProtoError> {
    at_most("data", data.map_or(0, |d| d.len() as u64), MAX_IO_BYTES, codes::LIMIT)
}

/// A worker's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Read up to `max` bytes of a regular file from `offset` (default 0).
    Read,
    /// Create or replace a regular file with the bytes of its data frame.
    Write,
    /// List up to `max` names of a directory.
    List,
    /// Start a chunked write of `path`: answers a `stream` number.
    WriteOpen,
    /// Append the bytes of its data frame to the chunked write `stream`.
    WriteAppend,
    /// Make the chunked write `stream` the content of its path.
    WriteCommit,
    /// Drop the chunked write `stream` unnamed.
    WriteAbort,
}

impl Op {
    /// The lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::List => "list",
            Op::WriteOpen => "write_open",
            Op::WriteAppend => "write_append",
            Op::WriteCommit => "write_commit",
            Op::WriteAbort => "write_abort",
        }
    }

    /// Whether the request comes in a data frame (write, write_append).
    pub fn carries_data(self) -> bool {
        matches!(self, Op::Write | Op::WriteAppend)
    }

    /// Whether the operation needs the `w` right (every write step).
    pub fn writes(self) -> bool {
        !matches!(self, Op::Read | Op::List)
    }
}

/// What a listed entry is (never followed: a link is `link`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Link,
    /// A FIFO, socket or device.
    Other,
}

impl EntryKind {
    /// The lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Link => "link",
            EntryKind::Other => "other",
        }
    }
}

/// Checks a read's `version`: [`VERSION_LEN`] lower-case hex digits.
fn check_version(version: Option<&str>) -> Result<(), ProtoError> {
    match version {
        Some(v) if v.len() != VERSION_LEN || !v.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => {
            Err(ProtoError::Malformed(format!("version must be {VERSION_LEN} lower-case hex digits")))
        }
        _ => Ok(()),
    }
}

/// Worker → airlock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Strictly greater than every id before it on this connection.
    pub id: u64,
    /// The operation.
    pub op: Op,
    /// A root name granted to the submission.
    pub root: String,
    /// Relative to the root.
    pub path: String,
    /// Read and list: the most bytes or names wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    /// Read: where to start (absent: 0), at most [`MAX_OFFSET`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Read: the `version` an earlier frame of the same file answered; a
    /// file whose version differs now is refused (`broker.changed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// write_append, write_commit, write_abort: the number `write_open`
    /// answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<u64>,
}

impl Request {
    /// Checks the fields present match the operation (`max` for read, with
    /// `offset` and `version` optional; `max` for list; a data frame for
    /// write; nothing for write_open; `stream` and a data frame for
    /// write_append; `stream` for write_commit and write_abort), the id,
    /// stream and offset are at most [`MAX_ID`] / [`MAX_OFFSET`]
    /// (`broker.protocol`), a version is well formed, and `max` or the
    /// data within the operation's limit: [`MAX_IO_BYTES`] for a read or
    /// the data, [`MAX_LIST_NAMES`] for a list (`broker.limit`). `data` is
    /// the data frame's payload, `None` when the request came as a message.
    pub fn validate(&self, data: Option<&[u8]>) -> Result<(), ProtoError> {
        let (m, o, v, d, s) =
            (self.max.is_some(), self.offset.is_some(), self.version.is_some(), data.is_some(), self.stream.is_some());
        let ok = match self.op {
            Op::Read => m && !d && !s,
            Op::List => m && !o && !v && !d && !s,
            Op::Write => !m && !o && !v && d && !s,
            Op::WriteOpen => !m && !o && !v && !d && !s,
            Op::WriteAppend => !m && !o && !v && d && s,
            Op::WriteCommit | Op::WriteAbort => !m && !o && !v && !d && s,
        };
        if !ok {
            return Err(ProtoError::Malformed(format!("fields do not match the {} operation", self.op.as_str())));
        }
        at_most("id", self.id, MAX_ID, codes::PROTOCOL)?;
        at_most("stream", self.stream.unwrap_or(0), MAX_ID, codes::PROTOCOL)?;
        at_most("offset", self.offset.unwrap_or(0), MAX_OFFSET, codes::PROTOCOL)?;
        check_version(self.version.as_deref())?;
        check_data(data)?;
        match (self.op, self.max) {
            (Op::Read, Some(max)) => at_most("max", max, MAX_IO_BYTES, codes::LIMIT),
            (Op::List, Some(max)) => at_most("max", max, MAX_LIST_NAMES, codes::LIMIT),
            _ => Ok(()),
        }
    }
}

/// A refusal or failure: a stable code and a message for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// Stable reason code (see [`crate::codes`] and the `path.*` codes).
    pub code: String,
    /// What happened.
    pub message: String,
}

/// Airlock → worker. Exactly one of: `size`, `eof` and `version` in a
/// data frame whose payload is the bytes (read), `written` (write, write_append: the stream's bytes so
/// far, write_commit), `names` with `kinds`, `skipped` and `truncated`
/// (list), `stream` (write_open), `aborted` (write_abort), `error`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Response {
    /// The request's id.
    pub id: u64,
    /// Read: the file's size when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Read: these bytes reach the end of the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eof: Option<bool>,
    /// Read: the file's version (identity, size and change time, hashed);
    /// send it back with the next frame's read to be refused
    /// (`broker.changed`) if the file changed in between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Write, write_append, write_commit: bytes written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<u64>,
    /// List: valid names, sorted by bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
    /// List: what each name is, in the same order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<EntryKind>>,
    /// List: entries left out because their names break the path rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<u64>,
    /// List: more names existed than `max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// write_open: the number naming the chunked write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<u64>,
    /// write_abort: dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted: Option<bool>,
    /// The operation failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl Response {
    /// A failure answer.
    pub fn error(id: u64, code: &str, message: impl Into<String>) -> Response {
        Response { id, error: Some(ErrorBody { code: code.into(), message: message.into() }), ..Response::default() }
    }

    /// Checks exactly one result group (or `error`) is present, a read's
    /// came in a data frame (`data`, its payload; `None` for a message) and
    /// nothing else did, and the id is at most [`MAX_ID`].
    pub fn validate(&self, data: Option<&[u8]>) -> Result<(), ProtoError> {
        at_most("id", self.id, MAX_ID, codes::PROTOCOL)?;
        at_most("stream", self.stream.unwrap_or(0), MAX_ID, codes::PROTOCOL)?;
        check_data(data)?;
        let read_parts = [data.is_some(), self.size.is_some(), self.eof.is_some(), self.version.is_some()];
        let list_parts = [self.names.is_some(), self.kinds.is_some(), self.skipped.is_some(), self.truncated.is_some()];
        let (read, list) = (read_parts.iter().all(|p| *p), list_parts.iter().all(|p| *p));
        let partial = (!read && read_parts.iter().any(|p| *p)) || (!list && list_parts.iter().any(|p| *p));
        let groups =
            [read, self.written.is_some(), list, self.stream.is_some(), self.aborted.is_some(), self.error.is_some()];
        if groups.iter().filter(|g| **g).count() != 1 || partial {
            return Err(ProtoError::Malformed("a response must hold exactly one result or an error".into()));
        }
        if let (Some(names), Some(kinds)) = (&self.names, &self.kinds) {
            if names.len() != kinds.len() {
                return Err(ProtoError::Malformed("a list must give one kind per name".into()));
            }
        }
        check_version(self.version.as_deref())
    }
}

/// An airlock → broker operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BrokerOp {
    /// Read up to `max` bytes from `offset` of a regular file with one link.
    Read,
    /// List up to `max` names.
    List,
    /// Write the data frame's bytes into a private unnamed file in the target's directory
    /// and sync it; answer its identity. Nothing is named yet.
    WritePrepare,
    /// Link the prepared file (`prepared` = the prepare's id) under the
    /// staging name `stage`, rename it over the target, sync the directory.
    WriteCommit,
    /// Drop a prepared file unnamed.
    WriteAbort,
    /// Like `write_prepare` with no bytes yet: a private unnamed file in
    /// the target's directory, answered by its identity.
    WriteOpen,
    /// Append the data frame's bytes to the opened file `prepared`; answers
    /// the bytes so far.
    WriteAppend,
}

/// Airlock → broker. Roots are indices into the broker's handles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerRequest {
    /// Strictly increasing.
    pub id: u64,
    /// The operation.
    pub op: BrokerOp,
    /// Index of the root handle.
    pub root: u32,
    /// Relative to the root (`read`, `list`, `write_prepare`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `read`, `list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    /// `read`: where to start (absent: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// `write_commit`, `write_abort`, `write_append`: the prepare's (or
    /// open's) id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared: Option<u64>,
    /// `write_commit`: the staging name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// `read`, `write_open`: also pass the opened file's descriptor with
    /// the answer (a read's only when it did not reach the end), so
    /// airlock moves the rest of a stream's bytes itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<bool>,
}

impl BrokerRequest {
    /// Checks the fields present match the operation (`write_prepare` and
    /// `write_append` come in a data frame, `data` its payload, the others
    /// as messages, `data` `None`) and the ids (`id`, `prepared`) are at
    /// most [`MAX_ID`]. `max` and the data's size are the broker's to
    /// refuse (`broker.limit`): airlock, the only sender, checked them
    /// already.
    pub fn validate(&self, data: Option<&[u8]>) -> Result<(), ProtoError> {
        at_most("id", self.id, MAX_ID, codes::PROTOCOL)?;
        at_most("prepared", self.prepared.unwrap_or(0), MAX_ID, codes::PROTOCOL)?;
        at_most("offset", self.offset.unwrap_or(0), MAX_OFFSET, codes::PROTOCOL)?;
        let (p, m, d, pr, s) =
            (self.path.is_some(), self.max.is_some(), data.is_some(), self.prepared.is_some(), self.stage.is_some());
        let (o, h) = (self.offset.is_some(), self.handle.is_some());
        let ok = match self.op {
            BrokerOp::Read => p && m && !d && !pr && !s,
            BrokerOp::List => p && m && !o && !d && !pr && !s && !h,
            BrokerOp::WritePrepare => p && !m && !o && d && !pr && !s && !h,
            BrokerOp::WriteOpen => p && !m && !o && !d && !pr && !s,
            BrokerOp::WriteAppend => !p && !m && !o && d && pr && !s && !h,
            BrokerOp::WriteCommit => !p && !m && !o && !d && pr && s && !h,
            BrokerOp::WriteAbort => !p && !m && !o && !d && pr && !s && !h,
        };
        if ok {
            Ok(())
        } else {
            Err(ProtoError::Malformed(format!("fields do not match the {:?} operation", self.op)))
        }
    }
}

/// What a prepared write made: the directory it will be named in and the
/// unnamed file, by `(dev, ino)`, and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteIdentity {
    /// Device of the target's directory.
    pub dir_dev: u64,
    /// Inode of the target's directory.
    pub dir_ino: u64,
    /// Device of the prepared file.
    pub file_dev: u64,
    /// Inode of the prepared file.
    pub file_ino: u64,
    /// Bytes written and synced.
    pub bytes: u64,
}

/// What a read saw of its file: identity, size and change time, the same
/// before and after the bytes were read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadStamp {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_size`.
    pub size: u64,
    /// `st_ctime` seconds.
    pub ctime: i64,
    /// `st_ctime` nanoseconds.
    pub ctime_nsec: u32,
}

/// Broker → airlock. A read's answer is a data frame (the bytes after
/// this header); every other answer a message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerResponse {
    /// The request's id.
    pub id: u64,
    /// `read` (a data frame whose payload is the bytes): the file as read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<ReadStamp>,
    /// `list`: valid names, sorted by bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
    /// `list`: each name's kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<EntryKind>>,
    /// `list`: names left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<u64>,
    /// `list`: more names existed than `max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// `write_prepare`, `write_open`: the prepared file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<WriteIdentity>,
    /// `write_commit`: bytes now at the target; `write_append`: bytes so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<u64>,
    /// `write_abort`: dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted: Option<bool>,
    /// `read`, `write_open` asked with `handle`: the opened file's
    /// descriptor came with this answer (`SCM_RIGHTS` on its first byte).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<bool>,
    /// The operation failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl BrokerResponse {
    /// A failure answer.
    pub fn error(id: u64, code: &str, message: impl Into<String>) -> BrokerResponse {
        BrokerResponse {
            id,
            error: Some(ErrorBody { code: code.into(), message: message.into() }),
            ..BrokerResponse::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, encode};

    #[test]
    fn requests_are_strict() {
        let r: Request = decode(br#"{"id":1,"op":"read","root":"data","path":"a.txt","max":10}"#).unwrap();
        r.validate(None).unwrap();
        assert_eq!(decode::<Request>(&encode(&r)).unwrap(), r);
        // Unknown field, unknown op, wrong type, missing field, surplus field for the op.
        for bad in [
            &br#"{"id":1,"op":"read","root":"d","path":"a","max":1,"x":1}"#[..],
            br#"{"id":1,"op":"delete","root":"d","path":"a","max":1}"#,
            br#"{"id":"1","op":"read","root":"d","path":"a","max":1}"#,
            br#"{"id":-1,"op":"read","root":"d","path":"a","max":1}"#,
            br#"{"op":"read","root":"d","path":"a","max":1}"#,
            br#"{"id":1,"op":"read","root":"d","path":"a","max":1,"max":2}"#,
            // Data travels only in a data frame's payload, never as a field.
            br#"{"id":1,"op":"read","root":"d","path":"a","max":1,"data":""}"#,
            br#"{"id":1,"op":"write","root":"d","path":"a","data":"YQ=="}"#,
        ] {
            assert!(decode::<Request>(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let surplus: Request = decode(br#"{"id":1,"op":"read","root":"d","path":"a","max":1}"#).unwrap();
        assert!(surplus.validate(Some(b"")).is_err(), "a read carries no data");
        let offset: Request = decode(br#"{"id":1,"op":"read","root":"d","path":"a","max":1,"offset":9}"#).unwrap();
        offset.validate(None).unwrap();
        let (none, some): (Option<&[u8]>, Option<&[u8]>) = (None, Some(b"x"));
        for (bad, data) in [
            (&br#"{"id":1,"op":"list","root":"d","path":".","max":1,"offset":1}"#[..], none),
            (br#"{"id":1,"op":"read","root":"d","path":"a","max":1,"version":"zz"}"#, none),
            (br#"{"id":1,"op":"write_open","root":"d","path":"a"}"#, some),
            (br#"{"id":1,"op":"write_append","root":"d","path":"a"}"#, some),
            (br#"{"id":1,"op":"write_append","root":"d","path":"a","stream":1}"#, none),
            (br#"{"id":1,"op":"write_commit","root":"d","path":"a"}"#, none),
            (br#"{"id":1,"op":"write_abort","root":"d","path":"a","stream":1}"#, some),
            (br#"{"id":1,"op":"write_commit","root":"d","path":"a","stream":9007199254740992}"#, none),
            (br#"{"id":1,"op":"read","root":"d","path":"a","max":1,"offset":9007199254740992}"#, none),
        ] {
            let r: Request = decode(bad).unwrap();
            assert!(r.validate(data).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        for (good, data) in [
            (&br#"{"id":1,"op":"write_open","root":"d","path":"a"}"#[..], none),
            (br#"{"id":1,"op":"write_append","root":"d","path":"a","stream":1}"#, some),
            (br#"{"id":1,"op":"write_append","root":"d","path":"a","stream":1}"#, Some(&b""[..])),
            (br#"{"id":1,"op":"write_commit","root":"d","path":"a","stream":1}"#, none),
            (br#"{"id":1,"op":"write_abort","root":"d","path":"a","stream":1}"#, none),
        ] {
            decode::<Request>(good).unwrap().validate(data).unwrap();
        }
        let missing: Request = decode(br#"{"id":1,"op":"write","root":"d","path":"a"}"#).unwrap();
        assert!(missing.validate(None).is_err());
        missing.validate(Some(b"")).unwrap();
        let over = vec![0u8; MAX_IO_BYTES as usize + 1];
        assert_eq!(missing.validate(Some(&over)).map_err(|e| e.code()), Err(codes::LIMIT));
    }

    #[test]
    fn numbers_are_bounded_where_they_are_decoded() {
        let check =
            |text: String| decode::<Request>(text.as_bytes()).and_then(|r| r.validate(None)).map_err(|e| e.code());
        let read = |id: u64, max: u64| format!(r#"{{"id":{id},"op":"read","root":"d","path":"a","max":{max}}}"#);
        let list = |id: u64, max: u64| format!(r#"{{"id":{id},"op":"list","root":"d","path":".","max":{max}}}"#);
        assert_eq!(check(read(MAX_ID, MAX_IO_BYTES)), Ok(()));
        assert_eq!(check(list(1, MAX_LIST_NAMES)), Ok(()));
        assert_eq!(check(read(1, MAX_IO_BYTES + 1)), Err(codes::LIMIT));
        assert_eq!(check(read(1, (1 << 53) + 1)), Err(codes::LIMIT));
        assert_eq!(check(read(1, u64::MAX)), Err(codes::LIMIT));
        assert_eq!(check(list(1, MAX_LIST_NAMES + 1)), Err(codes::LIMIT));
        assert_eq!(check(read(MAX_ID + 1, 1)), Err(codes::PROTOCOL));
        assert_eq!(check(read(u64::MAX, 1)), Err(codes::PROTOCOL));
        assert_eq!(check(r#"{"id":1e300,"op":"read","root":"d","path":"a","max":1}"#.into()), Err(codes::PROTOCOL));
        let over = Response { id: MAX_ID + 1, written: Some(1), ..Default::default() };
        assert_eq!(over.validate(None).map_err(|e| e.code()), Err(codes::PROTOCOL));
    }

    #[test]
    fn responses_hold_one_result() {
        assert!(Response { id: 1, ..Default::default() }.validate(Some(b"hi")).is_err(), "data alone");
        Response::error(2, "broker.denied", "no").validate(None).unwrap();
        assert!(Response::error(2, "broker.denied", "no").validate(Some(b"")).is_err());
        let list = Response {
            id: 3,
            names: Some(vec!["a".into()]),
            kinds: Some(vec![EntryKind::Dir]),
            skipped: Some(0),
            truncated: Some(false),
            ..Default::default()
        };
        list.validate(None).unwrap();
        assert!(list.validate(Some(b"")).is_err(), "a list carries no data");
        assert!(Response { kinds: Some(vec![]), ..list.clone() }.validate(None).is_err(), "one kind per name");
        assert!(Response { kinds: None, ..list }.validate(None).is_err());
        assert!(Response { id: 4, ..Default::default() }.validate(None).is_err());
        assert!(Response { id: 5, names: Some(vec![]), ..Default::default() }.validate(None).is_err());
        let read = Response {
            id: 7,
            size: Some(0),
            eof: Some(true),
            version: Some("0".repeat(crate::VERSION_LEN)),
            ..Default::default()
        };
        read.validate(Some(b"")).unwrap();
        assert!(read.validate(None).is_err(), "a read's answer is a data frame");
        assert!(Response { eof: None, ..read.clone() }.validate(Some(b"")).is_err());
        assert!(Response { version: Some("X".repeat(crate::VERSION_LEN)), ..read.clone() }
            .validate(Some(b""))
            .is_err());
        assert!(Response { stream: Some(1), ..read }.validate(Some(b"")).is_err());
        Response { id: 8, stream: Some(8), ..Default::default() }.validate(None).unwrap();
        Response { id: 9, aborted: Some(true), ..Default::default() }.validate(None).unwrap();
        let two = Response { id: 6, written: Some(1), error: Response::error(6, "x", "y").error, ..Default::default() };
        assert!(two.validate(None).is_err());
    }

    #[test]
    fn broker_requests_have_one_shape_per_op() {
        let commit = BrokerRequest {
            id: 2,
            op: BrokerOp::WriteCommit,
            root: 0,
            path: None,
            max: None,
            offset: None,
            prepared: Some(1),
            stage: Some("s".into()),
            handle: None,
        };
        commit.validate(None).unwrap();
        assert!(
            BrokerRequest { handle: Some(true), ..commit.clone() }.validate(None).is_err(),
            "only a read or an open"
        );
        assert!(commit.validate(Some(b"")).is_err(), "a commit carries no data");
        assert!(BrokerRequest { id: MAX_ID + 1, ..commit.clone() }.validate(None).is_err());
        assert!(BrokerRequest { prepared: Some(MAX_ID + 1), ..commit.clone() }.validate(None).is_err());
        assert!(BrokerRequest { path: Some("a".into()), ..commit.clone() }.validate(None).is_err());
        let append = BrokerRequest { op: BrokerOp::WriteAppend, stage: None, ..commit.clone() };
        append.validate(Some(b"x")).unwrap();
        assert!(append.validate(None).is_err(), "an append needs its data frame");
        assert!(BrokerRequest { op: BrokerOp::WriteAbort, ..commit.clone() }.validate(None).is_err());
        let read = BrokerRequest {
            op: BrokerOp::Read,
            path: Some("a".into()),
            max: Some(1),
            prepared: None,
            stage: None,
            handle: Some(true),
            ..commit
        };
        read.validate(None).unwrap();
        let open = BrokerRequest { op: BrokerOp::WriteOpen, max: None, ..read };
        open.validate(None).unwrap();
    }
}
