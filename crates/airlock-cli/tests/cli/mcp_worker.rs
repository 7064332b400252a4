//! `[mcp]` tools: an upstream MCP server (here a scripted provider written
//! with Python's standard library, given inline so that no host file is
//! its code) runs in the sandbox with the call's own files; one connection
//! carries startup, discovery and the call; only a clean success publishes.

use crate::runkit::{
    assert_absent_path, assert_failed, assert_staging_empty, marker, procs_with, wait_until, KillOnDrop,
};
use crate::util::{Project, CANARY};
use std::time::Duration;

/// The provider: `upper` reads `src`, writes it upper-cased to `dst`, then
/// behaves as `mode` says (ok, error, garbage, hang, linger). `peek` names
/// a file it also tries to read; the answer lists the input's directory.
/// argv[1] `startup_write=PATH` writes PATH before any request.
const PROVIDER: &str = r#"
import json, os, sys, time
if len(sys.argv) > 1 and sys.argv[1].startswith("startup_write="):
    with open(sys.argv[1].split("=", 1)[1], "w") as f:
        f.write("WRITTEN AT STARTUP")
def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    mid, method = msg.get("id"), msg.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "scripted", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [{"name": "upper", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call":
        a = msg["params"]["arguments"]
        mode = a.get("mode", "ok")
        data = open(a["src"]).read()
        peek = None
        if "peek" in a:
            try:
                peek = open(a["peek"]).read()
            except Exception as e:
                peek = type(e).__name__
        with open(a["dst"], "w") as f:
            f.write(data.upper())
        if mode == "hang":
            time.sleep(1000)
        if mode == "garbage":
            sys.stdout.write("this is not json\n")
            sys.stdout.flush()
            continue
        res = {"content": [{"type": "text", "text": "upper done"}],
               "structuredContent": {"keys": sorted(a), "peek": peek,
                                     "listing": sorted(os.listdir(os.path.dirname(a["src"]) or "."))}}
        if mode == "error":
            res["isError"] = True
        send({"jsonrpc": "2.0", "id": mid, "result": res})
        if mode == "linger":
            while True:
                time.sleep(1)
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "unknown"}})
"#;

/// An `[mcp]` manifest around the provider; `server_extra` is appended to
/// its argv, `tool` is the upstream tool called.
pub(crate) fn mcp_manifest(name: &str, server_extra: &str, tool: &str) -> String {
    format!(
        r#"[tool]
name = "{name}"
version = "1"
description = "upper-case one file through an MCP server"
timeout_seconds = 4

[args.input]
position = 1
required = true
type = "path"

[args.output]
position = 2
required = true
type = "path"

[args.mode]
type = "string"

[args.peek]
type = "string"

[filesystem]
read = ["{{input}}"]
create = ["{{output}}"]

[mcp]
server = ["python3", "-c", '''{PROVIDER}'''{server_extra}]
tool = "{tool}"

[mcp.field_map]
input = "src"
output = "dst"
"#
    )
}

fn project() -> Project {
    let p = Project::new();
    p.tool("upper", &mcp_manifest("upper", "", "upper"));
    p.write("data/in.txt", "hello mcp worker\n");
    p.write("data/secret.txt", CANARY);
    p
}

#[test]
fn a_successful_mcp_result_publishes_the_one_output() {
    let p = project();
    let run = p.run(&["run", "upper", "data/in.txt", "results/out.txt"]);
    run.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "HELLO MCP WORKER\n");
    assert_eq!(run.envelope["created_files"][0]["path"], "results/out.txt");
    // The upstream result is the content; arguments arrived under their upstream names.
    assert_eq!(run.envelope["content"]["content"][0]["text"], "upper done");
    assert_eq!(run.envelope["content"]["structuredContent"]["keys"], serde_json::json!(["dst", "src"]));
    assert_staging_empty(&p);
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn the_server_sees_only_the_granted_files_even_when_asked_for_others() {
    let p = project();
    for peek in ["data/secret.txt", "/workspace/data/secret.txt", "../outside/secret.txt", "/etc/shadow"] {
        let out = format!("results/peek-{}.txt", peek.len());
        let run = p.run(&["run", "upper", "data/in.txt", &out, "--arg", &format!("peek={peek}")]);
        run.assert_ok();
        let sc = &run.envelope["content"]["structuredContent"];
        assert!(sc["peek"].as_str().is_some_and(|e| e.ends_with("Error")), "{peek}: {sc}");
        assert_eq!(sc["listing"], serde_json::json!(["in.txt"]), "{peek}: {sc}");
        assert!(!run.stdout.contains(CANARY) && !run.stderr.contains(CANARY), "{peek} leaked");
    }
}

#[test]
fn an_is_error_result_publishes_nothing() {
    let p = project();
    let run = p.run(&["run", "upper", "data/in.txt", "results/out.txt", "--arg", "mode=error"]);
    assert_failed(&run, "failed", "mcp.tool_error", 1);
    assert_eq!(run.envelope["content"]["isError"], true);
    assert_absent_path(&p, "results/out.txt");
    assert_staging_empty(&p);
}

#[test]
fn a_protocol_failure_publishes_nothing() {
    let p = project();
    let run = p.run(&["run", "upper", "data/in.txt", "results/out.txt", "--arg", "mode=garbage"]);
    assert_failed(&run, "failed", "mcp.protocol", 1);
    assert_absent_path(&p, "results/out.txt");
}

#[test]
fn a_server_that_does_not_exit_after_its_result_publishes_nothing() {
    let p = project();
    let run = p.run(&["run", "upper", "data/in.txt", "results/out.txt", "--arg", "mode=linger"]);
    assert_failed(&run, "failed", "mcp.protocol", 1);
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("exit by itself"), "{run:#?}");
    assert_absent_path(&p, "results/out.txt");
}

#[test]
fn the_deadline_kills_the_server_and_publishes_nothing() {
    let p = project();
    let mark = marker(0);
    let _guard = KillOnDrop(mark.clone());
    p.tool("upper", &mcp_manifest("upper", &format!(", \"{mark}\""), "upper"));
    let run = p.run(&["run", "upper", "data/in.txt", "results/out.txt", "--arg", "mode=hang"]);
    assert_failed(&run, "failed", "tool.timeout", 124);
    assert_absent_path(&p, "results/out.txt");
    assert!(wait_until(Duration::from_secs(5), || procs_with(&mark).is_empty()), "the server outlived its call");
}

#[test]
fn startup_writes_stay_private_when_the_call_fails() {
    let p = project();
    p.tool("upper", &mcp_manifest("upper", ", \"startup_write=results/out.txt\"", "upper"));
    let run = p.run(&["run", "upper", "data/in.txt", "results/out.txt", "--arg", "mode=error"]);
    assert_failed(&run, "failed", "mcp.tool_error", 1);
    assert_absent_path(&p, "results/out.txt");
}

#[test]
fn a_tool_the_server_does_not_offer_is_refused_after_discovery() {
    let p = project();
    p.tool("upper", &mcp_manifest("upper", "", "downcase"));
    let run = p.run(&["run", "upper", "data/in.txt", "results/out.txt"]);
    assert_failed(&run, "failed", "mcp.tool_missing", 1);
    assert_absent_path(&p, "results/out.txt");
}

#[test]
fn mcp_sections_that_make_no_sense_are_refused_before_anything_runs() {
    let p = project();
    let base = mcp_manifest("upper", "", "upper");
    let cases = [
        (base.replace("input = \"src\"", "nosuch = \"src\""), "mcp.field_map"),
        (base.replace("output = \"dst\"", "output = \"src\""), "mcp.field_map"),
        (base.replace("[mcp]\n", "[command]\nexec = [\"cat\"]\n\n[mcp]\n"), "mcp.conflict"),
        (base.replace("tool = \"upper\"", "tool = \"upper\"\nsecret_sauce = 1"), "mcp.invalid"),
    ];
    for (manifest, code) in cases {
        p.tool("upper", &manifest);
        let run = p.run(&["run", "upper", "data/in.txt", "results/out.txt"]);
        run.assert_refused(code, 65);
        assert_absent_path(&p, "results/out.txt");
    }
}

#[test]
fn an_mcp_tool_is_served_by_airlock_mcp_like_any_other() {
    let p = project();
    let mut s = crate::mcpkit::McpSession::start(&p);
    let list = s.request("tools/list", serde_json::json!({}));
    let upper = list["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "upper").cloned();
    let upper = upper.unwrap_or_else(|| panic!("upper not listed: {list}"));
    assert_eq!(upper["annotations"]["readOnlyHint"], false);
    let r = s.call("upper", serde_json::json!({"input": "data/in.txt", "output": "results/served.txt"}));
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["created_files"][0]["path"], "results/served.txt");
    assert_eq!(std::fs::read_to_string(p.path("results/served.txt")).unwrap(), "HELLO MCP WORKER\n");
    let r = s.call("upper", serde_json::json!({"input": "data/in.txt", "output": "results/e.txt", "mode": "error"}));
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["error"]["code"], "mcp.tool_error");
    assert_absent_path(&p, "results/e.txt");
}
