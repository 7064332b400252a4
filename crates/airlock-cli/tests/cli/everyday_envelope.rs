//! Issue 18 §3–§4: one envelope shape for every call kind, validated
//! against what `airlock schema envelope` prints; the streams' tails on
//! success and failure alike; `duration_ms`; `evidence.journal` and
//! `evidence.records` against `airlock journal show`; and what an MCP agent
//! sees through the official Python SDK (`outputSchema`, path arguments
//! described by their roots, the server's instructions, an `isError` text
//! that carries the tool's stderr).

use crate::approvers::approved_project;
use crate::git::git;
use crate::isolated::root;
use crate::runkit::{sh_tool, IO_ARGS, IO_FS};
use crate::util::{Project, Run, AIRLOCK};
use serde_json::{json, Value};
use std::process::Command;

/// The schema the shipping binary prints.
fn printed_schema(p: &Project) -> Value {
    let out = p.command(&["schema", "envelope"]).output().expect("airlock schema envelope");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("the schema is JSON")
}

/// `(seq, key_id)` of the records of invocation `id`, from `journal show`.
fn journal_of(p: &Project, id: &str) -> Vec<(u64, String)> {
    let records = p.journal_records(id);
    records.iter().map(|r| (r["seq"].as_u64().unwrap(), r["key_id"].as_str().unwrap().to_owned())).collect()
}

/// `run`'s envelope is valid under `schema`, says how long it took, and its
/// evidence names the journal's key and the seq range of its records.
#[track_caller]
fn assert_envelope(p: &Project, schema: &Value, run: &Run) {
    let validator = jsonschema::draft202012::new(schema).expect("the printed schema compiles");
    let errors: Vec<String> =
        validator.iter_errors(&run.envelope).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{errors:#?}\n{run:#?}");
    assert!(run.envelope["duration_ms"].is_u64(), "{run:#?}");
    let id = run.envelope["invocation_id"].as_str().expect("an invocation id");
    let records = journal_of(p, id);
    assert!(!records.is_empty(), "no record of {id}");
    let evidence = &run.envelope["evidence"];
    let range = (evidence["records"]["first"].as_u64(), evidence["records"]["last"].as_u64());
    assert_eq!(range, (Some(records[0].0), Some(records.last().unwrap().0)), "{run:#?}");
    assert_eq!(evidence["journal"]["key_id"], records[0].1.as_str(), "{run:#?}");
    assert_eq!(evidence["principal"], "local", "{run:#?}");
    assert!(run.envelope.get("descriptor").is_none() || run.envelope["stage"] == "prepared", "{run:#?}");
}

/// A project with a tool that warns on stderr and succeeds, one that fails
/// like jq with a bad filter, and one whose JSON findings come with exit 1.
fn tools_project(p: &Project) {
    p.write("data/in.txt", "some words here\n");
    let warn = r#"echo 'warming up' >&2; cat "$1" > "$2"; echo done"#;
    p.tool("warns", &sh_tool("warns", "", IO_ARGS, warn, IO_FS));
    let bad =
        r#"echo 'jq: error: syntax error, unexpected INVALID_CHARACTER (Unix shell quoting issues?)' >&2; exit 3"#;
    p.tool("badfilter", &sh_tool("badfilter", "", &[("input", "path")], bad, "[filesystem]\nread = [\"{input}\"]\n"));
    let lint = r#"echo '{"findings": 2}'; echo 'two findings' >&2; exit 1"#;
    let json_out = "[output]\nformat = \"json\"\n[filesystem]\nread = [\"{input}\"]\n";
    p.tool("lint", &sh_tool("lint", "", &[("input", "path")], lint, json_out));
}

#[test]
fn every_call_kind_answers_one_envelope_valid_under_the_printed_schema() {
    let p = Project::new();
    tools_project(&p);
    let schema = printed_schema(&p);
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");

    // exec, success: the stderr tail is kept, the descriptor is named by digest.
    let ok = p.run(&["run", "warns", "data/in.txt", "results/out.txt"]);
    ok.assert_ok();
    assert_envelope(&p, &schema, &ok);
    assert_eq!(ok.envelope["stderr_tail"], "warming up\n", "{ok:#?}");
    assert_eq!(ok.envelope["stdout_tail"], "done\n", "{ok:#?}");
    assert_eq!(ok.envelope["content"], json!({ "raw_output": "done\n" }));

    // exec, failure: the stderr says why; no stdout, no content.
    let failed = p.run(&["run", "badfilter", "data/in.txt"]);
    assert_eq!((failed.status(), failed.reason(), failed.code), ("failed", "tool.failed", 1), "{failed:#?}");
    assert_envelope(&p, &schema, &failed);
    assert!(failed.envelope["stderr_tail"].as_str().unwrap().contains("jq: error: syntax error"), "{failed:#?}");
    assert!(failed.envelope.get("stdout_tail").is_none() && failed.envelope.get("content").is_none(), "{failed:#?}");

    // exec, failure whose output parses: the content is the parsed output.
    let lint = p.run(&["run", "lint", "data/in.txt"]);
    assert_eq!(lint.reason(), "tool.failed", "{lint:#?}");
    assert_envelope(&p, &schema, &lint);
    assert_eq!(lint.envelope["content"], json!({ "findings": 2 }), "{lint:#?}");
    assert_eq!(lint.envelope["stderr_tail"], "two findings\n");

    // A refusal before anything ran.
    let refused = p.run(&["run", "warns", "data/in.txt", "results/out.txt"]);
    refused.assert_refused("output.exists", 73);
    assert_envelope(&p, &schema, &refused);
    assert_eq!(refused.envelope["tool"], "warns");

    // A source query: no worker, no tails.
    let read = p.run(&["query", "read_file", "path=data/in.txt"]);
    read.assert_ok();
    assert_envelope(&p, &schema, &read);
    assert!(read.envelope.get("stderr_tail").is_none(), "{read:#?}");

    // A Git query: the descriptor by digest only, like every other kind.
    let repo = p.path("data/repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    let status = p.run(&["query", "git_status", "path=data/repo"]);
    status.assert_ok();
    assert_envelope(&p, &schema, &status);
    assert!(status.envelope.get("descriptor").is_none(), "{status:#?}");
    assert!(status.envelope["evidence"]["limits"].is_object(), "{status:#?}");

    // An isolated submission: its streams are tails beside the content.
    let r = root(&p, "data", "data", "r");
    let iso = p.run(&["isolated", "--root", &r, "--", "sh", "-c", "echo out; echo err >&2"]);
    iso.assert_ok();
    assert_envelope(&p, &schema, &iso);
    assert_eq!(iso.envelope["stderr_tail"], "err\n", "{iso:#?}");
    let iso_failed = p.run(&["isolated", "--root", &r, "--", "sh", "-c", "echo broken >&2; exit 4"]);
    assert_eq!(iso_failed.status(), "failed", "{iso_failed:#?}");
    assert_envelope(&p, &schema, &iso_failed);
    assert_eq!(iso_failed.envelope["stderr_tail"], "broken\n", "{iso_failed:#?}");
    assert!(iso_failed.envelope["content"]["broker"].is_object(), "{iso_failed:#?}");
    assert!(iso_failed.envelope["content"].get("output").is_none(), "{iso_failed:#?}");
}

#[test]
fn an_approval_required_answer_is_valid_and_keeps_the_descriptor_it_waits_on() {
    let (p, _alice) = approved_project(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n",
    );
    p.write("data/in.txt", "gated\n");
    p.tool("gated", &sh_tool("gated", "risk_tier = \"high\"", IO_ARGS, r#"cat "$1" > "$2""#, IO_FS));
    let schema = printed_schema(&p);
    let waits = p.run(&["run", "gated", "data/in.txt", "results/out.txt"]);
    waits.assert_refused("approval.required", 77);
    assert_envelope(&p, &schema, &waits);
    assert_eq!(waits.envelope["stage"], "prepared");
    assert!(waits.envelope["descriptor"]["command_boundary"].is_object(), "{waits:#?}");
}

#[test]
fn the_schema_rejects_what_is_not_an_envelope() {
    let p = Project::new();
    let schema = printed_schema(&p);
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    // A failure without its error, an unknown field, an unknown reason code.
    for bad in [
        json!({ "status": "failed", "created_files": [] }),
        json!({ "status": "ok", "created_files": [], "stdout": "x" }),
        json!({ "status": "refused", "created_files": [], "error": { "code": "no.such", "message": "m" } }),
    ] {
        assert!(!validator.is_valid(&bad), "{bad}");
    }
    assert!(validator.is_valid(&json!({ "status": "ok", "created_files": [] })));
}

/// A Python that can import the MCP SDK, or `None` (said why) when none is
/// installed and interop is not required.
fn sdk_python() -> Option<String> {
    let python = std::env::var("AIRLOCK_INTEROP_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python).args(["-c", "import mcp"]).output().is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    if std::env::var_os("AIRLOCK_INTEROP_REQUIRED").is_some_and(|v| v == "1") {
        panic!("{python} cannot import the MCP Python SDK and AIRLOCK_INTEROP_REQUIRED=1");
    }
    eprintln!("\n*** SKIPPED: {python} cannot import the MCP Python SDK (pip install mcp) ***\n");
    None
}

#[test]
fn the_python_sdk_sees_output_schemas_path_roots_and_the_stderr_of_a_failure() {
    let Some(python) = sdk_python() else { return };
    let p = Project::new();
    tools_project(&p);
    let schema = "[output]\nformat = \"json\"\n[output.schema]\ntype = \"object\"\n[output.schema.properties.words]\ntype = \"integer\"\n";
    let count = r#"printf '{"words": %d}\n' "$(wc -w < "$1")""#;
    p.tool(
        "count",
        &sh_tool("count", "", &[("input", "path")], count, &format!("{schema}[filesystem]\nread = [\"{{input}}\"]\n")),
    );
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/sdk_envelope.py");
    let out = Command::new(&python).arg(script).args([AIRLOCK, p.root().to_str().unwrap()]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the SDK client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));

    // Every tool declares the envelope as its outputSchema.
    let tools = seen["tools"].as_object().unwrap();
    for (name, tool) in tools {
        let out = &tool["outputSchema"];
        assert_eq!(out["$id"], "urn:airlock:schema:envelope", "{name}: {out}");
        assert_eq!(out["properties"]["status"]["enum"], json!(["ok", "failed", "refused", "error"]), "{name}");
    }
    // The manifest's [output] schema describes content.
    assert_eq!(tools["count"]["outputSchema"]["properties"]["content"]["properties"]["words"]["type"], "integer");
    // Path arguments name their roots; the output is a new file under a rw root.
    let copy = &tools["copy"]["inputSchema"]["properties"];
    let input = copy["input"]["description"].as_str().unwrap();
    assert!(input.contains("data (read-only)") && input.contains("results (read-write)"), "{input}");
    assert_eq!(copy["input"]["pattern"], "^(?:data|results)(?:/.*)?$");
    let output = copy["output"]["description"].as_str().unwrap();
    assert!(output.contains("results (read-write)") && !output.contains("data (read-only)"), "{output}");
    assert!(output.contains("must not exist yet"), "{output}");
    assert_eq!(copy["output"]["pattern"], "^(?:results)/.+$");
    // The instructions summarise the ceilings.
    let instructions = seen["instructions"].as_str().unwrap();
    assert!(instructions.contains("data (read-only), results (read-write)"), "{instructions}");
    assert!(instructions.contains("never overwritten"), "{instructions}");

    // A success passed the SDK's own validation against outputSchema.
    assert_eq!(seen["count"]["isError"], false, "{seen}");
    assert_eq!(seen["count"]["structured"]["content"], json!({ "words": 3 }));
    // A failure: isError, and a text with the code, the message and the stderr.
    let bad = &seen["badfilter"];
    assert_eq!(bad["isError"], true, "{bad}");
    let text = bad["text"][0].as_str().unwrap();
    assert!(text.starts_with("tool.failed: the tool exited with status 3"), "{text}");
    assert!(text.contains("jq: error: syntax error, unexpected INVALID_CHARACTER"), "{text}");
    assert_eq!(bad["structured"]["error"]["code"], "tool.failed");
}
