//! Git queries through the shipping binary: snapshot, policy, journal and
//! the driver in a real native worker. The sandboxed answers must equal
//! the driver's answers computed in-process on the same repository
//! (which `airlock-git`'s tests compare with the `git` CLI), and the
//! hostile cases are tried for real.

use crate::util::{Project, CANARY};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

/// Runs git in `dir` with no host configuration and fixed identities and dates.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    static CLOCK: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1_700_000_000);
    let t = CLOCK.fetch_add(60, std::sync::atomic::Ordering::SeqCst);
    let home = dir.parent().unwrap().join(".git-test-home");
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Ada")
        .env("GIT_AUTHOR_EMAIL", "ada@example.invalid")
        .env("GIT_COMMITTER_NAME", "Cid")
        .env("GIT_COMMITTER_EMAIL", "cid@example.invalid")
        .env("GIT_AUTHOR_DATE", format!("{t} +0100"))
        .env("GIT_COMMITTER_DATE", format!("{t} +0100"))
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `data/repo`: a merge, a rename, a binary file, staged and unstaged changes.
pub(crate) fn busy(p: &Project) -> std::path::PathBuf {
    let r = p.path("data/repo");
    std::fs::create_dir_all(&r).unwrap();
    git(&r, &["init", "-q", "-b", "main"]);
    let w = |rel: &str, bytes: &[u8]| {
        let f = r.join(rel);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, bytes).unwrap();
    };
    w("a.txt", b"1\n2\n3\n4\n5\n6\n7\n8\n");
    w("bin.dat", b"\x00bin\x00");
    w("dir/c.txt", b"charlie\ndelta\necho\n");
    git(&r, &["add", "-A"]);
    git(&r, &["commit", "-q", "-m", "first"]);
    git(&r, &["checkout", "-q", "-b", "side"]);
    w("a.txt", b"1\n2\nthree\n4\n5\n6\n7\n8\n");
    git(&r, &["commit", "-q", "-am", "side"]);
    git(&r, &["checkout", "-q", "main"]);
    w("b.txt", b"b\n");
    git(&r, &["add", "b.txt"]);
    git(&r, &["commit", "-q", "-m", "main"]);
    git(&r, &["merge", "-q", "--no-ff", "-m", "merge side", "side"]);
    git(&r, &["mv", "dir/c.txt", "dir/d.txt"]);
    w("bin.dat", b"\x00bin changed\x00");
    git(&r, &["add", "bin.dat"]);
    w("a.txt", b"0\n1\n2\nthree\n4\n5\n6\n7\n8\n9\n");
    std::fs::remove_file(r.join("b.txt")).unwrap();
    w("untracked.txt", b"u\n");
    r
}

/// The driver's answer computed in-process on a snapshot of `repo`.
pub(crate) fn in_process(repo: &Path, request: Value) -> Value {
    let op = airlock_git::Operation::parse(request["operation"].as_str().unwrap()).unwrap();
    let dir = airlock_hostfs::Dir::open_ambient(&airlock_hostfs::HostAuthority::ambient(), repo).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let archive = scratch.path().join("archive");
    let mut file = std::fs::File::create(&archive).unwrap();
    let control = airlock_git::ControlIds::new();
    let stats =
        airlock_git::snapshot::take(&dir, op.scope(), airlock_git::Limits::default(), &control, &mut file).unwrap();
    let json = airlock_git::driver::run(&request.to_string(), &archive, &scratch.path().join("repo")).unwrap();
    let mut answer = serde_json::from_str(&json).unwrap();
    stats.annotate(&mut answer);
    answer
}

#[test]
fn sandboxed_answers_equal_the_drivers_on_a_busy_repository() {
    let p = Project::new();
    let repo = busy(&p);
    for (op, extra) in
        [("git_status", vec![]), ("git_log", vec!["max_count=3"]), ("git_diff", vec![]), ("git_staged_diff", vec![])]
    {
        let mut args = vec!["query", op, "path=data/repo"];
        args.extend(extra.iter().copied());
        let run = p.run(&args);
        run.assert_ok();
        let mut request = json!({ "operation": op });
        if op == "git_log" {
            request["max_count"] = json!(3);
        }
        assert_eq!(run.envelope["content"], in_process(&repo, request), "{op}");
        let descriptor = Project::descriptor(&p.path(".airlock"), &run);
        let snap = &descriptor["command_boundary"]["filesystem"]["snapshot"];
        assert_eq!(snap["kind"], json!("git"));
        assert!(snap["files"].as_u64().unwrap() > 5, "{snap}");
    }
    // A few facts checked against git directly.
    let status = p.run(&["query", "git_status", "path=data/repo"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    assert_eq!(status.envelope["content"]["head"]["commit"], json!(head.trim()));
    let entries = status.envelope["content"]["entries"].as_array().unwrap();
    let renamed = entries.iter().find(|e| e["path"] == json!("dir/d.txt")).expect("the rename is listed");
    assert_eq!((&renamed["index"], &renamed["from"]), (&json!("R"), &json!("dir/c.txt")));
    let log = p.run(&["query", "git_log", "path=data/repo", "max_count=1"]);
    assert_eq!(log.envelope["content"]["commits"][0]["summary"], json!("merge side"));
    assert_eq!(log.envelope["content"]["commits"][0]["parents"].as_array().unwrap().len(), 2);
}

/// `airlock query git_*` builds the driver's sandbox while it snapshots
/// the repository (`[sandbox] warm_pool` > 0, no cgroup of its own here):
/// the driver, a bound program, runs in it and answers as a cold one does.
#[test]
fn a_git_query_runs_in_the_sandbox_it_built_while_snapshotting() {
    let p = Project::new();
    let repo = busy(&p);
    let cold = Project::with_config(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n[sandbox]\nwarm_pool = 0\n",
    );
    let cold_repo = busy(&cold);
    for op in ["git_status", "git_diff", "git_log"] {
        let warm = p.run(&["query", op, "path=data/repo"]);
        warm.assert_ok();
        assert_eq!(warm.envelope["evidence"]["limits"]["warm_sandbox"], true, "{op}: {warm:#?}");
        assert_eq!(warm.envelope["content"], in_process(&repo, json!({ "operation": op })), "{op}");
        let without = cold.run(&["query", op, "path=data/repo"]);
        without.assert_ok();
        assert!(without.envelope["evidence"]["limits"].get("warm_sandbox").is_none(), "{op}: {without:#?}");
        assert_eq!(without.envelope["content"], in_process(&cold_repo, json!({ "operation": op })), "{op}");
    }
    p.run(&["journal", "verify"]).assert_ok();
}

/// The Git driver built beside the `airlock` under test (`airlock-git`'s
/// binary: the README's `cargo test --workspace` builds it).
fn driver() -> std::path::PathBuf {
    let driver = Path::new(crate::util::AIRLOCK).with_file_name("airlock-git-driver");
    assert!(driver.is_file(), "{} is missing: build the workspace (cargo test --workspace)", driver.display());
    driver
}

/// Which program a Git query's worker runs: `airlock-git-driver` beside
/// the `airlock` that runs, else `airlock` itself; the answers are the
/// same. On the shipping binaries, run from a directory of links to them.
#[test]
fn the_driver_beside_airlock_is_the_one_run_and_without_one_airlock_is_its_own() {
    use crate::init_program::link_or_copy;
    let p = Project::new();
    let repo = busy(&p);
    let bin = tempfile::tempdir().unwrap();
    link_or_copy(Path::new(crate::util::AIRLOCK), &bin.path().join("airlock"));
    let args = ["query", "git_status", "path=data/repo"];
    let query = || p.run_command(p.command_of(&bin.path().join("airlock"), &args), &args);
    let expected = in_process(&repo, json!({ "operation": "git_status" }));

    // The query answers as in-process, and `doctor` says which driver ran.
    let answers = |small: bool, doctor_says: &str| {
        let run = query();
        run.assert_ok();
        assert_eq!(run.envelope["content"], expected);
        let doctor = p.run_command(p.command_of(&bin.path().join("airlock"), &["doctor"]), &["doctor"]);
        let report = &doctor.envelope["content"]["host"]["git_driver"];
        assert_eq!(report["ok"], small, "{report}");
        assert!(report["detail"].as_str().unwrap().contains(doctor_says), "{report}");
    };

    // Nothing beside it: airlock is its own driver.
    answers(false, "its own Git driver");

    // A program beside it that is no driver is the one run: the query
    // fails without an answer.
    let impostor = bin.path().join("airlock-git-driver");
    link_or_copy(Path::new("/bin/false"), &impostor);
    let run = query();
    assert_eq!(run.reason(), "tool.failed", "{run:#?}");
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("without an answer"), "{run:#?}");

    // The driver of this build beside it: the same answer.
    std::fs::remove_file(&impostor).unwrap();
    link_or_copy(&driver(), &impostor);
    answers(true, "answers each Git query");
    p.run(&["journal", "verify"]).assert_ok();
}

/// The driver alone is no command; a driver of another build (this one's
/// with another fingerprint written over its own) beside airlock refuses
/// the request before it reads anything, and the query says why
/// (`helper.mismatch`, which the runtime believes of a worker).
#[test]
fn a_driver_of_another_build_refuses_the_query() {
    use crate::init_program::link_or_copy;
    use std::os::unix::fs::PermissionsExt;
    let out = Command::new(driver()).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a command"), "{out:?}");

    let p = Project::new();
    busy(&p);
    let bin = tempfile::tempdir().unwrap();
    link_or_copy(Path::new(crate::util::AIRLOCK), &bin.path().join("airlock"));
    let ours = airlock_fsproto::BUILD_FINGERPRINT.as_bytes();
    let mut bytes = std::fs::read(driver()).unwrap();
    let mut patched = 0;
    while let Some(at) = bytes.windows(ours.len()).position(|w| w == ours) {
        bytes[at..at + ours.len()].copy_from_slice(b"0123456789abcdef0123456789abcdef");
        patched += 1;
    }
    assert!(patched >= 1, "the fingerprint is embedded in the driver");
    let other = bin.path().join("airlock-git-driver");
    std::fs::write(&other, bytes).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).unwrap();

    let args = ["query", "git_status", "path=data/repo"];
    let run = p.run_command(p.command_of(&bin.path().join("airlock"), &args), &args);
    assert_eq!(run.reason(), "helper.mismatch", "{run:#?}");
    let message = run.envelope["error"]["message"].as_str().unwrap();
    assert!(message.contains("install the airlock-git-driver built with this airlock"), "{run:#?}");
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn unchanged_files_are_recorded_by_stat_alone_and_the_answers_stay_git_s() {
    let p = Project::new();
    let repo = busy(&p);
    // The index a second newer than every file: none is racy.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    git(&repo, &["update-index", "-q", "--refresh"]);
    for op in ["git_status", "git_diff"] {
        let run = p.run(&["query", op, "path=data/repo"]);
        run.assert_ok();
        assert_eq!(run.envelope["content"], in_process(&repo, json!({ "operation": op })), "{op}");
        let snap = &Project::descriptor(&p.path(".airlock"), &run)["command_boundary"]["filesystem"]["snapshot"];
        // bin.dat (staged, unchanged since) and untracked.txt; a.txt changed.
        assert_eq!(snap["stat_only"], json!(2), "{op}: {snap}");
    }
    let run = p.run(&["query", "git_status", "path=data/repo"]);
    let ours: Vec<&str> =
        run.envelope["content"]["entries"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap()).collect();
    let theirs = git(&repo, &["status", "--porcelain", "--untracked-files=all"]);
    let mut theirs: Vec<&str> = theirs.lines().map(|l| l[3..].rsplit(" -> ").next().unwrap()).collect();
    theirs.sort_unstable();
    assert_eq!(ours, theirs);
}

#[test]
fn a_detached_head_through_the_sandbox() {
    let p = Project::new();
    let repo = busy(&p);
    git(&repo, &["stash", "-q", "-u"]);
    git(&repo, &["checkout", "-q", "--detach", "HEAD~1"]);
    let run = p.run(&["query", "git_status", "path=data/repo"]);
    run.assert_ok();
    let head = &run.envelope["content"]["head"];
    assert_eq!(head["detached"], json!(true));
    assert_eq!(head["commit"], json!(git(&repo, &["rev-parse", "HEAD"]).trim()));
}

#[test]
fn a_hostile_repository_runs_nothing_in_the_sandbox() {
    let p = Project::new();
    let r = p.path("data/repo");
    std::fs::create_dir_all(&r).unwrap();
    git(&r, &["init", "-q", "-b", "main"]);
    std::fs::write(r.join("a.txt"), "a\n").unwrap();
    git(&r, &["add", "a.txt"]);
    git(&r, &["commit", "-q", "-m", "a"]);
    // Every way a repository can name a command points at a script that
    // would leave a canary file (in /tmp, writable by the worker too).
    let canary_dir = tempfile::Builder::new().prefix("airlock-git-canary-").tempdir().unwrap();
    std::fs::set_permissions(canary_dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let canary = canary_dir.path().join("ran");
    let script = r.join("evil.sh");
    std::fs::write(&script, format!("#!/bin/sh\ntouch {}\ntouch /tmp/ran\ncat\n", canary.display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for hook in ["pre-commit", "post-checkout", "post-index-change", "fsmonitor-watchman"] {
        let h = r.join(".git/hooks").join(hook);
        std::fs::write(&h, format!("#!/bin/sh\ntouch {}\n", canary.display())).unwrap();
        std::fs::set_permissions(&h, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    // Where the script lies once the driver has unpacked the repository.
    let s = "/tmp/repo/evil.sh";
    let mut config = std::fs::read_to_string(r.join(".git/config")).unwrap();
    config.push_str(&format!(
        "[core]\n\tfsmonitor = {s}\n\thooksPath = .git/hooks\n\tsshCommand = {s}\n\tpager = {s}\n\
         [filter \"evil\"]\n\tclean = {s}\n\tsmudge = {s}\n\tprocess = {s}\n\trequired = true\n\
         [diff \"evil\"]\n\ttextconv = {s}\n\tcommand = {s}\n"
    ));
    std::fs::write(r.join(".git/config"), config).unwrap();
    std::fs::write(r.join(".gitattributes"), "* filter=evil diff=evil\n").unwrap();
    std::fs::write(r.join("a.txt"), "changed\n").unwrap();
    // A symlinked "submodule" directory pointing at a canary outside.
    std::os::unix::fs::symlink(p.path("outside"), r.join("sub")).unwrap();
    for op in ["git_status", "git_diff", "git_staged_diff", "git_log"] {
        let run = p.run(&["query", op, "path=data/repo"]);
        run.assert_ok();
        assert!(!run.stdout.contains(CANARY), "{op} read outside the repository: {}", run.stdout);
    }
    assert!(!canary.exists(), "a command of the hostile repository ran");
    let diff = p.run(&["query", "git_diff", "path=data/repo"]);
    assert_eq!(diff.envelope["content"]["files"][0]["hunks"], json!("@@ -1 +1 @@\n-a\n+changed\n"));
    let status = p.run(&["query", "git_status", "path=data/repo"]);
    assert!(status.envelope["content"]["entries"].to_string().contains(r#""path":"sub""#), "recorded as a link");
}

#[test]
fn alternates_outside_the_repository_are_not_consulted_in_the_sandbox() {
    let p = Project::new();
    let outside = p.path("outside/objects-owner");
    std::fs::create_dir_all(&outside).unwrap();
    git(&outside, &["init", "-q", "-b", "main"]);
    std::fs::write(outside.join("s.txt"), CANARY).unwrap();
    git(&outside, &["add", "s.txt"]);
    git(&outside, &["commit", "-q", "-m", "outside"]);
    let r = p.path("data/repo");
    std::fs::create_dir_all(&r).unwrap();
    git(&r, &["init", "-q", "-b", "main"]);
    std::fs::write(r.join(".git/objects/info/alternates"), format!("{}\n", outside.join(".git/objects").display()))
        .unwrap();
    std::fs::write(r.join(".git/refs/heads/main"), git(&outside, &["rev-parse", "HEAD"])).unwrap();
    let run = p.run(&["query", "git_log", "path=data/repo"]);
    assert_eq!((run.status(), run.reason()), ("failed", "git.repository_invalid"), "{run:#?}");
    assert!(!run.stdout.contains(CANARY));
}

#[test]
fn limits_and_bad_repositories_are_refused_before_anything_runs() {
    let p = Project::new();
    let r = p.path("data/repo");
    std::fs::create_dir_all(r.join(".git")).unwrap();
    for i in 0..airlock_git::MAX_FILES {
        if i % 1000 == 0 {
            std::fs::create_dir_all(r.join(format!("d{}", i / 1000))).unwrap();
        }
        std::fs::write(r.join(format!("d{}/f{i}", i / 1000)), b"").unwrap();
    }
    std::fs::write(r.join("one-too-many"), b"").unwrap();
    let run = p.run(&["query", "git_status", "path=data/repo", "--invocation-id", "git-limit-1"]);
    run.assert_refused("git.snapshot_too_large", 77);
    assert!(p.path(".airlock/invocations/git-limit-1").is_dir(), "the refused id is reserved");
    p.run(&["query", "git_log", "path=data/repo", "--invocation-id", "git-limit-1"])
        .assert_refused("invocation.duplicate", 77);
    let journal = p.run(&["journal", "show", "--json"]);
    assert!(journal.stdout.contains("git.snapshot_too_large"), "the refusal is journaled");

    std::fs::write(p.path("data/pointer/.git"), "").unwrap_or_else(|_| {
        std::fs::create_dir_all(p.path("data/pointer")).unwrap();
        std::fs::write(p.path("data/pointer/.git"), "gitdir: /etc\n").unwrap();
    });
    p.run(&["query", "git_status", "path=data/pointer"]).assert_refused("git.not_a_repository", 66);
    p.run(&["query", "git_status", "path=../outside"]).assert_refused("path.traversal", 77);
    p.run(&["query", "git_nope", "path=data/repo"]).assert_refused("usage", 64);
    p.run(&["query", "git_log", "path=data/repo", "max_count=0"]).assert_refused("arg.out_of_range", 65);
    p.run(&["query", "git_status", "path=data/repo", "max_count=3"]).assert_refused("arg.unknown", 65);
}

#[test]
fn cedar_sees_the_snapshot_and_can_bound_it() {
    let p =
        Project::with_config("[filesystem]\nroots = [\"./data:data:ro\"]\n[policy]\nfiles = [\"policy/*.cedar\"]\n");
    p.write("policy/a.cedar", "@id(\"permit-all\")\npermit(principal, action, resource);\n");
    // A policy about another tool must not stop Git queries from validating.
    p.write(
        "policy/c.cedar",
        "@id(\"no-copy\")\nforbid(principal, action == Airlock::Action::\"tool_call::copy\", resource);\n",
    );
    p.write(
        "policy/b.cedar",
        r#"@id("small-status-only")
forbid(principal, action == Airlock::Action::"tool_call::git_status", resource) when {
  context.invocation.resolved.command_boundary.filesystem has snapshot &&
  context.invocation.resolved.command_boundary.filesystem.snapshot.files > 20
};"#,
    );
    let r = p.path("data/repo");
    std::fs::create_dir_all(&r).unwrap();
    git(&r, &["init", "-q", "-b", "main"]);
    let ok = p.run(&["query", "git_status", "path=data/repo"]);
    ok.assert_ok();
    assert_eq!(ok.envelope["evidence"]["policy_ids"], json!(["permit-all"]));
    for i in 0..30 {
        std::fs::write(r.join(format!("f{i}")), "x\n").unwrap();
    }
    let denied = p.run(&["query", "git_status", "path=data/repo"]);
    denied.assert_refused("policy.denied", 77);
    assert!(denied.envelope["error"]["message"].as_str().unwrap().contains("small-status-only"), "{denied:#?}");
    p.run(&["query", "git_log", "path=data/repo"]).assert_ok();
}
