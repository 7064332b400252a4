//! What a finished worker reports.
//!
//! [`AppliedLimits`] says which limits were in force (whether a cgroup held
//! memory and pids, and if not why, the Landlock ABI and status); the
//! runtime turns it into every answer's `evidence.limits` (`memory`, `pids`:
//! `cgroup` or `rlimit`; `ipc`: `seccomp-denied`; `memfd`: `cgroup` or
//! `file-size`), and `airlock doctor` shows the same for the host.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How the worker process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitStatusKind {
    /// It called `exit(code)`.
    Exited(i32),
    /// It was killed by this signal (`SIGKILL` on timeout, `SIGXFSZ` past the file-size limit, …).
    Signaled(i32),
}

impl ExitStatusKind {
    /// `true` for `Exited(0)`.
    pub fn success(self) -> bool {
        self == ExitStatusKind::Exited(0)
    }
}

/// What happened to the output file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputExport {
    /// Bytes copied into the host staging file (0 unless exported).
    pub bytes: u64,
    /// The worker left more than `max_bytes`: nothing was copied.
    pub over_limit: bool,
    /// Why nothing was copied, when the output was refused for any other
    /// reason (replaced, deleted, not a regular file, timed out before export).
    pub refused: Option<String>,
}

impl OutputExport {
    /// `true` when the bytes were copied to the host staging file.
    pub fn exported(&self) -> bool {
        !self.over_limit && self.refused.is_none()
    }
}

/// Which limits were actually in force; a limit the host could not apply is
/// reported here, never dropped silently.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedLimits {
    /// A cgroup v2 was created for this worker and its memory/pids limits written.
    pub cgroup_limits_applied: bool,
    /// The cgroup used, when one was.
    pub cgroup_path: Option<PathBuf>,
    /// Why no cgroup limits were applied, when they were not.
    pub cgroup_skipped: Option<String>,
    /// `memory.max` was written.
    pub cgroup_memory: bool,
    /// `pids.max` was written.
    pub cgroup_pids: bool,
    /// The Landlock ABI the ruleset was enforced at (0 when unknown).
    pub landlock_abi: i32,
    /// `fully` or `partially` (the kernel lacks some rights the crate knows).
    pub landlock_status: String,
    /// The cgroup was shared with other processes of the same call (the
    /// broker of an isolated submission), so its limits bound them together.
    #[serde(default)]
    pub cgroup_shared: bool,
    /// The worker ran on gVisor's user-space kernel (the Sentry), which
    /// implements System V IPC, message queues and memfds itself: they
    /// live in the sandbox's memory, not in the host kernel.
    #[serde(default)]
    pub sentry: bool,
    /// The worker started in a warm sandbox: namespaces and root skeleton
    /// built before its call, then furnished with its files alone
    /// ([`NativeTier::warm_pool`](crate::NativeTier::warm_pool)).
    #[serde(default)]
    pub warm: bool,
}

/// How one resource of a worker was bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Enforcement {
    /// A cgroup v2 limit (`memory.max`, `pids.max`): every process of the
    /// sandbox together, shared memory and kernel buffers included.
    Cgroup,
    /// An rlimit of each process (`RLIMIT_AS`, `RLIMIT_NPROC`): address
    /// space only, process by process; memfd contents, pipe and socket
    /// buffers are not counted.
    Rlimit,
}

impl Enforcement {
    /// `cgroup` or `rlimit`, as the evidence names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Cgroup => "cgroup",
            Enforcement::Rlimit => "rlimit",
        }
    }
}

impl AppliedLimits {
    /// How memory was bounded: [`Enforcement::Cgroup`] only when the worker
    /// ran in a cgroup whose `memory.max` was written.
    pub fn memory(&self) -> Enforcement {
        if self.cgroup_limits_applied && self.cgroup_memory {
            Enforcement::Cgroup
        } else {
            Enforcement::Rlimit
        }
    }

    /// How the number of processes was bounded.
    pub fn pids(&self) -> Enforcement {
        if self.cgroup_limits_applied && self.cgroup_pids {
            Enforcement::Cgroup
        } else {
            Enforcement::Rlimit
        }
    }

    /// How System V IPC and POSIX message queues were bounded: denied by
    /// the seccomp filter for every native worker (see the `ipc` module);
    /// `sentry` for a gVisor worker (implemented by the Sentry, in the
    /// sandbox's memory).
    pub fn ipc(&self) -> &'static str {
        if self.sentry {
            "sentry"
        } else {
            crate::ipc::IPC_ENFORCEMENT
        }
    }

    /// How memfd contents were bounded: `cgroup` (charged to `memory.max`)
    /// or `file-size` (each memfd stops at `RLIMIT_FSIZE`, like any file
    /// the worker writes; their number only by `RLIMIT_NOFILE`, so their sum
    /// is *not* bounded by the memory limit).
    pub fn memfd(&self) -> &'static str {
        match self.memory() {
            Enforcement::Cgroup => "cgroup",
            Enforcement::Rlimit => "file-size",
        }
    }
}

/// The result of one finished worker run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerOutcome {
    /// How the worker ended.
    pub exit: ExitStatusKind,
    /// The deadline passed and the sandbox was killed.
    pub timed_out: bool,
    /// The first `stdout_limit` bytes of stdout (with a
    /// [`crate::WorkerSpec::stdout_sink`], which holds them, only their last
    /// [`crate::STDOUT_TAIL`] bytes).
    pub stdout: Vec<u8>,
    /// More stdout was written (and drained) than kept.
    pub stdout_truncated: bool,
    /// The first `stderr_limit` bytes of stderr.
    pub stderr: Vec<u8>,
    /// More stderr was written (and drained) than kept.
    pub stderr_truncated: bool,
    /// What happened to the output, when the spec had one.
    pub output: Option<OutputExport>,
    /// The init was reaped and every process of the sandbox is known gone.
    pub cleanup_confirmed: bool,
    /// A cgroup v2 held memory/pids limits (see [`AppliedLimits`]).
    pub cgroup_limits_applied: bool,
    /// Which limits were in force.
    pub limits: AppliedLimits,
}

impl WorkerOutcome {
    /// The stable reason code of a run that did not succeed cleanly, or
    /// `None`: `worker.timeout`, `limit.output_size`, `output.refused`,
    /// `sandbox.cleanup_unconfirmed`, `worker.failed`.
    pub fn reason_code(&self) -> Option<&'static str> {
        if self.timed_out {
            return Some("worker.timeout");
        }
        if !self.cleanup_confirmed {
            return Some("sandbox.cleanup_unconfirmed");
        }
        if let Some(o) = &self.output {
            if o.over_limit {
                return Some("limit.output_size");
            }
            if o.refused.is_some() {
                return Some("output.refused");
            }
        }
        if !self.exit.success() {
            return Some("worker.failed");
        }
        None
    }
}
