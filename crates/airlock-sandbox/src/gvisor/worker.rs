//! A running gVisor worker: the `runsc run` child, its bounded stdout and
//! stderr, the deadline, and the cleanup that must be confirmed before the
//! output is exported.
#![forbid(unsafe_code)]

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rustix::pipe::PipeFlags;
use rustix::process::{PidfdFlags, Signal};

use super::runsc::{self, Runsc};
use crate::call_dir::CallDir;
use crate::error::{errno, OsErrno, SandboxError};
use crate::outcome::{AppliedLimits, ExitStatusKind, OutputExport, WorkerOutcome};
use crate::parent::{drain, Bounded, Stream, KILL_GRACE};
use crate::ready::exited_by;
use crate::spec::{StagedOutput, WorkerSpec};
use crate::worker::{KillHandle, Worker};

/// How long runsc may take to make the container and hand over a terminal.
const CONSOLE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// What [`GvisorWorker::spawn`] needs.
pub(crate) struct Start<'a> {
    pub runsc: Runsc,
    /// The container id (also the call directory's name).
    pub id: String,
    /// The call directory, holding the bundle.
    pub call: CallDir,
    /// runsc's `--log` for this call.
    pub log: PathBuf,
    /// The spec (its output and stdout sink are taken).
    pub spec: &'a mut WorkerSpec,
    pub started: Instant,
    pub limits: AppliedLimits,
    /// The bundle asks runsc for a cgroup (else `--ignore-cgroups`).
    pub use_cgroup: bool,
    /// The tool runs on a terminal runsc makes and hands over
    /// ([`super::console`]).
    pub tty: bool,
}

/// A running gVisor worker.
#[derive(Debug)]
pub struct GvisorWorker {
    guard: Guard,
    pidfd: Arc<OwnedFd>,
    killed: Arc<AtomicBool>,
    stdout: OwnedFd,
    stderr: OwnedFd,
    deadline: Instant,
    stdout_limit: usize,
    stdout_sink: Option<std::fs::File>,
    stderr_limit: usize,
    output: Option<StagedOutput>,
    argv0: String,
    limits: AppliedLimits,
    cancel: Option<crate::cancel::Registration>,
}

/// Owns the `runsc run` child and the call directory until
/// [`Worker::wait`] takes them; a worker dropped without being waited for is
/// killed and cleaned up on a background thread.
#[derive(Debug)]
struct Guard {
    runsc: Runsc,
    id: String,
    child: Option<Child>,
    call: Option<CallDir>,
    log: PathBuf,
    pidfd: Arc<OwnedFd>,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    rustix::pipe::pipe_with(PipeFlags::CLOEXEC)
        .map_err(|e| SandboxError::Descriptor { call: "pipe2(O_CLOEXEC)".into(), errno: errno(e) })
}

/// SIGKILL to `runsc run` through its pidfd; its attached sandbox and gofer
/// die with it (runsc gives them a parent-death signal).
fn kill_run(pidfd: &OwnedFd) {
    let _ = rustix::process::pidfd_send_signal(pidfd, Signal::KILL);
}

impl GvisorWorker {
    /// Starts `runsc run` on the bundle in `s.call`; with `s.tty`, also
    /// returns the master of the tool's terminal.
    pub(crate) fn spawn(s: Start<'_>) -> Result<(GvisorWorker, Option<std::fs::File>), SandboxError> {
        let Start { runsc, id, call, log, spec, started, limits, use_cgroup, tty } = s;
        let fail = |call: CallDir, e: SandboxError| {
            let _ = call.remove();
            Err(e)
        };
        let (stdout_r, stdout_w) = match pipe() {
            Ok(p) => p,
            Err(e) => return fail(call, e),
        };
        let (stderr_r, stderr_w) = match pipe() {
            Ok(p) => p,
            Err(e) => return fail(call, e),
        };
        let mut cmd = runsc.command(Some(&log));
        if !use_cgroup {
            cmd.arg("--ignore-cgroups");
        }
        cmd.arg("run");
        let console = match tty.then(|| super::console::Console::listen(call.path())).transpose() {
            Ok(c) => c,
            Err(e) => return fail(call, e),
        };
        if let Some(c) = &console {
            cmd.arg("--console-socket").arg(c.path());
        }
        cmd.arg("--bundle").arg(call.path()).arg(&id);
        cmd.stdout(Stdio::from(stdout_w)).stderr(Stdio::from(stderr_w));
        let spawned = cmd.spawn();
        drop(cmd); // closes our copies of the child's ends
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => return fail(call, SandboxError::Unavailable(format!("cannot run {}: {e}", runsc.bin.display()))),
        };
        let pid = rustix::process::Pid::from_child(&child);
        let pidfd = match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
            Ok(fd) => Arc::new(fd),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                runsc.kill(&id);
                let _ = runsc.delete(&id);
                let _ = runsc::kill_processes(&runsc.root, call.path(), KILL_GRACE);
                return fail(call, SandboxError::Wait { call: format!("pidfd_open({pid}, 0)"), errno: errno(e) });
            }
        };
        let guard = Guard { runsc, id, child: Some(child), call: Some(call), log, pidfd: Arc::clone(&pidfd) };
        // The terminal comes once runsc has made the container; a runsc that
        // fails first is killed and cleaned up with the guard.
        let master = match console {
            Some(c) => Some(c.receive(&pidfd, Instant::now() + CONSOLE_DEADLINE.min(spec.timeout))?),
            None => None,
        };
        let worker = GvisorWorker {
            guard,
            pidfd,
            killed: Arc::new(AtomicBool::new(false)),
            stdout: stdout_r,
            stderr: stderr_r,
            deadline: started + spec.timeout,
            stdout_limit: spec.stdout_limit,
            stdout_sink: spec.stdout_sink.take(),
            stderr_limit: spec.stderr_limit,
            output: spec.output.take(),
            argv0: spec.argv[0].clone(),
            limits,
            cancel: None,
        };
        Ok((worker, master))
    }

    /// Registers the worker with `cancel` (killing it at once if cancelled).
    pub(crate) fn with_cancel(mut self, cancel: &crate::Cancel) -> Self {
        self.cancel = Some(cancel.register(self.kill_handle()));
        self
    }

    /// The container's id (the call's name).
    pub fn id(&self) -> &str {
        &self.guard.id
    }
}

/// How the tool ended, from `runsc run`'s own status: runsc exits with the
/// container's exit code, or 128 + the signal that killed it.
fn tool_exit(status: ExitStatus) -> ExitStatusKind {
    match (status.code(), status.signal()) {
        (Some(c), _) if c > 128 && c <= 128 + 64 => ExitStatusKind::Signaled(c - 128),
        (Some(c), _) => ExitStatusKind::Exited(c),
        (None, Some(sig)) => ExitStatusKind::Signaled(sig),
        (None, None) => ExitStatusKind::Signaled(libc::SIGKILL),
    }
}

/// runsc itself failed (bad bundle, the program not found, …) rather than
/// the tool: it exits 128 and logs an error.
fn runsc_failure(status: ExitStatus, log_tail: &str, argv0: &str) -> Option<SandboxError> {
    if status.code() != Some(128) || !log_tail.contains("\"level\":\"error\"") {
        return None;
    }
    let msg = log_tail
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?.get("msg")?.as_str().map(String::from))
        .unwrap_or_else(|| log_tail.to_string());
    if msg.contains("failed to load") {
        let errno = if msg.contains("permission denied") { libc::EACCES } else { libc::ENOENT };
        return Some(SandboxError::Exec { program: argv0.to_string(), errno: OsErrno(errno) });
    }
    Some(SandboxError::Unavailable(format!("runsc failed: {msg}")))
}

/// Deletes the container and confirms it and every host process of it are
/// gone. Returns whether that is confirmed, and why not.
fn clean_up(runsc: &Runsc, id: &str, call: &CallDir, cgroup: bool) -> Result<(), String> {
    let left = runsc::kill_processes(&runsc.root, call.path(), KILL_GRACE);
    // `runsc run` deletes a container that ended by itself; delete only
    // what is still there (killed, timed out, runsc failed).
    if runsc.exists(id).map_err(|e| e.to_string())? {
        let deleted = runsc.delete(id);
        match runsc.exists(id) {
            Ok(false) => {}
            Ok(true) => return Err(format!("runsc still knows container {id} after delete --force ({deleted:?})")),
            Err(e) => return Err(e.to_string()),
        }
    }
    if !left.is_empty() {
        return Err(format!("processes {left:?} of container {id} survived SIGKILL"));
    }
    if cgroup {
        super::remove_cgroup(id)?;
    }
    Ok(())
}

fn wait_worker(mut w: GvisorWorker) -> Result<WorkerOutcome, SandboxError> {
    let mut streams = [
        Stream { fd: Some(w.stdout), sink: Bounded::into_file(w.stdout_limit, w.stdout_sink.take()) },
        Stream { fd: Some(w.stderr), sink: Bounded::new(w.stderr_limit) },
    ];
    let runsc = w.guard.runsc.clone();
    let id = w.guard.id.clone();
    let mut timed_out = false;
    let mut all_eof = drain(&mut streams, w.deadline)?;
    if !all_eof {
        timed_out = !w.killed.load(Ordering::SeqCst);
        runsc.kill(&id);
        kill_run(&w.pidfd);
        all_eof = drain(&mut streams, Instant::now() + KILL_GRACE)?;
    }
    let mut child =
        w.guard.child.take().ok_or_else(|| SandboxError::Protocol("runsc run was already reaped".into()))?;
    if !exited_by(&*w.pidfd, Instant::now() + KILL_GRACE) {
        kill_run(&w.pidfd);
    }
    let status =
        child.wait().map_err(|e| SandboxError::Wait { call: format!("waitpid({})", child.id()), errno: errno(e) })?;
    let killed = timed_out || w.killed.load(Ordering::SeqCst);

    let call = w.guard.call.take().ok_or_else(|| SandboxError::Protocol("the call directory is gone".into()))?;
    let cleanup = clean_up(&runsc, &id, &call, w.limits.cgroup_path.is_some());
    let log_tail = runsc::log_tail(&w.guard.log);
    let _ = std::fs::remove_file(&w.guard.log);
    let cleanup_confirmed = all_eof && cleanup.is_ok();

    let failure = if killed { None } else { runsc_failure(status, &log_tail, &w.argv0) };
    // Exported only now: the container and every process of it are gone.
    let output = match &w.output {
        None => None,
        Some(_) if failure.is_some() => None,
        Some(_) if !cleanup_confirmed => Some(Ok(refused(format!(
            "the sandbox's cleanup could not be confirmed: {}",
            cleanup.as_ref().err().map(String::as_str).unwrap_or("its pipes stayed open")
        )))),
        Some(_) if timed_out => Some(Ok(refused("the worker timed out".into()))),
        Some(_) if killed => Some(Ok(refused("the worker was killed".into()))),
        Some(o) => Some(call.export(o)),
    };
    let removed = call.remove();
    if let Some(e) = failure {
        return Err(e);
    }
    let output = output.transpose()?;
    let [out, err] = streams;
    let exit = if killed { ExitStatusKind::Signaled(libc::SIGKILL) } else { tool_exit(status) };
    let confirmed = cleanup_confirmed && removed.is_ok();
    crate::parent::finish(exit, timed_out, out, err, output, confirmed, w.limits.clone())
}

fn refused(why: String) -> OutputExport {
    OutputExport { bytes: 0, over_limit: false, refused: Some(why) }
}

impl Worker for GvisorWorker {
    fn kill_handle(&self) -> KillHandle {
        let (pidfd, killed) = (Arc::clone(&self.pidfd), Arc::clone(&self.killed));
        let (runsc, id) = (self.guard.runsc.clone(), self.guard.id.clone());
        KillHandle::new(move || {
            if !killed.swap(true, Ordering::SeqCst) {
                runsc.kill(&id);
            }
            kill_run(&pidfd);
            Ok(())
        })
    }

    fn kill(&mut self) -> Result<(), SandboxError> {
        self.kill_handle().kill()
    }

    fn wait(self) -> Result<WorkerOutcome, SandboxError> {
        wait_worker(self)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        kill_run(&self.pidfd);
        let (runsc, id, call, log) = (self.runsc.clone(), self.id.clone(), self.call.take(), self.log.clone());
        let _ = std::thread::Builder::new().name("airlock-gvisor-reaper".into()).spawn(move || {
            let _ = child.wait();
            if let Some(call) = call {
                let _ = clean_up(&runsc, &id, &call, true);
                let _ = call.remove();
            }
            let _ = std::fs::remove_file(log);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runsc_exit_codes_map_to_the_tool_s_end() {
        assert_eq!(tool_exit(ExitStatus::from_raw(7 << 8)), ExitStatusKind::Exited(7));
        assert_eq!(tool_exit(ExitStatus::from_raw(137 << 8)), ExitStatusKind::Signaled(9));
        assert_eq!(tool_exit(ExitStatus::from_raw(153 << 8)), ExitStatusKind::Signaled(25));
        assert_eq!(tool_exit(ExitStatus::from_raw(9)), ExitStatusKind::Signaled(9));
    }

    #[test]
    fn a_logged_error_with_exit_128_is_runsc_s_own_failure() {
        let status = ExitStatus::from_raw(128 << 8);
        let log = r#"{"msg":"running container: starting container: creating process: failed to load /nope: no such file or directory","level":"error","time":"x"}"#;
        assert!(matches!(runsc_failure(status, log, "/nope"), Some(SandboxError::Exec { .. })));
        let log = r#"{"msg":"reading spec: bad","level":"error","time":"x"}"#;
        assert!(
            matches!(runsc_failure(status, log, "x"), Some(SandboxError::Unavailable(m)) if m.contains("reading spec"))
        );
        assert!(runsc_failure(status, "", "x").is_none(), "a tool's own exit 128");
        assert!(runsc_failure(ExitStatus::from_raw(1 << 8), log, "x").is_none());
    }
}
