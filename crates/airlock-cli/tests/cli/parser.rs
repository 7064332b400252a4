//! Custom output parsers: allowed by name only, run in a fresh worker that
//! holds nothing but the tool's raw output.

use crate::runkit::*;
use crate::util::{Project, CANARY};

fn project(parsers: &str) -> Project {
    Project::with_config(&format!(
        "[sandbox]\nparsers = {parsers}\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n"
    ))
}

/// A tool that copies its input to its output, prints `printed` and names `parser`.
fn tool(p: &Project, parser: &str, printed: &str) {
    let printed = lit(printed);
    let exec = [
        "python3",
        "-c",
        "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2]); sys.stdout.write(sys.argv[3])",
        "{input}",
        "{output}",
        &printed,
    ];
    let rest = format!("{IO_FS}[output]\nformat = \"text\"\nparser = \"{parser}\"\n");
    p.tool("t", &manifest("t", "", IO_ARGS, &exec, &rest));
}

#[test]
fn an_allowed_parser_turns_raw_output_into_content() {
    let p = project(r#"["/usr/bin/cat"]"#);
    p.write("data/in.txt", "x");
    tool(&p, "/usr/bin/cat", r#"{"parsed": true}"#);
    let run = p.run(&["run", "t", "data/in.txt", "results/o.txt"]);
    run.assert_ok();
    assert_eq!(run.envelope["content"], serde_json::json!({"parsed": true}));
    assert!(p.path("results/o.txt").exists());
}

#[test]
fn a_parser_not_in_the_allowlist_is_refused_before_the_tool_runs() {
    let p = project("[]");
    p.write("data/in.txt", "x");
    tool(&p, "/usr/bin/cat", "{}");
    let run = p.run(&["run", "t", "data/in.txt", "results/o.txt"]);
    run.assert_refused("output.parser_not_allowed", 77);
    assert!(run.envelope.get("exit_code").is_none(), "no worker may start: {run:#?}");
    assert!(!p.path("results/o.txt").exists());
}

#[test]
fn a_parser_that_does_not_print_json_publishes_nothing() {
    let p = project(r#"["/usr/bin/wc"]"#);
    p.write("data/in.txt", "x");
    tool(&p, "/usr/bin/wc", "not json");
    let run = p.run(&["run", "t", "data/in.txt", "results/o.txt"]);
    assert_eq!((run.status(), run.reason(), run.code), ("failed", "output.parse", 1), "{run:#?}");
    assert!(!p.path("results/o.txt").exists());
}

/// The parser sees the raw output and nothing of the call's grants: here
/// the "raw output" is a python program, run by the python3 parser, that
/// looks for the tool's input and its output.
#[test]
fn a_parser_gets_no_file_grant_of_the_call() {
    let p = project(r#"["/usr/bin/python3"]"#);
    p.write("data/in.txt", CANARY);
    let program = "import json, os; print(json.dumps({'input': os.path.exists('data/in.txt'), 'output': os.path.exists('results/o.txt'), 'cwd': sorted(os.listdir('.'))}))";
    tool(&p, "/usr/bin/python3", program);
    let run = p.run(&["run", "t", "data/in.txt", "results/o.txt"]);
    run.assert_ok();
    let c = &run.envelope["content"];
    assert_eq!(c["input"], false, "{run:#?}");
    assert_eq!(c["output"], false, "{run:#?}");
    assert_eq!(c["cwd"], serde_json::json!(["raw_output"]), "{run:#?}");
    assert!(!run.stdout.contains(CANARY));
}

#[test]
fn a_relative_parser_script_is_unsupported() {
    let p = project(r#"["scripts/parse.py"]"#);
    tool(&p, "scripts/parse.py", "{}");
    let run = p.run(&["tools", "list"]);
    let t = &run.envelope["content"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "t").unwrap().clone();
    assert_eq!(t["runnable"], false);
    assert!(t["unsupported"]["message"].as_str().unwrap().contains("host scripts are never mounted"), "{t:#}");
}
