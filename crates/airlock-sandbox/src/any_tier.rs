//! One tier chosen at run time: a call's descriptor names its tier, and the
//! runtime starts the worker through this enum, so every call shape uses
//! the same code whatever the tier.
#![forbid(unsafe_code)]

use crate::docker::{DockerTier, DockerWorker};
use crate::error::SandboxError;
use crate::gvisor::{GvisorTier, GvisorWorker};
use crate::microvm::{MicrovmTerminal, MicrovmTier, MicrovmWorker};
use crate::native::NativeTier;
use crate::outcome::WorkerOutcome;
use crate::parent::NativeWorker;
use crate::spec::WorkerSpec;
use crate::worker::{KillHandle, Tier, Worker};

/// A tier, whichever it is.
#[derive(Debug)]
pub enum AnyTier {
    /// Namespaces, Landlock and seccomp on this host.
    Native(NativeTier),
    /// gVisor's `runsc`: a user-space kernel between the tool and the host.
    Gvisor(GvisorTier),
    /// A Docker engine over its Unix socket (with its `runtime`, e.g. runsc).
    Docker(DockerTier),
    /// A microVM per worker, on its own kernel (QEMU `microvm`).
    Microvm(MicrovmTier),
}

/// A worker of an [`AnyTier`].
#[derive(Debug)]
pub enum AnyWorker {
    /// A native worker.
    Native(NativeWorker),
    /// A gVisor worker.
    Gvisor(GvisorWorker),
    /// A Docker worker.
    Docker(DockerWorker),
    /// A microVM worker.
    Microvm(MicrovmWorker),
    /// A microVM worker on a terminal (a session's).
    MicrovmTerminal(MicrovmTerminal),
}

impl Tier for AnyTier {
    type Worker = AnyWorker;

    fn name(&self) -> &'static str {
        match self {
            AnyTier::Native(t) => t.name(),
            AnyTier::Gvisor(t) => t.name(),
            AnyTier::Docker(t) => t.name(),
            AnyTier::Microvm(t) => t.name(),
        }
    }

    fn start(&self, spec: WorkerSpec) -> Result<AnyWorker, SandboxError> {
        match self {
            AnyTier::Native(t) => t.start(spec).map(AnyWorker::Native),
            AnyTier::Gvisor(t) => t.start(spec).map(AnyWorker::Gvisor),
            AnyTier::Docker(t) => t.start(spec).map(AnyWorker::Docker),
            AnyTier::Microvm(t) => t.start(spec).map(AnyWorker::Microvm),
        }
    }

    fn gates_start(&self) -> bool {
        match self {
            AnyTier::Native(t) => t.gates_start(),
            AnyTier::Gvisor(t) => t.gates_start(),
            AnyTier::Docker(t) => t.gates_start(),
            AnyTier::Microvm(t) => t.gates_start(),
        }
    }
}

impl AnyTier {
    /// Like [`Tier::start`], but the tool's standard streams are a terminal
    /// whose other end the caller gets (a session's worker): a pty's master
    /// (native, gVisor), or a socket carrying the engine's TTY (Docker) or
    /// the guest's pty (microVM).
    pub fn start_tty(&self, spec: WorkerSpec) -> Result<(AnyWorker, std::fs::File), SandboxError> {
        match self {
            AnyTier::Native(t) => t.start_tty(spec).map(|(w, m)| (AnyWorker::Native(w), m)),
            AnyTier::Gvisor(t) => t.start_tty(spec).map(|(w, m)| (AnyWorker::Gvisor(w), m)),
            AnyTier::Docker(t) => t.start_tty(spec).map(|(w, m)| (AnyWorker::Docker(w), m)),
            AnyTier::Microvm(t) => t.start_tty(spec).map(|(w, m)| (AnyWorker::MicrovmTerminal(w), m)),
        }
    }
}

impl Worker for AnyWorker {
    fn kill_handle(&self) -> KillHandle {
        match self {
            AnyWorker::Native(w) => w.kill_handle(),
            AnyWorker::Gvisor(w) => w.kill_handle(),
            AnyWorker::Docker(w) => w.kill_handle(),
            AnyWorker::Microvm(w) => w.kill_handle(),
            AnyWorker::MicrovmTerminal(w) => w.kill_handle(),
        }
    }

    fn kill(&mut self) -> Result<(), SandboxError> {
        match self {
            AnyWorker::Native(w) => w.kill(),
            AnyWorker::Gvisor(w) => w.kill(),
            AnyWorker::Docker(w) => w.kill(),
            AnyWorker::Microvm(w) => w.kill(),
            AnyWorker::MicrovmTerminal(w) => w.kill(),
        }
    }

    fn wait(self) -> Result<WorkerOutcome, SandboxError> {
        match self {
            AnyWorker::Native(w) => w.wait(),
            AnyWorker::Gvisor(w) => w.wait(),
            AnyWorker::Docker(w) => w.wait(),
            AnyWorker::Microvm(w) => w.wait(),
            AnyWorker::MicrovmTerminal(w) => w.wait(),
        }
    }
}
