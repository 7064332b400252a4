//! The caller's side of a native worker: [`NativeWorker`], the handle
//! [`NativeTier`](crate::NativeTier) returns once the init is spawned. Its
//! wait drains stdout/stderr within their bounds (never letting the worker
//! block on a full pipe), enforces the deadline, reaps the init, reads the
//! status records and confirms cleanup; its kill handle signals the init.
//!
//! Cleanup is confirmed from facts, not hopes: the status pipe is held open
//! by the init and by PID 1 until they exit (the worker never has it), so
//! its end-of-file means both are gone; PID 1's own pidfd turning readable
//! means it has exited, and the kernel empties a pid namespace before its
//! init finishes exiting; the init itself is reaped here. While it waits,
//! the caller holds PID 1's mount namespace, so PID 1's exit does not
//! unmount the sandbox's tree on the wait's path ([`crate::mount_ns`]).
#![forbid(unsafe_code)]

use std::ffi::CString;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::process::{Pid, PidfdFlags, Signal};

use crate::cgroup::WorkerCgroup;
use crate::error::{errno, SandboxError};
use crate::mount_ns::MountNsHold;
use crate::outcome::{AppliedLimits, ExitStatusKind, OutputExport, WorkerOutcome};
use crate::proc_status;
use crate::ready::{exited_by, timespec};
use crate::spec::{WorkerSpec, STDOUT_TAIL};
use crate::wire::{StatusMsg, MAX_STATUS_BYTES};
use crate::worker::{KillHandle, Worker};

/// A running native worker.
#[derive(Debug)]
pub struct NativeWorker {
    guard: InitGuard,
    pidfd: Arc<OwnedFd>,
    killed: Arc<AtomicBool>,
    /// `None` when the caller holds it ([`LiveStdio`](crate::LiveStdio)).
    stdout: Option<OwnedFd>,
    stderr: OwnedFd,
    status: OwnedFd,
    deadline: Instant,
    stdout_limit: usize,
    stdout_sink: Option<std::fs::File>,
    stderr_limit: usize,
    has_output: bool,
    limits: AppliedLimits,
    /// Its place in the tier's [`Cancel`](crate::Cancel), if it has one.
    pub(crate) cancel: Option<crate::cancel::Registration>,
    /// A bound output the worker was made the owner of (a root caller's,
    /// `placement.rs`): taken back once the sandbox is gone.
    pub(crate) lent_output: Option<std::fs::File>,
    /// What a warm sandbox's worker holds until it is dropped
    /// ([`crate::warm`]): its call channel, whose hang-up its init takes for
    /// the caller's death, and its pool's lease.
    pub(crate) held: Option<Box<dyn std::fmt::Debug + Send + Sync>>,
}

/// The caller's ends of a started init's pipes.
#[derive(Debug)]
pub(crate) struct Pipes {
    /// The worker's standard output, unless the caller holds it live.
    pub stdout: Option<OwnedFd>,
    /// The worker's standard error.
    pub stderr: OwnedFd,
    /// The init's status records.
    pub status: OwnedFd,
}

impl NativeWorker {
    /// The handle of the init `child` (signalled through `pidfd`, joined to
    /// `cgroup` when there is one), started at `started` for `spec`, whose
    /// stdout goes to `stdout_sink` when it has one.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        child: InitProcess,
        cgroup: Option<WorkerCgroup>,
        pidfd: Arc<OwnedFd>,
        pipes: Pipes,
        spec: &WorkerSpec,
        stdout_sink: Option<std::fs::File>,
        started: Instant,
        limits: AppliedLimits,
    ) -> NativeWorker {
        NativeWorker {
            guard: InitGuard { child: Some(child), cgroup, pidfd: Arc::clone(&pidfd) },
            pidfd,
            killed: Arc::new(AtomicBool::new(false)),
            stdout: pipes.stdout,
            stderr: pipes.stderr,
            status: pipes.status,
            deadline: started + spec.timeout,
            stdout_limit: spec.stdout_limit,
            stdout_sink,
            stderr_limit: spec.stderr_limit,
            has_output: spec.output.is_some(),
            limits,
            cancel: None,
            lent_output: None,
            held: None,
        }
    }
}

/// A close-on-exec pipe: (read end, write end).
pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| SandboxError::Descriptor { call: "pipe2(O_CLOEXEC)".into(), errno: errno(e) })
}

/// A close-on-exec duplicate of a descriptor for the init, numbered above
/// [`FS_SOCKET_FD`](crate::spec::FS_SOCKET_FD) so that number stays free for
/// the worker's socket.
pub(crate) fn dup_for_init(fd: &impl AsFd) -> Result<OwnedFd, SandboxError> {
    let lowest = crate::spec::FS_SOCKET_FD + 1;
    rustix::io::fcntl_dupfd_cloexec(fd, lowest)
        .map_err(|e| SandboxError::Descriptor { call: format!("fcntl(F_DUPFD_CLOEXEC, {lowest})"), errno: errno(e) })
}

/// Opens a pipe end of the worker's standard streams to every uid
/// (`0666`). Tools reopen their streams through `/dev/stdout`
/// (`/proc/self/fd/1`), which checks the pipe inode's owner and mode: the
/// caller owns it, and a root caller's worker is another uid. Only a
/// process that can already reach a holder's `/proc/PID/fd` can reopen it
/// at all.
pub(crate) fn open_to_worker(fd: &impl AsFd) -> Result<(), SandboxError> {
    rustix::fs::fchmod(fd, rustix::fs::Mode::from_raw_mode(0o666))
        .map_err(|e| SandboxError::Descriptor { call: "fchmod(pipe, 0666)".into(), errno: errno(e) })
}

/// How to start a sandbox init ([`spawn_init`]).
pub(crate) struct InitStart<'a> {
    /// The init program.
    pub program: &'a std::path::Path,
    /// Its arguments: the init's marker, and a warm sandbox's after it.
    pub markers: &'a [&'a str],
    /// Its standard input: the spec.
    pub stdin: OwnedFd,
    /// The worker's standard output and error.
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// The descriptors it inherits (close-on-exec cleared in the child).
    pub fds: Vec<std::os::fd::RawFd>,
    /// `PR_SET_PDEATHSIG` on the init (see `NativeTier::die_with_caller`).
    pub die_with_caller: bool,
}

/// Spawns the init as `how` says, with a neutral `argv[0]` and an empty
/// environment in `/`, and opens its pidfd. Our copies of its stdio ends
/// are closed; on failure nothing is left running.
///
/// The init is started with `posix_spawn` (a vfork, see
/// [`crate::sys::spawn_vforked`]), so nothing runs between its fork and its
/// exec but the descriptor moves: a caller that wants it to die with the
/// calling thread says so in its `argv` ([`crate::wire::DIE_WITH_PREFIX`]),
/// and the init arms `PR_SET_PDEATHSIG` itself, first of all, and checks
/// the caller is still its parent.
pub(crate) fn spawn_init(how: InitStart<'_>) -> Result<(InitProcess, Arc<OwnedFd>), SandboxError> {
    let failed =
        |e: std::io::Error| SandboxError::SpawnInit { program: how.program.display().to_string(), errno: errno(e) };
    // A NUL inside a path or marker: EINVAL, as exec would say.
    let cstring = |s: &[u8]| CString::new(s).map_err(|_| failed(std::io::Error::from_raw_os_error(libc::EINVAL)));
    let program = cstring(how.program.as_os_str().as_bytes())?;
    // A neutral argv[0]: PID 1's command line is visible inside.
    let mut argv = vec![cstring(b"airlock-sandbox-init")?];
    for marker in how.markers {
        argv.push(cstring(marker.as_bytes())?);
    }
    if how.die_with_caller {
        argv.push(cstring(format!("{}{}", crate::wire::DIE_WITH_PREFIX, std::process::id()).as_bytes())?);
    }
    let spawned = crate::sys::spawn_vforked(&crate::sys::VforkSpawn {
        program: &program,
        argv: &argv,
        cwd: c"/",
        stdio: [how.stdin.as_raw_fd(), how.stdout.as_raw_fd(), how.stderr.as_raw_fd()],
        keep: &how.fds,
    });
    drop((how.stdin, how.stdout, how.stderr)); // our copies of the child's stdio ends
    let mut child = InitProcess { pid: spawned.map_err(failed)?, status: None };
    let pid = child.pid();
    match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => Ok((child, Arc::new(fd))),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(SandboxError::Wait { call: format!("pidfd_open({pid}, 0)"), errno: errno(e) })
        }
    }
}

/// An init started by [`spawn_init`], waited for at most once (its pid is
/// never signalled after it was reaped, so never reused).
#[derive(Debug)]
pub(crate) struct InitProcess {
    pid: Pid,
    status: Option<std::process::ExitStatus>,
}

impl InitProcess {
    /// Its pid.
    pub(crate) fn pid(&self) -> Pid {
        self.pid
    }

    /// Its pid, as a number.
    pub(crate) fn id(&self) -> u32 {
        self.pid.as_raw_nonzero().get() as u32
    }

    /// `SIGKILL`, unless it was already reaped.
    pub(crate) fn kill(&mut self) -> rustix::io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        rustix::process::kill_process(self.pid, Signal::KILL)
    }

    /// Waits for it to exit and reaps it (once; later calls return the
    /// same status).
    pub(crate) fn wait(&mut self) -> rustix::io::Result<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        if let Some(status) = self.status {
            return Ok(status);
        }
        let raw = loop {
            match rustix::process::waitpid(Some(self.pid), rustix::process::WaitOptions::empty()) {
                Ok(Some((_, st))) => break st.as_raw(),
                Ok(None) | Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e),
            }
        };
        let status = std::process::ExitStatus::from_raw(raw);
        self.status = Some(status);
        Ok(status)
    }
}

/// How long after a kill the caller waits for the sandbox to disappear.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(5);

/// Keeps the first `limit` bytes (in memory, or written to a file with the
/// last [`STDOUT_TAIL`] kept in memory) and counts the rest (also used
/// by the gVisor and Docker tiers).
pub(crate) struct Bounded {
    pub(crate) kept: Vec<u8>,
    limit: usize,
    /// Bytes kept so far (in memory or in `file`).
    stored: u64,
    total: u64,
    file: Option<std::fs::File>,
    /// The first write to `file` that failed.
    pub(crate) failed: Option<std::io::Error>,
}

impl Bounded {
    pub(crate) fn new(limit: usize) -> Self {
        Bounded { kept: Vec::new(), limit, stored: 0, total: 0, file: None, failed: None }
    }

    pub(crate) fn into_file(limit: usize, file: Option<std::fs::File>) -> Self {
        Bounded { file, ..Bounded::new(limit) }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = (self.limit as u64).saturating_sub(self.stored);
        let take = &bytes[..usize::try_from(room).unwrap_or(usize::MAX).min(bytes.len())];
        self.stored += take.len() as u64;
        match &mut self.file {
            None => self.kept.extend_from_slice(take),
            Some(file) => {
                if self.failed.is_none() {
                    if let Err(e) = file.write_all(take) {
                        self.failed = Some(e);
                    }
                }
                self.kept.extend_from_slice(take);
                let over = self.kept.len().saturating_sub(STDOUT_TAIL);
                self.kept.drain(..over);
            }
        }
    }

    pub(crate) fn truncated(&self) -> bool {
        self.total > self.stored
    }
}

/// One pipe being drained.
pub(crate) struct Stream {
    pub(crate) fd: Option<OwnedFd>,
    pub(crate) sink: Bounded,
}

/// Reads whatever is ready on the streams until all are at EOF or
/// `deadline` passes. Returns whether all reached EOF.
pub(crate) fn drain(streams: &mut [Stream], deadline: Instant) -> Result<bool, SandboxError> {
    drain_watching(streams, deadline, &mut |_| {})
}

/// [`drain`], calling `watch` with the streams after each read.
fn drain_watching(
    streams: &mut [Stream],
    deadline: Instant,
    watch: &mut dyn FnMut(&[Stream]),
) -> Result<bool, SandboxError> {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let open: Vec<usize> = (0..streams.len()).filter(|&i| streams[i].fd.is_some()).collect();
        if open.is_empty() {
            return Ok(true);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let mut ready = vec![false; open.len()];
        {
            let mut pfds: Vec<PollFd<'_>> = open
                .iter()
                .map(|&i| PollFd::new(streams[i].fd.as_ref().expect("open stream"), PollFlags::IN))
                .collect();
            match rustix::event::poll(&mut pfds, Some(&timespec(left))) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    return Err(SandboxError::Wait { call: "poll(stdout, stderr, status)".into(), errno: errno(e) })
                }
            }
            for (k, p) in pfds.iter().enumerate() {
                ready[k] = !p.revents().is_empty();
            }
        }
        for (k, &i) in open.iter().enumerate() {
            if !ready[k] {
                continue;
            }
            let s = &mut streams[i];
            let fd = s.fd.as_ref().expect("open stream");
            match rustix::io::read(fd, &mut buf[..]) {
                Ok(0) => s.fd = None,
                Ok(n) => s.sink.push(&buf[..n]),
                Err(rustix::io::Errno::INTR) | Err(rustix::io::Errno::AGAIN) => {}
                Err(e) => return Err(SandboxError::Wait { call: "read(pipe)".into(), errno: errno(e) }),
            }
        }
        watch(streams);
    }
}

/// Is the PID 1 reported as `host_pid` gone? Opens a pidfd on it and checks
/// (through `/proc/<pid>/status`) that it is still the init's child before
/// trusting it; a pid that no longer exists, or now belongs to someone
/// else, means PID 1 already exited.
fn pid1_gone(host_pid: i32, init_pid: u32, until: Instant) -> bool {
    let Some(pid) = Pid::from_raw(host_pid) else {
        return false;
    };
    let fd = match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return true,
        Err(_) => return false,
    };
    let status = proc_status::read(host_pid);
    let (ppid, state) = (proc_status::field(&status, "PPid:"), proc_status::field(&status, "State:"));
    if status.is_empty() || state.starts_with('Z') || state.starts_with('X') {
        return true;
    }
    if ppid != init_pid.to_string() {
        // Re-parented (the init died) or recycled: if recycled, ours is gone;
        // if re-parented, the pidfd still tells when it exits.
        let nspid = proc_status::field(&status, "NSpid:");
        if nspid.split_whitespace().last() != Some("1") {
            return true;
        }
    }
    exited_by(&fd, until)
}

/// The status records' place in [`wait_worker`]'s streams.
const STATUS: usize = 2;

fn wait_worker(mut w: NativeWorker) -> Result<WorkerOutcome, SandboxError> {
    let mut streams = [
        Stream { fd: w.stdout.take(), sink: Bounded::into_file(w.stdout_limit, w.stdout_sink.take()) },
        Stream { fd: Some(w.stderr), sink: Bounded::new(w.stderr_limit) },
        Stream { fd: Some(w.status), sink: Bounded::new(MAX_STATUS_BYTES) },
    ];
    let mut timed_out = false;
    let init_pid = w.guard.child.as_ref().map_or(0, InitProcess::id);
    // PID 1's mount namespace is unmounted off the wait (`mount_ns`).
    let mut mount_ns = MountNsHold::new();
    let mut watch = |s: &[Stream]| mount_ns.look(&s[STATUS].sink.kept, init_pid);
    let mut all_eof = drain_watching(&mut streams, w.deadline, &mut watch)?;
    if !all_eof {
        timed_out = !w.killed.load(Ordering::SeqCst);
        kill_init(&w.pidfd)?;
        all_eof = drain(&mut streams, Instant::now() + KILL_GRACE)?;
    }
    mount_ns.release();
    // The init exits right after its last status record; if it has not, kill it.
    let mut child = w.guard.child.take().ok_or_else(|| SandboxError::Protocol("the init was already reaped".into()))?;
    if !exited_by(&*w.pidfd, Instant::now() + KILL_GRACE) {
        kill_init(&w.pidfd)?;
    }
    let init_status =
        child.wait().map_err(|e| SandboxError::Wait { call: format!("waitpid({init_pid})"), errno: errno(e) })?;
    let killed = timed_out || w.killed.load(Ordering::SeqCst);
    // A lent output is the caller's again (a chown by root also clears a
    // set-id bit the tool may have set).
    if let Some(file) = w.lent_output.take() {
        let (uid, gid) = (rustix::process::geteuid(), rustix::process::getegid());
        rustix::fs::fchown(&file, Some(uid), Some(gid)).map_err(|e| SandboxError::Descriptor {
            call: format!("fchown(bound output, {}, {})", uid.as_raw(), gid.as_raw()),
            errno: errno(e),
        })?;
    }

    // Status records.
    let [out, err, status] = streams;
    let mut pid1 = None;
    let mut setup_error = None;
    let mut exit = None;
    let mut cleanup_all_reaped = false;
    let mut export: Option<OutputExport> = None;
    let mut done = false;
    let mut limits = w.limits.clone();
    let mut pid1_exited = false;
    for line in status.sink.kept.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let msg: StatusMsg = serde_json::from_slice(line).map_err(|e| {
            SandboxError::Protocol(format!("bad status record {:?}: {e}", String::from_utf8_lossy(line)))
        })?;
        match msg {
            StatusMsg::Pid1 { host_pid } => pid1 = Some(host_pid),
            StatusMsg::SetupFailed { error } => {
                setup_error.get_or_insert(error);
            }
            StatusMsg::Confined { landlock_abi, landlock_status } => {
                limits.landlock_abi = landlock_abi;
                limits.landlock_status = landlock_status;
            }
            StatusMsg::WorkerExited { exit: e } => exit = Some(e),
            StatusMsg::Cleanup { all_reaped, .. } => cleanup_all_reaped = all_reaped,
            StatusMsg::Export { export: e } => export = Some(e),
            StatusMsg::Done => done = true,
            StatusMsg::Pid1Exited { .. } => pid1_exited = true,
        }
    }

    let grace = Instant::now() + KILL_GRACE;
    let pid1_is_gone = match pid1 {
        Some(p) => pid1_gone(p, init_pid, grace),
        None => false,
    };
    let cgroup_gone = w.guard.cgroup.take().is_none_or(|cg| cg.remove());
    let cleanup_confirmed = all_eof
        && pid1_is_gone
        && cgroup_gone
        && (killed || (done && cleanup_all_reaped && pid1_exited && init_status.success()));

    if let Some(error) = setup_error {
        if !timed_out {
            return Err(error);
        }
    }
    if pid1.is_none() && !timed_out {
        return Err(SandboxError::Protocol(format!(
            "the sandbox init exited ({init_status}) without starting PID 1{}",
            if init_status.code() == Some(121) { ": it could not read its spec or status descriptor" } else { "" }
        )));
    }
    let output = if w.has_output {
        Some(export.unwrap_or(OutputExport {
            bytes: 0,
            over_limit: false,
            refused: Some(if timed_out { "the worker timed out" } else { "the sandbox ended before export" }.into()),
        }))
    } else {
        None
    };
    let exit = exit.unwrap_or(ExitStatusKind::Signaled(libc::SIGKILL));
    finish(exit, timed_out, out, err, output, cleanup_confirmed, limits)
}

/// The outcome of a worker that is gone, from its drained stdout and stderr
/// — an error instead when its stdout did not reach its file whole (then
/// the run cannot be judged on it).
pub(crate) fn finish(
    exit: ExitStatusKind,
    timed_out: bool,
    out: Stream,
    err: Stream,
    output: Option<OutputExport>,
    cleanup_confirmed: bool,
    limits: AppliedLimits,
) -> Result<WorkerOutcome, SandboxError> {
    if let Some(e) = out.sink.failed {
        return Err(SandboxError::Wait { call: "write(stdout file)".into(), errno: errno(e) });
    }
    Ok(WorkerOutcome {
        exit,
        timed_out,
        stdout_truncated: out.sink.truncated(),
        stdout: out.sink.kept,
        stderr_truncated: err.sink.truncated(),
        stderr: err.sink.kept,
        output,
        cleanup_confirmed,
        cgroup_limits_applied: limits.cgroup_limits_applied,
        limits,
    })
}

impl Worker for NativeWorker {
    fn kill_handle(&self) -> KillHandle {
        let (pidfd, killed) = (Arc::clone(&self.pidfd), Arc::clone(&self.killed));
        KillHandle::new(move || {
            killed.store(true, Ordering::SeqCst);
            kill_init(&pidfd)
        })
    }

    fn kill(&mut self) -> Result<(), SandboxError> {
        self.kill_handle().kill()
    }

    fn wait(self) -> Result<WorkerOutcome, SandboxError> {
        wait_worker(self)
    }
}

/// Owns the init process and the cgroup until [`Worker::wait`] takes them;
/// a worker dropped without being waited for is killed, and reaped (and its
/// cgroup removed) on a background thread.
#[derive(Debug)]
struct InitGuard {
    child: Option<InitProcess>,
    cgroup: Option<WorkerCgroup>,
    pidfd: Arc<OwnedFd>,
}

impl Drop for InitGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill_init(&self.pidfd);
            let cgroup = self.cgroup.take();
            let _ = std::thread::Builder::new().name("airlock-sandbox-reaper".into()).spawn(move || {
                let _ = child.wait();
                if let Some(cg) = cgroup {
                    cg.remove();
                }
            });
        }
    }
}

/// SIGKILL to the init through its pidfd (no pid reuse race); PID 1 follows
/// it through its parent-death signal and takes the namespace with it.
pub(crate) fn kill_init(pidfd: &OwnedFd) -> Result<(), SandboxError> {
    match rustix::process::pidfd_send_signal(pidfd, Signal::KILL) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(SandboxError::Wait { call: "pidfd_send_signal(init, SIGKILL)".into(), errno: errno(e) }),
    }
}

#[cfg(test)]
mod tests {
    use super::Bounded;

    #[test]
    fn bounded_keeps_the_head_and_counts_the_rest() {
        let mut b = Bounded::new(5);
        b.push(b"abc");
        b.push(b"defgh");
        assert_eq!(b.kept, b"abcde");
        assert_eq!(b.total, 8);
        assert!(b.truncated());
        let mut b = Bounded::new(5);
        b.push(b"abcde");
        assert!(!b.truncated());
    }
}
