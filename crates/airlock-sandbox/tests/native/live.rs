//! Live stdio (`NativeTier::start_live`): the worker's stdin and stdout are
//! pipes to the caller for as long as it runs, under the same confinement.

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use airlock_sandbox::{Tier, Worker, WorkerSpec};

use crate::util::{show, tier, Dir};

#[test]
fn a_live_worker_answers_line_by_line_and_ends_on_eof() {
    let mut spec = WorkerSpec::new(["sh", "-c", "while read -r line; do echo \"got $line\"; done; echo bye >&2"]);
    spec.timeout = Duration::from_secs(20);
    let (worker, live) = tier().start_live(spec).unwrap();
    let mut stdin = live.stdin;
    let mut stdout = BufReader::new(live.stdout);
    for word in ["one", "two"] {
        writeln!(stdin, "{word}").unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        // Each answer arrives while the worker still runs: nothing waits for exit.
        assert_eq!(line, format!("got {word}\n"));
    }
    drop(stdin);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "");
    let o = worker.wait().unwrap();
    assert!(o.exit.success(), "{}", show(&o));
    assert!(o.cleanup_confirmed, "{}", show(&o));
    assert!(o.stdout.is_empty(), "live stdout must not be captured");
    assert_eq!(o.stderr, b"bye\n");
}

#[test]
fn a_live_worker_gets_only_its_pipes_and_its_files() {
    let dir = Dir::new();
    dir.write("in.txt", b"granted");
    dir.write("beside.txt", b"CANARY-live-beside");
    let script = "ls /proc/self/fd | tr '\\n' ' '; echo; cat data/in.txt; echo; \
                  cat data/beside.txt 2>&1 || echo denied; readlink /proc/self/fd/0 | cut -c1-5";
    let mut spec = WorkerSpec::new(["sh", "-c", script]);
    spec.inputs.push(dir.input("in.txt", "data/in.txt"));
    let (worker, live) = tier().start_live(spec).unwrap();
    drop(live.stdin);
    let mut out = String::new();
    BufReader::new(live.stdout).read_to_string(&mut out).unwrap();
    let o = worker.wait().unwrap();
    assert!(o.exit.success(), "{}\n{out}", show(&o));
    let lines: Vec<&str> = out.lines().collect();
    // 0, 1, 2 and the directory `ls` is reading.
    assert!(lines[0].split_whitespace().all(|fd| ["0", "1", "2", "3"].contains(&fd)), "{out}");
    assert_eq!(lines[1], "granted");
    assert!(!out.contains("CANARY"), "{out}");
    assert_eq!(lines.last().copied(), Some("pipe:"), "stdin should be the caller's pipe: {out}");
}

#[test]
fn a_live_worker_that_never_ends_is_killed_at_its_deadline() {
    let mut spec = WorkerSpec::new(["sh", "-c", "cat >/dev/null; sleep 100"]);
    spec.timeout = Duration::from_millis(700);
    let (worker, live) = tier().start_live(spec).unwrap();
    // The caller keeps stdin open and never reads: the deadline still holds.
    let o = worker.wait().unwrap();
    assert!(o.timed_out, "{}", show(&o));
    assert!(o.cleanup_confirmed, "{}", show(&o));
    drop(live);
}

/// A tier whose workers create their output themselves.
fn creating_tier() -> airlock_sandbox::NativeTier {
    let mut t = tier();
    t.worker_creates_output(true);
    t
}

#[test]
fn a_worker_may_create_its_output_exclusively_and_it_is_exported() {
    let dir = Dir::new();
    dir.write("in.txt", b"abc");
    // Exclusive creation (O_EXCL), as MCP file servers do; a scratch file
    // beside it is discarded.
    let script = "set -C; cat data/in.txt > out/made.txt && echo scratch > out/other.txt && echo done";
    let mut spec = WorkerSpec::new(["sh", "-c", script]);
    spec.inputs.push(dir.input("in.txt", "data/in.txt"));
    spec.output = Some(dir.output("out.staging", "out/made.txt", 100));
    let o = creating_tier().start(spec).and_then(|w| w.wait()).unwrap();
    assert!(o.exit.success(), "{}", show(&o));
    assert!(o.output.as_ref().unwrap().exported(), "{}", show(&o));
    assert_eq!(dir.read("out.staging"), b"abc");
}

#[test]
fn a_created_output_must_exist_be_regular_and_stay_within_bounds() {
    let dir = Dir::new();
    dir.write("in.txt", b"abc");
    // Landlock grants only regular files there: a symlink, a directory, a
    // FIFO, a hard link or a rename of the input are never made.
    let cases = [
        ("true", "did not create"),
        ("ln -s /etc/passwd out/made.txt", "did not create"),
        ("mkdir out/made.txt", "did not create"),
        ("mkfifo out/made.txt", "did not create"),
        ("ln data/in.txt out/made.txt", "did not create"),
    ];
    for (script, why) in cases {
        let mut spec = WorkerSpec::new(["sh", "-c", script]);
        spec.inputs.push(dir.input("in.txt", "data/in.txt"));
        let staging = format!("out-{}.staging", why.len() + script.len());
        spec.output = Some(dir.output(&staging, "out/made.txt", 100));
        let o = creating_tier().start(spec).and_then(|w| w.wait()).unwrap();
        let export = o.output.clone().unwrap();
        assert!(!export.exported(), "{script}: {}", show(&o));
        assert!(export.refused.as_deref().unwrap_or("").contains(why), "{script}: {export:?}");
        assert_eq!(dir.read(&staging), b"", "{script}");
    }
    let mut spec = WorkerSpec::new(["sh", "-c", "head -c 200 /dev/zero > out/made.txt"]);
    spec.output = Some(dir.output("big.staging", "out/made.txt", 100));
    let o = creating_tier().start(spec).and_then(|w| w.wait()).unwrap();
    assert!(o.output.unwrap().over_limit);
}
