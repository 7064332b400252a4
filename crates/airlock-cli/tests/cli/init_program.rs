//! Which program airlock starts as the sandbox init: `airlock-sandbox-init`
//! beside the `airlock` that runs, else `airlock` itself (issue 22: a call
//! then execs a small init instead of all of airlock). On the shipping
//! binaries, run from a directory that holds links to them.

use std::path::Path;
use std::process::Command;

use crate::runkit::*;
use crate::util::{Project, AIRLOCK};

/// The init built beside the `airlock` under test (`airlock-sandbox`'s
/// binary: the README's `cargo test --workspace` builds it).
fn init() -> std::path::PathBuf {
    let init = Path::new(AIRLOCK).with_file_name("airlock-sandbox-init");
    assert!(init.is_file(), "{} is missing: build the workspace (cargo test --workspace)", init.display());
    init
}

pub(crate) fn link_or_copy(from: &Path, to: &Path) {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("{} -> {}: {e}", from.display(), to.display()));
    }
}

/// `airlock run shcopy data/in.txt OUT` with the `airlock` in `bin`.
fn copy_with(p: &Project, bin: &Path, out: &str) -> crate::util::Run {
    let args = ["run", "shcopy", "data/in.txt", out];
    p.run_command(p.command_of(&bin.join("airlock"), &args), &args)
}

#[test]
fn the_init_beside_airlock_is_the_one_started_and_without_one_airlock_is_its_own() {
    let p = Project::new();
    p.write("data/in.txt", "one line\n");
    p.tool("shcopy", &sh_tool("shcopy", "", IO_ARGS, r#"cat "$1" > "$2""#, IO_FS));
    let bin = tempfile::tempdir().unwrap();
    link_or_copy(Path::new(AIRLOCK), &bin.path().join("airlock"));

    // Nothing beside it: airlock is its own init, and `doctor` says so.
    let doctor = |bin: &Path| {
        let run = p.run_command(p.command_of(&bin.join("airlock"), &["doctor"]), &["doctor"]);
        run.envelope["content"]["host"]["sandbox_init"].clone()
    };
    let report = doctor(bin.path());
    assert_eq!(report["ok"], false, "{report}");
    assert!(report["detail"].as_str().unwrap().contains("its own sandbox init"), "{report}");
    copy_with(&p, bin.path(), "results/alone.txt").assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/alone.txt")).unwrap(), "one line\n");

    // A program beside it that is no init is the one started: the call
    // fails before any tool runs and publishes nothing.
    let impostor = bin.path().join("airlock-sandbox-init");
    link_or_copy(Path::new("/bin/false"), &impostor);
    let run = copy_with(&p, bin.path(), "results/impostor.txt");
    assert_eq!(run.reason(), "sandbox.setup_failed", "{run:#?}");
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("without starting PID 1"), "{run:#?}");
    assert!(!p.path("results/impostor.txt").exists(), "{}", p.tree());

    // The init of this build beside it: the call runs through it.
    std::fs::remove_file(&impostor).unwrap();
    link_or_copy(&init(), &impostor);
    copy_with(&p, bin.path(), "results/small.txt").assert_ok();
    let report = doctor(bin.path());
    assert_eq!(report["ok"], true, "{report}");
    assert!(report["detail"].as_str().unwrap().contains("airlock-sandbox-init starts each native call"), "{report}");
    assert_eq!(std::fs::read_to_string(p.path("results/small.txt")).unwrap(), "one line\n");
}

#[test]
fn the_init_binary_alone_is_not_a_command() {
    let out = Command::new(init()).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a command"), "{out:?}");
}

/// A static (musl) build of the init from the same sources
/// (`scripts/static-init.sh DIR`; CI sets `AIRLOCK_TEST_STATIC_INIT` to it):
/// it has no program interpreter, pairs with this build's `airlock` (the
/// build fingerprint is the sources', not the target's), and calls run
/// through it.
#[test]
fn a_static_init_of_the_same_sources_runs_calls() {
    let Some(init) = std::env::var_os("AIRLOCK_TEST_STATIC_INIT") else {
        eprintln!("skipped: AIRLOCK_TEST_STATIC_INIT is not set (scripts/static-init.sh DIR builds one)");
        return;
    };
    let bytes = std::fs::read(&init).unwrap();
    assert!(!bytes.windows(8).any(|w| w == b"ld-linux"), "{init:?} names a dynamic loader: not a static build");
    let p = Project::new();
    p.write("data/in.txt", "static line\n");
    p.tool("shcopy", &sh_tool("shcopy", "", IO_ARGS, r#"cat "$1" > "$2""#, IO_FS));
    let bin = tempfile::tempdir().unwrap();
    link_or_copy(Path::new(AIRLOCK), &bin.path().join("airlock"));
    link_or_copy(Path::new(&init), &bin.path().join("airlock-sandbox-init"));
    copy_with(&p, bin.path(), "results/static.txt").assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/static.txt")).unwrap(), "static line\n");
}
