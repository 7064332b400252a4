//! Orders and receipts travel as DSSE envelopes signed with Ed25519
//! (airlock's own keys: an edge's journal key, a worker's key); a reader
//! accepts one only under a key pinned for the signer's role.

use crate::error::ClusterError;
use airlock_journal::{dsse, DsseEnvelope, JournalKey, PublicKey};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Most bytes of an envelope a reader parses (NATS' default message size).
pub const MAX_ENVELOPE_BYTES: usize = 1 << 20;

/// `value` as canonical JSON, signed as `payload_type`; and the payload's
/// `sha256:` digest.
pub fn seal<T: Serialize>(key: &JournalKey, payload_type: &str, value: &T) -> (DsseEnvelope, String) {
    let payload = airlock_core::canonical_json(value);
    let digest = airlock_core::sha256_tagged(&payload);
    (dsse::sign(key, payload_type, &payload), digest)
}

/// An envelope as its bytes arrived, not yet trusted.
pub struct Unverified {
    envelope: DsseEnvelope,
}

impl Unverified {
    /// Parses an envelope of at most [`MAX_ENVELOPE_BYTES`].
    pub fn parse(bytes: &[u8]) -> Result<Unverified, ClusterError> {
        if bytes.len() > MAX_ENVELOPE_BYTES {
            return Err(ClusterError::Protocol(format!("an envelope of {} bytes is over the bound", bytes.len())));
        }
        let envelope =
            serde_json::from_slice(bytes).map_err(|e| ClusterError::Protocol(format!("not a DSSE envelope: {e}")))?;
        Ok(Unverified { envelope })
    }

    /// The key id its first signature names (which key to look up).
    pub fn key_id(&self) -> Result<&str, ClusterError> {
        match self.envelope.signatures.as_slice() {
            [one] => Ok(&one.keyid),
            _ => Err(ClusterError::Untrusted("an envelope must carry exactly one signature".into())),
        }
    }

    /// Verifies the signature under `key` and the payload type, then parses
    /// the payload; returns it with its `sha256:` digest and the envelope.
    pub fn open<T: DeserializeOwned>(
        self,
        key: &PublicKey,
        payload_type: &str,
    ) -> Result<(T, String, DsseEnvelope), ClusterError> {
        if self.envelope.payload_type != payload_type {
            return Err(ClusterError::Protocol(format!(
                "payload type {:?}, expected {payload_type:?}",
                self.envelope.payload_type
            )));
        }
        let payload = dsse::verify(&self.envelope, key).map_err(|e| ClusterError::Untrusted(e.to_string()))?;
        let value = serde_json::from_slice(&payload)
            .map_err(|e| ClusterError::Protocol(format!("a signed {payload_type} that does not parse: {e}")))?;
        Ok((value, airlock_core::sha256_tagged(&payload), self.envelope))
    }
}
