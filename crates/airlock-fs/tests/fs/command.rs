//! The `airlock-fs` command, spawned with the socket at descriptor 3.

use airlock_fsproto::Op;

use crate::peer::{contents, kinds, names, Peer};
use crate::spawn::{airlock_fs, run_with_socket, show};

fn cmd(args: &[&str], stdin: &[u8]) -> (std::process::Output, crate::peer::Log) {
    let (peer, fd) = Peer::start();
    let out = run_with_socket(airlock_fs().to_str().unwrap(), args, fd, &[], stdin);
    (out, peer.finish())
}

#[test]
fn read_prints_the_raw_bytes() {
    let (o, log) = cmd(&["read", "data", "notes/a.txt"], b"");
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(o.stdout, contents("notes/a.txt"));
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    assert_eq!(log.requests[0].max, Some(65536), "the default max");
    let (o, log) = cmd(&["read", "data", "a", "--max", "3"], b"");
    assert_eq!(o.stdout, b"con", "{}", show(&o));
    assert_eq!(log.requests[0].max, Some(3));
}

#[test]
fn read_streams_the_whole_file_and_says_where_max_stopped_it() {
    let (o, log) = cmd(&["read", "data", "big.bin"], b"");
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(o.stdout, contents("big.bin"));
    assert!(o.stderr.is_empty(), "{}", show(&o));
    assert_eq!(log.requests.len(), 4);
    let (o, _) = cmd(&["read", "data", "big.bin", "--offset", "10", "--max", "100000"], b"");
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(o.stdout, contents("big.bin")[10..100_010]);
    assert_eq!(String::from_utf8_lossy(&o.stderr), "stopped at 100000 of 200000 bytes (--max)\n");
    let (o, _) = cmd(&["read", "growing", "x"], b"");
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("broker.changed: "), "{}", show(&o));
}

#[test]
fn write_streams_stdin_of_any_size() {
    let (o, log) = cmd(&["write", "out", "r.bin"], b"\x00payload\xff");
    assert!(o.status.success(), "{}", show(&o));
    assert!(o.stdout.is_empty());
    assert_eq!(log.requests[0].op, Op::Write);
    assert_eq!(log.payloads[0].as_deref(), Some(&b"\x00payload\xff"[..]), "the raw bytes, in a data frame");
    // 100,000 bytes on stdin: a chunked write of two frames.
    let (o, log) = cmd(&["write", "out", "big"], &vec![b'x'; 100_000]);
    assert!(o.status.success(), "{}", show(&o));
    let ops: Vec<Op> = log.requests.iter().map(|r| r.op).collect();
    assert_eq!(ops, [Op::WriteOpen, Op::WriteAppend, Op::WriteAppend, Op::WriteCommit]);
    let sent: Vec<usize> = log.payloads[1..3].iter().map(|d| d.as_ref().unwrap().len()).collect();
    assert_eq!(sent, [65_536, 34_464]);
}

#[test]
fn list_prints_kinds_and_names_and_says_what_was_left_out() {
    let lines = |names: &[String]| -> String {
        let kinds = kinds(names.len());
        names.iter().zip(kinds).map(|(n, k)| format!("{}\t{n}\n", k.as_str())).collect()
    };
    let (o, log) = cmd(&["list", "data"], b"");
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), lines(&names(".")));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("dir\t.-0\nfile\t.-1\n"));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "skipped: 1\n");
    assert_eq!((log.requests[0].path.as_str(), log.requests[0].max), (".", Some(256)));
    let (o, _) = cmd(&["list", "data", "sub", "--max", "2"], b"");
    assert_eq!(String::from_utf8_lossy(&o.stdout), lines(&names("sub")[..2]));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("skipped: 1\ntruncated: "), "{}", show(&o));
}

#[test]
fn a_refusal_exits_1_with_its_code() {
    let (o, _) = cmd(&["read", "denied", "x"], b"");
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "broker.denied: read is not granted\n");
    assert!(o.stdout.is_empty());
    let (o, _) = cmd(&["read", "garbage", "x"], b"");
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("broker.protocol: "), "{}", show(&o));
}

#[test]
fn usage_errors_exit_2_and_send_nothing() {
    for args in [&["read", "data"][..], &["frobnicate", "x"], &["list", "data", "--max", "ten"], &[]] {
        let (o, log) = cmd(args, b"");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", show(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains("usage: airlock-fs"), "{}", show(&o));
        assert!(log.requests.is_empty(), "{args:?} sent {:?}", log.requests);
    }
}

#[test]
fn without_the_socket_the_command_fails_cleanly() {
    let o = std::process::Command::new(airlock_fs()).args(["read", "data", "x"]).env_clear().output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("broker.io: AIRLOCK_FS_FD is not set"), "{}", show(&o));
}

#[test]
fn ids_increase_across_sequential_processes() {
    // Several commands in turn on one socket, as a shell script runs them.
    let (peer, fd) = Peer::start();
    let bin = airlock_fs();
    for args in [&["read", "data", "a"][..], &["list", "data"], &["read", "data", "b"]] {
        let o = run_with_socket(bin.to_str().unwrap(), args, fd.try_clone().unwrap(), &[], b"");
        assert!(o.status.success(), "{args:?}: {}", show(&o));
    }
    drop(fd);
    let log = peer.finish();
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    assert_eq!(log.requests.len(), 3);
    assert!(log.requests.windows(2).all(|w| w[0].id < w[1].id));
}
