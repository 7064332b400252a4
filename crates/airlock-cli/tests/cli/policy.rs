//! Cedar policies on the shipping binary: permit and forbid keyed on path,
//! hash, size and tool; principals; start-up errors naming file and line;
//! denied content never appears anywhere; decisions journaled with ids.

use crate::util::{sha256_hex, Project, CANARY};

const PERMIT_ALL: &str = "@id(\"permit-all\")\npermit(principal, action, resource);\n";

fn project(policies: &[(&str, &str)]) -> Project {
    let p = Project::with_config(
        "[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n[policy]\nfiles = [\"policy/*.cedar\"]\n",
    );
    for (name, text) in policies {
        p.write(&format!("policy/{name}"), text);
    }
    p.write("data/ok.txt", "fine\n");
    p.write("data/private.txt", CANARY);
    p
}

fn journal_text(p: &Project) -> String {
    std::fs::read_to_string(p.path(".airlock/journal.jsonl")).unwrap()
}

#[test]
fn a_forbid_on_a_read_path_keeps_that_file_out_of_everything() {
    let forbid = r#"@id("no-private")
forbid(principal, action, resource) when {
  context.invocation.resolved.command_boundary.filesystem.read_paths.contains("data/private.txt")
};"#;
    let p = project(&[("a.cedar", PERMIT_ALL), ("b.cedar", forbid)]);
    let denied = p.run(&["run", "copy", "data/private.txt", "results/o.txt"]);
    denied.assert_refused("policy.denied", 77);
    assert!(denied.envelope["error"]["message"].as_str().unwrap().contains("no-private"), "{denied:#?}");
    assert!(!p.path("results/o.txt").exists());
    p.assert_absent(&denied, CANARY);
    assert!(!journal_text(&p).contains(CANARY));
    let ok = p.run(&["run", "copy", "data/ok.txt", "results/o.txt"]);
    ok.assert_ok();
    assert!(journal_text(&p).contains("permit-all"), "the decision is journaled with its policy id");
}

#[test]
fn forbid_rules_key_on_hash_size_output_and_tool() {
    let hash = format!("sha256:{}", sha256_hex(b"fine\n"));
    let cases = [
        (
            format!(
                "@id(\"no-hash\")\nforbid(principal, action, resource) when {{ context.invocation.resolved.command_boundary.filesystem.read_sha256.contains(\"{hash}\") }};"
            ),
            "data/ok.txt",
            "results/a.txt",
        ),
        (
            "@id(\"small-only\")\nforbid(principal, action, resource) when { context.invocation.resolved.command_boundary.filesystem.max_file_bytes > 1024 };".to_owned(),
            "data/ok.txt",
            "results/b.txt",
        ),
        (
            "@id(\"no-b\")\nforbid(principal, action, resource) when { context.invocation.resolved.command_boundary.filesystem.create_paths.contains(\"results/b.txt\") };".to_owned(),
            "data/ok.txt",
            "results/b.txt",
        ),
        ("@id(\"no-copy\")\nforbid(principal, action, resource == Airlock::Tool::\"copy\");".to_owned(), "data/ok.txt", "results/c.txt"),
    ];
    for (forbid, input, output) in cases {
        let p = project(&[("a.cedar", PERMIT_ALL), ("b.cedar", &forbid)]);
        let run = p.run(&["run", "copy", input, output]);
        run.assert_refused("policy.denied", 77);
        assert!(!p.path(output).exists(), "{forbid}");
    }
}

#[test]
fn only_what_a_policy_permits_runs_and_principals_count() {
    let alice = "@id(\"alice-only\")\npermit(principal == Airlock::Agent::\"alice\", action, resource);\n";
    let p = project(&[("a.cedar", alice)]);
    p.run(&["run", "copy", "data/ok.txt", "results/o.txt"]).assert_refused("policy.denied", 77);
    p.run(&["run", "copy", "data/ok.txt", "results/o.txt", "--principal", "alice"]).assert_ok();
}

#[test]
fn a_policy_error_stops_start_up_naming_file_and_line() {
    let p = project(&[("a.cedar", PERMIT_ALL), ("broken.cedar", "\n\npermit(principal, action resource);\n")]);
    let run = p.run(&["tools", "list"]);
    assert_eq!((run.reason(), run.code), ("policy.invalid", 78), "{run:#?}");
    let msg = run.envelope["error"]["message"].as_str().unwrap();
    assert!(msg.contains("broken.cedar:3"), "{msg}");
    let typo = "@id(\"typo\")\nforbid(principal, action, resource) when { context.invocation.resolved.command_boundary.filesystem.read_path.contains(\"x\") };\n";
    let q = project(&[("a.cedar", PERMIT_ALL), ("typo.cedar", typo)]);
    let run = q.run(&["run", "copy", "data/ok.txt", "results/o.txt"]);
    assert_eq!((run.reason(), run.code), ("policy.invalid", 78), "{run:#?}");
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("typo.cedar:2"), "{run:#?}");
}

#[test]
fn the_printed_default_policy_decides_like_the_built_in_one() {
    let default = {
        let p = Project::new();
        let out = p.command(&["policy", "show-default"]).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    for risk in ["low", "medium"] {
        let builtin = Project::new();
        let cedar = project(&[("default.cedar", &default)]);
        for p in [&builtin, &cedar] {
            p.write("data/ok.txt", "fine\n");
            p.write(
                "tools/copy.clad.toml",
                crate::util::COPY_TOOL.replace("binary = \"cp\"", &format!("binary = \"cp\"\nrisk_tier = \"{risk}\"")),
            );
            p.run(&["run", "copy", "data/ok.txt", "results/o.txt"]).assert_ok();
        }
    }
}
