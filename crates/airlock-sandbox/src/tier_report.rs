//! What `airlock doctor` and `staging gc` learn from a tier: whether it can
//! run a worker here (and why not), and what a dead airlock left behind.
#![forbid(unsafe_code)]

use serde::Serialize;

/// One tier's state on this host, as `airlock doctor` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TierReport {
    /// The tier's configured name (`native`, `gvisor`, `docker`, …).
    pub tier: String,
    /// The runtime the tier drives was found (a `runsc` binary, a Docker
    /// socket that answers, …).
    pub found: bool,
    /// The runtime's version as it reports it, if found.
    pub version: Option<String>,
    /// How it runs workers here (gVisor's platform, Docker's OCI runtime, …).
    pub platform: Option<String>,
    /// A trivial worker (`true` with no files) started, ran and was cleaned
    /// up here just now.
    pub ready: bool,
    /// Why the tier is not ready (what is missing and how to fix it); `None`
    /// when ready.
    pub why: Option<String>,
}

impl TierReport {
    /// A report of a tier that cannot run here, saying why.
    pub fn not_ready(tier: &str, why: impl Into<String>) -> Self {
        TierReport { tier: tier.to_owned(), why: Some(why.into()), ..TierReport::default() }
    }
}

/// Something a tier started for a call that may still exist after the
/// airlock process that started it died (a container, a sandbox, a private
/// call directory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Leftover {
    /// The tier's own name for it (container id, directory name).
    pub id: String,
    /// The call it belongs to ([`crate::WorkerSpec::call_id`]), when the
    /// tier could tell.
    pub call_id: Option<String>,
}
