//! Exact-call approval of a session's interactions: an interaction that
//! needs one is kept as a prepared call (the session's descriptor with tool
//! `TOOL.COMMAND` and `args.arg`) waiting for an approver, and runs once
//! that exact request is approved and the same command and argument are
//! sent again in the session.

use super::{command_spec, Ended, Session};
use crate::engine::{answer, PreparedCall};
use crate::store::{Commit, PendingInvocation, PreparedRecord};
use crate::Runtime;
use airlock_core::{Envelope, ReasonCode, Refusal};
use airlock_journal::kind;
use serde_json::json;

impl Runtime {
    /// Cedar (or the default policy) on one interaction, after its
    /// exact-call approval when it needs one: the policies that permitted
    /// it, and the approved request it used, if any.
    pub(super) fn authorize_interaction(
        &self,
        session: &mut Session,
        command: &str,
        cmd: &airlock_core::manifest::SessionCommand,
        arg: &str,
    ) -> Result<(Vec<String>, Option<String>), Ended> {
        let mut d = session.prepared.descriptor().clone();
        let spec = command_spec(&d.tool, command);
        // The interaction is a call of its command's action, with the
        // session's boundary (reads, output, tier) as it was bound at start.
        d.tool = spec.name.clone();
        d.args = [("arg".to_owned(), arg.to_owned())].into_iter().collect();
        if let Some(tier) = cmd.risk_tier {
            d.risk_tier = tier.to_string();
        }
        d.human_approval |= cmd.human_approval;
        let approval = if crate::approval::needs_approval(&d.risk_tier, d.human_approval) {
            Some(self.interaction_approval(session, d.clone(), command)?)
        } else {
            None
        };
        let question = crate::engine::Question {
            descriptor: &d,
            spec: &spec,
            principal: session.prepared.principal(),
            invocation_id: session.prepared.invocation_id(),
            approved: approval.is_some(),
        };
        match self.authorizer().and_then(|a| a.authorize(&question)) {
            Ok(decision) => Ok((decision.policy_ids, approval)),
            Err(refusal) => {
                // A policy may still forbid an approved call; its used
                // request ends refused.
                if let Some(request) = &approval {
                    let _request = self.enter_call(request, session.prepared.principal());
                    let _ = self.journal_end(Some(request), Err(refusal.clone()));
                }
                Err(Ended::Refused(refusal))
            }
        }
    }

    /// The exact-call approval of one interaction (descriptor `d`): the
    /// session's request for this digest, verified and used once as
    /// `airlock dispatch` uses a call's (`Ok`: its id); else a new request,
    /// kept as a prepared call is so that `airlock approvals` lists it and
    /// `airlock approve` signs it (`Ended::Waiting`, naming it).
    pub(super) fn interaction_approval(
        &self,
        session: &mut Session,
        d: airlock_core::Descriptor,
        command: &str,
    ) -> Result<String, Ended> {
        let digest = d.digest();
        if let Some(request) = session.requests.get(&digest).cloned() {
            let _request = self.enter_call(&request, session.prepared.principal());
            match self.take_interaction_approval(&request, &digest) {
                Ok(()) => {
                    session.requests.remove(&digest);
                    return Ok(request);
                }
                Err(r) if r.code == ReasonCode::ApprovalRequired => {
                    let record = self.prepared_record(&request).map_err(Ended::Refused)?;
                    return Err(Ended::Waiting(waiting_refusal(command, &record), pending(&record)));
                }
                // Denied, expired or settled: the next send asks anew.
                Err(r) => {
                    session.requests.remove(&digest);
                    return Err(Ended::Refused(r));
                }
            }
        }
        let record = self.ask_approval(session, d, digest.clone()).map_err(Ended::Refused)?;
        session.requests.insert(digest, record.invocation_id.clone());
        Err(Ended::Waiting(waiting_refusal(command, &record), pending(&record)))
    }

    /// Verifies and uses the approval of the kept request `id` (digest
    /// `digest`), as a dispatch does, and marks it dispatched.
    pub(super) fn take_interaction_approval(&self, id: &str, digest: &str) -> Result<(), Refusal> {
        self.check_waiting(id)?;
        let kept = self.open_kept(id)?;
        if kept.record.descriptor_sha256 != digest {
            return Err(Refusal::new(ReasonCode::Internal, format!("{id} holds another interaction")));
        }
        let spec = airlock_policy::ToolSpec::from_manifest(&kept.manifest);
        let request = PreparedCall::reloaded(kept.record, kept.store, spec, None, ());
        self.take_dispatch(&request).map(|_| ())
    }

    /// Keeps an exact-call request for the interaction `d` of `session`,
    /// under a new id naming the session, as a prepared call that stages
    /// nothing (the session holds the snapshots); journals it as a one-shot
    /// call that waits for an approval is journaled.
    pub(super) fn ask_approval(
        &self,
        session: &mut Session,
        d: airlock_core::Descriptor,
        digest: String,
    ) -> Result<PreparedRecord, Refusal> {
        session.requests_made += 1;
        let sid = session.id().to_owned();
        let mut id = format!("{sid}.approval-{}", session.requests_made);
        if crate::id::check_invocation_id(&id).is_err() {
            id = crate::new_invocation_id();
        }
        let principal = session.prepared.principal().to_owned();
        let _request = self.enter_call(&id, &principal);
        let now = airlock_staging::unix_now();
        let record = PreparedRecord {
            format: crate::store::RECORD_FORMAT,
            invocation_id: id.clone(),
            principal,
            manifest_origin: session.prepared.record().manifest_origin.clone(),
            descriptor: d,
            descriptor_sha256: digest,
            inputs: Vec::new(),
            output: None,
            prepared_at: Some(now),
            expires_at: Some(now.saturating_add(self.config().approval.ttl_seconds)),
            session: Some(sid.clone()),
        };
        let text = crate::store::kept_manifest_text(session.prepared.store())?;
        let invocations = self.invocations()?;
        crate::id::check_unused(&invocations, &id)?;
        let store = PendingInvocation::begin(&invocations)?.commit(&record, &text, Commit::Kept)?;
        self.record(
            kind::INVOCATION_PREPARED,
            Some(&id),
            json!({
                "descriptor_sha256": record.descriptor_sha256,
                "tool": record.descriptor.tool,
                "manifest_sha256": record.descriptor.manifest_sha256,
                "transport": record.descriptor.transport,
                "owner_pid": std::process::id(),
                "session": sid,
            }),
        )?;
        let spec = airlock_policy::ToolSpec::from_manifest(session.prepared.manifest());
        let request = PreparedCall::reloaded(record.clone(), store, spec, None, ());
        // Journaled as a one-shot call that waits: not settled.
        self.journal_end(Some(&id), Ok(answer::approval_required(&request)))?;
        Ok(record)
    }

    /// Denies every request of `session` still waiting for an approval
    /// (`approvals deny`, reason: the session ended): no session can use
    /// them any more.
    pub(super) fn withdraw_requests(&self, session: &mut Session) {
        for (_, request) in std::mem::take(&mut session.requests) {
            let _ = self.deny(&request, Some("its session ended"));
        }
    }

    pub(super) fn waiting_interaction(
        &self,
        session: &mut Session,
        command: &str,
        arg: &str,
        refusal: Refusal,
        request: serde_json::Value,
    ) -> Envelope {
        let mut envelope = self.refused_interaction(session, command, arg, refusal);
        if let Some(content) = envelope.content.as_mut() {
            content["approval"] = request;
        }
        envelope
    }
}

/// `approval.required` for an interaction whose request `record` waits.
fn waiting_refusal(command: &str, record: &PreparedRecord) -> Refusal {
    let until =
        record.expires_at.map(|at| format!(" until {}", airlock_journal::format_rfc3339(at))).unwrap_or_default();
    Refusal::new(
        ReasonCode::ApprovalRequired,
        format!(
            "{command} (risk tier {}) needs an exact-call approval: request {} (descriptor {}) waits for an \
             approver{until}; once approved, send the same command with the same argument in this session again. \
             The session is still usable",
            record.descriptor.risk_tier, record.invocation_id, record.descriptor_sha256
        ),
    )
}

/// What an answer says of a request waiting for an approval.
fn pending(record: &PreparedRecord) -> serde_json::Value {
    json!({
        "invocation_id": record.invocation_id,
        "descriptor_sha256": record.descriptor_sha256,
        "expires_at": record.expires_at.map(airlock_journal::format_rfc3339),
    })
}
