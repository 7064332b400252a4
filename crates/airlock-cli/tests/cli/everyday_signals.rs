//! Signals and retention (issue 18 §3): SIGINT/SIGTERM during `airlock run`
//! cancel the call with one JSON answer (`call.cancelled`, exit 130/143),
//! the worker killed and reaped and the staging reservation released; and
//! `[state] keep_settled` removes settled calls' directories under
//! `STATE/invocations/`, never an unsettled one, never the journal.

use crate::util::{Project, COPY_TOOL};
use std::process::Command;
use std::time::{Duration, Instant};

/// The copy tool, after sleeping `seconds` (a number no other process uses,
/// so the test can find its worker).
pub(crate) fn napping(seconds: &str) -> String {
    COPY_TOOL.replace("name = \"copy\"", "name = \"nap\"\ntimeout_seconds = 120").replace(
        "exec = [\"cp\", \"{input}\", \"{output}\"]",
        &format!("exec = [\"sh\", \"-c\", \"sleep {seconds}; cp \\\"$1\\\" \\\"$2\\\"\", \"nap\", \"{{input}}\", \"{{output}}\"]"),
    )
}

/// Pids of processes whose command line holds `sleep` and `marker`.
pub(crate) fn sleepers(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let words: Vec<String> = cmdline.split(|b| *b == 0).map(|w| String::from_utf8_lossy(w).into_owned()).collect();
        if words.first().is_some_and(|w| w.ends_with("sleep")) && words.iter().any(|w| w == marker) {
            found.push(name);
        }
    }
    found
}

/// Runs the napping tool, sends `signal` once its worker sleeps, and checks
/// the one answer, the exit status, that nothing is left behind, and the
/// journal.
fn cancel_with(signal: &str, marker: &str, status: i32) {
    let p = Project::new();
    p.write("tools/nap.clad.toml", napping(marker));
    p.write("data/in.txt", "data\n");
    let id = format!("cancel-{signal}");
    let child = p.command(&["run", "nap", "data/in.txt", "results/out.txt", "--invocation-id", &id]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while sleepers(marker).is_empty() {
        assert!(Instant::now() < deadline, "the worker never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Instant::now();
    let kill = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    assert!(sent.elapsed() < Duration::from_secs(10), "airlock took {:?} to answer", sent.elapsed());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(status), "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(stdout.lines().count(), 1, "one answer: {stdout}");
    let answer: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(answer["status"], "failed", "{answer:#}");
    assert_eq!(answer["error"]["code"], "call.cancelled", "{answer:#}");
    assert_eq!(answer["invocation_id"], id.as_str());
    assert_eq!(answer["created_files"], serde_json::json!([]));
    assert!(!p.path("results/out.txt").exists(), "nothing published");
    assert!(sleepers(marker).is_empty(), "no worker process is left");
    let status = p.run(&["staging", "status", "--json"]);
    assert_eq!(status.envelope["content"]["reservations"], serde_json::json!([]), "{status:#?}");
    assert_eq!(status.envelope["content"]["reserved_snapshots"], 0, "{status:#?}");
    let kinds = p.journal_kinds(&id);
    assert!(kinds.contains(&"WorkerFinished".to_owned()), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("InvocationFinished"), "{kinds:?}");
    let show = p.run(&["journal", "show", "--json"]);
    let records = show.envelope["content"]["records"].as_array().unwrap();
    let end = records.iter().rfind(|r| r["invocation_id"] == id.as_str()).unwrap();
    assert_eq!(end["body"]["code"], "call.cancelled", "{end:#}");
}

#[test]
fn sigint_cancels_a_running_call_with_one_answer_and_nothing_left() {
    cancel_with("INT", "73.125", 130);
}

#[test]
fn sigterm_cancels_a_running_call_with_exit_143() {
    cancel_with("TERM", "73.375", 143);
}

fn with_keep(keep: Option<&str>) -> Project {
    let state = keep.map(|k| format!("[state]\nkeep_settled = \"{k}\"\n")).unwrap_or_default();
    Project::with_config(&format!(
        "state_dir = \".airlock\"\n{state}[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n"
    ))
}

fn invocation_dirs(p: &Project) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(p.path(".airlock/invocations"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// Sets the modification time of `rel` (under the project) to `ago` ago.
fn backdate(p: &Project, rel: &str, ago: &str) {
    let status = Command::new("touch").args(["-m", "-d", ago]).arg(p.path(rel)).status().unwrap();
    assert!(status.success());
}

#[test]
fn keep_settled_zero_removes_settled_calls_and_keeps_unsettled_ones() {
    let p = with_keep(Some("0s"));
    p.write("data/in.txt", "x");
    p.run(&["run", "copy", "data/in.txt", "results/a.txt", "--invocation-id", "done-1"]).assert_ok();
    assert_eq!(invocation_dirs(&p), ["done-1"]);
    // The next call's start removes the settled one, then refuses.
    p.run(&["run", "copy", "data/missing.txt", "results/b.txt", "--invocation-id", "refused-1"])
        .assert_refused("input.missing", 66);
    assert_eq!(invocation_dirs(&p), ["refused-1"]);
    // A call kept for a later dispatch is pending: never removed.
    p.run(&["prepare", "copy", "data/in.txt", "results/c.txt", "--invocation-id", "pending-1"]).assert_ok();
    let gc = p.run(&["staging", "gc"]);
    gc.assert_ok();
    assert_eq!(gc.envelope["content"]["settled_invocations_removed"], 0, "{gc:#?}");
    assert_eq!(invocation_dirs(&p), ["pending-1"]);
    // Once dispatched it has settled.
    p.run(&["dispatch", "pending-1"]).assert_ok();
    assert_eq!(invocation_dirs(&p), ["pending-1"]);
    let gc = p.run(&["staging", "gc"]);
    assert_eq!(gc.envelope["content"]["settled_invocations_removed"], 1, "{gc:#?}");
    assert_eq!(invocation_dirs(&p), Vec::<String>::new());
    // The journal is untouched.
    for id in ["done-1", "refused-1", "pending-1"] {
        assert!(!p.journal_kinds(id).is_empty(), "{id}");
    }
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn settled_calls_go_after_keep_settled_and_unsettled_ones_stay() {
    let p = with_keep(None); // the default, 7 days
    p.write("data/in.txt", "x");
    p.run(&["run", "copy", "data/in.txt", "results/a.txt", "--invocation-id", "old-1"]).assert_ok();
    p.run(&["run", "copy", "data/in.txt", "results/b.txt", "--invocation-id", "new-1"]).assert_ok();
    p.run(&["prepare", "copy", "data/in.txt", "results/c.txt", "--invocation-id", "waiting-1"]).assert_ok();
    backdate(&p, ".airlock/invocations/old-1", "8 days ago");
    backdate(&p, ".airlock/invocations/waiting-1", "30 days ago");
    backdate(&p, ".airlock/invocations/new-1", "6 days ago");
    p.run(&["staging", "gc"]).assert_ok();
    assert_eq!(invocation_dirs(&p), ["new-1", "waiting-1"]);
    // At the start of a call, once the last sweep is an hour old.
    backdate(&p, ".airlock/invocations/new-1", "8 days ago");
    p.run(&["run", "copy", "data/in.txt", "results/d.txt", "--invocation-id", "next-1"]).assert_ok();
    assert_eq!(invocation_dirs(&p), ["new-1", "next-1", "waiting-1"], "swept at most once an hour");
    backdate(&p, ".airlock/invocations/.swept", "2 hours ago");
    p.run(&["run", "copy", "data/in.txt", "results/e.txt", "--invocation-id", "next-2"]).assert_ok();
    assert_eq!(invocation_dirs(&p), ["next-1", "next-2", "waiting-1"]);
}

/// Calls of one manifest name one shared copy of its text (a hard link:
/// no inode each); the copy goes once retention has removed every call
/// that names it, and the next call makes it again.
#[test]
fn calls_of_one_manifest_share_one_copy_of_its_text_until_the_last_is_swept() {
    use std::os::unix::fs::MetadataExt;
    let p = with_keep(None);
    p.write("data/in.txt", "x");
    for id in ["one-1", "one-2"] {
        p.run(&["run", "copy", "data/in.txt", &format!("results/{id}.txt"), "--invocation-id", id]).assert_ok();
    }
    let shared = crate::runkit::names(&p.path(".airlock/invocations/.manifests"));
    assert_eq!(shared.len(), 1, "{shared:?}");
    let copy = p.path(&format!(".airlock/invocations/.manifests/{}", shared[0]));
    let text = std::fs::read(&copy).unwrap();
    assert_eq!(shared[0], crate::util::sha256_hex(&text));
    assert_eq!(text, std::fs::read(p.path("tools/copy.clad.toml")).unwrap());
    for id in ["one-1", "one-2"] {
        let named = std::fs::metadata(p.path(&format!(".airlock/invocations/{id}/manifest.clad.toml"))).unwrap();
        assert_eq!(named.ino(), std::fs::metadata(&copy).unwrap().ino(), "{id}");
    }
    assert_eq!(std::fs::metadata(&copy).unwrap().nlink(), 3);
    backdate(&p, ".airlock/invocations/one-1", "8 days ago");
    p.run(&["staging", "gc"]).assert_ok();
    assert_eq!(std::fs::metadata(&copy).unwrap().nlink(), 2, "one call still names it");
    backdate(&p, ".airlock/invocations/one-2", "8 days ago");
    p.run(&["staging", "gc"]).assert_ok();
    assert_eq!(invocation_dirs(&p), Vec::<String>::new());
    assert!(!copy.exists(), "a copy no call names outlived the sweep");
    p.run(&["run", "copy", "data/in.txt", "results/again.txt", "--invocation-id", "again-1"]).assert_ok();
    assert_eq!(std::fs::read(p.path(".airlock/invocations/again-1/manifest.clad.toml")).unwrap(), text);
    assert_eq!(std::fs::metadata(&copy).unwrap().nlink(), 2);
}

#[test]
fn keep_settled_must_be_a_duration() {
    for bad in ["7", "7w", "1.5h", "forever"] {
        let p = with_keep(Some(bad));
        let run = p.run(&["staging", "gc"]);
        assert_eq!((run.status(), run.reason(), run.code), ("error", "config.invalid", 78), "{run:#?}");
        assert!(run.envelope["error"]["message"].as_str().unwrap().contains("keep_settled"), "{run:#?}");
    }
}
