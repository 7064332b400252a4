//! Data frames: the bytes a read answers or a write carries, raw, after a
//! small JSON header, in one length-prefixed frame.
//!
//! ```text
//! frame      = length (u32 BE) · body                 length ≤ MAX_FRAME
//! body       = message | data-frame
//! message    = one compact JSON object                (first byte `{`)
//! data-frame = DATA_TAG (0x01) · header length (u16 BE) · header · payload
//! header     = one compact JSON object                ≤ MAX_DATA_HEADER bytes
//! payload    = the rest of the body, raw              ≤ MAX_IO_BYTES bytes
//! ```
//!
//! Why: a 64 KiB frame in base64 inside JSON was encoded and decoded twice
//! on each of the two hops (worker → airlock → broker and back), about
//! four times the work of moving the bytes. A data frame is told from a
//! message by its first byte (`0x01` cannot start JSON), so the frames that
//! carry no data are unchanged. The relay forwards a payload as it came;
//! only the header (ids, root index) is rewritten.
//!
//! Decoding is strict: the header length must fit the body and
//! [`MAX_DATA_HEADER`], the header is decoded like any message (bounded
//! nesting, no unknown fields), and a payload over [`MAX_IO_BYTES`] is
//! refused with `broker.limit` before anything else looks at it. Whether an
//! operation must or must not come in a data frame is the messages'
//! `validate` (`data` is the payload, `None` for a message).

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::frame::{decode, encode, ProtoError};
use crate::{codes, MAX_FRAME, MAX_IO_BYTES};

/// The first byte of a data frame's body.
pub const DATA_TAG: u8 = 0x01;

/// The largest data frame header: whatever a full payload leaves of
/// [`MAX_FRAME`] after the tag and the header length.
pub const MAX_DATA_HEADER: usize = MAX_FRAME - MAX_IO_BYTES as usize - 3;

/// A frame body, told apart by its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    /// A JSON message (decoded by [`decode`]).
    Message(&'a [u8]),
    /// A data frame: its JSON header and its raw payload.
    Data {
        /// The header, one JSON object.
        header: &'a [u8],
        /// The bytes, at most [`MAX_IO_BYTES`].
        payload: &'a [u8],
    },
}

/// Splits a frame body into a message or a data frame's header and
/// payload. A data frame whose header length runs past the body or over
/// [`MAX_DATA_HEADER`] is malformed (`broker.protocol`); a payload over
/// [`MAX_IO_BYTES`] is [`ProtoError::OutOfRange`] with `broker.limit`.
pub fn split(body: &[u8]) -> Result<Body<'_>, ProtoError> {
    let Some((&DATA_TAG, rest)) = body.split_first() else { return Ok(Body::Message(body)) };
    let Some((len, rest)) = rest.split_first_chunk::<2>() else {
        return Err(ProtoError::Malformed("a data frame ends inside its header length".into()));
    };
    let len = usize::from(u16::from_be_bytes(*len));
    if len > MAX_DATA_HEADER {
        return Err(ProtoError::Malformed(format!(
            "a data frame header of {len} bytes is over the {MAX_DATA_HEADER}-byte limit"
        )));
    }
    if len > rest.len() {
        return Err(ProtoError::Malformed(format!(
            "a data frame header of {len} bytes does not fit the {} bytes left in the frame",
            rest.len()
        )));
    }
    let (header, payload) = rest.split_at(len);
    if payload.len() as u64 > MAX_IO_BYTES {
        return Err(ProtoError::OutOfRange {
            field: "data",
            value: payload.len() as u64,
            max: MAX_IO_BYTES,
            code: codes::LIMIT,
        });
    }
    Ok(Body::Data { header, payload })
}

/// Decodes a frame body: the message (a data frame's header) strictly, and
/// the data frame's payload (`None` for a message).
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<(T, Option<&[u8]>), ProtoError> {
    match split(body)? {
        Body::Message(message) => Ok((decode(message)?, None)),
        Body::Data { header, payload } => Ok((decode(header)?, Some(payload))),
    }
}

/// A data frame's body: `header` as compact JSON, then `payload`. Refused
/// ([`ProtoError::TooLarge`]) when the header is over [`MAX_DATA_HEADER`]
/// or the payload over [`MAX_IO_BYTES`], before anything is sent.
pub fn encode_data<T: Serialize>(header: &T, payload: &[u8]) -> Result<Vec<u8>, ProtoError> {
    let header = encode(header);
    if header.len() > MAX_DATA_HEADER {
        return Err(ProtoError::TooLarge { len: header.len(), max: MAX_DATA_HEADER });
    }
    if payload.len() as u64 > MAX_IO_BYTES {
        return Err(ProtoError::TooLarge { len: payload.len(), max: MAX_IO_BYTES as usize });
    }
    let mut body = Vec::with_capacity(3 + header.len() + payload.len());
    body.push(DATA_TAG);
    // At most MAX_DATA_HEADER, which is below u16::MAX.
    body.extend_from_slice(&(header.len() as u16).to_be_bytes());
    body.extend_from_slice(&header);
    body.extend_from_slice(payload);
    Ok(body)
}

/// Everything of a frame but a data frame's payload: the length prefix,
/// then the message, or the tag, the header length and the header. Sent
/// with the payload as a second buffer ([`crate::write_parts`], one
/// `writev`), the payload is never copied. Refused like [`encode_data`].
pub fn frame_head<T: Serialize>(message: &T, payload: Option<&[u8]>) -> Result<Vec<u8>, ProtoError> {
    let header = encode(message);
    let Some(payload) = payload else {
        let mut head = Vec::with_capacity(4 + header.len());
        head.extend_from_slice(&(header.len() as u32).to_be_bytes());
        head.extend_from_slice(&header);
        return Ok(head);
    };
    if header.len() > MAX_DATA_HEADER {
        return Err(ProtoError::TooLarge { len: header.len(), max: MAX_DATA_HEADER });
    }
    if payload.len() as u64 > MAX_IO_BYTES {
        return Err(ProtoError::TooLarge { len: payload.len(), max: MAX_IO_BYTES as usize });
    }
    // At most MAX_FRAME: it fits a u32, and the header length a u16.
    let len = (3 + header.len() + payload.len()) as u32;
    let mut head = Vec::with_capacity(7 + header.len());
    head.extend_from_slice(&len.to_be_bytes());
    head.push(DATA_TAG);
    head.extend_from_slice(&(header.len() as u16).to_be_bytes());
    head.extend_from_slice(&header);
    Ok(head)
}

/// A message or, with `payload`, a data frame: the body to send.
pub fn encode_body<T: Serialize>(message: &T, payload: Option<&[u8]>) -> Result<Vec<u8>, ProtoError> {
    match payload {
        Some(payload) => encode_data(message, payload),
        None => Ok(encode(message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Request, Response};

    fn data_frame(header: &[u8], len: u16, payload: &[u8]) -> Vec<u8> {
        let mut body = vec![DATA_TAG];
        body.extend_from_slice(&len.to_be_bytes());
        body.extend_from_slice(header);
        body.extend_from_slice(payload);
        body
    }

    #[test]
    fn data_frames_round_trip() {
        let header = br#"{"id":7,"size":3,"eof":true,"version":"00000000000000000000000000000000"}"#;
        let body = data_frame(header, header.len() as u16, b"a\x00\xff");
        let (r, payload): (Response, _) = decode_body(&body).unwrap();
        assert_eq!(payload, Some(&b"a\x00\xff"[..]));
        r.validate(payload).unwrap();
        assert_eq!(encode_data(&r, b"a\x00\xff").unwrap(), body);
        // A message stays a message.
        let (m, none): (Request, _) = decode_body(br#"{"id":1,"op":"read","root":"d","path":"a","max":1}"#).unwrap();
        assert_eq!((m.id, none), (1, None));
        // An empty payload is a payload (an empty write).
        let empty = data_frame(header, header.len() as u16, b"");
        assert_eq!(decode_body::<Response>(&empty).unwrap().1, Some(&b""[..]));
    }

    #[test]
    fn a_frame_head_and_its_payload_are_the_framed_body() {
        let header = Response { id: 9, written: Some(3), ..Response::default() };
        for payload in [None, Some(&b""[..]), Some(&b"a\x00\xff"[..])] {
            let mut sent = frame_head(&header, payload).unwrap();
            sent.extend_from_slice(payload.unwrap_or_default());
            assert_eq!(sent, crate::framed(&encode_body(&header, payload).unwrap()).unwrap(), "{payload:?}");
        }
        assert!(frame_head(&header, Some(&vec![0u8; MAX_IO_BYTES as usize + 1])).is_err());
    }

    #[test]
    fn a_truncated_header_is_refused() {
        for body in [&[DATA_TAG][..], &[DATA_TAG, 0][..]] {
            assert!(matches!(split(body), Err(ProtoError::Malformed(_))), "{body:?}");
        }
        let header = br#"{"id":1}"#;
        // The header cut short: what is left is not a whole JSON object.
        let cut = data_frame(&header[..5], 5, b"");
        assert!(matches!(decode_body::<Response>(&cut), Err(ProtoError::Malformed(_))));
    }

    #[test]
    fn a_header_length_that_lies_is_refused() {
        let header = br#"{"id":1,"written":2}"#;
        let long = data_frame(header, header.len() as u16 + 1, b"");
        assert!(matches!(split(&long), Err(ProtoError::Malformed(m)) if m.contains("does not fit")));
        let huge = data_frame(header, u16::MAX, &[b' '; 40_000]);
        assert!(matches!(split(&huge), Err(ProtoError::Malformed(m)) if m.contains("over the")));
        // Shorter than the header: the header is cut, the rest taken as data.
        let short = data_frame(header, header.len() as u16 - 1, b"");
        assert!(decode_body::<Response>(&short).is_err());
        // A header followed by more JSON is still one object, then data.
        let surplus = data_frame(b"{\"id\":1} {}", 11, b"");
        assert!(decode_body::<Response>(&surplus).is_err());
    }

    #[test]
    fn data_over_64_kib_is_refused() {
        let header = br#"{"id":1,"op":"write","root":"d","path":"a"}"#;
        let full = data_frame(header, header.len() as u16, &vec![7u8; MAX_IO_BYTES as usize]);
        let (req, payload): (Request, _) = decode_body(&full).unwrap();
        req.validate(payload).unwrap();
        let over = data_frame(header, header.len() as u16, &vec![7u8; MAX_IO_BYTES as usize + 1]);
        let err = decode_body::<Request>(&over).unwrap_err();
        assert_eq!(err.code(), codes::LIMIT, "{err}");
        assert!(encode_data(&req, &vec![0u8; MAX_IO_BYTES as usize + 1]).is_err());
        let long_path = Request { path: "a".repeat(MAX_DATA_HEADER), ..req };
        assert!(matches!(encode_data(&long_path, b""), Err(ProtoError::TooLarge { .. })));
    }

    #[test]
    fn data_goes_only_with_the_operations_that_carry_it() {
        let read = br#"{"id":1,"op":"read","root":"d","path":"a","max":1}"#;
        let body = data_frame(read, read.len() as u16, b"x");
        let (r, payload): (Request, _) = decode_body(&body).unwrap();
        assert!(r.validate(payload).is_err(), "a read carries no data");
        let (w, none): (Request, _) = decode_body(br#"{"id":1,"op":"write","root":"d","path":"a"}"#).unwrap();
        assert!(w.validate(none).is_err(), "a write needs its data frame");
    }
}
