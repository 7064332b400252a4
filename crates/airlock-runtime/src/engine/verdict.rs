//! Judging what a worker did, and how it is reported: whether the call
//! succeeded, the exit number and
//! `evidence.limits` (a sandbox failure's code is [`crate::failure`]'s).
//! Every call shape that runs a worker (tools, MCP workers, Git queries,
//! isolated submissions) uses these, so they depend on nothing of the
//! pipeline.
//!
//! # Resource limits
//!
//! `[sandbox] require_cgroup = true` refuses every worker call with
//! `sandbox.limits_unavailable` (status `refused`, exit 78: the host cannot
//! enforce the configuration, like `sandbox.unavailable`) when no cgroup can
//! hold both the memory and the pids limit. It is checked when the tier is
//! made, before any worker or broker starts, and again by the tier itself
//! before it spawns the init (and after adoption); `airlock doctor` fails with
//! the same code. Every answer of a call that ran a worker (tool, `[mcp]`,
//! isolated, Git driver) carries `evidence.limits` from the sandbox's
//! `AppliedLimits` (this module).

use airlock_core::{LimitsEvidence, ReasonCode, Refusal};
use airlock_sandbox::{AppliedLimits, ExitStatusKind, WorkerOutcome};

/// `SIGXFSZ`: a write went past `RLIMIT_FSIZE`.
const SIGXFSZ: i32 = 25;
/// `evidence.limits`: what the sandbox reported it applied to the worker
/// (and, for an isolated submission, how its broker was bounded).
pub(crate) fn limits_evidence(applied: &AppliedLimits, broker: Option<&'static str>) -> LimitsEvidence {
    LimitsEvidence {
        memory: applied.memory().as_str(),
        pids: applied.pids().as_str(),
        ipc: applied.ipc(),
        memfd: applied.memfd(),
        broker,
        cgroup_unavailable: if applied.cgroup_limits_applied { None } else { applied.cgroup_skipped.clone() },
        warm_sandbox: applied.warm,
    }
}

/// Decides, from what the worker did, whether the call succeeded: cleanup
/// confirmed, within `timeout_seconds`, an exported output within
/// `max_file` bytes and intact, exit 0, standard output within its bound.
pub(crate) fn judge(outcome: &WorkerOutcome, timeout_seconds: u64, max_file: u64) -> Result<(), Refusal> {
    if !outcome.cleanup_confirmed {
        return Err(Refusal::new(
            ReasonCode::WorkerCleanup,
            "the worker's processes could not be confirmed gone; nothing was published",
        ));
    }
    if outcome.timed_out {
        return Err(Refusal::new(
            ReasonCode::ToolTimeout,
            format!("the tool ran past timeout_seconds = {timeout_seconds} and was killed"),
        ));
    }
    judge_export(outcome, max_file)?;
    if !outcome.exit.success() {
        let how = match outcome.exit {
            ExitStatusKind::Exited(c) => format!("exited with status {c}"),
            ExitStatusKind::Signaled(s) => format!("was killed by signal {s}"),
        };
        return Err(Refusal::new(ReasonCode::ToolFailed, format!("the tool {how}")));
    }
    if outcome.stdout_truncated {
        return Err(Refusal::new(
            ReasonCode::LimitOutputSize,
            "the tool's standard output is larger than [output] max_bytes",
        ));
    }
    Ok(())
}

/// The exit code reported for `exit` (128 + signal for a killed worker).
pub(crate) fn exit_number(exit: ExitStatusKind) -> i32 {
    match exit {
        ExitStatusKind::Exited(c) => c,
        ExitStatusKind::Signaled(s) => 128 + s,
    }
}

/// Whether the worker's output file was exported whole: `limit.output_size`
/// when it grew past `max_file` (or the file-size limit killed the tool),
/// `output.tampered` when it was refused (replaced, deleted, …).
pub(crate) fn judge_export(outcome: &WorkerOutcome, max_file: u64) -> Result<(), Refusal> {
    if let Some(export) = &outcome.output {
        if export.over_limit || outcome.exit == ExitStatusKind::Signaled(SIGXFSZ) {
            return Err(Refusal::new(
                ReasonCode::LimitOutputSize,
                format!("the tool wrote more than max_file_bytes = {max_file} to its output"),
            ));
        }
        if let Some(why) = &export.refused {
            return Err(Refusal::new(ReasonCode::OutputTampered, format!("the output was not exported: {why}")));
        }
    }
    Ok(())
}
