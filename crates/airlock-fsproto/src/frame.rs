//! Length-prefixed frames and strict decoding.

use std::io::{self, IoSlice, Read, Write};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{MAX_DEPTH, MAX_FRAME};

/// Why a frame or message was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The peer announced a frame larger than allowed.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// Announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The stream ended inside a frame.
    #[error("the stream ended inside a frame")]
    Truncated,
    /// JSON nested deeper than [`MAX_DEPTH`].
    #[error("message nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// Not UTF-8, not JSON, unknown or missing fields, wrong types.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// A number outside what its field allows: an id over
    /// [`crate::MAX_ID`], a `max` over the operation's limit.
    #[error("{field} is {value}, more than the {max} allowed")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value sent.
        value: u64,
        /// The most the field allows.
        max: u64,
        /// The reason code: [`crate::codes::LIMIT`] for an amount over an
        /// operation's limit, [`crate::codes::PROTOCOL`] otherwise.
        code: &'static str,
    },
    /// Reading or writing the stream failed.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
}

impl ProtoError {
    /// The reason code a peer answers this with: the range's own code for
    /// [`ProtoError::OutOfRange`], [`crate::codes::IO`] for
    /// [`ProtoError::Io`], [`crate::codes::PROTOCOL`] for the rest.
    pub fn code(&self) -> &'static str {
        match self {
            ProtoError::OutOfRange { code, .. } => code,
            ProtoError::Io(_) => crate::codes::IO,
            _ => crate::codes::PROTOCOL,
        }
    }
}

/// Writes one frame: the body's length as `u32` big-endian, then the body,
/// in one `write_all` so concurrent writers on a stream never interleave
/// inside a small frame.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    w.write_all(&framed(body)?)?;
    w.flush()
}

/// Writes `parts` in order as one stream of bytes, with as few vectored
/// writes as the writer allows (one for a frame's head and payload).
pub fn write_parts(w: &mut impl Write, parts: &[&[u8]]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
    let mut slices = &mut slices[..];
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        match w.write_vectored(slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    w.flush()
}

/// `body` with its length prefix, for writers that cannot block (a
/// non-blocking socket written as it drains).
pub fn framed(body: &[u8]) -> io::Result<Vec<u8>> {
    let len = u32::try_from(body.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(body);
    Ok(buf)
}

/// Takes the first whole frame out of `buf` (bytes received so far, for
/// readers that cannot block): `Ok(None)` until one is complete. A length
/// over `max` (and [`MAX_FRAME`]) is refused from the prefix alone.
pub fn take_frame(buf: &mut Vec<u8>, max: usize) -> Result<Option<Vec<u8>>, ProtoError> {
    let Some(prefix) = buf.first_chunk::<4>() else { return Ok(None) };
    let len = u32::from_be_bytes(*prefix) as usize;
    if len > max.min(MAX_FRAME) {
        return Err(ProtoError::TooLarge { len, max: max.min(MAX_FRAME) });
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    let body = buf[4..4 + len].to_vec();
    buf.drain(..4 + len);
    Ok(Some(body))
}

/// Reads one frame of at most `max` body bytes. `Ok(None)` when the stream
/// ends cleanly before a frame starts. The length is checked before any
/// body byte is read or buffer allocated.
pub fn read_frame(r: &mut impl Read, max: usize) -> Result<Option<Vec<u8>>, ProtoError> {
    let mut body = Vec::new();
    Ok(read_frame_into(r, max, &mut body)?.then_some(body))
}

/// Reads one frame of at most `max` body bytes into `body` (which then
/// holds exactly the body): [`read_frame`] for a reader that reuses one
/// buffer, so a stream of frames of one size neither allocates nor zeroes
/// once the first is read. `Ok(false)` when the stream ends cleanly before
/// a frame starts. The length is checked before any body byte is read or
/// the buffer grown.
pub fn read_frame_into(r: &mut impl Read, max: usize, body: &mut Vec<u8>) -> Result<bool, ProtoError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(ProtoError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max.min(MAX_FRAME) {
        return Err(ProtoError::TooLarge { len, max: max.min(MAX_FRAME) });
    }
    body.resize(len, 0);
    r.read_exact(body).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => ProtoError::Truncated,
        _ => ProtoError::Io(e),
    })?;
    Ok(true)
}

/// Decodes one message strictly: UTF-8, nesting at most [`MAX_DEPTH`]
/// (checked on the raw bytes before parsing), then the typed shape, whose
/// types reject unknown fields.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ProtoError> {
    let text = std::str::from_utf8(body).map_err(|_| ProtoError::Malformed("not UTF-8".into()))?;
    if nesting_depth(text) > MAX_DEPTH {
        return Err(ProtoError::TooDeep);
    }
    serde_json::from_str(text).map_err(|e| ProtoError::Malformed(e.to_string()))
}

/// Encodes one message as compact JSON.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    // Our message types hold only strings, integers, booleans and vectors of
    // strings: serialization cannot fail.
    serde_json::to_vec(msg).expect("protocol messages always serialize")
}

/// The deepest bracket nesting outside string literals.
fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bound() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"{\"a\":1}").unwrap();
        write_frame(&mut buf, b"{}").unwrap();
        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r, 1024).unwrap().unwrap(), b"{\"a\":1}");
        assert_eq!(read_frame(&mut r, 1024).unwrap().unwrap(), b"{}");
        assert!(read_frame(&mut r, 1024).unwrap().is_none());

        let mut big = Vec::new();
        write_frame(&mut big, &[b' '; 100]).unwrap();
        assert!(matches!(read_frame(&mut &big[..], 99), Err(ProtoError::TooLarge { len: 100, .. })));
        // A length far past the limit is refused before allocating.
        let huge = u32::MAX.to_be_bytes();
        assert!(matches!(read_frame(&mut &huge[..], usize::MAX), Err(ProtoError::TooLarge { .. })));
        assert!(matches!(read_frame(&mut &buf[..3], 1024), Err(ProtoError::Truncated)));
        assert!(matches!(read_frame(&mut &buf[..6], 1024), Err(ProtoError::Truncated)));
    }

    #[test]
    fn frames_read_into_one_buffer_replace_its_contents() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &[7u8; 300]).unwrap();
        write_frame(&mut buf, b"{}").unwrap();
        write_frame(&mut buf, &[9u8; 200]).unwrap();
        let (mut r, mut body) = (&buf[..], vec![1u8; 1000]);
        assert!(read_frame_into(&mut r, 1024, &mut body).unwrap());
        assert_eq!(body, [7u8; 300]);
        assert!(read_frame_into(&mut r, 1024, &mut body).unwrap());
        assert_eq!(body, b"{}");
        assert!(read_frame_into(&mut r, 1024, &mut body).unwrap());
        assert_eq!(body, [9u8; 200], "no byte of an earlier frame is left");
        assert!(!read_frame_into(&mut r, 1024, &mut body).unwrap());
        let huge = u32::MAX.to_be_bytes();
        let mut untouched = Vec::new();
        assert!(matches!(
            read_frame_into(&mut &huge[..], usize::MAX, &mut untouched),
            Err(ProtoError::TooLarge { .. })
        ));
        assert!(untouched.capacity() == 0, "refused before the buffer grows");
    }

    #[test]
    fn frames_are_taken_from_a_buffer_once_whole() {
        let mut buf = framed(b"{}").unwrap();
        buf.extend_from_slice(&framed(b"[1]").unwrap()[..5]);
        assert_eq!(take_frame(&mut buf, 1024).unwrap().unwrap(), b"{}");
        assert!(take_frame(&mut buf, 1024).unwrap().is_none(), "the second is not whole yet");
        buf.extend_from_slice(b"1]");
        assert_eq!(take_frame(&mut buf, 1024).unwrap().unwrap(), b"[1]");
        assert!(buf.is_empty());
        let mut huge = u32::MAX.to_be_bytes().to_vec();
        assert!(matches!(take_frame(&mut huge, usize::MAX), Err(ProtoError::TooLarge { .. })));
    }

    #[test]
    fn depth_ignores_brackets_in_strings() {
        assert_eq!(nesting_depth(r#"{"a":"[[[{{{\"]]]"}"#), 1);
        assert_eq!(nesting_depth(r#"{"a":[{"b":[]}]}"#), 4);
        assert!(matches!(decode::<serde_json::Value>(br#"{"a":[{"b":[]}]}"#), Err(ProtoError::TooDeep)));
        assert!(matches!(decode::<serde_json::Value>(b"\xff"), Err(ProtoError::Malformed(_))));
    }
}
