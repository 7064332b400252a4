//! Helpers for the tests of `airlock run`: manifests built from argv words,
//! a runner for any command line that yields an envelope, scans of `/proc`
//! for marked processes, and the pieces needed to run the shipping binary
//! as uid 65534.

use crate::util::{Project, Run, AIRLOCK};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The declared read and create of a tool with `input` and `output` arguments.
pub const IO_FS: &str = "[filesystem]\nread = [\"{input}\"]\ncreate = [\"{output}\"]\n";

/// The positional `input` and `output` path arguments.
pub const IO_ARGS: &[(&str, &str)] = &[("input", "path"), ("output", "path")];

/// Literal manifest text: braces doubled so that none is read as a placeholder.
pub fn lit(text: &str) -> String {
    text.replace('{', "{{").replace('}', "}}")
}

/// A TOML basic string holding `s` (JSON string escapes are valid TOML).
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A manifest: `[tool] name` plus the lines `tool_extra`, the positional
/// arguments `args` (name, type) in order, `[command] exec` of `exec` (words
/// as written, placeholders included), then the raw TOML `rest`.
pub fn manifest(name: &str, tool_extra: &str, args: &[(&str, &str)], exec: &[&str], rest: &str) -> String {
    let mut m =
        format!("[tool]\nname = {}\nversion = \"1.0.0\"\ndescription = \"test tool\"\n{tool_extra}\n", toml_str(name));
    for (i, (arg, ty)) in args.iter().enumerate() {
        m.push_str(&format!(
            "[args.{arg}]\nposition = {}\nrequired = true\ntype = {}\ndescription = \"{arg}\"\n\n",
            i + 1,
            toml_str(ty)
        ));
    }
    let words: Vec<String> = exec.iter().map(|w| toml_str(w)).collect();
    m.push_str(&format!("[command]\nexec = [{}]\n\n{rest}\n", words.join(", ")));
    m
}

/// A tool running `sh -c SCRIPT sh {arg1} {arg2}…`: the arguments are `$1`, `$2`…
pub fn sh_tool(name: &str, tool_extra: &str, args: &[(&str, &str)], script: &str, rest: &str) -> String {
    let script = lit(script);
    let placeholders: Vec<String> = args.iter().map(|(a, _)| format!("{{{a}}}")).collect();
    let mut exec = vec!["sh", "-c", script.as_str(), "sh"];
    exec.extend(placeholders.iter().map(String::as_str));
    manifest(name, tool_extra, args, &exec, rest)
}

/// A tool running `python3 -c SCRIPT {arg1} {arg2}…`: the arguments are `sys.argv[1:]`.
pub fn py_tool(name: &str, tool_extra: &str, args: &[(&str, &str)], script: &str, rest: &str) -> String {
    let script = lit(script);
    let placeholders: Vec<String> = args.iter().map(|(a, _)| format!("{{{a}}}")).collect();
    let mut exec = vec!["python3", "-c", script.as_str()];
    exec.extend(placeholders.iter().map(String::as_str));
    manifest(name, tool_extra, args, &exec, rest)
}

impl Project {
    /// Writes `tools/NAME.clad.toml`.
    pub fn tool(&self, name: &str, manifest: &str) {
        self.write(&format!("tools/{name}.clad.toml"), manifest);
    }
}

/// Runs `cmd` (stdout and stderr piped); a run longer than 30 s is killed
/// and fails the test. The envelope is parsed from stdout.
pub fn run_cmd(mut cmd: Command, label: &str) -> Run {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {label}: {e}"));
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{label} blocked for 30 s; stderr: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let envelope = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout of {label} is not one JSON object ({e}):\n{stdout}\nstderr:\n{stderr}"));
    Run { args: vec![label.to_owned()], code: out.status.code().unwrap_or(-1), stdout, stderr, envelope }
}

/// The shipping binary run in `dir` with a clean environment (PATH, and
/// `AIRLOCK_RESOLVER` when the environment sets it).
pub fn airlock_in(dir: &Path, args: &[&str]) -> Run {
    let mut cmd = Command::new(AIRLOCK);
    cmd.args(args).current_dir(dir);
    clean_env(&mut cmd);
    run_cmd(cmd, &format!("airlock {args:?} in {}", dir.display()))
}

fn clean_env(cmd: &mut Command) {
    cmd.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    if let Ok(r) = std::env::var("AIRLOCK_RESOLVER") {
        cmd.env("AIRLOCK_RESOLVER", r);
    }
}

/// Names in a directory, sorted (empty when it does not exist).
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// No publication candidate is left in `rel`.
#[track_caller]
pub fn assert_no_candidates(p: &Project, rel: &str) {
    let left: Vec<String> = names(&p.path(rel)).into_iter().filter(|n| n.starts_with(".airlock-candidate-")).collect();
    assert!(left.is_empty(), "candidates left in {rel}: {left:?}\n{}", p.tree());
}

/// What the staging pool of the project at `root` holds: its reservation
/// records and private data directories, as `leases/ID` and `data/ID`.
pub fn staged_entries(root: &std::path::Path) -> Vec<String> {
    let pool = root.join(".airlock/staging");
    ["leases", "data"]
        .iter()
        .flat_map(|sub| names(&pool.join(sub)).into_iter().map(move |n| format!("{sub}/{n}")))
        .collect()
}

/// The staging pool exists and holds no reservation and no data.
#[track_caller]
pub fn assert_staging_empty(p: &Project) {
    assert!(p.path(".airlock/staging/data").is_dir(), "no staging pool:\n{}", p.tree());
    assert_eq!(staged_entries(p.root()), Vec::<String>::new(), "staging not empty:\n{}", p.tree());
}

/// Nothing was published at `rel` (no entry of any kind).
#[track_caller]
pub fn assert_absent_path(p: &Project, rel: &str) {
    assert!(std::fs::symlink_metadata(p.path(rel)).is_err(), "{rel} exists:\n{}", p.tree());
}

/// A failure envelope of the run step: status, code, process exit code, the
/// call ran (`stage` finished) and nothing is listed as created.
#[track_caller]
pub fn assert_failed(run: &Run, status: &str, reason: &str, exit: i32) {
    assert_eq!(
        (run.status(), run.reason(), run.code),
        (status, reason, exit),
        "expected {status}/{reason}/{exit}:\n{run:#?}"
    );
    assert!(run.envelope["created_files"].as_array().is_some_and(|a| a.is_empty()), "{run:#?}");
    assert!(run.stderr.contains(reason), "stderr should say why: {run:#?}");
}

/// A marker no other process carries: a decimal number usable as a
/// `sleep` duration of `secs` seconds and a fraction (pid and a counter
/// make it unique; every marker of one `secs` has the same length, so
/// none is a substring of another).
pub fn marker(secs: u32) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed) % 1000;
    format!("{secs}.{:07}{n:03}", std::process::id() % 10_000_000)
}

/// Processes (pid, command line) whose command line contains `needle`,
/// other than this one.
pub fn procs_with(needle: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(raw) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&raw).replace('\0', " ");
        if line.contains(needle) {
            found.push((pid, line));
        }
    }
    found
}

/// Pids whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let ppid = stat.rsplit_once(") ").and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// Every process descended from `pid` (children, theirs, and so on).
pub fn descendants_of(pid: u32) -> Vec<u32> {
    let mut found = children_of(pid);
    let mut next = 0;
    while next < found.len() {
        let more = children_of(found[next]);
        found.extend(more);
        next += 1;
    }
    found
}

/// Polls `f` every 20 ms until it holds or `bound` passes; whether it held.
pub fn wait_until(bound: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if f() {
            return true;
        }
        if start.elapsed() > bound {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn parent_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("PPid:"))?.trim().parse().ok()
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Kills (SIGKILL) every process carrying `needle` and the sandbox inits
/// above it, so that a test which found survivors leaves none behind. Only
/// processes this test started carry its marker.
pub fn kill_marked(needle: &str) {
    for (pid, _) in procs_with(needle) {
        let mut chain = vec![pid];
        let mut at = pid;
        while let Some(parent) = parent_of(at) {
            if parent <= 1 || !cmdline(parent).starts_with("airlock-sandbox-init") {
                break;
            }
            chain.push(parent);
            at = parent;
        }
        for p in chain.into_iter().rev() {
            if let Some(p) = rustix::process::Pid::from_raw(p as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
    }
}

/// Kills the marked processes when dropped (also when the test panics).
pub struct KillOnDrop(pub String);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        kill_marked(&self.0);
    }
}

/// The uid/gid unprivileged tests run as.
pub const NOBODY: u32 = 65534;

/// The binary and `setpriv`, ready to run as uid 65534; `Err` says why a
/// test must be skipped.
pub struct Nobody {
    binary: PathBuf,
    _copy: Option<tempfile::TempDir>,
}

impl Nobody {
    /// Checks that this process is root and `setpriv` exists, and makes the
    /// binary reachable by uid 65534 (a copy in a 0755 directory when some
    /// directory above it is not searchable by others).
    pub fn new() -> Result<Nobody, String> {
        if !crate::util::is_root() {
            return Err("not root: cannot switch to uid 65534".into());
        }
        let setpriv = Command::new("setpriv").arg("--version").output();
        if !setpriv.is_ok_and(|o| o.status.success()) {
            return Err("setpriv (util-linux) is not installed".into());
        }
        let binary = Path::new(AIRLOCK).to_path_buf();
        if reachable_by_others(&binary) {
            return Ok(Nobody { binary, _copy: None });
        }
        let dir = tempfile::Builder::new().prefix("airlock-bin-").tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let copy = dir.path().join("airlock");
        // The helpers `airlock isolated` finds beside the binary come along.
        for name in ["airlock", "airlock-broker", "airlock-fs"] {
            let to = dir.path().join(name);
            std::fs::copy(binary.with_file_name(name), &to).unwrap();
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        if !reachable_by_others(&copy) {
            return Err(format!("{} is not reachable by uid 65534", copy.display()));
        }
        Ok(Nobody { binary: copy, _copy: Some(dir) })
    }

    /// `setpriv --reuid=65534 --regid=65534 --clear-groups BINARY ARGS…` in `dir`.
    pub fn command(&self, dir: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(&self.binary).args(args).current_dir(dir);
        clean_env(&mut cmd);
        cmd
    }

    /// Runs the binary as uid 65534 in `dir`.
    pub fn run(&self, dir: &Path, args: &[&str]) -> Run {
        run_cmd(self.command(dir, args), &format!("(as 65534) airlock {args:?}"))
    }

    /// Makes a project usable by uid 65534: its root 0755, everything owned by 65534.
    pub fn adopt(&self, p: &Project) {
        std::fs::set_permissions(p.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
        chown_tree(p.root());
    }
}

fn reachable_by_others(path: &Path) -> bool {
    let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode()).unwrap_or(0);
    mode(path) & 0o005 == 0o005 && path.ancestors().skip(1).all(|a| mode(a) & 0o001 != 0)
}

fn chown_tree(path: &Path) {
    std::os::unix::fs::lchown(path, Some(NOBODY), Some(NOBODY)).unwrap();
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for e in std::fs::read_dir(path).unwrap().flatten() {
            chown_tree(&e.path());
        }
    }
}
