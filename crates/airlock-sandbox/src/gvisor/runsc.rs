//! Driving the `runsc` binary: its global flags, the `kill`/`delete`/`state`/
//! `list` subcommands, and finding the host processes (`runsc run`, the
//! gofer, the sandbox and its platform stubs) that belong to one container.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::error::SandboxError;

/// How long one `runsc kill`/`delete`/`state`/`list` may take before it is
/// given up on (they only touch runsc's state files and signal processes).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(20);

/// Bytes of a runsc log or of a control command's stderr quoted in an error.
const TAIL_BYTES: usize = 2048;

/// One configured `runsc`: the binary and the global flags every call uses.
#[derive(Clone, Debug)]
pub(crate) struct Runsc {
    /// The binary.
    pub bin: PathBuf,
    /// `--root`: runsc's own state directory (absolute).
    pub root: PathBuf,
    /// `--platform`.
    pub platform: &'static str,
    /// `--rootless` (airlock is not root).
    pub rootless: bool,
}

impl Runsc {
    /// `runsc --root R --platform P --network=none [--rootless]`, plus
    /// `--log FILE` when given, with an empty environment and stdin
    /// `/dev/null`.
    pub(crate) fn command(&self, log: Option<&Path>) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.env_clear().current_dir("/").stdin(Stdio::null());
        cmd.arg("--root").arg(&self.root);
        if let Some(log) = log {
            cmd.arg("--log").arg(log);
        }
        cmd.arg(format!("--platform={}", self.platform)).arg("--network=none");
        if self.rootless {
            cmd.arg("--rootless");
        }
        cmd
    }

    /// Runs a control subcommand (no `--log`) and returns whether it
    /// succeeded, its stdout, and the tail of its stderr.
    fn control(&self, args: &[&str]) -> Result<(bool, String, String), SandboxError> {
        let mut cmd = self.command(None);
        cmd.args(args);
        let out = output_within(cmd, CONTROL_TIMEOUT)
            .map_err(|e| SandboxError::Unavailable(format!("{} {}: {e}", self.bin.display(), args.join(" "))))?;
        Ok((out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), tail(&out.stderr)))
    }

    /// `runsc kill ID KILL`: kills the container's processes (an error from
    /// runsc, e.g. for a container that is already stopped, is ignored; the
    /// caller confirms absence afterwards).
    pub(crate) fn kill(&self, id: &str) {
        let _ = self.control(&["kill", id, "KILL"]);
    }

    /// `runsc delete --force ID`.
    pub(crate) fn delete(&self, id: &str) -> Result<(), SandboxError> {
        match self.control(&["delete", "--force", id])? {
            (true, _, _) => Ok(()),
            (false, _, err) => Err(SandboxError::Unavailable(format!("runsc delete --force {id}: {err}"))),
        }
    }

    /// Whether runsc still knows container `id`. runsc keeps every
    /// container's state in files under its `--root` named after the
    /// container (`ID_sandbox:ID.state`, `….lock`), so a root holding no
    /// entry that names `id` answers "no" without starting runsc (an exec
    /// of `runsc state` costs 30–80 ms, a fifth of a call); any entry that
    /// names it is asked about with `runsc state ID`.
    pub(crate) fn exists(&self, id: &str) -> Result<bool, SandboxError> {
        if !self.root_names(id)? {
            return Ok(false);
        }
        match self.control(&["state", id])? {
            (true, _, _) => Ok(true),
            (false, _, err) if err.contains("does not exist") || err.contains("not found") => Ok(false),
            (false, _, err) => Err(SandboxError::Unavailable(format!("runsc state {id}: {err}"))),
        }
    }

    /// Whether any entry of runsc's root directory names container `id`
    /// (a root not made yet names none).
    fn root_names(&self, id: &str) -> Result<bool, SandboxError> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(SandboxError::Unavailable(format!("reading {}: {e}", self.root.display()))),
        };
        for entry in entries {
            let entry =
                entry.map_err(|e| SandboxError::Unavailable(format!("reading {}: {e}", self.root.display())))?;
            if entry.file_name().as_encoded_bytes().windows(id.len()).any(|w| w == id.as_bytes()) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The ids of every container in this runsc root (`runsc list -quiet`).
    pub(crate) fn list(&self) -> Result<Vec<String>, SandboxError> {
        if !self.root.exists() {
            return Ok(Vec::new());
        }
        match self.control(&["list", "-quiet"])? {
            (true, out, _) => Ok(out.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect()),
            (false, _, err) => Err(SandboxError::Unavailable(format!("runsc list: {err}"))),
        }
    }
}

/// Runs `cmd` with piped stdout/stderr and kills it if it has not finished
/// within `timeout`.
pub(crate) fn output_within(mut cmd: Command, timeout: Duration) -> std::io::Result<std::process::Output> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn()?;
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(timeout).is_err() {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                // Still our unreaped child: the pid cannot have been reused.
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    });
    let out = child.wait_with_output();
    let _ = done_tx.send(());
    let _ = watchdog.join();
    out
}

/// The last [`TAIL_BYTES`] of `bytes`, as text.
pub(crate) fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(TAIL_BYTES);
    String::from_utf8_lossy(&bytes[start..]).trim().to_string()
}

/// The last lines of a runsc log file (empty when it cannot be read).
pub(crate) fn log_tail(log: &Path) -> String {
    std::fs::read(log).map(|b| tail(&b)).unwrap_or_default()
}

/// Host processes of the container whose bundle is `bundle` under runsc
/// root `root`: every `runsc*` process whose arguments name both, and all
/// their descendants (the platform's stub processes).
pub(crate) fn processes_of(root: &Path, bundle: &Path) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let pids: Vec<i32> =
        dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok())).collect();
    let mut found: Vec<i32> = pids
        .iter()
        .copied()
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<OsString> = cmdline
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(a).to_os_string())
                .collect();
            names_container(&args, root, bundle)
        })
        .collect();
    // Descendants are reached only through a process that names the
    // container, so the parent table (a second read of every process) is
    // built only when one does: after a clean exit, the usual case, none.
    if found.is_empty() {
        return found;
    }
    let parents: Vec<(i32, i32)> = pids
        .iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
            Some((*pid, ppid.unwrap_or(0)))
        })
        .collect();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for (pid, ppid) in &parents {
            if *ppid == parent && !found.contains(pid) {
                found.push(*pid);
            }
        }
        i += 1;
    }
    found
}

/// Does a command line belong to runsc root `root` and bundle `bundle`?
fn names_container(args: &[OsString], root: &Path, bundle: &Path) -> bool {
    let is_runsc = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("runsc"));
    is_runsc && flag_is(args, "--root", root) && flag_is(args, "--bundle", bundle)
}

/// Whether `args` hold `flag=value` or `flag value` (Go's flag package
/// also accepts a single dash).
fn flag_is(args: &[OsString], flag: &str, value: &Path) -> bool {
    let short = &flag[1..];
    args.iter().enumerate().any(|(i, a)| {
        let a = a.as_os_str();
        for f in [flag, short] {
            if a == f && args.get(i + 1).is_some_and(|v| Path::new(v) == value) {
                return true;
            }
            let mut joined = OsString::from(f);
            joined.push("=");
            joined.push(value);
            if a == joined {
                return true;
            }
        }
        false
    })
}

/// SIGKILLs every process of the container (see [`processes_of`]) until
/// none is left or `grace` passes; returns the pids still alive.
pub(crate) fn kill_processes(root: &Path, bundle: &Path, grace: Duration) -> Vec<i32> {
    crate::call_dir::kill_listed(grace, || processes_of(root, bundle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_command_line_names_its_container_by_root_and_bundle() {
        let (root, bundle) = (Path::new("/s/runsc"), Path::new("/s/calls/c1"));
        for ours in [
            &["runsc", "--root", "/s/runsc", "run", "--bundle", "/s/calls/c1", "c1"][..],
            &["runsc-gofer", "--root=/s/runsc", "gofer", "--bundle", "/s/calls/c1"],
            &["runsc-sandbox", "--root=/s/runsc", "boot", "--bundle=/s/calls/c1", "c1"],
        ] {
            assert!(names_container(&args(ours), root, bundle), "{ours:?}");
        }
        for other in [
            &["runsc-sandbox", "--root=/s/runsc", "boot", "--bundle=/s/calls/c10", "c10"][..],
            &["runsc-sandbox", "--root=/other", "boot", "--bundle=/s/calls/c1"],
            &["sh", "--root=/s/runsc", "--bundle=/s/calls/c1"],
        ] {
            assert!(!names_container(&args(other), root, bundle), "{other:?}");
        }
    }
}
