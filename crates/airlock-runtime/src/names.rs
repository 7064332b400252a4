//! Tool names: which manifest in `tools_dir` a name means.
//!
//! A manifest answers to two names: its file name without `.clad.toml`
//! and its `[tool] name`. `run`, `prepare`, `tools schema` and the MCP
//! catalog all look a name up here, so a tool has the same names
//! everywhere. A name two manifests answer to is refused
//! (`manifest.ambiguous`) rather than one of them picked; a name no
//! manifest answers to is refused (`manifest.not_found`) with the closest
//! names in the message.

use airlock_core::manifest::Manifest;
use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::HostAuthority;
use std::path::{Path, PathBuf};

/// The suffix of a manifest file in `tools_dir`.
pub const MANIFEST_SUFFIX: &str = ".clad.toml";

/// Largest manifest file read.
pub const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;

/// Every `*.clad.toml` in `tools_dir`, sorted.
pub fn list_manifests(authority: &HostAuthority, tools_dir: &Path) -> Vec<PathBuf> {
    authority.files_in(tools_dir, is_manifest_name)
}

/// Whether a file of that name in a tools directory is a manifest.
pub fn is_manifest_name(name: &str) -> bool {
    name.ends_with(MANIFEST_SUFFIX)
}

/// One manifest of `tools_dir` and the names it answers to.
#[derive(Debug)]
struct Named {
    path: PathBuf,
    /// The file name without [`MANIFEST_SUFFIX`].
    stem: String,
    /// `[tool] name`, when the manifest parses.
    name: Option<String>,
}

/// The manifests of a tools directory by name, read once.
#[derive(Debug)]
pub struct ToolIndex {
    tools_dir: PathBuf,
    entries: Vec<Named>,
}

impl ToolIndex {
    /// Reads every `*.clad.toml` in `tools_dir` for its names. A manifest
    /// that does not parse answers to its file name only (loading it then
    /// reports why it does not parse).
    pub fn read(authority: &HostAuthority, tools_dir: &Path) -> ToolIndex {
        let entries = list_manifests(authority, tools_dir)
            .into_iter()
            .map(|path| {
                let file = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                let stem = file.strip_suffix(MANIFEST_SUFFIX).unwrap_or(file).to_owned();
                let name = authority
                    .read_text(&path, MAX_MANIFEST_BYTES)
                    .and_then(|text| Manifest::parse(&text, "").ok())
                    .map(|m| m.name().to_owned());
                Named { path, stem, name }
            })
            .collect();
        ToolIndex { tools_dir: tools_dir.to_path_buf(), entries }
    }

    /// The manifest answering to `name`: `Ok(None)` when none does;
    /// `manifest.ambiguous` when two or more do, or when the one found has a
    /// `[tool] name` another manifest answers to too (policy and the
    /// journal know a tool by that name, so it must be its own).
    pub fn find(&self, name: &str) -> Result<Option<&Path>, Refusal> {
        let claims: Vec<&Named> =
            self.entries.iter().filter(|e| e.stem == name || e.name.as_deref() == Some(name)).collect();
        match claims.as_slice() {
            [] => Ok(None),
            [one] => match one.name.as_deref() {
                Some(own) if own != name => self.find(own).map(|_| Some(one.path.as_path())),
                _ => Ok(Some(&one.path)),
            },
            many => {
                let who: Vec<String> = many
                    .iter()
                    .map(|e| {
                        let how = if e.stem == name { "by its file name" } else { "by its [tool] name" };
                        format!("{} ({how})", e.path.display())
                    })
                    .collect();
                Err(Refusal::new(
                    ReasonCode::ManifestAmbiguous,
                    format!(
                        "the tool name {name:?} is claimed by {} manifests: {}; airlock will not pick one. Rename \
                         one of them (file name and [tool] name) so each tool has a name of its own",
                        many.len(),
                        who.join(", ")
                    ),
                ))
            }
        }
    }

    /// `manifest.not_found` for `name`, naming the closest known names
    /// (`also` adds names that live outside the directory, the bundled tools).
    pub fn not_found<'a>(&'a self, name: &str, also: impl IntoIterator<Item = &'a str>) -> Refusal {
        let known = self.entries.iter().flat_map(|e| std::iter::once(e.stem.as_str()).chain(e.name.as_deref()));
        let close = closest(name, known.chain(also));
        let hint = match close.as_slice() {
            [] => format!("`airlock tools list` shows the tools in {}", self.tools_dir.display()),
            names => {
                let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
                format!("did you mean {}?", quoted.join(" or "))
            }
        };
        Refusal::new(ReasonCode::ManifestNotFound, format!("no tool {name:?} in {}; {hint}", self.tools_dir.display()))
    }
}

/// At most three of `candidates` within a small edit distance of `name`
/// (1 for short names, up to a third of the length for longer ones),
/// nearest first.
fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    let mut near: Vec<(usize, &str)> =
        candidates.map(|c| (edit_distance(name, c), c)).filter(|(d, _)| *d <= limit).collect();
    near.sort();
    near.dedup_by(|a, b| a.1 == b.1);
    near.into_iter().take(3).map(|(_, c)| c).collect()
}

/// Levenshtein distance over characters (insert, delete, substitute).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != *cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("sqlite_report", "sqlite-report"), 1);
        assert_eq!(edit_distance("wordcont", "wordcount"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[test]
    fn closest_keeps_near_names_only() {
        let names = ["sqlite-report", "wordcount", "read_file", "grep_files"];
        assert_eq!(closest("sqlite_report", names.iter().copied()), vec!["sqlite-report"]);
        assert_eq!(closest("zzz", names.iter().copied()), Vec::<&str>::new());
        assert_eq!(closest("read_fil", names.iter().copied()), vec!["read_file"]);
    }
}
