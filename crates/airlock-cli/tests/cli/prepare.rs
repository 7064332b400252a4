//! `airlock prepare`: the descriptor, the kept snapshots, and ATTACKS.md 11.

use crate::util::{sha256_hex, Project};

#[test]
fn descriptor_binds_paths_hashes_output_and_parent_identity() {
    let p = Project::new();
    p.write("data/in.txt", "hello\n");
    let run = p.prepare("data/in.txt", "results/out.txt");
    run.assert_ok();
    let env = &run.envelope;
    assert_eq!(env["stage"], "prepared");
    assert_eq!(env["tool"], "copy");
    let fs = &env["descriptor"]["command_boundary"]["filesystem"];
    assert_eq!(fs["reads"][0]["path"], "data/in.txt");
    assert_eq!(fs["reads"][0]["bytes"], 6);
    assert_eq!(fs["reads"][0]["sha256"], format!("sha256:{}", sha256_hex(b"hello\n")));
    assert_eq!(fs["create"][0], "results/out.txt");
    assert_eq!(fs["read_paths"][0], "data/in.txt");
    assert_eq!(fs["input_snapshots"], true);
    assert_eq!(fs["overwrite"], false);
    assert_eq!(fs["max_file_bytes"], 8 * 1024 * 1024);
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(p.path("results")).unwrap();
    assert_eq!(fs["output_parent"]["dev"], meta.dev().to_string());
    assert_eq!(fs["output_parent"]["ino"], meta.ino().to_string());
    assert_eq!(env["descriptor"]["argv"], serde_json::json!(["cp", "data/in.txt", "results/out.txt"]));
    assert!(!p.path("results/out.txt").exists(), "prepare must not create the output");

    // The digest is SHA-256 of the canonical descriptor, recomputable by anyone.
    let digest = env["evidence"]["descriptor_sha256"].as_str().unwrap();
    let id = env["invocation_id"].as_str().unwrap();
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.path(&format!(".airlock/invocations/{id}/prepared.json"))).unwrap())
            .unwrap();
    assert_eq!(record["descriptor_sha256"], digest);
    assert_eq!(record["descriptor"], env["descriptor"]);
}

#[test]
fn same_call_gives_same_digest_and_changed_input_changes_it() {
    let p = Project::new();
    p.write("data/in.txt", "one");
    let a = p.prepare("data/in.txt", "results/out.txt");
    let b = p.prepare("data/in.txt", "results/out.txt");
    assert_eq!(a.envelope["evidence"], b.envelope["evidence"]);
    assert_ne!(a.envelope["invocation_id"], b.envelope["invocation_id"]);
    p.write("data/in.txt", "two");
    let c = p.prepare("data/in.txt", "results/out.txt");
    assert_ne!(a.envelope["evidence"], c.envelope["evidence"]);
}

/// ATTACKS.md 11: after prepare the host input is rewritten, truncated or
/// replaced; the kept snapshot is what was hashed.
#[test]
fn snapshot_survives_rewrite_truncate_and_replace() {
    for change in ["rewrite", "truncate", "replace"] {
        let p = Project::new();
        p.write("data/in.txt", "original content\n");
        let run = p.prepare("data/in.txt", "results/out.txt");
        run.assert_ok();
        let id = run.envelope["invocation_id"].as_str().unwrap().to_owned();
        match change {
            "rewrite" => p.write("data/in.txt", "EVIL CONTENT WRITTEN AFTERWARDS\n"),
            "truncate" => std::fs::File::create(p.path("data/in.txt")).map(drop).unwrap(),
            _ => {
                p.write("data/new.txt", "replacement\n");
                std::fs::rename(p.path("data/new.txt"), p.path("data/in.txt")).unwrap();
            }
        }
        let snapshot = std::fs::read(p.path(&format!(".airlock/staging/data/{id}/0"))).unwrap();
        assert_eq!(snapshot, b"original content\n", "{change}");
        let want = format!("sha256:{}", sha256_hex(&snapshot));
        assert_eq!(
            run.envelope["descriptor"]["command_boundary"]["filesystem"]["reads"][0]["sha256"], want,
            "{change}"
        );
    }
}

#[test]
fn snapshots_and_state_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let p = Project::new();
    p.write("data/in.txt", "x");
    let run = p.prepare("data/in.txt", "results/out.txt");
    let id = run.envelope["invocation_id"].as_str().unwrap();
    for (rel, want) in [(".airlock".to_owned(), 0o700), (format!(".airlock/staging/data/{id}/0"), 0o600)] {
        let mode = std::fs::metadata(p.path(&rel)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, want, "{rel}");
    }
}

#[test]
fn a_reused_invocation_id_is_refused() {
    let p = Project::new();
    p.write("data/in.txt", "x");
    p.run(&["prepare", "copy", "data/in.txt", "results/o.txt", "--invocation-id", "job-1"]).assert_ok();
    p.run(&["prepare", "copy", "data/in.txt", "results/o.txt", "--invocation-id", "job-1"])
        .assert_refused("invocation.duplicate", 77);
    p.run(&["prepare", "copy", "data/in.txt", "results/o.txt", "--invocation-id", "../x"])
        .assert_refused("invocation.id_invalid", 64);
}

#[test]
fn limits_are_enforced_before_reading() {
    let p = Project::with_config(
        r#"
[filesystem]
roots = ["./data:data:ro", "./results:results:rw"]
[limits]
max_file_bytes = 16
"#,
    );
    p.write("data/small.txt", "0123456789abcdef");
    p.write("data/big.txt", "0123456789abcdefX");
    p.prepare("data/small.txt", "results/o.txt").assert_ok();
    p.prepare("data/big.txt", "results/o.txt").assert_refused("input.too_large", 77);
    let raise = Project::with_config("[limits]\nmax_inputs = 64\n");
    let run = raise.run(&["tools", "list"]);
    assert_eq!((run.reason(), run.code), ("config.invalid", 78));
}

#[test]
fn total_input_bytes_are_bounded() {
    let p = Project::with_config(
        r#"
[filesystem]
roots = ["./data:data:ro", "./results:results:rw"]
[limits]
max_input_bytes = 10
"#,
    );
    p.write(
        "tools/two.clad.toml",
        r#"
[tool]
name = "two"
version = "1"
binary = "cat"
description = "reads two files"
[command]
exec = ["cat", "data/a", "data/b"]
[filesystem]
read = ["data/a", "data/b"]
"#,
    );
    p.write("data/a", "123456");
    p.write("data/b", "CANARY");
    p.run(&["prepare", "two"]).assert_refused("limit.input_bytes", 77);
    p.assert_state_free_of("123456");
}

#[test]
fn a_ceiling_over_the_state_dir_or_proc_is_refused() {
    for roots in [r#"["./.airlock/invocations:x:ro"]"#, r#"["/proc:p:ro"]"#, r#"["/:all:ro"]"#] {
        let p = Project::with_config(&format!("[filesystem]\nroots = {roots}\n"));
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(p.path(".airlock/invocations")).unwrap();
        let first = roots.split(':').nth(1).unwrap();
        let tool = format!("{first}/secret");
        let run = p.run(&["prepare", "copy", &tool, "results/o"]);
        assert_eq!((run.reason(), run.code), ("config.ceiling", 78), "{roots}: {run:#?}");
    }
}

#[test]
fn a_forbidden_ceiling_stops_start_up() {
    let p = Project::with_config("[filesystem]\nroots = [\"/sys:s:ro\"]\n");
    let run = p.run(&["tools", "list"]);
    assert_eq!((run.reason(), run.code), ("config.ceiling", 78), "{run:#?}");
}

#[test]
fn a_tool_without_filesystem_gets_no_host_file() {
    let p = Project::new();
    p.write(
        "tools/echo.clad.toml",
        r#"
[tool]
name = "echo"
version = "1"
binary = "echo"
description = "says a word"
[args.word]
position = 1
required = true
type = "string"
[command]
exec = ["echo", "{word}"]
"#,
    );
    let run = p.run(&["prepare", "echo", "hello"]);
    run.assert_ok();
    let fs = &run.envelope["descriptor"]["command_boundary"]["filesystem"];
    assert_eq!(fs["reads"], serde_json::json!([]));
    assert_eq!(fs["create"], serde_json::json!([]));
    assert_eq!(fs["output_parent"], serde_json::Value::Null);
    assert_eq!(run.envelope["descriptor"]["argv"], serde_json::json!(["echo", "hello"]));
}
