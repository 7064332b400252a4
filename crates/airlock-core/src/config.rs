//! `airlock.toml`: the operator's configuration (DESIGN.md §3).
//!
//! This module only parses and checks what can be checked without touching
//! the host; `airlock-hostfs` opens the ceilings and `airlock-runtime`
//! checks them against the state directory.

use crate::limits::{LimitOverrides, Limits, StagingLimits};
use crate::path::RelPath;
use crate::reason::{ReasonCode, Refusal};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Most ceilings a configuration may declare.
pub const MAX_CEILINGS: usize = 32;

/// Host paths that may never be a ceiling, nor lie beneath one.
pub const PROTECTED_HOST_PATHS: &[&str] = &["/proc", "/sys", "/dev"];

/// What a ceiling permits: reading (declared reads, source queries, Git
/// snapshots, broker reads and listings), creating new outputs, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CeilingMode {
    /// Read inputs only.
    Ro,
    /// Read inputs and create new outputs (never overwrite).
    Rw,
    /// Create new outputs only (`create`, alias `wo`): never read or
    /// listed, as seed 000's write ceilings ("creation only, never
    /// reading").
    Create,
}

impl CeilingMode {
    /// Whether anything may be read or listed beneath the ceiling.
    pub fn reads(self) -> bool {
        matches!(self, CeilingMode::Ro | CeilingMode::Rw)
    }

    /// Whether new outputs may be created beneath the ceiling.
    pub fn creates(self) -> bool {
        matches!(self, CeilingMode::Rw | CeilingMode::Create)
    }
}

/// One configured ceiling: `HOST:VIRTUAL:MODE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ceiling {
    /// Host directory, absolute or relative to the config file's directory
    /// (already joined with it).
    pub host: PathBuf,
    /// Where the worker sees it, relative to `working_dir`; `None` is the
    /// working directory itself (written `.`).
    pub virtual_root: Option<RelPath>,
    /// ro, rw or create.
    pub mode: CeilingMode,
    /// The entry as the operator wrote it, for messages.
    pub spec: String,
}

impl Ceiling {
    /// Parses `HOST:VIRTUAL:MODE`. HOST may itself contain `:`; VIRTUAL is
    /// `.` or a path under the grammar of [`RelPath`].
    pub fn parse(spec: &str, base_dir: &Path) -> Result<Ceiling, Refusal> {
        let bad =
            |why: String| Refusal::new(ReasonCode::ConfigInvalid, format!("[filesystem] roots entry {spec:?}: {why}"));
        let mut parts = spec.rsplitn(3, ':');
        let (mode, virt, host) = match (parts.next(), parts.next(), parts.next()) {
            (Some(m), Some(v), Some(h)) => (m, v, h),
            _ => return Err(bad("expected HOST:VIRTUAL:MODE".into())),
        };
        let mode = match mode {
            "ro" => CeilingMode::Ro,
            "rw" => CeilingMode::Rw,
            "create" | "wo" => CeilingMode::Create,
            other => return Err(bad(format!("mode {other:?} is not ro, rw or create"))),
        };
        if host.is_empty() {
            return Err(bad("the host path is empty".into()));
        }
        if host.bytes().any(|b| b == 0) {
            return Err(bad("the host path contains NUL".into()));
        }
        let virtual_root = if virt == "." {
            None
        } else {
            Some(RelPath::parse(virt).map_err(|r| bad(format!("virtual path: {}", r.message)))?)
        };
        Ok(Ceiling { host: base_dir.join(host), virtual_root, mode, spec: spec.to_owned() })
    }

    fn depth(&self) -> usize {
        self.virtual_root.as_ref().map_or(0, RelPath::depth)
    }
}

pub use crate::tier_settings::Tier;

/// Which resolver `airlock-hostfs` uses beneath a ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResolverChoice {
    /// openat2 where the kernel allows it, else the emulated walk.
    #[default]
    Auto,
    /// openat2 only; refuse to start where it is unavailable.
    Openat2,
    /// The per-component `O_NOFOLLOW` walk, even where openat2 works.
    Emulated,
}

impl ResolverChoice {
    /// Parses `auto`, `openat2` or `emulated`.
    pub fn parse(s: &str) -> Option<ResolverChoice> {
        match s {
            "auto" => Some(ResolverChoice::Auto),
            "openat2" => Some(ResolverChoice::Openat2),
            "emulated" => Some(ResolverChoice::Emulated),
            _ => None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    state_dir: Option<String>,
    tools_dir: Option<String>,
    #[serde(default)]
    sandbox: RawSandbox,
    #[serde(default)]
    filesystem: RawFilesystem,
    #[serde(default)]
    policy: RawPolicy,
    #[serde(default)]
    limits: LimitOverrides,
    #[serde(default)]
    staging: StagingLimits,
    #[serde(default)]
    broker: crate::broker::RawBroker,
    #[serde(default)]
    mcp: crate::mcp_server::RawMcpServer,
    #[serde(default)]
    approval: crate::approval::RawApproval,
    #[serde(default)]
    journal: JournalSettings,
    #[serde(default)]
    state: crate::state::RawState,
    cluster: Option<crate::cluster::RawCluster>,
}

/// The journal's segments (`[journal]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalSettings {
    /// The live segment is sealed once an append would take it past this
    /// many bytes: [`JournalSettings::MIN_SEGMENT_BYTES`] ..=
    /// [`JournalSettings::MAX_SEGMENT_BYTES`], default 64 MiB.
    #[serde(default = "JournalSettings::default_segment_bytes")]
    pub segment_bytes: u64,
}

impl JournalSettings {
    /// The smallest segment bound (256 KiB, four of the largest records).
    pub const MIN_SEGMENT_BYTES: u64 = 256 * 1024;
    /// The largest segment bound (256 MiB).
    pub const MAX_SEGMENT_BYTES: u64 = 256 * 1024 * 1024;

    fn default_segment_bytes() -> u64 {
        64 * 1024 * 1024
    }

    fn check(&self) -> Result<(), Refusal> {
        if !(Self::MIN_SEGMENT_BYTES..=Self::MAX_SEGMENT_BYTES).contains(&self.segment_bytes) {
            return Err(Refusal::new(
                ReasonCode::ConfigInvalid,
                format!(
                    "[journal] segment_bytes = {} is outside {} … {}",
                    self.segment_bytes,
                    Self::MIN_SEGMENT_BYTES,
                    Self::MAX_SEGMENT_BYTES
                ),
            ));
        }
        Ok(())
    }
}

impl Default for JournalSettings {
    fn default() -> Self {
        JournalSettings { segment_bytes: Self::default_segment_bytes() }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    tier: Option<Tier>,
    tiers: Option<Vec<Tier>>,
    #[serde(default)]
    gvisor: crate::tier_settings::RawGvisor,
    #[serde(default)]
    docker: crate::tier_settings::RawDocker,
    #[serde(default)]
    microvm: crate::tier_settings::RawMicrovm,
    working_dir: Option<String>,
    #[serde(default)]
    parsers: Vec<String>,
    image: Option<Vec<String>>,
    #[serde(default)]
    require_cgroup: bool,
    cgroup_parent: Option<String>,
    warm_pool: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFilesystem {
    #[serde(default)]
    roots: Vec<String>,
    resolver: Option<ResolverChoice>,
    output_mode: Option<String>,
    output_dir_mode: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    files: Vec<String>,
    principal: Option<String>,
}

/// Warm sandboxes a long-lived airlock keeps ready unless configured.
pub const DEFAULT_WARM_POOL: usize = 2;
/// The most warm sandboxes `[sandbox] warm_pool` may ask for.
pub const MAX_WARM_POOL: usize = 16;

/// A parsed, checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from, if any (`None` for the embedded default).
    pub source: Option<PathBuf>,
    /// Directory relative paths are taken from.
    pub base_dir: PathBuf,
    /// Journal, keys, staging, invocations.
    pub state_dir: PathBuf,
    /// Where tool names are looked up (`NAME.clad.toml`).
    pub tools_dir: PathBuf,
    /// The default worker tier (`[sandbox] tier`).
    pub tier: Tier,
    /// The tiers a call may run on and how each is reached.
    pub tiers: crate::tier_settings::TierSettings,
    /// Absolute directory where the worker sees declared paths.
    pub working_dir: String,
    /// Custom output parsers (absolute paths in the worker image) that
    /// manifests may name; any other is refused.
    pub parsers: Vec<String>,
    /// Host directories bound read-only into every worker at the same path;
    /// `None` is the tier's default (`/usr`, `/bin`, `/sbin`, `/lib*`).
    pub image: Option<Vec<String>>,
    /// Refuse to start a worker (`sandbox.limits_unavailable`) unless a
    /// delegated cgroup v2 holds its memory and process limits
    /// (`[sandbox] require_cgroup`, default `false`: rlimits alone, reported
    /// in the answer's `evidence.limits`).
    pub require_cgroup: bool,
    /// A delegated cgroup v2 directory under which each worker gets its own
    /// cgroup (`[sandbox] cgroup_parent`, relative to the config file's
    /// directory); `None`: airlock's own cgroup.
    pub cgroup_parent: Option<PathBuf>,
    /// How many warm sandboxes a long-lived airlock (`airlock mcp`) keeps
    /// ready for native calls (`[sandbox] warm_pool`, default
    /// [`DEFAULT_WARM_POOL`], at most [`MAX_WARM_POOL`]; 0: none, and
    /// `airlock run` builds no sandbox while it prepares).
    pub warm_pool: usize,
    /// Ceilings, at most [`MAX_CEILINGS`], with distinct virtual destinations.
    pub ceilings: Vec<Ceiling>,
    /// Resolver choice (`[filesystem] resolver`).
    pub resolver: ResolverChoice,
    /// Modes of published files and made directories (`[filesystem]
    /// output_mode`, `output_dir_mode`; default: from the umask).
    pub output_modes: crate::modes::OutputModes,
    /// Cedar policy file patterns.
    pub policy_files: Vec<String>,
    /// The principal (`Airlock::Agent` id) calls are made as, unless the
    /// command line names one.
    pub principal: String,
    /// Limits after configuration.
    pub limits: Limits,
    /// Size of the shared staging pool (`[staging]`).
    pub staging: StagingLimits,
    /// The named-root broker (`[broker]`): root paths for manifests, budgets, helper pins.
    pub broker: crate::broker::BrokerConfig,
    /// The MCP server front (`[mcp]`): token principal, Unix-socket peers,
    /// origins, session cap.
    pub mcp: crate::mcp_server::McpServerConfig,
    /// Approvers, the wait of a prepared call and the per-principal quota (`[approval]`).
    pub approval: crate::approval::ApprovalConfig,
    /// The journal's segments (`[journal]`).
    pub journal: JournalSettings,
    /// What the state directory keeps of settled calls (`[state]`).
    pub state: crate::state::StateSettings,
    /// Where calls of the `cluster` tier go (`[cluster]`); `None`: that
    /// tier is not configured.
    pub cluster: Option<crate::cluster::ClusterConfig>,
}

impl Config {
    /// The configuration used when no `airlock.toml` is found: state in
    /// `./.airlock`, tools in `./tools`, native tier, no ceilings.
    pub fn embedded_default(base_dir: &Path) -> Config {
        Config::parse("", None, base_dir).expect("the embedded default configuration is valid")
    }

    /// Parses `text`, read from `source`, with relative paths taken from `base_dir`.
    pub fn parse(text: &str, source: Option<&Path>, base_dir: &Path) -> Result<Config, Refusal> {
        let where_ = source.map_or_else(|| "embedded configuration".to_owned(), |p| p.display().to_string());
        let raw: RawConfig = toml::from_str(text)
            .map_err(|e| Refusal::new(ReasonCode::ConfigInvalid, format!("{where_}: {}", e.to_string().trim_end())))?;
        let working_dir = raw.sandbox.working_dir.unwrap_or_else(|| "/workspace".to_owned());
        check_working_dir(&working_dir)?;
        if raw.filesystem.roots.len() > MAX_CEILINGS {
            return Err(Refusal::new(
                ReasonCode::ConfigInvalid,
                format!("[filesystem] roots has {} entries, more than {MAX_CEILINGS}", raw.filesystem.roots.len()),
            ));
        }
        let mut ceilings: Vec<Ceiling> = Vec::with_capacity(raw.filesystem.roots.len());
        for spec in &raw.filesystem.roots {
            let c = Ceiling::parse(spec, base_dir)?;
            if let Some(other) = ceilings.iter().find(|o| o.virtual_root == c.virtual_root) {
                return Err(Refusal::new(
                    ReasonCode::ConfigInvalid,
                    format!("[filesystem] roots {:?} and {:?} have the same virtual destination", other.spec, c.spec),
                ));
            }
            ceilings.push(c);
        }
        let limits = Limits::configured(&raw.limits)?;
        let tier = raw.sandbox.tier.unwrap_or(Tier::Native);
        let cluster = raw.cluster.map(|c| c.check(base_dir)).transpose()?;
        if cluster.as_ref().is_some_and(|c| c.policy_bundle) && !raw.policy.files.is_empty() {
            return Err(Refusal::new(
                ReasonCode::ConfigInvalid,
                "[cluster] policy_bundle = true and [policy] files are two sources of Cedar policy: give one (the \
                 bundle is pushed with `airlock cluster policy push FILE…`)",
            ));
        }
        let tiers = crate::tier_settings::TierSettings::check(
            tier,
            raw.sandbox.tiers,
            cluster.is_some(),
            raw.sandbox.gvisor,
            raw.sandbox.docker,
        )?
        .with_microvm(raw.sandbox.microvm)?;
        raw.staging.check()?;
        raw.journal.check()?;
        Ok(Config {
            source: source.map(Path::to_path_buf),
            base_dir: base_dir.to_path_buf(),
            state_dir: base_dir.join(raw.state_dir.as_deref().unwrap_or(".airlock")),
            tools_dir: base_dir.join(raw.tools_dir.as_deref().unwrap_or("tools")),
            tier,
            tiers,
            working_dir,
            parsers: raw.sandbox.parsers,
            image: raw.sandbox.image.map(|dirs| dirs.into_iter().map(|d| check_image_dir(&d)).collect()).transpose()?,
            require_cgroup: raw.sandbox.require_cgroup,
            cgroup_parent: raw.sandbox.cgroup_parent.map(|d| base_dir.join(d)),
            warm_pool: match raw.sandbox.warm_pool {
                None => DEFAULT_WARM_POOL,
                Some(n) if n <= MAX_WARM_POOL => n,
                Some(n) => {
                    return Err(Refusal::new(
                        ReasonCode::ConfigInvalid,
                        format!("[sandbox] warm_pool = {n} is outside 0 … {MAX_WARM_POOL}"),
                    ))
                }
            },
            ceilings,
            resolver: raw.filesystem.resolver.unwrap_or_default(),
            output_modes: crate::modes::OutputModes::parse(
                raw.filesystem.output_mode.as_deref(),
                raw.filesystem.output_dir_mode.as_deref(),
            )?,
            policy_files: raw.policy.files,
            principal: raw.policy.principal.unwrap_or_else(|| "local".to_owned()),
            limits,
            staging: raw.staging,
            broker: raw.broker.check(base_dir)?,
            mcp: raw.mcp.check()?,
            approval: raw.approval.check()?,
            journal: raw.journal,
            state: raw.state.check()?,
            cluster,
        })
    }

    /// The most specific ceiling covering `path`, and the rest of `path`
    /// beneath it (`None` when `path` names the ceiling itself).
    pub fn ceiling_for(&self, path: &RelPath) -> Option<(&Ceiling, Option<RelPath>)> {
        self.ceilings
            .iter()
            .filter_map(|c| match &c.virtual_root {
                None => Some((c, Some(path.clone()))),
                Some(root) => path.strip_prefix(root).map(|rest| (c, rest)),
            })
            .max_by_key(|(c, _)| c.depth())
    }
}

/// An image directory: absolute, normal, not `/`, not under `/proc`,
/// `/sys` or `/dev` (the runtime also refuses one that holds the state
/// directory or a ceiling).
fn check_image_dir(dir: &str) -> Result<String, Refusal> {
    let bad = |why: &str| Refusal::new(ReasonCode::ConfigInvalid, format!("[sandbox] image entry {dir:?}: {why}"));
    let rest = dir.strip_prefix('/').ok_or_else(|| bad("must be absolute"))?;
    if rest.is_empty() {
        return Err(bad("the whole host file system is never an image"));
    }
    if rest.split('/').any(|c| c.is_empty() || c == "." || c == "..") || dir.contains('\0') {
        return Err(bad("must be a normal path"));
    }
    if is_at_or_under(dir, PROTECTED_HOST_PATHS) {
        return Err(bad("is a protected host path"));
    }
    Ok(dir.to_owned())
}

fn check_working_dir(dir: &str) -> Result<(), Refusal> {
    let bad = |why: &str| Refusal::new(ReasonCode::ConfigInvalid, format!("[sandbox] working_dir {dir:?}: {why}"));
    let rest = dir.strip_prefix('/').ok_or_else(|| bad("must be absolute"))?;
    if rest.is_empty() {
        return Err(bad("must not be /"));
    }
    RelPath::parse(rest).map_err(|r| bad(&r.message))?;
    if is_at_or_under(dir, PROTECTED_HOST_PATHS)
        || is_at_or_under(dir, &["/etc", "/usr", "/bin", "/lib", "/lib64", "/sbin"])
    {
        return Err(bad("overlaps a system directory the worker needs"));
    }
    Ok(())
}

/// Whether absolute `dir` is one of `roots` or lies beneath one (by component).
fn is_at_or_under(dir: &str, roots: &[&str]) -> bool {
    roots.iter().any(|p| dir == *p || dir.strip_prefix(p).is_some_and(|rest| rest.starts_with('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, Refusal> {
        Config::parse(text, None, Path::new("/base"))
    }

    #[test]
    fn defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.state_dir, Path::new("/base/.airlock"));
        assert_eq!(c.tier, Tier::Native);
        assert_eq!(c.working_dir, "/workspace");
        assert!(c.ceilings.is_empty());
        assert_eq!(c.journal.segment_bytes, 64 << 20);
        let c = parse("[journal]\nsegment_bytes = 262144\n").unwrap();
        assert_eq!(c.journal.segment_bytes, JournalSettings::MIN_SEGMENT_BYTES);
    }

    #[test]
    fn ceilings_parse_and_most_specific_wins() {
        let c = parse(
            r#"
            [filesystem]
            roots = ["./data:data:ro", "/srv/out:data/out:rw", "/srv/a:b:c:x:ro", "./src:.:ro"]
        "#,
        )
        .unwrap();
        assert_eq!(c.ceilings[2].host, Path::new("/srv/a:b:c"));
        let p = |s| RelPath::parse(s).unwrap();
        let (ceil, rest) = c.ceiling_for(&p("data/out/r.json")).unwrap();
        assert_eq!(ceil.mode, CeilingMode::Rw);
        assert_eq!(rest, Some(p("r.json")));
        let (ceil, rest) = c.ceiling_for(&p("data/in.csv")).unwrap();
        assert_eq!(ceil.host, Path::new("/base/./data"));
        assert_eq!(rest, Some(p("in.csv")));
        let (ceil, _) = c.ceiling_for(&p("data-evil/x")).unwrap();
        assert_eq!(ceil.virtual_root, None, "falls to the `.` root, never matched by string prefix");
        assert_eq!(c.ceiling_for(&p("data")).unwrap().1, None);
    }

    #[test]
    fn create_only_ceilings() {
        let c =
            parse("[filesystem]\nroots = [\"./o:out:create\", \"./w:w:wo\", \"./r:r:ro\", \"./x:x:rw\"]\n").unwrap();
        let modes: Vec<CeilingMode> = c.ceilings.iter().map(|c| c.mode).collect();
        assert_eq!(modes, [CeilingMode::Create, CeilingMode::Create, CeilingMode::Ro, CeilingMode::Rw]);
        assert_eq!(
            modes.iter().map(|m| (m.reads(), m.creates())).collect::<Vec<_>>(),
            [(false, true), (false, true), (true, false), (true, true)]
        );
    }

    #[test]
    fn refusals() {
        let cases = [
            r#"[filesystem]
               roots = ["./a:data:ro", "./b:data:rw"]"#,
            r#"[filesystem]
               roots = ["./a:data:rx"]"#,
            r#"[filesystem]
               roots = ["./a:../x:ro"]"#,
            r#"[filesystem]
               roots = ["./a:/abs:ro"]"#,
            r#"[filesystem]
               roots = [":data:ro"]"#,
            r#"[sandbox]
               working_dir = "relative""#,
            r#"[sandbox]
               working_dir = "/proc/x""#,
            r#"bogus = 1"#,
            r#"[sandbox]
               image = ["/"]"#,
            r#"[sandbox]
               image = ["/proc/self"]"#,
            r#"[sandbox]
               image = ["usr"]"#,
            r#"[limits]
               max_inputs = 64"#,
            r#"[staging]
               max_snapshots = 513"#,
            r#"[journal]
               segment_bytes = 262143"#,
            r#"[journal]
               segment_bytes = 268435457"#,
            r#"[journal]
               rotate = true"#,
            r#"[staging]
               max_bytes = 0"#,
            r#"[staging]
               max_leases = 4"#,
            r#"[approval]
               ttl = "31d""#,
            r#"[[approval.approvers]]
               id = "alice"
               public_key = "ed25519:AAAA""#,
        ];
        for text in cases {
            let err = parse(text).unwrap_err();
            assert_eq!(err.code, ReasonCode::ConfigInvalid, "{text}");
        }
        let many: Vec<String> = (0..33).map(|i| format!("\"./d{i}:v{i}:ro\"")).collect();
        let text = format!("[filesystem]\nroots = [{}]", many.join(","));
        assert!(parse(&text).unwrap_err().message.contains("more than 32"));
    }

    #[test]
    fn mcp_section_is_checked() {
        let c = parse("[mcp]\nmax_sessions = 8\n[mcp.principals]\n1000 = \"alice\"").unwrap();
        assert_eq!(c.mcp.max_sessions, 8);
        assert_eq!(c.mcp.principals.get(&1000).map(String::as_str), Some("alice"));
        let err = parse("[mcp]\nmax_session = 8").unwrap_err();
        assert!(err.code == ReasonCode::ConfigInvalid && err.message.contains("max_session"), "{}", err.message);
    }

    #[test]
    fn unknown_key_is_named() {
        let err = parse("[sandbox]\ntierr = \"native\"").unwrap_err();
        assert!(err.message.contains("tierr"), "{}", err.message);
    }
}
