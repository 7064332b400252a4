//! `airlock attest ID`: an in-toto Statement v1 about what one invocation
//! published, in a DSSE envelope signed with the journal key, so that
//! standard supply-chain tooling can check it.

use crate::failure;
use crate::Runtime;
use airlock_core::{canonical_json, ReasonCode, Refusal};
use airlock_journal::dsse::{self, DsseEnvelope};
use airlock_journal::kind;
use serde_json::{json, Value};

/// DSSE payload type of an in-toto statement.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The statement's predicate type.
pub const PREDICATE_TYPE: &str = "https://airlock.invalid/attestation/invocation/v1";

impl Runtime {
    /// Builds and signs the statement for invocation `id`. Refused
    /// (`attest.nothing_published`) unless the journal records a successful
    /// finish with at least one created file.
    pub fn attest(&self, id: &str) -> Result<DsseEnvelope, Refusal> {
        crate::id::check_invocation_id(id)?;
        let mine = self
            .journal()
            .records_where(|r| r.invocation_id.as_deref() == Some(id))
            .map_err(failure::journal_refusal)?;
        let finished = mine.iter().rev().find(|r| r.kind == kind::INVOCATION_FINISHED);
        let prepared = mine.iter().find(|r| r.kind == kind::INVOCATION_PREPARED);
        let (Some(finished), Some(prepared)) = (finished, prepared) else {
            return Err(Refusal::new(
                ReasonCode::AttestNothing,
                format!("the journal records no finished run of {id:?}"),
            ));
        };
        let files = finished.body["created_files"].as_array().cloned().unwrap_or_default();
        if finished.body["status"] != "ok" || files.is_empty() {
            return Err(Refusal::new(ReasonCode::AttestNothing, format!("{id} published no file")));
        }
        let subjects: Vec<Value> = files
            .iter()
            .map(|f| {
                let hex = f["sha256"].as_str().unwrap_or_default().trim_start_matches("sha256:");
                json!({ "name": f["path"], "digest": { "sha256": hex } })
            })
            .collect();
        let authorized = mine.iter().find(|r| r.kind == kind::INVOCATION_AUTHORIZED);
        let evidence = mine.iter().find(|r| r.kind == kind::EVIDENCE_CAPTURED).map(|r| r.body.clone());
        let mut statement = json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": subjects,
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "invocation_id": id,
                "principal": prepared.body[crate::caller::PRINCIPAL_FIELD],
                "tool": prepared.body["tool"],
                "manifest_sha256": prepared.body["manifest_sha256"],
                "descriptor_sha256": prepared.body["descriptor_sha256"],
                "reads": prepared.body["reads"],
                "policy_ids": authorized.map(|a| a.body["policy_ids"].clone()),
                "journal": { "seq": finished.seq, "key_id": finished.key_id, "time": finished.time },
            },
        });
        if let Some(evidence) = evidence {
            // The raw streams `[tool.evidence]` kept, by hash.
            statement["predicate"]["evidence"] = evidence;
        }
        Ok(dsse::sign(self.journal().key(), IN_TOTO_PAYLOAD_TYPE, &canonical_json(&statement)))
    }
}
