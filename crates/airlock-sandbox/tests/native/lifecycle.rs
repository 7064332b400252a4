//! Deadlines, bounds, kills and errors.
use std::time::{Duration, Instant};

use airlock_sandbox::{ExitStatusKind, SandboxErrorKind, Tier, Worker, WorkerSpec};

use crate::util::*;

#[test]
fn a_timeout_kills_everything() {
    let m = marker("timeout");
    let mut spec = sh("sh -c 'sleep 100' \"$1\" & sleep 100", &[&m]);
    spec.timeout = Duration::from_secs(1);
    let t = Instant::now();
    let o = run(spec);
    assert!(o.timed_out, "{}", show(&o));
    assert_eq!(o.exit, ExitStatusKind::Signaled(9));
    assert!(o.cleanup_confirmed, "{}", show(&o));
    assert_eq!(o.reason_code(), Some("worker.timeout"));
    assert!(t.elapsed() < Duration::from_secs(8), "took {:?}", t.elapsed());
    assert!(processes_with(&m).is_empty(), "survivors: {:?}", processes_with(&m));
}

#[test]
fn stdout_is_bounded_and_drained() {
    let mut spec = sh("yes | head -c 10000000; echo done >&2", &[]);
    spec.stdout_limit = 1000;
    let t = Instant::now();
    let o = run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    assert_eq!(o.stdout.len(), 1000);
    assert!(o.stdout_truncated);
    assert!(!o.stderr_truncated);
    assert_eq!(text(&o.stderr), "done\n");
    assert!(!o.timed_out);
    assert!(t.elapsed() < Duration::from_secs(20));
}

#[test]
fn a_kill_handle_stops_the_worker() {
    let m = marker("kill");
    let worker = tier().start(sh("sh -c 'sleep 100' \"$1\"", &[&m])).unwrap();
    let handle = worker.kill_handle();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        handle.kill().unwrap();
    });
    let o = worker.wait().unwrap();
    killer.join().unwrap();
    assert!(!o.timed_out);
    assert_eq!(o.exit, ExitStatusKind::Signaled(9));
    assert!(o.cleanup_confirmed, "{}", show(&o));
    assert!(processes_with(&m).is_empty());
}

#[test]
fn a_missing_program_is_a_typed_error() {
    let err = tier().start(WorkerSpec::new(["no-such-tool-xyz"])).unwrap().wait().unwrap_err();
    assert_eq!(err.kind(), SandboxErrorKind::ExecFailed, "{err}");
    assert!(err.to_string().contains("no-such-tool-xyz"), "{err}");
}

#[test]
fn a_bad_spec_is_refused_before_anything_starts() {
    let mut spec = WorkerSpec::new(["true"]);
    spec.working_dir = "/tmp/x".into();
    assert_eq!(tier().start(spec).unwrap_err().kind(), SandboxErrorKind::InvalidSpec);
    let dir = Dir::new();
    dir.write("a", b"a");
    let mut spec = WorkerSpec::new(["true"]);
    spec.inputs.push(dir.input("a", "../a"));
    assert_eq!(tier().start(spec).unwrap_err().kind(), SandboxErrorKind::InvalidSpec);
}

#[test]
fn a_non_init_program_is_a_protocol_error() {
    let tier = airlock_sandbox::NativeTier::new("/bin/true".into());
    let err = tier.start(WorkerSpec::new(["true"])).unwrap().wait().unwrap_err();
    assert_eq!(err.kind(), SandboxErrorKind::SetupFailed, "{err}");
}

#[test]
fn environment_is_exactly_the_spec_plus_defaults() {
    let mut spec = sh("env | sort", &[]);
    spec.env.push(("TOOL_MODE".into(), "fast".into()));
    let o = run(spec);
    let env = text(&o.stdout);
    let names: Vec<&str> = env.lines().filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
    for n in &names {
        assert!(["HOME", "LANG", "PATH", "PWD", "SHLVL", "TOOL_MODE", "_"].contains(n), "unexpected {n}:\n{env}");
    }
    assert!(env.contains("TOOL_MODE=fast") && env.contains("HOME=/tmp") && env.contains("PWD=/workspace"), "{env}");
}

#[test]
fn limits_not_applied_are_reported() {
    let o = run(sh("true", &[]));
    if !o.cgroup_limits_applied {
        assert!(o.limits.cgroup_skipped.as_deref().is_some_and(|s| !s.is_empty()), "{:?}", o.limits);
    }
    let p = airlock_sandbox::probe();
    assert!(p.userns.is_ok(), "{p:?}");
    assert!(p.landlock_abi.is_some(), "{p:?}");
    assert!(p.native_ready().is_ok(), "{p:?}");
}

#[test]
fn concurrent_workers_from_many_threads() {
    let threads: Vec<_> = (0..6)
        .map(|i| {
            std::thread::spawn(move || {
                let dir = Dir::new();
                dir.write("in.txt", format!("input {i}").as_bytes());
                let mut spec = sh("cat data/in.txt > out.txt", &[]);
                spec.inputs.push(dir.input("in.txt", "data/in.txt"));
                spec.output = Some(dir.output("o", "out.txt", 100));
                let o = run(spec);
                assert!(o.exit.success() && o.cleanup_confirmed, "{}", show(&o));
                assert_eq!(dir.read("o"), format!("input {i}").as_bytes());
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn process_count_is_bounded() {
    let m = marker("pids");
    let script = "import os, sys, time\nn = 0\nfor i in range(60):\n    try:\n        pid = os.fork()\n    \
                  except OSError:\n        break\n    if pid == 0:\n        time.sleep(3)\n        os._exit(0)\n    \
                  n += 1\nprint('forked', n)\n";
    let mut spec = WorkerSpec::new(["python3", "-c", script, &m]);
    spec.limits.pids = Some(20);
    let o = run(spec);
    let out = text(&o.stdout);
    let forked: u32 = out.trim().strip_prefix("forked ").and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(forked > 0 && forked < 20, "RLIMIT_NPROC not enforced ({forked} forks):\n{}", show(&o));
    assert!(o.cleanup_confirmed);
    assert!(processes_with(&m).is_empty());
}

#[test]
fn memory_is_bounded() {
    let mut spec = sh("python3 -c 'x = bytearray(1536 * 1024 * 1024); print(\"ALLOCATED\")'", &[]);
    spec.limits.memory_bytes = Some(512 << 20);
    let o = run(spec);
    assert!(!o.exit.success(), "{}", show(&o));
    assert!(!text(&o.stdout).contains("ALLOCATED"));
    assert!(text(&o.stderr).contains("MemoryError"), "{}", show(&o));
}

#[test]
fn tools_can_reopen_dev_stdout_and_stderr() {
    let o = run(sh("echo out > /dev/stdout; echo err | tee /dev/stderr >/dev/null", &[]));
    assert!(o.exit.success(), "{}", show(&o));
    assert_eq!(text(&o.stdout), "out\n");
    assert_eq!(text(&o.stderr), "err\n");
}

#[test]
fn a_dropped_worker_is_killed() {
    let m = marker("drop");
    let worker = tier().start(sh("sh -c 'sleep 100' \"$1\"", &[&m])).unwrap();
    let t = Instant::now();
    while processes_with(&m).is_empty() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!processes_with(&m).is_empty(), "the worker never started");
    drop(worker);
    let t = Instant::now();
    while !processes_with(&m).is_empty() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(processes_with(&m).is_empty(), "survivors after drop: {:?}", processes_with(&m));
}

/// The `mnt:[N]` link of a process's mount namespace.
fn mount_ns_of(pid: u32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()
}

/// Whether this process has a descriptor open on `ns`.
fn holds(ns: &std::path::Path) -> bool {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| link == ns))
}

/// Polls `cond` every 5 ms for up to 5 s.
fn within_5s(mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

#[test]
fn the_sandbox_mount_namespace_is_held_during_the_wait_and_released_after_it() {
    let m = marker("mntns");
    let worker = tier().start(sh("sleep 1 & echo \"$1\" >/dev/null; wait", &[&m])).unwrap();
    let waiting = std::thread::spawn(move || worker.wait().unwrap());
    // The tool's own mount namespace is PID 1's (the worker makes none).
    let mut ns = None;
    assert!(
        within_5s(|| {
            ns = processes_with(&m).into_iter().find_map(mount_ns_of);
            ns.is_some()
        }),
        "the worker never showed up"
    );
    let ns = ns.unwrap();
    assert_ne!(Some(&ns), mount_ns_of(std::process::id()).as_ref(), "the worker is in the caller's namespace");
    // PID 1 is not dumpable and its memory's user namespace is the host's
    // (the init unshares after its exec): only a caller with CAP_SYS_PTRACE
    // there may open its namespace. Any other caller holds nothing, and
    // PID 1 unmounts its tree as it exits.
    if is_root() {
        assert!(within_5s(|| holds(&ns)), "the caller never held the sandbox's mount namespace {ns:?}");
    } else {
        std::thread::sleep(Duration::from_millis(300));
        assert!(!holds(&ns), "an unprivileged caller holds the sandbox's mount namespace {ns:?}");
    }
    let o = waiting.join().unwrap();
    assert!(o.exit.success() && o.cleanup_confirmed, "{}", show(&o));
    assert!(within_5s(|| !holds(&ns)), "the sandbox's mount namespace {ns:?} was never released");
}
