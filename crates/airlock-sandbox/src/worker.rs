//! The interface every worker tier implements (native now; gVisor, Docker
//! and microVM tiers later).
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::Arc;

use crate::error::SandboxError;
use crate::outcome::WorkerOutcome;
use crate::spec::WorkerSpec;

/// A way of running workers (the native tier, a container runtime, a VM).
pub trait Tier {
    /// A running worker of this tier.
    type Worker: Worker;

    /// The tier's name as configured (`native`, `gvisor`, …).
    fn name(&self) -> &'static str;

    /// Starts one worker with exactly the files in `spec`. Nothing is left
    /// running when this returns an error.
    fn start(&self, spec: WorkerSpec) -> Result<Self::Worker, SandboxError>;

    /// Whether this tier honours [`WorkerSpec::start_gate`] (the native
    /// tier); the others refuse a spec that has one.
    fn gates_start(&self) -> bool {
        false
    }
}

/// One started worker.
pub trait Worker {
    /// A handle that kills the worker from another thread while
    /// [`Worker::wait`] runs.
    fn kill_handle(&self) -> KillHandle;

    /// Kills the worker and everything it started (the outcome of
    /// [`Worker::wait`] then reports how it ended).
    fn kill(&mut self) -> Result<(), SandboxError>;

    /// Collects stdout/stderr within their bounds, enforces the deadline,
    /// waits for the worker and every descendant to be gone, and reports.
    fn wait(self) -> Result<WorkerOutcome, SandboxError>;
}

/// Kills a worker; cheap to clone and safe to use from any thread, also
/// after the worker finished (then it does nothing).
#[derive(Clone)]
pub struct KillHandle {
    kill: Arc<dyn Fn() -> Result<(), SandboxError> + Send + Sync>,
}

impl KillHandle {
    /// A handle that runs `kill` when used.
    pub fn new(kill: impl Fn() -> Result<(), SandboxError> + Send + Sync + 'static) -> Self {
        KillHandle { kill: Arc::new(kill) }
    }

    /// Kills the worker.
    pub fn kill(&self) -> Result<(), SandboxError> {
        (self.kill)()
    }
}

impl fmt::Debug for KillHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KillHandle")
    }
}
