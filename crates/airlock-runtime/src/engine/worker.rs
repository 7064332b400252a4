//! Step 3's journal: every shape that starts a worker (a tool, an MCP
//! server, the Git driver, an isolated command) records `WorkerStarted`
//! (synced: the start is an effect) with the argv's prefix and digest and
//! what the shape started (an MCP tool's name, a broker's digests), and
//! `WorkerFinished` with one body for every shape — `exit_code`,
//! `timed_out`, `cleanup_confirmed`, `output_bytes`, or `error` and
//! `message` when the worker could not be run.
//!
//! On a tier with a start gate (the native tier),
//! [`Runtime::run_journaled`] starts the sandbox first and syncs
//! `WorkerStarted` while the sandbox is furnished and the worker
//! confined; the worker executes its tool only once the record is
//! durable, and a record that cannot be made withdraws the start (the
//! worker exits without executing anything).

use super::verdict::exit_number;
use crate::failure::sandbox_refusal;
use crate::{ledger, Runtime};
use airlock_core::Refusal;
use airlock_journal::kind;
use airlock_sandbox::{Tier, Worker, WorkerOutcome, WorkerSpec};
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

    /// Runs `spec` on `tier` as invocation `id`'s worker, journaled:
    /// `WorkerStarted` (`argv`, `extra`) synced before the tool executes,
    /// then the worker waited for (its refusal names `what`). The caller
    /// journals the end with the step it gets.
    ///
    /// On a tier with a start gate the sandbox is started first and the
    /// record synced while it is built, saving the sync's time on the
    /// call's path; the gate opens once the record is durable.
    pub(crate) fn run_journaled<'a, T: Tier>(
        &'a self,
        tier: &T,
        mut spec: WorkerSpec,
        id: &'a str,
        argv: &[String],
        extra: Value,
        what: &str,
    ) -> Result<(WorkerStep<'a>, Result<WorkerOutcome, Refusal>), Refusal> {
        if !tier.gates_start() {
            let step = self.worker_started(id, argv, extra)?;
            return Ok((step, run_worker(tier, spec, what)));
        }
        // A cancelled call builds no sandbox either.
        self.check_cancelled()?;
        let (gate, opener) = airlock_sandbox::start_gate().map_err(|e| sandbox_refusal(&e, what))?;
        spec.start_gate = Some(gate);
        let worker = tier.start(spec);
        ledger::crash_point("before_worker_started");
        let step = match self.worker_started(id, argv, extra) {
            Ok(step) => step,
            Err(refusal) => {
                // Nothing of the tool ran: the gate closes unopened and the
                // sandbox is killed and reaped with its worker.
                drop(opener);
                drop(worker);
                return Err(refusal);
            }
        };
        let outcome = worker
            .and_then(|worker| {
                // A worker already gone reports how in its wait.
                let _ = opener.open();
                worker.wait()
            })
            .map_err(|e| sandbox_refusal(&e, what));
        Ok((step, outcome))
    }
}

/// Starts a worker and waits for it; a sandbox failure is a refusal naming `what`.
pub(crate) fn run_worker<T: Tier>(tier: &T, spec: WorkerSpec, what: &str) -> Result<WorkerOutcome, Refusal> {
    tier.start(spec).and_then(Worker::wait).map_err(|e| sandbox_refusal(&e, what))
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
