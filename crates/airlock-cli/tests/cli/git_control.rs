//! Git snapshots obey the read grammar, tried on the shipping binary: a
//! ceiling over a project that holds both a repository and airlock's state
//! directory; the configuration, tools and policies live in a sibling
//! directory (`--config` with absolute paths), outside the ceiling.
//!
//! No byte of the state directory (its key, journal, staged inputs, a
//! planted canary) nor its file names reach a Git answer; control
//! directories in any case and nested `.git` are skipped and counted; a
//! hard link to a file outside the ceiling never reaches an answer, the
//! default policy (native and its printed Cedar text alike) refuses the
//! snapshot, and a permitting policy gets a partial answer.

use crate::git::git;
use crate::util::{is_root, Project, Run, AIRLOCK, CANARY};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The Git queries that copy something of the project.
const QUERIES: [&str; 4] = ["git_status", "git_diff", "git_log", "git_staged_diff"];

/// `T/proj` (the only ceiling, at `.`: a repository holding the state
/// directory `.airlock`) and `T/conf` (airlock.toml, tools, policies).
struct Layout {
    p: Project,
}

impl Layout {
    /// `policy`: Cedar text put in `conf/policy/p.cedar` and configured.
    fn new(policy: Option<&str>) -> Layout {
        let p = Project::new();
        let root = p.root().canonicalize().unwrap();
        p.mkdir("conf/tools");
        let mut config = format!(
            "state_dir = \"{r}/proj/.airlock\"\ntools_dir = \"{r}/conf/tools\"\n[filesystem]\nroots = [\"{r}/proj:.:ro\"]\n",
            r = root.display()
        );
        if let Some(text) = policy {
            p.write("conf/policy/p.cedar", text);
            config.push_str(&format!("[policy]\nfiles = [\"{}/conf/policy/*.cedar\"]\n", root.display()));
        }
        p.write("conf/airlock.toml", config);
        let l = Layout { p };
        let repo = l.repo();
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("a.txt"), "a\n").unwrap();
        git(&repo, &["add", "a.txt"]);
        git(&repo, &["commit", "-q", "-m", "a"]);
        std::fs::write(repo.join("a.txt"), "a changed\n").unwrap();
        l
    }

    fn repo(&self) -> PathBuf {
        self.p.path("proj")
    }

    fn config(&self) -> String {
        self.p.path("conf/airlock.toml").display().to_string()
    }

    /// Fails if `needle` is in any file of the state directory.
    #[track_caller]
    fn state_free_of(&self, needle: &str) {
        for f in fingerprints(&self.repo().join(".airlock")) {
            assert!(!f.contains(needle), "{needle:?} leaked into the state directory");
        }
        let mut stack = vec![self.repo().join(".airlock")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                } else {
                    let bytes = std::fs::read(e.path()).unwrap_or_default();
                    assert!(!bytes.windows(needle.len()).any(|w| w == needle.as_bytes()), "{:?}", e.path());
                }
            }
        }
    }

    fn query(&self, op: &str) -> Run {
        let config = self.config();
        self.p.run(&["--config", &config, "query", op])
    }
}

/// Every file name and every 16-byte window of every file in `dir`: none
/// may appear in an answer.
fn fingerprints(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(path);
                continue;
            }
            if name.len() >= 6 {
                out.push(name.clone());
            }
            let bytes = std::fs::read(&path).unwrap_or_default();
            if name.ends_with(".jsonl") {
                // The journal is JSON like the answers themselves: its
                // 16-byte chunks (`"truncated":false`) occur in any answer.
                // Its signatures and chain hashes are its own.
                for line in String::from_utf8_lossy(&bytes).lines() {
                    let record: Value = serde_json::from_str(line).unwrap();
                    out.extend(["sig", "prev"].iter().filter_map(|k| record[*k].as_str().map(str::to_owned)));
                }
                continue;
            }
            // Raw bytes as the JSON answer would carry them (lossy text), and as hex.
            for chunk in bytes.chunks(16).filter(|c| c.len() == 16) {
                out.push(hex(chunk));
                if let Ok(text) = std::str::from_utf8(chunk) {
                    if !text.trim().is_empty() {
                        out.push(text.to_owned());
                    }
                }
            }
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[track_caller]
fn assert_clean(run: &Run, state: &[String]) {
    assert!(!run.stdout.contains(CANARY) && !run.stderr.contains(CANARY), "a canary leaked: {run:#?}");
    let content = run.envelope["content"].to_string();
    for f in state {
        assert!(!content.contains(f.as_str()), "state dir bytes {f:?} reached the answer: {content}");
    }
}

fn snapshot(l: &Layout, run: &Run) -> Value {
    Project::descriptor(&l.repo().join(".airlock"), run)["command_boundary"]["filesystem"]["snapshot"].clone()
}

#[test]
fn git_answers_show_no_byte_of_the_state_dir_and_skip_control_dirs() {
    let l = Layout::new(None);
    let repo = l.repo();
    l.query("git_status").assert_ok(); // makes the state dir, its key and journal
    assert!(repo.join(".airlock/journal.key").is_file());
    std::fs::write(repo.join(".airlock/canary-in-state.txt"), CANARY).unwrap();
    std::fs::create_dir_all(repo.join(".airlock/staging/planted-call")).unwrap();
    std::fs::write(repo.join(".airlock/staging/planted-call/staged-input.txt"), CANARY).unwrap();
    // A case-folded control dir and a nested repository in the work tree.
    std::fs::create_dir_all(repo.join(".AIRLOCK")).unwrap();
    std::fs::write(repo.join(".AIRLOCK/cased-canary.txt"), CANARY).unwrap();
    std::fs::create_dir_all(repo.join("vendor/nested/.git")).unwrap();
    std::fs::write(repo.join("vendor/nested/.git/nested-canary.txt"), CANARY).unwrap();
    std::fs::write(repo.join("vendor/nested/visible.txt"), "v\n").unwrap();

    let state = fingerprints(&repo.join(".airlock"));
    assert!(state.iter().any(|f| f == "journal.key") && state.len() > 10, "{state:?}");
    for op in QUERIES {
        let run = l.query(op);
        run.assert_ok();
        assert_clean(&run, &state);
        for name in ["cased-canary", "nested-canary", ".AIRLOCK", ".airlock"] {
            assert!(!run.envelope["content"].to_string().contains(name), "{op}: {name} listed: {run:#?}");
        }
        if op != "git_log" && op != "git_staged_diff" {
            // .airlock, .AIRLOCK, vendor/nested/.git: counted, not partial.
            assert_eq!(snapshot(&l, &run)["skipped"], json!(3), "{op}: {run:#?}");
            assert_eq!(run.envelope["content"]["skipped"], json!({ "control_dir": 3 }), "{op}");
            assert_eq!(run.envelope["content"]["partial"], json!(false), "{op}");
        }
    }
    // The work tree was copied: what is not a control directory is listed.
    let status = l.query("git_status");
    let entries = status.envelope["content"]["entries"].to_string();
    assert!(entries.contains("vendor/nested/visible.txt") && entries.contains("a.txt"), "{entries}");
}

#[test]
fn a_hard_link_never_reaches_an_answer_and_the_default_refuses_it() {
    let l = Layout::new(None);
    // `outside/secret.txt` (beside the ceiling) holds the canary.
    std::fs::hard_link(l.p.path("outside/secret.txt"), l.repo().join("innocent.txt")).unwrap();
    for op in ["git_status", "git_diff"] {
        let run = l.query(op);
        run.assert_refused("policy.denied", 77);
        let message = run.envelope["error"]["message"].as_str().unwrap();
        assert!(message.contains("hard link") && message.contains("forbid-linked-files"), "{message}");
        assert!(!run.stdout.contains(CANARY) && !run.stderr.contains(CANARY), "{run:#?}");
    }
    // git_log copies no work tree: nothing linked, permitted.
    let log = l.query("git_log");
    log.assert_ok();
    assert_eq!(snapshot(&l, &log)["linked_files"], json!(0));
    l.state_free_of(CANARY);
    let journal = l.p.run(&["--config", &l.config(), "journal", "show", "--json"]);
    assert!(journal.stdout.contains("policy.denied") && !journal.stdout.contains(CANARY), "{journal:#?}");
}

#[test]
fn a_permitting_policy_gets_a_partial_answer_without_the_linked_file() {
    let l = Layout::new(Some("@id(\"permit-all\")\npermit(principal, action, resource);\n"));
    std::fs::hard_link(l.p.path("outside/secret.txt"), l.repo().join("innocent.txt")).unwrap();
    for op in ["git_status", "git_diff"] {
        let run = l.query(op);
        run.assert_ok();
        assert!(!run.stdout.contains(CANARY), "{run:#?}");
        assert!(!run.envelope["content"].to_string().contains("innocent"), "{op}: listed: {run:#?}");
        let snap = snapshot(&l, &run);
        assert_eq!((&snap["linked_files"], &snap["skipped"]), (&json!(1), &json!(2)), "{op}: {snap}");
        let content = &run.envelope["content"];
        assert_eq!(content["partial"], json!(true), "{op}");
        assert_eq!(content["partial_reasons"], json!(["skipped_entries"]), "{op}");
        assert_eq!(content["skipped"], json!({ "control_dir": 1, "hardlink": 1 }), "{op}");
    }
    let diff = l.query("git_diff");
    assert_eq!(diff.envelope["content"]["files"][0]["path"], json!("a.txt"), "the rest is answered");
    l.state_free_of(CANARY);
}

#[test]
fn the_printed_default_policy_refuses_a_linked_snapshot_like_the_built_in_one() {
    let default = {
        let out = Project::new().command(&["policy", "show-default"]).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(default.contains("airlock.default.forbid-linked-files"), "{default}");
    for layout in [Layout::new(None), Layout::new(Some(&default))] {
        let run = layout.query("git_status");
        run.assert_ok();
        assert_eq!(run.envelope["evidence"]["policy_ids"], json!(["airlock.default.permit-low-medium"]));
        std::fs::hard_link(layout.p.path("outside/secret.txt"), layout.repo().join("innocent.txt")).unwrap();
        let run = layout.query("git_status");
        run.assert_refused("policy.denied", 77);
        assert!(run.envelope["error"]["message"].as_str().unwrap().contains("forbid-linked-files"), "{run:#?}");
        assert!(!run.stdout.contains(CANARY));
    }
}

/// The state directory bind-mounted into the work tree under another
/// name (in a private mount namespace): skipped for its identity, not
/// merely as a mount crossing, and not one byte of it is answered.
#[test]
fn the_state_dir_under_another_name_is_skipped_by_identity() {
    if !is_root() {
        eprintln!("skipped: needs root for a private mount namespace");
        return;
    }
    let l = Layout::new(None);
    let repo = l.repo();
    l.query("git_status").assert_ok();
    std::fs::write(repo.join(".airlock/canary-in-state.txt"), CANARY).unwrap();
    std::fs::create_dir(repo.join("state")).unwrap();
    let state = fingerprints(&repo.join(".airlock"));
    let script = "mount --make-rprivate / && mount --bind \"$1\" \"$2\" && shift 2 && exec \"$@\"";
    let out = Command::new("unshare")
        .args(["--mount", "sh", "-c", script, "sh"])
        .arg(repo.join(".airlock"))
        .arg(repo.join("state"))
        .args([AIRLOCK, "--config", &l.config(), "query", "git_status"])
        .current_dir(l.p.root())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let envelope: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\nstderr: {stderr}"));
    let run = Run { args: vec![], code: out.status.code().unwrap_or(-1), stdout, stderr, envelope };
    run.assert_ok();
    assert_clean(&run, &state);
    assert_eq!(run.envelope["content"]["skipped"], json!({ "control_dir": 2 }), "{run:#?}");
    assert!(!run.envelope["content"]["entries"].to_string().contains("state/"), "{run:#?}");
}
