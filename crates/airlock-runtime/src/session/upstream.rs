//! A session holding an `[mcp]` upstream server (`[session]` beside
//! `[mcp]`): started once as a one-shot `[mcp]` call's worker is, one
//! `tools/call` an interaction, closed and published at finalize.
//!
//! With `[mcp.schema_pin]` the start is the pinned one-shot call's: the
//! server is first discovered by a worker holding none of the session's
//! files, and the session's worker starts only if that schema has the
//! pinned digest and a valid signature by the pinned key; once it has
//! answered `initialize`, its own `tools/list` must show the same schema
//! again, else it is torn down and nothing is published. The pin covers
//! one upstream tool, so every command of such a session must call that
//! tool (`manifest.unsupported` otherwise: an unpinned tool of a pinned
//! server is not run).

use super::{Channel, Ended, Session};
use crate::engine::{answer, PreparedCall};
use crate::progress::{Meter, Phase, Progress};
use crate::transport::exec::ExecPayload;
use crate::transport::mcp::{discovery_refusal, verify_pin, Client};
use crate::Runtime;
use airlock_core::manifest::SessionSpec;
use airlock_core::{Envelope, ReasonCode, Refusal};
use airlock_journal::kind;
use airlock_sandbox::WorkerSpec;
use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};

/// The upstream arguments of one interaction: `arg`, a JSON object (empty:
/// no arguments).
pub(super) fn arguments(command: &str, arg: &str) -> Result<Map<String, Value>, Refusal> {
    if arg.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(arg) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(Refusal::new(
            ReasonCode::SessionArgument,
            format!(
                "the argument of {command} must be a JSON object (the upstream tool's arguments); nothing was sent"
            ),
        )),
    }
}

impl Runtime {
    /// The worker of an authorized `[mcp]` session: its server started on
    /// live stdio with the call's grants (as a one-shot `[mcp]` call's, its
    /// output created by the worker), until it answers `initialize`.
    pub(super) fn launch_upstream(
        &self,
        prepared: PreparedCall<ExecPayload>,
        policy_ids: Vec<String>,
        spec: SessionSpec,
    ) -> Result<(Session, Envelope), Refusal> {
        let mcp = prepared
            .manifest()
            .mcp_spec()?
            .ok_or_else(|| Refusal::new(ReasonCode::Internal, "an [mcp] session without [mcp]"))?;
        let mut started = json!({ "tier": prepared.descriptor().tier, "session": true, "mcp": true });
        if let Some(pin) = &mcp.schema_pin {
            if let Some(other) = spec.commands.keys().find(|c| **c != mcp.tool) {
                return Err(Refusal::new(
                    ReasonCode::ManifestUnsupported,
                    format!(
                        "[mcp.schema_pin] covers the upstream tool {:?} only, and session command {other:?} would \
                         call another; give the session only that command, or run the others unpinned",
                        mcp.tool
                    ),
                ));
            }
            let found = self.discover_unstaged(prepared.manifest(), &mcp)?;
            started["schema_sha256"] = json!(found.tool.and_then(|tool| verify_pin(pin, &mcp.tool, &tool))?);
        }
        let mut tier = self.native_tier()?;
        tier.worker_creates_output(true);
        let (worker_spec, staged_output) = self.worker_spec(&prepared)?;
        // Standard output is the live MCP connection, not captured.
        let worker_spec =
            WorkerSpec { stdout_limit: 0, timeout: Duration::from_secs(spec.session_timeout_seconds), ..worker_spec };
        let d = prepared.descriptor();
        self.record(
            kind::WORKER_STARTED,
            Some(prepared.invocation_id()),
            crate::ledger::worker_started_body(&d.argv, started),
        )?;
        let (worker, live) = tier
            .start_live(worker_spec)
            .map_err(|e| crate::failure::sandbox_refusal(&e, format!("the MCP server {:?}", mcp.server[0])))?;
        let deadline = Instant::now() + Duration::from_secs(spec.startup_timeout_seconds);
        let mut client = Client::new(live.stdin, live.stdout, deadline);
        // A pinned server must show the pinned schema again to the worker
        // that holds the files.
        let initialized = client.initialize().and_then(|result| match &mcp.schema_pin {
            Some(pin) => client.discover(&mcp.tool).map(|tool| (result, Some(verify_pin(pin, &mcp.tool, &tool)))),
            None => Ok((result, None)),
        });
        let mut session = Session::new(
            prepared,
            policy_ids,
            spec,
            airlock_sandbox::AnyWorker::Native(worker),
            Channel::Mcp(Box::new(client)),
            staged_output,
        );
        let server = match initialized {
            Ok((_, Some(Err(unpinned)))) => {
                self.tear_down(&mut session);
                return Err(Refusal::new(
                    unpinned.code,
                    format!("{} (shown to the session's worker); nothing was published", unpinned.message),
                ));
            }
            Ok((result, _)) => result.get("serverInfo").cloned(),
            Err(e) => {
                self.tear_down(&mut session);
                let r = discovery_refusal(e);
                return Err(Refusal::new(
                    r.code,
                    format!(
                        "the session's MCP server did not complete initialize: {}; nothing was published",
                        r.message
                    ),
                ));
            }
        };
        let mut envelope = session.base();
        envelope.content = Some(json!({
            "session": session.id(),
            "server": server,
            "commands": session.spec.commands.keys().collect::<Vec<_>>(),
            "pending_output": session.info().pending_output,
        }));
        Ok((session, envelope))
    }

    /// One authorized interaction of an `[mcp]` session: `tools/call` of
    /// the upstream tool `command` with `arguments`, within
    /// `interaction_timeout_seconds`. An `isError` result, or one over
    /// `max_interaction_bytes`, is this interaction's failure (the session
    /// goes on); a broken connection or a deadline ends the session.
    pub(super) fn upstream_call(
        &self,
        session: &mut Session,
        (command, arg): (&str, &str),
        arguments: Map<String, Value>,
        policy_ids: Vec<String>,
        approval: Option<&str>,
        progress: Option<&dyn Progress>,
    ) -> Result<Envelope, Ended> {
        let Channel::Mcp(client) = &mut session.channel else {
            return Err(Ended::Broken(Refusal::new(ReasonCode::Internal, "not an [mcp] session")));
        };
        session.interactions += 1;
        client.set_deadline(Instant::now() + Duration::from_secs(session.spec.interaction_timeout_seconds));
        let mut meter = Meter::begin(progress, Phase::UpstreamAnswer, None);
        let answered = client.call_ticking(command, arguments, &mut || meter.add(0));
        drop(meter);
        let bytes = answered.as_ref().map_or(0, |r| r.to_string().len() as u64);
        let max = session.spec.max_interaction_bytes;
        let refusal = match &answered {
            Err(_) => None,
            Ok(_) if bytes > max => Some(Refusal::new(
                ReasonCode::SessionLimit,
                format!(
                    "the result of {command} has {bytes} bytes, over max_interaction_bytes ({max}); it is not shown"
                ),
            )),
            Ok(r) if r.get("isError") == Some(&Value::Bool(true)) => {
                Some(Refusal::new(ReasonCode::McpToolError, format!("the upstream tool {command:?} answered isError")))
            }
            Ok(_) => None,
        };
        let outcome = json!({
            "upstream": true,
            "output_bytes": bytes,
            "error": refusal.as_ref().map(|r| r.code.as_str()),
            "answered": answered.is_ok(),
        });
        self.note_interaction(
            session,
            (command, arg),
            json!({ "policy_ids": policy_ids, "approval": approval }),
            outcome,
        )
        .map_err(Ended::Broken)?;
        let result = match answered {
            Ok(result) => result,
            Err(e) => {
                let r = discovery_refusal(e);
                return Err(Ended::Broken(Refusal::new(
                    r.code,
                    format!("{} (after {command}); the session was discarded, nothing was published", r.message),
                )));
            }
        };
        let mut envelope = session.base();
        if let Some(e) = envelope.evidence.as_mut() {
            e.policy_ids = policy_ids;
        }
        let pending = session.prepared.record().output.as_ref().map(|o| o.path.clone());
        let mut content = json!({
            "session": session.id(),
            "command": command,
            "output_bytes": bytes,
            "max_interaction_bytes": max,
            "pending_publication": pending,
        });
        Ok(match refusal {
            Some(r) => {
                if r.code == ReasonCode::McpToolError {
                    content["result"] = result;
                }
                content["session_usable"] = json!(true);
                answer::failed(&envelope, r, Some(content))
            }
            None => {
                content["result"] = result;
                envelope.content = Some(content);
                envelope
            }
        })
    }

    /// Finalize of an `[mcp]` session: no command, no argument; the inputs
    /// checked fresh, then the server's stdin closed, its own exit awaited,
    /// cleanup confirmed and the output published.
    pub(super) fn finalize_upstream(
        &self,
        mut session: Session,
        command: Option<&str>,
        arg: &str,
    ) -> (Envelope, Option<Session>) {
        if command.is_some() || !arg.is_empty() {
            let r = Refusal::new(
                ReasonCode::Usage,
                "an [mcp] session's finalize takes no command and no argument: it closes the server and publishes",
            );
            let name = command.unwrap_or("finalize");
            return (self.refused_interaction(&mut session, name, arg, r), Some(session));
        }
        if let Err(r) = self.check_fresh(&session) {
            return (self.discard(session, Err(r)), None);
        }
        let mut answer = session.base();
        answer.content = Some(json!({
            "session": session.id(),
            "finalized": true,
            "interactions": session.interactions,
            "pending_publication": null,
        }));
        (self.stop_and_publish(session, answer), None)
    }
}
