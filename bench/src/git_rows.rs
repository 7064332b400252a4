//! Issue 6 (Git queries): `airlock query git_status` on a 5,000-file
//! repository vs `git status` on the same repository, side by side.
//! airlock's time includes everything: the snapshot through handles (the
//! index's stat data decides which files' content is copied: here the ten
//! changed ones; the directories listed on every core), the descriptor,
//! policy, journal, a native worker (its sandbox built while the snapshot
//! is taken), unpacking the snapshot there and gix computing the status
//! (unchanged files marked up to date, never created; HEAD's tree
//! compared with the index only where the cache-tree does not vouch for
//! it). Target: ratio at most 2. Measured (2-core shared host, full rows,
//! one hour): 26.9 ms vs 10.7 ms, 2.52, up to 2.93 (copying every file:
//! ~100 ms vs ~10 ms, 10–12): MISSED.

use crate::harness::{compare, Report, Target};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Files in the benchmark repository's work tree.
const FILES: usize = 5_000;

fn git(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .output()
        .map_err(|e| format!("git {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// A repository of 5,000 committed files in 50 directories (objects
/// packed), ten of them modified and ten untracked files beside them.
fn build(root: &Path) -> Result<PathBuf, String> {
    let repo = root.join("data/repo");
    std::fs::create_dir_all(&repo).map_err(|e| e.to_string())?;
    git(&repo, &["init", "-q", "-b", "main"])?;
    for i in 0..FILES {
        let dir = repo.join(format!("src/d{:02}", i % 50));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(dir.join(format!("f{i}.txt")), format!("file {i}\n{}\n", "some content ".repeat(20)))
            .map_err(|e| e.to_string())?;
    }
    git(&repo, &["add", "-A"])?;
    git(&repo, &["commit", "-q", "-m", "5000 files"])?;
    // Pack the objects, as `git gc --auto` would: 5,000 loose objects
    // beside 5,000 work-tree files would pass the 10,000-file bound.
    git(&repo, &["gc", "-q"])?;
    for i in 0..10 {
        let dir = repo.join(format!("src/d{:02}", i % 50));
        std::fs::write(dir.join(format!("f{i}.txt")), "changed\n").map_err(|e| e.to_string())?;
        std::fs::write(dir.join(format!("new{i}.txt")), "new\n").map_err(|e| e.to_string())?;
    }
    // Refresh the index's stat data once, so `git status` is at its fastest.
    git(&repo, &["status", "--porcelain=v2"])?;
    Ok(repo)
}

/// A project whose `data/repo` is the benchmark repository.
pub(crate) struct GitProject {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    repo: PathBuf,
}

impl GitProject {
    pub(crate) fn new() -> Result<Self, String> {
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let root = tmp.path().to_path_buf();
        std::fs::write(root.join("airlock.toml"), "[filesystem]\nroots = [\"./data:data:ro\"]\n")
            .map_err(|e| e.to_string())?;
        let repo = build(&root)?;
        Ok(GitProject { _tmp: tmp, root, repo })
    }

    /// One `airlock query git_status` by `airlock` (this build's or another's).
    pub(crate) fn query_with(&self, airlock: &Path) -> Result<(), String> {
        let out = Command::new(airlock)
            .args(["query", "git_status", "path=data/repo"])
            .current_dir(&self.root)
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && text.contains("\"status\":\"ok\"") {
            Ok(())
        } else {
            Err(format!("airlock query failed: {text}{}", String::from_utf8_lossy(&out.stderr)))
        }
    }
}

/// `git_status` (snapshot + sandboxed driver) vs `git status --porcelain=v2`.
pub fn git_status_vs_git(quick: bool) -> Result<Report, String> {
    let project = GitProject::new()?;
    let repo = &project.repo;
    let airlock = crate::run_rows::sibling_binary("airlock")?;
    let airlock_once = || project.query_with(&airlock);
    let git_once = || git(repo, &["status", "--porcelain=v2", "--untracked-files=all"]);
    let samples = if quick { 5 } else { 21 };
    let (candidate, baseline) = compare(samples, airlock_once, git_once)?;
    Ok(Report {
        name: "git_status 5,000 files vs git status",
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(2.0),
        bytes: None,
        samples,
        extra: vec![
            "airlock = snapshot walk through handles on every core (content only of files git would read), policy, \
             journal, native worker (sandbox built during the snapshot), unpack into tmpfs under Landlock, gix status \
             (unchanged files marked up to date)"
                .into(),
        ],
    })
}
