//! The shared staging pool on the shipping binary: admission across
//! processes, refusal with `staging.exhausted` (exit 75) before anything is
//! copied or started, durable reservations of prepared calls, release that
//! cannot happen twice, and reaping after SIGKILL that never follows a link.

use crate::runkit::*;
use crate::util::{Project, Run, CANARY};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

const ROOTS: &str = "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n";

fn pool_project(staging: &str) -> Project {
    Project::with_config(&format!("{ROOTS}[staging]\n{staging}\n"))
}

/// Every journal record, parsed.
fn journal(p: &Project) -> Vec<Value> {
    let text = std::fs::read_to_string(p.path(".airlock/journal.jsonl")).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Ids for which a worker was started, from the signed journal.
fn started_ids(p: &Project) -> BTreeSet<String> {
    journal(p)
        .into_iter()
        .filter(|r| r["kind"] == "WorkerStarted")
        .filter_map(|r| r["invocation_id"].as_str().map(str::to_owned))
        .collect()
}

fn status(p: &Project) -> Value {
    let run = p.run(&["staging", "status", "--json"]);
    run.assert_ok();
    run.envelope["content"].clone()
}

#[test]
fn twenty_concurrent_runs_against_a_pool_of_four_never_hold_more_than_four() {
    const CALLERS: usize = 20;
    let p = Arc::new(pool_project("max_snapshots = 4"));
    p.tool("hold", &sh_tool("hold", "", IO_ARGS, r#"sleep 1.5; cat "$1" > "$2""#, IO_FS));
    p.write("data/in.txt", "held\n");

    // A watcher counts reservation records as often as it can.
    let stop = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (p, stop, most) = (p.clone(), stop.clone(), most.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = names(&p.path(".airlock/staging/leases")).iter().filter(|n| !n.starts_with(".tmp-")).count();
                most.fetch_max(n, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let barrier = Arc::new(Barrier::new(CALLERS));
    let threads: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (p, barrier) = (p.clone(), barrier.clone());
            std::thread::spawn(move || {
                let (out, id) = (format!("results/out-{i:02}.txt"), format!("call-{i:02}"));
                barrier.wait();
                p.run(&["run", "hold", "data/in.txt", &out, "--invocation-id", &id])
            })
        })
        .collect();
    let runs: Vec<Run> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();

    let started = started_ids(&p);
    let (mut ok, mut exhausted) = (0, 0);
    for (i, run) in runs.iter().enumerate() {
        let id = format!("call-{i:02}");
        if run.status() == "ok" {
            ok += 1;
            assert!(started.contains(&id), "{id} ran without a WorkerStarted record");
            continue;
        }
        run.assert_refused("staging.exhausted", 75);
        exhausted += 1;
        assert!(run.envelope.get("exit_code").is_none(), "{run:#?}");
        assert!(!started.contains(&id), "{id} was refused but a worker started");
        assert_absent_path(&p, &format!("results/out-{i:02}.txt"));
        assert!(run.envelope["error"]["message"].as_str().unwrap().contains("retry later"), "{run:#?}");
    }
    let most = most.load(Ordering::Relaxed);
    eprintln!("{CALLERS} callers, pool of 4: {ok} ran, {exhausted} refused; at most {most} reservations seen");
    assert!(most <= 4, "{most} reservations were held at once");
    assert!(ok >= 1 && exhausted >= 1, "ok {ok}, exhausted {exhausted}");
    assert_eq!(started.len(), ok, "workers started: {started:?}");
    assert_staging_empty(&p);
    assert_eq!(status(&p)["reserved_bytes"], 0);
}

#[test]
fn a_call_larger_than_the_whole_pool_is_refused_before_anything_is_copied() {
    // The output's bound alone (8 MiB by default) is more than the pool: it
    // could never be admitted, so it is not "retry later" (issue 17).
    let p = pool_project("max_bytes = 100000");
    p.write("data/in.txt", CANARY);
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--invocation-id", "big-1"]);
    run.assert_refused("staging.pool_too_small", 77);
    let message = run.envelope["error"]["message"].as_str().unwrap();
    assert!(message.contains("100000") && message.contains("[staging] max_bytes"), "{message}");
    assert!(started_ids(&p).is_empty());
    assert_staging_empty(&p);
    p.assert_state_free_of(CANARY);
    let refused = journal(&p).into_iter().find(|r| r["kind"] == "InvocationRefused").unwrap();
    assert_eq!(refused["body"]["code"], "staging.pool_too_small", "{refused:#}");

    // With room for it, the same call runs.
    let roomy = pool_project("max_bytes = 9000000");
    roomy.write("data/in.txt", "fits\n");
    roomy.run(&["run", "copy", "data/in.txt", "results/out.txt"]).assert_ok();
}

fn approval_project() -> Project {
    approval_project_with_approver().0
}

fn approval_project_with_approver() -> (Project, crate::approvers::Approver) {
    let (p, alice) = crate::approvers::approved_project(&format!("{ROOTS}[staging]\nmax_snapshots = 2\n"));
    let tool = sh_tool("gated", "risk_tier = \"high\"", IO_ARGS, r#"cat "$1" > "$2""#, IO_FS);
    p.tool("gated", &tool);
    p.write("data/in.txt", "gated content\n");
    (p, alice)
}

#[test]
fn a_prepared_call_keeps_a_durable_reservation_that_its_dispatch_releases() {
    let (p, alice) = approval_project_with_approver();
    let first = p.run(&["run", "gated", "data/in.txt", "results/out.txt", "--invocation-id", "g-1"]);
    first.assert_refused("approval.required", 77);
    let s = status(&p);
    // A waiting call is charged to the pending budget, not to the running pool.
    assert_eq!((s["reserved_snapshots"].clone(), s["pending_reservations"].clone()), (json!(0), json!(1)), "{s:#}");
    assert_eq!(s["reservations"][0]["invocation_id"], "g-1");
    assert_eq!(s["reservations"][0]["durable"], true, "{s:#}");
    assert_eq!(s["reservations"][0]["owner"], Value::Null, "{s:#}");
    // The process that prepared it is gone; gc keeps a durable reservation.
    p.run(&["staging", "gc"]).assert_ok();
    assert_eq!(status(&p)["pending_reservations"], 1);
    let text = p.on_terminal(&["staging", "status"]);
    assert!(text.contains("0 of 2 reservations") && text.contains("1 waiting") && text.contains("durable"), "{text}");

    let digest = first.envelope["evidence"]["descriptor_sha256"].as_str().unwrap().to_owned();
    alice.approve(&p, &digest, &[]).assert_ok();
    p.run(&["dispatch", "g-1"]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "gated content\n");
    assert_staging_empty(&p);
    let s = status(&p);
    assert_eq!((s["reserved_bytes"].clone(), s["pending_bytes"].clone()), (json!(0), json!(0)), "{s:#}");
}

#[test]
fn a_reservation_cannot_be_released_twice() {
    let p = approval_project();
    p.run(&["run", "gated", "data/in.txt", "results/out.txt", "--invocation-id", "g-2"])
        .assert_refused("approval.required", 77);
    let before = status(&p);
    let charged = before["reservations"][0]["charged"].as_u64().unwrap();
    assert_eq!(before["pending_bytes"], charged, "{before:#}");
    assert!(charged > 8 * 1024 * 1024, "the output's bound is charged: {before:#}");

    let release = p.run(&["staging", "release", "g-2"]);
    release.assert_ok();
    assert_eq!(release.envelope["content"]["bytes"], charged);
    assert_staging_empty(&p);
    p.run(&["staging", "release", "g-2"]).assert_refused("staging.not_reserved", 66);
    assert_eq!(status(&p)["pending_bytes"], 0);
    // Its snapshots are gone, so the call can no longer be dispatched.
    p.run(&["dispatch", "g-2"]).assert_refused("staging.not_reserved", 66);
    p.run(&["staging", "release", "../x"]).assert_refused("invocation.id_invalid", 64);
}

#[test]
fn a_live_callers_reservation_cannot_be_released_by_an_operator() {
    let p = pool_project("max_snapshots = 4");
    let m = marker(20);
    let _guard = KillOnDrop(m.clone());
    let args = [("marker", "string"), ("output", "path")];
    let fs = "[filesystem]\ncreate = [\"{output}\"]\n";
    p.tool("nap", &sh_tool("nap", "timeout_seconds = 60", &args, r#"sleep "$1""#, fs));
    let mut child = p.command(&["run", "nap", &m, "results/x.txt", "--invocation-id", "live-1"]).spawn().unwrap();
    assert!(wait_until(Duration::from_secs(10), || procs_with(&m).iter().any(|(_, l)| l.starts_with("sleep "))));
    p.run(&["staging", "release", "live-1"]).assert_refused("staging.busy", 75);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(wait_until(Duration::from_secs(5), || procs_with(&m).is_empty()));
    // Its holder is dead now: the operator may release it, once.
    p.run(&["staging", "release", "live-1"]).assert_ok();
    assert_staging_empty(&p);
}

/// The dead caller's data directory is replaced by a symlink to a directory
/// outside the pool: gc unlinks the link and leaves the target untouched.
#[test]
fn gc_never_follows_a_staging_directory_swapped_for_a_symlink() {
    let p = pool_project("max_snapshots = 4");
    let m = marker(20);
    let _guard = KillOnDrop(m.clone());
    let args = [("marker", "string"), ("output", "path")];
    let fs = "[filesystem]\ncreate = [\"{output}\"]\n";
    p.tool("nap", &sh_tool("nap", "timeout_seconds = 60", &args, r#"sleep "$1""#, fs));
    p.write("outside/keep/one.txt", CANARY);
    p.write("outside/keep/deeper/two.txt", CANARY);
    let mut child = p.command(&["run", "nap", &m, "results/x.txt", "--invocation-id", "dead-1"]).spawn().unwrap();
    assert!(wait_until(Duration::from_secs(10), || procs_with(&m).iter().any(|(_, l)| l.starts_with("sleep "))));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(wait_until(Duration::from_secs(5), || procs_with(&m).is_empty()));

    let data = p.path(".airlock/staging/data/dead-1");
    std::fs::rename(&data, p.path("outside/moved-away")).unwrap();
    std::os::unix::fs::symlink(p.path("outside/keep"), &data).unwrap();
    let gc = p.run(&["staging", "gc"]);
    gc.assert_ok();
    assert_eq!(gc.envelope["content"]["released"], json!(["dead-1"]), "{gc:#?}");
    assert_staging_empty(&p);
    assert_eq!(std::fs::read_to_string(p.path("outside/keep/one.txt")).unwrap(), CANARY);
    assert_eq!(std::fs::read_to_string(p.path("outside/keep/deeper/two.txt")).unwrap(), CANARY);
}

/// 500 calls from 6 concurrent callers; about one in four is SIGKILLed at
/// a random moment. After one `gc`: nothing reserved, no staged file, no
/// process of any call.
#[test]
fn sigkill_of_random_callers_under_load_then_one_gc_leaves_nothing() {
    const CALLS: usize = 500;
    const LANES: usize = 6;
    let p = Arc::new(pool_project("max_snapshots = 4"));
    let m = marker(0);
    let _guard = KillOnDrop(m.clone());
    let args = [("input", "path"), ("marker", "string")];
    let fs = "[filesystem]\nread = [\"{input}\"]\n";
    p.tool("load", &sh_tool("load", "", &args, r#"wc -c < "$1"; : "$2""#, fs));
    p.write("data/in.txt", "x".repeat(10_000));
    let next = Arc::new(AtomicUsize::new(0));
    let tally = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<String, usize>::new()));
    let why = Arc::new(std::sync::Mutex::new(None::<String>));
    let lanes: Vec<_> = (0..LANES)
        .map(|lane| {
            let (p, next, tally, m, why) = (p.clone(), next.clone(), tally.clone(), m.clone(), why.clone());
            std::thread::spawn(move || {
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (lane as u64 + 1);
                while next.fetch_add(1, Ordering::Relaxed) < CALLS {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let mut cmd = p.command(&["run", "load", "data/in.txt", &m]);
                    cmd.stdout(std::process::Stdio::null());
                    let mut child = cmd.spawn().unwrap();
                    if seed.is_multiple_of(4) {
                        std::thread::sleep(Duration::from_micros(seed % 60_000));
                        let _ = child.kill();
                    }
                    let out = child.wait_with_output().unwrap();
                    let outcome = match out.status.code() {
                        None => "killed".to_owned(),
                        Some(c) => format!("exit {c}"),
                    };
                    if !["killed", "exit 0", "exit 75"].contains(&outcome.as_str()) {
                        // The first unexpected answer, for the failure message.
                        why.lock().unwrap().get_or_insert_with(|| String::from_utf8_lossy(&out.stderr).into_owned());
                    }
                    *tally.lock().unwrap().entry(outcome).or_default() += 1;
                }
            })
        })
        .collect();
    for lane in lanes {
        lane.join().unwrap();
    }
    let tally = tally.lock().unwrap().clone();
    eprintln!("{CALLS} calls: {tally:?}");
    for outcome in tally.keys() {
        assert!(
            ["killed", "exit 0", "exit 75"].contains(&outcome.as_str()),
            "unexpected outcome {outcome}: {tally:?}; the first said: {:?}",
            why.lock().unwrap()
        );
    }
    assert!(tally.get("killed").copied().unwrap_or(0) > 50, "{tally:?}");
    assert!(wait_until(Duration::from_secs(10), || procs_with(&m).is_empty()), "{:?}", procs_with(&m));

    let gc = p.run(&["staging", "gc"]);
    gc.assert_ok();
    let s = status(&p);
    assert_eq!(s["reserved_bytes"], 0, "{s:#}\n{gc:#?}");
    assert_eq!(s["reserved_snapshots"], 0, "{s:#}");
    assert_eq!(s["orphans"], json!([]), "{s:#}");
    assert_staging_empty(&p);
    assert_eq!(procs_with(&m), vec![]);
    assert!(procs_with(&p.root().display().to_string()).is_empty(), "a process still uses the project");
}
