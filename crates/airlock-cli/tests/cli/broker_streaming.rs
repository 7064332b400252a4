//! Whole files through the broker in bounded frames (issue 17): streamed
//! reads and chunked writes on the shipping binary, with real files, a file
//! changed during a read, a budget ending a copy and a SIGKILL during a
//! chunked write.

use crate::isolated::{assert_op_failed, root};
use crate::runkit::wait_until;
use crate::util::{sha256_hex, Project, Run};
use std::process::Stdio;
use std::time::Duration;

/// `airlock isolated --timeout 600 --root … -- ARGV`, bounded by that
/// deadline rather than `Project::run`'s 30 s (a 200 MB copy in a debug
/// build takes longer).
fn isolated(p: &Project, roots: &[String], argv: &[&str]) -> Run {
    let mut args = vec!["isolated".to_owned(), "--timeout".into(), "600".into()];
    for r in roots {
        args.extend(["--root".to_owned(), r.clone()]);
    }
    args.push("--".into());
    args.extend(argv.iter().map(|s| s.to_string()));
    let child = p.command(&args.iter().map(String::as_str).collect::<Vec<_>>()).spawn().unwrap();
    finished(args, child)
}

/// The run of a spawned `airlock` whose stdout and stderr are piped.
fn finished(args: Vec<String>, child: std::process::Child) -> Run {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let envelope = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout of airlock {args:?} is not one JSON object ({e}):\n{stdout}\n{stderr}"));
    Run { args, code: out.status.code().unwrap_or(-1), stdout, stderr, envelope }
}

/// A project whose broker budgets fit copies of `mib` MiB.
fn raised(mib: u64) -> Project {
    let bytes = (mib + 1) << 20;
    Project::with_config(&format!(
        "state_dir = \".airlock\"\n[broker]\ncalls = 1000000\nread_bytes = {bytes}\nwrite_bytes = {bytes}\n"
    ))
}

/// `n` bytes that are not a repetition of any short block.
pub(crate) fn content(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Staging entries directly in `dir`.
pub(crate) fn stage_entries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.to_ascii_lowercase().starts_with(".airlock-stage-"))
        .collect()
}

const PY_COPY: &str = r#"
import sys, airlock_fs
for name in sys.argv[1:]:
    data = airlock_fs.read("b", name)
    airlock_fs.write("out", "py-" + name, data)
    part = airlock_fs.read("b", name, 1000, offset=len(data) - 10)
    assert part == data[-10:], (len(part), name)
print("copied", flush=True)
"#;

/// Copies each of `names` from `data/` to `results/` with the `airlock-fs`
/// command (the Rust client) in a pipeline, and with the Python module;
/// both copies must be the source byte for byte.
fn copy_with_each_client(p: &Project, names: &[&str]) {
    let r = [root(p, "b", "data", "r"), root(p, "out", "results", "w")];
    let script: String = names
        .iter()
        .map(|n| format!("airlock-fs read b {n} | airlock-fs write out cli-{n} && "))
        .chain(["echo done".to_owned()])
        .collect();
    let run = isolated(p, &r, &["sh", "-c", &script]);
    run.assert_ok();
    let mut argv = vec!["python3", "-c", PY_COPY];
    argv.extend(names);
    let py = isolated(p, &r, &argv);
    py.assert_ok();
    for n in names {
        let source = std::fs::read(p.path(&format!("data/{n}"))).unwrap();
        for (copy, run) in [(format!("cli-{n}"), &run), (format!("py-{n}"), &py)] {
            let bytes = std::fs::read(p.path(&format!("results/{copy}"))).unwrap();
            assert_eq!(bytes.len(), source.len(), "{copy}");
            assert_eq!(sha256_hex(&bytes), sha256_hex(&source), "{copy}");
            let created = run.envelope["created_files"].as_array().unwrap();
            let entry =
                created.iter().find(|f| f["path"] == format!("out:{copy}")).unwrap_or_else(|| panic!("{run:#?}"));
            assert_eq!(entry["bytes"], source.len() as u64);
            assert_eq!(entry["sha256"].as_str().unwrap(), format!("sha256:{}", sha256_hex(&source)));
        }
    }
}

#[test]
fn a_270_kb_file_copies_whole_within_the_default_budgets() {
    let p = Project::new();
    p.write("data/small.bin", content(270_000, 1));
    copy_with_each_client(&p, &["small.bin"]);
}

#[test]
fn a_5_mb_file_copies_whole_with_raised_budgets() {
    let p = raised(12);
    p.write("data/mid.bin", content(5_000_000, 2));
    copy_with_each_client(&p, &["mid.bin"]);
    // The streamed read is one logged operation with the whole file's hash.
    let r = [root(&p, "b", "data", "r")];
    let run = isolated(&p, &r, &["sh", "-c", "airlock-fs read b mid.bin | wc -c"]);
    run.assert_ok();
    let ops = run.envelope["content"]["broker"]["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 1, "{ops:?}");
    let want = format!("sha256:{}", sha256_hex(&std::fs::read(p.path("data/mid.bin")).unwrap()));
    assert_eq!((ops[0]["amount"].as_u64(), ops[0]["sha256"].as_str()), (Some(5_000_000), Some(want.as_str())));
}

#[test]
fn a_200_mb_file_copies_whole_with_raised_budgets() {
    let p = raised(201);
    p.write("data/large.bin", content(200_000_000, 3));
    copy_with_each_client(&p, &["large.bin"]);
}

#[test]
fn max_and_offset_stop_on_purpose_and_say_so() {
    let p = Project::new();
    let source = content(200_000, 4);
    p.write("data/f.bin", &source);
    let r = [root(&p, "b", "data", "r"), root(&p, "out", "results", "w")];
    let run = isolated(
        &p,
        &r,
        &["sh", "-c", "airlock-fs read b f.bin --offset 5 --max 100000 2>&1 >/dev/null; airlock-fs read b f.bin --offset 5 --max 100000 | airlock-fs write out part.bin"],
    );
    run.assert_ok();
    assert_eq!(std::fs::read(p.path("results/part.bin")).unwrap(), &source[5..100_005]);
    let out = run.envelope["content"]["output"]["raw_output"].as_str().unwrap_or("");
    assert!(out.contains("stopped at 100000 of 200000 bytes (--max)"), "{run:#?}");
}

/// A streamed read whose file `change` alters between frames: the reader
/// is stalled on a full pipe, the worker says `ready`, the test changes the
/// file and says `go`.
fn changed_during_a_read(change: impl FnOnce(&std::path::Path)) {
    let p = raised(12);
    p.write("data/big.bin", content(5_000_000, 5));
    p.mkdir("results");
    let r = [root(&p, "b", "data", "rl"), root(&p, "out", "results", "w")];
    let script = "airlock-fs read b big.bin | { head -c 1 >/dev/null; sleep 1; printf 1 | airlock-fs write out ready; \
                  i=0; until airlock-fs list b . | grep -q '\tgo$'; do i=$((i+1)); [ $i -gt 200 ] && exit 7; sleep 0.1; done; \
                  cat >/dev/null; }";
    let args = ["isolated", "--root", &r[0], "--root", &r[1], "--", "sh", "-c", script];
    let child = p.command(&args).spawn().unwrap();
    assert!(wait_until(Duration::from_secs(60), || p.path("results/ready").exists()), "the worker never got ready");
    change(&p.path("data/big.bin"));
    p.write("data/go", "");
    let run = finished(args.iter().map(|a| a.to_string()).collect(), child);
    assert_op_failed(&run, "broker.changed");
    let message = run.envelope["content"]["broker"]["failure"]["message"].as_str().unwrap_or("");
    assert!(message.contains("changed since the read") && message.contains("read it again"), "{run:#?}");
}

#[test]
fn a_file_growing_during_a_streamed_read_fails_loudly() {
    changed_during_a_read(|f| {
        use std::io::Write;
        std::fs::OpenOptions::new().append(true).open(f).unwrap().write_all(b"more").unwrap();
    });
}

#[test]
fn a_file_shrinking_during_a_streamed_read_fails_loudly() {
    changed_during_a_read(|f| std::fs::OpenOptions::new().write(true).open(f).unwrap().set_len(1_000_000).unwrap());
}

#[test]
fn a_file_rewritten_in_place_during_a_streamed_read_fails_loudly() {
    // Same size, same inode: the frames airlock reads from the file it
    // holds would otherwise mix two versions.
    changed_during_a_read(|f| {
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new().write(true).open(f).unwrap().write_all_at(&[0xAA; 4096], 4_000_000).unwrap();
    });
}

#[test]
fn a_file_replaced_during_a_streamed_read_fails_loudly() {
    changed_during_a_read(|f| {
        let other = f.with_file_name("other.bin");
        std::fs::write(&other, content(5_000_000, 6)).unwrap();
        std::fs::rename(&other, f).unwrap();
    });
}

#[test]
fn a_budget_ending_a_copy_fails_and_leaves_no_partial_target() {
    let p = Project::with_config(
        "state_dir = \".airlock\"\n[broker]\ncalls = 1000\nread_bytes = 16777216\nwrite_bytes = 1000000\n",
    );
    p.write("data/mid.bin", content(5_000_000, 7));
    p.write("results/cli.bin", "old");
    p.write("results/py.bin", "old");
    let r = [root(&p, "b", "data", "r"), root(&p, "out", "results", "w")];
    let run = isolated(&p, &r, &["sh", "-c", "airlock-fs read b mid.bin | airlock-fs write out cli.bin"]);
    assert_op_failed(&run, "broker.budget");
    assert_eq!(run.envelope["content"]["broker"]["failure"]["op"], "write_append", "{run:#?}");
    let py = "import airlock_fs\nairlock_fs.write('out', 'py.bin', airlock_fs.read('b', 'mid.bin'))\n";
    let run = isolated(&p, &r, &["python3", "-c", py]);
    assert_op_failed(&run, "broker.budget");
    for f in ["cli.bin", "py.bin"] {
        assert_eq!(std::fs::read(p.path(&format!("results/{f}"))).unwrap(), b"old", "{f} was left as it was");
    }
    assert!(!p.path("results/new.bin").exists());
    assert!(stage_entries(&p.path("results")).is_empty(), "{:?}", stage_entries(&p.path("results")));
    // A read budget ends a streamed read: non-zero, never a short success.
    let small = Project::with_config("state_dir = \".airlock\"\n[broker]\ncalls = 1000\nread_bytes = 1000000\n");
    small.write("data/mid.bin", content(5_000_000, 7));
    let r = [root(&small, "b", "data", "r")];
    let run = isolated(&small, &r, &["sh", "-c", "airlock-fs read b mid.bin | wc -c"]);
    assert_op_failed(&run, "broker.budget");
    assert_eq!(run.envelope["content"]["broker"]["failure"]["op"], "read", "{run:#?}");
}

#[test]
fn sigkill_during_chunked_writes_then_recover_leaves_old_or_new() {
    let p = Project::new();
    let targets = 8;
    let new = content(200_000, 8);
    for i in 0..targets {
        p.write(&format!("results/t{i}"), "old");
    }
    p.write("data/new.bin", &new);
    let r = [root(&p, "b", "data", "r"), root(&p, "out", "results", "w")];
    let script = format!(
        "import airlock_fs\ndata = airlock_fs.read('b', 'new.bin')\nfor i in range({targets}):\n    airlock_fs.write('out', 't%d' % i, data)\n"
    );
    let mut killed_with_records = 0;
    for round in 0..6u64 {
        let mut child = p
            .command(&["isolated", "--root", &r[0], "--root", &r[1], "--", "python3", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_until(Duration::from_secs(30), || {
            (0..targets).any(|i| std::fs::read(p.path(&format!("results/t{i}"))).map(|b| b != b"old").unwrap_or(false))
        });
        std::thread::sleep(Duration::from_millis(7 * round));
        rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::KILL).unwrap();
        child.wait().unwrap();
        if p.path(".airlock/isolated").read_dir().map(|mut d| d.next().is_some()).unwrap_or(false) {
            killed_with_records += 1;
        }
        p.run(&["isolated", "recover", "--root", &r[1]]).assert_ok();
        assert!(stage_entries(&p.path("results")).is_empty(), "round {round}: {:?}", stage_entries(&p.path("results")));
        for i in 0..targets {
            let bytes = std::fs::read(p.path(&format!("results/t{i}"))).unwrap();
            assert!(bytes == b"old" || bytes == new, "round {round}: t{i} is partial ({} bytes)", bytes.len());
            p.write(&format!("results/t{i}"), "old");
        }
    }
    assert!(killed_with_records > 0, "no round left records to recover");
}
