//! Fuzzes the named-root protocol as airlock and the broker read it: framing
//! of a byte stream, strict decoding of worker and broker requests, and the
//! broker path rules. Whatever is accepted must be safe by construction.
#![no_main]

use airlock_fsproto::{
    check_path, decode, read_frame, BrokerRequest, Op, Request, MAX_FRAME, MAX_ID, MAX_OFFSET, STAGE_PREFIX, VERSION_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A stream of frames: each accepted body is within the bound.
    let mut stream = data;
    while let Ok(Some(body)) = read_frame(&mut stream, MAX_FRAME) {
        assert!(body.len() <= MAX_FRAME);
        if let Ok(req) = decode::<Request>(&body) {
            if req.validate().is_ok() {
                assert_eq!(req.data.is_some(), matches!(req.op, Op::Write | Op::WriteAppend));
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
        let _ = decode::<BrokerRequest>(&body).map(|r| r.validate());
    }
});
