//! The gVisor tier (`tier = "gvisor"`): each worker runs in its own runsc
//! sandbox, on gVisor's user-space kernel (the Sentry), so the tool's system
//! calls never reach the host kernel directly.
//!
//! Per call, the tier makes a private [`CallDir`] under
//! `STATE/tiers/gvisor/calls/<call>` (0700), copies each input into it
//! (0444), makes the one output file (owned by 65534), writes an OCI bundle
//! ([`bundle`]: an empty read-only root, the image read-only at its host
//! paths, a minimal `/etc`, `/proc`, an empty `/sys`, tmpfs `/tmp` and
//! working directory, the inputs read-only and the output read-write at their
//! virtual paths; uid/gid 65534 with no supplementary groups, no
//! capabilities, `noNewPrivileges`, rlimits, the OCI default masked and
//! read-only paths) and runs `runsc --network=none run --bundle` as a child
//! with stdin `/dev/null` and stdout/stderr pipes. runsc's state is under
//! `STATE/tiers/gvisor/runsc`, its logs under `STATE/tiers/gvisor/logs`.
//!
//! When the tool ends (or at the deadline, or on kill: `runsc kill ID KILL`
//! and SIGKILL to `runsc run`, whose attached sandbox dies with it), the
//! container is deleted (`runsc delete --force`), its absence confirmed with
//! `runsc state`, and every host process of it (run, gofer, sandbox, stubs)
//! confirmed gone; only then is the output exported ([`CallDir::export`]:
//! the same inode, one link, within `max_bytes`) and the call directory
//! removed.
//!
//! Not supported here (refused with [`SandboxError::InvalidSpec`]; the
//! native tier keeps them): the filesystem socket, provided files, live
//! stdio.
#![forbid(unsafe_code)]

mod bundle;
mod console;
mod probe;
mod runsc;
mod worker;

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::call_dir::{call_name, CallDir};
use crate::error::SandboxError;
use crate::outcome::AppliedLimits;
use crate::spec::WorkerSpec;
use crate::worker::Tier;

pub use probe::{leftovers, probe, reap};
pub use worker::GvisorWorker;

use bundle::SandboxCgroup;
use runsc::Runsc;

/// Which gVisor platform (how the Sentry intercepts the tool's system calls).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GvisorPlatform {
    /// `systrap` if the installed runsc has it, else `ptrace`; never `kvm`.
    #[default]
    Auto,
    /// seccomp-trap based (runsc from mid-2023 on).
    Systrap,
    /// `PTRACE_SYSEMU` based (every runsc; the slowest).
    Ptrace,
    /// Hardware virtualisation through `/dev/kvm`.
    Kvm,
}

impl GvisorPlatform {
    /// The name runsc's `--platform` takes (`auto` for [`GvisorPlatform::Auto`]).
    pub fn as_str(self) -> &'static str {
        match self {
            GvisorPlatform::Auto => "auto",
            GvisorPlatform::Systrap => "systrap",
            GvisorPlatform::Ptrace => "ptrace",
            GvisorPlatform::Kvm => "kvm",
        }
    }
}

/// Where runsc is and how the tier uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GvisorSettings {
    /// The `runsc` binary (e.g. `/usr/bin/runsc`).
    pub runsc: PathBuf,
    /// The platform to run on.
    pub platform: GvisorPlatform,
    /// The tier's own directory (airlock's `STATE/tiers/gvisor`): runsc's
    /// `--root` (`runsc/`), its logs (`logs/`) and the call directories
    /// (`calls/`) live under it.
    pub state_dir: PathBuf,
}

impl GvisorSettings {
    fn runsc_root(&self) -> PathBuf {
        self.state_dir.join("runsc")
    }

    fn logs_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }

    /// Where the call directories are (one per call until its container
    /// is gone).
    pub fn calls_dir(&self) -> PathBuf {
        self.state_dir.join("calls")
    }

    /// The runsc to drive, with the platform resolved.
    fn resolve(&self) -> Result<Runsc, SandboxError> {
        if !self.state_dir.is_absolute() {
            return Err(SandboxError::InvalidSpec(format!(
                "the gVisor state directory {} is not absolute",
                self.state_dir.display()
            )));
        }
        let platform = match self.platform {
            GvisorPlatform::Auto => probe::auto_platform(&self.runsc, &self.state_dir)?,
            p => p.as_str(),
        };
        Ok(Runsc {
            bin: self.runsc.clone(),
            root: self.runsc_root(),
            platform,
            rootless: !rustix::process::geteuid().is_root(),
        })
    }
}

/// The gVisor tier.
///
/// ```no_run
/// use airlock_sandbox::{GvisorPlatform, GvisorSettings, GvisorTier, Tier, Worker, WorkerSpec};
/// # fn main() -> Result<(), airlock_sandbox::SandboxError> {
/// let tier = GvisorTier::new(GvisorSettings {
///     runsc: "/usr/bin/runsc".into(),
///     platform: GvisorPlatform::Auto,
///     state_dir: "/var/lib/airlock/tiers/gvisor".into(),
/// });
/// let outcome = tier.start(WorkerSpec::new(["echo", "hello"]))?.wait()?;
/// assert_eq!(outcome.stdout, b"hello\n");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct GvisorTier {
    settings: GvisorSettings,
    cancel: Option<crate::Cancel>,
    runsc: OnceLock<Result<Runsc, SandboxError>>,
}

impl GvisorTier {
    /// A tier with these settings (nothing is checked until a worker starts;
    /// [`probe`] checks everything).
    pub fn new(settings: GvisorSettings) -> Self {
        GvisorTier { settings, cancel: None, runsc: OnceLock::new() }
    }

    /// Every worker this tier starts is killed when `cancel` is cancelled
    /// (also one started after that: it is killed as soon as it exists).
    pub fn cancel_with(&mut self, cancel: crate::Cancel) -> &mut Self {
        self.cancel = Some(cancel);
        self
    }

    /// The settings.
    pub fn settings(&self) -> &GvisorSettings {
        &self.settings
    }

    fn runsc(&self) -> Result<&Runsc, SandboxError> {
        self.runsc.get_or_init(|| self.settings.resolve()).as_ref().map_err(Clone::clone)
    }
}

/// Extra memory the sandbox's cgroup allows beyond the tool's own limit:
/// the Sentry, the gofer and their page caches.
pub(crate) const SENTRY_MEMORY_MARGIN: u64 = 256 << 20;

/// Extra tasks a cgroup holding gVisor's Sentry and gofer must allow beyond
/// the tool's own: they are Go programs whose threads grow with load (a
/// tight `pids.max` makes the Sentry itself fail). The tool's processes are
/// bounded by `RLIMIT_NPROC`, which the Sentry enforces.
pub(crate) const SENTRY_TASK_MARGIN: u64 = 1024;

/// The cgroup runsc should make for this call, or why none is used.
fn sandbox_cgroup(name: &str, spec: &WorkerSpec) -> Result<Option<SandboxCgroup>, String> {
    let Some(memory) = spec.limits.memory_bytes else {
        return Ok(None);
    };
    probe::cgroup_usable()?;
    let files: u64 = spec.inputs.iter().filter_map(|i| i.file.metadata().ok()).map(|m| m.len()).sum();
    Ok(Some(SandboxCgroup {
        path: cgroup_path(name),
        memory_bytes: memory
            .saturating_add(files)
            .saturating_add(spec.limits.scratch_bytes)
            .saturating_add(SENTRY_MEMORY_MARGIN),
    }))
}

/// The `cgroupsPath` of call `name`'s sandbox.
fn cgroup_path(name: &str) -> String {
    format!("/airlock-gvisor/{name}")
}

/// Removes what is left of call `name`'s cgroup in every hierarchy (runsc
/// removes it on delete, but not when `runsc run` died before it saved the
/// container's state). An error when one still holds a process.
fn remove_cgroup(name: &str) -> Result<(), String> {
    let relative = cgroup_path(name);
    let relative = relative.trim_start_matches('/');
    let root = Path::new("/sys/fs/cgroup");
    let hierarchies = std::fs::read_dir(root)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    for dir in std::iter::once(root.to_path_buf()).chain::<Vec<PathBuf>>(hierarchies) {
        let cgroup = dir.join(relative);
        match std::fs::remove_dir(&cgroup) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot remove the sandbox's cgroup {}: {e}", cgroup.display())),
        }
    }
    Ok(())
}

/// What this tier reports in [`AppliedLimits`] before the cgroup is known.
fn base_limits() -> AppliedLimits {
    AppliedLimits {
        landlock_status: "not used: gVisor's Sentry serves the file system; only the bundle's mounts exist".into(),
        sentry: true,
        ..AppliedLimits::default()
    }
}

impl Tier for GvisorTier {
    type Worker = GvisorWorker;

    fn name(&self) -> &'static str {
        "gvisor"
    }

    fn start(&self, spec: WorkerSpec) -> Result<GvisorWorker, SandboxError> {
        self.start_with(spec, false).map(|(worker, _)| worker)
    }
}

impl GvisorTier {
    /// Like [`Tier::start`], but the tool's standard input, output and
    /// error are a pseudo-terminal runsc makes and hands over on its
    /// console socket ([`console`]); the caller gets the master. The same bundle, grants and
    /// deadline as any worker; the caller must still call
    /// [`Worker::wait`](crate::Worker::wait) (or kill it).
    pub fn start_tty(&self, spec: WorkerSpec) -> Result<(GvisorWorker, std::fs::File), SandboxError> {
        let (worker, master) = self.start_with(spec, true)?;
        let master = master.ok_or_else(|| SandboxError::Protocol("runsc handed over no terminal".into()))?;
        Ok((worker, master))
    }

    fn start_with(
        &self,
        mut spec: WorkerSpec,
        tty: bool,
    ) -> Result<(GvisorWorker, Option<std::fs::File>), SandboxError> {
        spec.validate()?;
        crate::call_dir::refuse_native_only(&spec, "gvisor")?;
        let started = Instant::now();
        let runsc = self.runsc()?.clone();
        // The container id is also the name of runsc's abstract control
        // socket and of the sandbox's cgroup: host-wide names.
        let name = crate::call_dir::scoped_name(&call_name(&spec), &self.settings.runsc_root());
        let mut call = CallDir::create(&self.settings.calls_dir(), &name)?;
        if let Some(id) = spec.call_id.as_deref().filter(|id| crate::call_dir::is_safe_name(id)) {
            if let Err(e) = std::fs::write(call.path().join(probe::CALL_ID_FILE), id) {
                let _ = call.remove();
                return Err(SandboxError::Unavailable(format!("cannot record the call id: {e}")));
            }
        }
        let mut limits = base_limits();
        let cgroup = match sandbox_cgroup(&name, &spec) {
            Ok(cg) => cg,
            Err(why) => {
                limits.cgroup_skipped = Some(why);
                None
            }
        };
        if let Some(cg) = &cgroup {
            limits.cgroup_limits_applied = true;
            limits.cgroup_memory = true;
            limits.cgroup_path = Some(PathBuf::from(&cg.path));
        } else if limits.cgroup_skipped.is_none() {
            limits.cgroup_skipped = Some("no memory limit was asked for".into());
        }
        if let Err(e) = bundle::write_bundle(&mut call, &spec, cgroup.as_ref(), tty) {
            let _ = call.remove();
            return Err(e);
        }
        let logs = self.settings.logs_dir();
        let log = logs.join(format!("{name}.log"));
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&logs)
            .and_then(|()| std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&runsc.root))
        {
            let _ = call.remove();
            return Err(SandboxError::Unavailable(format!("cannot make {}: {e}", logs.display())));
        }
        let (worker, master) = GvisorWorker::spawn(worker::Start {
            runsc,
            id: name,
            call,
            log,
            spec: &mut spec,
            started,
            limits,
            use_cgroup: cgroup.is_some(),
            tty,
        })?;
        let worker = match &self.cancel {
            Some(c) => worker.with_cancel(c),
            None => worker,
        };
        Ok((worker, master))
    }
}
