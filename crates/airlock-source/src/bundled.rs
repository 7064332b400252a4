//! The bundled source tools (`tools/*.clad.toml` at the repository root),
//! built into the binary with `include_str!` so `airlock query` works in any
//! project. A project's `tools_dir` may replace one only with a valid source
//! manifest of the same operation (the runtime refuses anything else as
//! `source.shadowed`).

/// `(operation, manifest text)` of every bundled source tool.
pub const BUNDLED: &[(&str, &str)] = &[
    ("read_file", include_str!("../../../tools/read_file.clad.toml")),
    ("list_files", include_str!("../../../tools/list_files.clad.toml")),
    ("grep_files", include_str!("../../../tools/grep_files.clad.toml")),
    ("git_status", include_str!("../../../tools/git_status.clad.toml")),
    ("git_log", include_str!("../../../tools/git_log.clad.toml")),
    ("git_diff", include_str!("../../../tools/git_diff.clad.toml")),
    ("git_staged_diff", include_str!("../../../tools/git_staged_diff.clad.toml")),
];

/// The bundled manifest of `name`, if there is one.
pub fn bundled(name: &str) -> Option<&'static str> {
    BUNDLED.iter().find(|(n, _)| *n == name).map(|(_, text)| *text)
}
