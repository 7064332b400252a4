//! Orders and receipts travel as DSSE envelopes signed with Ed25519
//! (airlock's own keys: an edge's journal key, a worker's key); a reader
//! accepts one only under a key pinned for the signer's role.

use crate::error::ClusterError;
use crate::order::Inline;
use airlock_journal::{dsse, DsseEnvelope, JournalKey, PublicKey};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Most bytes of a message a reader parses (NATS' default message size).
pub const MAX_ENVELOPE_BYTES: usize = 1 << 20;

/// A message on the wire: the signed envelope, and beside it the small
/// blobs it names that travel with it. The blobs are outside the
/// signature (so the envelope stays small enough to journal) and each is
/// checked against the size and hash the signed payload gives it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    envelope: DsseEnvelope,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    inline: Vec<Inline>,
}

/// The bytes of a message carrying `envelope` and `inline`.
pub fn wire(envelope: &DsseEnvelope, inline: Vec<Inline>) -> Result<Vec<u8>, ClusterError> {
    serde_json::to_vec(&Wire { envelope: envelope.clone(), inline }).map_err(|e| ClusterError::Protocol(e.to_string()))
}

/// A verified message.
#[derive(Debug)]
pub struct Opened<T> {
    /// The signed payload.
    pub value: T,
    /// `sha256:` of the payload's bytes.
    pub digest: String,
    /// The envelope, as it came.
    pub envelope: DsseEnvelope,
    /// The small blobs that came with it (not yet checked: each is checked
    /// when it is used, against the payload's hash for it).
    pub inline: Vec<Inline>,
}

/// `value` as canonical JSON, signed as `payload_type`; and the payload's
/// `sha256:` digest.
pub fn seal<T: Serialize>(key: &JournalKey, payload_type: &str, value: &T) -> (DsseEnvelope, String) {
    let payload = airlock_core::canonical_json(value);
    let digest = airlock_core::sha256_tagged(&payload);
    (dsse::sign(key, payload_type, &payload), digest)
}

/// A message as its bytes arrived, not yet trusted.
pub struct Unverified {
    envelope: DsseEnvelope,
    inline: Vec<Inline>,
}

impl Unverified {
    /// Parses a message of at most [`MAX_ENVELOPE_BYTES`].
    pub fn parse(bytes: &[u8]) -> Result<Unverified, ClusterError> {
        if bytes.len() > MAX_ENVELOPE_BYTES {
            return Err(ClusterError::Protocol(format!("a message of {} bytes is over the bound", bytes.len())));
        }
        let wire: Wire =
            serde_json::from_slice(bytes).map_err(|e| ClusterError::Protocol(format!("not a signed message: {e}")))?;
        Ok(Unverified { envelope: wire.envelope, inline: wire.inline })
    }

    /// The key id its first signature names (which key to look up).
    pub fn key_id(&self) -> Result<&str, ClusterError> {
        match self.envelope.signatures.as_slice() {
            [one] => Ok(&one.keyid),
            _ => Err(ClusterError::Untrusted("an envelope must carry exactly one signature".into())),
        }
    }

    /// Verifies the signature under `key` and the payload type, then parses
    /// the payload.
    pub fn open<T: DeserializeOwned>(self, key: &PublicKey, payload_type: &str) -> Result<Opened<T>, ClusterError> {
        if self.envelope.payload_type != payload_type {
            return Err(ClusterError::Protocol(format!(
                "payload type {:?}, expected {payload_type:?}",
                self.envelope.payload_type
            )));
        }
        let payload = dsse::verify(&self.envelope, key).map_err(|e| ClusterError::Untrusted(e.to_string()))?;
        let value = serde_json::from_slice(&payload)
            .map_err(|e| ClusterError::Protocol(format!("a signed {payload_type} that does not parse: {e}")))?;
        Ok(Opened {
            value,
            digest: airlock_core::sha256_tagged(&payload),
            envelope: self.envelope,
            inline: self.inline,
        })
    }
}
