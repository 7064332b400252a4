//! The Docker tier: one container per call, created through the Docker
//! Engine API on its Unix socket (`bollard`; airlock never runs the `docker`
//! CLI and never pulls an image).
//!
//! # What a worker gets
//!
//! - The configured image, which must already exist in the daemon (made
//!   offline, e.g. by `scripts/docker-image.sh`), as a read-only root.
//! - User `65534:65534`, no capabilities (`CapDrop ALL`), `no-new-privileges`,
//!   `NetworkMode none` (and no resolver of the host's in `/etc/resolv.conf`),
//!   no stdin, no TTY, logging driver `none` (nothing the tool prints is
//!   stored by the daemon), the daemon's default seccomp profile and masked
//!   `/proc` paths.
//! - Limits: `ulimit fsize` = `limits.file_size`, `nproc` (= `pids`, as in
//!   the native tier), `nofile`, `cpu` (when `cpu_seconds` is set), `core 0`,
//!   `PidsLimit` and memory (no swap) in the
//!   container's cgroup, a size-bounded tmpfs `/tmp`, and a small root-owned
//!   tmpfs at the working directory that holds only the mount points.
//! - Exactly two kinds of bind mount, both from the call's private directory
//!   (`CallDir`): each staged input's private
//!   copy read-only at `working_dir/virtual_path`, and the one output file
//!   (owned by 65534) read-write at its virtual path.
//! - `Runtime` = [`DockerSettings::runtime`] (`runsc` for Docker+gVisor).
//!
//! # Cleanup before export
//!
//! When the tool exits (its container's PID 1: the kernel kills every other
//! process of the container with it), at the deadline, on
//! [`Worker::kill`](crate::Worker::kill) or [`Cancel`], the
//! container is killed, force-removed, and its removal confirmed (inspect
//! answers 404). Only then is the output copied out by
//! `CallDir::export` (same inode, one link,
//! within `max_bytes`) and the call directory removed;
//! [`WorkerOutcome::cleanup_confirmed`](crate::WorkerOutcome::cleanup_confirmed)
//! is set only when removal was confirmed.
//!
//! # What it trusts and does not do
//!
//! - The Docker daemon runs as root and does the confining; anyone who can
//!   reach its socket is root on the host. airlock trusts the daemon and the
//!   image.
//! - Docker reports a death by signal `n` as exit code `128 + n`; the tier
//!   reports it as [`ExitStatusKind::Exited`](crate::ExitStatusKind) with that
//!   code (it cannot tell `exit 137` from SIGKILL), except when it killed the
//!   container itself or the kernel's OOM killer did.
//! - A dead airlock does not stop its container: the container runs until
//!   its command ends, and [`leftovers`] / [`reap`] (staging gc, start-up)
//!   remove it and its call directory.
//! - `spec.image` (host directories) is not used: the Docker image replaces
//!   it. A spec with an `fs_socket` or provided files is refused.
//! - The worker's `/proc/self/mountinfo` names the call directory's host
//!   path (the bind sources); `/sys` and `/proc` are masked as the daemon
//!   masks them, not as the native tier does.
//! - The tier's calls block on a small runtime of their own: call them from
//!   a plain thread, not from inside an async runtime.
#![forbid(unsafe_code)]

mod client;
mod container;
mod probe;
mod terminal;
mod worker;

use std::path::PathBuf;

use crate::cancel::Cancel;
use crate::error::SandboxError;
use crate::spec::WorkerSpec;
use crate::worker::{Tier, Worker as _};

pub use probe::{leftovers, probe, reap};
pub use worker::DockerWorker;

/// Where the Docker tier finds its daemon and image, and where it keeps its
/// per-call directories.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerSettings {
    /// The daemon's Unix socket (e.g. `/var/run/docker.sock`, or Podman's
    /// Docker-compatible socket).
    pub socket: PathBuf,
    /// The image every worker runs, which must exist locally (airlock never
    /// pulls): e.g. `airlock-base:1` made by `scripts/docker-image.sh`.
    pub image: String,
    /// The OCI runtime the daemon uses (`runsc` for Docker+gVisor); `None`
    /// for the daemon's default.
    pub runtime: Option<String>,
    /// airlock's `STATE/tiers/docker`: the tier's private call directories
    /// (mode 0700) live here.
    pub state_dir: PathBuf,
}

/// The Docker tier (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct DockerTier {
    settings: DockerSettings,
    cancel: Option<Cancel>,
}

impl DockerTier {
    /// A tier that runs workers with `settings`.
    pub fn new(settings: DockerSettings) -> Self {
        DockerTier { settings, cancel: None }
    }

    /// Every worker this tier starts is killed when `cancel` is cancelled
    /// (also one started after that: it is killed as soon as it exists).
    /// Default: none.
    pub fn cancel_with(&mut self, cancel: Cancel) -> &mut Self {
        self.cancel = Some(cancel);
        self
    }

    /// The tier's settings.
    pub fn settings(&self) -> &DockerSettings {
        &self.settings
    }
}

impl Tier for DockerTier {
    type Worker = DockerWorker;

    fn name(&self) -> &'static str {
        "docker"
    }

    fn start(&self, spec: WorkerSpec) -> Result<DockerWorker, SandboxError> {
        self.start_with(spec, false).map(|(worker, _)| worker)
    }
}

impl DockerTier {
    /// Like [`Tier::start`], but the container has a terminal (the engine's
    /// TTY) and an open stdin; the caller gets its end of a socket that
    /// carries the terminal's bytes both ways, as it would a pty's master
    /// (`terminal.rs`). The same container, grants and deadline as any
    /// worker; the caller must still call [`Worker::wait`](crate::Worker::wait) (or kill it).
    pub fn start_tty(&self, spec: WorkerSpec) -> Result<(DockerWorker, std::fs::File), SandboxError> {
        let (worker, master) = self.start_with(spec, true)?;
        let master = master.ok_or_else(|| SandboxError::Protocol("the terminal was not attached".into()))?;
        Ok((worker, master))
    }

    fn start_with(&self, spec: WorkerSpec, tty: bool) -> Result<(DockerWorker, Option<std::fs::File>), SandboxError> {
        let (mut worker, master) = DockerWorker::start(&self.settings, spec, tty)?;
        if let Some(cancel) = &self.cancel {
            worker.cancel = Some(cancel.register(worker.kill_handle()));
        }
        Ok((worker, master))
    }
}

/// The label every container of the tier carries (value `1`).
pub(crate) const LABEL_MANAGED: &str = "airlock.managed";
/// The label that names a container's call ([`WorkerSpec::call_id`], or the
/// random name it was given).
pub(crate) const LABEL_CALL: &str = "airlock.call";
/// The label that names the airlock state directory a container belongs to
/// ([`state_label`]): airlock processes of other state directories share the
/// engine, and their live calls are not this one's leftovers.
pub(crate) const LABEL_STATE: &str = "airlock.state";

/// The value of [`LABEL_STATE`] for `settings`: the first 32 hex digits of
/// the SHA-256 of the state directory's path.
pub(crate) fn state_label(settings: &DockerSettings) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(settings.state_dir.as_os_str().as_encoded_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// The prefix of every container name of the tier.
pub(crate) const NAME_PREFIX: &str = "airlock-";

/// The engine-wide name of call `call`'s container: [`NAME_PREFIX`] and
/// the call name scoped to this state directory (one engine serves every
/// airlock of the host, and two state directories may hold the same call
/// id).
pub(crate) fn container_name(settings: &DockerSettings, call: &str) -> String {
    format!("{NAME_PREFIX}{}", crate::call_dir::scoped_name(call, &settings.state_dir))
}
