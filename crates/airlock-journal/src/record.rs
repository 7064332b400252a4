//! One journal record: its fields, its canonical line, and its signature.

use crate::error::JournalError;
use crate::key::JournalKey;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The largest record line, its newline included (64 KiB).
pub const MAX_RECORD_BYTES: usize = 64 * 1024;
/// `prev` of the first record: `sha256:` and 64 zeros.
pub const GENESIS_PREV: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// The largest integer RFC 8785 writes exactly (2^53 − 1); 64-bit values
/// beyond it belong in strings.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// The fields of a record line, in canonical (sorted) order.
pub(crate) const FIELDS: [&str; 8] = ["body", "invocation_id", "key_id", "kind", "prev", "seq", "sig", "time"];

/// Record kinds the runtime writes. A kind is any non-empty string; these
/// are the ones airlock defines.
pub mod kind {
    /// A call was prepared: its descriptor digest is fixed.
    pub const INVOCATION_PREPARED: &str = "InvocationPrepared";
    /// Policy (and approval, if needed) authorized the call.
    pub const INVOCATION_AUTHORIZED: &str = "InvocationAuthorized";
    /// The call was refused before anything ran.
    pub const INVOCATION_REFUSED: &str = "InvocationRefused";
    /// The worker was started.
    pub const WORKER_STARTED: &str = "WorkerStarted";
    /// The worker exited and every descendant was reaped.
    pub const WORKER_FINISHED: &str = "WorkerFinished";
    /// A synced candidate is about to be renamed into the output's parent.
    pub const FILE_PUBLICATION_PREPARED: &str = "FilePublicationPrepared";
    /// The candidate was renamed into place and the directory synced.
    pub const FILE_PUBLICATION_FINISHED: &str = "FilePublicationFinished";
    /// A missing parent directory of an output was made (`create_parents`).
    pub const OUTPUT_DIRECTORY_CREATED: &str = "OutputDirectoryCreated";
    /// The call ended; the body says how.
    pub const INVOCATION_FINISHED: &str = "InvocationFinished";
    /// `airlock invocation recover` finished or discarded an interrupted call.
    pub const RECOVERY_FINISHED: &str = "RecoveryFinished";
    /// An operator resolved something recovery could not decide.
    pub const OPERATOR_RESOLVED: &str = "OperatorResolved";
    /// An operator approved exactly one descriptor digest.
    pub const APPROVAL_GRANTED: &str = "ApprovalGranted";
    /// An approval was used by the one dispatch it allows.
    pub const APPROVAL_CONSUMED: &str = "ApprovalConsumed";
    /// An approver denied a prepared call: it is settled and its room released.
    pub const APPROVAL_DENIED: &str = "ApprovalDenied";
    /// A call's raw stdout and stderr were kept as evidence blobs (by hash).
    pub const EVIDENCE_CAPTURED: &str = "EvidenceCaptured";
    /// A running call was cancelled (a signal, an MCP client's
    /// `notifications/cancelled`, a closed session); the body says whether
    /// the cancel stopped it or came after its publication point.
    pub const INVOCATION_CANCELLED: &str = "InvocationCancelled";
    /// One interaction of a live session (issue 21): its command, argument
    /// digest and how policy and the terminal answered.
    pub const SESSION_INTERACTION: &str = "SessionInteraction";
    /// A torn last line (a writer killed inside its write) was cut off the
    /// live segment; the body says where, how many bytes, their hash and
    /// where they are kept.
    pub const JOURNAL_TAIL_REPAIRED: &str = "JournalTailRepaired";
    /// A cluster call ran twice: a second valid receipt, not the one the
    /// edge used, was found on the results stream (`airlock cluster
    /// reconcile`).
    pub const CLUSTER_RESULT_DUPLICATED: &str = "ClusterResultDuplicated";
}

/// One parsed journal record (as [`crate::Journal::records`] returns it).
/// Parsing does not check the signature or the chain: [`crate::verify`]
/// does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Position in the journal, from 1.
    pub seq: u64,
    /// `sha256:<hex>` of the previous line's bytes (without its newline);
    /// [`GENESIS_PREV`] for the first record.
    pub prev: String,
    /// When it was written: RFC 3339, UTC, to the second.
    pub time: String,
    /// What happened (see [`kind`]).
    pub kind: String,
    /// The invocation it belongs to, if any.
    pub invocation_id: Option<String>,
    /// Kind-specific details (a JSON object).
    pub body: Value,
    /// `sha256:<hex>` of the signing public key.
    pub key_id: String,
    /// Base64 (standard) Ed25519 signature over the canonical JSON of the
    /// record without `sig`.
    pub sig: String,
}

/// RFC 8785 canonical JSON of `value`.
pub(crate) fn canonical(value: &Value) -> Result<Vec<u8>, String> {
    serde_json_canonicalizer::to_vec(value).map_err(|e| format!("cannot canonicalize: {e}"))
}

/// `sha256:<hex>` of `line`.
pub(crate) fn line_hash(line: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(line)))
}

/// Refuses numbers RFC 8785 would not write back exactly.
fn check_numbers(value: &Value, at: &mut String) -> Result<(), String> {
    match value {
        Value::Number(n) => {
            let exact = if let Some(u) = n.as_u64() {
                u <= MAX_SAFE_INTEGER
            } else if let Some(i) = n.as_i64() {
                i.unsigned_abs() <= MAX_SAFE_INTEGER
            } else {
                n.as_f64().is_some_and(f64::is_finite)
            };
            if exact {
                Ok(())
            } else {
                Err(format!("number {n} at body{at} is outside ±(2^53−1); write 64-bit values as decimal strings"))
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = at.len();
                at.push_str(&format!("[{i}]"));
                check_numbers(item, at)?;
                at.truncate(len);
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, item) in map {
                let len = at.len();
                at.push_str(&format!(".{k}"));
                check_numbers(item, at)?;
                at.truncate(len);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// What a new record says; [`encode_line`] signs it.
pub(crate) struct Draft<'a> {
    pub seq: u64,
    pub prev: &'a str,
    pub time: &'a str,
    pub kind: &'a str,
    pub invocation_id: Option<&'a str>,
    pub body: Value,
}

/// The signed canonical line for `draft` (without its newline), refused if
/// the record is malformed or the line with its newline exceeds
/// [`MAX_RECORD_BYTES`].
pub(crate) fn encode_line(key: &JournalKey, draft: Draft<'_>) -> Result<Vec<u8>, JournalError> {
    let invalid = |reason: String| JournalError::InvalidRecord { reason };
    if draft.kind.is_empty() {
        return Err(invalid("the kind is empty".into()));
    }
    if !draft.body.is_object() {
        return Err(invalid(format!("the body of a {} record is not a JSON object", draft.kind)));
    }
    check_numbers(&draft.body, &mut String::new()).map_err(invalid)?;
    let mut obj = Map::new();
    obj.insert("seq".into(), Value::from(draft.seq));
    obj.insert("prev".into(), Value::from(draft.prev));
    obj.insert("time".into(), Value::from(draft.time));
    obj.insert("kind".into(), Value::from(draft.kind));
    obj.insert("invocation_id".into(), draft.invocation_id.map_or(Value::Null, Value::from));
    obj.insert("body".into(), draft.body);
    obj.insert("key_id".into(), Value::from(key.key_id()));
    let mut record = Value::Object(obj);
    let unsigned = canonical(&record).map_err(invalid)?;
    let sig = key.sign(&unsigned);
    if let Value::Object(obj) = &mut record {
        obj.insert("sig".into(), Value::from(BASE64.encode(sig.to_bytes())));
    }
    let line = canonical(&record).map_err(invalid)?;
    if line.len() + 1 > MAX_RECORD_BYTES {
        return Err(JournalError::RecordTooLarge {
            kind: draft.kind.to_string(),
            bytes: line.len() + 1,
            max: MAX_RECORD_BYTES,
        });
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::JournalErrorKind;
    use serde_json::json;

    fn draft(body: Value) -> Draft<'static> {
        Draft {
            seq: 1,
            prev: GENESIS_PREV,
            time: "2024-01-01T00:00:00Z",
            kind: kind::INVOCATION_PREPARED,
            invocation_id: Some("inv-1"),
            body,
        }
    }

    #[test]
    fn a_line_is_canonical_and_signed_without_sig() {
        let key = JournalKey::from_seed(&[9u8; 32]);
        let line = encode_line(&key, draft(json!({"z": 1, "a": "é"}))).unwrap();
        let text = std::str::from_utf8(&line).unwrap();
        assert!(text.starts_with(r#"{"body":{"a":"é","z":1},"invocation_id":"inv-1","key_id":"sha256:"#));
        assert!(!text.contains('\n'));
        let mut value: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(canonical(&value).unwrap(), line);
        let keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, FIELDS);
        let sig = BASE64.decode(value["sig"].as_str().unwrap()).unwrap();
        value.as_object_mut().unwrap().remove("sig");
        assert!(key.public_key().verify(&canonical(&value).unwrap(), &sig));
        let record: Record = serde_json::from_slice(&line).unwrap();
        assert_eq!(record.seq, 1);
        assert_eq!(record.prev, GENESIS_PREV);
        assert_eq!(record.key_id, key.key_id());
    }

    #[test]
    fn null_invocation_id_is_written_as_null() {
        let key = JournalKey::from_seed(&[9u8; 32]);
        let mut d = draft(json!({}));
        d.invocation_id = None;
        let line = encode_line(&key, d).unwrap();
        assert!(std::str::from_utf8(&line).unwrap().contains(r#""invocation_id":null"#));
    }

    #[test]
    fn malformed_records_are_refused() {
        let key = JournalKey::from_seed(&[9u8; 32]);
        for body in [json!([]), json!("x"), json!(null), json!({"n": u64::MAX}), json!({"a": [{"n": -(1i64 << 60)}]})] {
            let err = encode_line(&key, draft(body.clone())).unwrap_err();
            assert_eq!(err.kind(), JournalErrorKind::InvalidRecord, "{body}");
        }
        let mut d = draft(json!({}));
        d.kind = "";
        assert_eq!(encode_line(&key, d).unwrap_err().kind(), JournalErrorKind::InvalidRecord);
        let ok = json!({"max": MAX_SAFE_INTEGER, "min": -(MAX_SAFE_INTEGER as i64), "f": 0.5});
        encode_line(&key, draft(ok)).unwrap();
    }

    #[test]
    fn the_line_bound_includes_the_newline() {
        let key = JournalKey::from_seed(&[9u8; 32]);
        let base = encode_line(&key, draft(json!({"p": ""}))).unwrap().len();
        let fits = MAX_RECORD_BYTES - 1 - base;
        let line = encode_line(&key, draft(json!({"p": "x".repeat(fits)}))).unwrap();
        assert_eq!(line.len() + 1, MAX_RECORD_BYTES);
        let err = encode_line(&key, draft(json!({"p": "x".repeat(fits + 1)}))).unwrap_err();
        assert_eq!(err.kind(), JournalErrorKind::RecordTooLarge);
    }
}
