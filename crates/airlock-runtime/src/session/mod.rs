//! The session call shape (issue 21): a `[session]` tool's program started
//! once on a terminal airlock owns, driven by declared commands, and
//! published only by its `finalize = true` command.
//!
//! A session is one call of the engine, kept open: its start is the exec
//! shape's prepare (snapshots, held output parent, staging reservation)
//! and authorize, unchanged; its worker is the exec worker (same grants,
//! limits and sandbox) on a terminal ([`AnyTier::start_tty`]: the native
//! tier's own pty, gVisor's console on one, the Docker engine's TTY or the
//! microVM guest's pty carried over a socket).
//! Each interaction is its own Cedar request (action `tool_call::TOOL.COMMAND`,
//! the session's descriptor as context, the argument as `args.arg`), checked
//! against the command's whole-string pattern before a byte is written,
//! and journaled (`SessionInteraction`) under the session's id. A start or
//! an interaction that needs an exact-call approval goes through the
//! one-shot calls' approval ([`crate::approval`]): it is kept as a prepared
//! call waiting for an approver, and runs once that exact call is approved
//! (the start by `airlock dispatch`, an interaction when it is sent again in
//! its session). Finalize
//! runs its command, waits for the prompt, ends the worker, confirms its
//! cleanup and publishes through the engine's [`publish`](crate::engine);
//! any other end discards the staging and publishes nothing.
//!
//! A `[session]` beside `[mcp]` holds the upstream MCP server instead of a
//! terminal program (`upstream`): the same start (its worker is the one-shot
//! `[mcp]` call's: live stdio, the worker creating its output), the
//! `initialize` handshake once; each interaction is one `tools/call` of the
//! upstream tool its command names, its argument the call's JSON arguments,
//! with the same pattern check, Cedar request, approvals and journal record;
//! finalize closes the server's stdin, waits for it to exit by itself, and
//! publishes as above.
//!
//! [`AnyTier::start_tty`]: airlock_sandbox::AnyTier::start_tty

mod approval;
mod desk;
mod fresh;
mod terminal;
mod upstream;

pub use desk::Desk;

use crate::engine::{answer, CallStart, PreparedCall};
use crate::progress::{Meter, Phase, Progress};
use crate::transport::exec::{CallRequest, Exec, ExecPayload};
use crate::Runtime;
use airlock_core::manifest::SessionSpec;
use airlock_core::{Envelope, ReasonCode, Refusal};
use airlock_journal::kind;
use airlock_sandbox::{AnyWorker, Worker as _};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

/// How long a finalized program has to end after its terminal hangs up.
const HANGUP_GRACE: Duration = Duration::from_secs(5);

/// The Cedar view of one session command: its own action
/// (`tool_call::TOOL.COMMAND`) with one `String` argument, `arg`.
pub fn command_spec(tool: &str, command: &str) -> airlock_policy::ToolSpec {
    airlock_policy::ToolSpec {
        name: format!("{tool}.{command}"),
        action: None,
        resource: None,
        args: vec![("arg".to_owned(), airlock_policy::ArgKind::String)],
    }
}

/// One live session, held by one process (the holder).
#[derive(Debug)]
pub struct Session {
    prepared: PreparedCall<ExecPayload>,
    policy_ids: Vec<String>,
    spec: SessionSpec,
    worker: Option<AnyWorker>,
    channel: Channel,
    staged_output: Option<airlock_hostfs::StagedFile>,
    interactions: u64,
    started: Instant,
    last_used: Instant,
    /// Exact-call requests of this session waiting for an approval, by the
    /// digest of the interaction's descriptor.
    requests: BTreeMap<String, String>,
    /// How many requests this session has made (their ids' counter).
    requests_made: u64,
}

/// How the holder speaks to a session's worker.
#[derive(Debug)]
enum Channel {
    /// A `[session]` program's terminal; `None` once closed (the program
    /// got its hangup).
    Terminal(Option<std::fs::File>),
    /// An `[mcp]` server's live stdio, its `initialize` done.
    Mcp(Box<crate::transport::mcp::Client<std::fs::File>>),
}

impl Channel {
    /// The terminal closed, or the server's stdin: the MCP stdio way of
    /// asking it to exit.
    fn hang_up(&mut self) {
        match self {
            Channel::Terminal(master) => drop(master.take()),
            Channel::Mcp(client) => client.close(),
        }
    }
}

/// What `airlock session list` shows of a session.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SessionInfo {
    /// The session's id (its invocation id).
    pub session: String,
    /// Its tool.
    pub tool: String,
    /// Interactions so far.
    pub interactions: u64,
    /// Seconds since it started.
    pub age_seconds: u64,
    /// Whether finalize would publish an output.
    pub pending_output: Option<String>,
}

impl Session {
    /// A session whose worker was just started on `channel`, with nothing
    /// sent to it yet.
    fn new(
        prepared: PreparedCall<ExecPayload>,
        policy_ids: Vec<String>,
        spec: SessionSpec,
        worker: AnyWorker,
        channel: Channel,
        staged_output: Option<airlock_hostfs::StagedFile>,
    ) -> Session {
        Session {
            prepared,
            policy_ids,
            spec,
            worker: Some(worker),
            channel,
            staged_output,
            interactions: 0,
            started: Instant::now(),
            last_used: Instant::now(),
            requests: BTreeMap::new(),
            requests_made: 0,
        }
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        self.prepared.invocation_id()
    }

    /// What `list` shows.
    pub fn info(&self) -> SessionInfo {
        SessionInfo {
            session: self.id().to_owned(),
            tool: self.prepared.descriptor().tool.clone(),
            interactions: self.interactions,
            age_seconds: self.started.elapsed().as_secs(),
            pending_output: self.prepared.record().output.as_ref().map(|o| o.path.clone()),
        }
    }

    /// Whether it outlived its idle or total timeout.
    pub fn expired(&self) -> bool {
        self.last_used.elapsed() > Duration::from_secs(self.spec.idle_timeout_seconds)
            || self.started.elapsed() > Duration::from_secs(self.spec.session_timeout_seconds)
    }

    fn base(&self) -> Envelope {
        let mut e = answer::finished(&self.prepared, &self.policy_ids, None);
        e.stage = None;
        e
    }
}

impl Runtime {
    /// Starts a session of `request.tool`: prepare and authorize as a
    /// one-shot exec call, then its startup command on a terminal, until
    /// the ready pattern shows. On any failure nothing is left running and
    /// the staging is discarded; the refusal is journaled.
    pub fn session_start(&self, request: &CallRequest) -> Result<(Session, Envelope), Box<Envelope>> {
        let principal = self.principal_of(request.principal.as_deref()).to_owned();
        let id = request.invocation_id.clone();
        let _caller = self.enter_call(&id, &principal);
        match self.session_start_steps(request, &principal) {
            Ok(Ok(started)) => Ok(started),
            // Kept for an approval: the start waits, as a one-shot call does.
            Ok(Err(waiting)) => Err(Box::new(self.ended(&id, &principal, Ok(waiting)))),
            Err(refusal) => Err(Box::new(self.ended(&id, &principal, Err(refusal)))),
        }
    }

    /// Starts the session kept by a start that needed an exact-call
    /// approval (`id`, the session's id), as `airlock dispatch` runs a kept
    /// call: refused if denied or expired, its approval verified and used
    /// once, its snapshots re-hashed and its output parent re-held, then
    /// authorized (approved) and started. Only the principal that asked for
    /// it may start it (`principal`: who asks, `None` the runtime's).
    pub fn session_dispatch(&self, id: &str, principal: Option<&str>) -> Result<(Session, Envelope), Box<Envelope>> {
        let asker = self.principal_of(principal).to_owned();
        let preparer =
            crate::id::check_invocation_id(id).ok().and_then(|()| self.prepared_record(id).ok()).map(|r| r.principal);
        if preparer.as_deref().is_some_and(|p| p != asker) {
            let r = Refusal::new(
                ReasonCode::InvocationNotFound,
                format!("no session start {id:?} waits for this principal"),
            );
            return Err(Box::new(Envelope::from_refusal(&r)));
        }
        let _caller = self.enter_call(id, &asker);
        let result = self.session_dispatch_steps(id);
        result.map_err(|refusal| Box::new(self.ended(id, &asker, Err(refusal))))
    }

    /// Whether `id` is a session's start kept for an exact-call approval
    /// (`airlock dispatch` hands it to the session holder).
    pub fn kept_session_start(&self, id: &str) -> bool {
        crate::id::check_invocation_id(id).is_ok()
            && self.prepared_record(id).is_ok_and(|r| r.session.as_deref() == Some(id) && r.expires_at.is_some())
    }

    fn session_dispatch_steps(&self, id: &str) -> Result<(Session, Envelope), Refusal> {
        crate::ledger::refuse_if_unconfirmed(self.state(), self.journal())?;
        self.check_waiting(id)?;
        let kept = self.open_kept(id)?;
        let spec = match (kept.record.session.as_deref(), kept.manifest.session_spec()) {
            (Some(s), Some(spec)) if s == id => spec.clone(),
            _ => {
                return Err(Refusal::new(
                    ReasonCode::ManifestUnsupported,
                    format!("{id} is not a session's start: `airlock dispatch` runs it"),
                ))
            }
        };
        let mut prepared = self.load_exec(kept)?;
        prepared.admit_if_unstaged(self.pool())?;
        let approved = self.take_dispatch(&prepared)?;
        prepared.adopt_lease(self.pool())?;
        let (prepared, decision) = self.authorize(prepared, approved)?.into_parts();
        self.launch(prepared, decision.policy_ids, spec, None)
    }

    /// `Ok(Err(answer))`: the start needs an approval and was kept for it.
    fn session_start_steps(
        &self,
        request: &CallRequest,
        principal: &str,
    ) -> Result<Result<(Session, Envelope), Envelope>, Refusal> {
        let tool = self.load_tool(&request.tool)?;
        let Some(spec) = tool.manifest.session_spec().cloned() else {
            return Err(Refusal::new(
                ReasonCode::ManifestUnsupported,
                format!("{} has no [session]: run it with `airlock run`", tool.manifest.name()),
            ));
        };
        let call_tool = tool.call_tool();
        // A start that needs an exact-call approval is kept, as a one-shot
        // call is, and started by `session_dispatch` once approved.
        let needs = crate::approval::needs_approval(&call_tool.identity.risk_tier, call_tool.identity.human_approval);
        let start = CallStart {
            invocation_id: &request.invocation_id,
            principal,
            keep: needs,
            expires_at: None,
            progress: request.progress.as_deref(),
            tier: request.tier,
            session: true,
        };
        let prepared = self.prepare_with(Exec { request, manifest: tool.manifest }, &call_tool, start)?;
        if needs {
            let mut waiting = answer::approval_required(&prepared);
            if let Some(e) = waiting.error.as_mut() {
                e.message.push_str(
                    "; once approved, the session is started by `airlock dispatch ID` (MCP: session_start with \
                     `dispatch`)",
                );
            }
            waiting.content = Some(json!({ "session": prepared.invocation_id(), "pending_approval": true }));
            return Ok(Err(waiting));
        }
        let (prepared, decision) = self.authorize(prepared, false)?.into_parts();
        self.launch(prepared, decision.policy_ids, spec, request.progress.as_deref()).map(Ok)
    }

    /// An authorized session call's worker on a terminal, until its ready
    /// pattern shows (the wait reported to `progress`, if any).
    fn launch(
        &self,
        prepared: PreparedCall<ExecPayload>,
        policy_ids: Vec<String>,
        spec: SessionSpec,
        progress: Option<&dyn Progress>,
    ) -> Result<(Session, Envelope), Refusal> {
        if spec.mcp {
            return self.launch_upstream(prepared, policy_ids, spec);
        }
        let tier = self.worker_tier(&prepared.descriptor().tier)?;
        let (mut worker_spec, staged_output) = self.worker_spec(&prepared)?;
        worker_spec.env.push(("TERM".into(), "dumb".into()));
        worker_spec.timeout = Duration::from_secs(spec.session_timeout_seconds);
        let d = prepared.descriptor();
        self.record(
            kind::WORKER_STARTED,
            Some(prepared.invocation_id()),
            crate::ledger::worker_started_body(&d.argv, json!({ "tier": d.tier, "session": true })),
        )?;
        let (worker, mut master) =
            tier.start_tty(worker_spec).map_err(|e| crate::failure::sandbox_refusal(&e, "the session"))?;
        let deadline = Instant::now() + Duration::from_secs(spec.startup_timeout_seconds);
        let mut meter = Meter::begin(progress, Phase::SessionPrompt, None);
        let reading =
            terminal::read_until_ready(&mut master, &spec, spec.max_interaction_bytes, deadline, false, &mut meter);
        drop(meter);
        let mut session =
            Session::new(prepared, policy_ids, spec, worker, Channel::Terminal(Some(master)), staged_output);
        if !reading.ready {
            let why = if reading.ended { "ended before its prompt" } else { "did not show its prompt in time" };
            self.tear_down(&mut session);
            return Err(Refusal::new(
                ReasonCode::SessionNotReady,
                format!(
                    "the session's program {why} (ready_pattern {:?}); nothing was published",
                    session.spec.ready.as_ref().map(|r| r.as_str()).unwrap_or_default()
                ),
            ));
        }
        let mut envelope = session.base();
        envelope.content = Some(json!({
            "session": session.id(),
            "startup": reading.text,
            "commands": session.spec.commands.keys().collect::<Vec<_>>(),
            "pending_output": session.info().pending_output,
        }));
        Ok((session, envelope))
    }

    /// One interaction: `command`'s pattern checked on `arg` before
    /// anything is written, its own Cedar request, then `arg` and a newline
    /// to the terminal and its output until the prompt returns. A refusal
    /// leaves the session usable; a finalize command ends it (see
    /// [`Runtime::session_finalize`]). `Err`: the session ended.
    /// While it waits for the prompt, `progress` (if any) hears of it.
    pub fn session_send(
        &self,
        session: &mut Session,
        command: &str,
        arg: &str,
        raw: bool,
        progress: Option<&dyn Progress>,
    ) -> SendResult {
        let id = session.id().to_owned();
        let principal = session.prepared.principal().to_owned();
        let _caller = self.enter_call(&id, &principal);
        session.last_used = Instant::now();
        let cmd = match session.spec.command(command) {
            Ok(c) => c.clone(),
            Err(r) => return SendResult::Answer(Box::new(self.refused_interaction(session, command, arg, r))),
        };
        if cmd.finalize {
            let r = Refusal::new(
                ReasonCode::Usage,
                format!("{command} is the finalize command: use `airlock session finalize` (it ends the session)"),
            );
            return SendResult::Answer(Box::new(self.refused_interaction(session, command, arg, r)));
        }
        match self.interact(session, command, arg, raw, progress) {
            Ok(envelope) => SendResult::Answer(Box::new(envelope)),
            Err(Ended::Refused(r)) => SendResult::Answer(Box::new(self.refused_interaction(session, command, arg, r))),
            Err(Ended::Waiting(r, request)) => {
                SendResult::Answer(Box::new(self.waiting_interaction(session, command, arg, r, request)))
            }
            Err(Ended::Broken(r)) => SendResult::Ended(r),
        }
    }

    fn interact(
        &self,
        session: &mut Session,
        command: &str,
        arg: &str,
        raw: bool,
        progress: Option<&dyn Progress>,
    ) -> Result<Envelope, Ended> {
        let cmd = session.spec.command(command).map_err(Ended::Refused)?.clone();
        cmd.check(command, arg).map_err(Ended::Refused)?;
        // An upstream call's arguments are a JSON object, checked before
        // anything is asked or sent.
        let upstream =
            session.spec.mcp.then(|| upstream::arguments(command, arg)).transpose().map_err(Ended::Refused)?;
        if let Some(max) = session.spec.max_interactions {
            if session.interactions >= max {
                return Err(Ended::Refused(Refusal::new(
                    ReasonCode::SessionLimit,
                    format!("the session had its {max} interactions ([session] max_interactions)"),
                )));
            }
        }
        self.check_fresh(session).map_err(Ended::Broken)?;
        let (policy_ids, approval) = self.authorize_interaction(session, command, &cmd, arg)?;
        let result = match upstream {
            Some(arguments) => {
                self.upstream_call(session, (command, arg), arguments, policy_ids, approval.as_deref(), progress)
            }
            None => self.write_and_read(session, (command, arg), raw, policy_ids, approval.as_deref(), progress),
        };
        if let Some(request) = &approval {
            // The approved request ends with the interaction it allowed.
            let _request = self.enter_call(request, session.prepared.principal());
            let end = match &result {
                Ok(envelope) => Ok(envelope.clone()),
                Err(Ended::Refused(r) | Ended::Waiting(r, _) | Ended::Broken(r)) => Err(r.clone()),
            };
            let _ = self.journal_end(Some(request), end);
        }
        result
    }

    fn write_and_read(
        &self,
        session: &mut Session,
        (command, arg): (&str, &str),
        raw: bool,
        policy_ids: Vec<String>,
        approval: Option<&str>,
        progress: Option<&dyn Progress>,
    ) -> Result<Envelope, Ended> {
        let mut line = arg.as_bytes().to_vec();
        line.push(b'\n');
        let Channel::Terminal(Some(master)) = &mut session.channel else {
            return Err(Ended::Broken(Refusal::new(ReasonCode::SessionDiscarded, "the session's terminal is closed")));
        };
        if let Err(e) = master.write_all(&line) {
            return Err(Ended::Broken(Refusal::new(
                ReasonCode::SessionDiscarded,
                format!("the session's terminal is gone ({e}); nothing was published"),
            )));
        }
        session.interactions += 1;
        let deadline = Instant::now() + Duration::from_secs(session.spec.interaction_timeout_seconds);
        let max = session.spec.max_interaction_bytes;
        let mut meter = Meter::begin(progress, Phase::SessionPrompt, None);
        let reading = terminal::read_until_ready(master, &session.spec, max, deadline, raw, &mut meter);
        drop(meter);
        let output = without_echo(&reading.text, arg);
        let read = json!({ "output_bytes": reading.bytes, "truncated": reading.truncated, "ready": reading.ready });
        self.note_interaction(session, (command, arg), json!({ "policy_ids": policy_ids, "approval": approval }), read)
            .map_err(Ended::Broken)?;
        if !reading.ready {
            let why =
                if reading.ended { "ended" } else { "did not show its prompt within interaction_timeout_seconds" };
            return Err(Ended::Broken(Refusal::new(
                ReasonCode::SessionNotReady,
                format!(
                    "the session's program {why} after {command}; the session was discarded, nothing was published"
                ),
            )));
        }
        let mut envelope = session.base();
        envelope.content = Some(json!({
            "session": session.id(),
            "command": command,
            "output": output,
            "output_bytes": reading.bytes,
            "truncated": reading.truncated,
            "max_interaction_bytes": max,
            "pending_publication": session.prepared.record().output.as_ref().map(|o| o.path.clone()),
        }));
        if let Some(e) = envelope.evidence.as_mut() {
            e.policy_ids = policy_ids;
        }
        Ok(envelope)
    }

    /// The finalize command (`finalize = true`), its prompt, the worker
    /// stopped and confirmed gone, then the one output published as any
    /// call's. A finalize refused before anything was written (pattern,
    /// policy) hands the session back, usable; anything else ends it.
    /// While it waits for the prompt, `progress` (if any) hears of it.
    pub fn session_finalize(
        &self,
        mut session: Session,
        command: Option<&str>,
        arg: &str,
        progress: Option<&dyn Progress>,
    ) -> (Envelope, Option<Session>) {
        let id = session.id().to_owned();
        let principal = session.prepared.principal().to_owned();
        let _caller = self.enter_call(&id, &principal);
        if session.spec.mcp {
            return self.finalize_upstream(session, command, arg);
        }
        let name = match command {
            Some(c) => c.to_owned(),
            None => match session.spec.commands.iter().find(|(_, c)| c.finalize) {
                Some((name, _)) => name.clone(),
                None => {
                    let r = Refusal::new(ReasonCode::SessionCommandUnknown, "the session declares no finalize command");
                    return (self.refused_interaction(&mut session, "finalize", arg, r), Some(session));
                }
            },
        };
        let finalize = session.spec.command(&name).map(|c| c.finalize);
        if finalize.as_ref().is_ok_and(|f| !f) {
            let r = Refusal::new(ReasonCode::Usage, format!("{name} is not a finalize command of this session"));
            return (self.refused_interaction(&mut session, &name, arg, r), Some(session));
        }
        let interaction = match self.interact(&mut session, &name, arg, false, progress) {
            Ok(e) => e,
            // A refused finalize (pattern, policy) leaves the session as it was.
            Err(Ended::Refused(r)) => return (self.refused_interaction(&mut session, &name, arg, r), Some(session)),
            Err(Ended::Waiting(r, request)) => {
                return (self.waiting_interaction(&mut session, &name, arg, r, request), Some(session))
            }
            Err(Ended::Broken(r)) => return (self.discard(session, Err(r)), None),
        };
        (self.stop_and_publish(session, interaction), None)
    }

    /// The worker of a finalized session stopped (its terminal or stdin
    /// closed, a grace to end by itself) and confirmed gone, then the one
    /// output published as any call's, answered as `answer` (the finalize
    /// interaction's). Anything short of that discards the staging.
    fn stop_and_publish(&self, mut session: Session, answer: Envelope) -> Envelope {
        let id = session.id().to_owned();
        let principal = session.prepared.principal().to_owned();
        let outcome = match self.stop_worker(&mut session, true) {
            Ok(o) => o,
            Err(r) => return self.discard(session, Err(r)),
        };
        if session.spec.mcp {
            // An MCP server must leave by itself once its stdin closes.
            if let Err(r) = crate::transport::mcp::exited_cleanly(&outcome) {
                return self.discard(session, Err(r));
            }
        }
        if !outcome.cleanup_confirmed {
            let r = Refusal::new(ReasonCode::WorkerCleanup, "the session's processes were not confirmed gone");
            return self.discard(session, Err(r));
        }
        let max_file = session.prepared.descriptor().command_boundary.filesystem.max_file_bytes;
        if let Err(r) = crate::engine::verdict::judge_export(&outcome, max_file) {
            return self.discard(session, Err(r));
        }
        let published = self.publish(&session.prepared, session.prepared.output(), session.staged_output.as_ref());
        let mut content = answer.content.clone();
        if let Some(c) = content.as_mut() {
            c["pending_publication"] = serde_json::Value::Null;
        }
        let result =
            published.map(|created_files| Envelope { stage: Some("finished"), created_files, content, ..answer });
        session.prepared.release_staging();
        self.withdraw_requests(&mut session);
        self.ended(&id, &principal, result)
    }

    /// Ends `session` without finalize: the worker is killed and reaped,
    /// the staging discarded, nothing published; answers
    /// `session.discarded`.
    pub fn session_close(&self, session: Session, why: &str) -> Envelope {
        let id = session.id().to_owned();
        let principal = session.prepared.principal().to_owned();
        let _caller = self.enter_call(&id, &principal);
        let r = Refusal::new(
            ReasonCode::SessionDiscarded,
            format!("the session was {why} without finalize: nothing was published and its staging was discarded"),
        );
        self.discard(session, Err(r))
    }

    fn discard(&self, mut session: Session, result: Result<Envelope, Refusal>) -> Envelope {
        let id = session.id().to_owned();
        let principal = session.prepared.principal().to_owned();
        self.tear_down(&mut session);
        self.withdraw_requests(&mut session);
        self.ended(&id, &principal, result)
    }

    /// Journals how the session ended and seals its answer.
    fn ended(&self, id: &str, principal: &str, result: Result<Envelope, Refusal>) -> Envelope {
        let started = Instant::now();
        let envelope = self.journal_end(Some(id), result).unwrap_or_else(|refusal| Envelope {
            invocation_id: Some(id.to_owned()),
            ..Envelope::from_refusal(&refusal)
        });
        let journal = airlock_core::JournalEvidence { key_id: self.journal().key().key_id() };
        answer::sealed(envelope, principal, journal, None, started)
    }

    /// Kills the worker at once and gives back the session's staging:
    /// nothing of it is published.
    fn tear_down(&self, session: &mut Session) {
        let _ = self.stop_worker(session, false);
        session.prepared.release_staging();
    }

    /// Ends the worker, reaps it and journals its end. `natural`: the
    /// terminal is closed (the program gets its hangup and ends; PID 1 then
    /// kills what is left and exports the output), and it is killed only if
    /// it has not ended within [`HANGUP_GRACE`]; else it is killed at once.
    fn stop_worker(&self, session: &mut Session, natural: bool) -> Result<airlock_sandbox::WorkerOutcome, Refusal> {
        let Some(mut worker) = session.worker.take() else {
            return Err(Refusal::new(ReasonCode::Internal, "the session's worker was already stopped"));
        };
        session.channel.hang_up();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        if natural {
            let (kill, done) = (worker.kill_handle(), done.clone());
            std::thread::spawn(move || {
                std::thread::sleep(HANGUP_GRACE);
                if !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let _ = kill.kill();
                }
            });
        } else {
            let _ = worker.kill();
        }
        let outcome = worker.wait().map_err(|e| crate::failure::sandbox_refusal(&e, "the session"));
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let id = session.id().to_owned();
        let body = match &outcome {
            Ok(o) => json!({
                "exit_code": crate::engine::verdict::exit_number(o.exit),
                "timed_out": o.timed_out,
                "cleanup_confirmed": o.cleanup_confirmed,
                "output_bytes": o.output.as_ref().map(|e| e.bytes),
            }),
            Err(r) => json!({ "error": r.code.as_str(), "message": r.message }),
        };
        self.note(kind::WORKER_FINISHED, Some(&id), body)?;
        outcome
    }

    fn refused_interaction(&self, session: &mut Session, command: &str, arg: &str, refusal: Refusal) -> Envelope {
        let id = session.id().to_owned();
        let why = json!({ "refused": refusal.code.as_str(), "message": refusal.message });
        let _ = self.note_interaction(session, (command, arg), why, json!({}));
        let mut envelope = Envelope { invocation_id: Some(id.clone()), ..Envelope::from_refusal(&refusal) };
        envelope.tool = Some(session.prepared.descriptor().tool.clone());
        envelope.content = Some(json!({ "session": id, "command": command, "session_usable": true }));
        envelope
    }
}

impl Runtime {
    /// Journals one interaction of `session` (`SessionInteraction`): its
    /// command, the digest of its argument, then the fields of `verdict`
    /// (the policies and approval that let it run, or why it was refused)
    /// and of `outcome`.
    fn note_interaction(
        &self,
        session: &Session,
        (command, arg): (&str, &str),
        verdict: serde_json::Value,
        outcome: serde_json::Value,
    ) -> Result<(), Refusal> {
        let mut body = json!({ "command": command, "arg_sha256": airlock_core::sha256_tagged(arg.as_bytes()) });
        for extra in [verdict, outcome] {
            if let (Some(body), serde_json::Value::Object(fields)) = (body.as_object_mut(), extra) {
                body.extend(fields);
            }
        }
        self.note(kind::SESSION_INTERACTION, Some(session.id()), body)
    }
}

/// What became of one `send`.
#[derive(Debug)]
pub enum SendResult {
    /// The session goes on (the answer may be a refusal of this interaction).
    Answer(Box<Envelope>),
    /// The session cannot go on; the holder discards it with this refusal
    /// ([`Runtime::session_end_with`]).
    Ended(Refusal),
}

enum Ended {
    /// This interaction was refused; the session is as it was.
    Refused(Refusal),
    /// This interaction waits for an exact-call approval of the request
    /// described; the session is as it was.
    Waiting(Refusal, serde_json::Value),
    /// The session cannot go on.
    Broken(Refusal),
}

impl Runtime {
    /// Discards `session` (nothing published) and answers with `refusal`.
    pub fn session_end_with(&self, session: Session, refusal: Refusal) -> Envelope {
        let id = session.id().to_owned();
        let principal = session.prepared.principal().to_owned();
        let _caller = self.enter_call(&id, &principal);
        self.discard(session, Err(refusal))
    }
}

/// `text` without the terminal's echo of the line just written.
fn without_echo(text: &str, arg: &str) -> String {
    let trimmed = text.strip_prefix(arg).and_then(|rest| rest.strip_prefix('\n'));
    let body = trimmed.unwrap_or(text);
    // The prompt that ended the output is not part of the answer.
    match body.rfind('\n') {
        Some(at) => body[..at + 1].to_owned(),
        None if trimmed.is_some() => String::new(),
        None => body.to_owned(),
    }
}
