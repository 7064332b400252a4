//! Issue 24 item 6: MCP cancellation on the shipping binary. A client's
//! `notifications/cancelled` (or the end of its stdio session) kills the
//! call's worker, publishes nothing, releases its staging room and journals
//! `InvocationCancelled`; a cancel that comes after the call's publication
//! point leaves the call completed, and the journal says so.

use crate::everyday_signals::{napping, sleepers};
use crate::mcpkit::McpSession;
use crate::util::Project;
use serde_json::{json, Value};
use std::process::Stdio;
use std::time::{Duration, Instant};

fn project(marker: &str) -> Project {
    let p = Project::new();
    p.write("tools/nap.clad.toml", napping(marker));
    p.write("data/in.txt", "data\n");
    p
}

/// The journal's records, as written so far.
fn records(p: &Project) -> Vec<Value> {
    std::fs::read_to_string(p.path(".airlock/journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The records of the one invocation that has `kind`, once its end
/// (`InvocationFinished` or `InvocationRefused`) is journaled.
fn settled_with(p: &Project, kind: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = records(p);
        if let Some(id) = all.iter().find(|r| r["kind"] == kind).map(|r| r["invocation_id"].clone()) {
            let mine: Vec<Value> = all.into_iter().filter(|r| r["invocation_id"] == id).collect();
            if mine.iter().any(|r| r["kind"] == "InvocationFinished" || r["kind"] == "InvocationRefused") {
                return mine;
            }
        }
        assert!(Instant::now() < deadline, "no settled call with {kind}: {:#?}", records(p));
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kind_body<'a>(records: &'a [Value], kind: &str) -> &'a Value {
    &records.iter().find(|r| r["kind"] == kind).unwrap_or_else(|| panic!("no {kind}: {records:#?}"))["body"]
}

/// Nothing published, no worker left, no staging room held.
fn assert_nothing_left(p: &Project, marker: &str) {
    wait_for("the worker to be gone", || sleepers(marker).is_empty());
    assert!(!p.path("results/out.txt").exists(), "nothing published");
    let status = p.run(&["staging", "status", "--json"]);
    assert_eq!(status.envelope["content"]["reservations"], json!([]), "{status:#?}");
}

#[test]
fn a_cancel_during_a_slow_call_kills_it_publishes_nothing_and_is_journaled() {
    let marker = "4201.25";
    let p = project(marker);
    let mut s = McpSession::start(&p);
    let id = s.send_request(
        "tools/call",
        json!({"name": "nap", "arguments": {"input": "data/in.txt", "output": "results/out.txt"}}),
    );
    wait_for("the worker to sleep", || !sleepers(marker).is_empty());
    s.notify("notifications/cancelled", json!({"requestId": id, "reason": "the user pressed stop"}));
    assert_nothing_left(&p, marker);
    let mine = settled_with(&p, "InvocationCancelled");
    let cancelled = kind_body(&mine, "InvocationCancelled");
    assert_eq!((&cancelled["reason"], &cancelled["outcome"]), (&json!("client"), &json!("cancelled")), "{mine:#?}");
    let end = &mine.last().unwrap()["body"];
    assert_eq!(end["code"], "call.cancelled", "{mine:#?}");
    assert_eq!(end["created_files"], json!([]), "{mine:#?}");
    assert!(!mine.iter().any(|r| r["kind"] == "FilePublicationPrepared"), "{mine:#?}");
    // The session goes on serving.
    let list = s.request("tools/list", json!({}));
    assert!(list["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{list}");
    assert!(s.close().success());
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn a_closed_stdio_session_cancels_its_running_call() {
    let marker = "4202.25";
    let p = project(marker);
    let mut s = McpSession::start(&p);
    s.send_request(
        "tools/call",
        json!({"name": "nap", "arguments": {"input": "data/in.txt", "output": "results/out.txt"}}),
    );
    wait_for("the worker to sleep", || !sleepers(marker).is_empty());
    let closed = Instant::now();
    assert!(s.close().success());
    assert!(closed.elapsed() < Duration::from_secs(20), "the server waited for the call's deadline");
    assert_nothing_left(&p, marker);
    let mine = settled_with(&p, "InvocationCancelled");
    let cancelled = kind_body(&mine, "InvocationCancelled");
    assert_eq!(
        (&cancelled["reason"], &cancelled["outcome"]),
        (&json!("session_closed"), &json!("cancelled")),
        "{mine:#?}"
    );
    assert_eq!(mine.last().unwrap()["body"]["code"], "call.cancelled", "{mine:#?}");
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn a_cancel_after_publication_leaves_the_call_completed() {
    let p = project("4203.25");
    p.write("data/in.txt", "kept\n");
    // Debug builds pause the call after its publication is journaled.
    let mut s = McpSession::start_with(&p, &[("AIRLOCK_TEST_PAUSE_AT", "after_finished:1500")], Stdio::inherit());
    let id = s.send_request(
        "tools/call",
        json!({"name": "copy", "arguments": {"input": "data/in.txt", "output": "results/out.txt"}}),
    );
    wait_for("the output to be published", || p.path("results/out.txt").exists());
    s.notify("notifications/cancelled", json!({"requestId": id, "reason": "too late"}));
    let mine = settled_with(&p, "InvocationCancelled");
    let cancelled = kind_body(&mine, "InvocationCancelled");
    assert_eq!((&cancelled["reason"], &cancelled["outcome"]), (&json!("client"), &json!("completed")), "{mine:#?}");
    let end = mine.last().unwrap();
    assert_eq!((&end["kind"], &end["body"]["status"]), (&json!("InvocationFinished"), &json!("ok")), "{mine:#?}");
    assert_eq!(end["body"]["created_files"][0]["path"], "results/out.txt", "{mine:#?}");
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "kept\n");
    assert!(s.close().success());
    p.run(&["journal", "verify"]).assert_ok();
}
