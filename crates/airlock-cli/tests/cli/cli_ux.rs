//! The first minutes of a user: `airlock init` and the command it suggests,
//! a second `init`, `airlock doctor`, and the configurations that must make
//! `airlock run` refuse before anything starts (a tier that is not built,
//! policy files that cannot be evaluated, a high-risk tool).

use crate::runkit::*;
use crate::util::{sha256_hex, Project, Run, CANARY};
use serde_json::json;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn empty_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("airlock-init-").tempdir().unwrap()
}

/// Every file under `dir` with its mode and content, and every directory with its mode.
fn snapshot(dir: &Path) -> BTreeMap<String, (u32, Option<Vec<u8>>)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (u32, Option<Vec<u8>>)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let path = e.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let mode = meta.permissions().mode();
            if meta.is_dir() {
                out.insert(rel, (mode, None));
                walk(root, &path, out);
            } else {
                out.insert(rel, (mode, Some(std::fs::read(&path).unwrap())));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().trim_start_matches("./").to_owned())
        .collect()
}

#[test]
fn init_makes_a_project_whose_suggested_command_publishes() {
    let dir = empty_dir();
    let init = airlock_in(dir.path(), &["init"]);
    init.assert_ok();
    for file in ["airlock.toml", "tools/wordcount.clad.toml", "data/example.txt"] {
        assert!(dir.path().join(file).is_file(), "{file} missing: {init:#?}");
    }
    for d in ["data", "results", "tools"] {
        assert!(dir.path().join(d).is_dir(), "{d}/ missing");
    }
    let state = std::fs::symlink_metadata(dir.path().join(".airlock")).unwrap();
    assert!(state.is_dir());
    assert_eq!(state.permissions().mode() & 0o777, 0o700, "the state dir must be private");
    let mut created = strings(&init.envelope["content"]["created"]);
    created.sort();
    assert_eq!(
        created,
        [".airlock/.gitignore", "airlock.toml", "data/example.txt", "tools/wordcount.clad.toml"],
        "{init:#?}"
    );
    assert_eq!(init.envelope["content"]["kept"], json!([]));

    // The suggested next step, exactly as printed.
    let next = init.envelope["content"]["next"].as_str().expect("content.next").to_owned();
    let words: Vec<&str> = next.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"airlock"), "{next}");
    assert_eq!(words.get(1), Some(&"run"), "{next}");
    let run = airlock_in(dir.path(), &words[1..]);
    run.assert_ok();
    let receipt = &run.envelope["created_files"][0];
    let out = receipt["path"].as_str().expect("a published file").to_owned();
    assert!(words.contains(&out.as_str()), "{next} published {out}");
    let bytes = std::fs::read(dir.path().join(&out)).unwrap();
    assert_eq!(receipt["bytes"], bytes.len() as u64);
    assert_eq!(receipt["sha256"], format!("sha256:{}", sha256_hex(&bytes)));
    let example = std::fs::read_to_string(dir.path().join("data/example.txt")).unwrap();
    let published: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(published, json!({ "words": example.split_whitespace().count() }));
    assert_eq!(staged_entries(dir.path()), Vec::<String>::new());

    // The same step again is refused: the output exists.
    let again = airlock_in(dir.path(), &words[1..]);
    again.assert_refused("output.exists", 73);
    assert_eq!(std::fs::read(dir.path().join(&out)).unwrap(), bytes);
}

#[test]
fn a_second_init_keeps_everything_and_changes_nothing() {
    let dir = empty_dir();
    airlock_in(dir.path(), &["init"]).assert_ok();
    // The user edits the example and the config.
    std::fs::write(dir.path().join("data/example.txt"), "edited by the user\n").unwrap();
    let mut config = std::fs::read_to_string(dir.path().join("airlock.toml")).unwrap();
    config.push_str("# edited\n");
    std::fs::write(dir.path().join("airlock.toml"), config).unwrap();
    let before = snapshot(dir.path());

    let again = airlock_in(dir.path(), &["init"]);
    again.assert_ok();
    assert_eq!(again.envelope["content"]["created"], json!([]), "{again:#?}");
    let mut kept = strings(&again.envelope["content"]["kept"]);
    kept.sort();
    assert_eq!(kept, [".airlock/.gitignore", "airlock.toml", "data/example.txt", "tools/wordcount.clad.toml"]);
    assert_eq!(snapshot(dir.path()), before, "a second init changed the project");
}

#[test]
fn doctor_reports_a_ready_native_tier_and_each_host_facility() {
    let p = Project::new();
    let run = p.run(&["doctor"]);
    run.assert_ok();
    let c = &run.envelope["content"];
    assert_eq!(c["tiers"]["native"]["ready"], true, "{c:#}");
    assert_eq!(c["configured_tier"], "native", "{c:#}");
    for facility in ["landlock", "user_namespaces", "openat2", "seccomp", "cgroup_delegation"] {
        let f = &c["host"][facility];
        assert!(f["ok"].is_boolean(), "{facility}: {c:#}");
        assert!(f["detail"].as_str().is_some_and(|d| !d.is_empty()), "{facility}: {c:#}");
    }
    // What the native tier needs is there, since it is ready.
    for needed in ["landlock", "user_namespaces", "seccomp"] {
        assert_eq!(c["host"][needed]["ok"], true, "{needed}: {c:#}");
    }
    // Every tier is reported, ready or not, with what decided it.
    for tier in ["native", "gvisor", "docker", "microvm"] {
        assert!(c["tiers"][tier]["ready"].is_boolean(), "{tier}: {c:#}");
        assert!(c["tiers"][tier]["detail"].as_str().is_some_and(|d| !d.is_empty()), "{tier}: {c:#}");
    }
    assert_eq!(c["tiers"]["native"]["ready"], true, "{c:#}");
    // This project configures no guest kernel: microvm is not ready, and why.
    assert_eq!(c["tiers"]["microvm"]["ready"], false, "{c:#}");
    assert!(c["tiers"]["microvm"]["detail"].as_str().unwrap().contains("[sandbox.microvm] kernel"), "{c:#}");
    // This project configures no docker image: not ready, and why.
    assert_eq!(c["tiers"]["docker"]["ready"], false, "{c:#}");
    assert!(c["tiers"]["docker"]["detail"].as_str().unwrap().contains("[sandbox.docker] image"), "{c:#}");
}

/// A project whose `slowcopy` would take 5 s and then write its output,
/// and the input holding a canary.
fn refusal_project(config: &str, tool_extra: &str) -> Project {
    let p = Project::with_config(config);
    p.write("data/in.txt", CANARY);
    let script = r#"sleep 5; cat "$1" > "$2""#;
    p.tool("slowcopy", &sh_tool("slowcopy", tool_extra, IO_ARGS, script, IO_FS));
    p
}

const ROOTS: &str = "[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n";

/// Nothing ran and nothing was published.
#[track_caller]
fn assert_nothing_started(p: &Project, run: &Run, status: &str, reason: &str, exit: i32) {
    assert_eq!(
        (run.status(), run.reason(), run.code),
        (status, reason, exit),
        "expected {status}/{reason}/{exit}:\n{run:#?}"
    );
    assert!(run.stderr.contains(reason), "{run:#?}");
    assert!(run.envelope.get("exit_code").is_none(), "a worker ran: {run:#?}");
    assert_ne!(run.envelope["stage"], "finished", "{run:#?}");
    assert_eq!(run.envelope["created_files"], json!([]));
    assert_absent_path(p, "results/out.txt");
    assert_no_candidates(p, "results");
    assert_eq!(staged_entries(p.root()), Vec::<String>::new(), "{}", p.tree());
    assert!(!run.stdout.contains(CANARY) && !run.stderr.contains(CANARY), "{run:#?}");
}

#[test]
fn a_tier_that_is_not_built_is_refused_and_starts_nothing() {
    let p = refusal_project(&format!("[sandbox]\ntier = \"docker\"\n{ROOTS}"), "");
    let run = p.run(&["run", "slowcopy", "data/in.txt", "results/out.txt"]);
    assert_nothing_started(&p, &run, "error", "sandbox.unavailable", 78);
    let doctor = p.run(&["doctor"]);
    assert_eq!((doctor.reason(), doctor.code), ("sandbox.unavailable", 78), "{doctor:#?}");
    assert_eq!(doctor.envelope["content"]["configured_tier"], "docker", "{doctor:#?}");
}

#[test]
fn a_policy_that_permits_nothing_refuses_every_run_before_anything_starts() {
    let p = refusal_project(&format!("{ROOTS}[policy]\nfiles = [\"p.cedar\"]\n"), "");
    p.write("p.cedar", "@id(\"nobody\")\npermit(principal == Airlock::Agent::\"nobody-at-all\", action, resource);\n");
    let run = p.run(&["run", "slowcopy", "data/in.txt", "results/out.txt"]);
    assert_nothing_started(&p, &run, "refused", "policy.denied", 77);
}

#[test]
fn high_risk_tools_stop_for_an_exact_call_approval() {
    for extra in ["risk_tier = \"high\"", "risk_tier = \"critical\"", "human_approval = true"] {
        let p = refusal_project(ROOTS, extra);
        let run = p.run(&["run", "slowcopy", "data/in.txt", "results/out.txt"]);
        // The call is kept for dispatch, and so is its staging reservation.
        let id = run.envelope["invocation_id"].as_str().unwrap().to_owned();
        assert_eq!(staged_entries(p.root()), [format!("leases/{id}"), format!("data/{id}")]);
        p.run(&["staging", "release", &id]).assert_ok();
        assert_nothing_started(&p, &run, "refused", "approval.required", 77);
        assert!(!run.envelope["error"]["message"].as_str().unwrap().is_empty());
    }
    // Medium risk is permitted.
    let p = Project::new();
    p.write("data/in.txt", "medium\n");
    let tool = sh_tool("shcopy", "risk_tier = \"medium\"", IO_ARGS, r#"cat "$1" > "$2""#, IO_FS);
    p.tool("shcopy", &tool);
    p.run(&["run", "shcopy", "data/in.txt", "results/out.txt"]).assert_ok();
}

/// A run refused after its inputs were snapshotted (policy or tier) keeps
/// no copy of them: the snapshot of a call that will never run is removed,
/// as it is after a call that ran. (A call waiting for approval keeps its
/// snapshot on purpose: dispatch runs it; see approval.rs.)
#[test]
fn a_run_refused_after_prepare_keeps_no_copy_of_its_inputs() {
    let configs = [
        ("policy.denied", format!("{ROOTS}[policy]\nfiles = [\"p.cedar\"]\n"), ""),
        ("sandbox.unavailable", format!("[sandbox]\ntier = \"docker\"\n{ROOTS}"), ""),
    ];
    let mut kept = Vec::new();
    for (reason, config, extra) in configs {
        let p = refusal_project(&config, extra);
        p.write(
            "p.cedar",
            "@id(\"nobody\")\npermit(principal == Airlock::Agent::\"nobody-at-all\", action, resource);\n",
        );
        let run = p.run(&["run", "slowcopy", "data/in.txt", "results/out.txt", "--invocation-id", "r-1"]);
        assert_eq!(run.reason(), reason, "{run:#?}");
        let snapshots = names(&p.path(".airlock/staging/data/r-1"));
        if !snapshots.is_empty() {
            let copy = std::fs::read(p.path(".airlock/staging/data/r-1/0")).unwrap_or_default();
            kept.push(format!(
                "{reason}: .airlock/staging/data/r-1 holds {snapshots:?}; 0 is the input: {}",
                copy == CANARY.as_bytes()
            ));
        }
    }
    assert!(kept.is_empty(), "snapshots of refused runs were kept:\n{}", kept.join("\n"));
}

#[test]
fn the_image_is_configurable_and_never_exposes_state_or_ceilings() {
    let p = crate::util::Project::with_config(
        "[sandbox]\nimage = [\"/usr\", \"/lib\", \"/lib64\"]\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n",
    );
    p.write(
        "tools/ls.clad.toml",
        "[tool]\nname = \"ls\"\nversion = \"1\"\ndescription = \"d\"\n[command]\nexec = [\"/usr/bin/sh\", \"-c\", \"for d in /usr /bin /sbin; do test -e $d && echo $d; done; true\"]\n",
    );
    let run = p.run(&["run", "ls"]);
    run.assert_ok();
    let listing = run.envelope["content"]["raw_output"].as_str().unwrap().to_owned();
    assert!(listing.contains("usr"), "{listing}");
    assert!(!listing.split_whitespace().any(|e| e == "lib64" || e == "sbin"), "only the configured image: {listing}");
    for bad in ["data", ".airlock", ""] {
        let q = crate::util::Project::new();
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(q.path(".airlock")).unwrap();
        let dir = q.root().join(bad).canonicalize().unwrap();
        q.write(
            "airlock.toml",
            format!(
                "[sandbox]\nimage = [{:?}]\n[filesystem]\nroots = [\"./data:data:ro\"]\n",
                dir.display().to_string()
            ),
        );
        let run = q.run(&["tools", "list"]);
        assert_eq!((run.reason(), run.code), ("config.invalid", 78), "image {bad:?}: {run:#?}");
    }
}
