//! The Rust client against the test peer.

use airlock_fs::{Client, FsError, Listing};
use airlock_fsproto::{Op, MAX_FRAME};

use crate::peer::{contents, names, Peer};

fn client() -> (Client, Peer) {
    let (peer, fd) = Peer::start();
    (Client::from_fd(fd).unwrap(), peer)
}

fn code(r: Result<impl std::fmt::Debug, FsError>) -> String {
    r.unwrap_err().code
}

#[test]
fn read_write_and_list_round_trip() {
    let (mut fs, peer) = client();
    assert_eq!(fs.read("data", "a/b.txt", 65536).unwrap(), contents("a/b.txt"));
    assert_eq!(fs.read("data", "a/b.txt", 4).unwrap(), b"cont");
    fs.write("out", "r.json", b"\x00\xff binary").unwrap();
    fs.write("out", "empty", b"").unwrap();
    let listing = fs.list("data", ".", 256).unwrap();
    assert_eq!(listing, Listing { names: names("."), skipped: 1, truncated: false });
    let cut = fs.list("data", "sub", 2).unwrap();
    assert_eq!(cut, Listing { names: names("sub")[..2].to_vec(), skipped: 1, truncated: true });
    drop(fs);
    let log = peer.finish();
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    let ops: Vec<Op> = log.requests.iter().map(|r| r.op).collect();
    assert_eq!(ops, [Op::Read, Op::Read, Op::Write, Op::Write, Op::List, Op::List]);
    assert_eq!(log.requests[1].max, Some(4));
    assert_eq!(log.requests[2].data.as_deref(), Some("AP8gYmluYXJ5"), "standard base64 with padding");
    assert_eq!(log.requests[3].data.as_deref(), Some(""));
}

#[test]
fn refusals_carry_the_peers_code_and_the_connection_goes_on() {
    let (mut fs, peer) = client();
    let err = fs.read("denied", "a", 10).unwrap_err();
    assert_eq!(err, FsError { code: "broker.denied".into(), message: "read is not granted".into() });
    assert_eq!(err.to_string(), "broker.denied: read is not granted");
    assert_eq!(code(fs.write("data", "big", &vec![b'x'; 65537])), "broker.limit", "airlock judges the size");
    assert_eq!(fs.read("data", "after", 100).unwrap(), contents("after"));
    drop(fs);
    assert!(peer.finish().violations.is_empty());
}

#[test]
fn a_request_too_large_to_frame_is_refused_before_sending() {
    let (mut fs, peer) = client();
    let err = fs.write("data", "huge", &vec![0; MAX_FRAME]).unwrap_err();
    assert_eq!(err.code, "broker.protocol", "{err}");
    assert!(err.message.contains("frame limit"), "{err}");
    // Nothing reached the peer, and the connection is still in step.
    fs.write("data", "small", b"ok").unwrap();
    drop(fs);
    let log = peer.finish();
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    assert_eq!(log.requests.len(), 1);
    assert_eq!(log.requests[0].path, "small");
}

#[test]
fn bad_answers_are_protocol_errors_and_end_the_connection() {
    for (root, want) in [
        ("garbage", "broker.protocol"),
        ("wrongid", "broker.protocol"),
        ("badb64", "broker.protocol"),
        ("toomuch", "broker.protocol"),
        ("huge", "broker.protocol"),
        ("hangup", "broker.io"),
    ] {
        let (mut fs, peer) = client();
        let err = fs.read(root, "x", 10).unwrap_err();
        assert_eq!(err.code, want, "{root}: {err}");
        let again = fs.read("data", "x", 10).unwrap_err();
        assert_eq!(again.code, "broker.protocol", "{root}: a broken connection must stay broken");
        drop(fs);
        peer.finish();
    }
}

#[test]
fn an_answer_of_the_wrong_kind_is_a_protocol_error() {
    // The peer answers every call on `asread` with read data.
    let (mut fs, peer) = client();
    assert_eq!(code(fs.write("asread", "x", b"abc")), "broker.protocol");
    drop(fs);
    peer.finish();
    let (mut fs, peer) = client();
    assert_eq!(code(fs.list("asread", ".", 10)), "broker.protocol");
    drop(fs);
    peer.finish();
}

#[test]
fn ids_strictly_increase_within_a_client() {
    let (mut fs, peer) = client();
    for i in 0..50 {
        fs.read("data", &format!("f{i}"), 1).unwrap();
    }
    drop(fs);
    let log = peer.finish();
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    assert!(log.requests.windows(2).all(|w| w[0].id < w[1].id));
}

#[test]
fn from_env_needs_a_socket_number() {
    // The test process has no AIRLOCK_FS_FD (the command tests set it only
    // in their children).
    assert!(std::env::var_os("AIRLOCK_FS_FD").is_none());
    assert_eq!(Client::from_env().unwrap_err().code, "broker.io");
}
