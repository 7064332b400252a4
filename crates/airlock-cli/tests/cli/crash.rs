//! SIGKILL of `airlock` in the middle of a run: the workers die with their
//! caller, nothing is published, and the staging the dead caller left is
//! reaped by `airlock staging gc` or by the next call's start-up cleanup.

use crate::runkit::*;
use crate::util::Project;
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A project whose `nap` tool writes a partial output, then sleeps for
/// its marker argument's seconds (timeout 60 s).
fn nap_project() -> Project {
    nap_project_with(None)
}

/// [`nap_project`] with `extra` appended to the configuration.
fn nap_project_with(extra: Option<&str>) -> Project {
    let base = "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n";
    let p = Project::with_config(&format!("{base}{}", extra.unwrap_or("")));
    p.write("data/in.txt", "quick\n");
    let args = [("marker", "string"), ("output", "path")];
    let script = r#"echo partial > "$2"; sleep "$1""#;
    let fs = "[filesystem]\ncreate = [\"{output}\"]\n";
    p.tool("nap", &sh_tool("nap", "timeout_seconds = 60", &args, script, fs));
    p.tool("shcopy", &sh_tool("shcopy", "", IO_ARGS, r#"cat "$1" > "$2""#, IO_FS));
    p
}

/// Starts `nap MARKER results/crash.txt --invocation-id ID` through `cmd`
/// and waits (at most 10 s) until the tool's `sleep MARKER` runs.
fn start_nap(mut cmd: Command, m: &str) -> Child {
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn airlock");
    let started =
        wait_until(Duration::from_secs(10), || procs_with(m).iter().any(|(_, line)| line.starts_with("sleep ")));
    if !started {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the tool never started: {:?}", procs_with(m));
    }
    child
}

/// The staging area holds one directory, and it belongs to invocation `id`
/// (its name may carry more, such as the owner's identity).
#[track_caller]
fn assert_staging_holds_only(p: &Project, id: &str) {
    let entries = staged_entries(p.root());
    assert_eq!(entries, vec![format!("leases/{id}"), format!("data/{id}")], "staging should hold {id}'s only");
}

fn sigkill(child: &mut Child) {
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{status:?}");
}

/// The whole crash story, with `airlock` command lines built by `cmd` and
/// run by `run`: start a call, SIGKILL airlock, no process of the call
/// survives, `staging status` shows the dead call, `staging gc` reaps it,
/// and nothing was published.
fn crash_story(p: &Project, cmd: &dyn Fn(&[&str]) -> Command, run: &dyn Fn(&[&str]) -> crate::util::Run) {
    let m = marker(20);
    let _guard = KillOnDrop(m.clone());
    let mut child = start_nap(cmd(&["run", "nap", &m, "results/crash.txt", "--invocation-id", "crash-1"]), &m);
    assert_staging_holds_only(p, "crash-1");
    sigkill(&mut child);

    // The workers die with their caller.
    let gone = wait_until(Duration::from_secs(5), || procs_with(&m).is_empty());
    assert!(gone, "5 s after SIGKILL of airlock, its call still runs: {:?}", procs_with(&m));

    let status = run(&["staging", "status", "--json"]);
    status.assert_ok();
    let calls = status.envelope["content"]["reservations"].as_array().unwrap().clone();
    assert_eq!(calls.len(), 1, "{status:#?}");
    assert_eq!(calls[0]["invocation_id"], "crash-1");
    assert_eq!(calls[0]["live"], false, "{status:#?}");
    assert_eq!(calls[0]["owner"]["pid"], child.id(), "{status:#?}");

    let gc = run(&["staging", "gc"]);
    gc.assert_ok();
    assert_eq!(gc.envelope["content"]["released"], json!(["crash-1"]), "{gc:#?}");
    assert_staging_empty(p);
    let status = run(&["staging", "status", "--json"]);
    assert_eq!(status.envelope["content"]["reservations"], json!([]), "{status:#?}");
    assert_eq!(status.envelope["content"]["reserved_bytes"], 0, "{status:#?}");

    assert_absent_path(p, "results/crash.txt");
    assert_no_candidates(p, "results");
    assert_eq!(procs_with(&m), vec![], "a process of the killed call remains");
}

/// The workers of a SIGKILLed `airlock` die with it (run as the test's
/// own user, root in CI).
#[test]
fn sigkill_of_airlock_leaves_nothing_behind() {
    let p = nap_project();
    crash_story(&p, &|args| p.command(args), &|args| p.run(args));
}

/// The same story for a call that starts cold (no sandbox is built ahead of
/// it): what kills its workers is the parent-death signal its init arms
/// itself, from its `argv`, before anything else (it is started with
/// `posix_spawn`, which runs no code of ours between fork and exec).
#[test]
fn sigkill_of_airlock_during_a_cold_call_leaves_nothing_behind() {
    let p = nap_project_with(Some("[sandbox]\nwarm_pool = 0\n"));
    crash_story(&p, &|args| p.command(args), &|args| p.run(args));
}

/// The same story for an unprivileged caller (uid 65534 via setpriv).
#[test]
fn sigkill_of_an_unprivileged_airlock_leaves_nothing_behind() {
    let nobody = match Nobody::new() {
        Ok(n) => n,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let p = nap_project();
    nobody.adopt(&p);
    crash_story(&p, &|args| nobody.command(p.root(), args), &|args| nobody.run(p.root(), args));
}

/// After a SIGKILL, `staging gc` removes exactly the dead call's staging and
/// nothing of it is published (whatever became of its workers, which the
/// guard kills at the end).
#[test]
fn after_sigkill_staging_gc_reaps_the_dead_call_and_nothing_is_published() {
    let p = nap_project();
    let m = marker(20);
    let _guard = KillOnDrop(m.clone());
    let mut child = start_nap(p.command(&["run", "nap", &m, "results/crash.txt", "--invocation-id", "crash-1"]), &m);
    let status = p.run(&["staging", "status", "--json"]);
    assert_eq!(status.envelope["content"]["reservations"][0]["live"], true, "a running call is live: {status:#?}");
    // A live call's staging is never reaped.
    let gc = p.run(&["staging", "gc"]);
    assert_eq!(gc.envelope["content"]["released"], json!([]), "{gc:#?}");
    assert_staging_holds_only(&p, "crash-1");

    sigkill(&mut child);
    let status = p.run(&["staging", "status", "--json"]);
    status.assert_ok();
    assert_eq!(status.envelope["content"]["reservations"][0]["live"], false, "{status:#?}");
    let gc = p.run(&["staging", "gc"]);
    gc.assert_ok();
    assert_eq!(gc.envelope["content"]["released"], json!(["crash-1"]), "{gc:#?}");
    assert_staging_empty(&p);
    assert_absent_path(&p, "results/crash.txt");
    assert_no_candidates(&p, "results");
    // The id stays used.
    let again = p.run(&["run", "nap", "1", "results/crash.txt", "--invocation-id", "crash-1"]);
    again.assert_refused("invocation.duplicate", 77);
}

/// A later call of another tool reaps the stale staging by itself, and
/// publishes its own output.
#[test]
fn a_later_run_reaps_the_stale_staging_of_a_killed_call() {
    let p = nap_project();
    let m = marker(20);
    let _guard = KillOnDrop(m.clone());
    let mut child = start_nap(p.command(&["run", "nap", &m, "results/crash.txt", "--invocation-id", "crash-1"]), &m);
    sigkill(&mut child);
    assert_staging_holds_only(&p, "crash-1");

    let run = p.run(&["run", "shcopy", "data/in.txt", "results/next.txt", "--invocation-id", "next-1"]);
    run.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/next.txt")).unwrap(), "quick\n");
    assert_staging_empty(&p);
    assert_absent_path(&p, "results/crash.txt");
    assert_no_candidates(&p, "results");
}

/// A `nap MARKER` call `id` held just before its `WorkerStarted` (a debug
/// build's pause point, `pause_ms`), observed while held: the child, its
/// sandbox's processes (whether init, PID 1 and the worker all came up),
/// and the tool's `sleep` processes (none, unless the tool ran early).
struct Held {
    child: Child,
    built: bool,
    sandbox: Vec<u32>,
    sleeping: Vec<(u32, String)>,
}

fn hold_before_worker_started(p: &Project, m: &str, id: &str, pause_ms: u32) -> Held {
    let mut cmd = p.command(&["run", "nap", m, "results/gate.txt", "--invocation-id", id]);
    cmd.env("AIRLOCK_TEST_PAUSE_AT", format!("before_worker_started:{pause_ms}"));
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn airlock");
    let built = wait_until(Duration::from_secs(10), || descendants_of(child.id()).len() >= 3);
    // Time enough for a tool that ran early to show.
    std::thread::sleep(Duration::from_millis(400));
    let sandbox = descendants_of(child.id());
    let sleeping = procs_with(m).into_iter().filter(|(_, line)| line.starts_with("sleep ")).collect();
    Held { child, built, sandbox, sleeping }
}

/// The sandbox is built while `WorkerStarted` is synced, but the tool
/// executes only once that record is durable: held just before the record,
/// the call has built its sandbox (init, PID 1 and the confined worker
/// exist), has no `WorkerStarted`, and its tool has not run (no `sleep`);
/// released, it runs and publishes as usual.
#[test]
fn the_tool_executes_only_after_its_worker_started_record() {
    let p = nap_project();
    let m = marker(1);
    let _guard = KillOnDrop(m.clone());
    let held = hold_before_worker_started(&p, &m, "gate-1", 2000);
    let kinds = p.journal_kinds("gate-1");
    let out = held.child.wait_with_output().expect("airlock ends");
    assert!(held.built, "no sandbox was built while the record was held back: {:?}", held.sandbox);
    assert!(!kinds.iter().any(|k| k == "WorkerStarted"), "{kinds:?}");
    assert_eq!(held.sleeping, vec![], "the tool ran before its WorkerStarted was durable");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(p.path("results/gate.txt")).unwrap(), "partial\n");
    let kinds = p.journal_kinds("gate-1");
    assert!(kinds.iter().any(|k| k == "WorkerStarted"), "{kinds:?}");
}

/// SIGKILL of airlock while its worker waits at the start gate (its
/// sandbox built, `WorkerStarted` not yet journaled): the gate closes with
/// the caller, so the tool never executes (no `sleep`, then no process of
/// the call at all), and the journal holds no start.
#[test]
fn sigkill_before_worker_started_runs_nothing() {
    let p = nap_project();
    let m = marker(20);
    let _guard = KillOnDrop(m.clone());
    let mut held = hold_before_worker_started(&p, &m, "gate-2", 5000);
    sigkill(&mut held.child);
    let gone = wait_until(Duration::from_secs(5), || {
        held.sandbox.iter().all(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    });
    assert!(held.built, "no sandbox was built while the record was held back");
    assert!(gone, "the sandbox outlived its caller: {:?}", held.sandbox);
    assert_eq!(held.sleeping, vec![], "the tool ran before its WorkerStarted was durable");
    assert_eq!(procs_with(&m), vec![], "a process of the call remains");
    let kinds = p.journal_kinds("gate-2");
    assert!(!kinds.iter().any(|k| k == "WorkerStarted"), "{kinds:?}");
    assert_absent_path(&p, "results/gate.txt");
}
