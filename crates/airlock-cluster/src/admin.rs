//! What an operator does to a cluster from the command line: create its
//! streams and buckets, pin keys, see the workers. Each call connects,
//! does one thing and disconnects.

use crate::bus::{Bus, Endpoint};
use crate::client::block_on;
use crate::error::ClusterError;
use crate::subjects::Role;
use crate::worker::WorkerReport;
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

/// What every worker last reported, newest first. An entry that is not a
/// report (another airlock version, a stray write) is logged and left out.
pub fn workers(at: &Endpoint) -> Result<Vec<WorkerReport>, ClusterError> {
    let entries = block_on(async { Bus::connect(at, "airlock-admin").await?.workers().await })?;
    let mut out: Vec<WorkerReport> = entries
        .into_iter()
        .filter_map(|(entry, bytes)| match serde_json::from_slice(&bytes) {
            Ok(report) => Some(report),
            Err(e) => {
                tracing::warn!(entry = %entry, error = %e, "a worker bucket entry that is not a report");
                None
            }
        })
        .collect();
    out.sort_by_key(|w| std::cmp::Reverse(w.updated_at_ms));
    Ok(out)
}
