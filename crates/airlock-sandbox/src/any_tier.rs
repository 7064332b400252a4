//! One tier chosen at run time: a call's descriptor names its tier, and the
//! runtime starts the worker through this enum, so every call shape uses
//! the same code whatever the tier.
#![forbid(unsafe_code)]

use crate::error::SandboxError;
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
}

/// A worker of an [`AnyTier`].
#[derive(Debug)]
pub enum AnyWorker {
    /// A native worker.
    Native(NativeWorker),
}

impl Tier for AnyTier {
    type Worker = AnyWorker;

    fn name(&self) -> &'static str {
        match self {
            AnyTier::Native(t) => t.name(),
        }
    }

    fn start(&self, spec: WorkerSpec) -> Result<AnyWorker, SandboxError> {
        match self {
            AnyTier::Native(t) => t.start(spec).map(AnyWorker::Native),
        }
    }
}

impl Worker for AnyWorker {
    fn kill_handle(&self) -> KillHandle {
        match self {
            AnyWorker::Native(w) => w.kill_handle(),
        }
    }

    fn kill(&mut self) -> Result<(), SandboxError> {
        match self {
            AnyWorker::Native(w) => w.kill(),
        }
    }

    fn wait(self) -> Result<WorkerOutcome, SandboxError> {
        match self {
            AnyWorker::Native(w) => w.wait(),
        }
    }
}
