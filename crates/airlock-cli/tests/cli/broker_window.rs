//! The broker's window (issue 17's throughput): streamed reads and chunked
//! writes keep up to `outstanding` frames in flight, and airlock answers in
//! order. On the shipping binary with both clients: a multi-MiB copy is
//! byte for byte, a budget or a changed file ending the stream mid-window
//! fails loudly with no target, and a worker flooding requests beyond the
//! window gets no more than `outstanding + 1` frames read into airlock.

use crate::broker_streaming::{content, stage_entries};
use crate::isolated::{assert_op_failed, isolated_argv, raw_client, root};
use crate::util::{sha256_hex, Project, Run};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn project(calls: u64, read_bytes: u64, write_bytes: u64) -> Project {
    Project::with_config(&format!(
        "state_dir = \".airlock\"\n[broker]\ncalls = {calls}\nread_bytes = {read_bytes}\nwrite_bytes = {write_bytes}\n"
    ))
}

const PY_COPY: &str = "import airlock_fs\nairlock_fs.write('out', 'py.bin', airlock_fs.read('b', 'big.bin'))\n";

/// The Python copy, counting the requests it has sent and not yet taken
/// the answer of: the client keeps the whole window in flight.
const PY_COUNTED_COPY: &str = r#"
import airlock_fs
c = airlock_fs._connection
flight, most = [0], [0]
send, receive = c.send, c.receive
def counted_send(*a):
    flight[0] += 1
    most[0] = max(most[0], flight[0])
    return send(*a)
def counted_receive(*a):
    flight[0] -= 1
    return receive(*a)
c.send, c.receive = counted_send, counted_receive
airlock_fs.write('out', 'py.bin', airlock_fs.read('b', 'big.bin'))
print("most in flight:", most[0], flush=True)
"#;
const CLI_COPY: &str = "airlock-fs read b big.bin | airlock-fs write out cli.bin";

fn usage(run: &Run, what: &str) -> u64 {
    run.envelope["content"]["broker"]["usage"][what].as_u64().unwrap_or_else(|| panic!("{what}: {run:#?}"))
}

#[test]
fn a_pipelined_copy_of_several_mib_matches_with_both_clients() {
    let p = project(100_000, 64 << 20, 64 << 20);
    let source = content(9_000_000, 11);
    p.write("data/big.bin", &source);
    let r = [root(&p, "b", "data", "r"), root(&p, "out", "results", "w")];
    let want = format!("sha256:{}", sha256_hex(&source));
    for (argv, copy) in [(["sh", "-c", CLI_COPY], "cli.bin"), (["python3", "-c", PY_COUNTED_COPY], "py.bin")] {
        let run = isolated_argv(&p, &r, &argv);
        run.assert_ok();
        if copy == "py.bin" {
            let out = run.envelope["content"]["output"]["raw_output"].as_str().unwrap_or("");
            assert!(out.contains("most in flight: 8"), "the window given is AIRLOCK_FS_WINDOW = 8: {run:#?}");
        }
        let bytes = std::fs::read(p.path(&format!("results/{copy}"))).unwrap();
        assert_eq!((bytes.len(), format!("sha256:{}", sha256_hex(&bytes))), (source.len(), want.clone()), "{copy}");
        // One logged read of the whole file, the commit with the same hash.
        let ops = run.envelope["content"]["broker"]["operations"].as_array().unwrap();
        let read = ops.iter().find(|o| o["op"] == "read").unwrap();
        assert_eq!((read["amount"].as_u64(), read["sha256"].as_str()), (Some(9_000_000), Some(want.as_str())));
        let commit = ops.iter().find(|o| o["op"] == "write_commit").unwrap_or_else(|| panic!("{run:#?}"));
        assert_eq!(commit["sha256"].as_str(), Some(want.as_str()), "{copy}");
        // airlock never held more than the window (138 read frames, 138
        // appends); how many it held at once depends on who is faster.
        let most = usage(&run, "max_outstanding");
        assert!((1..=8).contains(&most), "{copy}: max_outstanding {most}");
        assert_eq!(usage(&run, "read_bytes"), 9_000_000, "{copy}: every frame asked exactly what was left");
        assert_eq!(usage(&run, "write_bytes"), 9_000_000, "{copy}");
    }
}

#[test]
fn a_budget_ending_mid_window_fails_with_no_target_and_charges_in_order() {
    // 1,000,000 bytes is 15 frames and a part: the 16th append is refused
    // with earlier ones answered and later ones already sent.
    let p = project(1000, 16 << 20, 1_000_000);
    p.write("data/big.bin", content(5_000_000, 12));
    p.write("results/cli.bin", "old");
    p.write("results/py.bin", "old");
    let r = [root(&p, "b", "data", "r"), root(&p, "out", "results", "w")];
    for (argv, copy) in [(["sh", "-c", CLI_COPY], "cli.bin"), (["python3", "-c", PY_COPY], "py.bin")] {
        let run = isolated_argv(&p, &r, &argv);
        assert_op_failed(&run, "broker.budget");
        let failure = &run.envelope["content"]["broker"]["failure"];
        assert_eq!(failure["op"], "write_append", "{run:#?}");
        // Charged frame by frame in order up to the one refused, nothing after.
        assert_eq!(usage(&run, "write_bytes"), 16 * 65536, "{copy}: {run:#?}");
        assert_eq!(std::fs::read(p.path(&format!("results/{copy}"))).unwrap(), b"old", "{copy}");
    }
    assert!(stage_entries(&p.path("results")).is_empty(), "{:?}", stage_entries(&p.path("results")));
    // A read budget ends a streamed read the same way, never a short success.
    let p = project(1000, 1_000_000, 16 << 20);
    p.write("data/big.bin", content(5_000_000, 12));
    let r = [root(&p, "b", "data", "r"), root(&p, "out", "results", "w")];
    for argv in [["sh", "-c", CLI_COPY], ["python3", "-c", PY_COPY]] {
        let run = isolated_argv(&p, &r, &argv);
        assert_op_failed(&run, "broker.budget");
        assert_eq!(run.envelope["content"]["broker"]["failure"]["op"], "read", "{run:#?}");
        assert_eq!(usage(&run, "read_bytes"), 16 * 65536, "{run:#?}");
        let read = &run.envelope["content"]["broker"]["operations"][0];
        assert_eq!(read["amount"].as_u64(), Some(15 * 65536), "the frames answered before the refusal: {run:#?}");
    }
    assert!(!p.path("results/cli.bin").exists() && !p.path("results/py.bin").exists());
}

#[test]
fn a_file_changing_during_a_pipelined_read_fails_loudly() {
    let p = project(100_000, 64 << 20, 64 << 20);
    let file = p.path("data/big.bin");
    p.write("data/big.bin", content(8_000_000, 13));
    let r = [root(&p, "b", "data", "r"), root(&p, "out", "results", "w")];
    // The reader stalls between frames (a full pipe, a sleeping Python
    // wrapper) while the file keeps growing: a frame after the stall
    // carries a version the file no longer has.
    let py = "import time, airlock_fs\ntake = airlock_fs._take_frame\ndef slow(*a):\n    time.sleep(0.05)\n    return take(*a)\nairlock_fs._take_frame = slow\nairlock_fs.write('out', 'py.bin', airlock_fs.read('b', 'big.bin'))\n";
    let cli = "airlock-fs read b big.bin | { sleep 2; cat; } | airlock-fs write out cli.bin";
    for (argv, copy) in [(["sh", "-c", cli], "cli.bin"), (["python3", "-c", py], "py.bin")] {
        let stop = AtomicBool::new(false);
        let run = std::thread::scope(|s| {
            s.spawn(|| {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new().append(true).open(&file).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    f.write_all(b"more").unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
            let run = isolated_argv(&p, &r, &argv);
            stop.store(true, Ordering::Relaxed);
            run
        });
        assert_op_failed(&run, "broker.changed");
        let message = run.envelope["content"]["broker"]["failure"]["message"].as_str().unwrap_or("");
        // Seen between two frames (another version) or while one frame was
        // read (its size or change time moved): either way the copy fails.
        let changed = message.contains("changed since the read") || message.contains("changed while it was read");
        assert!(changed && message.contains("read it again"), "{run:#?}");
        assert!(!p.path(&format!("results/{copy}")).exists(), "{copy}: no partial target");
    }
}

#[test]
fn a_worker_flooding_past_the_window_is_bounded() {
    let p = Project::new();
    p.write("data/a.txt", "a");
    let r = [root(&p, "data", "data", "rw")];
    // 64 appends of 64 KiB (4 MiB) sent at once without reading an
    // answer, after an open: airlock reads at most outstanding + 1 = 9 of them, charges
    // only those it took in order, and ends the submission; the rest never
    // leave the worker's socket buffer.
    let flood = r#"
import json, os, socket, struct
s = socket.socket(fileno=int(os.environ["AIRLOCK_FS_FD"]))
def frame(header, payload=None):
    body = header if payload is None else b"\x01" + struct.pack(">H", len(header)) + header + payload
    return struct.pack(">I", len(body)) + body
s.sendall(frame(b'{"id":1,"op":"write_open","root":"data","path":"big"}'))
print(s.recv(4096))
appends = b"".join(
    frame(b'{"id":%d,"op":"write_append","root":"data","path":"big","stream":1}' % (i + 2), bytes(65536))
    for i in range(64)
)
try:
    s.sendall(appends)
except OSError as e:
    print("send stopped:", e)
"#;
    let started = Instant::now();
    let run = isolated_argv(&p, &r, &["python3", "-c", flood]);
    assert_op_failed(&run, "broker.budget");
    let message = run.envelope["content"]["broker"]["failure"]["message"].as_str().unwrap_or("");
    assert!(message.contains("more than 8 operations outstanding"), "{run:#?}");
    assert_eq!(usage(&run, "max_outstanding"), 9, "{run:#?}");
    assert!(usage(&run, "write_bytes") <= 8 * 65536, "{run:#?}");
    assert!(usage(&run, "calls") <= 9, "{run:#?}");
    assert!(started.elapsed() < Duration::from_secs(25), "ended by the budget, not a deadline");
    assert!(!p.path("data/big").exists());
    // Small requests in one burst: the same bound, however many fit in
    // one read of the socket.
    let reads: Vec<String> =
        (1..=50).map(|i| format!(r#"b'{{"id":{i},"op":"read","root":"data","path":"a.txt","max":1}}'"#)).collect();
    let run = isolated_argv(&p, &r, &["python3", "-c", &raw_client(&format!("[{}]", reads.join(", ")))]);
    assert_op_failed(&run, "broker.budget");
    assert_eq!(usage(&run, "max_outstanding"), 9, "{run:#?}");
    assert_eq!(usage(&run, "calls"), 0, "nothing was charged past the flood: {run:#?}");
}
