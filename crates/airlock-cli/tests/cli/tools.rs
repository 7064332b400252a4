//! `airlock tools list|validate|schema` and manifest refusals.

use crate::util::Project;

#[test]
fn list_validate_and_schema() {
    let p = Project::new();
    let list = p.run(&["tools", "list"]);
    list.assert_ok();
    let tools = list.envelope["content"]["tools"].as_array().unwrap();
    // The tools directory's manifests, then the bundled source and Git tools.
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let bundled = ["read_file", "list_files", "grep_files", "git_status", "git_log", "git_diff", "git_staged_diff"];
    assert_eq!(names[0], "copy");
    assert_eq!(names[1..], bundled);
    assert_eq!(tools[0]["name"], "copy");
    assert_eq!(tools[0]["runnable"], true);

    p.run(&["tools", "validate"]).assert_ok();
    let schema = p.run(&["tools", "schema", "copy"]);
    schema.assert_ok();
    let s = &schema.envelope["content"];
    assert_eq!(s["type"], "object");
    assert_eq!(s["required"], serde_json::json!(["input", "output"]));
    assert_eq!(s["additionalProperties"], false);
    assert_eq!(s["properties"]["input"]["type"], "string");
}

#[test]
fn unknown_keys_are_named() {
    let p = Project::new();
    p.write("tools/bad.clad.toml", crate::util::COPY_TOOL.replace("[output]", "[output]\nformatt = \"x\""));
    let run = p.run(&["tools", "validate", "bad"]);
    assert_eq!((run.reason(), run.code), ("manifest.invalid", 65), "{run:#?}");
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("formatt"), "{run:#?}");
}

#[test]
fn sections_not_executed_load_but_are_refused() {
    let p = Project::new();
    p.write(
        "tools/proxy.clad.toml",
        r#"
[tool]
name = "proxy"
version = "1.0.0"
description = "An upstream MCP tool"

[args.repo]
type = "string"
required = true

[mcp]
server = "github-mcp"
tool = "create_issue"

[mcp.field_map]
repo = "repository"

[output]
format = "json"
"#,
    );
    p.run(&["tools", "validate", "proxy"]).assert_ok();
    p.run(&["prepare", "proxy", "--arg", "repo=x"]).assert_refused("manifest.unsupported", 65);
    let list = p.run(&["tools", "list"]);
    let proxy =
        list.envelope["content"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "proxy").unwrap().clone();
    assert_eq!(proxy["runnable"], false);
    assert_eq!(proxy["unsupported"]["code"], "manifest.unsupported");
}

#[test]
fn argument_refusals_carry_codes() {
    let p = Project::new();
    p.write("data/in.txt", "x");
    p.prepare("data/in.txt", "results/$(id)").assert_refused("arg.injection", 65);
    p.run(&["prepare", "copy", "--", "-rf", "results/o"]).assert_refused("arg.leading_dash", 65);
    p.run(&["prepare", "copy", "data/in.txt"]).assert_refused("arg.missing", 65);
    p.run(&["prepare", "copy", "data/in.txt", "results/o", "--arg", "bogus=1"]).assert_refused("arg.unknown", 65);
    p.run(&["prepare", "nosuchtool"]).assert_refused("manifest.not_found", 65);
    let usage = p.run_raw(&["prepare"]);
    assert_eq!(usage, 64);
}
