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
