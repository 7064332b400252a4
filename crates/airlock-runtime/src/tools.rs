//! Finding and loading a tool's manifest.

use airlock_core::manifest::Manifest;
use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::HostAuthority;
use std::io::Read;
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

/// Reads and parses the manifest at `path` (at most 1 MiB, UTF-8).
pub fn load(_authority: &HostAuthority, path: &Path) -> Result<LoadedTool, Refusal> {
    let file = std::fs::File::open(path).map_err(|e| {
        Refusal::new(ReasonCode::ManifestNotFound, format!("cannot open manifest {}: {e}", path.display()))
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Refusal::new(ReasonCode::ManifestInvalid, format!("reading manifest {}: {e}", path.display())))?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(Refusal::new(
            ReasonCode::ManifestInvalid,
            format!("manifest {} is larger than 1 MiB", path.display()),
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Refusal::new(ReasonCode::ManifestInvalid, format!("manifest {} is not UTF-8", path.display())))?;
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
