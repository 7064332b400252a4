//! Steps 3–5 of the pipeline for one authorized call: stage, run the worker
//! on the native tier, parse its output, confirm cleanup, publish the one
//! output through the held parent, and answer with receipts.
//!
//! Nothing is published unless the tool exited 0, its output parsed, its
//! output file stayed within bounds and was exported intact, and the
//! worker's processes are confirmed gone.

use crate::authorize::AuthorizedCall;
use crate::failure::sandbox_refusal;
use crate::prepare::{CallRequest, PreparedCall};
use crate::verdict::{exit_number, judge, limits_evidence, output_tail};
use crate::{ledger, Runtime};
use airlock_core::manifest::{Manifest, OutputFormat};
use airlock_core::output::{parse_output, DEFAULT_MAX_OUTPUT_BYTES};
use airlock_core::{CreatedFile, Envelope, Evidence, ReasonCode, Refusal, Tier};
use airlock_hostfs::PrivateDir;
use airlock_journal::kind;
use airlock_sandbox::NativeTier;
use airlock_sandbox::{
    ImageMount, StagedInput, StagedOutput, Tier as _, Worker as _, WorkerLimits, WorkerOutcome, WorkerSpec,
};
use serde_json::json;
use std::time::Duration;

/// Bytes of standard error read from the worker.
const STDERR_LIMIT: usize = 64 * 1024;
/// The output file in the call's staging data, where the worker's export lands.
pub(crate) const OUTPUT_FILE: &str = "output";

impl Runtime {
    /// Prepares, authorizes, runs and publishes one call. `Err` is a refusal
    /// before anything ran; a call that ran answers `Ok` with its status.
    pub fn run(&self, request: &CallRequest) -> Result<Envelope, Refusal> {
        let _caller = self.enter_call(&request.invocation_id, self.principal_of(request.principal.as_deref()));
        let id = crate::id::check_invocation_id(&request.invocation_id).ok().map(|()| request.invocation_id.as_str());
        let result = self.run_journaled(request);
        self.journal_end(id, result)
    }

    /// Runs a prepared (and, if it needs it, approved) call once, from the
    /// snapshots taken when it was prepared.
    pub fn dispatch(&self, id: &str) -> Result<Envelope, Refusal> {
        let valid = crate::id::check_invocation_id(id).ok().map(|()| id);
        // The call stays the preparer's: its records and Cedar name the
        // principal that asked for it, whoever dispatches it.
        let preparer = valid.and_then(|id| self.prepared_record(id).ok()).map(|r| r.principal);
        let _caller = self.enter_call(id, self.principal_of(preparer.as_deref()));
        let result = self.dispatch_journaled(id);
        self.journal_end(valid, result)
    }

    /// Every answer is journaled: refusals before anything ran, and the end
    /// of a call that ran. Neither announces an effect, so neither pays a
    /// sync of its own: the publication's records, synced before and after
    /// the rename, are what must survive a crash. If the end cannot be
    /// journaled, a call that ran still answers with what it did (its
    /// `created_files`), failed with the journal's error.
    pub(crate) fn journal_end(&self, id: Option<&str>, result: Result<Envelope, Refusal>) -> Result<Envelope, Refusal> {
        if let (Err(refusal), Some(id)) = (&result, id) {
            self.reserve_refused_id(id, refusal);
        }
        let end = match &result {
            Err(refusal) => self.note(
                kind::INVOCATION_REFUSED,
                id,
                json!({ "code": refusal.code.as_str(), "message": refusal.message }),
            ),
            Ok(envelope) => self.note(
                kind::INVOCATION_FINISHED,
                id,
                json!({
                    "status": envelope.status,
                    "code": envelope.error.as_ref().map(|e| e.code.as_str()),
                    "exit_code": envelope.exit_code,
                    "created_files": envelope.created_files,
                }),
            ),
        };
        match (end, result) {
            (Ok(()), result) => result,
            (Err(journal), Err(_)) => Err(journal),
            // The call ran: its answer (and the files it lists) stands, with
            // the journal's failure as its error.
            (Err(journal), Ok(envelope)) => {
                let failed = Envelope::from_refusal(&journal);
                Ok(Envelope { status: failed.status, error: failed.error, ..envelope })
            }
        }
    }

    fn dispatch_journaled(&self, id: &str) -> Result<Envelope, Refusal> {
        ledger::refuse_if_unconfirmed(self.state(), self.journal())?;
        // A denied or expired call is refused before its snapshots are read.
        self.check_waiting(id)?;
        let mut prepared = self.load_prepared(id)?;
        prepared.admit_if_unstaged(self.pool())?;
        let d = prepared.descriptor();
        let approved = crate::approval::needs_approval(&d.risk_tier, d.human_approval);
        // The approval is verified and taken first, so a dispatch refused for
        // want of one leaves the prepared call (and its snapshots)
        // dispatchable later.
        if approved {
            self.consume_approval(&prepared)?;
        }
        prepared.mark_dispatched().map_err(|r| {
            if prepared.store().contains(crate::approval::DENIED) {
                crate::approval::denied(id)
            } else {
                r
            }
        })?;
        // Dispatched once: from here the snapshots' reservation is this
        // process's, released (data first) when the call is done.
        prepared.adopt_lease(self.pool())?;
        self.authorize_call(prepared, approved).and_then(|call| self.execute(call))
    }

    /// Asks the configured authorizer and journals a permit
    /// (`InvocationAuthorized`, with the deciding policies).
    pub(crate) fn authorize_call(&self, prepared: PreparedCall, approved: bool) -> Result<AuthorizedCall, Refusal> {
        let authorized = prepared.authorize(self.authorizer().as_ref(), approved)?;
        self.note(
            kind::INVOCATION_AUTHORIZED,
            Some(authorized.prepared().invocation_id()),
            json!({
                "policy_ids": authorized.decision().policy_ids,
                "approved": approved,
            }),
        )?;
        Ok(authorized)
    }

    fn run_journaled(&self, request: &CallRequest) -> Result<Envelope, Refusal> {
        // The manifest is read once per call: whether it needs approval,
        // what policy sees and what runs all come from these bytes (whose
        // digest the descriptor binds). A source tool is answered by the
        // broker in-process (source.rs): no staging, no worker.
        let tool = self.load_tool(&request.tool)?;
        if tool.manifest.source.is_some() {
            return self.run_source(request, tool);
        }
        // A [broker] tool reaches named roots through the broker.
        if tool.manifest.broker.is_some() {
            return self.run_isolated_tool(request, tool);
        }
        // Leftovers of callers that were killed are reaped when the call is
        // admitted to the staging pool (in prepare).
        ledger::refuse_if_unconfirmed(self.state(), self.journal())?;
        // A call that must wait for approval is kept durably, for dispatch.
        let t = &tool.manifest.tool;
        let keep = crate::approval::needs_approval(t.risk_tier.as_str(), t.human_approval);
        let prepared = self.prepare_call(request, tool, keep)?;
        let d = prepared.descriptor();
        let approval = crate::approval::needs_approval(&d.risk_tier, d.human_approval);
        if approval != keep {
            return Err(Refusal::new(ReasonCode::Internal, "the prepared descriptor disagrees with its manifest"));
        }
        self.journal_prepared(&prepared, approval)?;
        if approval {
            return Ok(approval_required(&prepared));
        }
        // Whatever happens, the staged copies go with the prepared call
        // (its reservation is released when it is dropped); the prepared
        // record stays so the id is never reused.
        self.authorize_call(prepared, false).and_then(|call| self.execute(call))
    }

    /// Keeps a refused call's id from being used again: the journal has
    /// seen it. (A prepared call's directory already reserves its id.)
    pub(crate) fn reserve_refused_id(&self, id: &str, refusal: &Refusal) {
        if refusal.code == ReasonCode::InvocationDuplicate {
            return;
        }
        if let Ok(invocations) = self.invocations() {
            if let Ok(dir) = invocations.create_subdir(id) {
                let _ =
                    dir.write_new_file("refused.json", json!({ "code": refusal.code.as_str() }).to_string().as_bytes());
            }
        }
    }

    /// `InvocationPrepared`: what was resolved, and which process owns it.
    /// Synced for `airlock prepare` (the call is kept for a later dispatch),
    /// deferred within `airlock run` (the worker's start syncs it).
    pub(crate) fn journal_prepared(&self, prepared: &PreparedCall, durable: bool) -> Result<(), Refusal> {
        let d = prepared.descriptor();
        let append = if durable { Runtime::record } else { Runtime::note };
        append(
            self,
            kind::INVOCATION_PREPARED,
            Some(prepared.invocation_id()),
            json!({
                "descriptor_sha256": prepared.digest(),
                "tool": d.tool,
                "manifest_sha256": d.manifest_sha256,
                "reads": d.command_boundary.filesystem.reads,
                "create": d.command_boundary.filesystem.create,
                "owner_pid": std::process::id(),
            }),
        )
    }

    fn execute(&self, call: AuthorizedCall) -> Result<Envelope, Refusal> {
        if self.config().tier != Tier::Native {
            return Err(Refusal::new(
                ReasonCode::SandboxUnavailable,
                format!("tier {:?} is not built yet; this build runs the native tier", self.config().tier),
            ));
        }
        if let Some(spec) = call.prepared().manifest().mcp_spec()? {
            return self.execute_mcp(spec, call);
        }
        let (prepared, decision) = call.into_parts();
        let tier = self.native_tier()?;
        let parser = prepared.manifest().output.as_ref().and_then(|o| o.custom_parser()).map(str::to_owned);
        if let Some(p) = &parser {
            if !self.config().parsers.iter().any(|allowed| allowed == p) {
                return Err(Refusal::new(
                    ReasonCode::OutputParserNotAllowed,
                    format!("the custom parser {p:?} is not in [sandbox] parsers {:?}", self.config().parsers),
                ));
            }
        }
        let d = prepared.descriptor().clone();
        let d_id = prepared.invocation_id().to_owned();
        let call_staging = prepared.staged()?;
        let manifest = prepared.manifest();
        let spec = self.worker_spec(&prepared)?;
        self.record(kind::WORKER_STARTED, Some(&d_id), ledger::worker_started_body(&d.argv, json!({})))?;
        let outcome = run_worker(&tier, spec, "the tool");
        self.note(
            kind::WORKER_FINISHED,
            Some(&d_id),
            match &outcome {
                Ok(o) => json!({
                    "exit_code": exit_number(o.exit),
                    "timed_out": o.timed_out,
                    "cleanup_confirmed": o.cleanup_confirmed,
                    "output_bytes": o.output.as_ref().map(|e| e.bytes),
                }),
                Err(r) => json!({ "error": r.code.as_str(), "message": r.message }),
            },
        )?;
        let outcome = outcome?;

        let base = finished_envelope(&prepared, &decision.policy_ids, &outcome);
        let content = judge(&outcome, manifest.tool.timeout_seconds, d.command_boundary.filesystem.max_file_bytes)
            .and_then(|()| match &parser {
                None => {
                    let format = manifest.output.as_ref().map(|o| o.format).unwrap_or(OutputFormat::Text);
                    parse_output(format, &outcome.stdout)
                }
                Some(program) => {
                    let place = ParserPlace {
                        staging: call_staging,
                        working_dir: &self.config().working_dir,
                        image: self.image(),
                    };
                    run_parser(&tier, program, &outcome.stdout, place, manifest)
                }
            });
        let envelope = match content {
            Err(refusal) => Envelope {
                status: refusal.code.status(),
                error: Some(airlock_core::ErrorBody { code: refusal.code, message: refusal.message }),
                content: Some(serde_json::json!({
                    "stdout": output_tail(&outcome.stdout),
                    "stderr": output_tail(&outcome.stderr),
                })),
                ..base
            },
            Ok(content) => match self.publish(&prepared, call_staging) {
                Ok(created_files) => Envelope { content: Some(content), created_files, ..base },
                Err(refusal) => Envelope {
                    status: refusal.code.status(),
                    error: Some(airlock_core::ErrorBody { code: refusal.code, message: refusal.message }),
                    ..base
                },
            },
        };
        // The staged copies are removed and their reservation released
        // before the answer is given.
        prepared.release_staging();
        Ok(envelope)
    }

    /// Publishes the one output in journaled steps: pending marker, synced
    /// candidate (an unnamed `O_TMPFILE` where the file system allows it),
    /// `FilePublicationPrepared` (the candidate's mode, identity, size and
    /// hash), a no-replace link or rename checked by identity and a
    /// directory sync, `FilePublicationFinished`, marker removed. A crash
    /// anywhere leaves the marker, which blocks new effects until recovery.
    pub(crate) fn publish(&self, prepared: &PreparedCall, staging: &PrivateDir) -> Result<Vec<CreatedFile>, Refusal> {
        let (Some(held), Some(rec)) = (prepared.output(), prepared.record().output.as_ref()) else {
            return Ok(Vec::new());
        };
        let id = prepared.invocation_id();
        let publication_id = format!("{id}/0");
        let expected = (parse_id(&rec.parent.dev)?, parse_id(&rec.parent.ino)?);
        let mut file = staging.open_file(OUTPUT_FILE)?;
        let max = prepared.descriptor().command_boundary.filesystem.max_file_bytes;
        let marker = ledger::mark_pending(self.state(), id)?;
        ledger::crash_point("before_candidate");
        let candidate = match held.write_candidate(&mut file, max, expected, id, ledger::candidate_mode()) {
            Ok(c) => c,
            Err(e) => {
                marker.clear()?;
                return Err(e.into());
            }
        };
        ledger::crash_point("before_prepared");
        let c = candidate.file().clone();
        let intent = json!({
            "publication_id": publication_id,
            "path": rec.path,
            "destination_name": held.name(),
            "candidate_mode": candidate.mode().as_str(),
            "candidate_name": candidate.name(),
            "parent": rec.parent,
            "candidate": { "dev": c.dev_ino.0.to_string(), "ino": c.dev_ino.1.to_string() },
            "bytes": c.bytes,
            "sha256": format!("sha256:{}", c.sha256_hex),
        });
        if let Err(r) = self.record(kind::FILE_PUBLICATION_PREPARED, Some(id), intent) {
            drop(candidate);
            marker.clear()?;
            return Err(r);
        }
        ledger::crash_point("after_prepared");
        let published = candidate.publish();
        ledger::crash_point("after_publish");
        let finished = match &published {
            Ok(_) => json!({ "publication_id": publication_id, "result": "confirmed" }),
            Err(e) => json!({
                "publication_id": publication_id,
                "result": "error",
                "code": e.code().as_str(),
                "message": e.message(),
            }),
        };
        // If this append fails the outcome stays unconfirmed: the marker is
        // kept and new effects wait for recovery.
        self.record(kind::FILE_PUBLICATION_FINISHED, Some(id), finished)?;
        ledger::crash_point("after_finished");
        marker.clear()?;
        let published = published?;
        Ok(vec![CreatedFile {
            path: rec.path.clone(),
            bytes: published.bytes,
            sha256: format!("sha256:{}", published.sha256_hex),
        }])
    }
}

impl Runtime {
    /// The worker for a prepared call, tool or MCP server alike: its argv,
    /// its snapshots read-only, (if it creates one) an empty output file in
    /// its staging data, the image, its limits and its timeout.
    pub(crate) fn worker_spec(&self, prepared: &PreparedCall) -> Result<WorkerSpec, Refusal> {
        let mut inputs = Vec::with_capacity(prepared.record().inputs.len());
        for (index, rec) in prepared.record().inputs.iter().enumerate() {
            inputs.push(StagedInput { virtual_path: rec.path.clone(), file: prepared.open_snapshot(index)? });
        }
        let d = prepared.descriptor();
        let fs = &d.command_boundary.filesystem;
        let output = match fs.create.first() {
            None => None,
            Some(path) => Some(StagedOutput {
                virtual_path: path.clone(),
                file: prepared.staged()?.create_file(OUTPUT_FILE)?,
                max_bytes: fs.max_file_bytes,
            }),
        };
        let manifest = prepared.manifest();
        Ok(WorkerSpec {
            argv: d.argv.clone(),
            env: Vec::new(),
            working_dir: self.config().working_dir.clone(),
            inputs,
            output,
            image: self.image(),
            limits: worker_limits(manifest, fs.max_file_bytes),
            timeout: Duration::from_secs(manifest.tool.timeout_seconds),
            stdout_limit: stdout_limit(manifest),
            stderr_limit: STDERR_LIMIT,
            fs_socket: None,
            provided: Vec::new(),
        })
    }
}

/// The base of a finished call's answer: `ok`, its id, tool, exit code and
/// evidence (descriptor digest, the policies that permitted it, how the
/// worker's resources were bounded).
pub(crate) fn finished_envelope(prepared: &PreparedCall, policy_ids: &[String], outcome: &WorkerOutcome) -> Envelope {
    Envelope {
        invocation_id: Some(prepared.invocation_id().to_owned()),
        tool: Some(prepared.descriptor().tool.clone()),
        stage: Some("finished"),
        exit_code: Some(exit_number(outcome.exit)),
        evidence: Some(Evidence {
            descriptor_sha256: Some(prepared.digest().to_owned()),
            policy_ids: policy_ids.to_vec(),
            principal: Some(prepared.principal().to_owned()),
            limits: Some(limits_evidence(&outcome.limits, None)),
        }),
        ..Envelope::ok()
    }
}

/// The answer for a call that stops after prepare until an approver
/// approves it. It names the call (invocation id and descriptor digest) and
/// when it expires, and gives the caller no command to run: only an
/// approver's key can approve it.
fn approval_required(prepared: &PreparedCall) -> Envelope {
    let id = prepared.invocation_id();
    let digest = prepared.digest();
    let until = prepared
        .record()
        .expires_at
        .map(|at| format!("; it expires at {}", airlock_journal::format_rfc3339(at)))
        .unwrap_or_default();
    let refusal = Refusal::new(
        ReasonCode::ApprovalRequired,
        format!(
            "{} needs an exact-call approval: invocation {id} (descriptor {digest}) waits for an approver to review \
             and approve it{until}",
            prepared.descriptor().tool
        ),
    );
    Envelope {
        invocation_id: Some(id.to_owned()),
        tool: Some(prepared.descriptor().tool.clone()),
        stage: Some("prepared"),
        descriptor: Some(prepared.descriptor().clone()),
        evidence: Some(Evidence {
            descriptor_sha256: Some(digest.to_owned()),
            principal: Some(prepared.principal().to_owned()),
            ..Evidence::default()
        }),
        ..Envelope::from_refusal(&refusal)
    }
}

fn worker_limits(manifest: &Manifest, max_file_bytes: u64) -> WorkerLimits {
    // One byte of headroom: a tool that writes past the bound then leaves a
    // file of max+1 bytes, which the export reports as over the limit, where
    // a limit of exactly max would silently truncate to a publishable size.
    let mut limits = WorkerLimits { file_size: max_file_bytes.saturating_add(1), ..WorkerLimits::default() };
    if let Some(l) = &manifest.tool.limits {
        limits.memory_bytes = l.memory_bytes.or(limits.memory_bytes);
        limits.cpu_seconds = l.cpu_seconds.or(limits.cpu_seconds);
        limits.pids = l.pids.or(limits.pids);
        limits.open_files = l.open_files.or(limits.open_files);
        limits.scratch_bytes = l.scratch_bytes.unwrap_or(limits.scratch_bytes);
    }
    limits
}

/// Starts a worker and waits for it; a sandbox failure is a refusal naming `what`.
fn run_worker(tier: &NativeTier, spec: WorkerSpec, what: &str) -> Result<WorkerOutcome, Refusal> {
    tier.start(spec).and_then(|worker| worker.wait()).map_err(|e| sandbox_refusal(&e, what))
}

/// `[output] max_bytes` of the tool's standard output, as a pipe bound.
fn stdout_limit(manifest: &Manifest) -> usize {
    let max = manifest.output.as_ref().and_then(|o| o.max_bytes).unwrap_or(DEFAULT_MAX_OUTPUT_BYTES);
    usize::try_from(max).unwrap_or(usize::MAX)
}

fn parse_id(s: &str) -> Result<u64, Refusal> {
    s.parse()
        .map_err(|_| Refusal::new(ReasonCode::Internal, format!("bad directory identity {s:?} in the prepared record")))
}

/// Name of the raw output inside a parser's worker (ToolClad passes its path
/// as `argv[1]`).
const RAW_OUTPUT: &str = "raw_output";

/// Runs a custom parser in a fresh worker with no file grant but the tool's
/// bounded raw output, and parses its standard output as JSON.
/// Where a parser runs: the call's staging, the worker's directory, the image.
struct ParserPlace<'a> {
    staging: &'a PrivateDir,
    working_dir: &'a str,
    image: Vec<ImageMount>,
}

fn run_parser(
    tier: &NativeTier,
    program: &str,
    raw: &[u8],
    place: ParserPlace<'_>,
    manifest: &Manifest,
) -> Result<serde_json::Value, Refusal> {
    let ParserPlace { staging, working_dir, image } = place;
    use std::io::Write;
    let internal = |e: std::io::Error| Refusal::new(ReasonCode::Internal, format!("staging the raw output: {e}"));
    staging.create_file(RAW_OUTPUT)?.write_all(raw).map_err(internal)?;
    let spec = WorkerSpec {
        argv: vec![program.to_owned(), RAW_OUTPUT.to_owned()],
        env: Vec::new(),
        working_dir: working_dir.to_owned(),
        inputs: vec![StagedInput { virtual_path: RAW_OUTPUT.to_owned(), file: staging.open_file(RAW_OUTPUT)? }],
        output: None,
        image,
        limits: WorkerLimits::default(),
        timeout: Duration::from_secs(manifest.tool.timeout_seconds),
        stdout_limit: stdout_limit(manifest),
        stderr_limit: STDERR_LIMIT,
        fs_socket: None,
        provided: Vec::new(),
    };
    let outcome = run_worker(tier, spec, &format!("the parser {program}"))?;
    let failed = |why: String| Refusal::new(ReasonCode::OutputParse, format!("the parser {program} {why}"));
    if !outcome.cleanup_confirmed {
        return Err(Refusal::new(ReasonCode::WorkerCleanup, "the parser's processes could not be confirmed gone"));
    }
    if outcome.timed_out {
        return Err(failed("ran out of time".into()));
    }
    if !outcome.exit.success() {
        return Err(failed(format!("failed ({:?}): {}", outcome.exit, output_tail(&outcome.stderr))));
    }
    if outcome.stdout_truncated {
        return Err(failed("printed more than [output] max_bytes".into()));
    }
    serde_json::from_slice(&outcome.stdout).map_err(|e| failed(format!("did not print JSON: {e}")))
}
