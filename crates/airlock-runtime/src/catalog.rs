//! The one catalog of tools: where a call's tool comes from (a manifest in
//! `tools_dir`, a manifest path, the bundled source tools, the built-in Git
//! queries and command-line isolated submissions), and the Cedar view of
//! every tool a policy may name.

use crate::engine::CallTool;
use crate::names::ToolIndex;
pub use crate::names::{list_manifests, MAX_MANIFEST_BYTES};
use airlock_core::manifest::Manifest;
use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::HostAuthority;
use std::path::{Path, PathBuf};

/// The tool name of a command-line submission (`airlock isolated -- CMD`).
pub const ADHOC_TOOL: &str = "isolated";

/// A manifest and the bytes it was parsed from.
#[derive(Debug)]
pub struct LoadedTool {
    /// The parsed manifest.
    pub manifest: Manifest,
    /// Exactly the bytes parsed (kept with a prepared call).
    pub text: String,
    /// Where it was read from.
    pub origin: PathBuf,
}

/// Whether `tool` names a manifest file rather than a tool: it contains
/// `/` or ends in `.toml`.
fn is_path(tool: &str) -> bool {
    tool.contains('/') || tool.ends_with(".toml")
}

/// Refuses a word that is neither a manifest path nor a possible tool name.
fn check_name(tool: &str) -> Result<(), Refusal> {
    let valid = tool.len() <= 64
        && tool.starts_with(|c: char| c.is_ascii_alphabetic())
        && tool.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if valid {
        return Ok(());
    }
    Err(Refusal::new(ReasonCode::ManifestNotFound, format!("{tool:?} is neither a manifest path nor a tool name")))
}

/// Where `tool` is: a manifest path if it contains `/` or ends in
/// `.toml`; otherwise the one manifest in `tools_dir` answering to the name
/// (file name or `[tool] name`, see [`crate::names`]), or `None` for a
/// bundled source tool with no manifest there. Refused: a name two
/// manifests answer to (`manifest.ambiguous`), a name none does
/// (`manifest.not_found`, with the closest names).
pub fn locate(authority: &HostAuthority, tool: &str, tools_dir: &Path) -> Result<Option<PathBuf>, Refusal> {
    if is_path(tool) {
        return Ok(Some(PathBuf::from(tool)));
    }
    check_name(tool)?;
    let index = ToolIndex::read(authority, tools_dir);
    match index.find(tool)? {
        Some(path) => Ok(Some(path.to_path_buf())),
        None if airlock_source::bundled(tool).is_some() => Ok(None),
        None => Err(index.not_found(tool, airlock_source::BUNDLED.iter().map(|(n, _)| *n))),
    }
}

/// Reads and parses the manifest at `path` (at most 1 MiB, UTF-8). A
/// manifest is a control file: read without following a link, and refused
/// (`config.control_file_unsafe`) unless it and its directory are the
/// caller's or root's and closed to others' writes.
pub fn load(authority: &HostAuthority, path: &Path) -> Result<LoadedTool, Refusal> {
    let text = crate::control::read_text(authority, crate::control::MANIFEST, path, MAX_MANIFEST_BYTES)?;
    let manifest = Manifest::parse(&text, &path.display().to_string())?;
    Ok(LoadedTool { manifest, text, origin: path.to_path_buf() })
}

/// Loads a tool by manifest path or name ([`locate`]); the bundled source
/// tools answer for their names when no manifest in the tools directory
/// answers to that name.
pub fn load_tool(authority: &HostAuthority, tool: &str, tools_dir: &Path) -> Result<LoadedTool, Refusal> {
    match locate(authority, tool, tools_dir)? {
        Some(path) => load_or_bundled(authority, tool, &path),
        None => {
            let text = airlock_source::bundled(tool).unwrap_or_default();
            let origin = format!("bundled:{tool}.clad.toml");
            let manifest = Manifest::parse(text, &origin)?;
            Ok(LoadedTool { manifest, text: text.to_owned(), origin: PathBuf::from(origin) })
        }
    }
}

/// Loads `tool` from `path` as [`load`] does; when `tool` is the name of
/// a bundled operation (`read_file`, `list_files`, `grep_files`), the
/// manifest answering to it must itself be a valid source manifest for the
/// same operation (`source.shadowed` otherwise), so a command tool can never
/// stand in for a source query.
fn load_or_bundled(authority: &HostAuthority, tool: &str, path: &Path) -> Result<LoadedTool, Refusal> {
    if airlock_source::bundled(tool).is_none() || is_path(tool) {
        return load(authority, path);
    }
    let loaded = load(authority, path)?;
    match loaded.manifest.source_operation() {
        Some(Ok(op)) if op.as_str() == tool => Ok(loaded),
        Some(Err(refusal)) => Err(refusal),
        _ => Err(Refusal::new(
            ReasonCode::SourceShadowed,
            format!(
                "{} is named like the bundled source tool {tool:?} but is not a [source] manifest with operation = \
                 {tool:?}; rename it, or make it one",
                path.display()
            ),
        )),
    }
}

/// The bundled source tools whose names have no manifest in `tools_dir`:
/// the tools `run NAME` would load from the binary. Policies are validated
/// against them too, so a policy may name `Airlock::Action::"tool_call::read_file"`
/// in a project that keeps no copy of the manifest.
pub fn bundled_missing_from(authority: &HostAuthority, tools_dir: &Path) -> Vec<Manifest> {
    let index = ToolIndex::read(authority, tools_dir);
    airlock_source::BUNDLED
        .iter()
        .filter(|(name, _)| matches!(index.find(name), Ok(None)))
        .filter_map(|(name, text)| Manifest::parse(text, &format!("bundled:{name}.clad.toml")).ok())
        .collect()
}

impl LoadedTool {
    /// The tool as a call names it.
    pub(crate) fn call_tool(&self) -> CallTool {
        CallTool {
            identity: self.manifest.identity(),
            spec: airlock_policy::ToolSpec::from_manifest(&self.manifest),
            text: self.text.clone(),
            origin: self.origin.display().to_string(),
        }
    }
}

/// A Git query (`git_status`, …), built into airlock: low risk, no manifest.
pub(crate) fn git_tool(operation: &str) -> CallTool {
    CallTool {
        identity: airlock_core::ToolIdentity::builtin(operation, env!("CARGO_PKG_VERSION"), "low"),
        spec: git_spec(operation),
        text: String::new(),
        origin: "builtin".into(),
    }
}

/// A command-line isolated submission: medium risk, no manifest.
pub(crate) fn adhoc_isolated_tool() -> CallTool {
    CallTool {
        identity: airlock_core::ToolIdentity::builtin(ADHOC_TOOL, env!("CARGO_PKG_VERSION"), "medium"),
        spec: adhoc_isolated_spec(),
        text: String::new(),
        origin: "command line".into(),
    }
}

/// The Cedar view of one Git query: action `tool_call::OPERATION`, with
/// arguments `path` (String) and `max_count` (Long).
fn git_spec(operation: &str) -> airlock_policy::ToolSpec {
    airlock_policy::ToolSpec {
        name: operation.to_owned(),
        action: None,
        resource: None,
        args: vec![
            ("path".into(), airlock_policy::ArgKind::String),
            ("max_count".into(), airlock_policy::ArgKind::Long),
        ],
    }
}

/// The Cedar view of a command-line submission: action
/// `tool_call::isolated`, no arguments.
fn adhoc_isolated_spec() -> airlock_policy::ToolSpec {
    airlock_policy::ToolSpec { name: ADHOC_TOOL.into(), action: None, resource: None, args: Vec::new() }
}

/// Every tool a policy may name, so that policies validate whatever tool a
/// call is for: the runnable manifests in `tools_dir`, the bundled source
/// tools it does not shadow, the Git queries (whose Cedar shape the Git
/// engine defines, whatever manifest names them) and command-line isolated
/// submissions.
pub fn tool_specs(authority: &HostAuthority, tools_dir: &Path) -> Vec<airlock_policy::ToolSpec> {
    let is_git = |m: &Manifest| matches!(m.source_operation(), Some(Ok(op)) if op.is_git());
    list_manifests(authority, tools_dir)
        .iter()
        .filter_map(|p| authority.read_text(p, MAX_MANIFEST_BYTES).and_then(|t| Manifest::parse(&t, "").ok()))
        .chain(bundled_missing_from(authority, tools_dir))
        .filter(|m| m.check_executable().is_ok() && !is_git(m))
        .flat_map(|m| {
            // A session's commands are actions of their own.
            let commands: Vec<_> = m
                .session_spec()
                .map(|s| s.commands.keys().map(|c| crate::session::command_spec(m.name(), c)).collect())
                .unwrap_or_default();
            std::iter::once(airlock_policy::ToolSpec::from_manifest(&m)).chain(commands)
        })
        .chain(airlock_git::Operation::ALL.into_iter().map(|op| git_spec(op.as_str())))
        .chain(std::iter::once(adhoc_isolated_spec()))
        .collect()
}
