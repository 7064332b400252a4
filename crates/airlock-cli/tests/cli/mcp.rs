//! `airlock mcp`: the shipping binary as an MCP server over stdio and
//! streamable HTTP, driven by a minimal client (`mcpkit`).

use crate::mcpkit::McpSession;
use crate::runkit::{marker, procs_with, sh_tool, wait_until, KillOnDrop};
use crate::util::{sha256_hex, Project, CANARY, COPY_TOOL};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

fn tool<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["result"]["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == name))
        .unwrap_or_else(|| panic!("{name} not listed: {list}"))
}

#[test]
fn every_runnable_tool_is_listed_with_its_schema_and_annotations() {
    let p = Project::new();
    p.tool("hello", &sh_tool("hello", "", &[], "echo hi", ""));
    p.tool("later", &sh_tool("later", "", &[], "echo hi", "[session]\nprompt = \"$\"\n"));
    let mut s = McpSession::start(&p);
    let list = s.request("tools/list", json!({}));
    let copy = tool(&list, "copy");
    assert_eq!(copy["inputSchema"]["properties"]["input"]["type"], "string");
    assert_eq!(copy["inputSchema"]["required"], json!(["input", "output"]));
    assert_eq!(copy["inputSchema"]["additionalProperties"], false);
    // A tool with a create grant changes its environment, but only by adding a new file.
    assert_eq!(copy["annotations"]["readOnlyHint"], false);
    assert_eq!(copy["annotations"]["destructiveHint"], false);
    assert_eq!(copy["annotations"]["openWorldHint"], false);
    let hello = tool(&list, "hello");
    assert_eq!(hello["annotations"]["readOnlyHint"], true);
    // A manifest airlock cannot run is not offered.
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(!names.contains(&"later"), "{names:?}");
    assert!(s.close().success());
}

/// The bundled source tools are served too, read-only, and answer with a
/// sealed result through the same pipeline.
#[test]
fn the_bundled_source_tools_are_listed_and_answer() {
    let p = Project::new();
    p.write("data/notes.txt", "line one\nline two\n");
    let mut s = McpSession::start(&p);
    let list = s.request("tools/list", json!({}));
    for name in ["read_file", "list_files", "grep_files"] {
        assert_eq!(tool(&list, name)["annotations"]["readOnlyHint"], true, "{name}");
    }
    let r = s.call("read_file", json!({"path": "data/notes.txt"}));
    assert_eq!(r["isError"], false, "{r}");
    let content = &r["structuredContent"]["content"];
    assert!(content.to_string().contains("line two"), "{r}");
    assert!(content["result_sha256"].as_str().unwrap().starts_with("sha256:"), "{r}");
    let refused = s.call("read_file", json!({"path": "../outside/secret.txt"}));
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(!refused.to_string().contains(CANARY), "{refused}");

    // A Git query, answered from a snapshot in a sandboxed driver.
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).current_dir(p.path("data/repo")).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    std::fs::create_dir_all(p.path("data/repo")).unwrap();
    git(&["init", "-q", "-b", "main"]);
    p.write("data/repo/a.txt", "one\n");
    git(&["add", "a.txt"]);
    git(&["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "first"]);
    p.write("data/repo/a.txt", "one\ntwo\n");
    assert_eq!(tool(&list, "git_status")["annotations"]["readOnlyHint"], true);
    let status = s.call("git_status", json!({"path": "data/repo"}));
    assert_eq!(status["isError"], false, "{status}");
    let answer = &status["structuredContent"]["content"];
    assert_eq!(answer["head"]["branch"], "main", "{status}");
    assert_eq!(answer["entries"], json!([{"path": "a.txt", "index": ".", "worktree": "M"}]), "{status}");
    assert!(s.close().success());
}

/// A long-lived server reuses the catalog it read while the tools
/// directory is unchanged; a manifest rewritten in place (same size, same
/// name), added or removed is seen by the next call.
#[test]
fn the_kept_catalog_never_serves_a_manifest_that_changed() {
    let p = Project::new();
    p.tool("hello", &sh_tool("hello", "", &[], "echo one", ""));
    // Past the stamp's settling time, so the first catalog is kept.
    std::thread::sleep(Duration::from_millis(2_500));
    let mut s = McpSession::start(&p);
    let said = |r: &Value| r["structuredContent"]["content"]["raw_output"].as_str().unwrap_or_default().to_owned();
    for _ in 0..2 {
        let r = s.call("hello", json!({}));
        assert_eq!(said(&r), "one\n", "{r}");
    }
    let before = std::fs::metadata(p.path("tools/hello.clad.toml")).unwrap().len();
    std::fs::write(p.path("tools/hello.clad.toml"), sh_tool("hello", "", &[], "echo two", "")).unwrap();
    assert_eq!(std::fs::metadata(p.path("tools/hello.clad.toml")).unwrap().len(), before);
    let r = s.call("hello", json!({}));
    assert_eq!(said(&r), "two\n", "{r}");

    p.tool("other", &sh_tool("other", "", &[], "echo three", ""));
    let r = s.call("other", json!({}));
    assert_eq!(said(&r), "three\n", "{r}");
    std::fs::remove_file(p.path("tools/hello.clad.toml")).unwrap();
    let r = s.call("hello", json!({}));
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["error"]["code"], "manifest.not_found", "{r}");
    assert!(s.close().success());
}

#[test]
fn a_call_publishes_its_output_and_answers_with_created_files_and_evidence() {
    let p = Project::new();
    p.write("data/in.txt", "hello over mcp\n");
    let mut s = McpSession::start(&p);
    let r = s.call("copy", json!({"input": "data/in.txt", "output": "results/out.txt"}));
    assert_eq!(r["isError"], false, "{r}");
    let sc = &r["structuredContent"];
    assert_eq!(sc["status"], "ok");
    assert_eq!(sc["created_files"][0]["path"], "results/out.txt");
    assert_eq!(sc["created_files"][0]["sha256"], format!("sha256:{}", sha256_hex(b"hello over mcp\n")));
    assert!(sc["evidence"]["descriptor_sha256"].as_str().unwrap().starts_with("sha256:"), "{sc}");
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "hello over mcp\n");
    drop(s);
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn refusals_are_error_results_with_their_reason_codes() {
    let p = Project::new();
    p.write("data/in.txt", "x");
    p.write("results/taken.txt", "already here");
    let mut s = McpSession::start(&p);
    let cases = [
        ("copy", json!({"input": "data/in.txt", "output": "results/taken.txt"}), "output.exists"),
        ("copy", json!({"input": "data/../outside/secret.txt", "output": "results/a.txt"}), "path.traversal"),
        ("copy", json!({"input": "outside/secret.txt", "output": "results/b.txt"}), "grant.no_ceiling"),
        // A client names tools, never manifest paths.
        ("tools/copy.clad.toml", json!({"input": "data/in.txt", "output": "results/c.txt"}), "manifest.not_found"),
        ("../tools/copy", json!({}), "manifest.not_found"),
    ];
    for (name, args, code) in cases {
        let r = s.call(name, args.clone());
        assert_eq!(r["isError"], true, "{name} {args}: {r}");
        let got = r["structuredContent"]["error"]["code"].as_str().unwrap_or("");
        assert_eq!(got, code, "{name} {args}: {r}");
        assert!(r["content"][0]["text"].as_str().unwrap().starts_with(got), "{r}");
        assert!(!r.to_string().contains(CANARY));
    }
    assert_eq!(std::fs::read_to_string(p.path("results/taken.txt")).unwrap(), "already here");
    for f in ["a.txt", "b.txt", "c.txt"] {
        assert!(!p.path(&format!("results/{f}")).exists());
    }
}

#[test]
fn an_approval_required_call_names_the_call_and_gives_the_agent_no_command() {
    let (p, alice) = crate::approvers::approved_project(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n",
    );
    p.write("tools/copy.clad.toml", COPY_TOOL.replace("binary = \"cp\"", "binary = \"cp\"\nrisk_tier = \"high\""));
    p.write("data/in.txt", "approve me");
    let mut s = McpSession::start(&p);
    let r = s.call("copy", json!({"input": "data/in.txt", "output": "results/out.txt"}));
    assert_eq!(r["isError"], true, "{r}");
    let sc = &r["structuredContent"];
    assert_eq!(sc["error"]["code"], "approval.required");
    let digest = sc["approval"]["descriptor_sha256"].as_str().unwrap().to_owned();
    let id = sc["approval"]["invocation_id"].as_str().unwrap().to_owned();
    assert_eq!(sc["approval"]["waiting_for"], "approver");
    assert!(sc["approval"].get("run").is_none(), "{r}");
    assert!(!r.to_string().contains("airlock approve"), "the agent is told no command: {r}");
    assert!(!p.path("results/out.txt").exists());
    drop(s);
    alice.approve(&p, &digest, &[]).assert_ok();
    p.run(&["dispatch", &id]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "approve me");
}

#[test]
fn a_slow_call_does_not_hold_up_another() {
    let p = Project::new();
    let mark = marker(20);
    let _guard = KillOnDrop(mark.clone());
    p.tool("slow", &sh_tool("slow", "timeout_seconds = 60", &[], &format!("sleep {mark}"), ""));
    p.write("data/in.txt", "quick");
    let mut s = McpSession::start(&p);
    let slow = s.send_request("tools/call", json!({"name": "slow", "arguments": {}}));
    assert!(wait_until(Duration::from_secs(10), || !procs_with(&mark).is_empty()), "the slow worker never started");
    let fast = s.send_request(
        "tools/call",
        json!({"name": "copy", "arguments": {"input": "data/in.txt", "output": "results/out.txt"}}),
    );
    assert_eq!(s.first_answered(&[slow, fast]), fast, "the fast call waited for the slow one");
    assert_eq!(s.response(fast)["result"]["isError"], false);
}

#[test]
fn killing_airlock_mcp_leaves_no_worker() {
    let p = Project::new();
    let mark = marker(30);
    let _guard = KillOnDrop(mark.clone());
    p.tool("slow", &sh_tool("slow", "timeout_seconds = 60", &[], &format!("sleep {mark}"), ""));
    let mut s = McpSession::start(&p);
    s.send_request("tools/call", json!({"name": "slow", "arguments": {}}));
    assert!(wait_until(Duration::from_secs(10), || !procs_with(&mark).is_empty()), "the slow worker never started");
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || procs_with(&mark).is_empty()),
        "a worker outlived airlock mcp: {:?}",
        procs_with(&mark)
    );
}

/// Starts `airlock mcp --http 127.0.0.1:0` (its address and bearer token
/// are on the returned server).
pub fn start_http(p: &Project) -> crate::httpkit::Server {
    crate::httpkit::Server::start(p, &["--http", "127.0.0.1:0"]).expect("airlock mcp --http listens")
}

#[test]
fn streamable_http_answers_initialize_on_loopback_only() {
    let p = Project::new();
    let server = start_http(&p);
    let addr = &server.address;
    let token = server.token();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        tcp,
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("serverInfo") {
        match tcp.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got);
    drop(server);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"name\":\"airlock\""), "{text}");

    let refused = p.run(&["mcp", "--http", "0.0.0.0:0"]);
    refused.assert_refused("usage", 64);
}
