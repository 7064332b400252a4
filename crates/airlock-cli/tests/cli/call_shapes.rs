//! One engine for every call shape: an exec tool, an `[mcp]` tool, a source
//! query, a Git query and an isolated submission each leave the same steps
//! in the journal, in the same order, and every shape that ran a worker
//! records its end with the same keys.

use crate::git::git;
use crate::mcp_worker::mcp_manifest;
use crate::util::Project;
use serde_json::Value;
use std::collections::BTreeSet;

/// The journal records of invocation `id`, in order.
fn records(p: &Project, id: &str) -> Vec<Value> {
    let show = p.run(&["journal", "show", "--json"]);
    show.envelope["content"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["invocation_id"] == id)
        .cloned()
        .collect()
}

fn keys(record: &Value) -> BTreeSet<String> {
    record["body"].as_object().unwrap_or_else(|| panic!("no body in {record:#}")).keys().cloned().collect()
}

#[test]
fn every_call_shape_goes_through_the_same_steps_with_the_same_worker_record() {
    let p = Project::new();
    p.write("data/in.txt", "one two three\n");
    p.tool("upper", &mcp_manifest("upper", "", "upper"));
    let repo = p.path("data/repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "first"]);

    p.run(&["run", "copy", "data/in.txt", "results/copy.txt", "--invocation-id", "shape-exec"]).assert_ok();
    p.run(&["run", "upper", "data/in.txt", "results/upper.txt", "--invocation-id", "shape-mcp"]).assert_ok();
    p.run(&["query", "read_file", "path=data/in.txt", "--invocation-id", "shape-source"]).assert_ok();
    p.run(&["query", "git_status", "path=data/repo", "--invocation-id", "shape-git"]).assert_ok();
    let data = format!("data={}:r", p.path("data").display());
    p.run(&[
        "isolated",
        "--root",
        &data,
        "--invocation-id",
        "shape-isolated",
        "--",
        "airlock-fs",
        "read",
        "data",
        "in.txt",
    ])
    .assert_ok();

    let worker_steps = ["InvocationPrepared", "InvocationAuthorized", "WorkerStarted", "WorkerFinished"];
    let mut finished_keys = Vec::new();
    for (id, transport) in [
        ("shape-exec", "exec"),
        ("shape-mcp", "exec"),
        ("shape-source", "source"),
        ("shape-git", "git-snapshot"),
        ("shape-isolated", "isolated"),
    ] {
        let recs = records(&p, id);
        let kinds: Vec<&str> = recs.iter().map(|r| r["kind"].as_str().unwrap()).collect();
        // Step order: prepared, authorized, (the worker), …, finished.
        assert_eq!(kinds.first(), Some(&"InvocationPrepared"), "{id}: {kinds:?}");
        assert_eq!(kinds.last(), Some(&"InvocationFinished"), "{id}: {kinds:?}");
        let prepared = &recs[0]["body"];
        assert_eq!(prepared["transport"], transport, "{id}: {prepared:#}");
        for key in ["descriptor_sha256", "tool", "manifest_sha256", "owner_pid", "principal"] {
            assert!(prepared.get(key).is_some(), "{id}: InvocationPrepared has no {key}: {prepared:#}");
        }
        if id == "shape-source" {
            assert_eq!(kinds, ["InvocationPrepared", "InvocationAuthorized", "InvocationFinished"], "{id}");
            continue;
        }
        let steps: Vec<&str> = kinds.iter().copied().filter(|k| worker_steps.contains(k)).collect();
        assert_eq!(steps, worker_steps, "{id}: {kinds:?}");
        let finished = recs.iter().find(|r| r["kind"] == "WorkerFinished").unwrap();
        assert_eq!(finished["body"]["exit_code"], 0, "{id}: {finished:#}");
        finished_keys.push((id, keys(finished)));
    }
    let expected: BTreeSet<String> =
        ["exit_code", "timed_out", "cleanup_confirmed", "output_bytes", "principal"].map(String::from).into();
    for (id, k) in &finished_keys {
        assert_eq!(k, &expected, "{id}'s WorkerFinished");
    }
}
