//! The broker binary end to end: frames in, frames out, through the jail.

use std::os::unix::process::ExitStatusExt;

use airlock_fsproto::{codes, write_frame, BrokerOp, BrokerRequest, BrokerResponse, DATA_TAG};

use crate::util::{start, Roots, MAIN};

fn req(id: u64, op: BrokerOp, root: u32) -> BrokerRequest {
    BrokerRequest { id, op, root, path: None, max: None, offset: None, prepared: None, stage: None, handle: None }
}

fn read(id: u64, root: u32, path: &str) -> BrokerRequest {
    BrokerRequest { path: Some(path.into()), max: Some(4096), ..req(id, BrokerOp::Read, root) }
}

fn prepare(id: u64, root: u32, path: &str) -> BrokerRequest {
    BrokerRequest { path: Some(path.into()), ..req(id, BrokerOp::WritePrepare, root) }
}

fn stage(n: u8) -> String {
    format!("{}{}", airlock_fsproto::STAGE_PREFIX, format!("{n:02x}").repeat(16))
}

fn code(r: &BrokerResponse) -> &str {
    r.error.as_ref().map_or("ok", |e| e.code.as_str())
}

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

#[test]
fn reads_lists_and_writes_through_the_jail() {
    let roots = Roots::new(&["r", "l", "wl"]);
    std::os::unix::fs::symlink(roots.outside().join("secret"), roots.path(0).join("link")).unwrap();
    let mut b = start(MAIN, &roots);
    let (r, data) = b.call_with(&read(1, 0, "a.txt"), None);
    assert_eq!((code(&r), data.as_deref()), ("ok", Some(&b"root 0"[..])));
    assert_eq!(code(&b.call(&read(2, 0, "link"))), codes::SYMLINK);
    assert_eq!(code(&b.call(&read(3, 1, "a.txt"))), codes::DENIED);
    let l = b.call(&BrokerRequest { path: Some(".".into()), max: Some(10), ..req(4, BrokerOp::List, 1) });
    assert_eq!(l.names.unwrap(), ["a.txt", "sub"]);
    let p = b.call_with(&prepare(5, 2, "a.txt"), Some(b"replaced")).0;
    assert!(p.identity.is_some(), "{p:?}");
    let c = b.call(&BrokerRequest { prepared: Some(5), stage: Some(stage(1)), ..req(6, BrokerOp::WriteCommit, 2) });
    assert_eq!(c.written, Some(8), "{c:?}");
    assert_eq!(std::fs::read(roots.path(2).join("a.txt")).unwrap(), b"replaced");
    let (status, stderr) = b.finish();
    assert_eq!(status.code(), Some(0), "EOF ends the broker cleanly: {stderr}");
    assert_eq!(stderr, "");
    roots.outside_untouched();
}

#[test]
fn a_stream_s_file_is_handed_over_with_the_answer_that_opened_it() {
    let roots = Roots::new(&["r", "w"]);
    let content: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(roots.path(0).join("big"), &content).unwrap();
    let mut b = start(MAIN, &roots);
    // A read that does not reach the end: its file comes with it.
    let first =
        BrokerRequest { path: Some("big".into()), max: Some(4096), handle: Some(true), ..req(1, BrokerOp::Read, 0) };
    let (r, data, fd) = b.call_receiving(&first);
    assert_eq!((code(&r), r.handle, data.as_deref()), ("ok", Some(true), Some(&content[..4096])));
    let fd = fd.expect("the file's descriptor came with the answer");
    let (st, stamp) = (rustix::fs::fstat(&fd).unwrap(), r.stamp.unwrap());
    assert_eq!((st.st_dev, st.st_ino, st.st_size as u64), (stamp.dev, stamp.ino, 10_000));
    let mut rest = vec![0; 10_000 - 4096];
    assert_eq!(rustix::io::pread(&fd, &mut rest, 4096).unwrap(), rest.len());
    assert_eq!(rest, &content[4096..]);
    assert!(rustix::io::write(&fd, b"x").is_err(), "handed over read-only");
    // A read that reaches the end, or one not asking, comes alone.
    let whole = BrokerRequest { path: Some("a.txt".into()), ..first.clone() };
    let (r, _, fd) = b.call_receiving(&BrokerRequest { id: 2, ..whole });
    assert_eq!((code(&r), r.handle, fd.is_none()), ("ok", None, true));
    let (r, _, fd) = b.call_receiving(&BrokerRequest { id: 3, handle: None, ..first });
    assert_eq!((code(&r), r.handle, fd.is_none()), ("ok", None, true));
    // A chunked write's unnamed file: airlock appends, the broker names it.
    let open = BrokerRequest { path: Some("new".into()), handle: Some(true), ..req(4, BrokerOp::WriteOpen, 1) };
    let (r, _, fd) = b.call_receiving(&open);
    let (identity, fd) = (r.identity.unwrap(), fd.expect("the unnamed file came with the open"));
    let st = rustix::fs::fstat(&fd).unwrap();
    assert_eq!((st.st_dev, st.st_ino, st.st_size), (identity.file_dev, identity.file_ino, 0));
    assert_eq!(rustix::io::pwrite(&fd, b"appended here", 0).unwrap(), 13);
    assert!(!roots.path(1).join("new").exists(), "nothing is named before the commit");
    let c = b.call(&BrokerRequest { prepared: Some(4), stage: Some(stage(2)), ..req(5, BrokerOp::WriteCommit, 1) });
    assert_eq!(c.written, Some(13), "the commit counts what the file holds: {c:?}");
    assert_eq!(std::fs::read(roots.path(1).join("new")).unwrap(), b"appended here");
    let (status, stderr) = b.finish();
    assert_eq!(status.code(), Some(0), "{stderr}");
    roots.outside_untouched();
}

#[test]
fn a_protocol_error_ends_the_broker_with_a_failure() {
    let roots = Roots::new(&["r"]);
    let mut b = start(MAIN, &roots);
    write_frame(&mut b.sock, br#"{"id":7,"op":"read","root":0,"path":"a.txt"}"#).unwrap();
    let (r, _) = b.response().expect("the protocol error is answered");
    assert_eq!((r.id, code(&r)), (7, codes::PROTOCOL));
    assert!(b.response().is_none(), "then the broker is gone");
    let (status, stderr) = b.finish();
    assert_eq!(status.code(), Some(airlock_broker::EXIT_PROTOCOL), "{stderr}");
}

#[test]
fn writes_not_committed_vanish_with_the_broker() {
    let roots = Roots::new(&["w", "w"]);
    let before = (names(&roots.path(0)), names(&roots.path(1)));
    let mut b = start(MAIN, &roots);
    assert_eq!(code(&b.call_with(&prepare(1, 0, "a.txt"), Some(b"never")).0), "ok");
    assert_eq!(code(&b.call_with(&prepare(2, 0, "new"), Some(b"never")).0), "ok");
    let (status, _) = b.finish();
    assert_eq!(status.code(), Some(0));
    let mut b = start(MAIN, &roots);
    assert_eq!(code(&b.call_with(&prepare(1, 1, "new"), Some(b"never")).0), "ok");
    b.process.kill().unwrap();
    let status = b.process.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert_eq!((names(&roots.path(0)), names(&roots.path(1))), before, "nothing was named");
    assert_eq!(std::fs::read(roots.path(0).join("a.txt")).unwrap(), b"root 0");
}

#[test]
fn dropping_the_handle_kills_and_reaps_the_broker() {
    let roots = Roots::new(&["r"]);
    let b = start(MAIN, &roots);
    let pid = b.process.id();
    drop(b);
    // Reaped: waiting for it again finds no such child.
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    let again = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
    assert_eq!(again.err(), Some(rustix::io::Errno::CHILD), "the broker was killed and reaped on drop");
}

/// The jail's `RLIMIT_FSIZE` (64 KiB + 1) and the frame limit leave room
/// for the largest read and write the protocol allows.
#[test]
fn the_largest_read_and_write_pass_through_the_jail() {
    let max = airlock_fsproto::MAX_IO_BYTES as usize;
    let roots = Roots::new(&["rw"]);
    let big: Vec<u8> = (0..max + 100).map(|i| (i % 251) as u8).collect();
    std::fs::write(roots.path(0).join("big"), &big).unwrap();
    let mut b = start(MAIN, &roots);
    let (_, data) = b.call_with(&BrokerRequest { max: Some(max as u64), ..read(1, 0, "big") }, None);
    assert_eq!(data.unwrap(), big[..max]);
    let p = b.call_with(&prepare(2, 0, "out"), Some(&big[..max])).0;
    assert_eq!(p.identity.map(|i| i.bytes), Some(max as u64), "{p:?}");
    let c = b.call(&BrokerRequest { prepared: Some(2), stage: Some(stage(2)), ..req(3, BrokerOp::WriteCommit, 0) });
    assert_eq!(c.written, Some(max as u64), "{c:?}");
    // A data frame over the limit breaks the frame grammar: airlock never
    // sends one, so the broker answers it as a protocol error and ends.
    let header = br#"{"id":4,"op":"write_prepare","root":0,"path":"out2"}"#;
    let over = [&[DATA_TAG, 0, header.len() as u8][..], header, &big[..max + 1]].concat();
    write_frame(&mut b.sock, &over).unwrap();
    let answer = b.response().expect("the protocol error is answered").0;
    assert_eq!(code(&answer), codes::PROTOCOL, "{answer:?}");
    let (status, stderr) = b.finish();
    assert_eq!(status.code(), Some(airlock_broker::EXIT_PROTOCOL), "{stderr}");
    assert_eq!(std::fs::read(roots.path(0).join("out")).unwrap(), big[..max]);
    assert!(!roots.path(0).join("out2").exists());
}
