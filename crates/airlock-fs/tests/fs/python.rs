//! The Python module (`python/airlock_fs.py`), run by python3 with the
//! socket at descriptor 3.

use std::process::Output;

use airlock_fsproto::Op;

use crate::peer::{contents, kinds, names, Log, Peer};
use crate::spawn::{airlock_fs, run_with_socket, show};

const PYTHON: &str = "/usr/bin/python3";

fn module_dir() -> String {
    format!("{}/python", env!("CARGO_MANIFEST_DIR"))
}

fn python(script: &str, fd: std::os::fd::OwnedFd) -> Output {
    run_with_socket(PYTHON, &["-I", "-c", script], fd, &[], b"")
}

/// `-I` ignores PYTHONPATH, so the script puts the module's directory first.
fn prelude() -> String {
    format!("import sys; sys.path.insert(0, {:?}); import airlock_fs\n", module_dir())
}

fn run_script(body: &str) -> (Output, Log) {
    let (peer, fd) = Peer::start();
    let out = python(&(prelude() + body), fd);
    (out, peer.finish())
}

#[test]
fn the_module_reads_writes_and_lists() {
    let script = r#"
data = airlock_fs.read("data", "notes/a.txt")
sys.stdout.buffer.write(data)
print(airlock_fs.read("data", "x", 4))
airlock_fs.write("out", "r.bin", b"\x00payload\xff")
airlock_fs.write("out", "e", bytearray())
print(tuple(airlock_fs.list("data")))
print(tuple(airlock_fs.list_dir("data", "sub", 2)))
print(airlock_fs.list is airlock_fs.list_dir)
big = airlock_fs.read("data", "big.bin")
print(len(big), big == bytes(i % 251 for i in range(200000)))
print(airlock_fs.read("data", "big.bin", 100000, offset=10) == big[10:100010])
airlock_fs.write("out", "copy.bin", big)
try:
    airlock_fs.read("growing", "x")
except airlock_fs.FsError as e:
    print(e.code)
"#;
    let (o, log) = run_script(script);
    assert!(o.status.success(), "{}", show(&o));
    let py_kinds = |n: usize| -> Vec<&str> { kinds(n).iter().map(|k| k.as_str()).collect() };
    let want = format!(
        "{}b'cont'\n({:?}, {:?}, 1, False)\n({:?}, {:?}, 1, True)\nTrue\n200000 True\nTrue\nbroker.changed\n",
        String::from_utf8_lossy(&contents("notes/a.txt")),
        names("."),
        py_kinds(5),
        &names("sub")[..2],
        py_kinds(2),
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), want.replace('"', "'"));
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    let ops: Vec<Op> = log.requests.iter().take(6).map(|r| r.op).collect();
    assert_eq!(ops, [Op::Read, Op::Read, Op::Write, Op::Write, Op::List, Op::List]);
    let writes: Vec<Op> = log.requests.iter().filter(|r| r.op != Op::Read).skip(4).map(|r| r.op).collect();
    assert_eq!(
        writes,
        [Op::WriteOpen, Op::WriteAppend, Op::WriteAppend, Op::WriteAppend, Op::WriteAppend, Op::WriteCommit]
    );
    assert_eq!(log.requests[0].max, Some(65536));
    assert_eq!(log.payloads[2].as_deref(), Some(&b"\x00payload\xff"[..]), "the raw bytes, in a data frame");
    assert_eq!((log.requests[4].path.as_str(), log.requests[4].max), (".", Some(256)));
}

#[test]
fn the_module_writes_the_same_bytes_as_the_rust_encoder() {
    // The peer compares every body with `encode` of its decoded request:
    // field order, compact separators, UTF-8 and escapes must all match.
    let script = r#"
for path in ["é/ü.txt", "tab\there", "quote\"back\\slash", "ctl\x01\x1f\x7f", "日本/語", "slash/"]:
    airlock_fs.read("data", path, 7)
    airlock_fs.write("out", path, path.encode("utf-8"))
    airlock_fs.list("data", path, 0)
print("done")
"#;
    let (o, log) = run_script(script);
    assert!(o.status.success(), "{}", show(&o));
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    assert_eq!(log.requests.len(), 18);
    assert_eq!(log.requests[3].path, "tab\there");
}

#[test]
fn errors_map_to_fs_error() {
    let script = r#"
def attempt(f, *args):
    try:
        f(*args)
        print("no error")
    except airlock_fs.FsError as e:
        print(e.code, "|", e.message, "|", str(e), "|", isinstance(e, Exception))
attempt(airlock_fs.read, "denied", "x")
attempt(airlock_fs.write, "data", "big", b"x" * 65537)
attempt(airlock_fs.write, "data", "a/" * (48 * 1024), b"x")
attempt(airlock_fs.read, "data", "still-in-step", 3)
attempt(airlock_fs.read, "wrongid", "x")
attempt(airlock_fs.read, "data", "after-a-broken-exchange")
"#;
    let (o, log) = run_script(script);
    assert!(o.status.success(), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "broker.denied | read is not granted | broker.denied: read is not granted | True", "{out}");
    assert_eq!(lines[1], "no error", "a chunked write: {out}");
    assert!(lines[2].starts_with("broker.protocol | the write request is "), "refused locally: {out}");
    assert_eq!(lines[3], "no error", "{out}");
    assert!(lines[4].starts_with("broker.protocol | answer to call "), "{out}");
    assert!(lines[5].starts_with("broker.protocol | the connection failed earlier"), "{out}");
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    // The oversized write never reached the peer; the others did.
    let paths: Vec<&str> = log.requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["x", "big", "big", "big", "big", "still-in-step", "x"]);
}

#[test]
fn bad_answers_are_protocol_or_io_errors() {
    for (root, want) in [
        ("garbage", "broker.protocol"),
        ("badframe", "broker.protocol"),
        ("nodata", "broker.protocol"),
        ("toomuch", "broker.protocol"),
        ("huge", "broker.protocol"),
        ("asread", "broker.protocol"),
        ("hangup", "broker.io"),
    ] {
        let call = if root == "asread" { "airlock_fs.list(root, '.', 5)" } else { "airlock_fs.read(root, 'x', 10)" };
        let script = format!(
            "root = {root:?}\ntry:\n    {call}\n    print('no error')\nexcept airlock_fs.FsError as e:\n    print(e.code)\n"
        );
        let (o, _) = run_script(&script);
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), want, "{root}: {}", show(&o));
    }
}

#[test]
fn a_bad_answer_after_the_first_frame_fails_the_read() {
    // The frames after the first are received straight into the result:
    // each is checked before a byte of its payload is placed.
    for (root, want) in [
        ("latefine", "200000 True"),
        ("latetoomuch", "broker.protocol"),
        ("lateshort", "broker.protocol"),
        ("latebadframe", "broker.protocol"),
        ("lategarbage", "broker.protocol"),
        ("latechanged", "broker.changed"),
    ] {
        let script = format!(
            "try:\n    d = airlock_fs.read({root:?}, 'x')\n    print(len(d), d == b'l' * 200000)\nexcept airlock_fs.FsError as e:\n    print(e.code)\n"
        );
        let (o, _) = run_script(&script);
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), want, "{root}: {}", show(&o));
    }
}

#[test]
fn without_the_socket_the_module_raises() {
    let script = prelude()
        + "try:\n    airlock_fs.read('data', 'x')\nexcept airlock_fs.FsError as e:\n    print(e.code, e.message)\n";
    let o = std::process::Command::new(PYTHON).args(["-I", "-c", &script]).env_clear().output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "broker.io AIRLOCK_FS_FD is not set: not running in an isolated worker\n"
    );
}

#[test]
fn ids_increase_across_python_and_rust_processes() {
    let (peer, fd) = Peer::start();
    let bin = airlock_fs();
    let body = prelude() + "for i in range(3):\n    airlock_fs.read('data', 'py%d' % i, 1)\n";
    for round in 0..2 {
        let o = python(&body, fd.try_clone().unwrap());
        assert!(o.status.success(), "python round {round}: {}", show(&o));
        let o = run_with_socket(bin.to_str().unwrap(), &["read", "data", "rust"], fd.try_clone().unwrap(), &[], b"");
        assert!(o.status.success(), "rust round {round}: {}", show(&o));
    }
    drop(fd);
    let log = peer.finish();
    assert!(log.violations.is_empty(), "{:?}", log.violations);
    assert_eq!(log.requests.len(), 8);
}

#[test]
fn the_exported_source_is_the_module() {
    let on_disk = std::fs::read_to_string(format!("{}/airlock_fs.py", module_dir())).unwrap();
    assert_eq!(airlock_fs::PYTHON_MODULE, on_disk);
}
