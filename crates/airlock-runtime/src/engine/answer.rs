//! Step 5: the answer of a call, built the same way for every shape — a
//! call that finished, one that waits for an approval, and a failure.

use super::prepared::PreparedCall;
use super::verdict::{exit_number, limits_evidence};
use airlock_core::{stream_tail, Envelope, ErrorBody, Evidence, JournalEvidence, ReasonCode, RecordRange, Refusal};
use airlock_sandbox::WorkerOutcome;
use serde_json::Value;

/// The base of a finished call's answer: `ok`, its id, tool and evidence
/// (descriptor digest, the policies that permitted it, its principal) and,
/// when a worker ran, its exit code, the tails of its standard output and
/// error, and how its resources were bounded (`broker`: how an isolated
/// submission's broker was bounded). A shape whose stdout is the output
/// file clears `stdout_tail`.
pub(crate) fn finished<P>(
    prepared: &PreparedCall<P>,
    policy_ids: &[String],
    worker: Option<(&WorkerOutcome, Option<&'static str>)>,
) -> Envelope {
    Envelope {
        invocation_id: Some(prepared.invocation_id().to_owned()),
        tool: Some(prepared.descriptor().tool.clone()),
        stage: Some("finished"),
        exit_code: worker.map(|(outcome, _)| exit_number(outcome.exit)),
        stdout_tail: worker.and_then(|(outcome, _)| stream_tail(&outcome.stdout)),
        stderr_tail: worker.and_then(|(outcome, _)| stream_tail(&outcome.stderr)),
        evidence: Some(Evidence {
            descriptor_sha256: Some(prepared.digest().to_owned()),
            policy_ids: policy_ids.to_vec(),
            principal: Some(prepared.principal().to_owned()),
            limits: worker.map(|(outcome, broker)| limits_evidence(&outcome.limits, broker)),
            ..Evidence::default()
        }),
        ..Envelope::ok()
    }
}

/// `base` failed with `refusal`; `content` is what was parsed all the same
/// (an upstream's result, a failed tool's output that parsed), never the
/// raw streams: their tails are `base`'s.
pub(crate) fn failed(base: &Envelope, refusal: Refusal, content: Option<Value>) -> Envelope {
    Envelope {
        status: refusal.code.status(),
        error: Some(ErrorBody { code: refusal.code, message: refusal.message }),
        content,
        ..base.clone()
    }
}

/// `envelope` with `refusal` as its status and error, all else kept (a call
/// that ran and whose end could not be journaled still lists its files).
pub(crate) fn with_error(envelope: Envelope, refusal: &Refusal) -> Envelope {
    let refused = Envelope::from_refusal(refusal);
    Envelope { status: refused.status, error: refused.error, ..envelope }
}

/// The answer for a call that stops after prepare until an approver
/// approves it. It names the call (invocation id and descriptor digest) and
/// when it expires, and gives the caller no command to run: only an
/// approver's key can approve it.
pub(crate) fn approval_required<P>(prepared: &PreparedCall<P>) -> Envelope {
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

/// The last touch of every answer of a call: how long it took, who made it
/// (kept if the shape named it), the journal's key and the seq range of the
/// call's records (DESIGN.md §3, "Envelope").
pub(crate) fn sealed(
    mut envelope: Envelope,
    principal: &str,
    journal: JournalEvidence,
    records: Option<RecordRange>,
    began: std::time::Instant,
) -> Envelope {
    envelope.duration_ms = Some(super::elapsed_ms(began));
    let evidence = envelope.evidence.get_or_insert_with(Evidence::default);
    evidence.principal.get_or_insert_with(|| principal.to_owned());
    evidence.journal = Some(journal);
    evidence.records = records;
    envelope
}
