//! Live stdio (`NativeTier::start_live`): the worker's stdin and stdout are
//! pipes to the caller for as long as it runs, under the same confinement.

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use airlock_sandbox::{Worker, WorkerSpec};

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
