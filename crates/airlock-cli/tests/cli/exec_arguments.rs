//! Arguments a non-shell tool can take (issue 17): in the exec form a
//! `string` argument holds shell metacharacters, which reach the tool as one
//! argv word, uninterpreted; forms that can reach a shell keep the refusal,
//! and every refusal names the type that would accept the value.

use crate::util::{Project, Run};

/// `airlock run jq '[.users[] | select(.age > 30)]' …` from issue 17.
const FILTER: &str = "[.users[] | select(.age > 30) | {name: .name}] | length as $n | {n: $n, names: map(.name)}";

const USERS: &str = r#"{"users": [{"name": "ada", "age": 36}, {"name": "bob", "age": 25}, {"name": "cy", "age": 41}]}"#;

/// A jq tool whose `[command]` is `command` (an `exec = [...]` or a
/// `template = "..."` line) and whose filter argument carries `filter_extra`.
fn jq_tool(p: &Project, name: &str, command: &str, filter_extra: &str) {
    p.write(
        &format!("tools/{name}.clad.toml"),
        format!(
            r#"
[tool]
name = "{name}"
version = "1.0.0"
description = "run a jq filter over a JSON file"
[args.filter]
position = 1
required = true
type = "string"
{filter_extra}
[args.input]
position = 2
required = true
type = "path"
[command]
{command}
[output]
format = "json"
[filesystem]
read = ["{{input}}"]
"#
        ),
    );
}

fn message(run: &Run) -> &str {
    run.envelope["error"]["message"].as_str().unwrap_or("")
}

fn jq_project() -> Project {
    let p = Project::new();
    p.write("data/users.json", USERS);
    p
}

#[test]
fn a_jq_filter_with_metacharacters_runs_through_the_exec_form() {
    assert!(std::path::Path::new("/usr/bin/jq").exists(), "jq is needed (.ci/run installs it)");
    let p = jq_project();
    jq_tool(&p, "jq", r#"exec = ["jq", "-c", "{filter}", "{input}"]"#, "");
    let run = p.run(&["run", "jq", FILTER, "data/users.json"]);
    run.assert_ok();
    assert_eq!(run.envelope["content"], serde_json::json!({"n": 2, "names": ["ada", "cy"]}), "{run:#?}");
    // The filter is one argv word, byte for byte, in the descriptor policy judges.
    let prepared = p.run(&["prepare", "jq", FILTER, "data/users.json"]);
    prepared.assert_ok();
    let argv = &prepared.envelope["descriptor"]["argv"];
    assert_eq!(argv, &serde_json::json!(["jq", "-c", FILTER, "data/users.json"]), "{prepared:#?}");
}

#[test]
fn a_value_reaches_the_tool_as_one_uninterpreted_word() {
    let p = Project::new();
    p.write(
        "tools/echo.clad.toml",
        r#"
[tool]
name = "echo"
version = "1.0.0"
description = "print the argument back"
[args.text]
position = 1
required = true
type = "string"
[command]
exec = ["printf", "%s", "{text}"]
[output]
format = "text"
"#,
    );
    let value = "$(id) `id` ; a | b > c < d && e || !f {g} [h] (i) $HOME";
    let run = p.run(&["run", "echo", value]);
    run.assert_ok();
    assert_eq!(run.envelope["content"]["raw_output"], value, "{run:#?}");
    // Every other rule of `string` still holds.
    p.run(&["run", "echo", "a\nb"]).assert_refused("arg.invalid", 65);
    p.run(&["run", "echo", " [x]"]).assert_refused("arg.invalid", 65);
    p.run(&["run", "echo", "--", "-[x]"]).assert_refused("arg.leading_dash", 65);
}

#[test]
fn forms_that_can_reach_a_shell_refuse_and_name_the_type_that_takes_it() {
    let p = jq_project();
    jq_tool(&p, "jq_template", "template = \"jq -c {filter} {input}\"", "");
    let run = p.run(&["run", "jq_template", FILTER, "data/users.json"]);
    run.assert_refused("arg.injection", 65);
    assert!(message(&run).contains("'['"), "{run:#?}");
    assert!(message(&run).contains("type `string` in an exec-form command"), "{run:#?}");

    jq_tool(&p, "jq_sh", r#"exec = ["sh", "-c", "jq -c \"$1\" \"$2\"", "sh", "{filter}", "{input}"]"#, "");
    let run = p.run(&["run", "jq_sh", FILTER, "data/users.json"]);
    run.assert_refused("arg.injection", 65);
    assert!(message(&run).contains("the shell `sh`") && message(&run).contains("literal_text"), "{run:#?}");

    jq_tool(&p, "jq_sanitized", r#"exec = ["jq", "-c", "{filter}", "{input}"]"#, "sanitize = [\"injection\"]");
    let run = p.run(&["run", "jq_sanitized", FILTER, "data/users.json"]);
    run.assert_refused("arg.injection", 65);
    assert!(message(&run).contains("sanitize") && message(&run).contains("literal_text"), "{run:#?}");
    // Without a metacharacter each of them runs.
    for tool in ["jq_template", "jq_sh", "jq_sanitized"] {
        let run = p.run(&["run", tool, ".users", "data/users.json"]);
        run.assert_ok();
        assert_eq!(run.envelope["content"][0]["name"], "ada", "{tool}: {run:#?}");
    }
}
