//! One call's container: [`DockerWorker::start`] lays out the call
//! directory, creates, attaches to and starts the container; [`Worker::wait`]
//! drains stdout/stderr within their bounds until the container has exited
//! (killing it at the deadline or on request), removes it, confirms its
//! removal, and only then exports the output.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::errors::Error as ApiError;
use bollard::models::ContainerWaitResponse;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, InspectContainerOptions, KillContainerOptions,
    StartContainerOptions, WaitContainerOptions,
};
use futures_core::Stream;

use super::client::{engine_error, is_conflict, is_not_found, next, remove_and_confirm, Engine};
use super::container::{create_body, Bind};
use super::terminal::Bridge;
use super::{container_name, DockerSettings};
use crate::call_dir::{call_name, CallDir};
use crate::error::SandboxError;
use crate::outcome::{AppliedLimits, ExitStatusKind, OutputExport, WorkerOutcome};
use crate::parent::Bounded;
use crate::spec::{StagedOutput, WorkerSpec};
use crate::worker::{KillHandle, Worker};

/// How long after a kill the tier waits for the container to stop and its
/// output to end.
const KILL_GRACE: Duration = Duration::from_secs(10);

type Frames = Pin<Box<dyn Stream<Item = Result<LogOutput, ApiError>> + Send>>;
type Exits = Pin<Box<dyn Stream<Item = Result<ContainerWaitResponse, ApiError>> + Send>>;

/// A running Docker worker (one container).
pub struct DockerWorker {
    engine: Engine,
    container: Container,
    call_dir: Option<CallDir>,
    output: Option<StagedOutput>,
    frames: Option<Frames>,
    deadline: Instant,
    stdout_limit: usize,
    stdout_sink: Option<std::fs::File>,
    stderr_limit: usize,
    limits: AppliedLimits,
    kill: Arc<KillSwitch>,
    /// Its place in the tier's [`Cancel`](crate::Cancel), if it has one.
    pub(crate) cancel: Option<crate::cancel::Registration>,
    /// On a terminal: the thread that carries it.
    bridge: Option<Bridge>,
}

impl std::fmt::Debug for DockerWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerWorker")
            .field("container", &self.container.id)
            .field("call_dir", &self.call_dir.as_ref().map(|d| d.path()))
            .finish()
    }
}

/// The container's id, and whether it still needs removing.
#[derive(Debug)]
struct Container {
    id: String,
    removed: bool,
}

/// What a kill request sets; [`Worker::wait`] watches it.
#[derive(Debug)]
struct KillSwitch {
    socket: PathBuf,
    id: String,
    requested: AtomicBool,
    notify: tokio::sync::Notify,
}

impl KillSwitch {
    /// Records the request (so a running or later [`Worker::wait`] acts on
    /// it) and sends SIGKILL to the container now, from a thread of its own
    /// (the caller may be inside another async runtime).
    fn kill(&self) -> Result<(), SandboxError> {
        self.requested.store(true, Ordering::SeqCst);
        self.notify.notify_one();
        let (socket, id) = (self.socket.clone(), self.id.clone());
        std::thread::Builder::new()
            .name("airlock-docker-kill".into())
            .spawn(move || {
                let engine = Engine::connect(&socket)?;
                engine.block_on(kill_container(&engine, &id))
            })
            .map_err(|e| SandboxError::Unavailable(format!("cannot start a thread to kill the container: {e}")))?
            .join()
            .unwrap_or_else(|_| Err(SandboxError::Protocol("the container kill thread panicked".into())))
    }
}

/// SIGKILL to the container; one that is already stopped or gone is fine.
async fn kill_container(engine: &Engine, id: &str) -> Result<(), SandboxError> {
    match engine.api.kill_container(id, None::<KillContainerOptions>).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
        Err(e) => Err(engine_error(&format!("POST /containers/{id}/kill"), e)),
    }
}

impl DockerWorker {
    /// Starts `spec` as a container with `settings`; on any error, whatever
    /// was made (container, call directory) is removed again. With `tty`,
    /// the container has a terminal whose other end is returned.
    pub(crate) fn start(
        settings: &DockerSettings,
        mut spec: WorkerSpec,
        tty: bool,
    ) -> Result<(DockerWorker, Option<std::fs::File>), SandboxError> {
        spec.validate()?;
        crate::call_dir::refuse_native_only(&spec, "docker")?;
        let started = Instant::now();
        let engine = Engine::connect(&settings.socket)?;
        let name = call_name(&spec);
        let mut call_dir = CallDir::create(&settings.state_dir, &name)?;
        let binds = match lay_out(&mut call_dir, &spec) {
            Ok(b) => b,
            Err(e) => {
                let _ = call_dir.remove();
                return Err(e);
            }
        };
        let body = create_body(settings, &spec, &name, &binds, tty);
        let container_name = container_name(settings, &name);
        let created = engine.block_on(async {
            let opts = CreateContainerOptions { name: Some(container_name.clone()), platform: String::new() };
            engine.api.create_container(Some(opts), body).await.map_err(|e| create_error(settings, e))
        });
        let id = match created {
            Ok(c) => c.id,
            Err(e) => {
                // A create that failed half-way may still have left it.
                let _ = engine.block_on(remove_and_confirm(&engine.api, &container_name));
                let _ = call_dir.remove();
                return Err(e);
            }
        };
        // A terminal is attached by its bridge, before the start, so no
        // output is lost.
        let terminal = if tty {
            match super::terminal::attach(&settings.socket, &id) {
                Ok(t) => Some(t),
                Err(e) => {
                    let _ = engine.block_on(remove_and_confirm(&engine.api, &id));
                    let _ = call_dir.remove();
                    return Err(e);
                }
            }
        } else {
            None
        };
        let begun = engine.block_on(async {
            let limits = applied_limits(&engine, &id, &spec).await?;
            if tty {
                engine
                    .api
                    .start_container(&id, None::<StartContainerOptions>)
                    .await
                    .map_err(|e| launch_error(&format!("POST /containers/{id}/start"), &spec.argv[0], e))?;
                return Ok::<_, SandboxError>((limits, None));
            }
            let attach = AttachContainerOptions {
                stream: true,
                stdout: true,
                stderr: true,
                stdin: false,
                logs: false,
                detach_keys: None,
            };
            let frames = engine
                .api
                .attach_container(&id, Some(attach))
                .await
                .map_err(|e| launch_error(&format!("POST /containers/{id}/attach"), &spec.argv[0], e))?
                .output;
            engine
                .api
                .start_container(&id, None::<StartContainerOptions>)
                .await
                .map_err(|e| launch_error(&format!("POST /containers/{id}/start"), &spec.argv[0], e))?;
            Ok::<_, SandboxError>((limits, Some(frames)))
        });
        let (limits, frames) = match begun {
            Ok(v) => v,
            Err(e) => {
                let _ = engine.block_on(remove_and_confirm(&engine.api, &id));
                let _ = call_dir.remove();
                return Err(e);
            }
        };
        let (bridge, master) = terminal.map_or((None, None), |(b, m)| (Some(b), Some(m)));
        let kill = Arc::new(KillSwitch {
            socket: settings.socket.clone(),
            id: id.clone(),
            requested: AtomicBool::new(false),
            notify: tokio::sync::Notify::new(),
        });
        let worker = DockerWorker {
            engine,
            container: Container { id, removed: false },
            call_dir: Some(call_dir),
            output: spec.output.take(),
            frames,
            deadline: started + spec.timeout,
            stdout_limit: spec.stdout_limit,
            stdout_sink: spec.stdout_sink.take(),
            stderr_limit: spec.stderr_limit,
            limits,
            kill,
            cancel: None,
            bridge,
        };
        Ok((worker, master))
    }
}

/// Private copies of the inputs and the output file, as binds.
fn lay_out(call_dir: &mut CallDir, spec: &WorkerSpec) -> Result<Vec<Bind>, SandboxError> {
    let mut binds = Vec::new();
    for (i, input) in spec.inputs.iter().enumerate() {
        let md = input.file.metadata().map_err(|e| SandboxError::Descriptor {
            call: format!("fstat(input {:?})", input.virtual_path),
            errno: crate::error::errno(e),
        })?;
        if !md.is_file() {
            return Err(SandboxError::InvalidSpec(format!("input {:?} is not a regular file", input.virtual_path)));
        }
        let host = call_dir.place_input(i, input)?;
        binds.push(Bind { host, virtual_path: input.virtual_path.clone(), read_only: true });
    }
    if let Some(o) = &spec.output {
        let host = call_dir.create_output()?;
        binds.push(Bind { host, virtual_path: o.virtual_path.clone(), read_only: false });
    }
    Ok(binds)
}

/// A failed create: a missing image (never pulled) or an unknown runtime is
/// the host's set-up, said with its fix.
fn create_error(settings: &DockerSettings, e: ApiError) -> SandboxError {
    if is_not_found(&e) {
        return SandboxError::Unavailable(format!(
            "the Docker image {:?} does not exist in the daemon at {} (airlock never pulls): make it offline with \
             `scripts/docker-image.sh {} {}` or `docker import`, or set [sandbox.docker] image",
            settings.image,
            settings.socket.display(),
            settings.socket.display(),
            settings.image
        ));
    }
    if let (ApiError::DockerResponseServerError { message, .. }, Some(rt)) = (&e, &settings.runtime) {
        if message.contains("runtime") {
            return SandboxError::Unavailable(format!(
                "the Docker daemon has no runtime {rt:?} ({message}): register it in daemon.json \
                 (\"runtimes\": {{\"{rt}\": {{\"path\": \"/usr/bin/{rt}\"}}}}) and restart dockerd"
            ));
        }
    }
    engine_error("POST /containers/create", e)
}

/// A failed start (or, with Podman, attach, which creates the process): a
/// `program` that cannot be executed is [`SandboxError::Exec`].
fn launch_error(call: &str, program: &str, e: ApiError) -> SandboxError {
    if let ApiError::DockerResponseServerError { message, .. } = &e {
        if message.contains("exec: \"") {
            let errno = if message.contains("permission denied") { libc::EACCES } else { libc::ENOENT };
            return SandboxError::Exec { program: program.into(), errno: crate::error::OsErrno(errno) };
        }
    }
    engine_error(call, e)
}

/// Which of the requested cgroup limits the daemon kept (it drops, with a
/// warning, what the host's cgroups cannot hold).
async fn applied_limits(engine: &Engine, id: &str, spec: &WorkerSpec) -> Result<AppliedLimits, SandboxError> {
    let info = engine
        .api
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .map_err(|e| engine_error(&format!("GET /containers/{id}/json"), e))?;
    let hc = info.host_config.unwrap_or_default();
    let memory = spec.limits.memory_bytes.is_some() && hc.memory.unwrap_or(0) > 0;
    let pids = spec.limits.pids.is_some() && hc.pids_limit.unwrap_or(0) > 0;
    let mut dropped = Vec::new();
    if spec.limits.memory_bytes.is_some() && !memory {
        dropped.push("memory");
    }
    if spec.limits.pids.is_some() && !pids {
        dropped.push("pids");
    }
    Ok(AppliedLimits {
        cgroup_limits_applied: memory || pids,
        cgroup_memory: memory,
        cgroup_pids: pids,
        cgroup_skipped: (!dropped.is_empty()).then(|| {
            format!("the Docker daemon dropped the {} limit (its host lacks the cgroup)", dropped.join(" and "))
        }),
        ..AppliedLimits::default()
    })
}

/// Why driving the container stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Output ended and the container exited.
    Finished,
    /// The deadline passed.
    Deadline,
    /// A kill was requested.
    Killed,
    /// The output stream broke (the worker is killed: what it printed
    /// cannot be judged).
    Broken,
}

/// What is collected while the container runs.
struct Collect {
    frames: Option<Frames>,
    waiting: Option<Exits>,
    stdout: Bounded,
    stderr: Bounded,
    exit_code: Option<i64>,
    error: Option<SandboxError>,
}

impl Collect {
    /// Drains output and waits for the exit until both are done, `until`
    /// passes, or (with `kill`) a kill is requested.
    async fn drive(&mut self, until: Instant, kill: Option<&KillSwitch>) -> Stop {
        let until = tokio::time::Instant::from_std(until);
        loop {
            if self.frames.is_none() && self.waiting.is_none() {
                return Stop::Finished;
            }
            let killed = async {
                match kill {
                    Some(k) if !k.requested.load(Ordering::SeqCst) => k.notify.notified().await,
                    Some(_) => {}
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = killed => return Stop::Killed,
                () = tokio::time::sleep_until(until) => return Stop::Deadline,
                frame = async { next(self.frames.as_mut().expect("open")).await }, if self.frames.is_some() => {
                    match frame {
                        Some(Ok(LogOutput::StdOut { message })) => self.stdout.push(&message),
                        Some(Ok(LogOutput::StdErr { message })) => self.stderr.push(&message),
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            self.error.get_or_insert(engine_error("attach (stdout, stderr)", e));
                            self.frames = None;
                            return Stop::Broken;
                        }
                        None => self.frames = None,
                    }
                }
                status = async { next(self.waiting.as_mut().expect("open")).await }, if self.waiting.is_some() => {
                    self.waiting = None;
                    match status {
                        Some(Ok(r)) => self.exit_code = Some(r.status_code),
                        Some(Err(ApiError::DockerContainerWaitError { code, .. })) => self.exit_code = Some(code),
                        Some(Err(e)) => {
                            self.error.get_or_insert(engine_error("POST /containers/ID/wait", e));
                        }
                        None => {}
                    }
                }
            }
        }
    }
}

fn wait_worker(mut w: DockerWorker) -> Result<WorkerOutcome, SandboxError> {
    let id = w.container.id.clone();
    let frames = w.frames.take();
    let kill = Arc::clone(&w.kill);
    let mut c = Collect {
        frames,
        waiting: None,
        stdout: Bounded::into_file(w.stdout_limit, w.stdout_sink.take()),
        stderr: Bounded::new(w.stderr_limit),
        exit_code: None,
        error: None,
    };
    let engine = &w.engine;
    let (stop, oom_killed, removed) = engine.block_on(async {
        let wait = WaitContainerOptions { condition: "not-running".into() };
        c.waiting = Some(Box::pin(engine.api.wait_container(&id, Some(wait))));
        let mut stop = c.drive(w.deadline, Some(&kill)).await;
        if stop == Stop::Deadline && kill.requested.load(Ordering::SeqCst) {
            stop = Stop::Killed;
        }
        if stop != Stop::Finished {
            if let Err(e) = kill_container(engine, &id).await {
                c.error.get_or_insert(e);
            }
            c.drive(Instant::now() + KILL_GRACE, None).await;
        }
        let oom = match engine.api.inspect_container(&id, None::<InspectContainerOptions>).await {
            Ok(info) => info.state.and_then(|s| s.oom_killed).unwrap_or(false),
            Err(_) => false,
        };
        (stop, oom, remove_and_confirm(&engine.api, &id).await)
    });
    let removed = match removed {
        Ok(gone) => gone,
        Err(e) => {
            c.error.get_or_insert(e);
            false
        }
    };
    w.container.removed = removed;
    if let Some(bridge) = w.bridge.take() {
        bridge.join();
    }
    let timed_out = stop == Stop::Deadline;
    let killed = stop != Stop::Finished;

    let call_dir = w.call_dir.take().expect("the call directory lives until wait");
    let output = match &w.output {
        None => None,
        Some(_) if killed => {
            Some(Ok(refused(if timed_out { "the worker timed out" } else { "the worker was killed" })))
        }
        Some(_) if !removed => Some(Ok(refused("the container's removal was not confirmed"))),
        Some(o) => Some(call_dir.export(o)),
    };
    let dir_removed = call_dir.remove();
    let output = output.transpose()?;
    // A kill or the deadline decides the outcome; any other failure is the error.
    if let Some(e) = c.error.take().filter(|_| !matches!(stop, Stop::Deadline | Stop::Killed)) {
        return Err(e);
    }
    if let Some(e) = c.stdout.failed.take() {
        return Err(SandboxError::Wait { call: "write(stdout file)".into(), errno: crate::error::errno(e) });
    }
    let exit = if killed || oom_killed {
        ExitStatusKind::Signaled(libc::SIGKILL)
    } else {
        match c.exit_code {
            Some(code) => ExitStatusKind::Exited(i32::try_from(code).unwrap_or(i32::MAX)),
            None => {
                return Err(SandboxError::ContainerEngine {
                    call: format!("POST /containers/{id}/wait"),
                    message: "the engine did not report the container's exit".into(),
                })
            }
        }
    };
    Ok(WorkerOutcome {
        exit,
        timed_out,
        stdout_truncated: c.stdout.truncated(),
        stdout: std::mem::take(&mut c.stdout.kept),
        stderr_truncated: c.stderr.truncated(),
        stderr: std::mem::take(&mut c.stderr.kept),
        output,
        cleanup_confirmed: removed && dir_removed.is_ok(),
        cgroup_limits_applied: w.limits.cgroup_limits_applied,
        limits: w.limits.clone(),
    })
}

fn refused(why: &str) -> OutputExport {
    OutputExport { bytes: 0, over_limit: false, refused: Some(why.into()) }
}

impl Worker for DockerWorker {
    fn kill_handle(&self) -> KillHandle {
        let kill = Arc::clone(&self.kill);
        KillHandle::new(move || kill.kill())
    }

    fn kill(&mut self) -> Result<(), SandboxError> {
        self.kill.kill()
    }

    fn wait(self) -> Result<WorkerOutcome, SandboxError> {
        wait_worker(self)
    }
}

impl Drop for DockerWorker {
    /// A worker dropped without [`Worker::wait`] (or whose removal was not
    /// confirmed) is force-removed, and its call directory with it.
    fn drop(&mut self) {
        if !self.container.removed {
            let _ = self.engine.block_on(remove_and_confirm(&self.engine.api, &self.container.id));
        }
        if let Some(dir) = self.call_dir.take() {
            let _ = dir.remove();
        }
    }
}
