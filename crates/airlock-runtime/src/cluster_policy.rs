//! The cluster's Cedar bundle as this edge's policy (`[cluster]
//! policy_bundle = true`): fetched from the cluster at the first call of
//! this process and kept for its life (a CLI call is one process; a
//! long-lived `airlock mcp` is restarted to take a new revision), checked
//! against the tools here like local policy files, and recorded by
//! revision and hash in each call's descriptor. Fail closed: a cluster
//! that cannot be reached, or holds no bundle, refuses every call.

use crate::engine::CedarPolicy;
use crate::Runtime;
use airlock_core::{PolicyBundle, ReasonCode, Refusal};

/// The bundle in force, compiled.
#[derive(Debug)]
pub(crate) struct ClusterPolicy {
    /// The policy set, validated against this host's tools.
    pub cedar: CedarPolicy,
    /// Its revision and hash.
    pub bundle: PolicyBundle,
}

impl Runtime {
    /// The cluster's bundle, when this edge authorizes with it (fetched
    /// once).
    pub(crate) fn cluster_policy(&self) -> Result<Option<&ClusterPolicy>, Refusal> {
        if !self.config().cluster.as_ref().is_some_and(|c| c.policy_bundle) {
            return Ok(None);
        }
        self.cluster_policy.get_or_init(|| self.fetch_cluster_policy()).as_ref().map(Some).map_err(Clone::clone)
    }

    /// The bundle a call prepared now is authorized under (for its
    /// descriptor).
    pub(crate) fn policy_bundle(&self) -> Result<Option<PolicyBundle>, Refusal> {
        Ok(self.cluster_policy()?.map(|p| p.bundle.clone()))
    }

    /// Refuses a call whose descriptor names another bundle than the one
    /// in force (prepared under another revision, dispatched now).
    pub(crate) fn check_policy_bundle(&self, prepared_under: Option<&PolicyBundle>) -> Result<(), Refusal> {
        let now = self.policy_bundle()?;
        if now.as_ref() == prepared_under {
            return Ok(());
        }
        let name = |b: Option<&PolicyBundle>| match b {
            Some(b) => format!("revision {} ({})", b.revision, b.sha256),
            None => "no bundle".to_owned(),
        };
        Err(Refusal::new(
            ReasonCode::PolicyChanged,
            format!(
                "the call was prepared under the cluster's policy bundle {}, and {} is in force now; nothing ran. \
                 Prepare it again",
                name(prepared_under),
                name(now.as_ref())
            ),
        ))
    }

    fn fetch_cluster_policy(&self) -> Result<ClusterPolicy, Refusal> {
        let at = self.cluster_endpoint(None)?;
        let bundle = airlock_cluster::policy::fetch(&at)?.ok_or_else(|| {
            Refusal::new(
                ReasonCode::PolicyInvalid,
                "[cluster] policy_bundle = true, but the cluster holds no policy bundle: an operator pushes one with \
                 `airlock cluster policy push FILE…`",
            )
        })?;
        let name = format!("cluster policy bundle revision {}", bundle.revision);
        let cedar = crate::policy_files::compile(self.authority(), self.config(), vec![(name, bundle.text)])?;
        tracing::debug!(revision = bundle.revision, sha256 = %bundle.sha256, "cluster policy bundle loaded");
        Ok(ClusterPolicy { cedar, bundle: PolicyBundle { revision: bundle.revision, sha256: bundle.sha256 } })
    }

    /// Checks `files` as this host's policy files would be (each a control
    /// file, the set valid against the tools here), then stores them as the
    /// cluster's bundle, each after a `// file:` line; its revision and hash.
    pub fn push_cluster_policy(
        &self,
        nats: Option<&str>,
        files: &[std::path::PathBuf],
    ) -> Result<PolicyBundle, Refusal> {
        let sources = crate::policy_files::read_all(self.authority(), files, |path| path)?;
        // An invalid bundle is refused here, not at every edge.
        crate::policy_files::compile(self.authority(), self.config(), sources.clone())?;
        let text: String = sources.iter().map(|(name, text)| format!("// file: {name}\n{text}\n")).collect();
        let at = self.cluster_endpoint(nats)?;
        let pushed = airlock_cluster::policy::push(&at, &text)?;
        Ok(PolicyBundle { revision: pushed.revision, sha256: pushed.sha256 })
    }

    /// The bundle the cluster holds now (revision, hash, bytes), if any.
    pub fn show_cluster_policy(&self, nats: Option<&str>) -> Result<Option<(PolicyBundle, usize)>, Refusal> {
        let at = self.cluster_endpoint(nats)?;
        Ok(airlock_cluster::policy::fetch(&at)?
            .map(|b| (PolicyBundle { revision: b.revision, sha256: b.sha256 }, b.text.len())))
    }
}
