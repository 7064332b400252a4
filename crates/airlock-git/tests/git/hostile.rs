//! Hostile repositories, tried for real: nothing runs, nothing outside
//! the repository is read or followed.

use crate::util::{answer, op, take, Repo};
use airlock_core::ReasonCode;
use airlock_git::{Limits, Operation, Skip};
use serde_json::json;

/// A repository whose every hook, fsmonitor, filter, pager, editor and
/// ssh setting would write `canary` if anything ran it.
fn booby_trapped(r: &Repo, canary: &std::path::Path) {
    let script = r.tmp.path().join("evil.sh");
    std::fs::write(&script, format!("#!/bin/sh\ntouch {}\ncat\n", canary.display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let s = script.display();
    for hook in ["pre-commit", "post-checkout", "post-index-change", "fsmonitor-watchman", "reference-transaction"] {
        let p = r.path().join(".git/hooks").join(hook);
        std::fs::write(&p, format!("#!/bin/sh\ntouch {}\n", canary.display())).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let config = r.path().join(".git/config");
    let mut c = std::fs::read_to_string(&config).unwrap();
    c.push_str(&format!(
        "[core]\n\tfsmonitor = {s}\n\thooksPath = {hooks}\n\tsshCommand = {s}\n\tpager = {s}\n\teditor = {s}\n\
         \tattributesFile = /etc/passwd\n\texcludesFile = /etc/shadow\n\
         [filter \"evil\"]\n\tclean = {s}\n\tsmudge = {s}\n\tprocess = {s}\n\trequired = true\n\
         [diff \"evil\"]\n\ttextconv = {s}\n\tcommand = {s}\n\
         [include]\n\tpath = {s}\n",
        hooks = r.tmp.path().display()
    ));
    std::fs::write(&config, c).unwrap();
    std::fs::write(r.path().join(".gitattributes"), "* filter=evil diff=evil\n").unwrap();
}

#[test]
fn hooks_fsmonitor_filters_and_drivers_run_nothing() {
    let r = Repo::new();
    r.write("a.txt", "a\n");
    r.git(&["add", "a.txt"]);
    r.git(&["commit", "-q", "-m", "a"]);
    let canary = r.tmp.path().join("canary");
    booby_trapped(&r, &canary);
    r.write("a.txt", "changed\n");
    for name in ["git_status", "git_diff", "git_staged_diff", "git_log"] {
        let got = answer(&r.path(), op(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got.is_object());
    }
    assert!(!canary.exists(), "something ran the hostile repository's commands");
    let diff = answer(&r.path(), op("git_diff")).unwrap();
    assert_eq!(diff["files"][0]["path"], json!("a.txt"));
    assert_eq!(diff["files"][0]["hunks"], json!("@@ -1 +1 @@\n-a\n+changed\n"), "no textconv, no filter");
}

#[test]
fn a_gitdir_pointer_file_is_refused_not_followed() {
    let r = Repo::new();
    let other = tempfile::tempdir().unwrap();
    let wt = other.path().join("repo");
    std::fs::create_dir(&wt).unwrap();
    std::fs::write(wt.join(".git"), format!("gitdir: {}\n", r.path().join(".git").display())).unwrap();
    let e = take(&wt, Operation::GitStatus, Limits::default()).unwrap_err();
    assert_eq!(e.code(), ReasonCode::GitNotRepository, "{e}");
    std::fs::remove_file(wt.join(".git")).unwrap();
    std::os::unix::fs::symlink(r.path().join(".git"), wt.join(".git")).unwrap();
    let e = take(&wt, Operation::GitStatus, Limits::default()).unwrap_err();
    assert_eq!(e.code(), ReasonCode::GitNotRepository, "{e}");
}

#[test]
fn alternates_pointing_outside_are_never_consulted() {
    // `outside` holds the only copy of the objects; `r` borrows them.
    let outside = Repo::new();
    outside.write("secret.txt", "outside secret\n");
    outside.git(&["add", "secret.txt"]);
    outside.git(&["commit", "-q", "-m", "outside"]);
    let r = Repo::new();
    let alt = r.path().join(".git/objects/info/alternates");
    std::fs::write(&alt, format!("{}\n", outside.path().join(".git/objects").display())).unwrap();
    let head = outside.git(&["rev-parse", "HEAD"]);
    std::fs::write(r.path().join(".git/refs/heads/main"), &head).unwrap();
    assert!(r.git(&["log", "--format=%s"]).contains("outside"), "git itself follows the alternates");
    let (stats, _) = take(&r.path(), Operation::GitLog, Limits::default()).unwrap();
    assert!(stats.skipped_paths.contains(&".git/objects/info/alternates".to_string()), "{stats:?}");
    let e = answer(&r.path(), op("git_log")).unwrap_err();
    assert_eq!(e.code(), ReasonCode::GitRepositoryInvalid, "the borrowed objects are missing: {e}");
}

#[test]
fn a_symlinked_submodule_directory_is_recorded_as_a_link_not_followed() {
    let r = Repo::new();
    let secret = r.tmp.path().join("outside");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("secret.txt"), "do not read\n").unwrap();
    r.write("a.txt", "a\n");
    r.git(&["add", "a.txt"]);
    r.git(&["commit", "-q", "-m", "a"]);
    std::os::unix::fs::symlink(&secret, r.path().join("sub")).unwrap();
    std::fs::write(r.path().join(".gitmodules"), "[submodule \"sub\"]\n\tpath = sub\n\turl = ../x\n").unwrap();
    let (stats, archive) = take(&r.path(), Operation::GitStatus, Limits::default()).unwrap();
    let bytes = std::fs::read(archive).unwrap();
    assert!(!bytes.windows(11).any(|w| w == b"do not read"), "the link's target was read");
    assert!(stats.files >= 3);
    crate::equal::assert_status_equal(&r);
}

#[test]
fn nested_and_case_folded_git_directories_are_not_taken_as_the_repository() {
    let r = Repo::new();
    r.write("a.txt", "a\n");
    r.git(&["add", "a.txt"]);
    r.git(&["commit", "-q", "-m", "a"]);
    std::fs::create_dir_all(r.path().join("vendor/x/.git/hooks")).unwrap();
    std::fs::write(r.path().join("vendor/x/.git/config"), "[core]\n\tfsmonitor = /bin/false\n").unwrap();
    let (stats, _) = take(&r.path(), Operation::GitStatus, Limits::default()).unwrap();
    assert!(stats.skipped_paths.contains(&"vendor/x/.git".to_string()), "{stats:?}");
    // A case-folded `.git` beside the repository's is a control directory:
    // skipped (as `.airlock` is), never taken as the repository or copied.
    std::fs::create_dir_all(r.path().join(".GIT")).unwrap();
    std::fs::write(r.path().join(".GIT/config"), "[core]\n\tfsmonitor = /bin/false\n").unwrap();
    let (stats, _) = take(&r.path(), Operation::GitStatus, Limits::default()).unwrap();
    assert!(stats.skipped_paths.contains(&".GIT".to_string()), "{stats:?}");
    assert_eq!(stats.skipped_by.get(&Skip::ControlDir), Some(&2), "{stats:?}");
    assert!(!stats.partial(), "control directories are outside every query's scope");
}

#[test]
fn cr_lf_and_case_collisions_are_refused_before_anything_runs() {
    for (a, b) in [("bad\rname", None), ("bad\nname", None), ("Readme", Some("README"))] {
        let r = Repo::new();
        r.write(a, "x\n");
        if let Some(b) = b {
            r.write(b, "y\n");
        }
        let e = take(&r.path(), Operation::GitStatus, Limits::default()).unwrap_err();
        assert_eq!(e.code(), ReasonCode::GitPathRejected, "{a:?}: {e}");
    }
}

#[test]
fn a_linked_worktree_is_refused() {
    let r = Repo::new();
    r.write("a.txt", "a\n");
    r.git(&["add", "a.txt"]);
    r.git(&["commit", "-q", "-m", "a"]);
    let wt = r.tmp.path().join("linked");
    r.git(&["worktree", "add", "-q", wt.to_str().unwrap()]);
    let e = take(&wt, Operation::GitStatus, Limits::default()).unwrap_err();
    assert_eq!(e.code(), ReasonCode::GitNotRepository, "{e}");
}

#[test]
fn special_files_are_skipped_without_blocking() {
    let r = Repo::new();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        r.path().join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let (stats, _) = take(&r.path(), Operation::GitStatus, Limits::default()).unwrap();
    assert_eq!(stats.skipped_paths, vec!["fifo".to_string()]);
}
