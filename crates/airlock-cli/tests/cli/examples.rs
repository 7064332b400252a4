//! The shipped examples (`examples/`) work as documented: each tool is run
//! with the shipping binary on a copy of the examples project.

use crate::runkit::airlock_in;
use std::path::Path;

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let name = entry.file_name();
        if name == ".airlock" {
            continue;
        }
        let ty = entry.file_type().unwrap();
        if ty.is_dir() {
            copy_tree(&entry.path(), &to.join(&name));
        } else if ty.is_file() {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

fn examples() -> tempfile::TempDir {
    let tmp = tempfile::Builder::new().prefix("airlock-examples-").tempdir().unwrap();
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples"), tmp.path());
    tmp
}

#[test]
fn every_example_tool_validates() {
    let dir = examples();
    let run = airlock_in(dir.path(), &["tools", "validate"]);
    run.assert_ok();
    let list = airlock_in(dir.path(), &["tools", "list"]);
    let tools = list.envelope["content"]["tools"].as_array().unwrap();
    // Six example tools (two of them sessions), then the seven bundled source and Git tools.
    assert_eq!(tools.len(), 6 + 7, "{list:#?}");
    assert!(tools.iter().all(|t| t["runnable"] == true), "{list:#?}");
}

#[test]
fn wordcount_csv2json_and_hostinfo_do_their_jobs() {
    let dir = examples();
    let wc = airlock_in(dir.path(), &["run", "wordcount", "data/notes.txt", "results/n.json"]);
    wc.assert_ok();
    let words = std::fs::read_to_string(dir.path().join("data/notes.txt")).unwrap().split_whitespace().count();
    let published: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("results/n.json")).unwrap()).unwrap();
    assert_eq!(published["words"], words);

    let csv = airlock_in(dir.path(), &["run", "csv2json", "data/sample.csv", "results/s.json"]);
    csv.assert_ok();
    assert_eq!(csv.envelope["content"]["rows"], 2);
    let rows: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("results/s.json")).unwrap()).unwrap();
    assert_eq!(rows[0]["name"], "airlock");

    let info = airlock_in(dir.path(), &["run", "hostinfo"]);
    info.assert_ok();
    assert!(info.envelope["content"]["raw_output"].as_str().unwrap().starts_with("Linux"));
    assert_eq!(info.envelope["created_files"], serde_json::json!([]));
}

#[test]
fn misbehave_is_contained_and_publishes_nothing() {
    let dir = examples();
    // The network probe targets a listener on this host's loopback, which
    // the worker (in its own network namespace) must not reach.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let run = airlock_in(dir.path(), &["run", "misbehave", "data/notes.txt", "results/m.txt", &port]);
    assert_eq!((run.status(), run.reason(), run.code), ("failed", "limit.output_size", 1), "{run:#?}");
    let said = run.envelope["stdout_tail"].as_str().unwrap();
    for attempt in [
        "read /etc/shadow: denied",
        "read a file beside the input: denied",
        "rewrite the input: denied",
        "delete the output: denied",
        "connect to the host's loopback listener: denied",
        "create a user namespace: denied",
    ] {
        assert!(said.contains(attempt), "{attempt:?} missing from:\n{said}");
    }
    assert!(!said.contains("no tool may read it"), "the file beside the input leaked:\n{said}");
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the host's loopback listener accepted a connection from the worker: {other:?}"),
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(!dir.path().join("results/m.txt").exists(), "nothing may be published, even late");
}
