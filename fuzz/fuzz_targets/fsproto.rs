//! Fuzzes the named-root protocol as airlock and the broker read it: framing
//! of a byte stream, data frames (header length, header, payload), strict
//! decoding of worker and broker requests, and the broker path rules.
//! Whatever is accepted must be safe by construction.
#![no_main]

use airlock_fsproto::{
    check_path, decode_body, encode_body, read_frame, split, Body, BrokerRequest, Op, Request, DATA_TAG, MAX_DATA_HEADER,
    MAX_FRAME, MAX_ID, MAX_IO_BYTES, MAX_OFFSET, STAGE_PREFIX, VERSION_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A stream of frames: each accepted body is within the bound.
    let mut stream = data;
    while let Ok(Some(body)) = read_frame(&mut stream, MAX_FRAME) {
        assert!(body.len() <= MAX_FRAME);
        // A data frame is split only within its own bounds.
        match split(&body) {
            Ok(Body::Data { header, payload }) => {
                assert_eq!(body[0], DATA_TAG);
                assert!(header.len() <= MAX_DATA_HEADER && payload.len() as u64 <= MAX_IO_BYTES);
                assert_eq!(3 + header.len() + payload.len(), body.len());
            }
            Ok(Body::Message(m)) => assert!(m.first() != Some(&DATA_TAG)),
            Err(_) => assert_eq!(body.first(), Some(&DATA_TAG)),
        }
        if let Ok((req, data)) = decode_body::<Request>(&body) {
            if req.validate(data).is_ok() {
                assert_eq!(data.is_some(), matches!(req.op, Op::Write | Op::WriteAppend));
                // What is accepted re-encodes to a frame that decodes the same.
                let again = encode_body(&req, data).expect("an accepted request re-encodes");
                let (back, back_data) = decode_body::<Request>(&again).expect("and decodes again");
                assert_eq!((back, back_data), (req.clone(), data));
                assert_eq!(req.stream.is_some(), matches!(req.op, Op::WriteAppend | Op::WriteCommit | Op::WriteAbort));
                assert!(req.offset.unwrap_or(0) <= MAX_OFFSET && req.stream.unwrap_or(0) <= MAX_ID);
                assert!(req.version.as_ref().is_none_or(|v| v.len() == VERSION_LEN));
                if let Ok(comps) = check_path(&req.path, req.op == Op::List) {
                    assert!(comps.len() <= 64);
                    for c in comps {
                        assert!(!c.is_empty() && c != "." && c != ".." && !c.contains('/'));
                        assert!(!c.to_ascii_lowercase().starts_with(STAGE_PREFIX));
                    }
                }
            }
        }
        let _ = decode_body::<BrokerRequest>(&body).map(|(r, data)| r.validate(data));
    }
});
