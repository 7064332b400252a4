//! What an operator does to a cluster from the command line: create its
//! streams and buckets, pin keys, see the workers. Each call connects,
//! does one thing and disconnects.

use crate::bus::{Bus, Endpoint};
use crate::client::block_on;
use crate::error::ClusterError;
use crate::subjects::Role;
use airlock_journal::PublicKey;

/// Creates the streams and buckets (with `replicas` copies each) and pins
/// `edge` as an edge key.
pub fn init(at: &Endpoint, replicas: usize, edge: &PublicKey) -> Result<(), ClusterError> {
    block_on(async {
        let bus = Bus::connect(at, "airlock-admin").await?;
        bus.ensure(replicas).await?;
        crate::journal_stream::ensure(&bus, replicas.max(1)).await?;
        bus.pin_key(Role::Edge, edge).await
    })
}

/// Pins `key` for `role`.
pub fn trust(at: &Endpoint, role: Role, key: &PublicKey) -> Result<(), ClusterError> {
    block_on(async { Bus::connect(at, "airlock-admin").await?.pin_key(role, key).await })
}

/// What every worker last reported (JSON objects), newest first.
pub fn workers(at: &Endpoint) -> Result<Vec<serde_json::Value>, ClusterError> {
    let entries = block_on(async { Bus::connect(at, "airlock-admin").await?.workers().await })?;
    let mut out: Vec<serde_json::Value> =
        entries.into_iter().filter_map(|(_, bytes)| serde_json::from_slice(&bytes).ok()).collect();
    out.sort_by_key(|w| std::cmp::Reverse(w["updated_at_ms"].as_u64().unwrap_or(0)));
    Ok(out)
}
