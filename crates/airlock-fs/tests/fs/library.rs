//! The Rust client against the test peer.

use airlock_fs::{Client, FsError, Listing};
use airlock_fsproto::{Op, MAX_FRAME};

use crate::peer::{contents, kinds, names, Peer};

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
    assert_eq!(fs.read("data", "a/b.txt").unwrap(), contents("a/b.txt"));
    assert_eq!(fs.read_range("data", "a/b.txt", 0, 4).unwrap(), b"cont");
    fs.write("out", "r.json", b"\x00\xff binary").unwrap();
    fs.write("out", "empty", b"").unwrap();
    let listing = fs.list("data", ".", 256).unwrap();
    assert_eq!(listing, Listing { names: names("."), kinds: kinds(5), skipped: 1, truncated: false });
    let cut = fs.list("data", "sub", 2).unwrap();
    assert_eq!(cut, Listing { names: names("sub")[..2].to_vec(), kinds: kinds(2), skipped: 1, truncated: true });
    drop(fs);
    let log = peer.finish();
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    let ops: Vec<Op> = log.requests.iter().map(|r| r.op).collect();
    assert_eq!(ops, [Op::Read, Op::Read, Op::Write, Op::Write, Op::List, Op::List]);
    assert_eq!(log.requests[1].max, Some(4));
    assert_eq!(log.payloads[2].as_deref(), Some(&b"\x00\xff binary"[..]), "the raw bytes, in a data frame");
    assert_eq!(log.payloads[3].as_deref(), Some(&b""[..]), "an empty write is an empty data frame");
    assert!(log.payloads[4].is_none(), "a list is a message");
}

#[test]
fn refusals_carry_the_peers_code_and_the_connection_goes_on() {
    let (mut fs, peer) = client();
    let err = fs.read("denied", "a").unwrap_err();
    assert_eq!(err, FsError { code: "broker.denied".into(), message: "read is not granted".into() });
    assert_eq!(err.to_string(), "broker.denied: read is not granted");
    assert_eq!(fs.read_range("data", "after", 0, 100).unwrap(), contents("after"));
    drop(fs);
    assert!(peer.finish().violations.is_empty());
}

#[test]
fn a_request_too_large_to_frame_is_refused_before_sending() {
    let (mut fs, peer) = client();
    let long = "a/".repeat(MAX_FRAME / 2);
    let err = fs.write("data", &long, b"x").unwrap_err();
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
        ("badframe", "broker.protocol"),
        ("nodata", "broker.protocol"),
        ("toomuch", "broker.protocol"),
        ("huge", "broker.protocol"),
        ("hangup", "broker.io"),
    ] {
        let (mut fs, peer) = client();
        let err = fs.read_range(root, "x", 0, 10).unwrap_err();
        assert_eq!(err.code, want, "{root}: {err}");
        let again = fs.read_range("data", "x", 0, 10).unwrap_err();
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
        fs.read_range("data", &format!("f{i}"), 0, 1).unwrap();
    }
    drop(fs);
    let log = peer.finish();
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    assert!(log.requests.windows(2).all(|w| w[0].id < w[1].id));
}

#[test]
fn whole_files_stream_in_frames_both_ways() {
    let (mut fs, peer) = client();
    assert_eq!(fs.read("data", "big.bin").unwrap(), contents("big.bin"), "200,000 bytes in four frames");
    assert_eq!(fs.read_range("data", "big.bin", 70_000, 100_000).unwrap(), contents("big.bin")[70_000..170_000]);
    let data = contents("big.bin");
    fs.write("out", "copy.bin", &data).unwrap();
    let err = fs.read("growing", "x").unwrap_err();
    assert_eq!(err.code, "broker.changed", "a size that moves between frames fails the read: {err}");
    drop(fs);
    let log = peer.finish();
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    let reads: Vec<(Option<u64>, Option<u64>, bool)> =
        log.requests[..4].iter().map(|r| (r.offset, r.max, r.version.is_some())).collect();
    assert_eq!(
        reads,
        [
            (None, Some(65536), false),
            (Some(65536), Some(65536), true),
            (Some(131072), Some(65536), true),
            (Some(196608), Some(3392), true)
        ],
        "later frames ask only what is left and carry the first frame's version"
    );
    let ops: Vec<Op> = log.requests[6..].iter().map(|r| r.op).collect();
    let mut want = vec![Op::WriteOpen];
    want.extend([Op::WriteAppend; 4]);
    want.extend([Op::WriteCommit, Op::Read, Op::Read]);
    assert_eq!(ops, want);
    let sent: Vec<u8> = log.payloads[7..11].iter().flat_map(|d| d.clone().unwrap()).collect();
    assert_eq!(sent, data, "every byte appended once, in order");
}

#[test]
fn from_env_needs_a_socket_number() {
    // The test process has no AIRLOCK_FS_FD (the command tests set it only
    // in their children).
    assert!(std::env::var_os("AIRLOCK_FS_FD").is_none());
    assert_eq!(Client::from_env().unwrap_err().code, "broker.io");
}
