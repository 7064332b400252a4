//! airlock-runtime: the pipeline as a library.
//!
//! A [`Runtime`] is opened once per process from a [`Config`] and a
//! [`HostAuthority`]. Every call, whatever its shape, goes through the one
//! engine ([`engine`]): prepare → authorize → run → publish → answer, each
//! step a type built only from the one before. The shapes (exec, MCP,
//! source, Git, isolated) are [`transport`]s of that engine; the
//! [`catalog`] says where a call's tool comes from. [`Runtime::prepare`]
//! stops after step 1 and keeps the call for `airlock dispatch`.
//!
//! ```no_run
//! use airlock_core::Config;
//! use airlock_hostfs::HostAuthority;
//! use airlock_runtime::{new_invocation_id, CallRequest, Runtime};
//! let config = Config::embedded_default(".".as_ref());
//! let runtime = Runtime::open(HostAuthority::ambient(), config, None)?;
//! let call = runtime.prepare(&CallRequest {
//!     tool: "wordcount".into(),
//!     positional: vec!["data/in.txt".into(), "results/out.json".into()],
//!     invocation_id: new_invocation_id(),
//!     ..Default::default()
//! })?;
//! println!("{}", call.digest());
//! # Ok::<(), airlock_core::Refusal>(())
//! ```
#![deny(missing_docs)]

pub mod approval;
mod attest;
mod caller;
mod cancel;
pub mod catalog;
mod ceilings;
pub mod cluster;
mod cluster_policy;
pub mod control;
pub mod engine;
mod evidence;
pub mod failure;
mod id;
pub mod ledger;
pub mod names;
pub mod own_program;
mod policy_files;
pub mod progress;
pub mod recovery;
pub mod retention;
mod runnable;
pub mod session;
pub mod store;
mod tier_choice;
pub mod tiers;
pub mod transport;
pub mod user_dirs;

pub use airlock_staging as staging;
pub use attest::{IN_TOTO_PAYLOAD_TYPE, PREDICATE_TYPE};
pub use caller::PRINCIPAL_FIELD;
pub use catalog::{bundled_missing_from, tool_specs as policy_tool_specs, ADHOC_TOOL};
pub use ceilings::Protected;
pub use engine::{AuthorizedCall, Authorizer, CedarPolicy, Decision, DefaultPolicy, PreparedCall, DEFAULT_POLICY_ID};
pub use id::{check_invocation_id, new_invocation_id};
pub use transport::exec::{CallRequest, ExecPayload};
pub use transport::isolated::{
    helper_report as isolated_helper_report, IsolatedRequest, RootGrant, BROKER_OPERATIONS, BROKER_RECOVERED,
    BROKER_WRITE, ISOLATED_TRANSPORT,
};
pub use transport::source::SOURCE_TRANSPORT;

use airlock_core::{Config, ReasonCode, Refusal, ResolverChoice};

// `[journal] segment_bytes` is checked against the journal's own bounds.
const _: () = assert!(
    airlock_core::JournalSettings::MIN_SEGMENT_BYTES == airlock_journal::MIN_SEGMENT_BYTES
        && airlock_core::JournalSettings::MAX_SEGMENT_BYTES == airlock_journal::MAX_SEGMENT_BYTES
);
use airlock_hostfs::{HostAuthority, PrivateDir, Resolver};

/// One process's view of the host: configuration, resolver, state directory.
#[derive(Debug)]
pub struct Runtime {
    authority: HostAuthority,
    cedar: Option<CedarPolicy>,
    /// The cluster's policy bundle, fetched at first use.
    cluster_policy: std::sync::OnceLock<Result<cluster_policy::ClusterPolicy, Refusal>>,
    principal: String,
    callers: caller::Callers,
    journal: airlock_journal::Journal,
    init_program: Option<(std::path::PathBuf, bool)>,
    /// Warm sandboxes for native calls ([`Runtime::start_warm_pool`]).
    warm: Option<std::sync::Arc<airlock_sandbox::WarmPool>>,
    config: Config,
    resolver: Resolver,
    state: PrivateDir,
    pool: airlock_staging::Pool,
    protected: Protected,
    modes: airlock_core::modes::EffectiveModes,
    cancel: airlock_sandbox::Cancel,
}

impl Runtime {
    /// Opens the state directory (creating it `0700`) and picks the
    /// resolver: `resolver_override` wins over `[filesystem] resolver`.
    pub fn open(
        authority: HostAuthority,
        config: Config,
        resolver_override: Option<ResolverChoice>,
    ) -> Result<Runtime, Refusal> {
        let resolver = Resolver::new(resolver_override.unwrap_or(config.resolver))?;
        let state = PrivateDir::open_or_create(&authority, &config.state_dir)?;
        let protected = Protected::new(&authority, &config, &state)?;
        ceilings::check_at_start(&authority, &config, &protected)?;
        check_image(&authority, &config, &protected)?;
        approval::pinned(&config.approval.approvers)?;
        let key = airlock_journal::JournalKey::open_or_create(&state).map_err(failure::journal_refusal)?;
        let journal = airlock_journal::Journal::open(&state, key)
            .map_err(failure::journal_refusal)?
            .with_segment_bytes(config.journal.segment_bytes);
        let pool = airlock_staging::Pool::open(&state, config.staging)?;
        let cedar = if config.policy_files.is_empty() { None } else { Some(policy_files::load(&authority, &config)?) };
        let principal = config.principal.clone();
        // The caller's umask, read once: what published files and made
        // directories get unless `[filesystem] output_mode` says otherwise.
        let modes = config.output_modes.effective(airlock_hostfs::process_umask());
        Ok(Runtime {
            authority,
            cedar,
            cluster_policy: std::sync::OnceLock::new(),
            principal,
            callers: caller::Callers::default(),
            journal,
            init_program: None,
            warm: None,
            config,
            resolver,
            state,
            pool,
            protected,
            modes,
            cancel: airlock_sandbox::Cancel::new(),
        })
    }

    /// The permission bits of published files and of the output
    /// directories a call makes (`[filesystem] output_mode`,
    /// `output_dir_mode`, else `0666`/`0777` less the umask read at start).
    pub fn output_modes(&self) -> airlock_core::modes::EffectiveModes {
        self.modes
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The resolver in use.
    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// Sets the executable the native tier re-executes as its sandbox init
    /// (the binary must call `airlock_sandbox::init::maybe_run_init()` first
    /// in `main`). Without it, `run` is refused with `sandbox.unavailable`.
    /// `die_with_caller`: workers are killed when the thread that started
    /// them exits (right for a CLI that runs calls on its main thread, so a
    /// SIGKILLed `airlock` leaves no worker behind).
    pub fn set_init_program(&mut self, path: std::path::PathBuf, die_with_caller: bool) -> &mut Self {
        self.init_program = Some((path, die_with_caller));
        self
    }

    /// Keeps `[sandbox] warm_pool` warm sandboxes ready for native calls
    /// (for a long-lived process: `airlock mcp`); a call that fits one
    /// starts in it, any other starts cold. Needs the init program
    /// ([`Runtime::set_init_program`]); with `warm_pool = 0` it does nothing.
    pub fn start_warm_pool(&mut self) -> Result<(), Refusal> {
        let Some((program, _)) = self.init_program.clone() else {
            return Err(Refusal::new(ReasonCode::SandboxUnavailable, "no sandbox init program was configured"));
        };
        if self.config.warm_pool == 0 || self.warm.is_some() {
            return Ok(());
        }
        let pool = airlock_sandbox::WarmPool::start(program, self.image(), self.config.warm_pool)
            .map_err(|e| Refusal::new(ReasonCode::SandboxUnavailable, format!("warm sandboxes: {e}")))?;
        self.warm = Some(std::sync::Arc::new(pool));
        Ok(())
    }

    /// Takes the sandbox started for this process's one native call
    /// ([`Prestarted::start`]).
    pub fn adopt_prestarted(&mut self, prestarted: Option<Prestarted>) {
        if let Some(Prestarted(pool)) = prestarted {
            self.warm = Some(std::sync::Arc::new(pool));
        }
    }

    /// [`Prestarted::start`] for the one Git query this process is about to
    /// make (`airlock query git_*`): a sandbox with the Git driver's image,
    /// started while the repository is snapshotted.
    pub fn prestart_git_driver(&mut self) {
        let Some((program, _)) = self.init_program.clone() else { return };
        if self.warm.is_some() {
            return;
        }
        let image = transport::git::driver_image(self.authority());
        if let Some(pool) = prestart(&self.config, program, image) {
            self.warm = Some(std::sync::Arc::new(pool));
        }
    }

    /// The authorizer for this configuration: the cluster's policy bundle,
    /// the configured Cedar policies, or the built-in default policy.
    pub fn authorizer(&self) -> Result<&dyn Authorizer, Refusal> {
        if let Some(cluster) = self.cluster_policy()? {
            return Ok(&cluster.cedar);
        }
        Ok(match &self.cedar {
            None => &DefaultPolicy,
            Some(cedar) => cedar,
        })
    }

    /// Calls are made as `principal` (an `Airlock::Agent` id) instead of
    /// `[policy] principal`.
    pub fn set_principal(&mut self, principal: String) -> &mut Self {
        self.principal = principal;
        self
    }

    /// The principal of calls whose request names none.
    pub fn principal(&self) -> &str {
        &self.principal
    }

    pub(crate) fn native_tier(&self) -> Result<airlock_sandbox::NativeTier, Refusal> {
        let (program, die_with_caller) = self.init_program.clone().ok_or_else(|| {
            Refusal::new(ReasonCode::SandboxUnavailable, "no sandbox init program was configured for the native tier")
        })?;
        // Refused here, before a worker (or a broker) is started, when the
        // operator requires real limits and the host delegates no cgroup;
        // the tier checks again when it starts each worker.
        let parent = self.config.cgroup_parent.as_deref();
        if self.config.require_cgroup {
            airlock_sandbox::cgroup_limits_available(parent).map_err(|why| {
                Refusal::new(
                    ReasonCode::SandboxLimitsUnavailable,
                    format!(
                        "[sandbox] require_cgroup = true, but no cgroup can hold the worker's memory and process \
                         limits here: {why}. Delegate a cgroup v2 directory with the memory and pids controllers \
                         enabled in its cgroup.subtree_control and writable by the user airlock runs as, and name \
                         it in [sandbox] cgroup_parent; or set require_cgroup = false to accept per-process rlimits"
                    ),
                )
            })?;
        }
        let mut tier = airlock_sandbox::NativeTier::new(program);
        tier.die_with_caller(die_with_caller)
            .require_cgroup(self.config.require_cgroup)
            .cancel_with(self.current_cancel());
        if let Some(dir) = parent {
            tier.cgroup_parent(dir.to_path_buf());
        }
        if let Some(pool) = &self.warm {
            tier.warm_pool(std::sync::Arc::clone(pool));
        }
        Ok(tier)
    }

    /// The warm sandboxes this process keeps, if any.
    pub(crate) fn warm_pool(&self) -> Option<&airlock_sandbox::WarmPool> {
        self.warm.as_deref()
    }

    /// The image directories bound read-only into every worker.
    pub fn image(&self) -> Vec<airlock_sandbox::ImageMount> {
        image_of(&self.config)
    }

    /// The signed journal of this state directory.
    pub fn journal(&self) -> &airlock_journal::Journal {
        &self.journal
    }

    /// The state directory.
    pub fn state(&self) -> &PrivateDir {
        &self.state
    }

    /// The shared staging pool of the state directory.
    pub fn pool(&self) -> &airlock_staging::Pool {
        &self.pool
    }

    /// The token this runtime reaches host paths with.
    pub fn authority(&self) -> &HostAuthority {
        &self.authority
    }

    pub(crate) fn protected(&self) -> &Protected {
        &self.protected
    }

    pub(crate) fn invocations(&self) -> Result<PrivateDir, Refusal> {
        Ok(self.state.ensure_subdir(store::INVOCATIONS)?)
    }
}

/// Refuses an image directory that overlaps the state directory or a
/// ceiling: the image is visible to every tool, so it must hold neither.
fn check_image(authority: &HostAuthority, config: &Config, protected: &Protected) -> Result<(), Refusal> {
    let Some(dirs) = &config.image else { return Ok(()) };
    let ceilings: Vec<std::path::PathBuf> =
        config.ceilings.iter().filter_map(|c| authority.canonicalize(&c.host).ok()).collect();
    for dir in dirs {
        let real = authority
            .canonicalize(dir.as_ref())
            .map_err(|e| Refusal::new(ReasonCode::ConfigInvalid, format!("[sandbox] image entry {dir:?}: {e}")))?;
        let overlaps = |other: &std::path::Path| real.starts_with(other) || other.starts_with(&real);
        if overlaps(&protected.state_dir) {
            return Err(Refusal::new(
                ReasonCode::ConfigInvalid,
                format!("[sandbox] image entry {dir:?} overlaps the state directory"),
            ));
        }
        if let Some(c) = ceilings.iter().find(|c| overlaps(c)) {
            return Err(Refusal::new(
                ReasonCode::ConfigInvalid,
                format!("[sandbox] image entry {dir:?} overlaps the ceiling {}; every tool would see it", c.display()),
            ));
        }
    }
    Ok(())
}

/// The image `config` gives native workers.
fn image_of(config: &Config) -> Vec<airlock_sandbox::ImageMount> {
    match &config.image {
        None => airlock_sandbox::ImageMount::default_image(),
        Some(dirs) => dirs.iter().map(airlock_sandbox::ImageMount::new).collect(),
    }
}

/// One sandbox started for the one native call a process is about to make
/// (`airlock run`), before its runtime is open, so that its start overlaps
/// opening the state and preparing the call; [`Runtime::adopt_prestarted`]
/// takes it. The call claims it, waiting for it if it is still being built;
/// a call that does not fit it (another image or tier) starts cold and it is
/// killed at exit, as it is when the runtime refuses to open (the
/// configuration's image is checked there, after this start: the sandbox
/// only ever holds airlock's own init, never a call's files or a tool).
pub struct Prestarted(airlock_sandbox::WarmPool);

impl Prestarted {
    /// Starts it with `config`'s image and `init_program`. Nothing when
    /// `[sandbox] warm_pool = 0`, the tier is not native, or workers get
    /// cgroups of their own here (a delegated cgroup, or `require_cgroup`:
    /// such a call starts cold, so the sandbox would be wasted).
    pub fn start(config: &Config, init_program: std::path::PathBuf) -> Option<Prestarted> {
        prestart(config, init_program, image_of(config)).map(Prestarted)
    }
}

fn prestart(
    config: &Config,
    program: std::path::PathBuf,
    image: Vec<airlock_sandbox::ImageMount>,
) -> Option<airlock_sandbox::WarmPool> {
    if config.warm_pool == 0 || config.tier != airlock_core::config::Tier::Native {
        return None;
    }
    if config.require_cgroup || airlock_sandbox::cgroup_limits_available(config.cgroup_parent.as_deref()).is_ok() {
        return None;
    }
    airlock_sandbox::WarmPool::start_one(program, image)
        .inspect_err(|e| tracing::debug!(error = %e, "no sandbox started ahead of the call"))
        .ok()
}
