//! Names on the cluster: streams, subjects, buckets and the keys in them.
//! Every name an edge or a worker builds from a tier, a pool or an
//! invocation id goes through [`check_token`], so no caller-chosen text can
//! add a subject level or a wildcard.

use crate::error::ClusterError;

/// The work-queue stream of calls (`airlock.calls.<tier>.<pool>`): each
/// message is taken by one worker and removed once it is acknowledged.
pub const CALLS_STREAM: &str = "AIRLOCK_CALLS";
/// The stream of receipts (`airlock.results.<invocation id>`), kept for a
/// day so an edge (or an operator) can read a result again.
pub const RESULTS_STREAM: &str = "AIRLOCK_RESULTS";
/// The object store of input and output bytes, each named by its SHA-256.
pub const BLOB_BUCKET: &str = "airlock_blobs";
/// The key-value bucket of pinned public keys (`edge.<hex>`,
/// `worker.<hex>`): written by the operator, read by everyone.
pub const KEY_BUCKET: &str = "airlock_keys";
/// The key-value bucket of the Cedar policy bundle every edge of the
/// cluster authorizes with (`[cluster] policy_bundle`): written by the
/// operator, read by edges; it keeps the last revisions.
pub const POLICY_BUCKET: &str = "airlock_policy";
/// The bundle's entry in [`POLICY_BUCKET`].
pub const POLICY_ENTRY: &str = "bundle";
/// The key-value bucket where each worker reports its state.
pub const WORKER_BUCKET: &str = "airlock_workers";

/// Longest tier, pool or id token.
const MAX_TOKEN: usize = 64;

/// Refuses a subject token that is empty, longer than 64 bytes, or holds
/// anything but ASCII letters, digits, `-` and `_` (no `.`, `*`, `>`, no
/// space).
pub fn check_token(what: &str, token: &str) -> Result<(), ClusterError> {
    let ok = !token.is_empty()
        && token.len() <= MAX_TOKEN
        && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ClusterError::Protocol(format!(
            "{what} {token:?} is not a subject token (1 to {MAX_TOKEN} ASCII letters, digits, '-' or '_')"
        )))
    }
}

/// The subject a call for `tier` and `pool` is published on.
pub fn calls_subject(tier: &str, pool: &str) -> String {
    format!("airlock.calls.{tier}.{pool}")
}

/// The subject a worker publishes the receipt of `invocation_id` on.
pub fn results_subject(invocation_id: &str) -> String {
    format!("airlock.results.{invocation_id}")
}

/// The durable consumer the workers of one tier and pool share.
pub fn consumer_name(tier: &str, pool: &str) -> String {
    format!("workers_{tier}_{pool}")
}

/// A blob's object name: `sha256-` and the hex digest.
pub fn blob_name(sha256: &str) -> String {
    format!("sha256-{}", sha256.strip_prefix("sha256:").unwrap_or(sha256))
}

/// Who a pinned key speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An edge: signs orders.
    Edge,
    /// A worker: signs receipts.
    Worker,
}

impl Role {
    /// `edge` or `worker`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Edge => "edge",
            Role::Worker => "worker",
        }
    }

    /// The key bucket's entry for the key with id `key_id`
    /// (`sha256:<hex>`): `edge.<hex>` or `worker.<hex>`.
    pub fn entry(self, key_id: &str) -> Result<String, ClusterError> {
        let hex = key_id
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| ClusterError::Protocol(format!("{key_id:?} is not a key id (sha256: and 64 hex digits)")))?;
        Ok(format!("{}.{hex}", self.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_cannot_add_levels_or_wildcards() {
        for bad in ["", "a.b", "*", ">", "a b", "é", &"x".repeat(65)] {
            assert!(check_token("pool", bad).is_err(), "{bad:?}");
        }
        for good in ["default", "inv-0123abcd", "gpu_pool-2"] {
            check_token("pool", good).unwrap();
        }
    }

    #[test]
    fn key_entries_take_only_key_ids() {
        let id = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(Role::Worker.entry(&id).unwrap(), format!("worker.{}", "ab".repeat(32)));
        for bad in ["ab", "sha256:zz", "sha256:ab.>", "md5:00"] {
            assert!(Role::Edge.entry(bad).is_err(), "{bad}");
        }
    }
}
