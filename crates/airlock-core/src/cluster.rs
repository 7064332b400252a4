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
    /// The NATS user this airlock connects as, with the password in
    /// `password_file` (a control file: the caller's or root's, closed to
    /// group and others, never inside a ceiling); `None`: no credentials.
    pub user: Option<String>,
    /// The file holding `user`'s password (absolute, or relative to the
    /// configuration's directory).
    pub password_file: Option<std::path::PathBuf>,
    /// The file holding this airlock's user NKey seed (`SU…`; a control
    /// file like `password_file`, which it excludes): the server knows the
    /// public key, in the account of this airlock's tenant.
    pub nkey_file: Option<std::path::PathBuf>,
    /// Authorize with the cluster's Cedar policy bundle (`airlock cluster
    /// policy push`) instead of `[policy] files` (default false).
    pub policy_bundle: bool,
    /// `[cluster.worker]`: on a worker host, the most an order may ask
    /// (besides this host's `[limits]`).
    pub worker: WorkerCapSettings,
}

/// `[cluster.worker]`: caps a worker host puts on every order it takes,
/// whatever its pinned edges ask; `None` leaves the order's value (within
/// airlock's hard caps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerCapSettings {
    /// Longest run (1 … 86,400 s).
    pub timeout_seconds: Option<u64>,
    /// Most memory (at least 1 MiB).
    pub memory_bytes: Option<u64>,
    /// Most processes (at least 1).
    pub pids: Option<u64>,
    /// Most CPU seconds (at least 1).
    pub cpu_seconds: Option<u64>,
    /// Largest private `/tmp` (at least 1 MiB).
    pub scratch_bytes: Option<u64>,
}

impl WorkerCapSettings {
    fn check(self) -> Result<WorkerCapSettings, String> {
        let max_timeout = crate::limits::hard::MAX_TIMEOUT_SECONDS;
        let mib = crate::limits::MIB;
        let rules = [
            ("timeout_seconds", self.timeout_seconds, 1, max_timeout),
            ("memory_bytes", self.memory_bytes, mib, u64::MAX),
            ("pids", self.pids, 1, u64::MAX),
            ("cpu_seconds", self.cpu_seconds, 1, u64::MAX),
            ("scratch_bytes", self.scratch_bytes, mib, u64::MAX),
        ];
        for (key, value, min, max) in rules {
            if let Some(v) = value.filter(|v| !(min..=max).contains(v)) {
                return Err(format!("worker.{key} = {v} must be {min} to {max}"));
            }
        }
        Ok(self)
    }
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
    user: Option<String>,
    password_file: Option<String>,
    nkey_file: Option<String>,
    #[serde(default)]
    policy_bundle: bool,
    #[serde(default)]
    worker: WorkerCapSettings,
}

/// Longest tier or pool name.
const MAX_NAME: usize = 64;

impl RawCluster {
    pub(crate) fn check(self, base_dir: &std::path::Path) -> Result<ClusterConfig, Refusal> {
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
        match (&self.user, &self.password_file) {
            (Some(u), Some(_)) if !u.is_empty() && u.len() <= 128 && u.bytes().all(|b| b.is_ascii_graphic()) => {}
            (None, None) => {}
            (Some(_), Some(_)) => return Err(bad("user must be 1 to 128 printable ASCII characters".into())),
            _ => return Err(bad("user and password_file go together".into())),
        }
        if self.nkey_file.is_some() && self.user.is_some() {
            return Err(bad("nkey_file and user/password_file are two ways to connect: give one".into()));
        }
        Ok(ClusterConfig {
            user: self.user,
            password_file: self.password_file.map(|f| base_dir.join(f)),
            nkey_file: self.nkey_file.map(|f| base_dir.join(f)),
            policy_bundle: self.policy_bundle,
            nats: self.nats,
            tier: token("tier", self.tier.unwrap_or_else(|| "native".into()))?,
            pool: token("pool", self.pool.unwrap_or_else(|| "default".into()))?,
            queue_seconds,
            ack_wait_seconds,
            replicas,
            journal: self.journal,
            worker: self.worker.check().map_err(bad)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    fn parse(cluster: &str) -> Result<Config, crate::reason::Refusal> {
        Config::parse(&format!("[cluster]\n{cluster}"), None, Path::new("/base"))
    }

    #[test]
    fn a_cluster_section_is_checked_where_it_is_read() {
        let c = parse("nats = \"nats://a:4222, nats://b:4222\"").unwrap().cluster.unwrap();
        assert_eq!((c.tier.as_str(), c.pool.as_str(), c.queue_seconds, c.replicas), ("native", "default", 30, 1));
        assert!(parse("nats = \"http://a\"").is_err());
        assert!(parse("nats = \"nats://a\"\npool = \"a.b\"").is_err(), "a pool must be one subject token");
        assert!(parse("nats = \"nats://a\"\nqueue_seconds = 0").is_err());
        assert!(parse("nats = \"nats://a\"\nuser = \"edge\"").is_err(), "a user needs its password file");
        assert!(parse("nats = \"nats://a\"\npassword_file = \"p\"").is_err());
        let c = parse("nats = \"nats://a\"\nuser = \"edge\"\npassword_file = \"p\"").unwrap().cluster.unwrap();
        assert_eq!(c.password_file.as_deref(), Some(Path::new("/base/p")));
        assert!(parse("nats = \"nats://a\"\nunknown = 1").is_err());
        let c = parse("nats = \"nats://a\"\nnkey_file = \"edge.nk\"").unwrap().cluster.unwrap();
        assert_eq!(c.nkey_file.as_deref(), Some(Path::new("/base/edge.nk")));
        assert!(parse("nats = \"nats://a\"\npolicy_bundle = true").unwrap().cluster.unwrap().policy_bundle);
        let both = "[policy]\nfiles = [\"p.cedar\"]\n[cluster]\nnats = \"nats://a\"\npolicy_bundle = true";
        assert!(Config::parse(both, None, Path::new("/base")).is_err(), "two sources of policy");
        assert!(parse("nats = \"nats://a\"\nnkey_file = \"e.nk\"\nuser = \"u\"\npassword_file = \"p\"").is_err());
        let c =
            parse("nats = \"nats://a\"\n[cluster.worker]\ntimeout_seconds = 60\npids = 32").unwrap().cluster.unwrap();
        assert_eq!((c.worker.timeout_seconds, c.worker.pids, c.worker.memory_bytes), (Some(60), Some(32), None));
        assert!(parse("nats = \"nats://a\"\n[cluster.worker]\ntimeout_seconds = 0").is_err());
        assert!(parse("nats = \"nats://a\"\n[cluster.worker]\ntimeout_seconds = 86401").is_err());
        assert!(parse("nats = \"nats://a\"\n[cluster.worker]\nmemory_bytes = 1024").is_err());
        assert!(parse("nats = \"nats://a\"\n[cluster.worker]\nthreads = 2").is_err());
        // The tier is allowed only where a cluster is configured.
        assert!(Config::parse("[sandbox]\ntiers = [\"cluster\"]", None, Path::new("/base")).is_err());
        let with = parse("nats = \"nats://a\"").unwrap();
        assert!(with.tiers.allowed.contains(&crate::config::Tier::Cluster));
    }
}
