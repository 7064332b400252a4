//! `airlock mcp` with warm sandboxes (`[sandbox] warm_pool`, default 2):
//! its native calls start in skeletons built before them, say so in
//! `evidence.limits.warm_sandbox`, publish the same bytes as a cold call,
//! and leave nothing behind when the server is SIGKILLed mid-call. `airlock
//! run` builds its one skeleton while it prepares, with the same guarantees.

use crate::mcpkit::McpSession;
use crate::runkit::{children_of, marker, procs_with, sh_tool, wait_until, KillOnDrop};
use crate::util::{sha256_hex, Project};
use serde_json::{json, Value};
use std::time::Duration;

const NO_POOL: &str = r#"
state_dir = ".airlock"
[filesystem]
roots = ["./data:data:ro", "./results:results:rw"]
[sandbox]
warm_pool = 0
"#;

/// Copies until a call starts warm (the pool fills in the background after
/// the server starts); returns that call's result.
fn a_warm_copy(s: &mut McpSession, p: &Project) -> Value {
    for n in 0..50 {
        let out = format!("results/warm-{n}.txt");
        let r = s.call("copy", json!({"input": "data/in.txt", "output": out}));
        assert_eq!(r["isError"], false, "{r}");
        if r["structuredContent"]["evidence"]["limits"]["warm_sandbox"] == true {
            assert_eq!(std::fs::read(p.path(&out)).unwrap(), b"warm bytes\n");
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no call started in a warm sandbox");
}

#[test]
fn a_call_starts_warm_and_publishes_what_a_cold_call_does() {
    let p = Project::new();
    p.write("data/in.txt", "warm bytes\n");
    let mut s = McpSession::start(&p);
    let r = a_warm_copy(&mut s, &p);
    let sc = &r["structuredContent"];
    assert_eq!(sc["created_files"][0]["sha256"], format!("sha256:{}", sha256_hex(b"warm bytes\n")), "{sc}");
    // The same evidence a cold call gives, and the marker.
    let limits = &sc["evidence"]["limits"];
    assert_eq!((limits["ipc"].as_str(), limits["memory"].as_str()), (Some("seccomp-denied"), Some("rlimit")), "{sc}");
    drop(s);
    p.run(&["journal", "verify"]).assert_ok();

    // warm_pool = 0: every call is cold, and the evidence does not say warm.
    let cold = Project::with_config(NO_POOL);
    cold.write("data/in.txt", "warm bytes\n");
    let mut s = McpSession::start(&cold);
    for n in 0..3 {
        let r = s.call("copy", json!({"input": "data/in.txt", "output": format!("results/cold-{n}.txt")}));
        assert_eq!(r["isError"], false, "{r}");
        assert!(r["structuredContent"]["evidence"]["limits"].get("warm_sandbox").is_none(), "{r}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_pool_size_out_of_range_is_refused() {
    let p = Project::with_config(&NO_POOL.replace("warm_pool = 0", "warm_pool = 17"));
    let r = p.run(&["doctor"]);
    assert!(r.stdout.contains("warm_pool") || r.stderr.contains("warm_pool"), "{r:#?}");
    assert_eq!(r.code, 78, "{r:#?}");
}

#[test]
fn a_run_starts_in_the_sandbox_it_built_while_preparing() {
    let p = Project::new();
    p.write("data/in.txt", "warm bytes\n");
    let run = p.run(&["run", "copy", "data/in.txt", "results/warm.txt"]);
    run.assert_ok();
    assert_eq!(run.envelope["evidence"]["limits"]["warm_sandbox"], true, "{run:#?}");
    assert_eq!(std::fs::read(p.path("results/warm.txt")).unwrap(), b"warm bytes\n");
    // A refused call returns its refusal (its skeleton is discarded).
    p.run(&["run", "copy", "data/missing.txt", "results/never.txt"]).assert_refused("input.missing", 66);
    p.run(&["journal", "verify"]).assert_ok();
    let doctor = p.run(&["doctor"]);
    let said = doctor.envelope["content"]["host"]["warm_sandboxes"]["detail"].as_str().unwrap_or_default().to_owned();
    assert!(said.contains("airlock run and Git queries build their sandbox"), "{said}");

    let cold = Project::with_config(NO_POOL);
    cold.write("data/in.txt", "cold bytes\n");
    let run = cold.run(&["run", "copy", "data/in.txt", "results/cold.txt"]);
    run.assert_ok();
    assert!(run.envelope["evidence"]["limits"].get("warm_sandbox").is_none(), "{run:#?}");
}

#[test]
fn killing_airlock_run_mid_call_leaves_no_sandbox() {
    let p = Project::new();
    let mark = marker(32);
    let _guard = KillOnDrop(mark.clone());
    p.tool("slow", &sh_tool("slow", "timeout_seconds = 60", &[], &format!("sleep {mark}"), ""));
    let mut child = p.command(&["run", "slow"]).spawn().unwrap();
    assert!(wait_until(Duration::from_secs(10), || !procs_with(&mark).is_empty()), "the slow worker never started");
    kill_and_assert_no_sandbox_left(&mut child, &mark, 1);
}

/// SIGKILLs `airlock`, which holds a call whose worker's command line
/// holds `mark`, after checking it has at least `sandboxes` sandbox inits
/// with their PID 1s; then every one of them, and the worker, must be gone
/// within 5 s.
fn kill_and_assert_no_sandbox_left(airlock: &mut std::process::Child, mark: &str, sandboxes: usize) {
    let inits = children_of(airlock.id());
    let pid1s: Vec<u32> = inits.iter().flat_map(|p| children_of(*p)).collect();
    assert!(inits.len() >= sandboxes && pid1s.len() >= sandboxes, "inits {inits:?}, PID 1s {pid1s:?}");
    airlock.kill().unwrap();
    airlock.wait().unwrap();
    let left = || inits.iter().chain(&pid1s).copied().filter(|p| alive(*p)).collect::<Vec<_>>();
    assert!(
        wait_until(Duration::from_secs(5), || left().is_empty() && procs_with(mark).is_empty()),
        "outlived airlock: sandboxes {:?}, workers {:?}",
        left(),
        procs_with(mark)
    );
}

fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    matches!(stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next()), Some(s) if s != 'Z' && s != 'X')
}

#[test]
fn killing_airlock_mcp_mid_warm_call_leaves_no_sandbox() {
    let p = Project::new();
    p.write("data/in.txt", "warm bytes\n");
    let mark = marker(31);
    let _guard = KillOnDrop(mark.clone());
    p.tool("slow", &sh_tool("slow", "timeout_seconds = 60", &[], &format!("sleep {mark}"), ""));
    let mut s = McpSession::start(&p);
    a_warm_copy(&mut s, &p);
    // Give the pool time to refill, so the slow call is warm too.
    std::thread::sleep(Duration::from_millis(500));
    s.send_request("tools/call", json!({"name": "slow", "arguments": {}}));
    assert!(wait_until(Duration::from_secs(10), || !procs_with(&mark).is_empty()), "the slow worker never started");
    // The server's sandbox inits: the slow call's and the idle skeletons'.
    kill_and_assert_no_sandbox_left(&mut s.child, &mark, 2);
}
