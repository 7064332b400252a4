//! `airlock run` end to end on the shipping binary: publication with a true
//! receipt, cleanup of staging and snapshots, single use of an invocation
//! id, ATTACKS.md 9 (an existing output is refused before any worker
//! starts), and every way a tool can fail without publishing anything.

use crate::runkit::*;
use crate::util::{sha256_hex, Project, Run, CANARY};
use serde_json::json;

const COPY_SCRIPT: &str = r#"cat "$1" > "$2"; echo copied"#;

fn copy_project(content: &str) -> Project {
    let p = Project::new();
    p.write("data/in.txt", content);
    p.tool("shcopy", &sh_tool("shcopy", "", IO_ARGS, COPY_SCRIPT, IO_FS));
    p
}

/// The receipt of a published file is the file: path, size and digest.
#[track_caller]
fn assert_receipt(p: &Project, run: &Run, rel: &str) -> Vec<u8> {
    let files = run.envelope["created_files"].as_array().expect("created_files");
    assert_eq!(files.len(), 1, "{run:#?}");
    let published = std::fs::read(p.path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}\n{}", p.tree()));
    assert_eq!(files[0]["path"], rel, "{run:#?}");
    assert_eq!(files[0]["bytes"], published.len() as u64, "{run:#?}");
    assert_eq!(files[0]["sha256"], format!("sha256:{}", sha256_hex(&published)), "{run:#?}");
    published
}

#[test]
fn a_copy_is_published_with_a_true_receipt_and_everything_else_is_cleaned_up() {
    let content = "line one\nline two\n\u{e9}t\u{e9}\n";
    let p = copy_project(content);
    let run = p.run(&["run", "shcopy", "data/in.txt", "results/out.txt", "--invocation-id", "job-1"]);
    run.assert_ok();
    let env = &run.envelope;
    assert_eq!(env["invocation_id"], "job-1");
    assert_eq!(env["tool"], "shcopy");
    assert_eq!(env["stage"], "finished");
    assert_eq!(env["exit_code"], 0);
    assert_eq!(env["content"], json!({ "raw_output": "copied\n" }));
    assert!(env.get("error").is_none(), "{run:#?}");
    let published = assert_receipt(&p, &run, "results/out.txt");
    assert_eq!(published, content.as_bytes());

    assert_no_candidates(&p, "results");
    assert_eq!(names(&p.path("results")), ["out.txt"]);
    assert_staging_empty(&p);
    // The snapshots have served; the prepared record stays, bound to the answer.
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.path(".airlock/invocations/job-1/prepared.json")).unwrap()).unwrap();
    assert_eq!(record["descriptor_sha256"], env["evidence"]["descriptor_sha256"]);
    assert_eq!(p.invocations(), ["job-1"]);
    // `settled` is a second name of the record, no inode of its own; the
    // pending-publication marker (another one) is gone.
    use std::os::unix::fs::MetadataExt;
    assert_eq!(names(&p.path(".airlock/invocations/job-1")), ["manifest.clad.toml", "prepared.json", "settled"]);
    let (settled, prepared) = (
        std::fs::symlink_metadata(p.path(".airlock/invocations/job-1/settled")).unwrap(),
        std::fs::symlink_metadata(p.path(".airlock/invocations/job-1/prepared.json")).unwrap(),
    );
    assert_eq!((settled.ino(), settled.nlink()), (prepared.ino(), 2));
    assert_eq!(names(&p.path(".airlock/pending")), Vec::<String>::new());
    p.assert_absent(&run, CANARY);

    // The id is single use, whatever the output.
    let again = p.run(&["run", "shcopy", "data/in.txt", "results/out2.txt", "--invocation-id", "job-1"]);
    again.assert_refused("invocation.duplicate", 77);
    assert!(again.envelope.get("exit_code").is_none(), "{again:#?}");
    assert_absent_path(&p, "results/out2.txt");
    let again = p.run(&["run", "shcopy", "data/in.txt", "results/out.txt", "--invocation-id", "job-1"]);
    assert_eq!(again.status(), "refused", "{again:#?}");
    assert!(
        [("invocation.duplicate", 77), ("output.exists", 73)].contains(&(again.reason(), again.code)),
        "{again:#?}"
    );
    assert!(again.envelope.get("exit_code").is_none(), "{again:#?}");
    assert_eq!(std::fs::read(p.path("results/out.txt")).unwrap(), content.as_bytes());
    assert_eq!(p.invocations(), ["job-1"]);
    assert_staging_empty(&p);
}

/// ATTACKS.md 9: an output that exists as a file, a directory, a symlink
/// (to a canary outside) or a dangling symlink is refused before any worker
/// starts, and is left exactly as it was.
#[test]
fn an_existing_output_is_refused_before_any_worker_starts() {
    type Setup = fn(&Project);
    let kinds: [(&str, Setup); 4] = [
        ("file", |p| p.write("results/out.txt", "precious\n")),
        ("directory", |p| p.write("results/out.txt/keep", "precious\n")),
        ("symlink", |p| std::os::unix::fs::symlink(p.path("outside/secret.txt"), p.path("results/out.txt")).unwrap()),
        ("dangling symlink", |p| {
            std::os::unix::fs::symlink(p.path("outside/nothing"), p.path("results/out.txt")).unwrap()
        }),
    ];
    for (kind, setup) in kinds {
        let p = Project::new();
        p.write("data/in.txt", "new content\n");
        // Were the worker started, it would take 5 s and then overwrite.
        let script = r#"sleep 5; echo overwritten > "$2""#;
        p.tool("slowcopy", &sh_tool("slowcopy", "timeout_seconds = 30", IO_ARGS, script, IO_FS));
        setup(&p);
        let before = describe(&p.path("results/out.txt"));
        let run = p.run(&["run", "slowcopy", "data/in.txt", "results/out.txt"]);
        run.assert_refused("output.exists", 73);
        assert!(run.envelope.get("exit_code").is_none(), "{kind}: a worker ran: {run:#?}");
        assert_ne!(run.envelope["stage"], "finished", "{kind}: {run:#?}");
        assert!(run.envelope["created_files"].as_array().unwrap().is_empty(), "{kind}");
        assert_eq!(describe(&p.path("results/out.txt")), before, "{kind}: the output was touched");
        assert_eq!(std::fs::read(p.path("outside/secret.txt")).unwrap(), CANARY.as_bytes());
        assert_staging_empty(&p);
        assert_no_candidates(&p, "results");
        assert_eq!(p.invocations(), Vec::<String>::new(), "{kind}: a refused call was kept");
        p.assert_absent(&run, CANARY);
    }
}

/// Type, content or link target, for "untouched" comparisons.
fn describe(path: &std::path::Path) -> String {
    let meta = std::fs::symlink_metadata(path).unwrap();
    if meta.is_symlink() {
        format!("symlink -> {}", std::fs::read_link(path).unwrap().display())
    } else if meta.is_dir() {
        format!("dir {:?}", names(path))
    } else {
        format!("file {:?}", std::fs::read(path).unwrap())
    }
}

#[test]
fn a_tool_that_fails_publishes_nothing_and_its_stderr_tail_is_kept() {
    let p = Project::new();
    p.write("data/in.txt", "x\n");
    // 6,000 bytes of noise on stderr, then the last words: only a tail is kept.
    let script = r#"echo partial > "$2"; head -c 6000 /dev/zero | tr '\0' n >&2; echo 'the last words' >&2; exit 3"#;
    p.tool("fails", &sh_tool("fails", "", IO_ARGS, script, IO_FS));
    let run = p.run(&["run", "fails", "data/in.txt", "results/out.txt", "--invocation-id", "f-1"]);
    assert_failed(&run, "failed", "tool.failed", 1);
    assert_eq!(run.envelope["exit_code"], 3, "{run:#?}");
    assert_eq!(run.envelope["stage"], "finished");
    let tail = run.envelope["stderr_tail"].as_str().expect("stderr_tail");
    assert!(run.envelope.get("content").is_none(), "the streams never replace the content: {run:#?}");
    assert!(tail.ends_with("the last words\n"), "{tail:?}");
    assert!(tail.len() <= 4096 && tail.len() > 100, "stderr tail of {} bytes", tail.len());
    assert_absent_path(&p, "results/out.txt");
    assert_no_candidates(&p, "results");
    assert_staging_empty(&p);
    assert!(!p.path(".airlock/invocations/f-1/inputs").exists(), "{}", p.tree());
}

#[test]
fn a_timeout_kills_every_process_and_publishes_nothing() {
    let p = Project::new();
    p.write("data/in.txt", "x\n");
    let m = marker(30);
    let _guard = KillOnDrop(m.clone());
    // A background sleeper, one in its own session, and one in the foreground.
    let script = r#"echo partial > "$2"; sleep "$3" & setsid sleep "$3" & echo started >&2; sleep "$3""#;
    let args = [("input", "path"), ("output", "path"), ("marker", "string")];
    p.tool("hangs", &sh_tool("hangs", "timeout_seconds = 1", &args, script, IO_FS));
    let run = p.run(&["run", "hangs", "data/in.txt", "results/out.txt", &m]);
    assert_failed(&run, "failed", "tool.timeout", 124);
    assert_eq!(run.envelope["stage"], "finished");
    assert_eq!(run.envelope["stderr_tail"], "started\n", "the sleepers never started: {run:#?}");
    assert_absent_path(&p, "results/out.txt");
    assert_no_candidates(&p, "results");
    assert_staging_empty(&p);
    let left = procs_with(&m);
    assert!(left.is_empty(), "processes outlived the timed-out call: {left:?}");
}

#[test]
fn output_that_does_not_parse_as_json_publishes_nothing() {
    let p = Project::new();
    p.write("data/in.txt", "x\n");
    let script = r#"cat "$1" > "$2"; echo '{"unterminated": '"#;
    let rest = format!("[output]\nformat = \"json\"\n\n{IO_FS}");
    p.tool("badjson", &sh_tool("badjson", "", IO_ARGS, script, &rest));
    let run = p.run(&["run", "badjson", "data/in.txt", "results/out.txt"]);
    assert_failed(&run, "failed", "output.parse", 1);
    assert_eq!(run.envelope["exit_code"], 0, "the tool itself succeeded: {run:#?}");
    assert_absent_path(&p, "results/out.txt");
    assert_no_candidates(&p, "results");
    assert_staging_empty(&p);
}

#[test]
fn stdout_over_output_max_bytes_publishes_nothing() {
    let p = Project::new();
    p.write("data/in.txt", "x\n");
    let script = r#"cat "$1" > "$2"; head -c 5000 /dev/zero | tr '\0' a"#;
    let rest = format!("[output]\nformat = \"text\"\nmax_bytes = 100\n\n{IO_FS}");
    p.tool("chatty", &sh_tool("chatty", "", IO_ARGS, script, &rest));
    let run = p.run(&["run", "chatty", "data/in.txt", "results/out.txt"]);
    assert_failed(&run, "failed", "limit.output_size", 1);
    assert_absent_path(&p, "results/out.txt");
    assert_no_candidates(&p, "results");
    assert_staging_empty(&p);
    // At the bound it passes.
    let script = r#"cat "$1" > "$2"; head -c 100 /dev/zero | tr '\0' a"#;
    p.tool("quiet", &sh_tool("quiet", "", IO_ARGS, script, &rest));
    let run = p.run(&["run", "quiet", "data/in.txt", "results/out.txt"]);
    run.assert_ok();
    assert_eq!(run.envelope["content"]["raw_output"], "a".repeat(100));
}

#[test]
fn output_formats_are_parsed_into_the_content() {
    let p = Project::new();
    let cases = [
        ("text", "printf 'plain\\ntext'", json!({ "raw_output": "plain\ntext" })),
        (
            "json",
            r#"printf '{"a": [1, 2.5, null], "b": {"c": "d"}}\n'"#,
            json!({ "a": [1, 2.5, null], "b": { "c": "d" } }),
        ),
        ("jsonl", r#"printf '{"n": 1}\n\n{"n": 2}\n"three"\n'"#, json!([{ "n": 1 }, { "n": 2 }, "three"])),
        (
            "csv",
            r#"printf 'name,count\nalpha,1\n"be,ta",2\n'"#,
            json!([{ "name": "alpha", "count": 1 }, { "name": "be,ta", "count": 2 }]),
        ),
    ];
    for (format, script, want) in cases {
        let name = format!("fmt{format}");
        let rest = format!("[output]\nformat = \"{format}\"\n");
        p.tool(&name, &sh_tool(&name, "", &[], script, &rest));
        let run = p.run(&["run", &name]);
        run.assert_ok();
        assert_eq!(run.envelope["content"], want, "{format}: {run:#?}");
        assert_eq!(run.envelope["created_files"], json!([]), "{format}");
    }
    assert_staging_empty(&p);
}

/// A tool with no `[filesystem]` runs with no host file at all: not the
/// project, not its inputs, not the caller's /tmp.
#[test]
fn a_tool_without_filesystem_sees_no_host_files() {
    let p = Project::new();
    p.write("data/in.txt", CANARY);
    let root = p.root().to_str().unwrap().to_owned();
    let script = r#"
import json, os, sys
root = sys.argv[1]
seen = []
try:
    top = sorted(os.listdir('/'))
except OSError as e:
    top = 'unreadable ' + str(e.errno)
for top_dir in ['/workspace', '/tmp']:
    for d, dirs, files in os.walk(top_dir, onerror=lambda e: seen.append(['walk', e.filename, e.errno])):
        for f in files:
            path = os.path.join(d, f)
            try:
                seen.append([path, open(path, 'rb').read(200).decode('latin-1')])
            except OSError as e:
                seen.append([path, 'unreadable ' + str(e.errno)])
print(json.dumps(dict(
    root_visible=os.path.exists(root),
    input_visible=os.path.exists(os.path.join(root, 'data', 'in.txt')),
    top=top,
    workspace=sorted(os.listdir('/workspace')) if os.path.isdir('/workspace') else None,
    files=seen,
)))
"#;
    p.tool("nofs", &py_tool("nofs", "", &[("root", "string")], script, "[output]\nformat = \"json\"\n"));
    let run = p.run(&["run", "nofs", &root]);
    run.assert_ok();
    let c = &run.envelope["content"];
    assert_eq!(c["root_visible"], false, "{c:#}");
    assert_eq!(c["input_visible"], false, "{c:#}");
    assert!(c["workspace"].is_null() || c["workspace"] == json!([]), "{c:#}");
    assert_eq!(c["files"], json!([]), "files under /workspace or /tmp: {c:#}");
    let allowed = ["bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr", "workspace"];
    // Listing / may itself be denied; what can be listed is the image and the sandbox's own.
    for entry in c["top"].as_array().into_iter().flatten() {
        assert!(allowed.contains(&entry.as_str().unwrap()), "unexpected /{entry} in the worker: {c:#}");
    }
    assert_eq!(run.envelope["created_files"], json!([]));
    p.assert_absent(&run, CANARY);
}
