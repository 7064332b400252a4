//! Finding and loading a tool's manifest.

use airlock_core::manifest::Manifest;
use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::HostAuthority;
use std::path::{Path, PathBuf};

/// Largest manifest file read.
pub const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;

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

/// Resolves `tool`: a path to a manifest if it contains `/` or ends in
/// `.toml`, otherwise a tool name looked up as `NAME.clad.toml` in `tools_dir`.
pub fn locate(tool: &str, tools_dir: &Path) -> Result<PathBuf, Refusal> {
    if tool.contains('/') || tool.ends_with(".toml") {
        return Ok(PathBuf::from(tool));
    }
    let valid = tool.len() <= 64
        && tool.starts_with(|c: char| c.is_ascii_alphabetic())
        && tool.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        return Err(Refusal::new(
            ReasonCode::ManifestNotFound,
            format!("{tool:?} is neither a manifest path nor a tool name"),
        ));
    }
    Ok(tools_dir.join(format!("{tool}.clad.toml")))
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

/// Every `*.clad.toml` in `tools_dir`, sorted.
pub fn list_manifests(tools_dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(tools_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".clad.toml")))
        .collect();
    found.sort();
    found
}
