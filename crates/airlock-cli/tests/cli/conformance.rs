//! One conformance suite for every worker tier (issue 19): each case is
//! written once and run through the shipping binary (`airlock run`) on every
//! tier that `airlock doctor` says is ready here: native, gvisor, docker and
//! docker with the runsc runtime. A tier that is not ready is skipped with a
//! loud `SKIP` line, unless `AIRLOCK_CONFORMANCE_REQUIRE` names it (CI names
//! every tier, so none is skipped there): then the test fails.
//!
//! The microvm tier needs `AIRLOCK_TEST_MICROVM_DIR`: the directory
//! `scripts/microvm-build.sh` wrote the guest kernel and initramfs to, from
//! the airlock binary under test.
//!
//! The docker tiers need `AIRLOCK_TEST_DOCKER_SOCKET` (an engine's Unix
//! socket) and the image `AIRLOCK_TEST_DOCKER_IMAGE` (default
//! `airlock-base:test`, built offline by `scripts/docker-image.sh`).
//! `podman+runsc` is the same Docker tier on Podman's Docker-compatible
//! socket, `AIRLOCK_TEST_PODMAN_SOCKET` (started by
//! `scripts/podman-lab.sh`), with the same image name there.

use crate::runkit::*;
use crate::util::{Project, Run, CANARY};
use serde_json::Value;
use std::time::Duration;

/// One tier under test: its name in reports and its `[sandbox]` config.
struct TierUnderTest {
    name: &'static str,
    /// The key of `doctor`'s `tiers` object that says whether it is ready.
    doctor_key: &'static str,
    /// The tier as the journal and the descriptor name it (Podman's socket
    /// is the Docker tier: `docker+runsc`).
    evidence: &'static str,
    config: String,
}

const ROOTS: &str = "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n";

fn docker_section(socket_var: &str, runtime: Option<&str>) -> Option<String> {
    let socket = std::env::var(socket_var).ok()?;
    let image = std::env::var("AIRLOCK_TEST_DOCKER_IMAGE").unwrap_or_else(|_| "airlock-base:test".to_owned());
    let runtime = runtime.map(|r| format!("runtime = \"{r}\"\n")).unwrap_or_default();
    Some(format!("[sandbox.docker]\nsocket = \"{socket}\"\nimage = \"{image}\"\n{runtime}"))
}

/// `[sandbox.microvm]` from `AIRLOCK_TEST_MICROVM_DIR` (what
/// `scripts/microvm-build.sh` wrote: `vmlinuz`, `initramfs.cpio`), with
/// `accel` from `AIRLOCK_TEST_MICROVM_ACCEL` (default `tcg`: every case is a
/// fresh state dir, and `auto` would probe KVM in each).
pub(crate) fn microvm_section() -> Option<String> {
    let dir = std::env::var("AIRLOCK_TEST_MICROVM_DIR").ok()?;
    let accel = std::env::var("AIRLOCK_TEST_MICROVM_ACCEL").unwrap_or_else(|_| "tcg".to_owned());
    Some(format!(
        "[sandbox.microvm]\nkernel = \"{dir}/vmlinuz\"\ninitramfs = \"{dir}/initramfs.cpio\"\naccel = \"{accel}\"\n"
    ))
}

fn candidates() -> Vec<(TierUnderTest, Option<String>)> {
    let tier = |t: &str| format!("{ROOTS}[sandbox]\ntier = \"{t}\"\n");
    let docker = |socket_var: &str, runtime: Option<&str>| match docker_section(socket_var, runtime) {
        Some(section) => (format!("{}{section}", tier("docker")), None),
        None => (tier("docker"), Some(format!("{socket_var} is not set"))),
    };
    let (plain, plain_why) = docker("AIRLOCK_TEST_DOCKER_SOCKET", None);
    let (runsc, runsc_why) = docker("AIRLOCK_TEST_DOCKER_SOCKET", Some("runsc"));
    let (podman, podman_why) = docker("AIRLOCK_TEST_PODMAN_SOCKET", Some("runsc"));
    let (microvm, microvm_why) = match microvm_section() {
        Some(section) => (format!("{}{section}", tier("microvm")), None),
        None => (tier("microvm"), Some("AIRLOCK_TEST_MICROVM_DIR is not set".to_owned())),
    };
    vec![
        (TierUnderTest { name: "native", doctor_key: "native", evidence: "native", config: tier("native") }, None),
        (TierUnderTest { name: "gvisor", doctor_key: "gvisor", evidence: "gvisor", config: tier("gvisor") }, None),
        (TierUnderTest { name: "docker", doctor_key: "docker", evidence: "docker", config: plain }, plain_why),
        (
            TierUnderTest { name: "docker+runsc", doctor_key: "docker", evidence: "docker+runsc", config: runsc },
            runsc_why,
        ),
        (
            TierUnderTest { name: "podman+runsc", doctor_key: "docker", evidence: "docker+runsc", config: podman },
            podman_why,
        ),
        (TierUnderTest { name: "microvm", doctor_key: "microvm", evidence: "microvm", config: microvm }, microvm_why),
    ]
}

fn required() -> Vec<String> {
    std::env::var("AIRLOCK_CONFORMANCE_REQUIRE")
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect())
        .unwrap_or_default()
}

/// Why `airlock doctor` says `t` is not ready here (`None`: ready). Asked
/// once per tier and test process: a tier's readiness is the host's, and
/// each microvm doctor boots a VM.
fn doctor_verdict(t: &TierUnderTest) -> Option<String> {
    static SEEN: std::sync::Mutex<Vec<(&'static str, Option<String>)>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, why)) = seen.iter().find(|(name, _)| *name == t.name) {
        return why.clone();
    }
    let p = Project::with_config(&t.config);
    let run = p.run(&["doctor", "--json"]);
    let report = &run.envelope["content"]["tiers"][t.doctor_key];
    let why = if report["ready"] == true {
        None
    } else {
        Some(format!("doctor: {}", report["detail"].as_str().unwrap_or("no report")))
    };
    seen.push((t.name, why.clone()));
    why
}

/// The tiers ready here (each checked with `airlock doctor`); the others
/// are reported as skipped, or fail the test when required.
fn ready_tiers(case: &str) -> Vec<TierUnderTest> {
    let required = required();
    let mut ready = Vec::new();
    for (t, known_missing) in candidates() {
        let why = known_missing.or_else(|| doctor_verdict(&t));
        match why {
            None => ready.push(t),
            Some(why) if required.iter().any(|r| r == t.name) => {
                panic!("{case}: tier {} is required (AIRLOCK_CONFORMANCE_REQUIRE) but not ready: {why}", t.name)
            }
            Some(why) => eprintln!("SKIP {case} on tier {}: not ready here: {why}", t.name),
        }
    }
    ready
}

/// A project for `tier` with `data/in.txt`, a secret beside it and one tool.
fn project(tier: &TierUnderTest, tool: &str, manifest: &str) -> Project {
    let p = Project::with_config(&tier.config);
    p.write("data/in.txt", "granted input\n");
    p.write("data/secret.txt", CANARY);
    p.tool(tool, manifest);
    p
}

fn run_io(p: &Project, tool: &str) -> Run {
    p.run(&["run", tool, "data/in.txt", "results/out.txt"])
}

/// The tool's answer: `[output] format = "json"` on its stdout.
fn content(run: &Run) -> &Value {
    &run.envelope["content"]
}

const JSON: &str = "[output]\nformat = \"json\"\n\n";

fn io_rest(extra_fs: &str) -> String {
    format!("{JSON}{IO_FS}{extra_fs}")
}

#[test]
fn the_worker_is_65534_with_no_capabilities_and_only_stdio() {
    let script = r#"
import json, os, sys
status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)
open(sys.argv[2], 'w').write('done\n')
print(json.dumps(dict(uid=[os.getuid(), os.geteuid()], gid=[os.getgid(), os.getegid()],
    groups=os.getgroups(), cap_eff=status['CapEff'].strip(), cap_prm=status['CapPrm'].strip(),
    fds=sorted(os.listdir('/proc/self/fd')))))
"#;
    for t in ready_tiers("identity") {
        let p = project(&t, "whoami", &py_tool("whoami", "", IO_ARGS, script, &io_rest("")));
        let run = run_io(&p, "whoami");
        run.assert_ok();
        let c = content(&run);
        assert_eq!(c["uid"], serde_json::json!([65534, 65534]), "{}: {c:#}", t.name);
        assert_eq!(c["gid"], serde_json::json!([65534, 65534]), "{}: {c:#}", t.name);
        assert!(c["groups"].as_array().unwrap().iter().all(|g| g == 65534), "{}: supplementary groups {c:#}", t.name);
        assert_eq!(c["cap_eff"], "0000000000000000", "{}: {c:#}", t.name);
        assert_eq!(c["cap_prm"], "0000000000000000", "{}: {c:#}", t.name);
        let fds: Vec<&str> = c["fds"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert!(fds.starts_with(&["0", "1", "2"]) && fds.len() <= 4, "{}: descriptors {fds:?}", t.name);
        assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "done\n", "{}", t.name);
        let started = p.journal_records(run.envelope["invocation_id"].as_str().unwrap());
        let worker = started.iter().find(|r| r["kind"] == "WorkerStarted").expect("a WorkerStarted record");
        assert_eq!(worker["body"]["tier"], t.evidence, "{}: the journal names the tier: {worker:#}", t.name);
        let descriptor = Project::descriptor(&p.path(".airlock"), &run);
        assert_eq!(descriptor["tier"], t.evidence, "{}: the descriptor names the tier", t.name);
    }
}

#[test]
fn inputs_are_read_only_and_the_output_is_the_only_writable_file() {
    let script = r#"
import json, os, sys
inp, out = sys.argv[1], sys.argv[2]
def attempt(f):
    try:
        f(); return 'ALLOWED'
    except Exception as e:
        return type(e).__name__
res = dict(
    append_input=attempt(lambda: open(inp, 'a').write('x')),
    delete_input=attempt(lambda: os.unlink(inp)),
    chmod_input=attempt(lambda: os.chmod(inp, 0o666)),
    new_file_beside_output=attempt(lambda: open(os.path.join(os.path.dirname(out), 'extra.txt'), 'w').write('x')),
    new_file_in_workdir=attempt(lambda: open('made-here.txt', 'w').write('x')),
    write_image=attempt(lambda: open('/usr/airlock-was-here', 'w').write('x')),
)
open(out, 'w').write(open(inp).read())
print(json.dumps(res))
"#;
    for t in ready_tiers("read-only inputs") {
        let p = project(&t, "writer", &py_tool("writer", "", IO_ARGS, script, &io_rest("")));
        let run = run_io(&p, "writer");
        run.assert_ok();
        for (attempt, result) in content(&run).as_object().unwrap() {
            assert_ne!(result, "ALLOWED", "{}: {attempt} was allowed: {:#}", t.name, content(&run));
        }
        assert_eq!(std::fs::read_to_string(p.path("data/in.txt")).unwrap(), "granted input\n", "{}", t.name);
        assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "granted input\n", "{}", t.name);
        assert!(!p.path("results/extra.txt").exists(), "{}", t.name);
        assert!(!std::path::Path::new("/usr/airlock-was-here").exists(), "{}", t.name);
    }
}

#[test]
fn a_sibling_file_host_secrets_and_host_paths_are_invisible() {
    for t in ready_tiers("invisible files") {
        let p = Project::with_config(&t.config);
        p.write("data/in.txt", "granted input\n");
        p.write("data/secret.txt", CANARY);
        // The secret's own host path, absolute: no host path may reach it.
        let host_secret = p.path("data/secret.txt").to_str().unwrap().to_owned();
        let script = format!(
            r#"
import json, os, sys
def attempt(f):
    try:
        return 'ALLOWED: ' + repr(f())[:80]
    except Exception as e:
        return type(e).__name__
print(json.dumps(dict(
    sibling=attempt(lambda: open(os.path.join(os.path.dirname(sys.argv[1]), 'secret.txt')).read()),
    listing=sorted(os.listdir(os.path.dirname(sys.argv[1]))),
    shadow=attempt(lambda: open('/etc/shadow').read()),
    host_path=attempt(lambda: open({host_secret:?}).read()),
)))
open(sys.argv[2], 'w').write('ok')
"#
        );
        p.tool("peek", &py_tool("peek", "", IO_ARGS, &script, &io_rest("")));
        let run = run_io(&p, "peek");
        run.assert_ok();
        let c = content(&run);
        for key in ["sibling", "shadow", "host_path"] {
            assert!(!c[key].as_str().unwrap().starts_with("ALLOWED"), "{}: {key}: {c:#}", t.name);
        }
        assert_eq!(c["listing"], serde_json::json!(["in.txt"]), "{}: {c:#}", t.name);
        p.assert_absent(&run, CANARY);
    }
}

#[test]
fn the_worker_has_no_network() {
    let script = r#"
import json, socket, sys
def attempt(addr):
    try:
        socket.create_connection(addr, timeout=2); return 'ALLOWED'
    except Exception as e:
        return type(e).__name__
ifaces = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]
print(json.dumps(dict(ifaces=ifaces, outside=attempt(('192.0.2.1', 80)), dns=attempt(('1.1.1.1', 53)))))
open(sys.argv[2], 'w').write('ok')
"#;
    for t in ready_tiers("no network") {
        let p = project(&t, "net", &py_tool("net", "", IO_ARGS, script, &io_rest("")));
        let run = run_io(&p, "net");
        run.assert_ok();
        let c = content(&run);
        assert_ne!(c["outside"], "ALLOWED", "{}: {c:#}", t.name);
        assert_ne!(c["dns"], "ALLOWED", "{}: {c:#}", t.name);
        let ifaces: Vec<&str> = c["ifaces"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(ifaces.iter().all(|i| *i == "lo"), "{}: interfaces other than loopback: {ifaces:?}", t.name);
    }
}

#[test]
fn the_file_size_limit_stops_the_output_and_nothing_is_published() {
    let script = "head -c 4096 /dev/zero > \"$2\"; echo wrote $? ";
    for t in ready_tiers("file-size limit") {
        let rest = format!("{IO_FS}max_file_bytes = 1000\n");
        let p = project(&t, "big", &sh_tool("big", "", IO_ARGS, script, &rest));
        let run = run_io(&p, "big");
        assert_ne!(run.status(), "ok", "{}: {run:#?}", t.name);
        assert!(!p.path("results/out.txt").exists(), "{}: an over-limit output was published", t.name);
        assert_staging_empty(&p);
    }
}

#[test]
fn the_deadline_kills_everything_and_no_process_survives() {
    for t in ready_tiers("deadline") {
        let m = marker(300);
        let script = format!("sleep {m} & sleep {m}; echo never > \"$2\"");
        let p = project(&t, "slow", &sh_tool("slow", "timeout_seconds = 2", IO_ARGS, &script, IO_FS));
        let _guard = KillOnDrop(m.clone());
        let run = run_io(&p, "slow");
        assert_eq!(run.reason(), "tool.timeout", "{}: {run:#?}", t.name);
        assert!(!p.path("results/out.txt").exists(), "{}", t.name);
        assert!(
            wait_until(Duration::from_secs(5), || procs_with(&m).is_empty()),
            "{}: processes survived the deadline: {:?}",
            t.name,
            procs_with(&m)
        );
        assert_no_tier_leftovers(&p, &t);
    }
}

#[test]
fn a_detached_child_does_not_write_late() {
    let script = "(sleep 1; echo late >> \"$2\") & echo early > \"$2\"";
    for t in ready_tiers("late writer") {
        let p = project(&t, "late", &sh_tool("late", "", IO_ARGS, script, IO_FS));
        let run = run_io(&p, "late");
        run.assert_ok();
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "early\n", "{}", t.name);
        assert_no_tier_leftovers(&p, &t);
    }
}

#[test]
fn the_misbehave_example_is_contained_and_publishes_nothing() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tools/misbehave.clad.toml"))
            .unwrap();
    for t in ready_tiers("misbehave") {
        let p = project(&t, "misbehave", &manifest);
        let run = p.run(&["run", "misbehave", "data/in.txt", "results/m.txt"]);
        assert_eq!(run.reason(), "limit.output_size", "{}: {run:#?}", t.name);
        let said = run.envelope["stdout_tail"].as_str().unwrap_or_default();
        for attempt in [
            "read /etc/shadow",
            "read a file beside the input",
            "rewrite the input",
            "delete the output",
            "connect to the host's loopback listener",
            "create a user namespace",
        ] {
            // Under gVisor a user namespace is the Sentry's own, never the
            // host kernel's: allowed there, contained all the same.
            // In a microVM it is the guest kernel's: the same holds.
            if attempt == "create a user namespace"
                && matches!(t.name, "gvisor" | "docker+runsc" | "podman+runsc" | "microvm")
            {
                continue;
            }
            let line = said.lines().find(|l| l.starts_with(attempt)).unwrap_or_default();
            assert!(line.contains(": denied"), "{}: {attempt:?} was not denied:\n{said}", t.name);
        }
        assert!(!p.path("results/m.txt").exists(), "{}", t.name);
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!p.path("results/m.txt").exists(), "{}: the late child wrote", t.name);
        assert_eq!(std::fs::read_to_string(p.path("data/in.txt")).unwrap(), "granted input\n");
    }
}

/// What a container tier leaves in the state dir between calls: nothing.
fn assert_no_tier_leftovers(p: &Project, t: &TierUnderTest) {
    let calls = call_dirs(p, t);
    assert!(calls.is_empty(), "{}: call directories left: {calls:?}", t.name);
}

/// The call directories of a container tier in the project's state dir
/// (gVisor keeps them under `calls/`, Docker directly).
fn call_dirs(p: &Project, t: &TierUnderTest) -> Vec<String> {
    let dir = p.path(".airlock/tiers").join(t.doctor_key);
    [dir.clone(), dir.join("calls")]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("inv-") || n.starts_with("w-"))
        .collect()
}

/// A SIGKILLed airlock leaves its container running; `airlock staging gc`
/// then leaves no container, sandbox process, call directory or staging data.
#[test]
fn a_killed_airlock_leaves_nothing_after_staging_gc() {
    for t in ready_tiers("killed airlock").into_iter().filter(|t| t.name != "native") {
        let m = marker(120);
        let script = format!("sleep {m}; echo never > \"$2\"");
        let p = project(&t, "sleepy", &sh_tool("sleepy", "timeout_seconds = 60", IO_ARGS, &script, IO_FS));
        let _guard = KillOnDrop(m.clone());
        let id = format!("inv-killed-{}", std::process::id());
        let mut child = p
            .command(&["run", "sleepy", "data/in.txt", "results/out.txt", "--invocation-id", &id])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        assert!(
            wait_until(Duration::from_secs(30), || !call_dirs(&p, &t).is_empty()),
            "{}: the call never started its container",
            t.name
        );
        // Past the start: the tool is sleeping inside.
        std::thread::sleep(Duration::from_millis(1500));
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            panic!("{}: the call ended before it was killed: {}", t.name, String::from_utf8_lossy(&out.stdout));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!call_dirs(&p, &t).is_empty(), "{}: nothing was left to reap (the test proves nothing)", t.name);

        let gc = p.run(&["staging", "gc"]);
        gc.assert_ok();
        let reaped = gc.envelope["content"]["tier_leftovers_removed"].as_array().cloned().unwrap_or_default();
        assert!(!reaped.is_empty(), "{}: gc reaped nothing: {gc:#?}", t.name);
        assert!(reaped.iter().all(|r| r["error"].is_null()), "{}: {reaped:#?}", t.name);
        assert!(call_dirs(&p, &t).is_empty(), "{}: call directories left: {:?}", t.name, call_dirs(&p, &t));
        assert_staging_empty(&p);
        assert!(
            wait_until(Duration::from_secs(5), || procs_with(&m).is_empty()),
            "{}: the tool survived: {:?}",
            t.name,
            procs_with(&m)
        );
        let state = p.path(".airlock").to_str().unwrap().to_owned();
        assert!(procs_with(&state).is_empty(), "{}: runtime processes left: {:?}", t.name, procs_with(&state));
        assert!(!p.path("results/out.txt").exists());
    }
}

// ---- tier selection, policy and refusals (tier-independent) ----

#[test]
fn a_tier_outside_the_allow_list_or_against_the_manifest_is_refused() {
    let config = format!("{ROOTS}[sandbox]\ntier = \"native\"\ntiers = [\"native\"]\n");
    let p = Project::with_config(&config);
    p.write("data/in.txt", "x\n");
    let run = p.run(&["run", "copy", "data/in.txt", "results/o.txt", "--tier", "gvisor"]);
    run.assert_refused("sandbox.tier_not_allowed", 77);
    assert!(run.stderr.contains("[sandbox] tiers"), "{run:#?}");

    let p = Project::with_config(&format!("{ROOTS}[sandbox]\ntier = \"native\"\n"));
    p.write("data/in.txt", "x\n");
    let pinned = sh_tool("pinned", "[tool.sandbox]\ntier = \"gvisor\"\n", IO_ARGS, "cat \"$1\" > \"$2\"", IO_FS);
    p.tool("pinned", &pinned);
    let run = p.run(&["run", "pinned", "data/in.txt", "results/o.txt", "--tier", "native"]);
    run.assert_refused("sandbox.tier_not_allowed", 77);
    assert!(run.stderr.contains("[tool.sandbox] tier"), "{run:#?}");
    assert!(!p.path("results/o.txt").exists());

    let run = p.run(&["query", "list_files", "path=data", "--invocation-id", "q1"]);
    run.assert_ok();
    assert_eq!(Project::descriptor(&p.path(".airlock"), &run)["tier"], "none");
}

#[test]
fn a_shape_that_runs_native_only_refuses_another_default_tier() {
    let p = Project::with_config(&format!("{ROOTS}[sandbox]\ntier = \"gvisor\"\n"));
    let run = p.run(&["isolated", "--root", "d=./data:r", "--", "true"]);
    run.assert_refused("sandbox.tier_unsupported", 78);
    assert!(run.stderr.contains("isolated submission"), "{run:#?}");
}

#[test]
fn a_cedar_policy_can_require_gvisor_for_a_tool() {
    let policy = r#"
@id("permit-all")
permit (principal, action, resource);

@id("sensitive-needs-gvisor")
forbid (principal, action, resource)
when { resource.name == "sensitive" && context.invocation.resolved.tier != "gvisor" };
"#;
    let config = format!("{ROOTS}[policy]\nfiles = [\"policy/*.cedar\"]\n");
    let p = Project::with_config(&config);
    p.write("policy/tiers.cedar", policy);
    p.write("data/in.txt", "x\n");
    p.tool("sensitive", &sh_tool("sensitive", "risk_tier = \"medium\"", IO_ARGS, "cat \"$1\" > \"$2\"", IO_FS));
    let run = p.run(&["run", "sensitive", "data/in.txt", "results/o.txt"]);
    run.assert_refused("policy.denied", 77);
    assert!(run.stderr.contains("sensitive-needs-gvisor"), "{run:#?}");
    assert!(!p.path("results/o.txt").exists());
    if ready_tiers("cedar requires gvisor").iter().any(|t| t.name == "gvisor") {
        let run = p.run(&["run", "sensitive", "data/in.txt", "results/o.txt", "--tier", "gvisor"]);
        run.assert_ok();
        assert_eq!(std::fs::read_to_string(p.path("results/o.txt")).unwrap(), "x\n");
    }
}

/// The issue's example: a high-risk tool only on gVisor. The call waits for
/// an approval like every high-risk call; once approved, Cedar still refuses
/// it on the native tier and lets it run on gvisor.
#[test]
fn a_high_risk_tool_that_policy_keeps_on_gvisor_is_refused_on_native_even_when_approved() {
    let policy = r#"
@id("permit-all")
permit (principal, action, resource);

@id("high-risk-only-on-gvisor")
forbid (principal, action, resource)
when { resource.risk_tier == "high" && context.invocation.resolved.tier != "gvisor" };
"#;
    let (p, alice) = crate::approvers::approved_project(&format!("{ROOTS}[policy]\nfiles = [\"policy/*.cedar\"]\n"));
    p.write("policy/tiers.cedar", policy);
    p.write("data/in.txt", "x\n");
    p.tool("risky", &sh_tool("risky", "risk_tier = \"high\"", IO_ARGS, "cat \"$1\" > \"$2\"", IO_FS));
    let approved_dispatch = |extra: &[&str], out: &str| {
        let mut args = vec!["run", "risky", "data/in.txt", out];
        args.extend_from_slice(extra);
        let first = p.run(&args);
        first.assert_refused("approval.required", 77);
        let digest = first.envelope["evidence"]["descriptor_sha256"].as_str().unwrap().to_owned();
        alice.approve(&p, &digest, &[]).assert_ok();
        p.run(&["dispatch", first.envelope["invocation_id"].as_str().unwrap()])
    };
    let native = approved_dispatch(&[], "results/native.txt");
    native.assert_refused("policy.denied", 77);
    assert!(native.stderr.contains("high-risk-only-on-gvisor"), "{native:#?}");
    assert!(!p.path("results/native.txt").exists());
    if ready_tiers("high risk on gvisor").iter().any(|t| t.name == "gvisor") {
        approved_dispatch(&["--tier", "gvisor"], "results/gvisor.txt").assert_ok();
        assert_eq!(std::fs::read_to_string(p.path("results/gvisor.txt")).unwrap(), "x\n");
    }
}

/// Several airlock state directories may share one engine: a call of one is
/// never another's leftover (gc and the reaping before each call look only
/// at their own state directory's containers).
#[test]
fn another_state_directorys_live_call_is_not_reaped() {
    for t in ready_tiers("shared engine").into_iter().filter(|t| t.name != "native") {
        let script = "sleep 4; cat \"$1\" > \"$2\"";
        let a = project(&t, "slowcopy", &sh_tool("slowcopy", "timeout_seconds = 60", IO_ARGS, script, IO_FS));
        let b = project(&t, "slowcopy", &sh_tool("slowcopy", "timeout_seconds = 60", IO_ARGS, script, IO_FS));
        let child = a.command(&["run", "slowcopy", "data/in.txt", "results/out.txt"]).spawn().unwrap();
        assert!(wait_until(Duration::from_secs(30), || !call_dirs(&a, &t).is_empty()), "{}: no call started", t.name);
        let gc = b.run(&["staging", "gc"]);
        gc.assert_ok();
        assert_eq!(gc.envelope["content"]["tier_leftovers_removed"], serde_json::json!([]), "{}: {gc:#?}", t.name);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}: {}", t.name, String::from_utf8_lossy(&out.stdout));
        assert_eq!(std::fs::read_to_string(a.path("results/out.txt")).unwrap(), "granted input\n", "{}", t.name);
    }
}

/// A `[session]` tool (issue 21) runs on every tier: the REPL starts once
/// with the call's grants on a terminal (the native tier's pty, gVisor's
/// console, Docker's TTY, the microVM guest's pty), answers each
/// interaction, cannot open the file beside its input, and publishes only
/// on finalize, on the tier the journal names.
#[test]
fn a_session_runs_on_every_tier() {
    const PYSESSION: &str = include_str!("../../../../examples/tools/pysession.clad.toml");
    for t in ready_tiers("session") {
        eprintln!("session on tier {}", t.name);
        let p = Project::with_config(&t.config);
        p.write("tools/pysession.clad.toml", PYSESSION);
        p.write("data/in.csv", "name,lines\nairlock,4200\n");
        p.write("data/secret.txt", CANARY);
        let id = format!("conf-{}", t.name.replace('+', "-"));
        let started =
            p.run(&["session", "start", "--invocation-id", &id, "pysession", "data/in.csv", "results/s.json"]);
        started.assert_ok();
        let send = |line: &str| p.run(&["session", "send", &id, "eval", line]);
        send("summary['rows'] = len(rows)").assert_ok();
        let peek = send("print(open('data/secret.txt').read())");
        let shown = peek.envelope["content"]["output"].as_str().unwrap_or_default();
        assert!(!shown.contains(CANARY) && shown.contains("Error"), "{}: the sibling was read: {peek:#?}", t.name);
        assert!(!p.path("results/s.json").exists(), "{}: published before finalize", t.name);
        let done = p.run(&["session", "finalize", &id, "save()"]);
        done.assert_ok();
        let published: Value = serde_json::from_slice(&std::fs::read(p.path("results/s.json")).unwrap()).unwrap();
        assert_eq!(published, serde_json::json!({ "rows": 1 }), "{}", t.name);
        let records = p.journal_records(&id);
        let worker = records.iter().find(|r| r["kind"] == "WorkerStarted").expect("a WorkerStarted record");
        assert_eq!(worker["body"]["tier"], t.evidence, "{}: {worker:#}", t.name);
        assert_eq!(worker["body"]["session"], true, "{}: {worker:#}", t.name);
        assert_staging_empty(&p);
    }
}
