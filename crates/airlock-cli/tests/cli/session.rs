//! `[session]` tools (issue 21): the shipping binary drives a real
//! `python3` REPL and a real `sqlite3` shell on a terminal airlock owns,
//! through the session holder, with the call's file grants; only the
//! finalize command publishes.

use crate::util::{Project, Run, CANARY};
use serde_json::Value;
use std::time::{Duration, Instant};

const PYSESSION: &str = include_str!("../../../../examples/tools/pysession.clad.toml");
const SQLSESSION: &str = include_str!("../../../../examples/tools/sqlsession.clad.toml");
const SAMPLE_CSV: &str = include_str!("../../../../examples/data/sample.csv");

/// A calculator session whose every process carries `tag` on its command
/// line (so a test can see whether any is left), with a `calc` command that
/// takes arithmetic only, a `danger` command any policy may forbid, and a
/// bound of `max_bytes` an interaction.
fn calc_tool(tag: &str, max_bytes: u64) -> String {
    format!(
        r#"
[tool]
name = "calc"
version = "1.0.0"
description = "python3 as a calculator"
mode = "session"

[args.input]
position = 1
type = "path"
required = true

[session]
startup_command = "python3 -q -i -c \"tag = '{tag}'\" {{input}}"
ready_pattern = '^>>> $'
startup_timeout_seconds = 20
interaction_timeout_seconds = 20
max_interaction_bytes = {max_bytes}

[session.commands.calc]
pattern = '[0-9+*() ]{{1,100}}'

[session.commands.py]
pattern = '[ -~]{{1,400}}'

[session.commands.danger]
pattern = '[ -~]{{1,400}}'

[session.commands.admin]
pattern = '[ -~]{{1,400}}'
risk_tier = "high"

[filesystem]
read = ["{{input}}"]
"#
    )
}

fn project() -> Project {
    let p = Project::new();
    p.write("tools/pysession.clad.toml", PYSESSION);
    p.write("tools/sqlsession.clad.toml", SQLSESSION);
    p.write("data/sample.csv", SAMPLE_CSV);
    p
}

/// A unique tag for this project's session processes.
fn tag(p: &Project) -> String {
    let name = p.root().file_name().unwrap().to_string_lossy().replace(|c: char| !c.is_ascii_alphanumeric(), "");
    format!("tag{name}")
}

fn calc_project(max_bytes: u64) -> (Project, String) {
    let p = project();
    let tag = tag(&p);
    p.write("tools/calc.clad.toml", calc_tool(&tag, max_bytes));
    (p, tag)
}

/// Processes whose command line holds `needle` (this test's sessions only).
fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if cmdline.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                found.push(pid);
            }
        }
    }
    found
}

/// Waits (up to 10 s) until no process carries `needle`.
#[track_caller]
fn assert_no_process(needle: &str) {
    let began = Instant::now();
    while !processes_with(needle).is_empty() {
        assert!(began.elapsed() < Duration::from_secs(10), "processes left: {:?}", processes_with(needle));
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn output(run: &Run) -> &str {
    run.envelope["content"]["output"].as_str().unwrap_or_else(|| panic!("no output: {run:#?}"))
}

fn start(p: &Project, id: &str, args: &[&str]) -> Run {
    let mut all = vec!["session", "start", "--invocation-id", id];
    all.extend_from_slice(args);
    let run = p.run(&all);
    run.assert_ok();
    assert_eq!(run.envelope["content"]["session"], id, "{run:#?}");
    run
}

/// No reservation is left in the staging pool, and no staged data.
#[track_caller]
fn assert_no_staging(p: &Project) {
    let status = p.run(&["staging", "status", "--json"]);
    status.assert_ok();
    let reservations = status.envelope["content"]["reservations"].as_array().unwrap();
    assert!(reservations.is_empty(), "{status:#?}");
    assert_eq!(status.envelope["content"]["sessions"], Value::Array(vec![]), "{status:#?}");
}

/// `session close ID` answers `session.discarded`, and nothing is left:
/// no `output`, no process whose command line holds `tag`, no staging, no
/// publication record.
fn close_leaves_nothing(p: &Project, id: &str, tag: &str, output: &str) {
    let closed = p.run(&["session", "close", id]);
    assert_eq!((closed.status(), closed.reason(), closed.code), ("failed", "session.discarded", 1), "{closed:#?}");
    assert!(!p.path(output).exists());
    assert_no_process(tag);
    assert_no_staging(p);
    let kinds = p.journal_kinds(id);
    assert!(!kinds.iter().any(|k| k.starts_with("FilePublication")), "{kinds:?}");
}

fn holder_pid(p: &Project) -> i32 {
    let status = p.run(&["staging", "status", "--json"]);
    let reservations = status.envelope["content"]["reservations"].as_array().unwrap();
    reservations[0]["owner"]["pid"].as_i64().unwrap_or_else(|| panic!("{status:#?}")) as i32
}

#[test]
fn a_python_session_reads_its_csv_and_finalizes_a_json_summary() {
    let p = project();
    start(&p, "py-1", &["pysession", "data/sample.csv", "results/summary.json"]);
    let rows = p.run(&["session", "send", "py-1", "eval", "summary['rows'] = len(rows)"]);
    rows.assert_ok();
    assert_eq!(rows.envelope["content"]["pending_publication"], "results/summary.json");
    let total = p.run(&["session", "send", "py-1", "eval", "summary['lines'] = sum(int(r['lines']) for r in rows)"]);
    total.assert_ok();
    let shown = p.run(&["session", "send", "py-1", "eval", "print(summary['lines'])"]);
    assert_eq!(output(shown.assert_ok()), "7300\n");
    // Nothing is published before finalize.
    assert!(!p.path("results/summary.json").exists());
    let listed = p.run(&["session", "list"]);
    assert_eq!(listed.envelope["content"]["sessions"][0]["session"], "py-1", "{listed:#?}");

    let done = p.run(&["session", "finalize", "py-1", "save()"]);
    done.assert_ok();
    assert_eq!(output(&done), "saved\n");
    let published: Value = serde_json::from_slice(&std::fs::read(p.path("results/summary.json")).unwrap()).unwrap();
    assert_eq!(published, serde_json::json!({ "rows": 2, "lines": 7300 }));
    let created = &done.envelope["created_files"][0];
    assert_eq!(created["path"], "results/summary.json");
    let kinds = p.journal_kinds("py-1");
    for kind in ["InvocationAuthorized", "WorkerStarted", "SessionInteraction", "FilePublicationFinished"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} not in {kinds:?}");
    }
    assert_eq!(kinds.last().map(String::as_str), Some("InvocationFinished"), "{kinds:?}");
    assert_no_staging(&p);
    // The session is over.
    p.run(&["session", "send", "py-1", "eval", "1"]).assert_refused("session.not_found", 66);
}

#[test]
fn an_sqlite_session_over_a_declared_database_finalizes_a_report() {
    let p = project();
    let made = std::process::Command::new("sqlite3")
        .arg(p.path("data/sample.db"))
        .arg(".import --csv data/sample.csv langs")
        .current_dir(p.root())
        .status()
        .expect("sqlite3 is installed (CI installs it)");
    assert!(made.success());
    start(&p, "sql-1", &["sqlsession", "data/sample.db", "results/report.txt"]);
    let count = p.run(&["session", "send", "sql-1", "query", "SELECT count(*) FROM langs;"]);
    assert_eq!(output(count.assert_ok()), "2\n");
    // Only SELECT statements match the pattern: nothing else reaches sqlite3.
    p.run(&["session", "send", "sql-1", "query", "DROP TABLE langs;"]).assert_refused("session.argument", 65);
    p.run(&["session", "send", "sql-1", "once", ".once results/report.txt"]).assert_ok();
    let done = p.run(&["session", "finalize", "sql-1", "SELECT name, lines FROM langs ORDER BY name;"]);
    done.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/report.txt")).unwrap(), "airlock|4200\nbwrap|3100\n");
    assert_no_staging(&p);
}

#[test]
fn an_argument_outside_its_pattern_never_reaches_the_terminal() {
    let (p, _) = calc_project(1 << 20);
    start(&p, "calc-1", &["calc", "data/sample.csv"]);
    let refused = p.run(&["session", "send", "calc-1", "calc", "__import__('os').getcwd()"]);
    refused.assert_refused("session.argument", 65);
    assert_eq!(refused.envelope["content"]["session_usable"], true);
    // A line with a control character is refused whatever the pattern.
    p.run(&["session", "send", "calc-1", "py", "1\u{3}"]).assert_refused("session.argument", 65);
    // Had either been written, its echo or its error would show here.
    let two = p.run(&["session", "send", "calc-1", "calc", "1+1"]);
    assert_eq!(output(two.assert_ok()), "2\n");
    p.run(&["session", "close", "calc-1"]);
}

#[test]
fn a_policy_forbid_on_one_command_leaves_the_session_usable() {
    let (p, _) = calc_project(1 << 20);
    p.write(
        "airlock.toml",
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n[policy]\n\
         files = [\"policy/*.cedar\"]\n",
    );
    p.write(
        "policy/session.cedar",
        "@id(\"permit\")\npermit(principal, action, resource);\n@id(\"no-danger\")\nforbid(principal, action == \
         Airlock::Action::\"tool_call::calc.danger\", resource);\n@id(\"no-secrets\")\nforbid(principal, action == \
         Airlock::Action::\"tool_call::calc.py\", resource) when { context.invocation.resolved.args has arg && \
         context.invocation.resolved.args.arg like \"*secret*\" };\n",
    );
    start(&p, "calc-2", &["calc", "data/sample.csv"]);
    let denied = p.run(&["session", "send", "calc-2", "danger", "print(1)"]);
    denied.assert_refused("policy.denied", 77);
    p.run(&["session", "send", "calc-2", "py", "print('secret')"]).assert_refused("policy.denied", 77);
    let ok = p.run(&["session", "send", "calc-2", "py", "print(6*7)"]);
    assert_eq!(output(ok.assert_ok()), "42\n");
    let records = p.journal_records("calc-2");
    let refused: Vec<_> = records.iter().filter(|r| r["body"]["refused"] == "policy.denied").collect();
    assert_eq!(refused.len(), 2, "{records:#?}");
    p.run(&["session", "close", "calc-2"]);
}

#[test]
fn close_without_finalize_publishes_nothing_and_leaves_nothing() {
    let p = project();
    let tag = tag(&p);
    // The pysession manifest, with this test's tag on its command line.
    p.write(
        "tools/pysession.clad.toml",
        PYSESSION.replace("summary = dict();", &format!("summary = dict(); {tag} = 1;")),
    );
    start(&p, "py-close", &["pysession", "data/sample.csv", "results/summary.json"]);
    p.run(&["session", "send", "py-close", "eval", "summary['x'] = 1"]).assert_ok();
    assert!(!processes_with(&tag).is_empty(), "the session's program should be running");
    close_leaves_nothing(&p, "py-close", &tag, "results/summary.json");
}

#[test]
fn a_killed_holder_publishes_nothing_and_its_session_is_reaped() {
    let p = project();
    let tag = tag(&p);
    p.write(
        "tools/pysession.clad.toml",
        PYSESSION.replace("summary = dict();", &format!("summary = dict(); {tag} = 1;")),
    );
    start(&p, "py-kill", &["pysession", "data/sample.csv", "results/summary.json"]);
    p.run(&["session", "send", "py-kill", "eval", "summary['x'] = 1"]).assert_ok();
    let pid = holder_pid(&p);
    assert!(std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success());
    assert_no_process(&tag);
    p.run(&["session", "send", "py-kill", "eval", "1"]).assert_refused("session.not_found", 66);
    p.run(&["staging", "gc"]).assert_ok();
    assert_no_staging(&p);
    assert!(!p.path("results/summary.json").exists());
}

#[test]
fn an_input_changed_after_start_makes_the_session_stale() {
    let (p, tag) = calc_project(1 << 20);
    start(&p, "calc-stale", &["calc", "data/sample.csv"]);
    p.run(&["session", "send", "calc-stale", "calc", "1+1"]).assert_ok();
    p.write("data/sample.csv", "name,language,lines\nchanged,Rust,1\n");
    p.run(&["session", "send", "calc-stale", "calc", "2+2"]).assert_refused("session.stale", 77);
    // The stale session is gone: nothing runs, nothing is staged.
    p.run(&["session", "send", "calc-stale", "calc", "3+3"]).assert_refused("session.not_found", 66);
    assert_no_process(&tag);
    assert_no_staging(&p);
}

#[test]
fn the_seventeenth_session_is_refused() {
    let (p, tag) = calc_project(1 << 20);
    for i in 0..16 {
        start(&p, &format!("many-{i}"), &["calc", "data/sample.csv"]);
    }
    let refused = p.run(&["session", "start", "--invocation-id", "many-16", "calc", "data/sample.csv"]);
    refused.assert_refused("session.limit", 75);
    for i in 0..16 {
        p.run(&["session", "close", &format!("many-{i}")]);
    }
    assert_no_process(&tag);
    assert_no_staging(&p);
}

#[test]
fn an_interaction_over_its_byte_bound_is_cut_and_reported() {
    let (p, _) = calc_project(65536);
    start(&p, "calc-big", &["calc", "data/sample.csv"]);
    let big = p.run(&["session", "send", "calc-big", "py", "print('x' * 300000)"]);
    big.assert_ok();
    let content = &big.envelope["content"];
    assert_eq!(content["truncated"], true, "{big:#?}");
    assert!(content["output_bytes"].as_u64().unwrap() > 300000, "{big:#?}");
    assert!(output(&big).len() <= 65536, "{}", output(&big).len());
    // The prompt came back: the session goes on.
    assert_eq!(output(p.run(&["session", "send", "calc-big", "calc", "2*3"]).assert_ok()), "6\n");
    p.run(&["session", "close", "calc-big"]);
}

#[test]
fn a_session_program_cannot_read_a_sibling_file_outside_its_grants() {
    let (p, _) = calc_project(1 << 20);
    p.write("data/sibling.txt", CANARY);
    start(&p, "calc-fs", &["calc", "data/sample.csv"]);
    let granted = p.run(&["session", "send", "calc-fs", "py", "print(open('data/sample.csv').read().count(chr(10)))"]);
    assert_eq!(output(granted.assert_ok()), "3\n");
    for path in ["data/sibling.txt", "../outside/secret.txt", p.path("outside/secret.txt").to_str().unwrap()] {
        let read = p.run(&["session", "send", "calc-fs", "py", &format!("print(open({path:?}).read())")]);
        read.assert_ok();
        assert!(output(&read).contains("Error"), "{read:#?}");
        p.assert_absent(&read, CANARY);
    }
    p.run(&["session", "close", "calc-fs"]);
}

#[test]
fn a_session_tool_is_not_run_as_a_one_shot_call() {
    let p = project();
    let run = p.run(&["run", "pysession", "data/sample.csv", "results/s.json"]);
    run.assert_refused("manifest.unsupported", 65);
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("airlock session start"), "{run:#?}");
}

#[test]
fn the_python_session_over_mcp_publishes_only_on_finalize() {
    use crate::mcpkit::McpSession;
    let p = project();
    let mut mcp = McpSession::start(&p);
    let listed = mcp.request("tools/list", serde_json::json!({}));
    let names: Vec<&str> =
        listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    for name in ["session_start", "session_send", "session_finalize", "session_close"] {
        assert!(names.contains(&name), "{names:?}");
    }
    // A session tool is never served as a one-shot tool.
    assert!(!names.contains(&"pysession"), "{names:?}");
    let args = serde_json::json!({ "input": "data/sample.csv", "output": "results/mcp.json" });
    let started = mcp.call("session_start", serde_json::json!({ "tool": "pysession", "arguments": args }));
    let id =
        started["structuredContent"]["content"]["session"].as_str().unwrap_or_else(|| panic!("{started}")).to_owned();
    let sent = mcp.call(
        "session_send",
        serde_json::json!({ "session": id, "command": "eval", "arg": "summary['rows'] = len(rows)" }),
    );
    assert_eq!(sent["structuredContent"]["status"], "ok", "{sent}");
    let bad = mcp.call("session_send", serde_json::json!({ "session": id, "command": "save", "arg": "rm()" }));
    assert_eq!(bad["isError"], true, "{bad}");
    assert!(!p.path("results/mcp.json").exists());
    let done = mcp.call("session_finalize", serde_json::json!({ "session": id, "arg": "save()" }));
    assert_eq!(done["structuredContent"]["created_files"][0]["path"], "results/mcp.json", "{done}");
    let published: Value = serde_json::from_slice(&std::fs::read(p.path("results/mcp.json")).unwrap()).unwrap();
    assert_eq!(published, serde_json::json!({ "rows": 2 }));
    // A second session, closed: nothing.
    let args = serde_json::json!({ "input": "data/sample.csv", "output": "results/none.json" });
    let second = mcp.call("session_start", serde_json::json!({ "tool": "pysession", "arguments": args }));
    let id = second["structuredContent"]["content"]["session"].as_str().unwrap().to_owned();
    let closed = mcp.call("session_close", serde_json::json!({ "session": id }));
    assert_eq!(closed["structuredContent"]["error"]["code"], "session.discarded", "{closed}");
    assert!(!p.path("results/none.json").exists());
    // Interactions go straight to the session thread: an id it does not
    // hold (this one was closed) is not found, whatever the tools directory.
    let gone = mcp.call("session_send", serde_json::json!({ "session": id, "command": "eval", "arg": "1" }));
    assert_eq!(gone["structuredContent"]["error"]["code"], "session.not_found", "{gone}");
    mcp.close();
    assert_no_staging(&p);
}

/// The request an `approval.required` answer of a session names: its id
/// and descriptor digest.
#[track_caller]
fn requested(run: &Run) -> (String, String) {
    run.assert_refused("approval.required", 77);
    let approval = &run.envelope["content"]["approval"];
    let id = approval["invocation_id"].as_str().unwrap_or_else(|| panic!("{run:#?}")).to_owned();
    let digest = approval["descriptor_sha256"].as_str().unwrap().to_owned();
    let message = run.envelope["error"]["message"].as_str().unwrap();
    assert!(message.contains(&id) && message.contains(&digest), "{message}");
    assert_eq!(run.envelope["content"]["session_usable"], true, "{run:#?}");
    (id, digest)
}

#[test]
fn a_high_risk_interaction_runs_once_its_exact_call_is_approved() {
    let (p, _) = calc_project(1 << 20);
    let alice = crate::approvers::Approver::init(&p, "alice");
    alice.pin(&p);
    start(&p, "calc-a", &["calc", "data/sample.csv"]);
    let asked = p.run(&["session", "send", "calc-a", "admin", "print(6*7)"]);
    let (request, digest) = requested(&asked);
    assert!(request.starts_with("calc-a."), "{request}");
    // The refusal left the session usable.
    assert_eq!(output(p.run(&["session", "send", "calc-a", "calc", "1+2"]).assert_ok()), "3\n");
    // The request waits like any call: listed, named by its session, and
    // never dispatched as a one-shot call.
    let list = p.run(&["approvals", "list", "--json"]);
    let waiting = list.envelope["content"]["waiting"].as_array().unwrap().clone();
    assert_eq!(waiting.len(), 1, "{list:#?}");
    assert_eq!(waiting[0]["invocation_id"], request.as_str());
    assert_eq!(waiting[0]["tool"], "calc.admin");
    assert_eq!(waiting[0]["session"], "calc-a");
    p.run(&["dispatch", &request]).assert_refused("manifest.unsupported", 65);
    // Sent again before an approval: the same request still waits.
    let again = p.run(&["session", "send", "calc-a", "admin", "print(6*7)"]);
    assert_eq!(requested(&again), (request.clone(), digest.clone()));

    alice.approve(&p, &digest, &[]).assert_ok();
    // The approval covers that argument only.
    let other = p.run(&["session", "send", "calc-a", "admin", "print(7*7)"]);
    let (other_request, other_digest) = requested(&other);
    assert_ne!(other_digest, digest);
    assert_ne!(other_request, request);
    // The same command and argument in the same session runs, once.
    let ran = p.run(&["session", "send", "calc-a", "admin", "print(6*7)"]);
    assert_eq!(output(ran.assert_ok()), "42\n");
    let once_more = p.run(&["session", "send", "calc-a", "admin", "print(6*7)"]);
    let (third, _) = requested(&once_more);
    assert_ne!(third, request);

    let consumed = p.journal_records(&request);
    let kinds: Vec<&str> = consumed.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"InvocationPrepared") && kinds.contains(&"ApprovalGranted"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "ApprovalConsumed").count(), 1, "{kinds:?}");
    let session = p.journal_records("calc-a");
    let approved: Vec<_> = session.iter().filter(|r| r["body"]["approval"] == request.as_str()).collect();
    assert_eq!(approved.len(), 1, "{session:#?}");
    assert_eq!(approved[0]["kind"], "SessionInteraction");
    assert_eq!(p.run(&["approvals", "list"]).envelope["content"]["waiting"].as_array().unwrap().len(), 2);
    // The session's end withdraws the requests it still had.
    p.run(&["session", "close", "calc-a"]);
    assert_eq!(p.run(&["approvals", "list"]).envelope["content"]["waiting"], serde_json::json!([]));
    let withdrawn = p.journal_records(&other_request);
    assert!(withdrawn.iter().any(|r| r["kind"] == "ApprovalDenied"), "{withdrawn:#?}");
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn a_high_risk_session_start_waits_for_its_approval_and_dispatch_starts_it() {
    let (p, tag) = calc_project(1 << 20);
    // The tool is high risk; its `calc` command is low (its own tier).
    let gated = calc_tool(&tag, 1 << 20)
        .replace("mode = \"session\"", "mode = \"session\"\nrisk_tier = \"high\"")
        .replace("[session.commands.calc]\n", "[session.commands.calc]\nrisk_tier = \"low\"\n");
    p.write("tools/calc.clad.toml", gated);
    let alice = crate::approvers::Approver::init(&p, "alice");
    alice.pin(&p);
    let asked = p.run(&["session", "start", "--invocation-id", "calc-s", "calc", "data/sample.csv"]);
    asked.assert_refused("approval.required", 77);
    assert_eq!(asked.envelope["invocation_id"], "calc-s");
    let digest = asked.envelope["evidence"]["descriptor_sha256"].as_str().unwrap().to_owned();
    assert!(processes_with(&tag).is_empty(), "a session program started before its approval");
    // Not approved yet: dispatch does not start it, and it still waits.
    p.run(&["dispatch", "calc-s"]).assert_refused("approval.required", 77);
    assert!(processes_with(&tag).is_empty());

    alice.approve(&p, &digest, &[]).assert_ok();
    let started = p.run(&["dispatch", "calc-s"]);
    started.assert_ok();
    assert_eq!(started.envelope["content"]["session"], "calc-s", "{started:#?}");
    assert_eq!(output(p.run(&["session", "send", "calc-s", "calc", "2*21"]).assert_ok()), "42\n");
    // The approval served once.
    p.run(&["dispatch", "calc-s"]).assert_refused("invocation.duplicate", 77);
    assert_eq!(output(p.run(&["session", "send", "calc-s", "calc", "1+1"]).assert_ok()), "2\n");
    let records = p.journal_records("calc-s");
    let authorized: Vec<_> = records.iter().filter(|r| r["kind"] == "InvocationAuthorized").collect();
    assert_eq!(authorized.len(), 1, "{records:#?}");
    assert_eq!(authorized[0]["body"]["approved"], true);
    let closed = p.run(&["session", "close", "calc-s"]);
    assert_eq!((closed.status(), closed.reason(), closed.code), ("failed", "session.discarded", 1), "{closed:#?}");
    assert_no_process(&tag);
    assert_no_staging(&p);
}

#[test]
fn over_mcp_an_approved_session_start_is_dispatched_into_the_server() {
    use crate::mcpkit::McpSession;
    let (p, tag) = calc_project(1 << 20);
    let gated = calc_tool(&tag, 1 << 20)
        .replace("mode = \"session\"", "mode = \"session\"\nrisk_tier = \"high\"")
        .replace("[session.commands.calc]\n", "[session.commands.calc]\nrisk_tier = \"low\"\n");
    p.write("tools/calc.clad.toml", gated);
    let alice = crate::approvers::Approver::init(&p, "alice");
    alice.pin(&p);
    let mut mcp = McpSession::start(&p);
    let args = serde_json::json!({ "input": "data/sample.csv" });
    let asked = mcp.call("session_start", serde_json::json!({ "tool": "calc", "arguments": args }));
    assert_eq!(asked["isError"], true, "{asked}");
    let envelope = &asked["structuredContent"];
    assert_eq!(envelope["error"]["code"], "approval.required", "{asked}");
    let id = envelope["invocation_id"].as_str().unwrap().to_owned();
    let digest = envelope["evidence"]["descriptor_sha256"].as_str().unwrap().to_owned();
    // Not approved: nothing starts.
    let early = mcp.call("session_start", serde_json::json!({ "tool": "calc", "dispatch": id }));
    assert_eq!(early["structuredContent"]["error"]["code"], "approval.required", "{early}");
    assert!(processes_with(&tag).is_empty());

    alice.approve(&p, &digest, &[]).assert_ok();
    let started = mcp.call("session_start", serde_json::json!({ "tool": "calc", "dispatch": id }));
    assert_eq!(started["structuredContent"]["content"]["session"], id.as_str(), "{started}");
    let sent = mcp.call("session_send", serde_json::json!({ "session": id, "command": "calc", "arg": "6*7" }));
    assert_eq!(sent["structuredContent"]["content"]["output"], "42\n", "{sent}");
    let closed = mcp.call("session_close", serde_json::json!({ "session": id }));
    assert_eq!(closed["structuredContent"]["error"]["code"], "session.discarded", "{closed}");
    mcp.close();
    assert_no_process(&tag);
    assert_no_staging(&p);
}

/// An upstream MCP server (Python's standard library, inline) that counts
/// the `tools/call` requests it got and answers each with that count and
/// its pid: `count` only answers, `upper` upper-cases `src` into `dst`,
/// `arm` makes it exit 3 once its stdin closes, `die` makes it leave
/// without answering, `slow` answers after 2 s; `secret` is a tool the
/// session's manifest does not allow.
const COUNTING_SERVER: &str = r#"
import json, os, sys, time
calls, status = 0, 0
def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    mid, method = msg.get("id"), msg.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "counting", "version": "1"}}})
    elif method == "tools/call":
        calls += 1
        name, a = msg["params"]["name"], msg["params"].get("arguments", {})
        if name == "upper":
            with open(a["dst"], "w") as f:
                f.write(open(a["src"]).read().upper())
        if name == "arm":
            status = 3
        if name == "die":
            os._exit(0)
        if name == "slow":
            time.sleep(2)
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": name}],
              "structuredContent": {"calls": calls, "pid": os.getpid(), "tool": name}}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "unknown"}})
sys.exit(status)
"#;

/// An `[mcp]` tool held as a session: the counting server (its argv
/// carries `tag`), allowed to call `count`, `upper`, `arm`, `die` and
/// `slow` only.
fn upstream_tool(tag: &str) -> String {
    format!(
        r#"
[tool]
name = "upsess"
version = "1.0.0"
description = "an MCP server held for many calls"
mode = "session"

[args.input]
position = 1
type = "path"
required = true

[args.output]
position = 2
type = "path"
required = true

[filesystem]
read = ["{{input}}"]
create = ["{{output}}"]

[mcp]
server = ["python3", "-c", '''{COUNTING_SERVER}''', "{tag}"]
tool = "upper"

[session]
startup_timeout_seconds = 20
interaction_timeout_seconds = 20

[session.commands.count]
pattern = '\{{\}}'

[session.commands.upper]
pattern = '[ -~]{{1,400}}'

[session.commands.arm]
pattern = '\{{\}}'

[session.commands.die]
pattern = '\{{\}}'

[session.commands.slow]
pattern = '\{{\}}'
"#
    )
}

fn upstream_project() -> (Project, String) {
    let p = project();
    let tag = tag(&p);
    p.write("tools/upsess.clad.toml", upstream_tool(&tag));
    p.write("data/in.txt", "held mcp server\n");
    (p, tag)
}

fn structured(run: &Run) -> &Value {
    &run.envelope["content"]["result"]["structuredContent"]
}

const UPPER_ARGS: &str = r#"{"src": "data/in.txt", "dst": "results/out.txt"}"#;

#[test]
fn an_mcp_session_starts_its_server_once_and_publishes_on_finalize() {
    let (p, tag) = upstream_project();
    let started = start(&p, "up-1", &["upsess", "data/in.txt", "results/out.txt"]);
    assert_eq!(started.envelope["content"]["server"]["name"], "counting", "{started:#?}");
    let first = p.run(&["session", "send", "up-1", "count", "{}"]);
    first.assert_ok();
    let second = p.run(&["session", "send", "up-1", "upper", UPPER_ARGS]);
    second.assert_ok();
    // One server answered both calls: its count went on, its pid stayed.
    assert_eq!(structured(&first)["calls"], 1, "{first:#?}");
    assert_eq!(structured(&second)["calls"], 2, "{second:#?}");
    assert_eq!(structured(&first)["pid"], structured(&second)["pid"]);
    assert!(!processes_with(&tag).is_empty(), "the server is held between calls");
    assert_eq!(second.envelope["content"]["pending_publication"], "results/out.txt");
    assert!(!p.path("results/out.txt").exists(), "nothing is published before finalize");

    let done = p.run(&["session", "finalize", "up-1"]);
    done.assert_ok();
    assert_eq!(done.envelope["created_files"][0]["path"], "results/out.txt", "{done:#?}");
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "HELD MCP SERVER\n");
    let records = p.journal_records("up-1");
    let interactions: Vec<_> = records.iter().filter(|r| r["kind"] == "SessionInteraction").collect();
    assert_eq!(interactions.len(), 2, "{records:#?}");
    assert_eq!(records.iter().filter(|r| r["kind"] == "WorkerStarted").count(), 1, "{records:#?}");
    let kinds = p.journal_kinds("up-1");
    assert!(kinds.iter().any(|k| k == "FilePublicationFinished"), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("InvocationFinished"), "{kinds:?}");
    assert_no_process(&tag);
    assert_no_staging(&p);
    p.run(&["session", "send", "up-1", "count", "{}"]).assert_refused("session.not_found", 66);
}

#[test]
fn an_mcp_session_closed_publishes_nothing_and_leaves_nothing() {
    let (p, tag) = upstream_project();
    start(&p, "up-close", &["upsess", "data/in.txt", "results/out.txt"]);
    p.run(&["session", "send", "up-close", "upper", UPPER_ARGS]).assert_ok();
    assert!(!processes_with(&tag).is_empty(), "the server should be running");
    close_leaves_nothing(&p, "up-close", &tag, "results/out.txt");
}

#[test]
fn an_upstream_tool_the_manifest_does_not_allow_never_reaches_the_server() {
    let (p, _) = upstream_project();
    start(&p, "up-deny", &["upsess", "data/in.txt", "results/out.txt"]);
    let secret = p.run(&["session", "send", "up-deny", "secret", "{}"]);
    secret.assert_refused("session.command_unknown", 65);
    assert_eq!(secret.envelope["content"]["session_usable"], true, "{secret:#?}");
    // Arguments outside the pattern, or not a JSON object, are not sent either.
    p.run(&["session", "send", "up-deny", "count", r#"{"x": 1}"#]).assert_refused("session.argument", 65);
    p.run(&["session", "send", "up-deny", "upper", "[1, 2]"]).assert_refused("session.argument", 65);
    // Had any reached the server, its count would show it.
    let count = p.run(&["session", "send", "up-deny", "count", "{}"]);
    count.assert_ok();
    assert_eq!(structured(&count)["calls"], 1, "{count:#?}");
    p.run(&["session", "close", "up-deny"]);
    assert_no_staging(&p);
}

#[test]
fn an_mcp_session_publishes_nothing_on_a_nonzero_exit_or_a_lost_answer() {
    let (p, tag) = upstream_project();
    let args = ["upsess", "data/in.txt", "results/out.txt"];
    // The server exits 3 once its stdin closes: finalize publishes nothing.
    start(&p, "up-exit", &args);
    p.run(&["session", "send", "up-exit", "upper", UPPER_ARGS]).assert_ok();
    p.run(&["session", "send", "up-exit", "arm", "{}"]).assert_ok();
    let done = p.run(&["session", "finalize", "up-exit"]);
    assert_eq!((done.status(), done.reason(), done.code), ("failed", "mcp.protocol", 1), "{done:#?}");
    assert!(!p.path("results/out.txt").exists());
    // The server leaves without answering: the session ends, nothing published.
    start(&p, "up-die", &args);
    p.run(&["session", "send", "up-die", "upper", UPPER_ARGS]).assert_ok();
    let lost = p.run(&["session", "send", "up-die", "die", "{}"]);
    assert_eq!((lost.status(), lost.reason()), ("failed", "mcp.protocol"), "{lost:#?}");
    p.run(&["session", "send", "up-die", "count", "{}"]).assert_refused("session.not_found", 66);
    assert!(!p.path("results/out.txt").exists());
    assert_no_process(&tag);
    assert_no_staging(&p);
    for id in ["up-exit", "up-die"] {
        let kinds = p.journal_kinds(id);
        assert!(!kinds.iter().any(|k| k.starts_with("FilePublication")), "{id}: {kinds:?}");
    }
}

#[test]
fn a_policy_forbid_on_one_upstream_call_never_reaches_the_server() {
    let (p, _) = upstream_project();
    p.write(
        "airlock.toml",
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n[policy]\n\
         files = [\"policy/*.cedar\"]\n",
    );
    p.write(
        "policy/upstream.cedar",
        "@id(\"permit\")\npermit(principal, action, resource);\n@id(\"no-secret-src\")\nforbid(principal, action == \
         Airlock::Action::\"tool_call::upsess.upper\", resource) when { context.invocation.resolved.args has arg && \
         context.invocation.resolved.args.arg like \"*secret*\" };\n",
    );
    start(&p, "up-policy", &["upsess", "data/in.txt", "results/out.txt"]);
    let denied =
        p.run(&["session", "send", "up-policy", "upper", r#"{"src": "data/secret.txt", "dst": "results/out.txt"}"#]);
    denied.assert_refused("policy.denied", 77);
    let count = p.run(&["session", "send", "up-policy", "count", "{}"]);
    count.assert_ok();
    assert_eq!(structured(&count)["calls"], 1, "the denied call never reached the server: {count:#?}");
    p.run(&["session", "close", "up-policy"]);
}

#[test]
fn an_mcp_session_over_airlock_mcp_calls_its_held_server_and_publishes_on_finalize() {
    use crate::mcpkit::McpSession;
    let (p, tag) = upstream_project();
    let mut mcp = McpSession::start(&p);
    let args = serde_json::json!({ "input": "data/in.txt", "output": "results/out.txt" });
    let started = mcp.call("session_start", serde_json::json!({ "tool": "upsess", "arguments": args }));
    let id =
        started["structuredContent"]["content"]["session"].as_str().unwrap_or_else(|| panic!("{started}")).to_owned();
    let send = |mcp: &mut McpSession, command: &str, arg: &str| {
        mcp.call("session_send", serde_json::json!({ "session": id, "command": command, "arg": arg }))
    };
    let first = send(&mut mcp, "count", "{}");
    let second = send(&mut mcp, "upper", UPPER_ARGS);
    let calls = |r: &Value| r["structuredContent"]["content"]["result"]["structuredContent"]["calls"].clone();
    assert_eq!((calls(&first), calls(&second)), (serde_json::json!(1), serde_json::json!(2)), "{first}\n{second}");
    let secret = send(&mut mcp, "secret", "{}");
    assert_eq!(secret["structuredContent"]["error"]["code"], "session.command_unknown", "{secret}");
    // A call the server works on for 2 s, with a progress token: the
    // client hears that airlock waits for the upstream's answer.
    let slow = mcp.request(
        "tools/call",
        serde_json::json!({ "name": "session_send", "_meta": { "progressToken": "upstream-wait" },
                            "arguments": { "session": id, "command": "slow", "arg": "{}" } }),
    );
    assert_eq!(slow["result"]["structuredContent"]["status"], "ok", "{slow}");
    let heard: Vec<&Value> = mcp
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress" && n["params"]["progressToken"] == "upstream-wait")
        .collect();
    assert!(!heard.is_empty(), "no progress while the upstream worked: {:?}", mcp.notifications);
    assert!(
        heard.iter().all(|n| n["params"]["message"].as_str().unwrap().starts_with("waiting for the upstream")),
        "{heard:?}"
    );
    assert!(!p.path("results/out.txt").exists());
    let done = mcp.call("session_finalize", serde_json::json!({ "session": id }));
    assert_eq!(done["structuredContent"]["created_files"][0]["path"], "results/out.txt", "{done}");
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "HELD MCP SERVER\n");
    mcp.close();
    assert_no_process(&tag);
    assert_no_staging(&p);
}
