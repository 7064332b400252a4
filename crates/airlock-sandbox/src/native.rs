//! The native tier: Linux namespaces, a private tmpfs root, Landlock,
//! seccomp, rlimits and (where delegated) a cgroup, set up by a re-executed
//! init so root and unprivileged callers take one code path.
#![forbid(unsafe_code)]

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::cgroup::{SharedCgroup, WorkerCgroup};
use crate::error::{errno, SandboxError};
use crate::outcome::AppliedLimits;
use crate::parent::{dup_for_init, kill_init, open_to_worker, pipe, NativeWorker, Pipes};
use crate::placement::{Access, Chosen, Placement};
use crate::spec::WorkerSpec;
use crate::wire::{InitInput, InitOutput, InitProvided, InitSpec};
use crate::worker::{Tier, Worker};

/// The native tier.
///
/// ```no_run
/// use airlock_sandbox::{NativeTier, Tier, Worker, WorkerSpec};
/// # fn main() -> Result<(), airlock_sandbox::SandboxError> {
/// airlock_sandbox::init::maybe_run_init(); // first thing in main()
/// let tier = NativeTier::new(std::env::current_exe().unwrap());
/// let outcome = tier.start(WorkerSpec::new(["echo", "hello"]))?.wait()?;
/// assert_eq!(outcome.stdout, b"hello\n");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct NativeTier {
    init_program: PathBuf,
    cgroup_parent: Option<PathBuf>,
    cgroups: bool,
    require_cgroup: bool,
    shared_cgroup: Option<Arc<SharedCgroup>>,
    die_with_caller: bool,
    program: Option<Arc<std::fs::File>>,
    worker_creates_output: bool,
    cancel: Option<crate::Cancel>,
    warm: Option<Arc<crate::warm::WarmPool>>,
}

impl NativeTier {
    /// A tier whose init is `init_program`: an executable that calls
    /// [`maybe_run_init`](crate::init::maybe_run_init) first in `main()`,
    /// usually the caller's own executable resolved once at startup.
    pub fn new(init_program: PathBuf) -> Self {
        NativeTier {
            init_program,
            cgroup_parent: None,
            cgroups: true,
            require_cgroup: false,
            shared_cgroup: None,
            die_with_caller: false,
            program: None,
            worker_creates_output: false,
            cancel: None,
            warm: None,
        }
    }

    /// Starts calls in warm sandboxes from `pool` when one fits
    /// ([`Tier::start`] only, not live or terminal stdio): a call whose
    /// image is the pool's, on a tier with no bound program, no shared
    /// cgroup and no required cgroup, that would get no cgroup of its own.
    /// Any other call, or one that finds the pool empty, starts cold.
    /// Default: none.
    pub fn warm_pool(&mut self, pool: Arc<crate::warm::WarmPool>) -> &mut Self {
        self.warm = Some(pool);
        self
    }

    /// Kills the worker (its init, and so its whole pid namespace) when the
    /// thread that started it exits, e.g. when the calling process is
    /// killed with SIGKILL (`PR_SET_PDEATHSIG` on the init). Only for callers
    /// that start workers from a thread that lives as long as the process
    /// (a CLI's main thread). Default: `false`.
    pub fn die_with_caller(&mut self, yes: bool) -> &mut Self {
        self.die_with_caller = yes;
        self
    }

    /// Every worker this tier starts is killed when `cancel` is cancelled
    /// (also one started after that: it is killed as soon as it exists).
    /// Default: none.
    pub fn cancel_with(&mut self, cancel: crate::Cancel) -> &mut Self {
        self.cancel = Some(cancel);
        self
    }

    /// Lets the worker create its output file itself instead of finding an
    /// empty one made for it: the output's parent directory becomes a
    /// writable mount of the sandbox's private tmpfs in which the worker may
    /// create regular files (Landlock: make, read, write, truncate; never
    /// remove, rename across directories or link). After every process is
    /// gone, the file at the output path is exported if it is a regular file
    /// with one link, reached without following a symlink, within
    /// `max_bytes`; a missing output is refused. For programs that insist on
    /// exclusive creation (MCP file servers). Other files it makes there are
    /// discarded with the sandbox. Default: `false` (PID 1 creates the file
    /// and keeps its inode; the worker cannot replace it).
    pub fn worker_creates_output(&mut self, yes: bool) -> &mut Self {
        self.worker_creates_output = yes;
        self
    }

    /// Makes worker cgroups under `dir` (a delegated cgroup v2 directory)
    /// instead of under the caller's own cgroup. Default: the caller's cgroup.
    pub fn cgroup_parent(&mut self, dir: PathBuf) -> &mut Self {
        self.cgroup_parent = Some(dir);
        self
    }

    /// Whether to try cgroup limits at all. Default: `true`.
    pub fn cgroups(&mut self, yes: bool) -> &mut Self {
        self.cgroups = yes;
        self
    }

    /// Refuses to start a worker ([`SandboxError::LimitsUnavailable`])
    /// unless a cgroup holds both its memory and its process limits; without
    /// this, a host that delegates no cgroup gets the rlimits alone and the
    /// outcome's [`AppliedLimits`] says so. Default: `false`.
    pub fn require_cgroup(&mut self, yes: bool) -> &mut Self {
        self.require_cgroup = yes;
        self
    }

    /// Puts every worker this tier starts into `cgroup` (shared with other
    /// processes of the same call, e.g. a broker) instead of a cgroup of its
    /// own; the caller removes it (by dropping it) once all are gone.
    /// Default: none (one cgroup a worker, where delegated).
    pub fn in_cgroup(&mut self, cgroup: Arc<SharedCgroup>) -> &mut Self {
        self.shared_cgroup = Some(cgroup);
        self
    }

    /// Binds `program` (an open regular file, e.g. the caller's own
    /// executable opened once) read-only and executable at
    /// [`PROGRAM_PATH`](crate::PROGRAM_PATH) in every worker this tier
    /// starts, so a worker can run a fixed helper that is not in the image.
    /// The bind is of the open file, not of a path; Landlock lets the worker
    /// read and execute it and nothing else there. Default: none.
    pub fn bind_program(&mut self, program: Arc<std::fs::File>) -> &mut Self {
        self.program = Some(program);
        self
    }

    /// The init program.
    pub fn init_program(&self) -> &Path {
        &self.init_program
    }
}

/// How a worker's standard streams reach the caller.
enum Stdio {
    /// stdin `/dev/null`; stdout and stderr drained and bounded by `wait`.
    Captured,
    /// stdin and stdout live pipes ([`LiveStdio`]).
    Live,
    /// All three the slave of a pseudo-terminal whose master the caller holds.
    Tty(OwnedFd),
}

/// A new pseudo-terminal: `posix_openpt(O_RDWR|O_NOCTTY|O_CLOEXEC)`,
/// `grantpt`, `unlockpt`, then its slave opened by `ptsname` (never this
/// process's controlling terminal). Returns (master, slave).
fn open_pty() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    use rustix::pty::OpenptFlags;
    let call = |what: &str| {
        let what = what.to_owned();
        move |e: rustix::io::Errno| SandboxError::Descriptor { call: what, errno: errno(e) }
    };
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
        .map_err(call("posix_openpt(O_RDWR|O_NOCTTY|O_CLOEXEC)"))?;
    rustix::pty::grantpt(&master).map_err(call("grantpt(master)"))?;
    rustix::pty::unlockpt(&master).map_err(call("unlockpt(master)"))?;
    let name = rustix::pty::ptsname(&master, Vec::new()).map_err(call("ptsname(master)"))?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(call("open(ptsname, O_RDWR|O_NOCTTY)"))?;
    Ok((master, slave))
}

/// How a staged file will reach the worker ([`crate::placement`]); a
/// detached mount is handed to the init.
fn place(
    file: &std::fs::File,
    bytes: u64,
    worker_id: Option<u32>,
    access: Access,
    handed: &mut Handed,
) -> Result<Placement, SandboxError> {
    Ok(match crate::placement::choose(file, bytes, worker_id, access)? {
        Chosen::Copy => Placement::Copy,
        Chosen::Path(path) => Placement::Path { path },
        Chosen::Detached(mount) => Placement::Detached { mount_fd: handed.hand(&mount)? },
    })
}

/// The descriptors one start hands its init, each known in the spec by a
/// number: its own duplicate's (a cold start: inherited at exec) or its
/// slot in the call message (a warm sandbox: sent on its channel,
/// [`crate::call_channel`]).
struct Handed {
    fds: Vec<OwnedFd>,
    by_slot: bool,
}

impl Handed {
    fn new(by_slot: bool) -> Self {
        Handed { fds: Vec::new(), by_slot }
    }

    /// Hands over a duplicate of `fd`; returns the number the spec names it by.
    fn hand(&mut self, fd: &impl std::os::fd::AsFd) -> Result<i32, SandboxError> {
        let dup = dup_for_init(fd)?;
        let number = if self.by_slot { crate::wire::CALL_SLOT_BASE + self.fds.len() as i32 } else { dup.as_raw_fd() };
        self.fds.push(dup);
        Ok(number)
    }
}

/// One call's files as the init will see them.
struct CallFiles {
    inputs: Vec<InitInput>,
    output: Option<InitOutput>,
    provided: Vec<InitProvided>,
    fs_socket_fd: Option<i32>,
    start_gate_fd: Option<i32>,
    /// A bound output the worker is made the owner of, taken back after.
    lent_output: Option<std::fs::File>,
}

impl CallFiles {
    /// The init's spec of the call: its files and `spec`'s command, image,
    /// limits and deadline; no status pipe, no bound program (the caller
    /// adds it) and nothing only a cold start passes (live stdin, terminal,
    /// id maps).
    fn into_spec(self, spec: &WorkerSpec) -> InitSpec {
        InitSpec {
            build: airlock_fsproto::BUILD_FINGERPRINT.to_owned(),
            argv: spec.argv.clone(),
            env: spec.env.clone(),
            working_dir: spec.working_dir.clone(),
            inputs: self.inputs,
            output: self.output,
            image: spec.image.clone(),
            limits: spec.limits.clone(),
            timeout_ms: spec.timeout.as_millis().min(u64::MAX as u128) as u64,
            status_fd: -1,
            program_fd: None,
            stdin_fd: None,
            tty: false,
            provided: self.provided,
            fs_socket_fd: self.fs_socket_fd,
            start_gate_fd: self.start_gate_fd,
            maps_fd: None,
        }
    }
}

/// The worker's standard input and output as live pipes to the caller
/// (for tools that speak a protocol over stdio, such as an MCP server).
/// Standard error is still drained and bounded by
/// [`Worker::wait`](crate::Worker::wait).
#[derive(Debug)]
pub struct LiveStdio {
    /// Write end of the worker's standard input; dropping it gives the
    /// worker end-of-file.
    pub stdin: std::fs::File,
    /// Read end of the worker's standard output. It reaches end-of-file
    /// only when the worker and everything in its sandbox are gone.
    pub stdout: std::fs::File,
}

impl NativeTier {
    /// Like [`Tier::start`], but the worker's stdin and stdout stay live
    /// pipes to the caller instead of `/dev/null` and a captured buffer.
    /// Everything else is the same: the same confinement, the same files,
    /// the same deadline (the caller must still call
    /// [`Worker::wait`](crate::Worker::wait), which then drains only stderr
    /// and the status records). The worker's `outcome.stdout` is empty.
    pub fn start_live(&self, spec: WorkerSpec) -> Result<(NativeWorker, LiveStdio), SandboxError> {
        let (worker, live) = self.start_with(spec, Stdio::Live)?;
        let live = live.ok_or_else(|| SandboxError::Protocol("live stdio was not set up".into()))?;
        Ok((worker, live))
    }

    /// Like [`Tier::start`], but the worker's standard input, output and
    /// error are the slave of a new pseudo-terminal, its controlling
    /// terminal (a session of its own); the caller gets the master. The
    /// same confinement, files and deadline as any worker; the caller must
    /// still call [`Worker::wait`](crate::Worker::wait) (or kill it).
    pub fn start_tty(&self, spec: WorkerSpec) -> Result<(NativeWorker, std::fs::File), SandboxError> {
        let (master, slave) = open_pty()?;
        let (worker, _) = self.start_with(spec, Stdio::Tty(slave))?;
        Ok((worker, std::fs::File::from(master)))
    }

    /// The bound program (a regular file), handed over with `handed`.
    fn hand_program(&self, handed: &mut Handed) -> Result<Option<i32>, SandboxError> {
        let Some(file) = &self.program else { return Ok(None) };
        let md = file
            .metadata()
            .map_err(|e| SandboxError::Descriptor { call: "fstat(bound program)".into(), errno: errno(e) })?;
        if !md.is_file() {
            return Err(SandboxError::InvalidSpec("the bound program is not a regular file".into()));
        }
        Ok(Some(handed.hand(&**file)?))
    }

    /// The call's files (inputs, output, provided files, file-system
    /// socket), checked and handed over with `handed`.
    fn call_files(
        &self,
        spec: &WorkerSpec,
        worker_id: Option<u32>,
        handed: &mut Handed,
    ) -> Result<CallFiles, SandboxError> {
        let mut lent_output = None;
        let mut inputs = Vec::new();
        for i in &spec.inputs {
            let md = i.file.metadata().map_err(|e| SandboxError::Descriptor {
                call: format!("fstat(input {:?})", i.virtual_path),
                errno: errno(e),
            })?;
            if !md.is_file() {
                return Err(SandboxError::InvalidSpec(format!("input {:?} is not a regular file", i.virtual_path)));
            }
            let access = if i.held { Access::ReadHeld } else { Access::Read };
            let placement = place(&i.file, md.len(), worker_id, access, handed)?;
            inputs.push(InitInput {
                virtual_path: i.virtual_path.clone(),
                fd: handed.hand(&i.file)?,
                bytes: md.len(),
                placement,
            });
        }
        let output = match &spec.output {
            Some(o) => {
                let placement = if self.worker_creates_output {
                    Placement::Copy
                } else {
                    place(&o.file, o.max_bytes, worker_id, Access::Write, handed)?
                };
                if matches!(placement, Placement::Detached { .. }) {
                    lent_output = Some(o.file.try_clone().map_err(|e| SandboxError::Descriptor {
                        call: "dup(staged output)".into(),
                        errno: errno(e),
                    })?);
                }
                Some(InitOutput {
                    virtual_path: o.virtual_path.clone(),
                    fd: handed.hand(&o.file)?,
                    max_bytes: o.max_bytes,
                    created_by_worker: self.worker_creates_output,
                    placement,
                })
            }
            None => None,
        };
        let mut provided = Vec::new();
        for p in &spec.provided {
            let md = p.file.metadata().map_err(|e| SandboxError::Descriptor {
                call: format!("fstat(provided file {:?})", p.path),
                errno: errno(e),
            })?;
            if !md.is_file() {
                return Err(SandboxError::InvalidSpec(format!("provided file {:?} is not a regular file", p.path)));
            }
            provided.push(InitProvided {
                path: p.path.clone(),
                fd: handed.hand(&p.file)?,
                bytes: md.len(),
                executable: p.executable,
            });
        }
        let fs_socket_fd = match &spec.fs_socket {
            Some(sock) => {
                let st = rustix::fs::fstat(sock)
                    .map_err(|e| SandboxError::Descriptor { call: "fstat(fs socket)".into(), errno: errno(e) })?;
                if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
                    return Err(SandboxError::InvalidSpec("fs_socket is not a socket".into()));
                }
                Some(handed.hand(sock)?)
            }
            None => None,
        };
        let start_gate_fd = spec.start_gate.as_ref().map(|gate| handed.hand(gate)).transpose()?;
        Ok(CallFiles { inputs, output, provided, fs_socket_fd, start_gate_fd, lent_output })
    }

    /// Starts the call in a warm sandbox when the tier has a pool and the
    /// call fits it (see [`NativeTier::warm_pool`]); `None`: start it cold
    /// (nothing of it ran).
    fn start_warm(&self, spec: &mut WorkerSpec) -> Result<Option<NativeWorker>, SandboxError> {
        let Some(pool) = &self.warm else { return Ok(None) };
        // Dying with the caller holds without PR_SET_PDEATHSIG: the init
        // kills the sandbox when the caller's end of the channel closes.
        if self.shared_cgroup.is_some() || self.require_cgroup {
            return Ok(None);
        }
        // A skeleton is in no cgroup of its own: a call that would get one starts cold.
        let cgroup_skipped = if !self.cgroups {
            "cgroups disabled by configuration".to_string()
        } else {
            match crate::cgroup::for_worker(self.cgroup_parent.as_deref(), spec.limits.memory_bytes, spec.limits.pids) {
                Ok(_) => return Ok(None),
                Err(why) => why,
            }
        };
        let Some((skeleton, lease)) = pool.claim(&spec.image) else { return Ok(None) };
        let started = Instant::now();
        let mut handed = Handed::new(true);
        let worker_id = crate::init::privileged_caller().then_some(crate::init::ROOT_CALLER_HOST_ID);
        let mut files = self.call_files(spec, worker_id, &mut handed)?;
        let lent_output = files.lent_output.take();
        let program_fd = self.hand_program(&mut handed)?;
        if handed.fds.len() > crate::call_channel::MAX_CALL_FDS {
            return Ok(None);
        }
        // PID 1 puts its own status pipe in the spec.
        let call = InitSpec { program_fd, ..files.into_spec(spec) };
        let call = serde_json::to_vec(&call).map_err(|e| SandboxError::Protocol(format!("encode spec: {e}")))?;
        let limits = AppliedLimits { cgroup_skipped: Some(cgroup_skipped), warm: true, ..AppliedLimits::default() };
        match skeleton.run(lease, &call, &handed.fds, spec, started, limits) {
            Ok(mut worker) => {
                drop(handed);
                // The worker's ends of the socket and the gate now live only in the sandbox.
                drop(spec.fs_socket.take());
                drop(spec.start_gate.take());
                worker.lent_output = lent_output;
                worker.cancel = self.cancel.as_ref().map(|c| c.register(worker.kill_handle()));
                Ok(Some(worker))
            }
            // The skeleton died before its call: this call starts cold.
            Err(_) => Ok(None),
        }
    }

    fn start_with(
        &self,
        mut spec: WorkerSpec,
        stdio: Stdio,
    ) -> Result<(NativeWorker, Option<LiveStdio>), SandboxError> {
        spec.validate()?;
        if matches!(stdio, Stdio::Captured) {
            if let Some(worker) = self.start_warm(&mut spec)? {
                return Ok((worker, None));
            }
        }
        let started = Instant::now();

        // The descriptors the init inherits, duplicated close-on-exec.
        let (status_r, status_w) = pipe()?;
        let mut handed = Handed::new(false);
        let status_fd = handed.hand(&status_w)?;
        drop(status_w);
        let worker_id = crate::init::privileged_caller().then_some(crate::init::ROOT_CALLER_HOST_ID);
        let mut files = self.call_files(&spec, worker_id, &mut handed)?;
        let lent_output = files.lent_output.take();
        let program_fd = self.hand_program(&mut handed)?;
        // Live stdio: the read end of a fresh pipe goes to the init (and on to
        // the worker as fd 0); the caller keeps the write end.
        let tty = matches!(stdio, Stdio::Tty(_));
        let (stdin_fd, stdin_w) = match stdio {
            Stdio::Live => {
                let (r, w) = pipe()?;
                open_to_worker(&r)?;
                let raw = handed.hand(&r)?;
                drop(r);
                (Some(raw), Some(w))
            }
            // The slave goes to the init (and on to the worker as 0, 1, 2);
            // the caller keeps only the master.
            Stdio::Tty(slave) => {
                let raw = handed.hand(&slave)?;
                drop(slave);
                (Some(raw), None)
            }
            Stdio::Captured => (None, None),
        };
        // A root caller writes the init's id maps itself (`id_maps`): our
        // end of the exchange, the init's descriptor number and the host id.
        let maps = match worker_id {
            Some(id) => {
                let (ours, theirs) = crate::id_maps::socket_pair()?;
                let raw = handed.hand(&theirs)?;
                drop(theirs);
                Some((ours, raw, id))
            }
            None => None,
        };
        let init_spec = InitSpec {
            status_fd,
            program_fd,
            stdin_fd,
            tty,
            maps_fd: maps.as_ref().map(|(_, raw, _)| *raw),
            ..files.into_spec(&spec)
        };
        let spec_bytes =
            serde_json::to_vec(&init_spec).map_err(|e| SandboxError::Protocol(format!("encode spec: {e}")))?;

        let (spec_r, mut spec_w) = pipe().map(|(r, w)| (r, std::fs::File::from(w)))?;
        let (stdout_r, stdout_w) = pipe()?;
        let (stderr_r, stderr_w) = pipe()?;
        open_to_worker(&stdout_w)?;
        open_to_worker(&stderr_w)?;

        // Limits the host can hold for us.
        let mut limits = AppliedLimits::default();
        let cgroup = if !self.cgroups {
            limits.cgroup_skipped = Some("cgroups disabled by configuration".into());
            None
        } else if self.shared_cgroup.is_some() {
            None
        } else {
            // The call's files live on the worker's tmpfs, whose pages the
            // cgroup is charged for: a large input must not eat the tool's
            // memory limit (RLIMIT_AS, which tmpfs does not touch, stays it).
            let memory = spec.limits.memory_bytes.map(|m| m.saturating_add(init_spec.files_bytes()));
            match WorkerCgroup::create(self.cgroup_parent.as_deref(), memory, spec.limits.pids) {
                Ok(cg) => Some(cg),
                Err(why) => {
                    limits.cgroup_skipped = Some(why);
                    None
                }
            }
        };
        // Refused before anything is spawned when the cgroup cannot hold both limits.
        if self.require_cgroup {
            let held = match (&cgroup, &self.shared_cgroup) {
                (Some(cg), _) => cg.memory && cg.pids,
                (None, Some(shared)) if self.cgroups => shared.memory() && shared.pids(),
                _ => false,
            };
            if !held {
                if let Some(cg) = &cgroup {
                    cg.remove();
                }
                let why = limits
                    .cgroup_skipped
                    .clone()
                    .unwrap_or_else(|| "the cgroup does not delegate both memory and pids".into());
                return Err(SandboxError::LimitsUnavailable(why));
            }
        }

        let how = crate::parent::InitStart {
            program: &self.init_program,
            markers: &[crate::init::INIT_MARKER],
            stdin: spec_r,
            stdout: stdout_w,
            stderr: stderr_w,
            fds: handed.fds.iter().map(|f| f.as_raw_fd()).collect(),
            die_with_caller: self.die_with_caller,
        };
        let started_init = crate::parent::spawn_init(how);
        drop(handed);
        // The worker's end of the socket now lives only in the sandbox, so the
        // caller's end sees end-of-file when the worker's copies are gone
        // (and the gate's with it).
        drop(spec.fs_socket.take());
        drop(spec.start_gate.take());
        let (mut child, pidfd) = match started_init {
            Ok(started) => started,
            Err(e) => {
                if let Some(cg) = &cgroup {
                    cg.remove();
                }
                return Err(e);
            }
        };
        let pid = child.pid();

        // Into the cgroup before the init reads its spec (so before it forks).
        let adopted = match (&cgroup, self.shared_cgroup.as_deref().filter(|_| self.cgroups)) {
            (Some(cg), _) => Some(cg.adopt(child.id()).map(|()| (cg.dir.clone(), cg.memory, cg.pids, false))),
            (None, Some(shared)) => Some(
                shared.adopt(child.id()).map(|()| (shared.path().to_path_buf(), shared.memory(), shared.pids(), true)),
            ),
            (None, None) => None,
        };
        match adopted {
            Some(Ok((path, memory, pids, shared))) => {
                limits.cgroup_limits_applied = true;
                limits.cgroup_path = Some(path);
                limits.cgroup_memory = memory;
                limits.cgroup_pids = pids;
                limits.cgroup_shared = shared;
            }
            Some(Err(why)) => limits.cgroup_skipped = Some(why),
            None => {}
        }
        if self.require_cgroup && !limits.cgroup_limits_applied {
            // The init has not read its spec: it never forks anything.
            let _ = kill_init(&pidfd);
            let _ = child.wait();
            if let Some(cg) = &cgroup {
                cg.remove();
            }
            let why = limits.cgroup_skipped.unwrap_or_else(|| "the init could not join the cgroup".into());
            return Err(SandboxError::LimitsUnavailable(why));
        }
        let (stdout, live_stdio) = match stdin_w {
            Some(w) => (None, Some(LiveStdio { stdin: std::fs::File::from(w), stdout: std::fs::File::from(stdout_r) })),
            None => (Some(stdout_r), None),
        };
        let pipes = Pipes { stdout, stderr: stderr_r, status: status_r };
        let sink = spec.stdout_sink.take();
        let mut worker = NativeWorker::new(child, cgroup, pidfd, pipes, &spec, sink, started, limits);
        worker.lent_output = lent_output;
        worker.cancel = self.cancel.as_ref().map(|c| c.register(worker.kill_handle()));
        // A dead init shows up as a protocol error in wait(), not here.
        let _ = spec_w.write_all(&spec_bytes);
        drop(spec_w);
        if let Some((ours, _, id)) = &maps {
            // On failure the worker is dropped, which kills and reaps the init.
            crate::id_maps::map_for_init(ours, pid.as_raw_nonzero().get() as u32, *id, *id)?;
        }
        Ok((worker, live_stdio))
    }
}

impl Tier for NativeTier {
    type Worker = NativeWorker;

    fn name(&self) -> &'static str {
        "native"
    }

    fn start(&self, spec: WorkerSpec) -> Result<NativeWorker, SandboxError> {
        self.start_with(spec, Stdio::Captured).map(|(worker, _)| worker)
    }

    fn gates_start(&self) -> bool {
        true
    }
}
