//! Issue 18 §5 and MCP progress (§4): logs through `AIRLOCK_LOG` /
//! `RUST_LOG` on stderr or in `AIRLOCK_LOG_FILE`, never on stdout; one log
//! line per MCP request; progress of long snapshots as a bar on a terminal
//! only, and as `notifications/progress` to an MCP client that asked.

use crate::mcpkit::McpSession;
use crate::util::{Project, Run};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

const MIB: u64 = 1 << 20;
/// Larger than the runtime's 64 MiB threshold of a long phase.
const LARGE: u64 = 72 * MIB;

/// A project whose limits admit a [`LARGE`] input, with a tool that counts
/// the bytes of one input (no output file).
fn large_project() -> Project {
    let p = Project::with_config(&format!(
        r#"
state_dir = ".airlock"
[filesystem]
roots = ["./data:data:ro", "./results:results:rw"]
[limits]
max_input_file_bytes = {big}
max_input_bytes = {big}
"#,
        big = 128 * MIB
    ));
    p.write(
        "tools/count.clad.toml",
        r#"
[tool]
name = "count"
version = "1.0.0"
description = "count the bytes of one file"
[args.input]
position = 1
required = true
type = "path"
description = "file to count"
[command]
exec = ["wc", "-c", "{input}"]
[output]
format = "text"
[filesystem]
read = ["{input}"]
"#,
    );
    // Sparse: made at once, read as zeros.
    std::fs::File::create(p.path("data/big.bin")).unwrap().set_len(LARGE).unwrap();
    p
}

/// Runs the binary with extra environment variables; stdout must be one
/// JSON object on one line.
fn run_env(p: &Project, env: &[(&str, &str)], args: &[&str]) -> Run {
    let out = p.command(args).envs(env.iter().copied()).output().expect("run airlock");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stdout.lines().count(), 1, "stdout is one line:\n{stdout}\nstderr:\n{stderr}");
    let envelope: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{stdout}\nstderr:\n{stderr}"));
    Run {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: out.status.code().unwrap_or(-1),
        stdout,
        stderr,
        envelope,
    }
}

/// The default test project with one small input, `data/in.txt`.
fn small_project() -> Project {
    let p = Project::new();
    p.write("data/in.txt", "hello\n");
    p
}

fn copy_args() -> [&'static str; 4] {
    ["run", "copy", "data/in.txt", "results/out.txt"]
}

#[test]
fn debug_logs_go_to_stderr_and_stdout_stays_one_answer() {
    let p = small_project();
    let run = run_env(&p, &[("AIRLOCK_LOG", "debug")], &copy_args());
    run.assert_ok();
    let id = run.envelope["invocation_id"].as_str().unwrap();
    for step in ["prepared", "authorized", "worker started", "worker finished", "published", "call finished"] {
        let line = run.stderr.lines().find(|l| l.contains(&format!(": {step}")));
        let line = line.unwrap_or_else(|| panic!("no {step:?} line on stderr:\n{}", run.stderr));
        assert!(line.contains(id) && line.contains("tool=copy"), "the call's span names it: {line}");
    }
    assert!(run.stderr.contains("duration_ms="), "{}", run.stderr);
    assert!(!run.stdout.contains("DEBUG") && !run.stdout.contains("INFO"), "{}", run.stdout);
}

#[test]
fn rust_log_is_read_when_airlock_log_is_unset_and_airlock_log_wins() {
    let p = small_project();
    let run = run_env(&p, &[("RUST_LOG", "debug")], &copy_args());
    run.assert_ok();
    assert!(run.stderr.contains("call finished"), "{}", run.stderr);
    let run = run_env(
        &p,
        &[("RUST_LOG", "debug"), ("AIRLOCK_LOG", "warn")],
        &["run", "copy", "data/in.txt", "results/b.txt"],
    );
    run.assert_ok();
    assert_eq!(run.stderr, "", "AIRLOCK_LOG=warn wins over RUST_LOG");
}

#[test]
fn by_default_a_run_logs_nothing() {
    let p = small_project();
    let run = run_env(&p, &[], &copy_args());
    run.assert_ok();
    assert_eq!(run.stderr, "");
}

#[test]
fn a_filter_that_does_not_parse_is_refused() {
    let p = small_project();
    let run = run_env(&p, &[("AIRLOCK_LOG", "airlock_runtime=[")], &copy_args());
    assert_eq!((run.status(), run.reason(), run.code), ("error", "config.logging", 78), "{run:#?}");
    assert!(run.stderr.contains("AIRLOCK_LOG"), "{}", run.stderr);
    assert!(!p.path("results/out.txt").exists(), "nothing ran");
}

#[test]
fn the_log_file_is_appended_private_and_never_reached_through_a_link() {
    let p = small_project();
    let log = p.path("airlock.log");
    let env = [("AIRLOCK_LOG", "info"), ("AIRLOCK_LOG_FILE", log.to_str().unwrap())];
    let first = run_env(&p, &env, &copy_args());
    first.assert_ok();
    let second = run_env(&p, &env, &["run", "copy", "data/in.txt", "results/two.txt"]);
    second.assert_ok();
    assert_eq!(first.stderr, "", "the lines went to the file");
    let text = std::fs::read_to_string(&log).unwrap();
    for run in [&first, &second] {
        let id = run.envelope["invocation_id"].as_str().unwrap();
        assert!(text.lines().any(|l| l.contains(id) && l.contains("call finished")), "appended: {text}");
    }
    assert!(!text.contains('\u{1b}'), "no colours in a file");
    assert_eq!(std::fs::metadata(&log).unwrap().permissions().mode() & 0o777, 0o600);

    // A link at the path is refused; its target is neither made nor written.
    let target = p.path("outside/target.log");
    let link = p.path("link.log");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let env = [("AIRLOCK_LOG", "debug"), ("AIRLOCK_LOG_FILE", link.to_str().unwrap())];
    let run = run_env(&p, &env, &["run", "copy", "data/in.txt", "results/three.txt"]);
    assert_eq!((run.status(), run.reason(), run.code), ("error", "config.logging", 78), "{run:#?}");
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("symbolic link"), "{run:#?}");
    assert!(!target.exists(), "the link was not followed");
    assert!(!p.path("results/three.txt").exists(), "nothing ran");
}

/// The lines of the server's stderr for requests.
fn request_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("airlock::request")).collect()
}

#[test]
fn airlock_mcp_logs_one_line_per_request() {
    let p = small_project();
    let err_path = p.path("outside/mcp.stderr");
    let err = std::fs::File::create(&err_path).unwrap();
    let mut s = McpSession::start_with(&p, &[], Stdio::from(err));
    let tools = s.request("tools/list", json!({}));
    assert!(tools["result"]["tools"].is_array(), "{tools}");
    let result = s.call("copy", json!({"input": "data/in.txt", "output": "results/out.txt"}));
    let id = result["structuredContent"]["invocation_id"].as_str().unwrap().to_owned();
    let refused = s.call("copy", json!({"input": "data/missing.txt", "output": "results/x.txt"}));
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(s.close().success());
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    let lines = request_lines(&stderr);
    assert_eq!(lines.len(), 3, "one line per request, by default:\n{stderr}");
    assert!(lines[0].contains(r#"method="tools/list""#) && lines[0].contains(r#"principal="local""#), "{}", lines[0]);
    let call = lines[1];
    for field in [
        r#"method="tools/call""#.to_owned(),
        r#"principal="local""#.to_owned(),
        r#"tool="copy""#.to_owned(),
        format!(r#"invocation_id="{id}""#),
        r#"status="ok""#.to_owned(),
        "duration_ms=".to_owned(),
    ] {
        assert!(call.contains(&field), "{field} missing: {call}");
    }
    assert!(lines[2].contains(r#"status="refused""#) && lines[2].contains(r#"code="input.missing""#), "{}", lines[2]);
    assert!(!stderr.contains("hello"), "contents are never logged");
}

/// The `notifications/progress` of `token` the session has seen.
fn progress_of<'a>(s: &'a McpSession, token: &str) -> Vec<&'a Value> {
    s.notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress" && n["params"]["progressToken"] == token)
        .map(|n| &n["params"])
        .collect()
}

#[test]
fn an_mcp_client_with_a_progress_token_hears_a_large_snapshot() {
    let p = large_project();
    let mut s = McpSession::start_with(&p, &[], Stdio::null());
    let params = json!({
        "name": "count",
        "arguments": {"input": "data/big.bin"},
        "_meta": {"progressToken": "big-1"},
    });
    let answer = s.request("tools/call", params);
    assert_eq!(answer["result"]["structuredContent"]["status"], "ok", "{answer}");
    // Every notification arrived before the answer (the session files them
    // in order of arrival, and stops reading at the answer).
    let seen = progress_of(&s, "big-1");
    assert!(seen.len() >= 2, "a start and an end at least: {:?}", s.notifications);
    let (first, last) = (seen[0], seen[seen.len() - 1]);
    assert_eq!((first["progress"].as_f64(), first["total"].as_f64()), (Some(0.0), Some(LARGE as f64)), "{first}");
    assert_eq!((last["progress"].as_f64(), last["total"].as_f64()), (Some(LARGE as f64), Some(LARGE as f64)), "{last}");
    assert!(first["message"].as_str().unwrap().contains("snapshotting inputs"), "{first}");
    assert!(last["message"].as_str().unwrap().contains("done"), "{last}");
    let values: Vec<f64> = seen.iter().map(|n| n["progress"].as_f64().unwrap()).collect();
    assert!(values.windows(2).all(|w| w[0] <= w[1]), "progress never goes back: {values:?}");

    // Without a token, no notification.
    let before = s.notifications.len();
    let quiet = s.call("count", json!({"input": "data/big.bin"}));
    assert_eq!(quiet["structuredContent"]["status"], "ok", "{quiet}");
    assert_eq!(s.notifications.len(), before, "{:?}", &s.notifications[before..]);
}

#[test]
fn a_small_call_sends_no_progress_even_when_asked() {
    let p = large_project();
    p.write("data/small.txt", "hello\n");
    let mut s = McpSession::start_with(&p, &[], Stdio::null());
    let params = json!({"name": "count", "arguments": {"input": "data/small.txt"}, "_meta": {"progressToken": 7}});
    let answer = s.request("tools/call", params);
    assert_eq!(answer["result"]["structuredContent"]["status"], "ok", "{answer}");
    assert!(s.notifications.iter().all(|n| n["method"] != "notifications/progress"), "{:?}", s.notifications);
}

#[test]
fn no_progress_bar_when_stderr_is_not_a_terminal() {
    let p = large_project();
    let run = run_env(&p, &[], &["run", "count", "data/big.bin"]);
    run.assert_ok();
    assert_eq!(run.stderr, "", "a piped stderr gets no bar");
}

/// On a terminal (`script` from util-linux gives the run a pty), the bar
/// is drawn on stderr while the large input is snapshotted.
#[test]
fn a_progress_bar_is_drawn_on_a_terminal() {
    let Some(script) = ["/usr/bin/script", "/bin/script"].into_iter().find(|s| std::path::Path::new(s).exists()) else {
        eprintln!("skipped: no `script` (util-linux) on this host");
        return;
    };
    let p = large_project();
    let command = format!("{} run count data/big.bin", crate::util::AIRLOCK);
    // The project's environment (cleared, PATH, the resolver), plus TERM.
    let project = p.command(&[]);
    let mut cmd = std::process::Command::new(script);
    cmd.args(["-qec", &command, "/dev/null"]).current_dir(p.root()).env_clear().env("TERM", "xterm");
    for (k, v) in project.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let out = cmd.stdin(Stdio::null()).output().expect("run script");
    assert!(out.status.success(), "{out:?}");
    let transcript = String::from_utf8_lossy(&out.stdout);
    assert!(transcript.contains("snapshotting inputs"), "the bar was drawn:\n{transcript}");
    assert!(transcript.contains(r#""status":"ok""#), "{transcript}");
}
