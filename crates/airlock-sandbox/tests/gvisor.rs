//! Integration tests of the gVisor tier with the real `runsc` (no mocks).
//!
//! Without runsc every test prints a loud SKIP line and passes — except
//! under CI (`CI` set), where a missing or broken runsc fails the test.
//! `AIRLOCK_RUNSC` overrides `/usr/bin/runsc`.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use airlock_sandbox::gvisor::{leftovers, probe, reap};
use airlock_sandbox::{
    Cancel, ExitStatusKind, GvisorPlatform, GvisorSettings, GvisorTier, ProvidedFile, SandboxErrorKind, StagedInput,
    StagedOutput, Tier, Worker, WorkerOutcome, WorkerSpec,
};

// The native tests' helpers (text, show, processes_with).
#[path = "native/util.rs"]
mod util;
use util::{processes_with, show, text};

/// Set in the helper process that drives a worker until it is SIGKILLed.
const DRIVER_ENV: &str = "AIRLOCK_GVISOR_TEST_DRIVER_STATE";

fn runsc_path() -> PathBuf {
    std::env::var_os("AIRLOCK_RUNSC").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/bin/runsc"))
}

/// One test's world: a temp dir with the tier's state dir and staged files.
struct World {
    tmp: tempfile::TempDir,
    settings: GvisorSettings,
}

impl World {
    /// `None` (after a loud SKIP line) when runsc is missing here and this
    /// is not CI.
    fn new(test: &str) -> Option<World> {
        let runsc = runsc_path();
        if !runsc.exists() {
            let why = format!("{} not found (install Debian's `runsc` or set AIRLOCK_RUNSC)", runsc.display());
            if std::env::var_os("CI").is_some() {
                panic!("gvisor test {test}: {why}");
            }
            eprintln!("SKIP gvisor test {test}: {why} ********************************");
            return None;
        }
        let tmp = tempfile::Builder::new().prefix("airlock-gvisor-test-").tempdir().unwrap();
        let settings = GvisorSettings { runsc, platform: GvisorPlatform::Auto, state_dir: tmp.path().join("state") };
        Some(World { tmp, settings })
    }

    fn tier(&self) -> GvisorTier {
        GvisorTier::new(self.settings.clone())
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn input(&self, name: &str, bytes: &[u8], virtual_path: &str) -> StagedInput {
        std::fs::write(self.path(name), bytes).unwrap();
        StagedInput { virtual_path: virtual_path.into(), file: File::open(self.path(name)).unwrap(), held: false }
    }

    fn output(&self, name: &str, virtual_path: &str, max_bytes: u64) -> StagedOutput {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(self.path(name)).unwrap();
        StagedOutput { virtual_path: virtual_path.into(), file, max_bytes }
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }

    fn run(&self, spec: WorkerSpec) -> WorkerOutcome {
        let argv = spec.argv.clone();
        match self.tier().start(spec).and_then(|w| w.wait()) {
            Ok(o) => o,
            Err(e) => panic!("{argv:?} failed to run: {e} ({})", e.kind()),
        }
    }

    /// Containers runsc still knows in this world's root.
    fn containers(&self) -> Vec<String> {
        let out = Command::new(&self.settings.runsc)
            .arg("--root")
            .arg(self.settings.state_dir.join("runsc"))
            .args(["list", "-quiet"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).map(String::from).collect()
    }

    /// Host processes whose command line names this world's state dir
    /// (`runsc run`, its gofer and sandbox).
    fn processes(&self) -> Vec<u32> {
        processes_with(self.settings.state_dir.to_str().unwrap())
    }

    /// Nothing of any call is left: no container, no process, no call dir.
    fn assert_nothing_left(&self) {
        assert!(self.containers().is_empty(), "containers left: {:?}", self.containers());
        assert!(self.processes().is_empty(), "runsc processes left: {:?}", self.processes());
        let calls = self.settings.state_dir.join("calls");
        let left: Vec<_> =
            std::fs::read_dir(&calls).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        assert!(left.is_empty(), "call dirs left: {left:?}");
    }
}

fn sh(script: &str) -> WorkerSpec {
    let mut spec = WorkerSpec::new(["sh", "-c", script]);
    spec.timeout = Duration::from_secs(60);
    spec
}

#[test]
fn the_worker_reads_its_input_and_writes_its_output() {
    let Some(w) = World::new("input_output") else { return };
    let mut spec = sh("tr a-z A-Z < data/in.txt > out.txt && cat data/in.txt");
    spec.inputs.push(w.input("in", b"hello gvisor\n", "data/in.txt"));
    spec.output = Some(w.output("out", "out.txt", 1000));
    spec.call_id = Some(format!("inv-io-{}", std::process::id()));
    let o = w.run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    assert!(o.cleanup_confirmed, "{}", show(&o));
    assert_eq!(o.output.as_ref().unwrap().bytes, 13, "{}", show(&o));
    assert!(o.output.as_ref().unwrap().exported());
    assert_eq!(w.read("out"), b"HELLO GVISOR\n");
    assert_eq!(o.stdout, b"hello gvisor\n");
    assert_eq!(o.reason_code(), None);
    assert!(o.limits.sentry);
    assert_eq!(o.limits.ipc(), "sentry");
    assert!(o.limits.landlock_status.starts_with("not used"), "{:?}", o.limits);
    w.assert_nothing_left();
}

#[test]
fn the_worker_is_65534_without_capabilities_or_new_privileges() {
    let Some(w) = World::new("identity") else { return };
    let o = w.run(sh("id -u; id -g; id -G; grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status"));
    assert!(o.exit.success(), "{}", show(&o));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(&lines[..3], ["65534", "65534", "65534"], "{out}");
    for cap in ["CapEff", "CapPrm", "CapBnd"] {
        assert!(out.contains(&format!("{cap}:\t0000000000000000")), "{cap} not empty: {out}");
    }
    assert!(!out.contains("CapAmb:\t") || out.contains("CapAmb:\t0000000000000000"), "{out}");
    w.assert_nothing_left();
}

#[test]
fn an_input_cannot_be_written_or_removed() {
    let Some(w) = World::new("input_readonly") else { return };
    let mut spec = sh("echo changed > in.txt; echo w=$?; echo more >> in.txt; echo a=$?; rm -f in.txt; echo rm=$?; \
         mv in.txt x 2>/dev/null; echo mv=$?; echo new > fresh.txt; echo new=$?; cat in.txt");
    spec.inputs.push(w.input("in", b"original\n", "in.txt"));
    let o = w.run(spec);
    let out = text(&o.stdout);
    for step in ["w=", "a=", "rm=", "mv=", "new="] {
        assert!(out.contains(step) && !out.contains(&format!("{step}0")), "{step} succeeded: {}", show(&o));
    }
    assert!(out.ends_with("original\n"), "{}", show(&o));
    assert_eq!(w.read("in"), b"original\n");
    w.assert_nothing_left();
}

#[test]
fn a_sibling_file_and_host_secrets_are_invisible() {
    let Some(w) = World::new("invisible") else { return };
    std::fs::write(w.path("sibling.txt"), b"secret").unwrap();
    let host_dir = w.tmp.path().display().to_string();
    let state = w.settings.state_dir.display().to_string();
    let script = format!(
        "for f in /etc/shadow {host_dir}/sibling.txt {host_dir}/in {state} /root /home /var /etc/ssh; do \
           if cat \"$f\" >/dev/null 2>&1 || [ -e \"$f\" ]; then echo \"VISIBLE $f\"; fi; done; \
         [ -e /workspace/in.txt ] && cat /workspace/in.txt >/dev/null && echo control-visible; \
         cat /etc/passwd; echo ---; ls /workspace 2>/dev/null; python3 -c 'import os; print(sorted(os.listdir(\"/workspace\")))'"
    );
    let mut spec = sh(&script);
    spec.inputs.push(w.input("in", b"x", "in.txt"));
    let o = w.run(spec);
    let out = text(&o.stdout);
    assert!(!out.contains("VISIBLE"), "{}", show(&o));
    assert!(out.contains("control-visible"), "the check cannot see even the input: {}", show(&o));
    assert!(out.contains("nobody:x:65534"), "{}", show(&o));
    assert!(!out.contains("root:x:0:0:root:/root:/bin/bash"), "the host's passwd is visible: {out}");
    assert!(out.contains("['in.txt']"), "{}", show(&o));
    w.assert_nothing_left();
}

#[test]
fn the_network_is_unreachable() {
    let Some(w) = World::new("network") else { return };
    let o = w.run(WorkerSpec::new([
        "bash",
        "-c",
        "for a in 1.1.1.1/53 8.8.8.8/443 127.0.0.1/22; do \
           if timeout 5 bash -c \"echo > /dev/tcp/$a\" 2>/dev/null; then echo \"CONNECTED $a\"; fi; done; \
         cat /proc/net/dev 2>/dev/null | tail -n +3; echo done",
    ]));
    let out = text(&o.stdout);
    assert!(out.ends_with("done\n"), "{}", show(&o));
    assert!(!out.contains("CONNECTED"), "{}", show(&o));
    assert!(!out.contains("eth"), "a network interface exists: {out}");
    w.assert_nothing_left();
}

#[test]
fn a_write_past_the_file_size_limit_fails() {
    let Some(w) = World::new("file_size") else { return };
    let mut spec = sh("head -c 5000 /dev/zero > out.txt; echo out=$?; head -c 5000 /dev/zero > /tmp/big; echo tmp=$?");
    spec.limits.file_size = 1000;
    spec.output = Some(w.output("out", "out.txt", 100_000));
    let o = w.run(spec);
    let out = text(&o.stdout);
    assert!(out.contains("out=") && !out.contains("out=0"), "{}", show(&o));
    assert!(out.contains("tmp=") && !out.contains("tmp=0"), "{}", show(&o));
    assert!(o.cleanup_confirmed, "{}", show(&o));
    assert_eq!(o.output.as_ref().unwrap().bytes, 1000, "{}", show(&o));
    assert_eq!(w.read("out").len(), 1000);
    w.assert_nothing_left();
}

#[test]
fn memory_and_process_limits_hold() {
    let Some(w) = World::new("limits") else { return };
    let mut spec = WorkerSpec::new(["python3", "-c", "b = bytearray(512 << 20); print('ALLOCATED')"]);
    spec.limits.memory_bytes = Some(128 << 20);
    let o = w.run(spec);
    assert!(!o.exit.success() && !text(&o.stdout).contains("ALLOCATED"), "{}", show(&o));
    assert!(text(&o.stderr).contains("MemoryError"), "{}", show(&o));

    let mut spec = sh("for i in 1 2 3 4 5 6 7 8; do sleep 2 & done; wait; echo finished");
    spec.limits.pids = Some(4);
    let o = w.run(spec);
    assert!(text(&o.stderr).contains("fork"), "more processes than pids started: {}", show(&o));
    assert!(!text(&o.stdout).contains("finished"), "{}", show(&o));
    w.assert_nothing_left();
}

#[test]
fn an_output_over_max_bytes_is_not_exported() {
    let Some(w) = World::new("max_bytes") else { return };
    let mut spec = sh("head -c 100 /dev/zero > out.txt");
    spec.output = Some(w.output("out", "out.txt", 10));
    let o = w.run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    assert!(o.output.as_ref().unwrap().over_limit, "{}", show(&o));
    assert_eq!(o.reason_code(), Some("limit.output_size"));
    assert!(w.read("out").is_empty());
    w.assert_nothing_left();
}

#[test]
fn a_timeout_kills_everything_and_leaves_no_container() {
    let Some(w) = World::new("timeout") else { return };
    let mut spec = sh("sleep 100 & sleep 100");
    spec.output = Some(w.output("out", "out.txt", 10));
    spec.timeout = Duration::from_secs(3);
    let t = Instant::now();
    let o = w.run(spec);
    assert!(o.timed_out, "{}", show(&o));
    assert_eq!(o.exit, ExitStatusKind::Signaled(9));
    assert!(o.cleanup_confirmed, "{}", show(&o));
    assert_eq!(o.reason_code(), Some("worker.timeout"));
    assert!(o.output.as_ref().unwrap().refused.is_some());
    assert!(t.elapsed() < Duration::from_secs(15), "took {:?}", t.elapsed());
    w.assert_nothing_left();
}

#[test]
fn a_detached_child_does_not_write_late() {
    let Some(w) = World::new("late_writer") else { return };
    let script = "echo early > out.txt; \
        setsid sh -c 'sleep 1; echo late >> /workspace/out.txt' </dev/null >/dev/null 2>&1 & \
        nohup sh -c 'sleep 1; echo late2 >> /workspace/out.txt' </dev/null >/dev/null 2>&1 & \
        (trap '' HUP TERM; exec sleep 30) & exit 0";
    let mut spec = sh(script);
    spec.output = Some(w.output("out", "out.txt", 1000));
    let t = Instant::now();
    let o = w.run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    assert!(o.cleanup_confirmed, "{}", show(&o));
    assert!(t.elapsed() < Duration::from_secs(20), "waited for the detached child: {:?}", t.elapsed());
    assert_eq!(w.read("out"), b"early\n");
    w.assert_nothing_left();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(w.read("out"), b"early\n", "something wrote late");
}

#[test]
fn a_kill_handle_and_a_cancel_stop_the_worker() {
    let Some(w) = World::new("kill") else { return };
    let mut spec = sh("sleep 100");
    spec.call_id = Some(format!("inv-kill-{}", std::process::id()));
    let worker = w.tier().start(spec).unwrap();
    let handle = worker.kill_handle();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        handle.kill().unwrap();
    });
    let o = worker.wait().unwrap();
    killer.join().unwrap();
    assert!(!o.timed_out && o.cleanup_confirmed, "{}", show(&o));
    assert_eq!(o.exit, ExitStatusKind::Signaled(9));

    let cancel = Cancel::new();
    let mut tier = w.tier();
    tier.cancel_with(cancel.clone());
    cancel.cancel();
    let t = Instant::now();
    let mut spec = sh("sleep 100");
    spec.call_id = Some(format!("inv-cancel-{}", std::process::id()));
    let o = tier.start(spec).unwrap().wait().unwrap();
    assert_eq!(o.exit, ExitStatusKind::Signaled(9), "{}", show(&o));
    assert!(o.cleanup_confirmed && t.elapsed() < Duration::from_secs(15), "{}", show(&o));
    w.assert_nothing_left();
    // Not even the sandbox's cgroup, also where runsc run died before saving it.
    for id in [format!("inv-kill-{}", std::process::id()), format!("inv-cancel-{}", std::process::id())] {
        let left: Vec<_> = std::fs::read_dir("/sys/fs/cgroup")
            .unwrap()
            .flatten()
            .flat_map(|h| std::fs::read_dir(h.path().join("airlock-gvisor")).into_iter().flatten().flatten())
            .map(|e| e.path())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("{id}-"))))
            .collect();
        assert!(left.is_empty(), "cgroups left: {left:?}");
    }
}

/// runsc names a sandbox's control socket after its container id alone (an
/// abstract socket, host-wide): two state directories running a call with
/// the same caller-chosen id at the same moment must both run.
#[test]
fn one_call_id_runs_in_two_state_directories_at_once() {
    let (Some(a), Some(b)) = (World::new("same_id_a"), World::new("same_id_b")) else { return };
    let started: Vec<_> = [&a, &b]
        .iter()
        .map(|w| {
            let mut spec = sh("sleep 2; echo ran");
            spec.call_id = Some("inv-same-id".into());
            w.tier().start(spec).unwrap_or_else(|e| panic!("{e} ({})", e.kind()))
        })
        .collect();
    for worker in started {
        let o = worker.wait().unwrap();
        assert_eq!(o.exit, ExitStatusKind::Exited(0), "{}", show(&o));
        assert_eq!(text(&o.stdout), "ran\n", "{}", show(&o));
        assert!(o.cleanup_confirmed, "{}", show(&o));
    }
    a.assert_nothing_left();
    b.assert_nothing_left();
}

#[test]
fn stdout_is_bounded_and_goes_to_its_sink() {
    let Some(w) = World::new("stdout") else { return };
    let mut spec = sh("head -c 3000000 /dev/zero | tr '\\0' x; echo done >&2");
    spec.stdout_limit = 1000;
    let sink = w.path("sink");
    spec.stdout_sink = Some(File::create(&sink).unwrap());
    let o = w.run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    assert!(o.stdout_truncated);
    assert_eq!(std::fs::read(&sink).unwrap(), vec![b'x'; 1000]);
    assert_eq!(text(&o.stderr), "done\n");
    w.assert_nothing_left();
}

#[test]
fn unsupported_features_and_a_missing_program_are_refused() {
    let Some(w) = World::new("refusals") else { return };
    let mut spec = sh("true");
    spec.provided.push(ProvidedFile {
        path: "/.airlock/x".into(),
        file: File::open("/dev/null").unwrap(),
        executable: false,
    });
    let e = w.tier().start(spec).unwrap_err();
    assert_eq!(e.kind(), SandboxErrorKind::InvalidSpec);
    assert!(e.to_string().contains("provided files"), "{e}");

    let e = w.tier().start(WorkerSpec::new(["/no/such/tool"])).and_then(|w| w.wait()).unwrap_err();
    assert_eq!(e.kind(), SandboxErrorKind::ExecFailed, "{e}");
    w.assert_nothing_left();
}

#[test]
fn probe_reports_a_ready_tier() {
    let Some(w) = World::new("probe") else { return };
    let r = probe(&w.settings);
    assert!(r.found && r.ready, "{r:?}");
    assert_eq!(r.tier, "gvisor");
    assert!(r.version.as_deref().is_some_and(|v| v.contains("runsc")), "{r:?}");
    let rootless = !rustix::process::geteuid().is_root();
    assert_eq!(r.platform.as_deref().map(|p| p.ends_with("(rootless)")), Some(rootless), "{r:?}");
    w.assert_nothing_left();

    let missing = GvisorSettings { runsc: w.path("no-runsc"), ..w.settings.clone() };
    let r = probe(&missing);
    assert!(!r.found && !r.ready && r.why.as_deref().is_some_and(|w| w.contains("install")), "{r:?}");
}

/// Helper process for the test below: starts a worker and waits on it
/// until it is SIGKILLed. Does nothing unless [`DRIVER_ENV`] is set.
#[test]
#[ignore = "helper process of leftovers_of_a_killed_caller_are_found_and_reaped"]
fn driver_for_sigkill() {
    let Some(state) = std::env::var_os(DRIVER_ENV) else { return };
    let settings =
        GvisorSettings { runsc: runsc_path(), platform: GvisorPlatform::Auto, state_dir: PathBuf::from(state) };
    let mut spec = sh("echo started; sleep 300");
    // runsc names a sandbox's control socket after its container id alone
    // (an abstract socket): ids carry the test process's pid, so the
    // privileged and the rootless run of this file never share one.
    spec.call_id = Some(killed_id(std::os::unix::process::parent_id()));
    let worker = GvisorTier::new(settings).start(spec).unwrap();
    let _ = worker.wait();
}

/// The call id the driver of test process `pid` uses.
fn killed_id(pid: u32) -> String {
    format!("inv-killed-{pid}")
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn leftovers_of_a_killed_caller_are_found_and_reaped() {
    let Some(w) = World::new("leftovers") else { return };
    let mut driver = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "driver_for_sigkill", "--ignored", "--nocapture"])
        .env(DRIVER_ENV, &w.settings.state_dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let id = killed_id(std::process::id());
    let of_call = |c: &String| c.starts_with(&format!("{id}-"));
    wait_for("the container to run", || w.containers().iter().any(of_call) && w.processes().len() >= 3);
    driver.kill().unwrap(); // SIGKILL
    driver.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!w.processes().is_empty(), "nothing was left to reap: the test proves nothing");

    let found = leftovers(&w.settings).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(of_call(&found[0].id), "{found:?}");
    assert_eq!(found[0].call_id.as_deref(), Some(id.as_str()));
    reap(&w.settings, &found[0]).unwrap();
    assert!(leftovers(&w.settings).unwrap().is_empty());
    w.assert_nothing_left();
    let logs = w.settings.state_dir.join("logs");
    assert!(std::fs::read_dir(&logs).map(|d| d.count() == 0).unwrap_or(true), "a log was left");
    // Reaping what is already gone is fine.
    reap(&w.settings, &found[0]).unwrap();
}

/// Set in the copy of this test binary that runs as uid 65534.
const UNPRIVILEGED_ENV: &str = "AIRLOCK_GVISOR_TEST_UNPRIVILEGED";

#[test]
fn every_test_passes_for_an_unprivileged_caller_with_rootless_runsc() {
    let Some(w) = World::new("unprivileged") else { return };
    if std::env::var_os(UNPRIVILEGED_ENV).is_some() {
        return; // this is the re-run itself
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIP gvisor unprivileged re-run: not root, so already covered by this run");
        return;
    }
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].into_iter().find(|p| std::path::Path::new(p).exists());
    let Some(setpriv) = setpriv else {
        assert!(std::env::var_os("CI").is_none(), "setpriv (util-linux) is missing");
        eprintln!("SKIP gvisor unprivileged re-run: setpriv (util-linux) is not installed");
        return;
    };
    // A copy any user can execute (the build directory may not be).
    let exe = w.path("gvisor-tests");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(w.tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&exe)
        .args(["--test-threads=2", "--nocapture"])
        .current_dir("/")
        .env_clear()
        .env("HOME", "/tmp")
        .env(UNPRIVILEGED_ENV, "1")
        .env("AIRLOCK_RUNSC", runsc_path())
        .output()
        .unwrap();
    let report = format!("{}\n{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "the unprivileged re-run failed:\n{report}");
    assert!(report.contains("test result: ok.") && !report.contains("SKIP"), "{report}");
}
