//! Dispatch of a call kept by `airlock prepare`: it runs once, from the
//! snapshots taken when it was prepared, after its approval (if it needs
//! one) is verified and used.

use super::ExecPayload;
use crate::engine::{PreparedCall, Transport};
use crate::{ceilings, id, ledger, Runtime};
use airlock_core::{Envelope, ReasonCode, Refusal, RelPath};
use airlock_hostfs::HeldOutput;

impl Runtime {
    /// Runs a prepared (and, if it needs it, approved) call once, from the
    /// snapshots taken when it was prepared, and answers with its envelope
    /// (a refusal included).
    pub fn dispatch(&self, id: &str) -> Envelope {
        // The call stays the preparer's: its records and Cedar name the
        // principal that asked for it, whoever dispatches it.
        let valid = id::check_invocation_id(id).is_ok();
        let preparer = valid.then(|| self.prepared_record(id).ok()).flatten().map(|r| r.principal);
        let principal = self.principal_of(preparer.as_deref()).to_owned();
        let span = tracing::info_span!("dispatch", invocation_id = id);
        let _in_call = span.enter();
        self.as_call(id, &principal, None, || self.dispatch_kept(id))
    }

    fn dispatch_kept(&self, id: &str) -> Result<Envelope, Refusal> {
        ledger::refuse_if_unconfirmed(self.state(), self.journal())?;
        // A denied or expired call is refused before its snapshots are read.
        self.check_waiting(id)?;
        let kept = self.open_kept(id)?;
        if let Some(session) = &kept.record.session {
            // A session's start runs on a terminal its holder owns, and an
            // interaction only within its session: neither runs one-shot.
            let how = if session == id {
                "a session's start: the session holder starts it (`airlock dispatch ID` on the command line, \
                 session_start with `dispatch` over MCP)"
            } else {
                "an interaction of a live session: send the same command and argument in that session again"
            };
            return Err(Refusal::new(ReasonCode::ManifestUnsupported, format!("{id} is {how}")));
        }
        match kept.record.descriptor.transport.as_str() {
            crate::transport::source::SOURCE_TRANSPORT => {
                let prepared = self.load_kept_source(kept)?;
                self.dispatch_approved::<crate::transport::source::Source<'_>>(prepared)
            }
            crate::transport::isolated::ISOLATED_TRANSPORT => {
                let prepared = self.load_kept_isolated(kept)?;
                self.dispatch_approved::<crate::transport::isolated::Isolated>(prepared)
            }
            _ => {
                let mut prepared = self.load_exec(kept)?;
                prepared.admit_if_unstaged(self.pool())?;
                let approved = self.take_dispatch(&prepared)?;
                // Dispatched once: from here the snapshots' reservation is this
                // process's, released (data first) when the call is done.
                prepared.adopt_lease(self.pool())?;
                let call = self.authorize(prepared, approved)?;
                super::Exec::execute(self, call)
            }
        }
    }

    /// Dispatches a kept call of a shape that stages nothing: approval
    /// taken, marked dispatched, authorized, run.
    fn dispatch_approved<T: Transport>(&self, prepared: PreparedCall<T::Payload>) -> Result<Envelope, Refusal> {
        let approved = self.take_dispatch(&prepared)?;
        let call = self.authorize(prepared, approved)?;
        T::execute(self, call)
    }

    /// Verifies and consumes the call's approval if it needs one, then
    /// marks it dispatched (once); whether it was approved.
    pub(crate) fn take_dispatch<P>(&self, prepared: &PreparedCall<P>) -> Result<bool, Refusal> {
        let d = prepared.descriptor();
        let approved = crate::approval::needs_approval(&d.risk_tier, d.human_approval);
        // The approval is verified and taken first, so a dispatch refused for
        // want of one leaves the prepared call (and its snapshots)
        // dispatchable later.
        if approved {
            self.consume_approval(prepared.invocation_id(), prepared.digest())?;
        }
        prepared.mark_dispatched().map_err(|r| {
            if prepared.store().contains(crate::approval::DENIED) {
                crate::approval::denied(prepared.invocation_id())
            } else {
                r
            }
        })?;
        Ok(approved)
    }
}

/// A kept call as its directory holds it: not dispatched yet.
pub(crate) struct KeptCall {
    /// `STATE/invocations/ID`.
    pub store: airlock_hostfs::PrivateDir,
    /// Its record.
    pub record: crate::store::PreparedRecord,
    /// The exact manifest it was prepared from (checked against the
    /// descriptor's digest).
    pub manifest: airlock_core::manifest::Manifest,
}

impl Runtime {
    /// Loads a call kept by `airlock prepare`, for dispatch: the exact
    /// manifest bytes it was prepared from (which must still hash to the
    /// descriptor's), every snapshot re-hashed against the descriptor, and
    /// the output parent re-held by its recorded identity with the output
    /// still absent. The host files are not read again: what runs is what
    /// was prepared.
    pub fn load_prepared(&self, id: &str) -> Result<PreparedCall<ExecPayload>, Refusal> {
        self.load_exec(self.open_kept(id)?)
    }

    /// The kept call `id`: its directory, record and manifest, refused if it
    /// is unknown, was refused, or was dispatched already.
    pub(crate) fn open_kept(&self, id: &str) -> Result<KeptCall, Refusal> {
        id::check_invocation_id(id)?;
        let store = self.invocations()?.open_subdir(id).map_err(|_| {
            Refusal::new(ReasonCode::InvocationNotFound, format!("no prepared call {id:?} in this state directory"))
        })?;
        if !store.contains(crate::store::PREPARED_FILE) {
            return Err(Refusal::new(ReasonCode::InvocationNotFound, format!("{id} was refused, not prepared")));
        }
        if store.contains(crate::store::DISPATCHED) {
            return Err(Refusal::new(ReasonCode::InvocationDuplicate, format!("{id} has already been dispatched")));
        }
        let record = self.prepared_record(id)?;
        let text = crate::store::kept_manifest_text(&store)?;
        let manifest = airlock_core::manifest::Manifest::parse(&text, &record.manifest_origin)?;
        if manifest.sha256() != record.descriptor.manifest_sha256 {
            return Err(Refusal::new(ReasonCode::InputChanged, "the kept manifest does not match the descriptor"));
        }
        Ok(KeptCall { store, record, manifest })
    }

    /// [`Runtime::load_prepared`] of an opened kept call.
    pub(crate) fn load_exec(&self, kept: KeptCall) -> Result<PreparedCall<ExecPayload>, Refusal> {
        let KeptCall { store, record, manifest } = kept;
        let id = record.invocation_id.as_str();
        // A kept call that stages nothing held no reservation while it
        // waited. (A call run at once has no expiry and released its
        // reservation: it is refused here, never run again.)
        let unstaged = record.expires_at.is_some() && record.inputs.is_empty() && record.output.is_none();
        let staged = if unstaged { None } else { Some(self.pool().data_of(id)?) };
        let inputs = match &staged {
            Some(staged) if !record.inputs.is_empty() => Some(crate::store::staged_inputs(staged)?),
            _ => None,
        };
        for rec in &record.inputs {
            let inputs = inputs.as_ref().ok_or_else(|| Refusal::new(ReasonCode::Internal, "no staged copies"))?;
            let mut f = inputs.open_file(&rec.snapshot)?;
            let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
            let n = std::io::copy(&mut f, &mut hasher)
                .map_err(|e| Refusal::new(ReasonCode::Internal, format!("reading snapshot: {e}")))?;
            let got = format!("sha256:{}", hex::encode(sha2::Digest::finalize(hasher)));
            if n != rec.bytes || got != rec.sha256 {
                return Err(Refusal::new(
                    ReasonCode::InputChanged,
                    format!("the kept snapshot of {:?} no longer matches the descriptor", rec.path),
                ));
            }
        }
        let output = match &record.output {
            None => None,
            Some(out) => {
                let path = RelPath::parse(&out.path)?;
                let expected = (
                    out.parent.dev.parse().map_err(|_| Refusal::new(ReasonCode::Internal, "bad parent dev"))?,
                    out.parent.ino.parse().map_err(|_| Refusal::new(ReasonCode::Internal, "bad parent ino"))?,
                );
                let (ceiling, rel) = self.ceiling_for(&path)?;
                let rel =
                    rel.ok_or_else(|| Refusal::new(ReasonCode::OutputExists, "the output is a ceiling directory"))?;
                let dir = ceilings::open(self.authority(), ceiling, self.protected())?;
                let held = match &record.descriptor.command_boundary.filesystem.create_dirs {
                    Some(dirs) => {
                        HeldOutput::reopen_creating(self.resolver(), &dir, &rel, &path, dirs.len(), expected)?
                    }
                    None => HeldOutput::reopen(self.resolver(), &dir, &rel, &path, expected)?,
                };
                held.ensure_absent()?;
                Some(held)
            }
        };
        let spec = airlock_policy::ToolSpec::from_manifest(&manifest);
        // A kept call never holds an input (its prepare copied every one).
        Ok(PreparedCall::reloaded(
            record,
            store,
            spec,
            staged,
            ExecPayload { manifest, output, held: Vec::new(), memory: Vec::new() },
        ))
    }
}
