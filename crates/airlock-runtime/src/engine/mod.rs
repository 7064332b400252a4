//! The one pipeline every call goes through, whatever its shape (DESIGN.md
//! §1): prepare → authorize → run → publish → answer. Each step is a type,
//! and a later step can only be built from the earlier one:
//!
//! 1. **Prepare** ([`Runtime::prepare_with`]): the invocation id is checked
//!    and unused, the shape's [`Transport::prepare`] resolves its boundary
//!    (snapshots, a held output parent, a query's result, a repository
//!    archive, a broker's roots) into a [`Preparation`], the descriptor is
//!    built by its one constructor ([`airlock_core::Descriptor::new`]), the
//!    record is committed under `STATE/invocations/ID` (which reserves the
//!    id), and `InvocationPrepared` is journaled. The product is a
//!    [`PreparedCall`].
//! 2. **Authorize** ([`Runtime::authorize`]): Cedar or the default policy,
//!    after the approval gate; `InvocationAuthorized` is journaled. The
//!    product is an [`AuthorizedCall`].
//! 3. **Run** ([`worker`]): every shape that starts a worker journals
//!    `WorkerStarted` (synced) and `WorkerFinished` with one body.
//! 4. **Publish** ([`publish`]): the one output, in journaled steps.
//! 5. **Answer** ([`answer`]): finished, approval required, or failed; and
//!    [`Runtime::journal_end`] journals how every call ended.
//!
//! A call shape is one module of [`crate::transport`] implementing
//! [`Transport`]; the engine never depends on a transport.
//!
//! # Logs
//!
//! Each driven call runs in a `call` span (`invocation_id`, `tool`,
//! `transport`); its steps log one `debug` event each (`prepared`,
//! `authorized`, `worker started`/`worker finished`, `published`) with
//! `duration_ms`, and its end one `info` event (`status`, `code`,
//! `duration_ms`). They are for operators (`AIRLOCK_LOG`); the journal, not
//! the log, is the evidence.

pub(crate) mod answer;
mod authorize;
pub(crate) mod prepared;
pub(crate) mod publish;
pub(crate) mod verdict;
pub(crate) mod worker;

pub use authorize::{AuthorizedCall, Authorizer, CedarPolicy, Decision, DefaultPolicy, Question, DEFAULT_POLICY_ID};
pub use prepared::PreparedCall;

use crate::store::{Commit, PendingInvocation, PreparedRecord, RecordedInput, RecordedOutput};
use crate::{id, ledger, Runtime};
use airlock_core::{CallShape, Descriptor, Envelope, FilesystemBoundary, ReasonCode, Refusal, ToolIdentity};
use airlock_journal::kind;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::Instant;

/// Milliseconds since `began` (saturating), for `duration_ms` in answers
/// and log events.
pub fn elapsed_ms(began: Instant) -> u64 {
    u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The tool a call is for, as the catalog knows it.
#[derive(Debug, Clone)]
pub struct CallTool {
    /// Name, version, manifest digest, risk tier, approval demand.
    pub identity: ToolIdentity,
    /// Cedar's view of the tool.
    pub spec: airlock_policy::ToolSpec,
    /// The manifest's bytes (kept with the call; empty for a built-in).
    pub text: String,
    /// Where the manifest was read from.
    pub origin: String,
}

/// Who asks for one call, and what for.
#[derive(Debug, Clone, Copy)]
pub struct CallStart<'a> {
    /// The invocation id.
    pub invocation_id: &'a str,
    /// Who makes the call.
    pub principal: &'a str,
    /// Kept for a later dispatch (`airlock prepare`, or waiting for an
    /// approval): synced, charged to the principal's pending budget, expiring.
    pub keep: bool,
    /// For a kept call: when it expires (Unix seconds).
    pub expires_at: Option<u64>,
    /// Where the long phases of prepare are reported, if anywhere.
    pub progress: Option<&'a dyn crate::progress::Progress>,
    /// The worker tier the caller asks for (`airlock run --tier`); `None`:
    /// the manifest's `[tool.sandbox] tier`, else the configured default.
    pub tier: Option<airlock_core::config::Tier>,
    /// The call is a session's start (its id is the session's).
    pub session: bool,
}

/// What a shape's prepare resolved, for the engine to describe and commit.
#[derive(Debug)]
pub struct Preparation<P> {
    /// The validated arguments.
    pub args: BTreeMap<String, String>,
    /// The argv after substitution.
    pub argv: Vec<String>,
    /// The resolved file boundary.
    pub filesystem: FilesystemBoundary,
    /// The worker tier the call runs on, as the descriptor names it
    /// (`crate::tier_choice`).
    pub tier: String,
    /// Snapshots taken, in declaration order.
    pub inputs: Vec<RecordedInput>,
    /// The output, with its held parent's identity.
    pub output: Option<RecordedOutput>,
    /// The call's staging reservation, if it stages anything.
    pub lease: Option<airlock_staging::Lease>,
    /// What `InvocationPrepared` records for this shape beside the common keys.
    pub journal: Map<String, Value>,
    /// The shape's own part of the call.
    pub payload: P,
}

/// One call shape: how its boundary is prepared and how an authorized call
/// of it runs. A new shape is one new implementation, not a fork of the
/// pipeline.
pub trait Transport {
    /// What prepare hands to execute, beside the committed record.
    type Payload;
    /// `transport` of the descriptor.
    const NAME: &'static str;
    /// Whether its calls change host files (then new calls wait while a
    /// crashed publication is unrecovered: fail-stop).
    const WRITES: bool;
    /// `None` if a call of this shape may be kept for a later dispatch (and
    /// so wait for an approval); else why not, for people.
    const NOT_KEPT: Option<&'static str>;
    /// A shape `airlock prepare` does not keep whose calls may still wait
    /// for an exact-call approval: kept with [`Transport::kept`]'s bytes,
    /// dispatched by `airlock dispatch` once approved.
    const WAITS_FOR_APPROVAL: bool = false;

    /// What a call of a [`Transport::WAITS_FOR_APPROVAL`] shape keeps for
    /// its dispatch ([`crate::store::KEPT_FILE`]), if anything.
    fn kept(_payload: &Self::Payload) -> Result<Option<Vec<u8>>, Refusal> {
        Ok(None)
    }

    /// Resolves the call's boundary. Nothing is committed yet: a refusal
    /// leaves nothing behind.
    fn prepare(self, rt: &Runtime, start: &CallStart<'_>) -> Result<Preparation<Self::Payload>, Refusal>;

    /// Runs an authorized call, publishes what it may, and answers.
    fn execute(rt: &Runtime, call: AuthorizedCall<Self::Payload>) -> Result<Envelope, Refusal>;
}

impl Runtime {
    /// Prepares, authorizes and runs one call of shape `T` (the answer is
    /// journaled by the caller's [`Runtime::journal_end`]). A call whose
    /// tool needs an exact-call approval stops after prepare, kept for
    /// `airlock dispatch`, if its shape can be kept, and is refused
    /// (`manifest.unsupported`) if not.
    pub(crate) fn drive<T: Transport>(
        &self,
        transport: T,
        tool: &CallTool,
        start: CallStart<'_>,
    ) -> Result<Envelope, Refusal> {
        let span = tracing::info_span!(
            "call",
            invocation_id = start.invocation_id,
            tool = %tool.identity.name,
            transport = T::NAME
        );
        let _in_call = span.enter();
        let began = Instant::now();
        let result = self.drive_steps(transport, tool, start);
        let duration_ms = elapsed_ms(began);
        match &result {
            Ok(e) => {
                let code = e.error.as_ref().map(|e| e.code.as_str());
                tracing::info!(status = e.status.as_str(), code, duration_ms, "call finished");
            }
            Err(r) => tracing::info!(code = r.code.as_str(), duration_ms, "call refused"),
        }
        result
    }

    fn drive_steps<T: Transport>(
        &self,
        transport: T,
        tool: &CallTool,
        start: CallStart<'_>,
    ) -> Result<Envelope, Refusal> {
        let needs = crate::approval::needs_approval(&tool.identity.risk_tier, tool.identity.human_approval);
        if let (true, Some(why), false) = (needs, T::NOT_KEPT, T::WAITS_FOR_APPROVAL) {
            return Err(Refusal::new(
                ReasonCode::ManifestUnsupported,
                format!("{} needs an exact-call approval, which it cannot wait for: {why}", tool.identity.name),
            ));
        }
        let prepared = self.prepare_with(transport, tool, CallStart { keep: needs, ..start })?;
        if needs {
            return Ok(answer::approval_required(&prepared));
        }
        // Whatever happens, the staged copies go with the prepared call
        // (its reservation is released when it is dropped); the record
        // stays, so the id is never reused.
        let call = self.authorize(prepared, false)?;
        T::execute(self, call)
    }

    /// Step 1 for every shape (see the module documentation). With
    /// `start.keep` the call is kept for a later dispatch: synced,
    /// expiring after `[approval] ttl`, and journaled durably. A call of a
    /// shape that is never kept is committed already marked dispatched
    /// ([`Commit::RunOnly`]).
    pub(crate) fn prepare_with<T: Transport>(
        &self,
        transport: T,
        tool: &CallTool,
        start: CallStart<'_>,
    ) -> Result<PreparedCall<T::Payload>, Refusal> {
        if let (true, Some(why), false) = (start.keep, T::NOT_KEPT, T::WAITS_FOR_APPROVAL) {
            return Err(Refusal::new(ReasonCode::ManifestUnsupported, format!("{}: {why}", tool.identity.name)));
        }
        if T::WRITES {
            // Leftovers of callers that were killed are reaped when the
            // call is admitted to the staging pool (in the shape's prepare).
            ledger::refuse_if_unconfirmed(self.state(), self.journal())?;
        }
        id::check_invocation_id(start.invocation_id)?;
        let invocations = self.invocations()?;
        // Checked again, atomically, when the call is committed; this early
        // look keeps a reused id from reading any file.
        id::check_unused(&invocations, start.invocation_id)?;
        let prepared_at = airlock_staging::unix_now();
        let expires_at = start.keep.then(|| prepared_at.saturating_add(self.config().approval.ttl_seconds));
        let start = CallStart { expires_at, ..start };
        let began = Instant::now();
        // The policy a call will be authorized under is fixed (and, from
        // the cluster, fetched) before any file is read.
        let policy_bundle = self.policy_bundle()?;
        let prep = transport.prepare(self, &start)?;
        let mut descriptor = Descriptor::new(
            &tool.identity,
            CallShape {
                transport: T::NAME.to_owned(),
                args: prep.args,
                argv: prep.argv,
                working_dir: self.config().working_dir.clone(),
                tier: prep.tier,
                filesystem: prep.filesystem,
            },
        );
        descriptor.policy_bundle = policy_bundle;
        let record = PreparedRecord {
            format: crate::store::RECORD_FORMAT,
            invocation_id: start.invocation_id.to_owned(),
            principal: start.principal.to_owned(),
            manifest_origin: tool.origin.clone(),
            descriptor_sha256: descriptor.digest(),
            descriptor,
            inputs: prep.inputs,
            output: prep.output,
            prepared_at: Some(prepared_at),
            expires_at,
            session: start.session.then(|| start.invocation_id.to_owned()),
        };
        let how = match (start.keep, T::NOT_KEPT) {
            (true, _) => Commit::Kept,
            (false, None) => Commit::RunNow,
            (false, Some(_)) => Commit::RunOnly,
        };
        let mut pending = PendingInvocation::begin(&invocations)?;
        if let (true, Some(kept)) = (start.keep, T::kept(&prep.payload)?) {
            pending.add(crate::store::KEPT_FILE, &kept)?;
        }
        let store = pending.commit(&record, &tool.text, how)?;
        let mut lease = prep.lease;
        if let (true, Some(lease)) = (start.keep, &mut lease) {
            // After the commit: a crash in between loses the snapshots of a
            // kept call (its dispatch is refused), never leaks a durable
            // reservation that no call names. Persisting syncs the data
            // directory, which holds the snapshots' names.
            lease.persist()?;
        }
        let mut body = json!({
            "descriptor_sha256": record.descriptor_sha256,
            "tool": record.descriptor.tool,
            "manifest_sha256": record.descriptor.manifest_sha256,
            "transport": T::NAME,
            "owner_pid": std::process::id(),
        });
        if let Value::Object(map) = &mut body {
            map.extend(prep.journal);
            if let Some(bundle) = &record.descriptor.policy_bundle {
                map.insert("policy_bundle".into(), json!(bundle));
            }
        }
        // Synced for a kept call; deferred within a call run at once (the
        // worker's start, or the answer's end, makes it durable).
        let append = if start.keep { Runtime::record } else { Runtime::note };
        append(self, kind::INVOCATION_PREPARED, Some(start.invocation_id), body)?;
        tracing::debug!(
            descriptor_sha256 = %record.descriptor_sha256,
            inputs = record.inputs.len(),
            kept = start.keep,
            duration_ms = elapsed_ms(began),
            "prepared"
        );
        Ok(PreparedCall { record, store, spec: tool.spec.clone(), staged: None, lease, payload: prep.payload })
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
        // A call that waits for an approval has not settled (retention
        // keeps it until it is dispatched, denied or expired).
        let waits =
            matches!(&result, Ok(e) if e.error.as_ref().is_some_and(|e| e.code == ReasonCode::ApprovalRequired));
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
        if let (false, Some(id)) = (waits, id) {
            self.mark_settled(id);
        }
        match (end, result) {
            (Ok(()), result) => result,
            (Err(journal), Err(_)) => Err(journal),
            // The call ran: its answer (and the files it lists) stands, with
            // the journal's failure as its error.
            (Err(journal), Ok(envelope)) => Ok(answer::with_error(envelope, &journal)),
        }
    }

    /// Keeps a refused call's id from being used again: the journal has
    /// seen it. (A prepared call's directory already reserves its id.)
    pub(crate) fn reserve_refused_id(&self, id: &str, refusal: &Refusal) {
        if refusal.code == ReasonCode::InvocationDuplicate {
            return;
        }
        if let Ok(invocations) = self.invocations() {
            if let Ok(dir) = invocations.create_subdir(id) {
                let _ = dir.write_new_file(
                    crate::retention::REFUSED,
                    json!({ "code": refusal.code.as_str() }).to_string().as_bytes(),
                );
            }
        }
    }

    /// Runs `call` as one whole call of invocation `id` by `principal` and
    /// answers with its envelope, whatever happened: the principal is
    /// registered for the call's records, how it ended is journaled
    /// ([`Runtime::journal_end`]), a refusal becomes its envelope (naming
    /// the invocation and `tool`), and every answer gets its duration and
    /// its journal evidence ([`answer::sealed`]).
    pub(crate) fn as_call(
        &self,
        id: &str,
        principal: &str,
        tool: Option<&str>,
        call: impl FnOnce() -> Result<Envelope, Refusal>,
    ) -> Envelope {
        let started = std::time::Instant::now();
        // Warm sandboxes are built again once this call is answered.
        let _busy = self.warm_pool().map(airlock_sandbox::WarmPool::busy);
        let caller = self.enter_call(id, principal);
        self.sweep_if_due();
        let valid = id::check_invocation_id(id).ok().map(|()| id);
        let result = self.settle_cancelled(valid, call());
        let envelope = self.journal_end(valid, result).unwrap_or_else(|refusal| Envelope {
            invocation_id: Some(id.to_owned()),
            tool: tool.map(str::to_owned),
            ..Envelope::from_refusal(&refusal)
        });
        // Before the answer, so a caller that reads it finds its records
        // off the host too (best effort: a cluster that cannot be reached
        // gets them after a later call, or `airlock journal push`).
        self.mirror_journal();
        let journal = airlock_core::JournalEvidence { key_id: self.journal().key().key_id() };
        answer::sealed(envelope, principal, journal, caller.records(), started)
    }
}

#[cfg(test)]
mod tests;
