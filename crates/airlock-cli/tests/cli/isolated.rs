//! `airlock isolated`: the named-root broker on the shipping binary, with
//! real files, real symlinks, real races, a real SIGKILL and a broker
//! stopped with a real SIGSTOP.

use crate::runkit::{children_of, wait_until};
use crate::util::{sha256_hex, Project, Run, AIRLOCK, CANARY};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `NAME=<abs path of DIR>:RIGHTS`.
pub(crate) fn root(p: &Project, name: &str, dir: &str, rights: &str) -> String {
    format!("{name}={}:{rights}", p.path(dir).display())
}

/// `airlock isolated --root … -- sh -c SCRIPT`.
fn isolated(p: &Project, roots: &[String], script: &str) -> Run {
    isolated_argv(p, roots, &["sh", "-c", script])
}

pub(crate) fn isolated_argv(p: &Project, roots: &[String], argv: &[&str]) -> Run {
    let mut args = vec!["isolated".to_owned()];
    for r in roots {
        args.push("--root".into());
        args.push(r.clone());
    }
    args.push("--".into());
    args.extend(argv.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    p.run(&args)
}

/// This process's umask (airlock inherits it).
fn test_umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix("Umask:")).unwrap();
    u32::from_str_radix(line.trim(), 8).unwrap()
}

/// The failed operation's own code, from the envelope.
pub(crate) fn op_code(run: &Run) -> &str {
    run.envelope["content"]["broker"]["failure"]["code"].as_str().unwrap_or("")
}

#[track_caller]
pub(crate) fn assert_op_failed(run: &Run, code: &str) {
    assert_eq!(
        (run.status(), run.reason(), run.code, op_code(run)),
        ("failed", "broker.operation_failed", 1, code),
        "expected the submission to fail on {code}:\n{run:#?}"
    );
}

/// The command's standard output (a text tool's `raw_output`).
fn output(run: &Run) -> &str {
    run.envelope["content"]["output"]["raw_output"].as_str().unwrap_or("")
}

/// Staging entries anywhere under `dir`.
fn stage_entries(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.to_ascii_lowercase().starts_with(".airlock-stage-") {
                found.push(e.path().display().to_string());
            }
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                stack.push(e.path());
            }
        }
    }
    found
}

#[test]
fn reads_lists_and_writes_through_the_broker() {
    let p = Project::new();
    p.write("data/message.txt", "hello from the broker");
    p.write("data/sub/b.txt", "b");
    p.mkdir("results/sub");
    p.write("results/sub/old.txt", "old");
    let run = isolated(
        &p,
        &[root(&p, "data", "data", "rl"), root(&p, "out", "results", "wl")],
        "airlock-fs read data message.txt && echo && airlock-fs list data . && printf new | airlock-fs write out sub/old.txt \
         && printf fresh | airlock-fs write out sub/new.txt",
    );
    run.assert_ok();
    // Lists mark each entry's kind (issue 17).
    assert_eq!(output(&run), "hello from the broker\nfile\tmessage.txt\ndir\tsub\n");
    assert_eq!(std::fs::read_to_string(p.path("results/sub/old.txt")).unwrap(), "new");
    assert_eq!(std::fs::read_to_string(p.path("results/sub/new.txt")).unwrap(), "fresh");
    let mode = std::fs::metadata(p.path("results/sub/new.txt")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666 & !test_umask(), "written files get 0666 less the caller's umask");
    let created: Vec<&str> =
        run.envelope["created_files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(created, ["out:sub/old.txt", "out:sub/new.txt"]);
    assert_eq!(run.envelope["created_files"][1]["sha256"], format!("sha256:{}", sha256_hex(b"fresh")));
    let ops = run.envelope["content"]["broker"]["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 4);
    assert_eq!(run.envelope["content"]["broker"]["usage"]["calls"], 4);
    assert!(stage_entries(&p.path("results")).is_empty());
    assert!(!p.path(".airlock/isolated").read_dir().unwrap().any(|_| true), "records are removed on close");
    let journal = p.run(&["journal", "show", "--json"]);
    let text = journal.stdout;
    assert!(text.contains("BrokerWrite") && text.contains("BrokerOperations"), "{text}");
}

#[test]
fn a_write_never_modifies_the_existing_inode() {
    let p = Project::new();
    p.write("results/t.txt", "before");
    std::fs::hard_link(p.path("results/t.txt"), p.path("outside/alias.txt")).unwrap();
    let ino = std::fs::metadata(p.path("results/t.txt")).unwrap().ino();
    let run = isolated(&p, &[root(&p, "out", "results", "w")], "printf after | airlock-fs write out t.txt");
    run.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/t.txt")).unwrap(), "after");
    assert_ne!(std::fs::metadata(p.path("results/t.txt")).unwrap().ino(), ino);
    assert_eq!(std::fs::read_to_string(p.path("outside/alias.txt")).unwrap(), "before", "the old inode is untouched");
}

#[test]
fn the_python_module_speaks_the_same_protocol() {
    let p = Project::new();
    p.write("data/in.txt", "python input");
    let script = r#"
import airlock_fs
data = airlock_fs.read("data", "in.txt", 100)
airlock_fs.write("out", "copy.txt", data.upper())
listing = airlock_fs.list("out", ".", 10)
# Flushed now: the refused read below ends the submission, and the worker
# may be killed before Python would flush at exit.
print(",".join(listing.names), listing.skipped, ",".join(listing.kinds), listing.truncated, flush=True)
try:
    airlock_fs.read("out", "copy.txt", 10)
except airlock_fs.FsError as e:
    print("refused", e.code)
"#;
    let run = isolated_argv(
        &p,
        &[root(&p, "data", "data", "r"), root(&p, "out", "results", "wl")],
        &["python3", "-c", script],
    );
    assert_op_failed(&run, "broker.denied");
    assert!(run.envelope["stdout_tail"].as_str().unwrap().contains("copy.txt 0 file False"), "{run:#?}");
    assert_eq!(std::fs::read_to_string(p.path("results/copy.txt")).unwrap(), "PYTHON INPUT");
}

#[test]
fn the_worker_sees_no_host_directory() {
    let p = Project::new();
    p.write("data/message.txt", CANARY);
    let data = p.path("data").display().to_string();
    let script = format!(
        "cat {data}/message.txt 2>/dev/null && exit 9; ls -A /workspace; ls /proc/self/fd; echo roots=$AIRLOCK_FS_ROOTS"
    );
    let run = isolated(&p, &[root(&p, "data", "data", "r")], &script);
    run.assert_ok();
    // fd 3 is the socket; the listing's own directory fd is the fourth.
    assert_eq!(output(&run), "0\n1\n2\n3\n4\nroots=data:r\n", "{run:#?}");
    assert!(!run.stdout.contains(CANARY));
}

#[test]
fn every_seed_003_path_refusal_ends_the_submission() {
    let p = Project::new();
    p.write("data/ok.txt", "ok");
    let long_component = "x".repeat(256);
    let deep = vec!["a"; 65].join("/");
    let long_path = vec!["y".repeat(200); 21].join("/");
    let cases: Vec<(&str, &str)> = vec![
        ("../outside/secret.txt", "path.traversal"),
        ("a/../ok.txt", "path.traversal"),
        ("/etc/passwd", "path.absolute"),
        ("a//b", "path.empty_component"),
        ("./ok.txt", "path.dot_component"),
        (".", "path.dot_component"),
        ("a\\b", "path.backslash"),
        ("C:x", "path.mount_delimiter"),
        ("a\nb", "path.control_char"),
        ("a\rb", "path.control_char"),
        ("a\u{1b}b", "path.control_char"),
        (&long_component, "path.component_too_long"),
        (&deep, "path.too_deep"),
        (&long_path, "path.too_long"),
        ("CON", "path.device_name"),
        ("nul.txt", "path.device_name"),
        ("COM1", "path.device_name"),
        ("LPT1.log", "path.device_name"),
        ("name.", "path.trailing_dot_or_space"),
        ("name ", "path.trailing_dot_or_space"),
        ("a<b", "path.reserved_char"),
        ("a>b", "path.reserved_char"),
        ("a\"b", "path.reserved_char"),
        ("a|b", "path.reserved_char"),
        ("a?b", "path.reserved_char"),
        ("a*b", "path.reserved_char"),
        (".git/config", "path.control_dir"),
        (".airlock/journal", "path.control_dir"),
        (".airlock-stage-0123456789abcdef0123456789abcdef", "broker.path_reserved"),
        ("sub/.AIRLOCK-Stage-x", "broker.path_reserved"),
        ("", "path.empty"),
    ];
    for (path, code) in cases {
        // The script ignores the error: the submission fails anyway.
        let script = "airlock-fs read data \"$1\"; echo survived; airlock-fs read data ok.txt";
        let run = isolated_argv(&p, &[root(&p, "data", "data", "r")], &["sh", "-c", script, "sh", path]);
        assert_op_failed(&run, code);
        assert!(!run.stdout.contains("\"ok\""), "no later operation was served: {run:#?}");
        assert_eq!(run.envelope["content"]["broker"]["usage"]["calls"], 1, "{path:?}: {run:#?}");
    }
    // `.` lists the root; nothing else does.
    let run = isolated(&p, &[root(&p, "data", "data", "l")], "airlock-fs list data .");
    run.assert_ok();
    assert_eq!(output(&run), "file\tok.txt\n");
}

#[test]
fn links_special_files_and_hard_links_are_refused() {
    let p = Project::new();
    p.write("data/ok.txt", "ok");
    std::os::unix::fs::symlink(p.path("outside/secret.txt"), p.path("data/link.txt")).unwrap();
    std::os::unix::fs::symlink("/etc", p.path("data/etc")).unwrap();
    std::os::unix::fs::symlink(p.path("outside"), p.path("results/away")).unwrap();
    std::os::unix::fs::symlink(p.path("outside/secret.txt"), p.path("results/target.txt")).unwrap();
    std::fs::hard_link(p.path("outside/secret.txt"), p.path("data/hard.txt")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p.path("data/fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let roots = [root(&p, "data", "data", "rl"), root(&p, "out", "results", "wl")];
    for (script, code) in [
        ("airlock-fs read data link.txt", "broker.symlink"),
        ("airlock-fs read data etc/passwd", "broker.symlink"),
        ("airlock-fs list data etc", "broker.symlink"),
        ("airlock-fs read data hard.txt", "broker.hardlink"),
        ("airlock-fs read data fifo", "broker.not_regular"),
        ("airlock-fs read data missing.txt", "broker.not_found"),
        ("airlock-fs list data ok.txt", "broker.not_regular"),
        ("printf x | airlock-fs write out away/new.txt", "broker.symlink"),
        ("printf x | airlock-fs write out target.txt", "broker.symlink"),
        ("printf x | airlock-fs write out missing/new.txt", "broker.not_found"),
    ] {
        let run = isolated(&p, &roots, script);
        assert_op_failed(&run, code);
        assert!(!run.stdout.contains(CANARY) && !run.stderr.contains(CANARY), "{run:#?}");
    }
    assert_eq!(std::fs::read_to_string(p.path("outside/secret.txt")).unwrap(), CANARY);
    let outside: Vec<_> = std::fs::read_dir(p.path("outside")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(outside.len(), 1, "nothing was written outside: {outside:?}");
    // A listing counts the entries it may not show.
    let run = isolated(&p, &roots, "airlock-fs list data .");
    run.assert_ok();
    assert!(output(&run).contains("ok.txt"), "{run:#?}");
}

#[test]
fn rights_are_independent() {
    let p = Project::new();
    p.write("data/a.txt", "a");
    for (rights, script, refused) in [
        ("r", "airlock-fs list data .", true),
        ("r", "printf x | airlock-fs write data b.txt", true),
        ("w", "airlock-fs read data a.txt", true),
        ("w", "airlock-fs list data .", true),
        ("l", "airlock-fs read data a.txt", true),
        ("l", "printf x | airlock-fs write data b.txt", true),
        ("r", "airlock-fs read data a.txt", false),
        ("w", "printf x | airlock-fs write data b.txt", false),
        ("l", "airlock-fs list data .", false),
    ] {
        let run = isolated(&p, &[root(&p, "data", "data", rights)], script);
        if refused {
            assert_op_failed(&run, "broker.denied");
        } else {
            run.assert_ok();
        }
    }
    let run = isolated(&p, &[root(&p, "data", "data", "r")], "airlock-fs read nosuch a.txt");
    assert_op_failed(&run, "broker.denied");
}

#[test]
fn budgets_are_charged_before_checking_and_end_the_submission() {
    let p = Project::with_config(
        "state_dir = \".airlock\"\n[broker]\ncalls = 3\noutstanding = 2\nread_bytes = 100\nentries = 10\n",
    );
    p.write("data/a.txt", "five!");
    let r = [root(&p, "data", "data", "rl")];
    let run = isolated(&p, &r, "for i in 1 2 3 4; do airlock-fs read data a.txt --max 10 || true; done; true");
    assert_op_failed(&run, "broker.budget");
    assert_eq!(run.envelope["content"]["broker"]["usage"]["calls"], 4);
    // Reads charge what they reserve (60), not what they got (5).
    let run = isolated(&p, &r, "airlock-fs read data a.txt --max 60 && airlock-fs read data a.txt --max 60");
    assert_op_failed(&run, "broker.budget");
    // Lists charge the names they return (issue 17), never more than the
    // budget left: 6 names of 10, then a listing the 4 left would cut.
    for i in 1..=5 {
        p.write(&format!("data/n{i}"), "");
    }
    let run = isolated(&p, &r, "airlock-fs list data . --max 8 && airlock-fs list data . --max 8");
    assert_op_failed(&run, "broker.budget");
    assert_eq!(run.envelope["content"]["broker"]["usage"]["entries"], 10, "{run:#?}");
    let run = isolated(&p, &r, "airlock-fs list data . --max 8 && airlock-fs list data . --max 4");
    run.assert_ok();
    assert_eq!(run.envelope["content"]["broker"]["usage"]["entries"], 10, "6 + 4 returned: {run:#?}");
    // The byte budget is charged before the path and right are checked,
    // but a `max` over the operation's limit is refused when the request is
    // decoded, before any byte is charged.
    let run = isolated(&p, &r, "airlock-fs read data nothing-here --max 101");
    assert_op_failed(&run, "broker.budget");
    let over = raw_client(r#"[b'{"id":1,"op":"read","root":"data","path":"a.txt","max":65537}']"#);
    let run = isolated_argv(&p, &r, &["python3", "-c", &over]);
    assert_op_failed(&run, "broker.limit");
    assert_eq!(run.envelope["content"]["broker"]["usage"]["read_bytes"], 0, "{run:#?}");
    // Limits of one frame, within the default budgets (the `airlock-fs`
    // command streams past them since issue 17: see broker_streaming).
    let p = Project::new();
    p.write("data/a.txt", "five!");
    let rw = [root(&p, "data", "data", "rwl")];
    let run = isolated_argv(&p, &rw, &["python3", "-c", &over]);
    assert_op_failed(&run, "broker.limit");
    let run = isolated(&p, &rw, "airlock-fs list data . --max 257");
    assert_op_failed(&run, "broker.limit");
    let append = raw_client(
        r#"[b'{"id":1,"op":"write_open","root":"data","path":"big"}', data_frame(b'{"id":2,"op":"write_append","root":"data","path":"big","stream":1}', bytes(65537))]"#,
    );
    let run = isolated_argv(&p, &rw, &["python3", "-c", &append]);
    assert_op_failed(&run, "broker.limit");
    assert!(!p.path("data/big").exists());
    let run =
        isolated(&p, &rw, "head -c 65536 /dev/zero | airlock-fs write data big && airlock-fs read data big | wc -c");
    run.assert_ok();
    assert_eq!(output(&run).trim(), "65536");
    // Budgets may be raised up to their hard caps (issue 17), not past them.
    let p2 = Project::with_config("state_dir = \".airlock\"\n[broker]\ncalls = 1000000\n");
    isolated(&p2, &[root(&p2, "data", "data", "r")], "true").assert_ok();
    let p3 = Project::with_config("state_dir = \".airlock\"\n[broker]\ncalls = 1000001\n");
    let run = isolated(&p3, &[root(&p3, "data", "data", "r")], "true");
    assert_eq!((run.status(), run.reason(), run.code), ("error", "config.invalid", 78), "{run:#?}");
}

/// A raw client in Python: sends FRAMES (bodies, as bytes objects; a
/// `data_frame(header, payload)` is a data frame's) at once, then prints
/// each answer's code or "ok".
pub(crate) fn raw_client(frames: &str) -> String {
    format!(
        r#"
import json, os, socket, struct
s = socket.socket(fileno=int(os.environ["AIRLOCK_FS_FD"]))
def data_frame(header, payload):
    return b"\x01" + struct.pack(">H", len(header)) + header + payload
def header(body):
    if body[:1] == b"\x01":
        return body[3:3 + struct.unpack(">H", body[1:3])[0]]
    return body
frames = {frames}
s.sendall(b"".join(struct.pack(">I", len(f)) + f for f in frames))
for _ in frames:
    head = s.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        break
    body = json.loads(header(s.recv(struct.unpack(">I", head)[0], socket.MSG_WAITALL)))
    print(body.get("error", {{}}).get("code", "ok"))
"#
    )
}

#[test]
fn protocol_violations_end_the_submission() {
    let p = Project::new();
    p.write("data/a.txt", "a");
    let read = |id: u64| format!(r#"b'{{"id":{id},"op":"read","root":"data","path":"a.txt","max":1}}'"#);
    for (frames, code) in [
        (format!("[{}, {}]", read(5), read(5)), "broker.protocol"),
        (format!("[{}, {}]", read(5), read(4)), "broker.protocol"),
        (r#"[b'{"id":1,"op":"read","root":"data","path":"a.txt","max":1,"extra":1}']"#.into(), "broker.protocol"),
        (r#"[b'{"id":1,"op":"read","root":"data","path":"a.txt"}']"#.into(), "broker.protocol"),
        (r#"[b'{"id":1,"op":"read","root":"data","path":"a.txt","max":1,"data":"YQ=="}']"#.into(), "broker.protocol"),
        (r#"[b'{"id":1,"op":"unlink","root":"data","path":"a.txt"}']"#.into(), "broker.protocol"),
        (r#"[b'[[[[[[1]]]]]]']"#.into(), "broker.protocol"),
        (r#"[b'not json']"#.into(), "broker.protocol"),
        (format!("[{}]*5", read(1)).replace("]*5", "] + [b'{\"id\":%d,\"op\":\"read\",\"root\":\"data\",\"path\":\"a.txt\",\"max\":1}' % i for i in range(2, 10)]"), "broker.budget"),
    ] {
        let run = isolated_argv(&p, &[root(&p, "data", "data", "r")], &["python3", "-c", &raw_client(&frames)]);
        assert_op_failed(&run, code);
    }
    // A frame longer than allowed is refused from its length alone.
    let script = r#"
import os, socket, struct
s = socket.socket(fileno=int(os.environ["AIRLOCK_FS_FD"]))
s.sendall(struct.pack(">I", 1 << 30))
print(s.recv(100))
"#;
    let run = isolated_argv(&p, &[root(&p, "data", "data", "r")], &["python3", "-c", script]);
    assert_op_failed(&run, "broker.protocol");
}

#[test]
fn invalid_grants_are_refused_before_anything_starts() {
    let p = Project::new();
    std::os::unix::fs::symlink(p.path("outside"), p.path("linkroot")).unwrap();
    let cases = [
        (vec!["Data=/tmp:r".to_owned()], "broker.root_invalid", 64),
        (vec![format!("data={}:rx", p.path("data").display())], "broker.root_invalid", 64),
        (
            vec![format!("data={}:r", p.path("data").display()), format!("data={}:w", p.path("results").display())],
            "broker.root_invalid",
            64,
        ),
        (vec![root(&p, "link", "linkroot", "r")], "broker.root_unusable", 77),
        (vec![root(&p, "state", ".airlock", "r")], "broker.root_unusable", 77),
        (vec![root(&p, "gone", "missing", "r")], "broker.root_unusable", 77),
        (vec!["proc=/proc:r".to_owned()], "broker.root_unusable", 77),
    ];
    for (roots, code, exit) in cases {
        let run = isolated(&p, &roots, "echo ran");
        run.assert_refused(code, exit);
    }
    let many: Vec<String> = (0..65).map(|i| format!("r{i}={}:r", p.path("data").display())).collect();
    isolated(&p, &many, "true").assert_refused("broker.root_invalid", 64);
}

#[test]
fn a_pinned_broker_digest_is_the_copy_that_runs() {
    let p = Project::new();
    p.write("data/a.txt", "pinned");
    let broker = Path::new(AIRLOCK).with_file_name("airlock-broker");
    let digest = sha256_hex(&std::fs::read(&broker).unwrap());
    let r = root(&p, "data", "data", "r");
    let wrong = "0".repeat(64);
    let run =
        p.run(&["isolated", "--broker-sha256", &wrong, "--root", &r, "--", "airlock-fs", "read", "data", "a.txt"]);
    run.assert_refused("broker.digest_mismatch", 77);
    let run =
        p.run(&["isolated", "--broker-sha256", &digest, "--root", &r, "--", "airlock-fs", "read", "data", "a.txt"]);
    run.assert_ok();
    assert_eq!(output(&run), "pinned");
    let d = &run.envelope["descriptor"];
    assert!(d.is_null(), "the envelope binds the descriptor by digest");
}

#[test]
fn a_manifest_names_roots_whose_paths_the_operator_configures() {
    let p = Project::with_config("state_dir = \".airlock\"\n[broker.roots]\ndata = \"./data\"\nout = \"./results\"\n");
    p.write("data/in.txt", "from a manifest");
    p.write(
        "tools/mirror.clad.toml",
        r#"[tool]
name = "mirror"
version = "1.0.0"
description = "copies data:in.txt to out:copy.txt through the broker"
risk_tier = "low"
timeout_seconds = 30

[broker]
roots = ["data:r", "out:w"]

[command]
exec = ["sh", "-c", "airlock-fs read data in.txt | airlock-fs write out copy.txt && echo done"]

[output]
format = "text"
"#,
    );
    let run = p.run(&["run", "mirror"]);
    run.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/copy.txt")).unwrap(), "from a manifest");
    assert_eq!(run.envelope["created_files"][0]["path"], "out:copy.txt");
    // Run once, never kept for a later dispatch (which would bypass the broker).
    p.run(&["prepare", "mirror"]).assert_refused("manifest.unsupported", 65);
    p.write(
        "tools/bad.clad.toml",
        "[tool]\nname = \"bad\"\nversion = \"1\"\ndescription = \"x\"\n[broker]\nroots = [\"nosuch:r\"]\n[command]\nexec = [\"true\"]\n",
    );
    p.run(&["run", "bad"]).assert_refused("broker.root_invalid", 64);
}

#[test]
fn replacing_a_root_after_start_changes_nothing_the_broker_reaches() {
    let p = Project::new();
    p.write("data/a.txt", "original");
    p.mkdir("results/ready");
    let r = [root(&p, "data", "data", "rl"), root(&p, "out", "results", "w")];
    let script = "printf 1 | airlock-fs write out ready/flag && \
                  i=0; until airlock-fs list data . --max 4 | grep -q '\tgo$'; do i=$((i+1)); [ $i -gt 80 ] && exit 7; sleep 0.1; done; \
                  airlock-fs read data a.txt && printf late | airlock-fs write out late.txt";
    let mut args: Vec<String> = vec!["isolated".into()];
    for x in &r {
        args.extend(["--root".into(), x.clone()]);
    }
    args.extend(["--".into(), "sh".into(), "-c".into(), script.into()]);
    let child = p.command(&args.iter().map(String::as_str).collect::<Vec<_>>()).spawn().unwrap();
    assert!(wait_until(Duration::from_secs(20), || p.path("results/ready/flag").exists()), "the worker never started");
    // Both roots are moved away and replaced by impostors at the same paths.
    std::fs::rename(p.path("data"), p.path("data-moved")).unwrap();
    std::fs::rename(p.path("results"), p.path("results-moved")).unwrap();
    p.write("data/a.txt", "impostor");
    p.write("data/go", "");
    p.mkdir("results");
    p.write("data-moved/go", "");
    let out = child.wait_with_output().unwrap();
    let envelope: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(envelope["status"], "ok", "{envelope:#}");
    assert_eq!(envelope["content"]["output"]["raw_output"], "original");
    assert!(!p.path("results/late.txt").exists(), "nothing reached the new directory");
    assert_eq!(std::fs::read_to_string(p.path("results-moved/late.txt")).unwrap(), "late");
}

#[test]
fn a_symlink_swapped_over_a_write_target_never_redirects_a_write() {
    let p = Project::new();
    p.mkdir("results/d");
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let racer = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let (d, aside, outside) = (p.path("results/d"), p.path("results/d-real"), p.path("outside"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if std::fs::rename(&d, &aside).is_ok() {
                    let _ = std::os::unix::fs::symlink(&outside, &d);
                    std::thread::sleep(Duration::from_micros(300));
                    let _ = std::fs::remove_file(&d);
                    let _ = std::fs::rename(&aside, &d);
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(8));
            }
        })
    };
    let script = r#"
import airlock_fs
for i in range(95):
    airlock_fs.write("out", "d/f%d" % i, b"w")
"#;
    let (mut attempts, mut landed, mut submissions, started) = (0u64, 0u64, 0u64, Instant::now());
    while attempts < 1000 && started.elapsed() < Duration::from_secs(400) {
        submissions += 1;
        let run = isolated_argv(&p, &[root(&p, "out", "results", "w")], &["python3", "-c", script]);
        let ops = run.envelope["content"]["broker"]["operations"].as_array().cloned().unwrap_or_default();
        attempts += ops.len() as u64;
        landed += ops.iter().filter(|o| o["result"] == "ok").count() as u64;
        if run.status() != "ok" {
            assert!(
                matches!(op_code(&run), "broker.symlink" | "broker.not_found" | "broker.race"),
                "a write failed for another reason: {run:#?}"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();
    eprintln!("{attempts} writes attempted in {submissions} submissions, {landed} landed, {swaps:?} swaps");
    assert!(attempts >= 1000, "only {attempts} writes were attempted");
    assert!(landed > 0 && swaps.load(Ordering::Relaxed) > 0, "landed {landed}, swaps {swaps:?}");
    let outside: Vec<_> = std::fs::read_dir(p.path("outside")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(outside.len(), 1, "a write landed outside the root: {outside:?}");
    assert!(stage_entries(p.root()).is_empty());
}

/// The CI failure this pins: every write landed, then a host process swapped
/// the writes' directory for a symlink just as the submission closed, and
/// the close, reopening that directory by path to look for staging entries,
/// answered `broker.cleanup_failed` for a submission that had finished.
#[test]
fn a_symlink_over_a_written_directory_at_close_fails_nothing_that_landed() {
    let p = Project::new();
    p.mkdir("results/d");
    p.mkdir("signal");
    let r = [root(&p, "out", "results", "w"), root(&p, "signal", "signal", "rl")];
    let script = "for i in 1 2 3; do printf w | airlock-fs write out d/f$i || exit 9; done; \
                  printf 1 | airlock-fs write out ready && \
                  i=0; until airlock-fs list signal . --max 4 | grep -q '\tgo$'; do i=$((i+1)); [ $i -gt 80 ] && exit 7; sleep 0.1; done";
    let mut args: Vec<String> = vec!["isolated".into()];
    for x in &r {
        args.extend(["--root".into(), x.clone()]);
    }
    args.extend(["--".into(), "sh".into(), "-c".into(), script.into()]);
    let child = p.command(&args.iter().map(String::as_str).collect::<Vec<_>>()).spawn().unwrap();
    assert!(wait_until(Duration::from_secs(20), || p.path("results/ready").exists()), "the worker never wrote");
    std::fs::rename(p.path("results/d"), p.path("results/d-real")).unwrap();
    std::os::unix::fs::symlink(p.path("outside"), p.path("results/d")).unwrap();
    p.write("signal/go", "");
    let out = child.wait_with_output().unwrap();
    let envelope: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(envelope["status"], "ok", "{envelope:#}");
    for i in 1..=3 {
        assert_eq!(std::fs::read_to_string(p.path(&format!("results/d-real/f{i}"))).unwrap(), "w");
    }
    let outside: Vec<_> = std::fs::read_dir(p.path("outside")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(outside.len(), 1, "only the canary is outside: {outside:?}");
    assert!(stage_entries(p.root()).is_empty());
}

#[test]
fn sigkill_during_writes_then_recover_leaves_old_or_new_and_no_staging() {
    let p = Project::new();
    let targets = 40;
    for i in 0..targets {
        p.write(&format!("results/t{i}"), "old");
    }
    let r = root(&p, "out", "results", "w");
    let script = format!(
        r#"
import airlock_fs
for i in range({targets}):
    airlock_fs.write("out", "t%d" % i, b"new" * 5000)
"#
    );
    let mut killed_mid_write = 0;
    for round in 0..6 {
        let mut child = p
            .command(&["isolated", "--root", &r, "--", "python3", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill once writes are under way, at a different moment each round.
        wait_until(Duration::from_secs(20), || {
            (0..targets).any(|i| std::fs::read(p.path(&format!("results/t{i}"))).map(|b| b != b"old").unwrap_or(false))
        });
        std::thread::sleep(Duration::from_millis(3 * round));
        rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::KILL).unwrap();
        child.wait().unwrap();
        let records = p.path(".airlock/isolated");
        if records.read_dir().map(|mut d| d.next().is_some()).unwrap_or(false) {
            killed_mid_write += 1;
        }
        let run = p.run(&["isolated", "recover", "--root", &r]);
        run.assert_ok();
        assert!(stage_entries(&p.path("results")).is_empty(), "round {round}: {:?}", stage_entries(&p.path("results")));
        for i in 0..targets {
            let bytes = std::fs::read(p.path(&format!("results/t{i}"))).unwrap();
            assert!(bytes == b"old" || bytes == b"new".repeat(5000), "t{i} is partial ({} bytes)", bytes.len());
        }
        for i in 0..targets {
            p.write(&format!("results/t{i}"), "old");
        }
    }
    assert!(killed_mid_write > 0, "no round left records to recover");
    // Recovery refuses roots other than the ones written under.
    let run = p.run(&["isolated", "recover", "--root", &root(&p, "out", "data", "w")]);
    run.assert_ok();
}

#[test]
fn a_broker_manifest_is_served_over_mcp() {
    let p = Project::with_config("state_dir = \".airlock\"\n[broker.roots]\ndata = \"./data\"\nout = \"./results\"\n");
    p.write("data/in.txt", "over mcp");
    p.write(
        "tools/upper.clad.toml",
        r#"[tool]
name = "upper"
version = "1.0.0"
description = "upper-cases data:NAME into out:NAME through the broker"
timeout_seconds = 30

[args.name]
type = "string"
required = true
pattern = "^[a-z]+\\.txt$"

[broker]
roots = ["data:r", "out:w"]

[command]
exec = ["sh", "-c", "airlock-fs read data \"$0\" | tr a-z A-Z | airlock-fs write out \"$0\"", "{name}"]
"#,
    );
    let mut s = crate::mcpkit::McpSession::start(&p);
    let r = s.call("upper", serde_json::json!({"name": "in.txt"}));
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["created_files"][0]["path"], "out:in.txt", "{r}");
    assert_eq!(std::fs::read_to_string(p.path("results/in.txt")).unwrap(), "OVER MCP");
    let refused = s.call("upper", serde_json::json!({"name": "missing.txt"}));
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(refused["structuredContent"]["error"]["code"], "broker.operation_failed", "{refused}");
    assert!(s.close().success());
}

#[test]
fn cedar_sees_the_roots_and_can_forbid_a_write_root() {
    let p = Project::with_config("state_dir = \".airlock\"\n[policy]\nfiles = [\"policy/*.cedar\"]\n");
    p.write(
        "policy/isolated.cedar",
        r#"@id("isolated-ok")
permit(principal, action == Airlock::Action::"tool_call::isolated", resource);

@id("no-writes-to-secrets")
forbid(principal, action, resource) when {
  context.invocation.resolved.command_boundary.filesystem has broker &&
  context.invocation.resolved.command_boundary.filesystem.broker.write_roots.contains("secrets")
};
"#,
    );
    p.write("data/a.txt", "a");
    let ok = isolated(&p, &[root(&p, "data", "data", "r")], "airlock-fs read data a.txt");
    ok.assert_ok();
    assert_eq!(ok.envelope["evidence"]["policy_ids"], serde_json::json!(["isolated-ok"]));
    let denied = isolated(&p, &[root(&p, "data", "data", "r"), root(&p, "secrets", "results", "w")], "echo ran");
    denied.assert_refused("policy.denied", 77);
    assert!(denied.envelope["error"]["message"].as_str().unwrap().contains("no-writes-to-secrets"), "{denied:#?}");
    assert!(!denied.stdout.contains("ran"));
    // The same root read-only is allowed.
    isolated(&p, &[root(&p, "secrets", "results", "r")], "true").assert_ok();
}

#[test]
fn a_broker_that_stops_answering_ends_the_submission_at_its_deadline() {
    let p = Project::with_config("state_dir = \".airlock\"\n[broker]\ncalls = 1000000\nread_bytes = 1000000000\n");
    p.write("data/f.txt", "a few bytes");
    let r = root(&p, "data", "data", "r");
    let reader = "import airlock_fs\nwhile True:\n    airlock_fs.read('data', 'f.txt')\n";
    let child = p
        .command(&["isolated", "--timeout", "4", "--root", &r, "--", "python3", "-c", reader])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    // The broker: airlock's child run from its sealed copy, once it serves.
    let mut broker = None;
    wait_until(Duration::from_secs(20), || {
        broker = children_of(child.id()).into_iter().find(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|exe| exe.to_string_lossy().contains("airlock-broker"))
        });
        broker.is_some()
    });
    let broker = broker.expect("the broker is airlock's child");
    std::thread::sleep(Duration::from_millis(500));
    let pid = rustix::process::Pid::from_raw(broker as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    let out = child.wait_with_output().unwrap();
    let waited = started.elapsed();
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    let envelope: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&envelope["status"], &envelope["error"]["code"]),
        (&"error".into(), &"broker.failed".into()),
        "{envelope:#}"
    );
    let message = envelope["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("no answer before the deadline"), "{envelope:#}");
    assert!(waited >= Duration::from_secs(4), "it waited for the deadline: {waited:?}");
    assert!(waited < Duration::from_secs(20), "and not much longer: {waited:?}");
}
