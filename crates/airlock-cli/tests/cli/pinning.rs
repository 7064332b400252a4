//! Pinning (issue 24 items 5 and 9): helpers from another build are refused
//! before any root is opened, stored records of an unknown version are
//! refused on load, and `[mcp]` upstreams whose tool schema is not signed
//! by the pinned key never see a staged file.

use crate::isolated::root;
use crate::util::{Project, AIRLOCK};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The shipping helper `name` (beside `airlock`).
fn shipped(name: &str) -> PathBuf {
    Path::new(AIRLOCK).with_file_name(name)
}

/// The build fingerprint `program --handshake` reports.
fn fingerprint(program: &Path) -> String {
    let out = std::process::Command::new(program).arg("--handshake").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    let build = line.trim_end().rsplit(' ').next().unwrap().to_owned();
    assert_eq!(build.len(), 32, "{line:?}");
    build
}

/// A copy of the shipping helper `name` in the project's `bin/` whose
/// embedded build fingerprint is replaced by `other` (another build of the
/// same program, as far as the handshake can tell).
fn other_build(p: &Project, name: &str, other: &str) -> PathBuf {
    let original = shipped(name);
    let ours = fingerprint(&original);
    let mut bytes = std::fs::read(&original).unwrap();
    let mut patched = 0;
    let mut at = 0;
    while let Some(i) = bytes[at..].windows(ours.len()).position(|w| w == ours.as_bytes()) {
        bytes[at + i..at + i + ours.len()].copy_from_slice(other.as_bytes());
        at += i + ours.len();
        patched += 1;
    }
    assert!(patched >= 1, "the fingerprint is embedded in {name}");
    let path = p.path(&format!("bin/{name}"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(fingerprint(&path), other, "the patched copy reports the other build");
    path
}

fn isolated_read(p: &Project, roots: &[String]) -> crate::util::Run {
    let mut args = vec!["isolated".to_owned()];
    for r in roots {
        args.extend(["--root".to_owned(), r.clone()]);
    }
    args.extend(["--", "airlock-fs", "read", "data", "a.txt"].map(String::from));
    p.run(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

const OTHER: &str = "0123456789abcdef0123456789abcdef";

#[test]
fn a_broker_from_another_build_is_refused_before_any_root_is_opened() {
    let p = Project::new();
    p.write("data/a.txt", "pinned");
    let ours = fingerprint(&shipped("airlock-broker"));
    assert_eq!(ours, fingerprint(&shipped("airlock-fs")), "one build, one fingerprint");
    let broker = other_build(&p, "airlock-broker", OTHER);
    let config = format!("state_dir = \".airlock\"\n[broker]\nprogram = \"{}\"\n", broker.display());
    p.write("airlock.toml", &config);
    let run = isolated_read(&p, &[root(&p, "data", "data", "r")]);
    run.assert_refused("helper.mismatch", 77);
    let message = run.envelope["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains(&ours) && message.contains(OTHER), "names the expected and found build: {message}");
    // The helper is checked before any root: a root that cannot be opened
    // is not what refuses.
    let run = isolated_read(&p, &[root(&p, "gone", "missing", "r")]);
    run.assert_refused("helper.mismatch", 77);

    // The same copy, unpatched, at the same configured place, runs.
    std::fs::copy(shipped("airlock-broker"), &broker).unwrap();
    let run = isolated_read(&p, &[root(&p, "data", "data", "r")]);
    run.assert_ok();
    assert_eq!(run.envelope["content"]["output"]["raw_output"], "pinned");
}

#[test]
fn a_client_from_another_build_or_a_program_without_handshake_is_refused() {
    let p = Project::new();
    p.write("data/a.txt", "x");
    let client = other_build(&p, "airlock-fs", OTHER);
    p.write("airlock.toml", format!("state_dir = \".airlock\"\n[broker]\nclient = \"{}\"\n", client.display()));
    isolated_read(&p, &[root(&p, "data", "data", "r")]).assert_refused("helper.mismatch", 77);
    // A program that does not speak the handshake at all (an older broker
    // refuses the flag; `true` answers nothing).
    for program in ["/bin/true", "/bin/false"] {
        p.write("airlock.toml", format!("state_dir = \".airlock\"\n[broker]\nprogram = \"{program}\"\n"));
        let run = isolated_read(&p, &[root(&p, "data", "data", "r")]);
        run.assert_refused("helper.mismatch", 77);
        assert!(run.envelope["error"]["message"].as_str().unwrap_or_default().contains("no handshake"), "{run:#?}");
    }
}

/// Rewrites the JSON file `rel` of `p` with `change`.
fn edit_json(p: &Project, rel: &str, change: impl FnOnce(&mut serde_json::Value)) {
    let mut value: serde_json::Value = serde_json::from_slice(&std::fs::read(p.path(rel)).unwrap()).unwrap();
    change(&mut value);
    std::fs::write(p.path(rel), serde_json::to_vec(&value).unwrap()).unwrap();
}

fn low_risk_prepared(id: &str) -> Project {
    let p = Project::new();
    p.write("data/in.txt", "kept\n");
    p.run(&["prepare", "copy", "data/in.txt", "results/out.txt", "--invocation-id", id]).assert_ok();
    p
}

#[test]
fn a_prepared_record_or_descriptor_of_another_version_is_refused_on_load() {
    for (pointer, value) in [("/format", 3), ("/descriptor/version", 3), ("/format", 1)] {
        let p = low_risk_prepared("later");
        let rel = ".airlock/invocations/later/prepared.json";
        edit_json(&p, rel, |v| *v.pointer_mut(pointer).unwrap() = value.into());
        let run = p.run(&["dispatch", "later"]);
        run.assert_refused("record.version", 65);
        let message = run.envelope["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("version {value}")) && message.contains(pointer), "{message}");
        assert!(!p.path("results/out.txt").exists(), "nothing ran");
    }
    // The same record, untouched, dispatches.
    let p = low_risk_prepared("later");
    p.run(&["dispatch", "later"]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "kept\n");
}

#[test]
fn a_staging_reservation_of_another_version_is_refused_on_load() {
    let p = low_risk_prepared("later");
    let rel = ".airlock/staging/leases/later";
    let stored: serde_json::Value = serde_json::from_slice(&std::fs::read(p.path(rel)).unwrap()).unwrap();
    assert_eq!(stored["version"], 1, "{stored}");
    edit_json(&p, rel, |v| v["version"] = 2.into());
    let run = p.run(&["dispatch", "later"]);
    run.assert_refused("record.version", 65);
    assert!(!p.path("results/out.txt").exists(), "nothing ran");
    // Another airlock's reservation is kept, not reaped as damage.
    p.run(&["staging", "gc"]).assert_ok();
    assert!(p.path(rel).exists() && p.path(".airlock/staging/data/later").exists());
}

#[test]
fn an_approval_of_another_version_is_refused_on_load() {
    let (p, alice) = crate::approvers::approved_project(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n",
    );
    let tool = std::fs::read_to_string(p.path("tools/copy.clad.toml")).unwrap();
    p.write("tools/copy.clad.toml", tool.replace("[tool]\n", "[tool]\nrisk_tier = \"high\"\n"));
    p.write("data/in.txt", "approved\n");
    let first = p.run(&["run", "copy", "data/in.txt", "results/out.txt"]);
    first.assert_refused("approval.required", 77);
    let id = first.envelope["invocation_id"].as_str().unwrap().to_owned();
    let digest = first.envelope["evidence"]["descriptor_sha256"].as_str().unwrap().to_owned();
    alice.approve(&p, &digest, &[]).assert_ok();
    edit_json(&p, &format!(".airlock/approvals/{id}"), |v| v["statement"]["type"] = "airlock.approval.v2".into());
    let run = p.run(&["dispatch", &id]);
    run.assert_refused("record.version", 65);
    assert!(run.envelope["error"]["message"].as_str().unwrap_or_default().contains("airlock.approval.v2"));
    assert!(!p.path("results/out.txt").exists(), "nothing ran");
}
