//! The signed statement an approval is: which call (descriptor digest and
//! invocation id), who approved it, until when, signed with the approver's
//! own Ed25519 key over its RFC 8785 canonical JSON. It is checked against
//! the keys pinned in `[approval] approvers`, never against anything kept
//! in the state directory.

use airlock_core::approval::Approver;
use airlock_core::{canonical_json, ReasonCode, Refusal};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The statement's `type`: what the signature is over, and its version.
pub const STATEMENT_TYPE: &str = "airlock.approval.v1";
/// Largest approval file read back.
pub const MAX_APPROVAL_BYTES: u64 = 8 * 1024;

/// What an approver signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    /// Always [`STATEMENT_TYPE`].
    #[serde(rename = "type")]
    pub kind: String,
    /// The approved call's descriptor digest (`sha256:…`).
    pub descriptor_sha256: String,
    /// The approved call's invocation id.
    pub invocation_id: String,
    /// The approver's id, as pinned in `[approval] approvers`.
    pub approver: String,
    /// Unix seconds from which the approval no longer serves.
    pub expires_at: u64,
}

/// A statement with its signature, as stored in `STATE/approvals/ID`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedApproval {
    /// What was approved.
    pub statement: Statement,
    /// `sha256:` and the hex SHA-256 of the signing public key.
    pub key_id: String,
    /// Ed25519 over the statement's canonical JSON, lowercase hex.
    pub signature: String,
}

/// A pinned approver with its parsed key.
#[derive(Debug, Clone)]
pub struct PinnedApprover {
    /// The approver's id.
    pub id: String,
    /// The public key.
    pub key: VerifyingKey,
}

impl PinnedApprover {
    /// `sha256:` and the hex SHA-256 of the 32 public key bytes.
    pub fn key_id(&self) -> String {
        key_id(&self.key)
    }
}

/// `sha256:` and the hex SHA-256 of the 32 public key bytes.
pub fn key_id(key: &VerifyingKey) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(key.as_bytes())))
}

/// `ed25519:` and the 32 key bytes in lowercase hex (the form `[approval] approvers` pins).
pub fn public_key_text(key: &VerifyingKey) -> String {
    format!("{}{}", airlock_core::approval::PUBLIC_KEY_PREFIX, hex::encode(key.as_bytes()))
}

/// Parses the pinned approvers' keys (their form was checked with the
/// configuration; here each must also be a valid Ed25519 point).
pub fn pinned(approvers: &[Approver]) -> Result<Vec<PinnedApprover>, Refusal> {
    approvers
        .iter()
        .map(|a| {
            let bad = || {
                Refusal::new(
                    ReasonCode::ConfigInvalid,
                    format!("[approval] approver {:?}: public_key is not a valid Ed25519 key", a.id),
                )
            };
            let hex_part = a.public_key.strip_prefix(airlock_core::approval::PUBLIC_KEY_PREFIX).ok_or_else(bad)?;
            let mut bytes = [0u8; 32];
            hex::decode_to_slice(hex_part, &mut bytes).map_err(|_| bad())?;
            let key = VerifyingKey::from_bytes(&bytes).map_err(|_| bad())?;
            if key.is_weak() {
                return Err(bad());
            }
            Ok(PinnedApprover { id: a.id.clone(), key })
        })
        .collect()
}

impl SignedApproval {
    /// Signs `statement` with `key`.
    pub fn sign(statement: Statement, key: &SigningKey) -> SignedApproval {
        let signature = key.sign(&canonical_json(&statement));
        SignedApproval { key_id: key_id(&key.verifying_key()), signature: hex::encode(signature.to_bytes()), statement }
    }

    /// Parses an approval file's bytes strictly (`approval.invalid` otherwise).
    pub fn parse(bytes: &[u8]) -> Result<SignedApproval, Refusal> {
        if bytes.len() as u64 > MAX_APPROVAL_BYTES {
            return Err(Refusal::new(ReasonCode::ApprovalInvalid, "the approval is larger than 8 KiB"));
        }
        // The statement type carries the version: another airlock's
        // approval is `record.version`, not a malformed one.
        let found = serde_json::from_slice::<serde_json::Value>(bytes)
            .ok()
            .and_then(|v| v.pointer("/statement/type").and_then(serde_json::Value::as_str).map(str::to_owned));
        if let Some(t) = found.filter(|t| t != STATEMENT_TYPE && t.starts_with("airlock.approval.")) {
            return Err(Refusal::new(
                ReasonCode::RecordVersion,
                format!(
                    "the approval is a {t:?} statement; this airlock reads {STATEMENT_TYPE:?} only: it was written \
                     by another airlock — approve the call again with this one"
                ),
            ));
        }
        serde_json::from_slice(bytes)
            .map_err(|e| Refusal::new(ReasonCode::ApprovalInvalid, format!("the approval is malformed: {e}")))
    }

    /// The stored form.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an approval serializes")
    }

    /// Checks, in order: the approver and key are pinned
    /// (`approval.unknown_approver`); the signature verifies
    /// (`approval.invalid`); the statement is for this digest and
    /// invocation (`approval.invalid`); it has not expired at `now`
    /// (`approval.expired`). Returns the approver who signed it.
    pub fn verify<'a>(
        &self,
        pinned: &'a [PinnedApprover],
        digest: &str,
        invocation_id: &str,
        now: u64,
    ) -> Result<&'a PinnedApprover, Refusal> {
        let s = &self.statement;
        let approver = pinned.iter().find(|a| a.id == s.approver).ok_or_else(|| {
            Refusal::new(
                ReasonCode::ApprovalUnknownApprover,
                format!("the approval names approver {:?}, whom [approval] approvers does not pin", s.approver),
            )
        })?;
        if approver.key_id() != self.key_id {
            return Err(Refusal::new(
                ReasonCode::ApprovalUnknownApprover,
                format!(
                    "the approval was signed by key {}, not by the key pinned for approver {:?}",
                    self.key_id, approver.id
                ),
            ));
        }
        let mut sig = [0u8; 64];
        let valid = hex::decode_to_slice(&self.signature, &mut sig).is_ok()
            && approver.key.verify_strict(&canonical_json(s), &Signature::from_bytes(&sig)).is_ok();
        if !valid {
            return Err(Refusal::new(
                ReasonCode::ApprovalInvalid,
                format!("the approval's signature does not verify under the key pinned for {:?}", approver.id),
            ));
        }
        if s.kind != STATEMENT_TYPE || s.descriptor_sha256 != digest || s.invocation_id != invocation_id {
            return Err(Refusal::new(
                ReasonCode::ApprovalInvalid,
                format!(
                    "the approval is for invocation {:?} with digest {}, not for {invocation_id:?} with {digest}",
                    s.invocation_id, s.descriptor_sha256
                ),
            ));
        }
        if now >= s.expires_at {
            return Err(Refusal::new(
                ReasonCode::ApprovalExpired,
                format!(
                    "the approval by {:?} expired at {}",
                    approver.id,
                    airlock_journal::format_rfc3339(s.expires_at)
                ),
            ));
        }
        Ok(approver)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn statement() -> Statement {
        Statement {
            kind: STATEMENT_TYPE.into(),
            descriptor_sha256: format!("sha256:{}", "a".repeat(64)),
            invocation_id: "inv-1".into(),
            approver: "alice".into(),
            expires_at: 1000,
        }
    }

    fn pins() -> Vec<PinnedApprover> {
        vec![PinnedApprover { id: "alice".into(), key: key(1).verifying_key() }]
    }

    #[test]
    fn a_pinned_approvers_signature_verifies_only_for_its_call_and_time() {
        let digest = statement().descriptor_sha256;
        let signed = SignedApproval::sign(statement(), &key(1));
        let again = SignedApproval::parse(&signed.to_bytes()).unwrap();
        assert_eq!(again.verify(&pins(), &digest, "inv-1", 999).unwrap().id, "alice");
        let code = |r: Result<&PinnedApprover, Refusal>| r.unwrap_err().code;
        assert_eq!(code(again.verify(&pins(), &digest, "inv-2", 999)), ReasonCode::ApprovalInvalid);
        assert_eq!(code(again.verify(&pins(), "sha256:00", "inv-1", 999)), ReasonCode::ApprovalInvalid);
        assert_eq!(code(again.verify(&pins(), &digest, "inv-1", 1000)), ReasonCode::ApprovalExpired);
        assert_eq!(code(again.verify(&[], &digest, "inv-1", 999)), ReasonCode::ApprovalUnknownApprover);

        // Another key under alice's name, a changed statement, a changed signature.
        let forged = SignedApproval::sign(statement(), &key(2));
        assert_eq!(code(forged.verify(&pins(), &digest, "inv-1", 999)), ReasonCode::ApprovalUnknownApprover);
        let mut later = signed.clone();
        later.statement.expires_at = 5000;
        assert_eq!(code(later.verify(&pins(), &digest, "inv-1", 999)), ReasonCode::ApprovalInvalid);
        let mut flipped = signed.clone();
        let last = if flipped.signature.ends_with('0') { "1" } else { "0" };
        flipped.signature.replace_range(127.., last);
        assert_eq!(code(flipped.verify(&pins(), &digest, "inv-1", 999)), ReasonCode::ApprovalInvalid);
        assert_eq!(SignedApproval::parse(b"{\"statement\":1}").unwrap_err().code, ReasonCode::ApprovalInvalid);
    }

    #[test]
    fn pinned_keys_must_be_points() {
        let good = Approver { id: "a".into(), public_key: public_key_text(&key(1).verifying_key()) };
        assert_eq!(pinned(std::slice::from_ref(&good)).unwrap()[0].key_id(), key_id(&key(1).verifying_key()));
        let zero = Approver { id: "z".into(), public_key: format!("ed25519:{}", "0".repeat(64)) };
        assert_eq!(pinned(&[zero]).unwrap_err().code, ReasonCode::ConfigInvalid);
    }
}
