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
