//! A running microVM worker: the QEMU child, the host end of the guest's
//! byte stream, the boot and call deadlines, and the verified export.
#![forbid(unsafe_code)]

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::process::{PidfdFlags, Signal};

use super::frame::{self, FileHeader, GuestCall, GuestError, GuestOutput, GuestResult, Hello, Kind};
use super::{firecracker, qemu, Accel, MicrovmSettings, Vmm};
use crate::call_dir::CallDir;
use crate::error::{errno, OsErrno, SandboxError};
use crate::outcome::{AppliedLimits, ExitStatusKind, OutputExport};
use crate::parent::{Bounded, Stream, KILL_GRACE};
use crate::ready::exited_by;
use crate::spec::{StagedOutput, WorkerSpec};
use crate::worker::{KillHandle, Worker};
use crate::WorkerOutcome;

/// What [`MicrovmWorker::boot`] needs.
pub(crate) struct Start<'a> {
    pub settings: &'a MicrovmSettings,
    pub accel: Accel,
    pub call: CallDir,
    /// The spec (its output and stdout sink are taken).
    pub spec: &'a mut WorkerSpec,
    /// Added to the kernel command line.
    pub extra_cmdline: &'a str,
    /// The fingerprint the guest must report (`None`: this binary's).
    pub expect: Option<String>,
    /// The tool runs on a terminal in the guest ([`super::terminal`]).
    pub tty: bool,
}

/// A running microVM worker (the guest has the call and its inputs).
#[derive(Debug)]
pub struct MicrovmWorker {
    guard: Guard,
    pidfd: Arc<OwnedFd>,
    killed: Arc<AtomicBool>,
    stream: UnixStream,
    deadline: Instant,
    stdout_limit: usize,
    stdout_sink: Option<std::fs::File>,
    stderr_limit: usize,
    output: Option<StagedOutput>,
    argv0: String,
    cancel: Option<crate::cancel::Registration>,
    /// The tool's stdout is a session's terminal ([`super::terminal`]).
    terminal: bool,
}

/// Owns the QEMU child and the call directory until [`Worker::wait`] takes
/// them; dropped unwaited, it kills the VM and removes the directory.
#[derive(Debug)]
struct Guard {
    child: Option<Child>,
    call: Option<CallDir>,
    pidfd: Arc<OwnedFd>,
}

/// The host binary's fingerprint (its build ID), read once per process.
pub(crate) fn own_fingerprint() -> Result<String, SandboxError> {
    static OWN: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    OWN.get_or_init(|| super::fingerprint::of_file(std::path::Path::new("/proc/self/exe")).map_err(|e| e.to_string()))
        .clone()
        .map_err(|e| SandboxError::Unavailable(format!("cannot read airlock's own build ID: {e}")))
}

fn proto(e: frame::FrameError) -> SandboxError {
    SandboxError::Protocol(format!("microvm guest: {e}"))
}

impl MicrovmWorker {
    /// Boots the VM, checks the guest's hello within the boot deadline, and
    /// sends the call and its inputs. Nothing is left running on error.
    pub(crate) fn boot(s: Start<'_>) -> Result<MicrovmWorker, SandboxError> {
        let Start { settings, accel, call, spec, extra_cmdline, expect, tty } = s;
        let expect = match expect {
            Some(e) => e,
            None => own_fingerprint()?,
        };
        let boot_deadline = Instant::now() + settings.boot_timeout.max(Duration::from_millis(1));
        let (child, link) = match settings.vmm {
            Vmm::Qemu => {
                let (host, vm) = match UnixStream::pair() {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = call.remove();
                        return Err(SandboxError::Descriptor {
                            call: "socketpair(AF_UNIX)".into(),
                            errno: OsErrno::of(&e),
                        });
                    }
                };
                let args = qemu::args(settings, accel, call.path(), extra_cmdline);
                match qemu::spawn(settings, args, OwnedFd::from(vm), &call.path().join(super::VMM_LOG)) {
                    Ok(c) => (c, Link::Connected(host)),
                    Err(e) => {
                        let _ = call.remove();
                        return Err(e);
                    }
                }
            }
            Vmm::Firecracker => match firecracker::start(settings, call.path(), extra_cmdline) {
                Ok(started) => (started.child, Link::Listening(started.listener)),
                Err(e) => {
                    let _ = call.remove();
                    return Err(e);
                }
            },
        };
        let pid = rustix::process::Pid::from_child(&child);
        let pidfd = match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
            Ok(fd) => Arc::new(fd),
            Err(e) => {
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                let _ = call.remove();
                return Err(SandboxError::Wait { call: format!("pidfd_open({pid}, 0)"), errno: errno(e) });
            }
        };
        let guard = Guard { child: Some(child), call: Some(call), pidfd: Arc::clone(&pidfd) };
        let host = match link {
            Link::Connected(host) => host,
            Link::Listening(listener) => match firecracker::accept(&listener, &pidfd, boot_deadline) {
                Ok(stream) => stream,
                Err(why) => {
                    let e = match why {
                        firecracker::NoGuest::Timeout => SandboxError::BootTimeout {
                            waited_ms: settings.boot_timeout.as_millis() as u64,
                            console: console_tail(guard.call.as_ref()),
                        },
                        firecracker::NoGuest::VmmExited => SandboxError::Unavailable(format!(
                            "the VM ended before its guest connected; {}",
                            console_tail(guard.call.as_ref())
                        )),
                        firecracker::NoGuest::Failed(e) => e,
                    };
                    guard.abort();
                    return Err(e);
                }
            },
        };
        let mut worker = MicrovmWorker {
            guard,
            pidfd,
            killed: Arc::new(AtomicBool::new(false)),
            stream: host,
            deadline: Instant::now(),
            stdout_limit: spec.stdout_limit,
            stdout_sink: None,
            stderr_limit: spec.stderr_limit,
            output: None,
            argv0: spec.argv[0].clone(),
            cancel: None,
            terminal: false,
        };
        if let Err(e) = worker.handshake(settings, boot_deadline, &expect).and_then(|()| worker.send_call(spec, tty)) {
            worker.abort();
            return Err(e);
        }
        worker.deadline = Instant::now() + spec.timeout + KILL_GRACE;
        worker.stdout_sink = spec.stdout_sink.take();
        worker.output = spec.output.take();
        Ok(worker)
    }

    fn handshake(&mut self, settings: &MicrovmSettings, deadline: Instant, expect: &str) -> Result<(), SandboxError> {
        let timeout = |w: &Self| SandboxError::BootTimeout {
            waited_ms: settings.boot_timeout.as_millis() as u64,
            console: w.console_tail(),
        };
        let wait = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        if self.stream.set_read_timeout(Some(wait)).is_err() {
            return Err(timeout(self));
        }
        let (kind, payload) = match frame::read_frame(&mut self.stream) {
            Ok(f) => f,
            Err(frame::FrameError::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                return Err(timeout(self));
            }
            Err(frame::FrameError::Io(e)) => {
                return Err(SandboxError::Unavailable(format!(
                    "the VM ended before its guest said hello ({e}); {}",
                    self.console_tail()
                )))
            }
            Err(e) => return Err(proto(e)),
        };
        let hello: Hello = match kind {
            Kind::Hello => frame::parse(kind, &payload).map_err(proto)?,
            other => return Err(proto(frame::FrameError::Bad(format!("expected hello, got a {other:?} frame")))),
        };
        if hello.protocol != frame::PROTOCOL_VERSION || hello.fingerprint != expect {
            return Err(SandboxError::GuestMismatch {
                protocol: hello.protocol,
                fingerprint: hello.fingerprint,
                expected_protocol: frame::PROTOCOL_VERSION,
                expected_fingerprint: expect.to_owned(),
            });
        }
        Ok(())
    }

    fn send_call(&mut self, spec: &WorkerSpec, tty: bool) -> Result<(), SandboxError> {
        let send = |e: std::io::Error| SandboxError::Protocol(format!("microvm guest: sending the call: {e}"));
        let mut inputs = Vec::new();
        for input in &spec.inputs {
            let meta = input.file.metadata().map_err(send)?;
            inputs.push((input, meta.len()));
        }
        // Hash first (the header goes before the bytes), then send; a file
        // that changes in between is caught by the guest's check.
        let mut headers = Vec::new();
        for (input, size) in &inputs {
            let mut f = &input.file;
            std::io::Seek::rewind(&mut f).map_err(send)?;
            let sha256 = frame::send_file(&mut std::io::sink(), &mut f, *size).map_err(send)?;
            headers.push(FileHeader { path: input.virtual_path.clone(), size: *size, sha256 });
        }
        let call = GuestCall {
            argv: spec.argv.clone(),
            env: crate::worker_exec::worker_env(&spec.env, false),
            working_dir: spec.working_dir.clone(),
            inputs: headers,
            output: spec.output.as_ref().map(|o| (o.virtual_path.clone(), o.max_bytes)),
            limits: spec.limits.clone(),
            timeout_ms: spec.timeout.as_millis() as u64,
            stdout_limit: spec.stdout_limit as u64,
            stderr_limit: spec.stderr_limit as u64,
            tty,
        };
        self.stream.set_write_timeout(Some(spec.timeout)).map_err(send)?;
        frame::write_json(&mut self.stream, Kind::Call, &call).map_err(send)?;
        for (input, size) in &inputs {
            let mut f = &input.file;
            std::io::Seek::rewind(&mut f).map_err(send)?;
            frame::send_file(&mut self.stream, &mut f, *size).map_err(send)?;
        }
        Ok(())
    }

    fn console_tail(&self) -> String {
        console_tail(self.guard.call.as_ref())
    }

    /// Kills the VM, waits for it and removes the call directory (a boot
    /// that failed).
    fn abort(self) {
        let MicrovmWorker { guard, .. } = self;
        guard.abort();
    }

    /// Registers the worker with `cancel` (killing it at once if cancelled).
    /// Makes `sink` (one end of a socket pair) the terminal the tool's
    /// output goes to, whole; returns a second handle of the connection to
    /// the guest, for the stdin frames. What the tool writes after the
    /// caller has gone is dropped.
    pub(super) fn carry_terminal(&mut self, sink: std::fs::File) -> Result<UnixStream, SandboxError> {
        self.stdout_sink = Some(sink);
        self.terminal = true;
        self.stream
            .try_clone()
            .map_err(|e| SandboxError::Descriptor { call: "dup(guest connection)".into(), errno: errno(e) })
    }

    pub(crate) fn with_cancel(mut self, cancel: &crate::Cancel) -> Self {
        self.cancel = Some(cancel.register(self.kill_handle()));
        self
    }
}

/// How the host reaches the guest's byte stream.
enum Link {
    /// QEMU's virtio-serial port: a socket pair, connected from the start.
    Connected(UnixStream),
    /// Firecracker's vsock: the guest connects once it has booted.
    Listening(UnixListener),
}

/// The tail of the guest console, the VMM's stderr and Firecracker's log.
fn console_tail(call: Option<&CallDir>) -> String {
    let Some(call) = call else { return String::new() };
    let tail = |name: &std::path::Path| {
        let b = std::fs::read(call.path().join(name)).unwrap_or_default();
        let s = String::from_utf8_lossy(&b[b.len().saturating_sub(400)..]).trim().to_owned();
        if s.is_empty() {
            "nothing".to_owned()
        } else {
            format!("{s:?}")
        }
    };
    let mut said =
        format!("console said {}, the VMM said {}", tail(super::CONSOLE_LOG.as_ref()), tail(super::VMM_LOG.as_ref()));
    if let Some(log) = firecracker::log_of(call.path()) {
        said.push_str(&format!(", Firecracker's log said {}", tail(&log)));
    }
    said
}

fn kill_vm(pidfd: &OwnedFd) {
    let _ = rustix::process::pidfd_send_signal(pidfd, Signal::KILL);
}

/// What the guest said after the call started.
struct Conversation {
    result: Option<GuestResult>,
    output: Option<OutputExport>,
    error: Option<GuestError>,
    ended: bool,
    timed_out: bool,
}

fn refused(why: String) -> OutputExport {
    OutputExport { bytes: 0, over_limit: false, refused: Some(why) }
}

/// Reads the guest's frames until `End`, an error or the deadline.
fn converse(w: &mut MicrovmWorker, streams: &mut [Stream; 2]) -> Conversation {
    let mut c = Conversation { result: None, output: None, error: None, ended: false, timed_out: false };
    loop {
        let left = w.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || w.stream.set_read_timeout(Some(left)).is_err() {
            c.timed_out = !w.killed.load(Ordering::SeqCst);
            return c;
        }
        let (kind, payload) = match frame::read_frame(&mut w.stream) {
            Ok(f) => f,
            Err(frame::FrameError::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                c.timed_out = !w.killed.load(Ordering::SeqCst);
                return c;
            }
            Err(_) => return c,
        };
        match kind {
            Kind::Stdout => streams[0].sink.push(&payload),
            Kind::Stderr => streams[1].sink.push(&payload),
            Kind::Error => {
                c.error = frame::parse(kind, &payload).ok();
                return c;
            }
            Kind::Result => {
                let Ok(result) = frame::parse::<GuestResult>(kind, &payload) else { return c };
                c.output = match (&w.output, &result.output) {
                    (None, _) => None,
                    (Some(_), None) => Some(refused("the guest reported no output".into())),
                    (Some(_), Some(GuestOutput::OverLimit)) => {
                        Some(OutputExport { bytes: 0, over_limit: true, refused: None })
                    }
                    (Some(_), Some(GuestOutput::Refused(why))) => Some(refused(why.clone())),
                    (Some(o), Some(GuestOutput::Exported(header))) => Some(receive(&mut w.stream, o, header)),
                };
                c.result = Some(result);
            }
            Kind::End => {
                c.ended = true;
                let _ = frame::write_frame(&mut w.stream, Kind::End, &[]);
                return c;
            }
            Kind::Hello | Kind::Call | Kind::Data | Kind::Stdin | Kind::Hangup => return c,
        }
    }
}

/// Verifies the exported bytes into the host staging file; on any failure
/// the file is left empty and the output refused.
fn receive(stream: &mut UnixStream, output: &StagedOutput, header: &FileHeader) -> OutputExport {
    let mut file = &output.file;
    let got = frame::recv_file(stream, &mut file, header, output.max_bytes);
    let flushed = got.map_err(|e| e.to_string()).and_then(|()| file.flush().map_err(|e| e.to_string()));
    match flushed {
        Ok(()) => OutputExport { bytes: header.size, over_limit: false, refused: None },
        Err(why) => {
            let _ = output.file.set_len(0);
            refused(format!("the guest's transfer was refused: {why}"))
        }
    }
}

fn wait_worker(mut w: MicrovmWorker) -> Result<WorkerOutcome, SandboxError> {
    let mut streams = [
        Stream { fd: None, sink: Bounded::into_file(w.stdout_limit, w.stdout_sink.take()) },
        Stream { fd: None, sink: Bounded::new(w.stderr_limit) },
    ];
    let talk = converse(&mut w, &mut streams);
    if w.terminal {
        // A session that hung up reads its terminal no more.
        streams[0].sink.failed.take_if(|e| e.kind() == std::io::ErrorKind::BrokenPipe);
    }
    // The guest powers off after `End`; anything else is killed now.
    if !(talk.ended && exited_by(&*w.pidfd, Instant::now() + KILL_GRACE)) {
        kill_vm(&w.pidfd);
    }
    let mut child = w.guard.child.take().ok_or_else(|| SandboxError::Protocol("the VMM was already reaped".into()))?;
    if !exited_by(&*w.pidfd, Instant::now() + KILL_GRACE) {
        kill_vm(&w.pidfd);
    }
    child.wait().map_err(|e| SandboxError::Wait { call: format!("waitpid({})", child.id()), errno: errno(e) })?;
    let call = w.guard.call.take().ok_or_else(|| SandboxError::Protocol("the call directory is gone".into()))?;
    let left = qemu::kill_processes(call.path(), KILL_GRACE);
    let console = w_console(&call);
    let removed = call.remove();
    let killed = w.killed.load(Ordering::SeqCst);
    if let Some(e) = talk.error {
        if e.step == "exec" {
            return Err(SandboxError::Exec {
                program: w.argv0.clone(),
                errno: OsErrno(e.errno.unwrap_or(libc::ENOENT)),
            });
        }
        return Err(SandboxError::Unavailable(format!("the microvm guest could not run the call: {}", e.message)));
    }
    let timed_out = talk.timed_out || talk.result.as_ref().is_some_and(|r| r.timed_out);
    let Some(result) = talk.result.filter(|_| !killed && !talk.timed_out) else {
        if !killed && !timed_out {
            return Err(SandboxError::Protocol(format!("the microvm guest ended without a result; {console}")));
        }
        let output = w
            .output
            .as_ref()
            .map(|_| refused(if timed_out { "the worker timed out" } else { "the worker was killed" }.into()));
        let [out, err] = streams;
        let confirmed = left.is_empty() && removed.is_ok();
        return crate::parent::finish(
            ExitStatusKind::Signaled(libc::SIGKILL),
            timed_out,
            out,
            err,
            output,
            confirmed,
            limits(),
        );
    };
    let confirmed = result.cleanup_confirmed && talk.ended && left.is_empty() && removed.is_ok();
    let output = match talk.output {
        Some(o) if o.exported() && !confirmed => {
            if let Some(staged) = &w.output {
                let _ = staged.file.set_len(0);
            }
            Some(refused("the VM's cleanup could not be confirmed".into()))
        }
        other => other,
    };
    let [out, err] = streams;
    crate::parent::finish(result.exit, result.timed_out, out, err, output, confirmed, limits())
}

fn w_console(call: &CallDir) -> String {
    let text = std::fs::read(call.path().join(super::CONSOLE_LOG)).unwrap_or_default();
    format!("console: {:?}", String::from_utf8_lossy(&text[text.len().saturating_sub(400)..]).trim())
}

/// What this tier reports in [`AppliedLimits`]: rlimits inside the guest,
/// its own kernel, no Landlock.
fn limits() -> AppliedLimits {
    AppliedLimits {
        landlock_status: "not used: the tool runs on its own kernel in a microVM that holds only its files".into(),
        cgroup_skipped: Some("the guest's RAM bounds it; rlimits inside the guest".into()),
        ..AppliedLimits::default()
    }
}

impl Worker for MicrovmWorker {
    fn kill_handle(&self) -> KillHandle {
        let (pidfd, killed) = (Arc::clone(&self.pidfd), Arc::clone(&self.killed));
        KillHandle::new(move || {
            killed.store(true, Ordering::SeqCst);
            kill_vm(&pidfd);
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

impl Guard {
    /// Kills the VM, waits for it and removes the call directory (a boot
    /// that failed).
    fn abort(mut self) {
        kill_vm(&self.pidfd);
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        if let Some(call) = self.call.take() {
            let _ = qemu::kill_processes(call.path(), KILL_GRACE);
            let _ = call.remove();
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        kill_vm(&self.pidfd);
        let call = self.call.take();
        let _ = std::thread::Builder::new().name("airlock-microvm-reaper".into()).spawn(move || {
            let _ = child.wait();
            if let Some(call) = call {
                let _ = qemu::kill_processes(call.path(), KILL_GRACE);
                let _ = call.remove();
            }
        });
    }
}
