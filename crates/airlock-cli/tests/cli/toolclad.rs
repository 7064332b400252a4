//! ToolClad features run as written (issue 24): an enum mapped to flags
//! (`[command.mappings]`, the `_type` suffix rule) and `[command.conditionals]`
//! reach the tool as the argv the descriptor binds; a scope target is
//! validated and the tool refused for want of a network grant.

use crate::util::Project;
use serde_json::json;

const SORT: &str = r#"
[tool]
name = "sorter"
version = "1.0.0"
binary = "sort"
description = "Sort the lines of a file"
[args.input]
position = 1
required = true
type = "path"
[args.order_type]
position = 2
required = false
type = "enum"
allowed = ["text", "numeric", "numeric_desc"]
default = "text"
[args.unique]
position = 3
required = false
type = "boolean"
default = false
[command]
template = "sort {_order_flags} {_unique_flag} {input}"
[command.mappings.order_type]
text = "-d"
numeric = "-n"
numeric_desc = "-n -r"
[command.conditionals]
unique_flag = { when = "unique == 'true'", template = "-u" }
[filesystem]
read = ["{input}"]
[output]
format = "text"
"#;

fn sort_project() -> Project {
    let p = Project::new();
    p.write("tools/sorter.clad.toml", SORT);
    p.write("data/n.txt", "10\n9\n100\n9\n");
    p
}

#[test]
fn an_enum_mapped_to_flags_is_the_argv_policy_sees_and_the_tool_runs() {
    let p = sort_project();
    let prepared = p.run(&["prepare", "sorter", "data/n.txt", "numeric_desc"]);
    prepared.assert_ok();
    assert_eq!(prepared.envelope["descriptor"]["argv"], json!(["sort", "-n", "-r", "data/n.txt"]), "{prepared:#?}");
    let run = p.run(&["run", "sorter", "data/n.txt", "numeric_desc"]);
    run.assert_ok();
    assert_eq!(run.envelope["content"]["raw_output"], "100\n10\n9\n9\n", "{run:#?}");
    let run = p.run(&["run", "sorter", "data/n.txt", "numeric", "true"]);
    run.assert_ok();
    assert_eq!(run.envelope["content"]["raw_output"], "9\n10\n100\n", "{run:#?}");
    let descriptor = crate::util::Project::descriptor(&p.path(".airlock"), &run);
    assert_eq!(descriptor["argv"], json!(["sort", "-n", "-u", "data/n.txt"]));
    // The default maps too.
    let run = p.run(&["run", "sorter", "data/n.txt"]);
    run.assert_ok();
    assert_eq!(run.envelope["content"]["raw_output"], "10\n100\n9\n9\n", "{run:#?}");
    // A value outside the enum is refused before anything runs.
    p.run(&["run", "sorter", "data/n.txt", "random"]).assert_refused("arg.not_allowed", 65);
}

#[test]
fn a_scope_target_tool_is_refused_for_want_of_a_network_grant() {
    let p = Project::new();
    p.write(
        "tools/whois.clad.toml",
        r#"
[tool]
name = "whois"
version = "1.0.0"
description = "whois"
[args.target]
position = 1
required = true
type = "scope_target"
[command]
template = "whois {target}"
[output]
format = "text"
"#,
    );
    let run = p.run(&["run", "whois", "example.com"]);
    run.assert_refused("manifest.unsupported", 65);
    let message = run.envelope["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("no network grant"), "{run:#?}");
}

/// A tool reading `{input}` and creating `{output}`: `tool_extra` goes
/// under `[tool]`, `output` is its `[output]` section's body.
fn io_tool(name: &str, tool_extra: &str, exec: &str, output: &str) -> String {
    format!(
        r#"
[tool]
name = "{name}"
version = "1.0.0"
description = "{name} one file into another"
{tool_extra}
[args.input]
position = 1
required = true
type = "path"
[args.output]
position = 2
required = true
type = "path"
[command]
exec = {exec}
[filesystem]
read = ["{{input}}"]
create = ["{{output}}"]
[output]
{output}
"#
    )
}

/// `jq -c .` of an input, its stdout the declared output, under a schema
/// that wants an integer `n`.
fn jq_schema() -> String {
    let output = "format = \"json\"\nstdout_file = \"{output}\"\n[output.schema]\ntype = \"object\"\nrequired = [\"n\"]\n[output.schema.properties.n]\ntype = \"integer\"";
    io_tool("checked", "", r#"["jq", "-c", ".", "{input}"]"#, output)
}

#[test]
fn a_schema_violation_fails_the_call_and_publishes_nothing() {
    assert!(std::path::Path::new("/usr/bin/jq").exists(), "jq is needed (.ci/run installs it)");
    let p = Project::new();
    p.write("tools/checked.clad.toml", jq_schema());
    p.write("data/good.json", r#"{"n": 7}"#);
    p.write("data/bad.json", r#"{"n": "seven"}"#);
    let run = p.run(&["run", "checked", "data/good.json", "results/good.json"]);
    run.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/good.json")).unwrap(), "{\"n\":7}\n");
    let run = p.run(&["run", "checked", "data/bad.json", "results/bad.json"]);
    assert_eq!(run.status(), "failed", "{run:#?}");
    assert_eq!(run.reason(), "output.schema", "{run:#?}");
    assert!(run.envelope["error"]["message"].as_str().unwrap_or("").contains("/n"), "{run:#?}");
    assert_eq!(run.envelope["created_files"], json!([]), "{run:#?}");
    assert!(!p.path("results/bad.json").exists(), "a violating output was published");
    let id = run.envelope["invocation_id"].as_str().unwrap();
    let end = p.journal_records(id).into_iter().find(|r| r["kind"] == "InvocationFinished").unwrap();
    assert_eq!(end["body"]["code"], "output.schema");
}

#[test]
fn xml_output_is_parsed_into_json_and_checked_by_its_schema() {
    let p = Project::new();
    p.write(
        "tools/report.clad.toml",
        r#"
[tool]
name = "report"
version = "1.0.0"
description = "Print an XML report"
[args.input]
position = 1
required = true
type = "path"
[command]
exec = ["cat", "{input}"]
[filesystem]
read = ["{input}"]
[output]
format = "xml"
[output.schema]
type = "object"
required = ["report"]
"#,
    );
    p.write(
        "data/r.xml",
        "<?xml version=\"1.0\"?>\n<report v=\"2\"><item id=\"a\"/><item id=\"b\">x &amp; y</item></report>\n",
    );
    let run = p.run(&["run", "report", "data/r.xml"]);
    run.assert_ok();
    let want = json!({"report": {"@v": "2", "item": [{"@id": "a"}, {"@id": "b", "#text": "x & y"}]}});
    assert_eq!(run.envelope["content"], want, "{run:#?}");
    p.write("data/other.xml", "<other/>");
    let run = p.run(&["run", "report", "data/other.xml"]);
    assert_eq!(run.reason(), "output.schema", "{run:#?}");
    p.write("data/broken.xml", "<report><item></report>");
    let run = p.run(&["run", "report", "data/broken.xml"]);
    assert_eq!(run.reason(), "output.parse", "{run:#?}");
}

#[test]
fn mcp_tools_list_carries_the_output_schema() {
    let p = Project::new();
    p.write("tools/checked.clad.toml", jq_schema());
    p.write("tools/sorter.clad.toml", SORT);
    let mut mcp = crate::mcpkit::McpSession::start(&p);
    let list = mcp.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap_or_else(|| panic!("{list}"));
    let checked = tools.iter().find(|t| t["name"] == "checked").unwrap_or_else(|| panic!("{list}"));
    // The file's schema is content.parsed's (content describes the output file).
    let parsed = &checked["outputSchema"]["properties"]["content"]["properties"]["parsed"];
    assert_eq!(parsed["required"], json!(["n"]), "{checked}");
    assert_eq!(parsed["properties"]["n"]["type"], "integer", "{checked}");
    let sorter = tools.iter().find(|t| t["name"] == "sorter").unwrap_or_else(|| panic!("{list}"));
    assert_eq!(sorter["inputSchema"]["properties"]["order_type"]["enum"], json!(["text", "numeric", "numeric_desc"]));
    mcp.close();
}

#[test]
fn evidence_blobs_are_kept_by_hash_journaled_and_attested() {
    use base64::Engine as _;
    let p = Project::new();
    let evidence =
        "[tool.evidence]\noutput_dir = \"{evidence_dir}/{scan_id}-vcopy\"\ncapture = true\nhash = \"sha256\"";
    let exec = r#"["cp", "-v", "{input}", "{output}"]"#;
    p.write("tools/vcopy.clad.toml", io_tool("vcopy", evidence, exec, "format = \"text\""));
    p.write("data/in.txt", "evidence me\n");
    let run = p.run(&["run", "vcopy", "data/in.txt", "results/out.txt", "--invocation-id", "ev-1"]);
    run.assert_ok();
    let stdout = run.envelope["content"]["raw_output"].as_str().unwrap().to_owned();
    assert!(stdout.contains("results/out.txt"), "{run:#?}");
    let records = p.journal_records("ev-1");
    let captured = records.iter().find(|r| r["kind"] == "EvidenceCaptured").unwrap_or_else(|| panic!("{records:#?}"));
    assert_eq!(captured["body"]["dir"], "evidence/ev-1-vcopy");
    let blobs = captured["body"]["blobs"].as_array().unwrap();
    let want = [("stdout", stdout.as_bytes()), ("stderr", &b""[..])];
    for (blob, (stream, bytes)) in blobs.iter().zip(want) {
        assert_eq!(blob["stream"], stream);
        let digest = format!("sha256:{}", crate::util::sha256_hex(bytes));
        assert_eq!(blob["sha256"], digest.as_str(), "{blob}");
        assert_eq!(blob["bytes"], bytes.len());
        let file = p.path(&format!(".airlock/evidence/ev-1-vcopy/sha256-{}", crate::util::sha256_hex(bytes)));
        assert_eq!(std::fs::read(&file).unwrap(), bytes, "{}", file.display());
    }
    // The attestation references the same blobs by hash.
    let out = p.command(&["attest", "ev-1"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let dsse: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let payload = base64::engine::general_purpose::STANDARD.decode(dsse["payload"].as_str().unwrap()).unwrap();
    let statement: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(statement["predicate"]["evidence"], captured["body"], "{statement:#}");
    // An output_dir an argument could choose is refused at load.
    p.write(
        "tools/vcopy.clad.toml",
        std::fs::read_to_string(p.path("tools/vcopy.clad.toml")).unwrap().replace("{scan_id}-vcopy", "{output}"),
    );
    let run = p.run(&["run", "vcopy", "data/in.txt", "results/out2.txt"]);
    run.assert_refused("manifest.invalid", 65);
    assert!(!p.path("results/out2.txt").exists());
}
