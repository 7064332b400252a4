//! The request checks and the serve loop, in process (no jail: the jail
//! has its own tests, which run the real binary).

use super::*;
use airlock_fsproto::{decode_body, encode_data, read_frame, DATA_TAG};
use airlock_hostfs::ResolverKind;
use std::fs;
use std::io::Cursor;
use std::path::Path;

fn open_root(path: &Path) -> OwnedFd {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap()
}

/// Roots: 0 = `r`, 1 = `l`, 2 = `w`, 3 = `rwl`, all over their own directory.
fn broker() -> (tempfile::TempDir, Broker) {
    let t = tempfile::tempdir().unwrap();
    let mut roots = Vec::new();
    for (i, rights) in ["r", "l", "w", "rwl"].iter().enumerate() {
        let dir = t.path().join(format!("root{i}"));
        fs::create_dir_all(dir.join("sub")).unwrap();
        fs::write(dir.join("a.txt"), format!("root {i}")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("pw")).unwrap();
        roots.push((open_root(&dir), Rights::parse(rights).unwrap()));
    }
    (t, Broker::new(roots, Resolver::with_kind(ResolverKind::Emulated)))
}

fn req(id: u64, op: BrokerOp, root: u32, path: Option<&str>) -> BrokerRequest {
    BrokerRequest {
        id,
        op,
        root,
        path: path.map(str::to_owned),
        max: None,
        offset: None,
        prepared: None,
        stage: None,
        handle: None,
    }
}

fn read(id: u64, root: u32, path: &str, max: u64) -> BrokerRequest {
    BrokerRequest { max: Some(max), ..req(id, BrokerOp::Read, root, Some(path)) }
}

fn list(id: u64, root: u32, path: &str, max: u64) -> BrokerRequest {
    BrokerRequest { max: Some(max), ..req(id, BrokerOp::List, root, Some(path)) }
}

/// A write_prepare and the payload of its data frame.
fn prepare(id: u64, root: u32, path: &str, data: &[u8]) -> (BrokerRequest, Vec<u8>) {
    (req(id, BrokerOp::WritePrepare, root, Some(path)), data.to_vec())
}

/// A request as the broker gets it: the message (a data frame's header)
/// and the data frame's payload.
trait Call {
    fn parts(&self) -> (&BrokerRequest, Option<&[u8]>);
}

impl Call for BrokerRequest {
    fn parts(&self) -> (&BrokerRequest, Option<&[u8]>) {
        (self, None)
    }
}

impl Call for (BrokerRequest, Vec<u8>) {
    fn parts(&self) -> (&BrokerRequest, Option<&[u8]>) {
        (&self.0, Some(&self.1))
    }
}

/// The broker's response to `call`.
fn ask(b: &mut Broker, call: &impl Call) -> Result<BrokerResponse, Fatal> {
    let (r, data) = call.parts();
    b.handle(r, data).map(|a| a.response)
}

/// The bytes a read answered.
fn read_bytes(b: &mut Broker, r: &BrokerRequest) -> Vec<u8> {
    let answer = b.handle(r, None).unwrap();
    assert_eq!(code(&answer.response), "ok");
    answer.data.expect("a read answers its bytes in a data frame").to_vec()
}

fn fatal(b: &mut Broker, call: &impl Call) -> bool {
    matches!(ask(b, call), Err(Fatal::Protocol(_)))
}

fn commit(id: u64, root: u32, prepared: u64, stage: &str) -> BrokerRequest {
    BrokerRequest { prepared: Some(prepared), stage: Some(stage.into()), ..req(id, BrokerOp::WriteCommit, root, None) }
}

fn abort(id: u64, root: u32, prepared: u64) -> BrokerRequest {
    BrokerRequest { prepared: Some(prepared), ..req(id, BrokerOp::WriteAbort, root, None) }
}

fn stage(n: u8) -> String {
    format!("{}{}", airlock_fsproto::STAGE_PREFIX, format!("{n:02x}").repeat(16))
}

fn code(r: &BrokerResponse) -> &str {
    r.error.as_ref().map_or("ok", |e| e.code.as_str())
}

#[test]
fn each_operation_needs_its_own_right() {
    let (_t, mut b) = broker();
    assert_eq!(read_bytes(&mut b, &read(1, 0, "a.txt", 100)), b"root 0");
    assert_eq!(ask(&mut b, &read(1, 0, "a.txt", 100)).unwrap().id, 1);
    assert_eq!(code(&ask(&mut b, &read(2, 1, "a.txt", 100)).unwrap()), codes::DENIED, "l cannot read");
    assert_eq!(code(&ask(&mut b, &read(3, 2, "a.txt", 100)).unwrap()), codes::DENIED, "w cannot read");
    assert_eq!(code(&ask(&mut b, &list(4, 0, ".", 10)).unwrap()), codes::DENIED, "r cannot list");
    let listed = ask(&mut b, &list(5, 1, ".", 10)).unwrap();
    assert_eq!(listed.names.unwrap(), ["a.txt", "pw", "sub"]);
    assert_eq!((listed.skipped, listed.truncated), (Some(0), Some(false)));
    assert_eq!(code(&ask(&mut b, &prepare(6, 0, "n", b"x")).unwrap()), codes::DENIED, "r cannot write");
    assert_eq!(code(&ask(&mut b, &prepare(7, 1, "n", b"x")).unwrap()), codes::DENIED, "l cannot write");
    assert_eq!(code(&ask(&mut b, &read(8, 9, "a.txt", 1)).unwrap()), codes::DENIED, "no root 9");
    assert_eq!(code(&ask(&mut b, &read(9, u32::MAX, "a.txt", 1)).unwrap()), codes::DENIED);
}

#[test]
fn paths_are_checked_again_here() {
    let (t, mut b) = broker();
    fs::write(t.path().join("root3").join(stage(1)), "staged").unwrap();
    for (path, want) in [
        ("../root0/a.txt", "path.traversal"),
        ("/etc/passwd", "path.absolute"),
        ("sub//x", "path.empty_component"),
        (".", "path.dot_component"),
        (".git/config", "path.control_dir"),
        (stage(1).as_str(), codes::PATH_RESERVED),
        ("pw", codes::SYMLINK),
        ("missing", codes::NOT_FOUND),
        ("sub", codes::NOT_REGULAR),
    ] {
        assert_eq!(code(&ask(&mut b, &read(1, 3, path, 10)).unwrap()), want, "read {path:?}");
    }
    assert_eq!(ask(&mut b, &list(2, 3, ".", 10)).unwrap().skipped, Some(1), "the staging entry is not listed");
    assert_eq!(code(&ask(&mut b, &list(3, 3, "pw", 10)).unwrap()), codes::SYMLINK);
    assert_eq!(code(&ask(&mut b, &prepare(4, 3, "pw", b"x")).unwrap()), codes::SYMLINK);
    assert_eq!(code(&ask(&mut b, &prepare(5, 3, ".", b"x")).unwrap()), "path.dot_component");
    assert_eq!(code(&ask(&mut b, &prepare(6, 3, &stage(1), b"x")).unwrap()), codes::PATH_RESERVED);
    assert_eq!(fs::read(t.path().join("root3").join(stage(1))).unwrap(), b"staged");
}

#[test]
fn limits_are_checked_again_here() {
    let (t, mut b) = broker();
    fs::write(t.path().join("root3/big"), vec![b'b'; MAX_IO_BYTES as usize + 10]).unwrap();
    let full = b.handle(&read(1, 3, "big", MAX_IO_BYTES), None).unwrap();
    assert_eq!(full.data.unwrap().len(), MAX_IO_BYTES as usize);
    let body = encode_data(&full.response, full.data.unwrap()).unwrap();
    assert!(body.len() <= MAX_FRAME, "a full read fits in a frame");
    assert_eq!(code(&ask(&mut b, &read(2, 3, "big", MAX_IO_BYTES + 1)).unwrap()), codes::LIMIT);
    assert_eq!(code(&ask(&mut b, &list(3, 3, ".", MAX_LIST_NAMES + 1)).unwrap()), codes::LIMIT);
    let over = vec![0u8; MAX_IO_BYTES as usize + 1];
    assert_eq!(code(&ask(&mut b, &prepare(4, 3, "o", &over)).unwrap()), codes::LIMIT);
    let exact = vec![7u8; MAX_IO_BYTES as usize];
    assert_eq!(code(&ask(&mut b, &prepare(5, 3, "o", &exact)).unwrap()), "ok");
    for id in 6..(6 + MAX_OUTSTANDING as u64 - 1) {
        assert_eq!(code(&ask(&mut b, &prepare(id, 3, "o", b"x")).unwrap()), "ok");
    }
    assert_eq!(code(&ask(&mut b, &prepare(99, 3, "o", b"x")).unwrap()), codes::LIMIT, "too many outstanding");
    assert_eq!(code(&ask(&mut b, &abort(100, 3, 5)).unwrap()), "ok");
    assert_eq!(code(&ask(&mut b, &prepare(101, 3, "o", b"x")).unwrap()), "ok", "room again after an abort");
    assert!(!t.path().join("root3/o").exists(), "nothing prepared is visible");
}

#[test]
fn a_write_is_prepared_then_committed_or_aborted() {
    let (t, mut b) = broker();
    let root = t.path().join("root2");
    let p = ask(&mut b, &prepare(10, 2, "sub/out.txt", b"hello")).unwrap();
    let id = p.identity.unwrap();
    assert_eq!(id.bytes, 5);
    use std::os::unix::fs::MetadataExt;
    let sub = fs::metadata(root.join("sub")).unwrap();
    assert_eq!((id.dir_dev, id.dir_ino), (sub.dev(), sub.ino()));
    assert!(!root.join("sub/out.txt").exists());
    let c = ask(&mut b, &commit(11, 2, 10, &stage(2))).unwrap();
    assert_eq!(c.written, Some(5));
    let meta = fs::metadata(root.join("sub/out.txt")).unwrap();
    assert_eq!((meta.dev(), meta.ino()), (id.file_dev, id.file_ino), "the prepared inode is the one published");
    assert_eq!(fs::read(root.join("sub/out.txt")).unwrap(), b"hello");
    ask(&mut b, &prepare(12, 2, "a.txt", b"never")).unwrap();
    assert_eq!(ask(&mut b, &abort(13, 2, 12)).unwrap().aborted, Some(true));
    assert_eq!(fs::read(root.join("a.txt")).unwrap(), b"root 2");
    let names: Vec<_> = fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 3, "no staging entry left: {names:?}");
}

#[test]
fn out_of_order_writes_are_protocol_errors() {
    let (_t, mut b) = broker();
    assert!(fatal(&mut b, &commit(1, 3, 77, &stage(3))), "no such prepared write");
    assert!(fatal(&mut b, &abort(2, 3, 77)));
    ask(&mut b, &prepare(3, 3, "x", b"1")).unwrap();
    assert!(fatal(&mut b, &prepare(3, 3, "y", b"2")), "a reused id");
    assert!(fatal(&mut b, &commit(4, 2, 3, &stage(3))), "committed on another root");
    assert!(fatal(&mut b, &commit(5, 3, 3, "plain-name")), "not a staging name");
    assert!(fatal(&mut b, &prepare(6, 3, "z", b"").0), "a write without its data frame");
    assert!(fatal(&mut b, &(read(7, 0, "a.txt", 1), Vec::new())), "a read in a data frame");
    assert!(fatal(&mut b, &req(8, BrokerOp::Read, 0, Some("a.txt"))), "a read without max");
}

/// An in-memory socket: what the broker reads, and what it wrote.
struct Duplex {
    input: Cursor<Vec<u8>>,
    output: Vec<u8>,
}

impl Read for Duplex {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Duplex {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.output.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Channel for Duplex {
    fn write_with_file(&mut self, _: &[&[u8]], _: BorrowedFd<'_>) -> std::io::Result<()> {
        unreachable!("the in-memory socket is never asked to pass a descriptor")
    }
}

fn frames(bodies: &[Vec<u8>]) -> Duplex {
    let mut input = Vec::new();
    for b in bodies {
        write_frame(&mut input, b).unwrap();
    }
    Duplex { input: Cursor::new(input), output: Vec::new() }
}

/// What the broker wrote: each response and the payload of its data frame.
fn responses(d: &Duplex) -> Vec<(BrokerResponse, Option<Vec<u8>>)> {
    let mut r = &d.output[..];
    let mut out = Vec::new();
    while let Some(body) = read_frame(&mut r, MAX_FRAME).unwrap() {
        let (response, data) = decode_body::<BrokerResponse>(&body).unwrap();
        out.push((response, data.map(<[u8]>::to_vec)));
    }
    out
}

#[test]
fn the_loop_answers_each_frame_and_ends_at_eof() {
    let (t, mut b) = broker();
    let mut d = frames(&[encode(&read(1, 0, "a.txt", 3)), encode(&list(2, 1, "sub", 5))]);
    b.serve(&mut d).unwrap();
    let got = responses(&d);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1.as_deref(), Some(&b"roo"[..]), "a read's bytes follow its header");
    assert_eq!(got[1].0.names.as_deref(), Some(&[][..]));
    assert_eq!(got[1].1, None, "a list is a message");
    // A write arrives in a data frame and lands as sent.
    let write = encode_data(&req(3, BrokerOp::WritePrepare, 2, Some("w.bin")), b"\x00\x01{raw}").unwrap();
    let mut d = frames(&[write, encode(&commit(4, 2, 3, &stage(4)))]);
    b.serve(&mut d).unwrap();
    let got = responses(&d);
    assert_eq!((code(&got[0].0), code(&got[1].0)), ("ok", "ok"));
    assert_eq!(fs::read(t.path().join("root2/w.bin")).unwrap(), b"\x00\x01{raw}");
}

#[test]
fn the_loop_stops_at_a_protocol_error_after_answering_it() {
    let (_t, mut b) = broker();
    for bad in [
        b"not json".to_vec(),
        br#"{"id":1,"op":"read","root":0,"path":"a.txt","max":1,"extra":1}"#.to_vec(),
        br#"{"id":1,"op":"chmod","root":0,"path":"a.txt"}"#.to_vec(),
        br#"{"id":1,"op":"read","root":0,"path":"a.txt","max":1,"data":"x"}"#.to_vec(),
        // A data frame that lies about its header, one over the size limit.
        [&[DATA_TAG, 0, 200][..], br#"{"id":1}"#].concat(),
        encode_data(&req(1, BrokerOp::WritePrepare, 2, Some("o")), b"")
            .unwrap()
            .into_iter()
            .chain(std::iter::repeat_n(0, MAX_IO_BYTES as usize + 1))
            .collect(),
    ] {
        let mut d = frames(&[bad.clone(), encode(&read(2, 0, "a.txt", 1))]);
        assert!(matches!(b.serve(&mut d), Err(Fatal::Protocol(_))), "{}", String::from_utf8_lossy(&bad));
        let got = responses(&d);
        assert_eq!(got.len(), 1, "nothing after the protocol error is served");
        assert_eq!(code(&got[0].0), codes::PROTOCOL);
    }
    // A frame longer than the limit, and a stream cut inside a frame.
    let mut d = Duplex { input: Cursor::new((MAX_FRAME as u32 + 1).to_be_bytes().to_vec()), output: Vec::new() };
    assert!(matches!(b.serve(&mut d), Err(Fatal::Protocol(_))));
    let mut d = Duplex { input: Cursor::new(vec![0, 0, 0, 9, b'{']), output: Vec::new() };
    assert!(matches!(b.serve(&mut d), Err(Fatal::Protocol(_))));
}

#[test]
fn reads_start_at_an_offset_and_answer_the_file_stamp() {
    let (t, mut b) = broker();
    let at_2 = BrokerRequest { offset: Some(2), ..read(1, 0, "a.txt", 100) };
    assert_eq!(read_bytes(&mut b, &at_2), b"ot 0");
    let stamp = ask(&mut b, &at_2).unwrap().stamp.unwrap();
    assert_eq!(stamp.size, 6);
    let past = BrokerRequest { offset: Some(100), ..read(2, 0, "a.txt", 100) };
    assert_eq!(read_bytes(&mut b, &past), b"", "nothing past the end");
    fs::write(t.path().join("root0/a.txt"), "root 0 and more").unwrap();
    let again = ask(&mut b, &read(3, 0, "a.txt", 1)).unwrap().stamp.unwrap();
    assert_ne!(again, stamp, "a changed file has another stamp");
    let listed = ask(&mut b, &list(4, 3, ".", 10)).unwrap();
    use airlock_fsproto::EntryKind::{Dir, File, Link};
    assert_eq!(listed.names.unwrap(), ["a.txt", "pw", "sub"]);
    assert_eq!(listed.kinds.unwrap(), [File, Link, Dir]);
}

#[test]
fn a_chunked_write_appends_frames_and_lands_at_commit() {
    let (t, mut b) = broker();
    let opened = ask(&mut b, &req(1, BrokerOp::WriteOpen, 2, Some("big.bin"))).unwrap();
    assert_eq!(opened.identity.unwrap().bytes, 0);
    let append = |id: u64, root: u32, data: &[u8]| {
        (BrokerRequest { prepared: Some(1), ..req(id, BrokerOp::WriteAppend, root, None) }, data.to_vec())
    };
    let frame = vec![7u8; MAX_IO_BYTES as usize];
    assert_eq!(ask(&mut b, &append(2, 2, &frame)).unwrap().written, Some(MAX_IO_BYTES));
    assert_eq!(ask(&mut b, &append(3, 2, b"tail")).unwrap().written, Some(MAX_IO_BYTES + 4));
    assert!(!t.path().join("root2/big.bin").exists(), "nothing is named before the commit");
    assert!(matches!(ask(&mut b, &append(4, 0, b"x")), Err(Fatal::Protocol(_))), "another root's write");
    assert_eq!(ask(&mut b, &commit(5, 2, 1, &stage(1))).unwrap().written, Some(MAX_IO_BYTES + 4));
    let landed = fs::read(t.path().join("root2/big.bin")).unwrap();
    assert_eq!(landed.len() as u64, MAX_IO_BYTES + 4);
    assert!(landed.ends_with(b"tail"));
    // A frame over the limit is refused and drops the write.
    ask(&mut b, &req(6, BrokerOp::WriteOpen, 2, Some("over.bin"))).unwrap();
    let (over, bytes) = append(7, 2, &vec![0; MAX_IO_BYTES as usize + 1]);
    let over = (BrokerRequest { prepared: Some(6), ..over }, bytes);
    assert_eq!(code(&ask(&mut b, &over).unwrap()), codes::LIMIT);
    assert!(matches!(ask(&mut b, &commit(8, 2, 6, &stage(2))), Err(Fatal::Protocol(_))));
    assert!(!t.path().join("root2/over.bin").exists());
    assert_eq!(
        code(&ask(&mut b, &req(9, BrokerOp::WriteOpen, 0, Some("x"))).unwrap()),
        codes::DENIED,
        "r cannot write"
    );
}
