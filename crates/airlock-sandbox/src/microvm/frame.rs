//! The microVM tier's byte protocol, shared by the host and the guest init:
//! length-prefixed frames over one byte stream (a virtio-serial port on the
//! guest side, the VMM's Unix socket on the host side).
//!
//! A frame is a 4-byte big-endian length `n` (at most [`MAX_FRAME`]), then
//! `n` bytes: one kind byte and the payload. Control messages are JSON;
//! file bytes travel in [`Kind::Data`] frames after a header that gives
//! their size and SHA-256, and the receiver checks both before it keeps
//! anything ([`recv_file`]).
//!
//! The conversation (version [`PROTOCOL_VERSION`]):
//! 1. guest → host [`Kind::Hello`] ([`Hello`]: protocol version, guest build
//!    fingerprint). The host refuses another version or fingerprint.
//! 2. host → guest [`Kind::Call`] ([`GuestCall`]), then each input's bytes
//!    as data frames, in the order of [`GuestCall::inputs`].
//! 3. guest → host [`Kind::Stdout`] / [`Kind::Stderr`] chunks while the tool
//!    runs, then [`Kind::Result`] ([`GuestResult`]); when the result says
//!    the output is exported, its bytes follow as data frames; then
//!    [`Kind::End`]. A guest that cannot run the call sends [`Kind::Error`].
//!    A call on a terminal ([`GuestCall::tty`], version 2): the tool's
//!    standard streams are a pty in the guest, whose output comes as
//!    [`Kind::Stdout`]; meanwhile the host sends [`Kind::Stdin`] chunks
//!    (written to the terminal) and at most one [`Kind::Hangup`] (the tool's
//!    process group gets `SIGHUP`, as from a pty whose master is closed).
#![forbid(unsafe_code)]

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::outcome::ExitStatusKind;
use crate::spec::WorkerLimits;

/// The protocol version both sides must speak.
pub const PROTOCOL_VERSION: u32 = 2;

/// The vsock port the guest init connects to on the host (CID 2) when the
/// VMM offers a vsock instead of a virtio-serial port (Firecracker).
pub const VSOCK_PORT: u32 = 1024;

/// The most bytes of one frame (kind byte and payload).
pub const MAX_FRAME: usize = (1 << 20) + 1;

/// Bytes of file data per [`Kind::Data`] frame.
pub const CHUNK: usize = 1 << 20;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Guest → host: [`Hello`].
    Hello = 1,
    /// Host → guest: [`GuestCall`].
    Call = 2,
    /// File bytes (inputs host → guest, the output guest → host).
    Data = 3,
    /// Guest → host: a chunk of the tool's stdout.
    Stdout = 4,
    /// Guest → host: a chunk of the tool's stderr.
    Stderr = 5,
    /// Guest → host: [`GuestResult`].
    Result = 6,
    /// Guest → host: the call is over, the guest powers off.
    End = 7,
    /// Guest → host: [`GuestError`], the call could not run.
    Error = 8,
    /// Host → guest, a call on a terminal only: bytes typed at the tool.
    Stdin = 9,
    /// Host → guest, a call on a terminal only: the terminal hung up.
    Hangup = 10,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Call,
            3 => Kind::Data,
            4 => Kind::Stdout,
            5 => Kind::Stderr,
            6 => Kind::Result,
            7 => Kind::End,
            8 => Kind::Error,
            9 => Kind::Stdin,
            10 => Kind::Hangup,
            _ => return None,
        })
    }
}

/// The guest's first frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The protocol version the guest speaks.
    pub protocol: u32,
    /// The guest build's fingerprint (the SHA-256 of the airlock binary the
    /// initramfs was built from, recorded by the build script).
    pub fingerprint: String,
}

/// One staged file announced before its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileHeader {
    /// The virtual path, relative to the working directory.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// The SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
}

/// The call the host asks the guest to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestCall {
    /// The command.
    pub argv: Vec<String>,
    /// The tool's whole environment.
    pub env: Vec<(String, String)>,
    /// Where the tool starts; the inputs and output live beneath it.
    pub working_dir: String,
    /// The inputs, whose bytes follow this frame in this order.
    pub inputs: Vec<FileHeader>,
    /// The one output's virtual path and the most bytes exported.
    pub output: Option<(String, u64)>,
    /// The limits the guest applies to the tool (`scratch_bytes` sizes `/tmp`).
    pub limits: WorkerLimits,
    /// Milliseconds the tool may run.
    pub timeout_ms: u64,
    /// Bytes of stdout the host keeps (the guest forwards at most one more).
    pub stdout_limit: u64,
    /// Bytes of stderr the host keeps (the guest forwards at most one more).
    pub stderr_limit: u64,
    /// The tool runs on a terminal (a session's worker; see the module).
    #[serde(default)]
    pub tty: bool,
}

/// What the guest says of the output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GuestOutput {
    /// Exported: this header's bytes follow as data frames.
    Exported(FileHeader),
    /// Over the call's `max_bytes`: nothing follows.
    OverLimit,
    /// Refused for this reason: nothing follows.
    Refused(String),
}

/// How the call ended in the guest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestResult {
    /// How the tool ended.
    pub exit: ExitStatusKind,
    /// The guest's deadline passed and it killed everything.
    pub timed_out: bool,
    /// Every process but the guest init was killed and reaped.
    pub cleanup_confirmed: bool,
    /// Total bytes the tool wrote to stdout and stderr (the guest forwards
    /// only the first `limit + 1` of each).
    pub stdout_total: u64,
    /// See `stdout_total`.
    pub stderr_total: u64,
    /// The output, when the call had one.
    pub output: Option<GuestOutput>,
}

/// Why the guest could not run the call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestError {
    /// `exec` when the tool's program could not be executed, else `setup`.
    pub step: String,
    /// The OS error number, when there was one.
    pub errno: Option<i32>,
    /// What went wrong.
    pub message: String,
}

/// Why a frame stream was refused.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream failed or ended early.
    #[error("the frame stream failed: {0}")]
    Io(#[from] io::Error),
    /// A frame is malformed (length, kind, JSON, order, size or hash).
    #[error("a malformed transfer: {0}")]
    Bad(String),
}

fn bad<T>(why: impl Into<String>) -> Result<T, FrameError> {
    Err(FrameError::Bad(why.into()))
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, kind: Kind, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len() + 1)
        .ok()
        .filter(|l| *l as usize <= MAX_FRAME)
        .ok_or_else(|| io::Error::other("frame too large"))?;
    let mut head = [0u8; 5];
    head[..4].copy_from_slice(&len.to_be_bytes());
    head[4] = kind as u8;
    w.write_all(&head)?;
    w.write_all(payload)?;
    w.flush()
}

/// Writes one JSON control frame.
pub fn write_json(w: &mut impl Write, kind: Kind, value: &impl Serialize) -> io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(io::Error::other)?;
    write_frame(w, kind, &bytes)
}

/// Reads one frame: its kind and payload. A length over [`MAX_FRAME`] or an
/// unknown kind is refused before anything is allocated for it.
pub fn read_frame(r: &mut impl Read) -> Result<(Kind, Vec<u8>), FrameError> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head)?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len == 0 || len > MAX_FRAME {
        return bad(format!("a frame of {len} bytes (at most {MAX_FRAME})"));
    }
    let Some(kind) = Kind::from_byte(head[4]) else {
        return bad(format!("unknown frame kind {}", head[4]));
    };
    let mut payload = vec![0u8; len - 1];
    r.read_exact(&mut payload)?;
    Ok((kind, payload))
}

/// Parses a JSON control frame's payload.
pub fn parse<T: for<'de> Deserialize<'de>>(kind: Kind, payload: &[u8]) -> Result<T, FrameError> {
    serde_json::from_slice(payload).or_else(|e| bad(format!("a {kind:?} frame that is not valid: {e}")))
}

/// The SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Sends `size` bytes from `src` as data frames and returns their SHA-256
/// (lowercase hex). Fails if `src` ends early.
pub fn send_file(w: &mut impl Write, src: &mut impl Read, size: u64) -> io::Result<String> {
    let mut hash = Sha256::new();
    let mut left = size;
    let mut buf = vec![0u8; CHUNK.min(usize::try_from(size).unwrap_or(CHUNK)).max(1)];
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        src.read_exact(&mut buf[..want])?;
        hash.update(&buf[..want]);
        write_frame(w, Kind::Data, &buf[..want])?;
        left -= want as u64;
    }
    Ok(hex::encode(hash.finalize()))
}

/// Receives the file `header` announces into `dst`: exactly `header.size`
/// bytes in data frames, at most `max` bytes, whose SHA-256 must be
/// `header.sha256`. On any error `dst` holds a partial copy that the caller
/// must discard.
pub fn recv_file(r: &mut impl Read, dst: &mut impl Write, header: &FileHeader, max: u64) -> Result<(), FrameError> {
    if header.size > max {
        return bad(format!("{:?} announces {} bytes (at most {max})", header.path, header.size));
    }
    let mut hash = Sha256::new();
    let mut got = 0u64;
    while got < header.size {
        let (kind, payload) = read_frame(r)?;
        if kind != Kind::Data {
            return bad(format!("{:?} ended after {got} of {} bytes ({kind:?} frame)", header.path, header.size));
        }
        got += payload.len() as u64;
        if got > header.size {
            return bad(format!("{:?} sent more than the {} bytes it announced", header.path, header.size));
        }
        hash.update(&payload);
        dst.write_all(&payload)?;
    }
    let actual = hex::encode(hash.finalize());
    if actual != header.sha256 {
        return bad(format!("{:?} has SHA-256 {actual}, not the announced {}", header.path, header.sha256));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transfer(bytes: &[u8]) -> (FileHeader, Vec<u8>) {
        let mut wire = Vec::new();
        let sha256 = send_file(&mut wire, &mut &bytes[..], bytes.len() as u64).unwrap();
        assert_eq!(sha256, sha256_hex(bytes));
        (FileHeader { path: "out.txt".into(), size: bytes.len() as u64, sha256 }, wire)
    }

    #[test]
    fn a_file_round_trips_in_chunks() {
        let bytes: Vec<u8> = (0..(CHUNK + 17)).map(|i| (i % 251) as u8).collect();
        let (header, wire) = transfer(&bytes);
        let mut out = Vec::new();
        recv_file(&mut &wire[..], &mut out, &header, u64::MAX).unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn a_flipped_byte_is_refused() {
        let (header, mut wire) = transfer(b"the exported output\n");
        let last = wire.len() - 3;
        wire[last] ^= 0x01;
        let err = recv_file(&mut &wire[..], &mut Vec::new(), &header, u64::MAX).unwrap_err();
        assert!(err.to_string().contains("SHA-256"), "{err}");
    }

    #[test]
    fn truncated_oversized_and_overlong_transfers_are_refused() {
        let (header, wire) = transfer(b"0123456789");
        let err = recv_file(&mut &wire[..wire.len() - 1], &mut Vec::new(), &header, u64::MAX).unwrap_err();
        assert!(matches!(err, FrameError::Io(_)), "{err}");
        let err = recv_file(&mut &wire[..], &mut Vec::new(), &header, 9).unwrap_err();
        assert!(err.to_string().contains("at most 9"), "{err}");
        let short = FileHeader { size: 4, ..header.clone() };
        let err = recv_file(&mut &wire[..], &mut Vec::new(), &short, u64::MAX).unwrap_err();
        assert!(err.to_string().contains("more than"), "{err}");
        let mut huge = Vec::new();
        huge.extend_from_slice(&((MAX_FRAME + 1) as u32).to_be_bytes());
        huge.push(Kind::Data as u8);
        assert!(read_frame(&mut &huge[..]).unwrap_err().to_string().contains("at most"));
    }
}
