//! Finding and reading `[policy] files`, and checking them at start-up
//! against the tools in the tools directory, so that a syntax or schema
//! error stops airlock naming the file and line.

use crate::{catalog, control};
use airlock_core::{Config, ReasonCode, Refusal};
use airlock_hostfs::HostAuthority;
use std::path::{Path, PathBuf};

/// Largest policy file read.
pub const MAX_POLICY_BYTES: u64 = 1024 * 1024;

/// `*` matches any run of characters within one file name.
fn wildcard(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.starts_with(head) && (0..=name.len() - head.len()).any(|i| wildcard(tail, &name[head.len() + i..]))
        }
    }
}

/// The files the patterns name, relative to the config's directory; a `*`
/// may appear in the last component. A pattern that names nothing is an
/// error rather than silently no policy.
pub fn expand(authority: &HostAuthority, base: &Path, patterns: &[String]) -> Result<Vec<PathBuf>, Refusal> {
    let mut out = Vec::new();
    for pattern in patterns {
        let full = base.join(pattern);
        let name = full.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let found: Vec<PathBuf> = if name.contains('*') {
            let dir = full.parent().unwrap_or(base);
            authority.files_in(dir, |n| wildcard(&name, n))
        } else if authority.stat(&full).is_ok_and(|m| m.is_file()) {
            vec![full]
        } else {
            Vec::new()
        };
        if found.is_empty() {
            return Err(Refusal::new(ReasonCode::PolicyInvalid, format!("[policy] files: {pattern:?} names no file")));
        }
        out.extend(found);
    }
    Ok(out)
}

/// Reads every configured policy file as `(display name, text)` and checks
/// the set against every tool a policy may name (returned with it). Each file is a control
/// file: read without following a link, and refused unless it and its
/// directory are the caller's or root's and closed to others' writes.
pub fn load(authority: &HostAuthority, config: &Config) -> Result<crate::engine::CedarPolicy, Refusal> {
    let paths = expand(authority, &config.base_dir, &config.policy_files)?;
    let sources = read_all(authority, &paths, |path| path.strip_prefix(&config.base_dir).unwrap_or(path))?;
    compile(authority, config, sources)
}

/// Reads each of `paths` as a policy control file, as `(name, text)` with
/// the name `name_of(path)` shows.
pub(crate) fn read_all<'p>(
    authority: &HostAuthority,
    paths: &'p [PathBuf],
    name_of: impl Fn(&'p Path) -> &'p Path,
) -> Result<Vec<(String, String)>, Refusal> {
    paths
        .iter()
        .map(|path| {
            let text = control::read_text(authority, control::POLICY, path, MAX_POLICY_BYTES)?;
            Ok((name_of(path).display().to_string(), text))
        })
        .collect()
}

/// Compiles `sources`, checked against every tool of `config`'s tools
/// directory (local policy files and the cluster's bundle alike).
pub(crate) fn compile(
    authority: &HostAuthority,
    config: &Config,
    sources: Vec<(String, String)>,
) -> Result<crate::engine::CedarPolicy, Refusal> {
    crate::engine::CedarPolicy::load(sources, catalog::tool_specs(authority, &config.tools_dir))
}

#[cfg(test)]
mod tests {
    use super::wildcard;

    #[test]
    fn wildcards() {
        assert!(wildcard("*.cedar", "a.cedar"));
        assert!(wildcard("p-*-x.cedar", "p-1-x.cedar"));
        assert!(!wildcard("*.cedar", "a.cedar.bak"));
        assert!(wildcard("exact.cedar", "exact.cedar"));
    }
}
