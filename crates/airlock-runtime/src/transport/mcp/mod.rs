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
//!
//! # MCP workers
//!
//! The MCP worker client lives here (`transport/mcp/`), not in `airlock-mcp`:
//! `airlock-mcp` depends on the runtime, and the runtime stays synchronous (no
//! tokio). It is a small newline-delimited JSON-RPC client: `initialize`
//! (protocol 2025-06-18) → `notifications/initialized` → `tools/list`
//! (cursors, ≤ 16 pages) → one `tools/call`; server requests are answered
//! -32601, notifications ignored, messages bounded at 8 MiB, every wait
//! bounded by the call's deadline; a reader thread keeps draining stdout after
//! the session so the server never blocks. After a result without `isError`
//! stdin is closed and the server must exit by itself within 5 s
//! (`SHUTDOWN_GRACE`), then the usual judge (cleanup, limits, exit 0) and
//! publication run; anything else kills the worker at once and publishes
//! nothing. The worker runs with live stdio (`NativeTier::start_live`) and
//! creates its own output (`NativeTier::worker_creates_output`).
//!
//! A tool with `[mcp.schema_pin]` is discovered first by a worker holding
//! none of the call's files, and runs only if that schema is signed by the
//! pinned key and has the pinned digest (see `pin`); the verified digest is
//! journaled in `WorkerStarted` (`schema_sha256`).

mod client;
mod pin;

pub(crate) use client::Client;
pub(crate) use pin::{discovery_refusal, verify as verify_pin};

use super::exec::ExecPayload;
use crate::engine::answer;
use crate::engine::verdict::judge;
use crate::engine::AuthorizedCall;
use crate::failure::sandbox_refusal;
use crate::Runtime;
use airlock_core::manifest::McpSpec;
use airlock_core::{Envelope, ReasonCode, Refusal};
use airlock_sandbox::{Worker as _, WorkerOutcome, WorkerSpec};
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
    pub(crate) fn execute_mcp(&self, spec: McpSpec, call: AuthorizedCall<ExecPayload>) -> Result<Envelope, Refusal> {
        let (mut prepared, decision) = call.into_parts();
        let mut tier = self.native_tier()?;
        // MCP file servers create their output exclusively (O_EXCL), so the
        // worker makes the file; it is exported only if it is a regular file
        // with one link within max_file_bytes.
        tier.worker_creates_output(true);
        let d = prepared.descriptor().clone();
        let id = prepared.invocation_id().to_owned();
        let manifest = prepared.manifest();
        // Standard output is the live MCP connection, not captured.
        let (worker_spec, staged_output) = self.worker_spec(&prepared)?;
        let worker_spec = WorkerSpec { stdout_limit: 0, ..worker_spec };
        let timeout = worker_spec.timeout;
        let args = manifest.bind_args(&[], &named(&d.args))?;
        let upstream_args = spec.arguments(&args);
        // A pinned upstream is discovered first by a worker without the
        // call's files; the call's worker starts only for a pinned schema.
        let mut started = json!({ "mcp_tool": spec.tool });
        if let Some(pin) = &spec.schema_pin {
            let found = self.discover_unstaged(manifest, &spec)?;
            match found.tool.and_then(|tool| pin::verify(pin, &spec.tool, &tool)) {
                Ok(digest) => started["schema_sha256"] = json!(digest),
                Err(refusal) => {
                    let base = answer::finished(&prepared, &decision.policy_ids, Some((&found.outcome, None)));
                    prepared.release_staging();
                    return Ok(answer::failed(&base, refusal, None));
                }
            }
        }
        let step = self.worker_started(&id, &d.argv, started)?;
        let deadline = Instant::now() + timeout;
        let (worker, live) = match tier.start_live(worker_spec) {
            Ok(w) => w,
            Err(e) => {
                let refusal = sandbox_refusal(&e, format!("the MCP server {:?}", spec.server[0]));
                step.finished(Err(&refusal))?;
                return Err(refusal);
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
        step.finished(outcome.as_ref())?;
        let outcome = outcome?;
        let base = answer::finished(&prepared, &decision.policy_ids, Some((&outcome, None)));
        let fail = |refusal: Refusal, content: Option<Value>| answer::failed(&base, refusal, content);
        let envelope = match verdict {
            Verdict::Failure(refusal, content) => fail(refusal, content),
            Verdict::Success(result) => {
                match exited_cleanly(&outcome)
                    .and_then(|()| prepared.held_inputs_unchanged())
                    .and_then(|()| {
                        judge(
                            &outcome,
                            manifest.tool.timeout_seconds,
                            prepared.descriptor().command_boundary.filesystem.max_file_bytes,
                        )
                    })
                    .and_then(|()| manifest.check_output_schema(&result))
                {
                    Err(refusal) => fail(refusal, Some(result)),
                    Ok(()) => match self.publish(&prepared, prepared.output(), staged_output.as_ref()) {
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
    let discovered = client.initialize().and_then(|_| client.discover(&spec.tool));
    // The worker holding the files must show the pinned schema again.
    if let (Some(pin), Ok(tool)) = (&spec.schema_pin, &discovered) {
        if let Err(refusal) = pin::verify(pin, &spec.tool, tool) {
            return Verdict::Failure(refusal, None);
        }
    }
    let result = discovered.and_then(|_| client.call(&spec.tool, args));
    match result {
        Ok(result) if result.get("isError") == Some(&Value::Bool(true)) => Verdict::Failure(
            Refusal::new(ReasonCode::McpToolError, format!("the upstream tool {:?} answered isError", spec.tool)),
            Some(result),
        ),
        Ok(result) => Verdict::Success(result),
        Err(e) => Verdict::Failure(pin::discovery_refusal(e), None),
    }
}

/// After a successful result the server must leave by itself once its
/// stdin closes; one that had to be killed exported nothing.
pub(crate) fn exited_cleanly(outcome: &WorkerOutcome) -> Result<(), Refusal> {
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
