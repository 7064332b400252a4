//! Running an `[mcp]` tool: its upstream MCP server starts inside the
//! native sandbox with exactly the call's files (the same staging, the same
//! grants as a `[command]` tool), and one connection over the worker's live
//! stdio carries startup, discovery (`tools/list`) and the one `tools/call`.
//!
//! Publication follows the same rule as any tool, with the MCP result as
//! the semantic verdict: only a result without `isError`, then the server's
//! own exit once its stdin is closed (within [`SHUTDOWN_GRACE`]), then
//! confirmed cleanup, then the bounded export of the one output, publishes.
//! A protocol failure, a missing tool, an `isError` result, the deadline or a
//! server that will not exit kills the worker and publishes nothing:
//! whatever the server wrote, during startup or the call, stays in the
//! sandbox's private tmpfs and is discarded with it.

mod client;

use crate::authorize::AuthorizedCall;
use crate::failure::sandbox_refusal;
use crate::verdict::{exit_number, judge, output_tail};
use crate::Runtime;
use airlock_core::manifest::McpSpec;
use airlock_core::{Envelope, ErrorBody, ReasonCode, Refusal};
use airlock_journal::kind;
use airlock_sandbox::{Worker as _, WorkerOutcome, WorkerSpec};
use client::{Client, ClientError};
use serde_json::{json, Value};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long a server may take to exit after its stdin is closed before it
/// is killed (and the call fails, publishing nothing).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What the MCP session decided, before the worker's own outcome is known.
enum Verdict {
    /// A result without `isError`.
    Success(Value),
    /// The call must fail with this code and message (and this content).
    Failure(Refusal, Option<Value>),
}

impl Runtime {
    /// Steps 3–5 for an `[mcp]` tool (see the module documentation).
    pub(crate) fn execute_mcp(&self, spec: McpSpec, call: AuthorizedCall) -> Result<Envelope, Refusal> {
        let (prepared, decision) = call.into_parts();
        let mut tier = self.native_tier()?;
        // MCP file servers create their output exclusively (O_EXCL), so the
        // worker makes the file; it is exported only if it is a regular file
        // with one link within max_file_bytes.
        tier.worker_creates_output(true);
        let d = prepared.descriptor().clone();
        let id = prepared.invocation_id().to_owned();
        let call_staging = prepared.staged()?;
        let manifest = prepared.manifest();
        // Standard output is the live MCP connection, not captured.
        let worker_spec = WorkerSpec { stdout_limit: 0, ..self.worker_spec(&prepared)? };
        let timeout = worker_spec.timeout;
        let args = manifest.bind_args(&[], &named(&d.args))?;
        let upstream_args = spec.arguments(&args);
        self.record(
            kind::WORKER_STARTED,
            Some(&id),
            crate::ledger::worker_started_body(&d.argv, json!({ "mcp_tool": spec.tool })),
        )?;
        let deadline = Instant::now() + timeout;
        let started = tier
            .start_live(worker_spec)
            .map_err(|e| sandbox_refusal(&e, format_args!("the MCP server {:?}", spec.server[0])));
        let (worker, live) = match started {
            Ok(w) => w,
            Err(r) => {
                self.note(kind::WORKER_FINISHED, Some(&id), json!({ "error": r.code.as_str() }))?;
                return Err(r);
            }
        };
        let kill = worker.kill_handle();
        let mut client = Client::new(live.stdin, live.stdout, deadline);
        let verdict = session(&mut client, &spec, upstream_args);
        // Success: ask the server to exit and give it a short grace. Anything
        // else: kill it now; nothing it wrote will be exported.
        let (stop_tx, stop_rx) = channel::<()>();
        match &verdict {
            Verdict::Success(_) => {
                client.close();
                let grace = SHUTDOWN_GRACE.min(deadline.saturating_duration_since(Instant::now()));
                let kill = kill.clone();
                std::thread::spawn(move || {
                    if let Err(RecvTimeoutError::Timeout) = stop_rx.recv_timeout(grace) {
                        let _ = kill.kill();
                    }
                });
            }
            Verdict::Failure(..) => {
                let _ = kill.kill();
                client.close();
            }
        }
        let outcome = worker.wait().map_err(|e| sandbox_refusal(&e, "the MCP server"));
        drop(stop_tx);
        self.note(
            kind::WORKER_FINISHED,
            Some(&id),
            match &outcome {
                Ok(o) => json!({
                    "exit_code": exit_number(o.exit),
                    "timed_out": o.timed_out,
                    "cleanup_confirmed": o.cleanup_confirmed,
                    "output_bytes": o.output.as_ref().map(|e| e.bytes),
                    "mcp_result": matches!(verdict, Verdict::Success(_)),
                }),
                Err(r) => json!({ "error": r.code.as_str(), "message": r.message }),
            },
        )?;
        let outcome = outcome?;
        let base = crate::run::finished_envelope(&prepared, &decision.policy_ids, &outcome);
        let fail = |refusal: Refusal, content: Option<Value>| Envelope {
            status: refusal.code.status(),
            error: Some(ErrorBody { code: refusal.code, message: refusal.message }),
            content: content.or_else(|| Some(json!({ "stderr": output_tail(&outcome.stderr) }))),
            ..base.clone()
        };
        let envelope = match verdict {
            Verdict::Failure(refusal, content) => fail(refusal, content),
            Verdict::Success(result) => {
                match exited_cleanly(&outcome).and_then(|()| {
                    judge(
                        &outcome,
                        manifest.tool.timeout_seconds,
                        prepared.descriptor().command_boundary.filesystem.max_file_bytes,
                    )
                }) {
                    Err(refusal) => fail(refusal, Some(result)),
                    Ok(()) => match self.publish(&prepared, call_staging) {
                        Ok(created_files) => Envelope { content: Some(result), created_files, ..base.clone() },
                        Err(refusal) => fail(refusal, Some(result)),
                    },
                }
            }
        };
        // The staged copies are removed and their reservation released
        // before the answer is given.
        prepared.release_staging();
        Ok(envelope)
    }
}

/// Startup, discovery and the call, on one connection.
fn session<W: std::io::Write>(client: &mut Client<W>, spec: &McpSpec, args: serde_json::Map<String, Value>) -> Verdict {
    let result =
        client.initialize().and_then(|_| client.discover(&spec.tool)).and_then(|_| client.call(&spec.tool, args));
    match result {
        Ok(result) if result.get("isError") == Some(&Value::Bool(true)) => Verdict::Failure(
            Refusal::new(ReasonCode::McpToolError, format!("the upstream tool {:?} answered isError", spec.tool)),
            Some(result),
        ),
        Ok(result) => Verdict::Success(result),
        Err(ClientError::Deadline(step)) => Verdict::Failure(
            Refusal::new(ReasonCode::ToolTimeout, format!("the MCP server ran past timeout_seconds during {step}")),
            None,
        ),
        Err(ClientError::ToolMissing(tool)) => Verdict::Failure(
            Refusal::new(ReasonCode::McpToolMissing, format!("the MCP server offers no tool named {tool:?}")),
            None,
        ),
        Err(ClientError::Protocol(why)) => Verdict::Failure(Refusal::new(ReasonCode::McpProtocol, why), None),
    }
}

/// After a successful result the server must leave by itself once its
/// stdin closes; one that had to be killed exported nothing.
fn exited_cleanly(outcome: &WorkerOutcome) -> Result<(), Refusal> {
    if outcome.timed_out || !outcome.exit.success() {
        let how = match outcome.exit {
            airlock_sandbox::ExitStatusKind::Exited(c) => format!("exited with status {c}"),
            airlock_sandbox::ExitStatusKind::Signaled(s) => format!("was killed by signal {s}"),
        };
        return Err(Refusal::new(
            ReasonCode::McpProtocol,
            format!(
                "the MCP server {how} after its result (it must exit by itself within {} s of its stdin closing)",
                SHUTDOWN_GRACE.as_secs()
            ),
        ));
    }
    Ok(())
}

/// The descriptor's bound arguments as named values, to bind them again
/// (typed as their arguments declare).
fn named(args: &std::collections::BTreeMap<String, String>) -> Vec<(String, Value)> {
    args.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect()
}
