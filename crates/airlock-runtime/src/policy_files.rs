//! Finding and reading `[policy] files`, and checking them at start-up
//! against the tools in the tools directory, so that a syntax or schema
//! error stops airlock naming the file and line.

use crate::{control, tools};
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
pub fn expand(base: &Path, patterns: &[String]) -> Result<Vec<PathBuf>, Refusal> {
    let mut out = Vec::new();
    for pattern in patterns {
        let full = base.join(pattern);
        let name = full.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let found: Vec<PathBuf> = if name.contains('*') {
            let dir = full.parent().unwrap_or(base);
            let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_name().to_str().is_some_and(|n| wildcard(&name, n)))
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect();
            v.sort();
            v
        } else if full.is_file() {
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
/// the set against the tools in the tools directory. Each file is a control
/// file: read without following a link, and refused unless it and its
/// directory are the caller's or root's and closed to others' writes.
pub fn load(authority: &HostAuthority, config: &Config) -> Result<Vec<(String, String)>, Refusal> {
    let mut sources = Vec::new();
    for path in expand(&config.base_dir, &config.policy_files)? {
        let text = control::read_text(authority, control::POLICY, &path, MAX_POLICY_BYTES)?;
        let name = path.strip_prefix(&config.base_dir).unwrap_or(&path).display().to_string();
        sources.push((name, text));
    }
    let specs = tool_specs(&config.tools_dir);
    airlock_policy::PolicySet::load(&sources, &specs)
        .map_err(|e| Refusal::new(ReasonCode::PolicyInvalid, e.message().to_owned()))?;
    Ok(sources)
}

/// Every tool a policy may name, so that policies validate whatever tool a
/// call is for: the runnable manifests in `tools_dir`, the bundled source
/// tools it does not shadow, and the Git queries (whose Cedar shape the
/// Git engine defines, whatever manifest names them).
pub fn tool_specs(tools_dir: &std::path::Path) -> Vec<airlock_policy::ToolSpec> {
    let is_git = |m: &airlock_core::manifest::Manifest| matches!(m.source_operation(), Some(Ok(op)) if op.is_git());
    tools::list_manifests(tools_dir)
        .iter()
        .filter_map(|p| {
            std::fs::read_to_string(p).ok().and_then(|t| airlock_core::manifest::Manifest::parse(&t, "").ok())
        })
        .chain(crate::source::bundled_missing_from(tools_dir))
        .filter(|m| m.check_executable().is_ok() && !is_git(m))
        .map(|m| airlock_policy::ToolSpec::from_manifest(&m))
        .chain(crate::git_query::policy_specs())
        .chain(std::iter::once(crate::isolated::adhoc_policy_spec()))
        .collect()
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
