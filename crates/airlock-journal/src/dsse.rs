//! DSSE v1 envelopes signed with the journal key: for receipts and other
//! evidence that leaves the state directory.
//!
//! The signature is over the pre-authentication encoding
//! `"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`, where `LEN` is the
//! byte length in ASCII decimal, so the payload type is bound too.

use crate::error::JournalError;
use crate::key::{JournalKey, PublicKey};
use base64::engine::general_purpose::{STANDARD as BASE64, URL_SAFE as BASE64_URL};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// Most signatures [`verify`] looks at in one envelope.
const MAX_SIGNATURES: usize = 16;

/// A DSSE envelope: `{"payloadType", "payload", "signatures": [{"keyid", "sig"}]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DsseEnvelope {
    /// The payload's media type, e.g. `application/vnd.in-toto+json`.
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// The payload, base64 (standard).
    pub payload: String,
    /// One signature per key.
    pub signatures: Vec<DsseSignature>,
}

/// One signature in a [`DsseEnvelope`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DsseSignature {
    /// The signing key's id (`sha256:<hex>` of its public key); may be
    /// empty in envelopes from elsewhere.
    #[serde(default)]
    pub keyid: String,
    /// The Ed25519 signature over the PAE, base64 (standard).
    pub sig: String,
}

/// The DSSE v1 pre-authentication encoding of `payload_type` and `payload`.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {payload_type} {} ", payload_type.len(), payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Signs `payload` as `payload_type` with the journal key.
pub fn sign(key: &JournalKey, payload_type: &str, payload: &[u8]) -> DsseEnvelope {
    let sig = key.sign(&pae(payload_type, payload));
    DsseEnvelope {
        payload_type: payload_type.to_string(),
        payload: BASE64.encode(payload),
        signatures: vec![DsseSignature { keyid: key.key_id(), sig: BASE64.encode(sig.to_bytes()) }],
    }
}

/// Checks that a signature in `env` verifies under `public_key` (one whose
/// `keyid` is the key's id or empty) and returns the payload. Anything else
/// is `journal.signature_invalid`.
pub fn verify(env: &DsseEnvelope, public_key: &PublicKey) -> Result<Vec<u8>, JournalError> {
    let invalid = |reason: String| JournalError::SignatureInvalid { reason };
    let payload = decode(&env.payload).ok_or_else(|| invalid("the DSSE payload is not base64".into()))?;
    if env.signatures.len() > MAX_SIGNATURES {
        return Err(invalid(format!(
            "the envelope has {} signatures, more than {MAX_SIGNATURES}",
            env.signatures.len()
        )));
    }
    let key_id = public_key.key_id();
    let message = pae(&env.payload_type, &payload);
    let verified = env
        .signatures
        .iter()
        .filter(|s| s.keyid.is_empty() || s.keyid == key_id)
        .filter_map(|s| decode(&s.sig))
        .any(|sig| public_key.verify(&message, &sig));
    if verified {
        Ok(payload)
    } else {
        Err(invalid(format!("no signature in the DSSE envelope verifies under key {key_id}")))
    }
}

/// DSSE allows standard or URL-safe base64; both are accepted.
fn decode(text: &str) -> Option<Vec<u8>> {
    BASE64.decode(text).or_else(|_| BASE64_URL.decode(text)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::JournalErrorKind;

    #[test]
    fn pae_matches_the_spec_example() {
        // DSSE protocol.md: PAE("http://example.com/HelloWorld", "hello world").
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
        );
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ");
    }

    #[test]
    fn round_trip_and_tamper() {
        let key = JournalKey::from_seed(&[5u8; 32]);
        let pk = key.public_key();
        let env = sign(&key, "application/vnd.airlock.receipt+json", br#"{"ok":true}"#);
        assert_eq!(env.signatures[0].keyid, key.key_id());
        assert_eq!(verify(&env, &pk).unwrap(), br#"{"ok":true}"#);

        let json = serde_json::to_value(&env).unwrap();
        assert!(json.get("payloadType").is_some());
        let back: DsseEnvelope = serde_json::from_value(json).unwrap();
        assert_eq!(back, env);

        let mut t = env.clone();
        t.payload = BASE64.encode(br#"{"ok":false}"#);
        assert_eq!(verify(&t, &pk).unwrap_err().kind(), JournalErrorKind::SignatureInvalid);

        let mut t = env.clone();
        t.payload_type = "application/json".into();
        assert!(verify(&t, &pk).is_err());

        let mut t = env.clone();
        let mut sig = BASE64.decode(&t.signatures[0].sig).unwrap();
        sig[10] ^= 1;
        t.signatures[0].sig = BASE64.encode(sig);
        assert!(verify(&t, &pk).is_err());

        let mut t = env.clone();
        t.signatures.clear();
        assert!(verify(&t, &pk).is_err());

        let mut t = env.clone();
        t.signatures[0].keyid = "sha256:other".into();
        assert!(verify(&t, &pk).is_err());

        let mut t = env.clone();
        t.signatures[0].keyid.clear();
        assert!(verify(&t, &pk).is_ok());

        let other = JournalKey::from_seed(&[6u8; 32]).public_key();
        assert!(verify(&env, &other).is_err());
    }
}
