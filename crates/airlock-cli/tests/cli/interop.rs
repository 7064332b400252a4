//! Interop with real third-party MCP software:
//! - the official MCP Python SDK (PyPI `mcp`) as a client of `airlock mcp`,
//!   over stdio and over streamable HTTP (`tests/interop/sdk_client.py`);
//! - the reference filesystem server (npm `@modelcontextprotocol/server-filesystem`)
//!   as an upstream MCP worker, confined to its call's files.
//!
//! Each test skips, saying why on stderr, only when the software is not
//! installed here; with `AIRLOCK_INTEROP_REQUIRED=1` (CI) a missing
//! package fails the test instead.

use crate::runkit::assert_failed;
use crate::util::{sha256_hex, Project, AIRLOCK, CANARY};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Says loudly why a test does not run, or fails it where interop is required.
fn skip(why: &str) {
    if std::env::var_os("AIRLOCK_INTEROP_REQUIRED").is_some_and(|v| v == "1") {
        panic!("interop software missing and AIRLOCK_INTEROP_REQUIRED=1: {why}");
    }
    eprintln!("\n*** SKIPPED interop test: {why} (install it: see .ci/run) ***\n");
}

/// A Python that can import the MCP SDK.
fn sdk_python() -> Option<String> {
    let python = std::env::var("AIRLOCK_INTEROP_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python).args(["-c", "import mcp"]).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !ok {
        skip(&format!("{python} cannot import the MCP Python SDK (pip install mcp)"));
        return None;
    }
    Some(python)
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/sdk_client.py")
}

fn run_client(python: &str, args: &[&str]) -> Value {
    let out = Command::new(python).arg(script()).args(args).output().expect("run the SDK client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the SDK client failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("client output is not JSON ({e}): {stdout}"))
}

/// What the SDK must have seen in either transport.
fn check_sdk_view(p: &Project, seen: &Value, output: &str) {
    assert_eq!(seen["server"], "airlock", "{seen}");
    let copy = &seen["tools"]["copy"];
    assert_eq!(copy["required"], serde_json::json!(["input", "output"]), "{seen}");
    assert_eq!(copy["readOnlyHint"], false);
    assert_eq!(copy["destructiveHint"], false);
    assert_eq!(copy["openWorldHint"], false);
    let call = &seen["call"];
    assert_eq!(call["isError"], false, "{seen}");
    assert_eq!(call["structured"]["created_files"][0]["path"], output, "{seen}");
    assert_eq!(call["structured"]["created_files"][0]["sha256"], format!("sha256:{}", sha256_hex(b"interop\n")));
    assert_eq!(std::fs::read_to_string(p.path(output)).unwrap(), "interop\n");
    let refusal = &seen["refusal"];
    assert_eq!(refusal["isError"], true, "{seen}");
    assert_eq!(refusal["structured"]["error"]["code"], "output.exists", "{seen}");
    assert!(refusal["text"][0].as_str().unwrap().starts_with("output.exists:"), "{seen}");
}

#[test]
fn the_python_sdk_lists_calls_and_sees_refusals_over_stdio() {
    let Some(python) = sdk_python() else { return };
    let p = Project::new();
    p.write("data/in.txt", "interop\n");
    let root = p.root().to_str().unwrap().to_owned();
    let seen = run_client(&python, &["stdio", AIRLOCK, &root, "results/stdio.txt"]);
    check_sdk_view(&p, &seen, "results/stdio.txt");
}

#[test]
fn the_python_sdk_lists_calls_and_sees_refusals_over_http() {
    let Some(python) = sdk_python() else { return };
    let p = Project::new();
    p.write("data/in.txt", "interop\n");
    let server = crate::mcp::start_http(&p);
    let url = format!("http://{}/mcp", server.address);
    let token = server.token();
    let seen = std::panic::catch_unwind(|| run_client(&python, &["http", &url, &token, "results/http.txt"]));
    drop(server);
    check_sdk_view(&p, &seen.unwrap(), "results/http.txt");
}

/// A REPL whose prompt shows after its input (a script sleeping 2 s) ran.
const SLOW_START: &str = r#"
[tool]
name = "slowstart"
version = "1"
description = "a python3 REPL that shows its prompt after two seconds"
mode = "session"
risk_tier = "low"
[args.input]
position = 1
required = true
type = "path"
[session]
startup_command = "python3 -q -i {input}"
ready_pattern = '^>>> $'
[session.commands.calc]
pattern = '[0-9+]{1,10}'
[filesystem]
read = ["{input}"]
"#;

/// The SDK drives a slow-starting session with a progress token (it hears
/// `notifications/progress` until the prompt shows), then a python3 REPL
/// session: start, one slow interaction sent with a progress token (the
/// SDK hears them while the REPL works), finalize, and the published file.
#[test]
fn the_python_sdk_drives_a_session_and_hears_its_progress() {
    let Some(python) = sdk_python() else { return };
    let p = Project::new();
    p.write("tools/pysession.clad.toml", include_str!("../../../../examples/tools/pysession.clad.toml"));
    p.write("data/sample.csv", include_str!("../../../../examples/data/sample.csv"));
    p.write("tools/slowstart.clad.toml", SLOW_START);
    p.write("data/slow.py", "import time\ntime.sleep(2)\n");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/sdk_session.py");
    let root = p.root().to_str().unwrap().to_owned();
    let out = Command::new(&python).arg(script).args([AIRLOCK, &root, "results/sdk.json"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the SDK client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    assert_eq!(seen["slow_start"]["isError"], false, "{seen}");
    assert_eq!(seen["start"]["isError"], false, "{seen}");
    assert_eq!(seen["send"]["structured"]["status"], "ok", "{seen}");
    for key in ["start_progress", "progress"] {
        let progress = seen[key].as_array().unwrap();
        assert!(!progress.is_empty(), "no {key} while the REPL worked: {seen}");
        assert!(
            progress.iter().all(|n| n["message"].as_str().unwrap().starts_with("waiting for the session's prompt")),
            "{seen}"
        );
    }
    assert_eq!(seen["finalize"]["structured"]["created_files"][0]["path"], "results/sdk.json", "{seen}");
    let published: Value = serde_json::from_slice(&std::fs::read(p.path("results/sdk.json")).unwrap()).unwrap();
    assert_eq!(published, serde_json::json!({ "rows": 2 }));
}

/// The reference filesystem server's entry point and `node`, if installed.
fn filesystem_server() -> Option<(String, String)> {
    let node = ["/usr/bin/node", "/usr/local/bin/node"].into_iter().find(|n| std::path::Path::new(n).exists());
    let root = Command::new("npm").args(["root", "-g"]).output().ok().filter(|o| o.status.success());
    let entry = root.map(|o| {
        PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
            .join("@modelcontextprotocol/server-filesystem/dist/index.js")
    });
    match (node, entry) {
        (Some(node), Some(entry)) if entry.is_file() && entry.starts_with("/usr") => {
            Some((node.to_owned(), entry.display().to_string()))
        }
        _ => {
            skip("node or the global npm package @modelcontextprotocol/server-filesystem (under /usr) is missing");
            None
        }
    }
}

/// An `[mcp]` manifest for one tool of the reference filesystem server,
/// allowed directory /workspace (the worker's working directory).
fn fs_manifest(server: &(String, String), name: &str, args: &str, fs: &str, tool: &str, map: &str) -> String {
    format!(
        "[tool]\nname = \"{name}\"\nversion = \"1\"\ndescription = \"reference filesystem server: {tool}\"\n\
         timeout_seconds = 60\n\n[tool.limits]\nmemory_bytes = {NODE_ADDRESS_SPACE}\n\n{args}\n[filesystem]\n{fs}\n\n[mcp]\nserver = [\"{}\", \"{}\", \"/workspace\"]\n\
         tool = \"{tool}\"\n\n[mcp.field_map]\n{map}\n",
        server.0, server.1
    )
}

/// Node reserves far more address space than it uses (V8's heap cage);
/// RLIMIT_AS at the 1 GiB default makes it fail at start-up.
const NODE_ADDRESS_SPACE: u64 = 16 << 30;

const PATH_ARG: &str = "[args.input]\nposition = 1\nrequired = true\ntype = \"path\"\n";

fn fs_project(server: &(String, String)) -> Project {
    let p = Project::new();
    p.write("data/in.txt", "granted text\n");
    p.write("data/secret.txt", CANARY);
    p.tool(
        "fs_read",
        &fs_manifest(server, "fs_read", PATH_ARG, "read = [\"{input}\"]", "read_text_file", "input = \"path\""),
    );
    let write_args = "[args.output]\nposition = 1\nrequired = true\ntype = \"path\"\n\
                      [args.text]\nposition = 2\nrequired = true\ntype = \"string\"\n";
    p.tool(
        "fs_write",
        &fs_manifest(
            server,
            "fs_write",
            write_args,
            "create = [\"{output}\"]",
            "write_file",
            "output = \"path\"\ntext = \"content\"",
        ),
    );
    let peek_args = format!("{PATH_ARG}[args.target]\nposition = 2\nrequired = true\ntype = \"string\"\n");
    for (name, tool) in [("fs_peek", "read_text_file"), ("fs_list", "list_directory")] {
        p.tool(
            name,
            &fs_manifest(
                server,
                name,
                &peek_args,
                "read = [\"{input}\"]",
                tool,
                "input = \"granted\"\ntarget = \"path\"",
            ),
        );
    }
    p
}

#[test]
fn the_reference_filesystem_server_reads_its_one_input_and_writes_its_one_output() {
    let Some(server) = filesystem_server() else { return };
    let p = fs_project(&server);
    let read = p.run(&["run", "fs_read", "data/in.txt"]);
    read.assert_ok();
    assert_eq!(read.envelope["content"]["content"][0]["text"], "granted text\n", "{read:#?}");

    let write = p.run(&["run", "fs_write", "results/out.txt", "written through MCP"]);
    write.assert_ok();
    assert_eq!(write.envelope["created_files"][0]["path"], "results/out.txt");
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "written through MCP");
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn the_reference_filesystem_server_held_as_a_session_serves_many_calls_and_publishes_once() {
    let Some(server) = filesystem_server() else { return };
    let p = Project::new();
    p.write("data/in.txt", "granted text\n");
    p.write("data/secret.txt", CANARY);
    let manifest = format!(
        "[tool]\nname = \"fs_session\"\nversion = \"1\"\ndescription = \"the reference filesystem server, held\"\n\
         mode = \"session\"\n\n[tool.limits]\nmemory_bytes = {NODE_ADDRESS_SPACE}\n\n{PATH_ARG}\
         [args.output]\nposition = 2\nrequired = true\ntype = \"path\"\n\n\
         [filesystem]\nread = [\"{{input}}\"]\ncreate = [\"{{output}}\"]\n\n\
         [mcp]\nserver = [\"{}\", \"{}\", \"/workspace\"]\ntool = \"read_text_file\"\n\n\
         [session]\nstartup_timeout_seconds = 60\ninteraction_timeout_seconds = 60\n\
         [session.commands.read_text_file]\npattern = '[ -~]{{1,400}}'\n\
         [session.commands.write_file]\npattern = '[ -~]{{1,400}}'\n",
        server.0, server.1
    );
    p.tool("fs_session", &manifest);
    let began = std::time::Instant::now();
    let start = p.run(&["session", "start", "--invocation-id", "fs-1", "fs_session", "data/in.txt", "results/out.txt"]);
    start.assert_ok();
    let started = began.elapsed();
    let began = std::time::Instant::now();
    let calls = 5;
    for _ in 0..calls {
        let read = p.run(&["session", "send", "fs-1", "read_text_file", r#"{"path": "data/in.txt"}"#]);
        read.assert_ok();
        assert_eq!(read.envelope["content"]["result"]["content"][0]["text"], "granted text\n", "{read:#?}");
    }
    let per_call = began.elapsed() / calls;
    // The sibling file is not there for the held server either.
    let peek = p.run(&["session", "send", "fs-1", "read_text_file", r#"{"path": "data/secret.txt"}"#]);
    assert_failed(&peek, "failed", "mcp.tool_error", 1);
    assert!(!peek.stdout.contains(CANARY), "{peek:#?}");
    let write = p.run(&["session", "send", "fs-1", "write_file", r#"{"path": "results/out.txt", "content": "held"}"#]);
    write.assert_ok();
    assert!(!p.path("results/out.txt").exists(), "nothing is published before finalize");
    let done = p.run(&["session", "finalize", "fs-1"]);
    done.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "held");
    let workers = p.journal_kinds("fs-1").iter().filter(|k| *k == "WorkerStarted").count();
    assert_eq!(workers, 1, "one server for every call");
    eprintln!("fs_session: start {started:?}, one read_text_file through the session {per_call:?} (CLI round trip)");
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn the_reference_filesystem_server_cannot_see_any_other_file_even_when_asked() {
    let Some(server) = filesystem_server() else { return };
    let p = fs_project(&server);
    // Reading the sibling secret, by relative and absolute path: it is not there.
    for target in ["data/secret.txt", "/workspace/data/secret.txt"] {
        let peek = p.run(&["run", "fs_peek", "data/in.txt", target]);
        assert_failed(&peek, "failed", "mcp.tool_error", 1);
        assert!(!peek.stdout.contains(CANARY) && !peek.stderr.contains(CANARY), "{peek:#?}");
    }
    // Listing the directory shows only the granted file.
    let list = p.run(&["run", "fs_list", "data/in.txt", "/workspace/data"]);
    list.assert_ok();
    let text = list.envelope["content"]["content"][0]["text"].as_str().unwrap().to_owned();
    assert!(text.contains("in.txt") && !text.contains("secret"), "{text}");
    // Outside its allowed directory it refuses by itself, and the host is not there anyway.
    let list = p.run(&["run", "fs_list", "data/in.txt", "/"]);
    assert_failed(&list, "failed", "mcp.tool_error", 1);
    assert!(!list.stdout.contains(CANARY));
    // The server's own write into its input fails; nothing is published, the host file is unchanged.
    p.tool(
        "fs_clobber",
        &fs_manifest(
            &server,
            "fs_clobber",
            "[args.input]\nposition = 1\nrequired = true\ntype = \"path\"\n[args.text]\nposition = 2\nrequired = true\ntype = \"string\"\n",
            "read = [\"{input}\"]",
            "write_file",
            "input = \"path\"\ntext = \"content\"",
        ),
    );
    let clobber = p.run(&["run", "fs_clobber", "data/in.txt", "overwritten"]);
    assert_failed(&clobber, "failed", "mcp.tool_error", 1);
    assert_eq!(std::fs::read_to_string(p.path("data/in.txt")).unwrap(), "granted text\n");
}
