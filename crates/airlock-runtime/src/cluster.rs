//! The runtime's side of scale-out (issue 23): serving calls as a worker
//! of the cluster on one of this host's tiers, and an operator's cluster
//! commands. The edge's side, a call of the `cluster` tier, is part of the
//! exec shape's run step (`transport/exec/remote.rs`).

use crate::Runtime;
use airlock_cluster::worker::{Event, Served, WorkerSettings};
use airlock_cluster::Role;
use airlock_core::{ReasonCode, Refusal, Tier};
use airlock_journal::PublicKey;
use std::os::unix::fs::DirBuilderExt as _;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// What `airlock worker` was asked to serve; each `None` falls back on
/// `[cluster]` (and the tier on `[sandbox] tier`).
#[derive(Debug, Clone, Default)]
pub struct WorkerRequest {
    /// The cluster's NATS URL(s).
    pub nats: Option<String>,
    /// The local tier calls run on.
    pub tier: Option<Tier>,
    /// The pool served.
    pub pool: Option<String>,
}

impl Runtime {
    /// The cluster's URL: `asked`, else `[cluster] nats`.
    pub fn cluster_url(&self, asked: Option<&str>) -> Result<String, Refusal> {
        asked.map(str::to_owned).or_else(|| self.config().cluster.as_ref().map(|c| c.nats.clone())).ok_or_else(|| {
            Refusal::new(
                ReasonCode::ConfigInvalid,
                "no cluster to reach: give --nats URL or a [cluster] section with nats = \"nats://…\"",
            )
        })
    }

    /// Serves calls of the cluster on a tier of this host until `stop` is
    /// set, signing receipts with this airlock's key.
    pub fn serve_cluster_worker(
        &self,
        request: &WorkerRequest,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<Served, Refusal> {
        let url = self.cluster_url(request.nats.as_deref())?;
        let tier = request.tier.unwrap_or(self.config().tier);
        if tier == Tier::Cluster {
            return Err(Refusal::new(
                ReasonCode::SandboxTierUnsupported,
                "a worker runs calls on a tier of its own host: give --tier native, gvisor, docker or microvm",
            ));
        }
        if !self.config().tiers.allowed.contains(&tier) {
            return Err(Refusal::new(
                ReasonCode::SandboxTierNotAllowed,
                format!("tier {:?} is not in this host's [sandbox] tiers", tier.as_str()),
            ));
        }
        let local = self.worker_tier(&self.config().tiers.descriptor_name(tier))?;
        let cluster = self.config().cluster.as_ref();
        let pool = request.pool.clone().or_else(|| cluster.map(|c| c.pool.clone())).unwrap_or_else(|| "default".into());
        let ack_wait = Duration::from_secs(cluster.map_or(10, |c| c.ack_wait_seconds));
        let scratch = self.config().state_dir.join("cluster").join("calls");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&scratch)
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("creating {}: {e}", scratch.display())))?;
        let settings = WorkerSettings {
            url,
            tier: tier.as_str().to_owned(),
            pool,
            ack_wait,
            host: rustix::system::uname().nodename().to_string_lossy().into_owned(),
            scratch,
            image: self.image(),
        };
        airlock_cluster::worker::serve(&settings, self.journal().key(), &local, stop, on_event).map_err(Refusal::from)
    }

    /// Creates the cluster's streams and buckets and pins this airlock's key
    /// as an edge's; returns that key.
    pub fn cluster_init(&self, nats: Option<&str>) -> Result<PublicKey, Refusal> {
        let url = self.cluster_url(nats)?;
        let replicas = self.config().cluster.as_ref().map_or(1, |c| c.replicas);
        let key = self.journal().key().public_key();
        airlock_cluster::admin::init(&url, replicas, &key)?;
        Ok(key)
    }

    /// Pins `key` (`ed25519:<hex>`) for `role` on the cluster.
    pub fn cluster_trust(&self, nats: Option<&str>, role: Role, key: &str) -> Result<PublicKey, Refusal> {
        let url = self.cluster_url(nats)?;
        let key = PublicKey::parse(key).map_err(|e| Refusal::new(ReasonCode::ConfigInvalid, e.to_string()))?;
        airlock_cluster::admin::trust(&url, role, &key)?;
        Ok(key)
    }

    /// What every worker of the cluster last reported.
    pub fn cluster_workers(&self, nats: Option<&str>) -> Result<Vec<serde_json::Value>, Refusal> {
        let url = self.cluster_url(nats)?;
        Ok(airlock_cluster::admin::workers(&url)?)
    }
}
