//! One name per tool (issue 18 §2): a tool is found by `[tool] name` or by
//! its manifest's file name in `run`, `prepare`, `tools schema` and MCP; a
//! miss suggests the closest names; a name two manifests claim is refused;
//! a tool whose program the worker image does not hold is reported not
//! runnable by `tools validate`/`tools list` and left out by `airlock mcp`.

use crate::mcpkit::McpSession;
use crate::util::{Project, COPY_TOOL};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;

/// The copy tool under another `[tool] name`.
fn named(name: &str) -> String {
    COPY_TOOL.replace("name = \"copy\"", &format!("name = \"{name}\""))
}

/// The copy tool running `program` instead of `cp`.
fn running(name: &str, program: &str) -> String {
    named(name).replace("exec = [\"cp\",", &format!("exec = [{program:?},"))
}

fn served(p: &Project) -> Vec<String> {
    let mut mcp = McpSession::start(p);
    let list = mcp.request("tools/list", json!({}));
    let names = list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned());
    names.collect()
}

/// What `airlock mcp` says on stderr at start-up (stdin closed at once).
fn mcp_startup_stderr(p: &Project) -> String {
    let out = p.command(&["mcp"]).output().unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn tool_in_list<'a>(list: &'a Value, name: &str) -> &'a Value {
    let tools = list["content"]["tools"].as_array().unwrap();
    tools.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("{name} not listed: {list:#}"))
}

#[test]
fn a_tool_is_found_by_its_tool_name_and_by_its_file_name() {
    let p = Project::new();
    p.write("tools/sqlite_report.clad.toml", named("sqlite-report"));
    p.write("data/in.txt", "hello\n");
    for (i, name) in ["sqlite-report", "sqlite_report"].iter().enumerate() {
        let out = format!("results/out{i}.txt");
        p.run(&["run", name, "data/in.txt", &out]).assert_ok();
        assert_eq!(std::fs::read_to_string(p.path(&out)).unwrap(), "hello\n");
        let schema = p.run(&["tools", "schema", name]);
        schema.assert_ok();
        assert_eq!(schema.envelope["tool"], "sqlite-report");
        p.run(&["prepare", name, "data/in.txt", &format!("results/prepared{i}.txt")]).assert_ok();
    }
    // MCP lists it by [tool] name and answers a call by either name.
    assert!(served(&p).contains(&"sqlite-report".to_owned()));
    let mut mcp = McpSession::start(&p);
    for (i, name) in ["sqlite-report", "sqlite_report"].iter().enumerate() {
        let result = mcp.call(name, json!({"input": "data/in.txt", "output": format!("results/mcp{i}.txt")}));
        assert_eq!(result["isError"], false, "{name}: {result:#}");
    }
    assert_eq!(std::fs::read_to_string(p.path("results/mcp1.txt")).unwrap(), "hello\n");
}

#[test]
fn a_typo_suggests_the_closest_name() {
    let p = Project::new();
    p.write("tools/sqlite_report.clad.toml", named("sqlite-report"));
    let run = p.run(&["run", "sqlite-reprt", "data/in.txt", "results/o.txt"]);
    run.assert_refused("manifest.not_found", 65);
    let message = run.envelope["error"]["message"].as_str().unwrap();
    assert!(message.contains(r#"did you mean "sqlite-report""#), "{message}");
    let run = p.run(&["tools", "schema", "copi"]);
    run.assert_refused("manifest.not_found", 65);
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains(r#"did you mean "copy"?"#), "{run:#?}");
    // Nothing close: the message says where to look instead of guessing.
    let run = p.run(&["prepare", "zzzzzzzzzz"]);
    run.assert_refused("manifest.not_found", 65);
    assert!(!run.envelope["error"]["message"].as_str().unwrap().contains("did you mean"), "{run:#?}");
}

#[test]
fn a_name_two_manifests_claim_is_refused_not_picked() {
    let p = Project::new();
    p.write("tools/first.clad.toml", named("report"));
    p.write("tools/second.clad.toml", named("report"));
    p.write("data/in.txt", "x");
    for name in ["report", "first", "second"] {
        let run = p.run(&["run", name, "data/in.txt", "results/o.txt"]);
        run.assert_refused("manifest.ambiguous", 65);
        let message = run.envelope["error"]["message"].as_str().unwrap();
        assert!(message.contains("first.clad.toml") && message.contains("second.clad.toml"), "{message}");
    }
    assert!(!p.path("results/o.txt").exists());
    // A file name claimed as another manifest's [tool] name is refused too.
    p.write("tools/copy2.clad.toml", named("copy"));
    p.run(&["tools", "schema", "copy"]).assert_refused("manifest.ambiguous", 65);
    let validate = p.run(&["tools", "validate"]);
    validate.assert_refused("manifest.ambiguous", 65);
    let list = p.run(&["tools", "list"]);
    let report = tool_in_list(&list.envelope, "report");
    assert_eq!(
        (report["runnable"].clone(), report["reason"]["code"].clone()),
        (json!(false), json!("manifest.ambiguous"))
    );
    let names = served(&p);
    assert!(!names.iter().any(|n| n == "report" || n == "copy"), "{names:?}");
    let stderr = mcp_startup_stderr(&p);
    assert!(stderr.contains("first.clad.toml") && stderr.contains("manifest.ambiguous"), "{stderr}");
}

#[test]
fn a_program_outside_the_worker_image_is_not_runnable() {
    let p = Project::new();
    // An executable on the host, but in a directory the image does not hold
    // (like ~/.local/bin or /opt/…/bin).
    p.write("outside/bin/mytool", "#!/bin/sh\ncp \"$@\"\n");
    let program = p.path("outside/bin/mytool");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    p.write("tools/mytool.clad.toml", running("mytool", program.to_str().unwrap()));
    p.write("tools/ghost.clad.toml", running("ghost", "airlock-no-such-program"));
    p.write("data/in.txt", "data\n");

    for tool in ["mytool", "ghost"] {
        let run = p.run(&["tools", "validate", tool]);
        run.assert_refused("tool.not_runnable", 78);
        let message = run.envelope["error"]["message"].as_str().unwrap();
        assert!(message.contains("[sandbox] image"), "the fix is named: {message}");
    }
    let run = p.run(&["tools", "validate", "mytool"]);
    let message = run.envelope["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("outside the worker image") && message.contains(&p.path("outside/bin").display().to_string()),
        "{message}"
    );
    p.run(&["tools", "validate"]).assert_refused("tool.not_runnable", 78);

    let list = p.run(&["tools", "list"]);
    list.assert_ok();
    for tool in ["mytool", "ghost"] {
        let t = tool_in_list(&list.envelope, tool);
        assert_eq!(
            (t["runnable"].clone(), t["reason"]["code"].clone()),
            (json!(false), json!("tool.not_runnable")),
            "{t:#}"
        );
    }
    assert_eq!(tool_in_list(&list.envelope, "copy")["runnable"], true);

    let names = served(&p);
    assert!(names.contains(&"copy".to_owned()) && !names.iter().any(|n| n == "mytool" || n == "ghost"), "{names:?}");
    let stderr = mcp_startup_stderr(&p);
    assert!(stderr.contains("mytool.clad.toml") && stderr.contains("ghost.clad.toml"), "{stderr}");
    assert!(stderr.contains("tool.not_runnable"), "{stderr}");
    let mut mcp = McpSession::start(&p);
    let result = mcp.call("mytool", json!({"input": "data/in.txt", "output": "results/o.txt"}));
    assert_eq!(result["isError"], true, "{result:#}");

    // The fix the message gives works: add the program's directory to the
    // image (one outside /tmp, which the sandbox builds itself; the build
    // directory may be under /tmp, /var/tmp is not).
    let dir = tempfile::Builder::new().prefix("airlock-image-").tempdir_in("/var/tmp").unwrap();
    let program = dir.path().join("mytool");
    std::fs::copy(p.path("outside/bin/mytool"), &program).unwrap();
    p.write("tools/mytool.clad.toml", running("mytool", program.to_str().unwrap()));
    p.run(&["tools", "validate", "mytool"]).assert_refused("tool.not_runnable", 78);
    let mut image: Vec<String> = ["/usr", "/bin", "/lib", "/lib64"]
        .iter()
        .filter(|d| std::path::Path::new(d).symlink_metadata().is_ok())
        .map(|d| d.to_string())
        .collect();
    image.push(dir.path().display().to_string());
    p.write(
        "airlock.toml",
        format!(
            "state_dir = \".airlock\"\n[sandbox]\nimage = {image:?}\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n"
        ),
    );
    p.run(&["tools", "validate", "mytool"]).assert_ok();
    assert!(served(&p).contains(&"mytool".to_owned()));
    p.run(&["run", "mytool", "data/in.txt", "results/o.txt"]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/o.txt")).unwrap(), "data\n");
}

#[test]
fn a_missing_custom_parser_is_not_runnable() {
    let p = Project::with_config(
        "state_dir = \".airlock\"\n[sandbox]\nparsers = [\"/usr/lib/airlock-no-such-parser\"]\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n",
    );
    p.write(
        "tools/parsed.clad.toml",
        named("parsed").replace("format = \"text\"", "format = \"json\"\nparser = \"/usr/lib/airlock-no-such-parser\""),
    );
    let run = p.run(&["tools", "validate", "parsed"]);
    run.assert_refused("tool.not_runnable", 78);
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("parser"), "{run:#?}");
}
