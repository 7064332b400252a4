//! A repository builder driving the real `git`, isolated from the host's
//! configuration, and helpers that take a snapshot and run the driver.
#![allow(dead_code)]

use airlock_git::{snapshot, ControlIds, Limits, Operation, SnapshotStats};
use airlock_hostfs::{Dir, HostAuthority};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI64, Ordering};

/// A temporary repository with its own HOME, so no host configuration applies.
pub struct Repo {
    pub tmp: tempfile::TempDir,
    clock: AtomicI64,
}

impl Repo {
    pub fn new() -> Repo {
        let repo = Repo { tmp: tempfile::tempdir().unwrap(), clock: AtomicI64::new(1_700_000_000) };
        std::fs::create_dir(repo.path()).unwrap();
        std::fs::create_dir(repo.tmp.path().join("home")).unwrap();
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    /// The work tree.
    pub fn path(&self) -> PathBuf {
        self.tmp.path().join("repo")
    }

    /// Runs git in the work tree; panics on failure; returns stdout.
    pub fn git(&self, args: &[&str]) -> String {
        let t = self.clock.fetch_add(60, Ordering::SeqCst);
        let out = Command::new("git")
            .args(args)
            .current_dir(self.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.tmp.path().join("home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "Ada Author")
            .env("GIT_AUTHOR_EMAIL", "ada@example.invalid")
            .env("GIT_COMMITTER_NAME", "Cid Committer")
            .env("GIT_COMMITTER_EMAIL", "cid@example.invalid")
            .env("GIT_AUTHOR_DATE", format!("{t} +0100"))
            .env("GIT_COMMITTER_DATE", format!("{t} -0230"))
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    pub fn remove(&self, rel: &str) {
        std::fs::remove_file(self.path().join(rel)).unwrap();
    }
}

/// Snapshot of `dir` for `op`, written to a file beside it.
pub fn take(dir: &Path, op: Operation, limits: Limits) -> Result<(SnapshotStats, PathBuf), airlock_git::GitError> {
    take_fenced(dir, op, limits, &ControlIds::new())
}

/// [`take`], never entering the identities in `control`.
pub fn take_fenced(
    dir: &Path,
    op: Operation,
    limits: Limits,
    control: &ControlIds,
) -> Result<(SnapshotStats, PathBuf), airlock_git::GitError> {
    let handle = Dir::open_ambient(&HostAuthority::ambient(), dir).unwrap();
    let archive = dir.parent().unwrap().join(format!("snapshot-{}", op.as_str()));
    let _ = std::fs::remove_file(&archive);
    let mut file = std::fs::File::create(&archive).unwrap();
    let stats = snapshot::take(&handle, op.scope(), limits, control, &mut file)?;
    Ok((stats, archive))
}

/// Snapshot and driver: the answer as JSON.
pub fn answer(dir: &Path, request: serde_json::Value) -> Result<serde_json::Value, airlock_git::GitError> {
    let op = Operation::parse(request["operation"].as_str().unwrap()).unwrap();
    let (_, archive) = take(dir, op, Limits::default())?;
    let into = dir.parent().unwrap().join(format!("unpacked-{}", rand_suffix()));
    let json = airlock_git::driver::run(&request.to_string(), &archive, &into)?;
    Ok(serde_json::from_str(&json).unwrap())
}

fn rand_suffix() -> u64 {
    static N: AtomicI64 = AtomicI64::new(0);
    N.fetch_add(1, Ordering::SeqCst) as u64
}

pub fn op(name: &str) -> serde_json::Value {
    serde_json::json!({ "operation": name })
}
