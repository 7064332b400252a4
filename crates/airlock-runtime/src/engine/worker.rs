//! Step 3's journal: every shape that starts a worker (a tool, an MCP
//! server, the Git driver, an isolated command) records `WorkerStarted`
//! (synced: the start is an effect) with the argv's prefix and digest and
//! what the shape started (an MCP tool's name, a broker's digests), and
//! `WorkerFinished` with one body for every shape — `exit_code`,
//! `timed_out`, `cleanup_confirmed`, `output_bytes`, or `error` and
//! `message` when the worker could not be run.

use super::verdict::exit_number;
use crate::{ledger, Runtime};
use airlock_core::Refusal;
use airlock_journal::kind;
use airlock_sandbox::WorkerOutcome;
use serde_json::{json, Value};
use std::time::Instant;

/// A worker whose start was journaled; [`WorkerStep::finished`] records its end.
#[derive(Debug)]
#[must_use = "a started worker's end must be journaled"]
pub(crate) struct WorkerStep<'a> {
    runtime: &'a Runtime,
    id: &'a str,
    began: Instant,
}

impl Runtime {
    /// Journals `WorkerStarted` for invocation `id` (the argv's prefix and
    /// digest, and `extra`) before the worker starts.
    pub(crate) fn worker_started<'a>(
        &'a self,
        id: &'a str,
        argv: &[String],
        extra: Value,
    ) -> Result<WorkerStep<'a>, Refusal> {
        // A cancelled call starts no worker.
        self.check_cancelled()?;
        self.record(kind::WORKER_STARTED, Some(id), ledger::worker_started_body(argv, extra))?;
        tracing::debug!(program = argv.first().map(String::as_str), "worker started");
        Ok(WorkerStep { runtime: self, id, began: Instant::now() })
    }
}

impl WorkerStep<'_> {
    /// Journals `WorkerFinished`: the one body for `outcome`.
    pub(crate) fn finished(self, outcome: Result<&WorkerOutcome, &Refusal>) -> Result<(), Refusal> {
        self.finished_with(outcome, None)
    }

    /// [`WorkerStep::finished`], with what the worker's host signed about
    /// the run (a cluster call's order digest and receipt) as `remote`.
    pub(crate) fn finished_with(
        self,
        outcome: Result<&WorkerOutcome, &Refusal>,
        remote: Option<Value>,
    ) -> Result<(), Refusal> {
        let mut body = match outcome {
            Ok(o) => json!({
                "exit_code": exit_number(o.exit),
                "timed_out": o.timed_out,
                "cleanup_confirmed": o.cleanup_confirmed,
                "output_bytes": o.output.as_ref().map(|e| e.bytes),
            }),
            Err(r) => json!({ "error": r.code.as_str(), "message": r.message }),
        };
        if let Some(remote) = remote {
            body["cluster"] = remote;
        }
        let duration_ms = super::elapsed_ms(self.began);
        match outcome {
            Ok(o) => tracing::debug!(
                exit_code = exit_number(o.exit),
                timed_out = o.timed_out,
                cleanup_confirmed = o.cleanup_confirmed,
                duration_ms,
                "worker finished"
            ),
            Err(r) => tracing::debug!(code = r.code.as_str(), duration_ms, "worker failed"),
        }
        self.runtime.note(kind::WORKER_FINISHED, Some(self.id), body)
    }
}
