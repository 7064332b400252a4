//! `[cluster]`: where this airlock sends calls of the `cluster` tier (issue
//! 23), and which workers they are for.

use serde::Deserialize;

use crate::reason::{ReasonCode, Refusal};

/// `[cluster]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The cluster's NATS URL(s), comma-separated (`nats` key).
    pub nats: String,
    /// The worker tier calls are for (default `native`).
    pub tier: String,
    /// The pool of workers calls are for (default `default`).
    pub pool: String,
    /// Seconds a call may wait for a free worker on top of its own timeout
    /// (default 30, at most 3600).
    pub queue_seconds: u64,
    /// Seconds a worker may hold a call without a sign of life before it is
    /// given to another (default 10, at least 1).
    pub ack_wait_seconds: u64,
    /// Copies of each stream and bucket `airlock cluster init` makes
    /// (default 1; 3 on a cluster of three).
    pub replicas: usize,
    /// What of this airlock's journal goes to the cluster's journal stream
    /// after each call (default: each record's hash).
    pub journal: JournalMirror,
}

/// `[cluster] journal`: what of the journal leaves the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JournalMirror {
    /// Each record's line hash, seq and kind.
    #[default]
    Hashes,
    /// Each whole record line.
    Records,
    /// Nothing.
    Off,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCluster {
    nats: String,
    tier: Option<String>,
    pool: Option<String>,
    queue_seconds: Option<u64>,
    ack_wait_seconds: Option<u64>,
    replicas: Option<usize>,
    #[serde(default)]
    journal: JournalMirror,
}

/// Longest tier or pool name.
const MAX_NAME: usize = 64;

impl RawCluster {
    pub(crate) fn check(self) -> Result<ClusterConfig, Refusal> {
        let bad = |msg: String| Refusal::new(ReasonCode::ConfigInvalid, format!("[cluster] {msg}"));
        let token = |key: &str, v: String| {
            if v.is_empty()
                || v.len() > MAX_NAME
                || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                Err(bad(format!("{key} = {v:?} must be 1 to {MAX_NAME} ASCII letters, digits, '-' or '_'")))
            } else {
                Ok(v)
            }
        };
        if self.nats.trim().is_empty() || self.nats.split(',').any(|u| !u.trim().starts_with("nats://")) {
            return Err(bad(format!("nats = {:?} must be nats:// URLs, comma-separated", self.nats)));
        }
        let queue_seconds = self.queue_seconds.unwrap_or(30);
        if !(1..=3600).contains(&queue_seconds) {
            return Err(bad(format!("queue_seconds = {queue_seconds} must be 1 to 3600")));
        }
        let ack_wait_seconds = self.ack_wait_seconds.unwrap_or(10);
        if !(1..=3600).contains(&ack_wait_seconds) {
            return Err(bad(format!("ack_wait_seconds = {ack_wait_seconds} must be 1 to 3600")));
        }
        let replicas = self.replicas.unwrap_or(1);
        if !(1..=5).contains(&replicas) {
            return Err(bad(format!("replicas = {replicas} must be 1 to 5")));
        }
        Ok(ClusterConfig {
            nats: self.nats,
            tier: token("tier", self.tier.unwrap_or_else(|| "native".into()))?,
            pool: token("pool", self.pool.unwrap_or_else(|| "default".into()))?,
            queue_seconds,
            ack_wait_seconds,
            replicas,
            journal: self.journal,
        })
    }
}
