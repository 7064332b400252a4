//! Test helpers: a project directory with a config, ceilings and a tool,
//! and a runner for the shipping binary that reports everything on failure.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The airlock binary under test.
pub const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock");

/// A manifest that reads one input and creates one output.
pub const COPY_TOOL: &str = r#"
[tool]
name = "copy"
version = "1.0.0"
binary = "cp"
description = "Copy one file to a new one"

[args.input]
position = 1
required = true
type = "path"
description = "file to read"

[args.output]
position = 2
required = true
type = "path"
description = "file to create"

[command]
exec = ["cp", "{input}", "{output}"]

[output]
format = "text"

[filesystem]
read = ["{input}"]
create = ["{output}"]
"#;

/// Written into files that must never be read; its appearance anywhere is a leak.
pub const CANARY: &str = "CANARY-7f3a9c1e-do-not-read";

/// A project: `airlock.toml`, `data/` (ro ceiling), `results/` (rw
/// ceiling), `tools/copy.clad.toml`, and `outside/` beside them holding a
/// canary file.
pub struct Project {
    dir: tempfile::TempDir,
    resolver: Option<&'static str>,
}

/// What one run of the binary produced.
#[derive(Debug)]
pub struct Run {
    /// Shown when a test fails.
    #[allow(dead_code)]
    pub args: Vec<String>,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub envelope: Value,
}

impl Run {
    pub fn status(&self) -> &str {
        self.envelope["status"].as_str().unwrap_or("")
    }

    pub fn reason(&self) -> &str {
        self.envelope["error"]["code"].as_str().unwrap_or("")
    }

    #[track_caller]
    pub fn assert_ok(&self) -> &Self {
        assert_eq!((self.code, self.status()), (0, "ok"), "expected ok:\n{self:#?}");
        self
    }

    #[track_caller]
    pub fn assert_refused(&self, reason: &str, exit: i32) -> &Self {
        assert_eq!(
            (self.status(), self.reason(), self.code),
            ("refused", reason, exit),
            "expected refused/{reason}/{exit}:\n{self:#?}"
        );
        assert!(self.envelope["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{self:#?}");
        assert!(self.stderr.contains(reason), "stderr should say why: {self:#?}");
        self
    }
}

impl Project {
    pub fn new() -> Project {
        Project::with_config(
            r#"
state_dir = ".airlock"
[filesystem]
roots = ["./data:data:ro", "./results:results:rw"]
"#,
        )
    }

    pub fn with_config(config: &str) -> Project {
        let dir = tempfile::Builder::new().prefix("airlock-test-").tempdir().unwrap();
        let p = Project { dir, resolver: None };
        p.write("airlock.toml", config);
        p.mkdir("data");
        p.mkdir("results");
        p.mkdir("tools");
        p.mkdir("outside");
        p.write("tools/copy.clad.toml", COPY_TOOL);
        p.write("outside/secret.txt", CANARY);
        p
    }

    /// Forces a resolver for every run (else the environment's `AIRLOCK_RESOLVER` applies).
    pub fn resolver(mut self, kind: &'static str) -> Project {
        self.resolver = Some(kind);
        self
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    pub fn mkdir(&self, rel: &str) {
        std::fs::create_dir_all(self.path(rel)).unwrap();
    }

    pub fn command(&self, args: &[&str]) -> Command {
        self.command_of(Path::new(AIRLOCK), args)
    }

    /// [`Project::command`] of the `airlock` at `program` (a link to the
    /// shipping binary elsewhere, with other binaries beside it).
    pub fn command_of(&self, program: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(self.root())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let resolver = self.resolver.map(str::to_owned).or_else(|| std::env::var("AIRLOCK_RESOLVER").ok());
        if let Some(r) = resolver {
            cmd.env("AIRLOCK_RESOLVER", r);
        }
        cmd
    }

    /// Runs the binary; a run longer than 30 s is killed and fails the test
    /// (nothing airlock does here may block).
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_command(self.command(args), args)
    }

    /// [`Project::run`] of a command made by [`Project::command`] and then
    /// changed (another directory, more environment); `args` are for messages.
    pub fn run_command(&self, mut command: Command, args: &[&str]) -> Run {
        let mut child = command.spawn().expect("spawn airlock");
        // Both streams are drained while the child runs: an answer larger
        // than a pipe's buffer must not block it.
        let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_end(&mut bytes);
                }
                bytes
            })
        };
        let out_reader = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
        let err_reader = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                let stderr = err_reader.join().unwrap_or_default();
                panic!("airlock {args:?} blocked for 30 s; stderr: {}", String::from_utf8_lossy(&stderr));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let stdout = String::from_utf8_lossy(&out_reader.join().unwrap_or_default()).into_owned();
        let stderr = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
        let envelope: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "stdout of airlock {args:?} is not one JSON object ({e}):\n{stdout}\nstderr:\n{stderr}\ntree:\n{}",
                self.tree()
            )
        });
        Run {
            args: args.iter().map(|s| s.to_string()).collect(),
            code: status.code().unwrap_or(-1),
            stdout,
            stderr,
            envelope,
        }
    }

    pub fn prepare(&self, input: &str, output: &str) -> Run {
        self.run(&["prepare", "copy", input, output])
    }

    /// Every file under the project, for failure messages.
    pub fn tree(&self) -> String {
        let mut lines = Vec::new();
        walk(self.root(), &mut |p| lines.push(p.strip_prefix(self.root()).unwrap().display().to_string()));
        lines.sort();
        lines.join("\n")
    }

    /// Fails if `needle` appears in the run's output or in any file of the
    /// state directory.
    #[track_caller]
    pub fn assert_absent(&self, run: &Run, needle: &str) {
        assert!(!run.stdout.contains(needle), "leaked into stdout: {run:#?}");
        assert!(!run.stderr.contains(needle), "leaked into stderr: {run:#?}");
        self.assert_state_free_of(needle);
    }

    #[track_caller]
    pub fn assert_state_free_of(&self, needle: &str) {
        walk(&self.path(".airlock"), &mut |p| {
            if let Ok(bytes) = std::fs::read(p) {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                    "{needle:?} leaked into the state dir at {}",
                    p.display()
                );
            }
        });
    }

    /// Names of committed invocations in the state dir.
    /// Invocations kept as prepared calls (a refusal only reserves its id,
    /// with no record or snapshot).
    /// The kinds of the journal records of invocation `id`, in order, as
    /// `airlock journal show --json` lists them.
    pub fn journal_kinds(&self, id: &str) -> Vec<String> {
        self.journal_records(id).iter().map(|r| r["kind"].as_str().unwrap().to_owned()).collect()
    }

    /// The journal records of invocation `id`, in order, as `airlock
    /// journal show --json` lists them.
    pub fn journal_records(&self, id: &str) -> Vec<Value> {
        let show = self.run(&["journal", "show", "--json"]);
        let records = show.envelope["content"]["records"].as_array().unwrap();
        records.iter().filter(|r| r["invocation_id"] == id).cloned().collect()
    }

    /// The descriptor of the call `run` answered, as its prepared record
    /// in the state dir `state` keeps it (a finished call's answer names it
    /// by digest only).
    pub fn descriptor(state: &Path, run: &Run) -> serde_json::Value {
        let id = run.envelope["invocation_id"].as_str().expect("an invocation id");
        let record = std::fs::read(state.join("invocations").join(id).join("prepared.json")).expect("prepared.json");
        let record: serde_json::Value = serde_json::from_slice(&record).expect("a JSON record");
        assert_eq!(record["descriptor_sha256"], run.envelope["evidence"]["descriptor_sha256"], "{run:#?}");
        record["descriptor"].clone()
    }

    pub fn invocations(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.path(".airlock/invocations"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join("prepared.json").exists() || e.path().join("inputs").exists())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let ty = e.file_type().unwrap();
        if ty.is_dir() {
            walk(&p, f);
        } else if ty.is_file() {
            f(&p);
        }
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    airlock_core_sha(bytes)
}

fn airlock_core_sha(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_owned()
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

impl Project {
    /// Runs the binary and returns only its exit code (for usage errors,
    /// which print clap's text rather than an envelope).
    pub fn run_raw(&self, args: &[&str]) -> i32 {
        self.command(args).output().unwrap().status.code().unwrap_or(-1)
    }
}

impl Project {
    /// Runs the binary on a terminal (`script(1)` gives it a pty, as a
    /// person's shell would) and returns what it printed there.
    pub fn on_terminal(&self, args: &[&str]) -> String {
        let line: Vec<String> =
            std::iter::once(AIRLOCK).chain(args.iter().copied()).map(|a| format!("'{a}'")).collect();
        // The environment `command` gives the binary (PATH, AIRLOCK_RESOLVER).
        let envs: Vec<_> =
            self.command(&[]).get_envs().filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))).collect();
        let out = Command::new("script")
            .args(["-q", "-e", "-c", &line.join(" "), "/dev/null"])
            .current_dir(self.root())
            .env_clear()
            .envs(envs)
            .stdin(Stdio::null())
            .output()
            .expect("script(1) from util-linux");
        String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n")
    }
}
