//! The cluster's Cedar policy bundle: one text every edge configured with
//! `[cluster] policy_bundle` authorizes with, kept with its revisions in a
//! key-value bucket only the operator may write (NATS permissions, as for
//! the key bucket). An edge records the revision and the bundle's SHA-256
//! in each call's descriptor, so the journal says which policy decided.

use crate::bus::{Bus, Endpoint};
use crate::client::block_on;
use crate::error::ClusterError;

/// Largest bundle (below NATS's default 1 MiB message bound).
pub const MAX_BUNDLE_BYTES: usize = 900 * 1024;

/// One revision of the bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The bucket's revision of it (rises with every push).
    pub revision: u64,
    /// `sha256:` of its bytes.
    pub sha256: String,
    /// The Cedar text.
    pub text: String,
}

/// Stores `text` as the bundle; the revision it became.
pub fn push(at: &Endpoint, text: &str) -> Result<Bundle, ClusterError> {
    if text.len() > MAX_BUNDLE_BYTES {
        return Err(ClusterError::Protocol(format!(
            "a policy bundle of {} bytes is over the bound of {MAX_BUNDLE_BYTES}",
            text.len()
        )));
    }
    let revision =
        block_on(async { Bus::connect(at, "airlock-policy").await?.put_policy(text.as_bytes().to_vec()).await })?;
    Ok(Bundle { revision, sha256: airlock_core::sha256_tagged(text.as_bytes()), text: text.to_owned() })
}

/// The bundle the cluster holds now, if one was pushed.
pub fn fetch(at: &Endpoint) -> Result<Option<Bundle>, ClusterError> {
    let stored = block_on(async { Bus::connect(at, "airlock-policy").await?.policy().await })?;
    stored
        .map(|(revision, bytes)| {
            if bytes.len() > MAX_BUNDLE_BYTES {
                return Err(ClusterError::Protocol(format!(
                    "the policy bundle (revision {revision}) is over the bound"
                )));
            }
            let sha256 = airlock_core::sha256_tagged(&bytes);
            let text = String::from_utf8(bytes)
                .map_err(|_| ClusterError::Protocol(format!("the policy bundle (revision {revision}) is not UTF-8")))?;
            Ok(Bundle { revision, sha256, text })
        })
        .transpose()
}
