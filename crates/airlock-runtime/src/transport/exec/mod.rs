//! The exec shape: a `[command]` (or `[mcp]`) tool run in a worker with
//! private snapshots of its declared inputs and one new output.
//!
//! Prepare ([`prepare`]) validates the arguments, resolves every input and
//! the output's parent through handles, reserves staging room and
//! snapshots the inputs. The run starts the worker on the native tier
//! (an `[mcp]` tool's upstream server through [`super::mcp`]), parses its
//! output (a custom parser in a worker of its own, [`parser`]), and
//! publishes the one output only if the tool exited 0, its output parsed,
//! its output file stayed within bounds and was exported intact, and the
//! worker's processes are confirmed gone. It is the one shape that can be
//! kept by `airlock prepare` and dispatched later ([`dispatch`]).

mod dispatch;
pub(crate) use dispatch::KeptCall;
mod parser;
mod prepare;
mod remote;
mod stdout_file;

pub use prepare::CallRequest;

use crate::engine::publish::OUTPUT_FILE;
use crate::engine::verdict::judge;
use crate::engine::{answer, AuthorizedCall, PreparedCall, Transport};
use crate::Runtime;
use airlock_core::manifest::Manifest;
use airlock_core::output::{parse_output, DEFAULT_MAX_OUTPUT_BYTES};
use airlock_core::{Envelope, ReasonCode, Refusal, Tier};
use airlock_hostfs::{HeldOutput, StagedFile};
use airlock_sandbox::{AnyTier, HeldInput, StagedInput, StagedOutput, WorkerLimits, WorkerOutcome, WorkerSpec};
use parser::{run_parser, ParserPlace};
use serde_json::json;
use std::time::Duration;

/// Bytes of standard error read from the worker.
pub(crate) const STDERR_LIMIT: usize = 64 * 1024;

/// `transport` of an exec call's descriptor (an `[mcp]` tool's too).
pub const EXEC_TRANSPORT: &str = "exec";

/// The exec shape's part of a prepared call.
#[derive(Debug)]
pub struct ExecPayload {
    /// The manifest exactly as prepared.
    manifest: Manifest,
    /// The held output parent, if the call creates a file.
    output: Option<HeldOutput>,
    /// Per input (declaration order): the host file held unchanged in
    /// place of a snapshot, if it is.
    held: Vec<Option<HeldInput>>,
    /// Per input: its snapshot in a sealed memory file, if it is there
    /// (a small input of a call run at once on the native tier).
    memory: Vec<Option<std::fs::File>>,
}

impl PreparedCall<ExecPayload> {
    /// The manifest exactly as prepared.
    pub fn manifest(&self) -> &Manifest {
        &self.payload().manifest
    }

    /// The held output parent, if the call creates a file.
    pub fn output(&self) -> Option<&HeldOutput> {
        self.payload().output.as_ref()
    }

    /// Opens the snapshot of input `index` (declaration order), read-only:
    /// the held host file itself where it is held, its sealed memory file
    /// where it is in memory.
    pub fn open_snapshot(&self, index: usize) -> Result<std::fs::File, Refusal> {
        if let Some(Some(held)) = self.payload().held.get(index) {
            return held.file().try_clone().map_err(|e| Refusal::new(ReasonCode::Internal, format!("dup: {e}")));
        }
        if let Some(Some(memory)) = self.payload().memory.get(index) {
            return memory.try_clone().map_err(|e| Refusal::new(ReasonCode::Internal, format!("dup: {e}")));
        }
        let name = &self
            .record()
            .inputs
            .get(index)
            .ok_or_else(|| Refusal::new(ReasonCode::Internal, "no such input"))?
            .snapshot;
        let inputs = crate::store::staged_inputs(self.staged()?)?;
        Ok(inputs.open_file(name)?)
    }

    /// `input.changed` unless every held input is still held with no
    /// writer waiting or let through: asked once the worker has ended,
    /// before its answer or its output is used.
    pub(crate) fn held_inputs_unchanged(&self) -> Result<(), Refusal> {
        for (held, rec) in self.payload().held.iter().zip(&self.record().inputs) {
            if held.as_ref().is_some_and(|h| !h.unchanged()) {
                return Err(Refusal::new(
                    ReasonCode::InputChanged,
                    format!(
                        "input {:?} was opened for writing on the host while the tool ran (its read lease broke); \
                         nothing of this run is used: try again",
                        rec.path
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// One exec call: the request and its tool's manifest (read once).
pub(crate) struct Exec<'a> {
    pub request: &'a CallRequest,
    pub manifest: Manifest,
}

impl Transport for Exec<'_> {
    type Payload = ExecPayload;
    const NAME: &'static str = EXEC_TRANSPORT;
    const WRITES: bool = true;
    const NOT_KEPT: Option<&'static str> = None;

    fn prepare(
        self,
        rt: &Runtime,
        start: &crate::engine::CallStart<'_>,
    ) -> Result<crate::engine::Preparation<ExecPayload>, Refusal> {
        rt.prepare_exec(self, start)
    }

    fn execute(rt: &Runtime, call: AuthorizedCall<ExecPayload>) -> Result<Envelope, Refusal> {
        match call.prepared().manifest().mcp_spec()? {
            Some(spec) => rt.execute_mcp(spec, call),
            None => rt.execute_command(call),
        }
    }
}

impl Runtime {
    fn execute_command(&self, call: AuthorizedCall<ExecPayload>) -> Result<Envelope, Refusal> {
        let (mut prepared, decision) = call.into_parts();
        let remote = prepared.descriptor().tier == Tier::Cluster.as_str();
        // A cluster call's tool runs elsewhere: no tier of this host is
        // built for it (a host whose own tiers are not ready still reaches
        // its workers); its custom parser, if any, runs here on the native
        // tier, built when it is needed.
        let local = if remote { None } else { Some(self.worker_tier(&prepared.descriptor().tier)?) };
        let manifest = prepared.manifest();
        let parser = manifest.output.as_ref().and_then(|o| o.custom_parser()).map(str::to_owned);
        if let Some(p) = &parser {
            if !self.config().parsers.iter().any(|allowed| allowed == p) {
                return Err(Refusal::new(
                    ReasonCode::OutputParserNotAllowed,
                    format!("the custom parser {p:?} is not in [sandbox] parsers {:?}", self.config().parsers),
                ));
            }
        }
        let (spec, staged_output) = self.worker_spec(&prepared)?;
        let d = prepared.descriptor();
        let (id, started) = (prepared.invocation_id(), json!({ "tier": d.tier }));
        let (step, outcome, evidence) = match &local {
            None => {
                let step = self.worker_started(id, &d.argv, started)?;
                let (outcome, evidence) = self.run_remote(&prepared, spec);
                (step, outcome, evidence)
            }
            Some(tier) => {
                let (step, outcome) = self.run_journaled(tier, spec, id, &d.argv, started, "the tool")?;
                (step, outcome, None)
            }
        };
        step.finished_with(outcome.as_ref(), evidence)?;
        let outcome = outcome?;
        let evidence = self.capture_evidence(manifest, prepared.invocation_id(), &outcome);

        let mut base = answer::finished(&prepared, &decision.policy_ids, Some((&outcome, None)));
        let fs = &prepared.descriptor().command_boundary.filesystem;
        let max_file = fs.max_file_bytes;
        let timeout = manifest.tool.timeout_seconds;
        let content = evidence
            .and_then(|()| prepared.held_inputs_unchanged())
            .and_then(|()| match fs.create.first().filter(|_| manifest.stdout_is_output()) {
                Some(path) => {
                    // The stdout is the output file, not a stream to show.
                    base.stdout_tail = None;
                    stdout_file::judge_stdout_file(&outcome, timeout, max_file).and_then(|()| {
                        stdout_file::describe(manifest, path, staged_output.as_ref().map(StagedFile::file))
                    })
                }
                None => judge(&outcome, timeout, max_file)
                    .and_then(|()| self.tool_content(&prepared, local.as_ref(), &outcome, parser.as_deref())),
            })
            .and_then(|c| manifest.check_output_schema(&c).map(|()| c));
        let envelope = match content {
            Err(refusal) => {
                let parsed = failed_content(&refusal, manifest, &outcome, parser.is_some());
                answer::failed(&base, refusal, parsed)
            }
            Ok(content) => match self.publish(&prepared, prepared.output(), staged_output.as_ref()) {
                Ok(created_files) => Envelope { content: Some(content), created_files, ..base },
                Err(refusal) => answer::failed(&base, refusal, None),
            },
        };
        // The staged copies are removed and their reservation released
        // before the answer is given.
        prepared.release_staging();
        Ok(envelope)
    }

    /// The `content` of a tool's answer from its standard output: the
    /// builtin parser of `[output] format`, or the allowed custom parser in
    /// a worker of its own, on `tier` (the call's), or on the native tier
    /// when the call ran on no tier of this host.
    fn tool_content(
        &self,
        prepared: &PreparedCall<ExecPayload>,
        tier: Option<&AnyTier>,
        outcome: &WorkerOutcome,
        parser: Option<&str>,
    ) -> Result<serde_json::Value, Refusal> {
        let manifest = prepared.manifest();
        match parser {
            None => {
                let format = manifest.output_parser();
                parse_output(format, &outcome.stdout)
            }
            Some(program) => {
                let place = ParserPlace {
                    staging: prepared.staged()?,
                    working_dir: &self.config().working_dir,
                    image: self.image(),
                    invocation_id: prepared.invocation_id(),
                };
                let native;
                let tier = match tier {
                    Some(tier) => tier,
                    None => {
                        native = AnyTier::Native(self.native_tier()?);
                        &native
                    }
                };
                run_parser(tier, program, &outcome.stdout, place, manifest)
            }
        }
    }

    /// The worker for a prepared call, tool or MCP server alike: its argv,
    /// its snapshots read-only, (if it creates one) an empty output file in
    /// its staging data, the image, its limits and its timeout; and this
    /// process's own handle of that output file, read back and perhaps
    /// published as itself. A file the worker writes is named
    /// [`OUTPUT_FILE`] in the staging data (a sandbox binds it by name, and
    /// it is published by rename); the output's staging file a tool's
    /// standard output is streamed into is unnamed where the staging file
    /// system allows (published by link).
    pub(crate) fn worker_spec(
        &self,
        prepared: &PreparedCall<ExecPayload>,
    ) -> Result<(WorkerSpec, Option<StagedFile>), Refusal> {
        let mut inputs = Vec::with_capacity(prepared.record().inputs.len());
        for (index, rec) in prepared.record().inputs.iter().enumerate() {
            inputs.push(StagedInput {
                virtual_path: rec.path.clone(),
                file: prepared.open_snapshot(index)?,
                held: rec.held,
            });
        }
        let d = prepared.descriptor();
        let fs = &d.command_boundary.filesystem;
        let manifest = prepared.manifest();
        // A tool whose stdout is its output writes no file of its own: the
        // sandbox streams its stdout into the output's staging file.
        let (output, stdout_sink, kept) = match fs.create.first() {
            None => (None, None, None),
            Some(path) => {
                let staging = prepared.staged()?;
                let kept = if manifest.stdout_is_output() {
                    staging.create_staged(OUTPUT_FILE)?
                } else {
                    staging.create_staged_named(OUTPUT_FILE)?
                };
                let file =
                    kept.file().try_clone().map_err(|e| Refusal::new(ReasonCode::Internal, format!("dup: {e}")))?;
                if manifest.stdout_is_output() {
                    (None, Some(file), Some(kept))
                } else {
                    let output = StagedOutput { virtual_path: path.clone(), file, max_bytes: fs.max_file_bytes };
                    (Some(output), None, Some(kept))
                }
            }
        };
        let spec = WorkerSpec {
            argv: d.argv.clone(),
            env: Vec::new(),
            working_dir: self.config().working_dir.clone(),
            inputs,
            output,
            image: self.image(),
            limits: worker_limits(manifest, fs.max_file_bytes),
            timeout: Duration::from_secs(manifest.tool.timeout_seconds),
            stdout_limit: stdout_limit(manifest, fs.max_file_bytes),
            stdout_sink,
            stderr_limit: STDERR_LIMIT,
            fs_socket: None,
            start_gate: None,
            provided: Vec::new(),
            call_id: Some(prepared.invocation_id().to_string()),
        };
        Ok((spec, kept))
    }
}

pub(crate) fn worker_limits(manifest: &Manifest, max_file_bytes: u64) -> WorkerLimits {
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

/// The bound of the tool's standard output pipe: `max_file_bytes` when
/// stdout is the output file, else `[output] max_bytes`.
fn stdout_limit(manifest: &Manifest, max_file_bytes: u64) -> usize {
    let max = if manifest.stdout_is_output() { max_file_bytes } else { output_max_bytes(manifest) };
    usize::try_from(max).unwrap_or(usize::MAX)
}

/// `[output] max_bytes`: most bytes of output parsed into an answer.
fn output_max_bytes(manifest: &Manifest) -> u64 {
    manifest.output.as_ref().and_then(|o| o.max_bytes).unwrap_or(DEFAULT_MAX_OUTPUT_BYTES)
}

/// The `content` of a tool that ran and failed (`tool.failed`: it exited
/// non-zero): its standard output read by the builtin parser of `[output]
/// format` when that succeeds (a linter's JSON findings with exit 1), else
/// none. Never the raw streams, which are the answer's tails; a custom
/// parser is not run for a failed tool, and a stdout that is the output
/// file is not read.
fn failed_content(
    refusal: &Refusal,
    manifest: &Manifest,
    outcome: &WorkerOutcome,
    custom_parser: bool,
) -> Option<serde_json::Value> {
    if refusal.code != ReasonCode::ToolFailed
        || custom_parser
        || manifest.stdout_is_output()
        || outcome.stdout.is_empty()
    {
        return None;
    }
    let format = manifest.output_parser();
    parse_output(format, &outcome.stdout).ok()
}
