//! The descriptor: everything policy needs to know about one resolved call,
//! as canonical JSON (RFC 8785) with its SHA-256 digest.
//!
//! It binds the tool, the argv after substitution, the transport, the risk
//! tier and the file boundary (each input's path, size and hash, the one
//! output's path, the size limit, and the held output parent's identity).
//! It never holds a byte of input content. Cedar sees it at
//! `context.invocation.resolved`. Its layout is a contract (DESIGN.md §3,
//! "Descriptor"), and three choices shape it:
//!
//! - `dev` and `ino` are decimal strings: 64-bit values do not survive
//!   RFC 8785's IEEE-754 number rules.
//! - `read_paths`, `read_sha256` and `create_paths` repeat `reads` and
//!   `create` as flat sets, because Cedar cannot quantify over a set of
//!   records.
//! - The manifest's digest is bound, so a changed manifest is a different
//!   call.
//!
//! The optional sections (`source`, `snapshot`, `broker`) are left out when
//! absent, so adding one did not change the descriptors or digests of the
//! calls that have none.

use crate::path::RelPath;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Version of the descriptor layout; bump on any change of meaning.
pub const DESCRIPTOR_VERSION: u32 = 2;

/// One input as bound into the descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ReadGrant {
    /// Path relative to the working directory.
    pub path: String,
    /// Snapshot size in bytes.
    pub bytes: u64,
    /// `sha256:` and the lowercase hex digest of the snapshot.
    pub sha256: String,
}

/// A directory's identity on the host. Numbers are decimal strings so that
/// 64-bit values survive JSON and RFC 8785 number rules exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DirIdentity {
    /// `st_dev`.
    pub dev: String,
    /// `st_ino`.
    pub ino: String,
}

impl DirIdentity {
    /// From raw `st_dev` and `st_ino`.
    pub fn new(dev: u64, ino: u64) -> Self {
        DirIdentity { dev: dev.to_string(), ino: ino.to_string() }
    }
}

/// `command_boundary.filesystem`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FilesystemBoundary {
    /// Inputs, in declaration order.
    pub reads: Vec<ReadGrant>,
    /// The new output, if any (at most one).
    pub create: Vec<String>,
    /// Per-file size bound.
    pub max_file_bytes: u64,
    /// Always true: the worker sees snapshots taken at prepare.
    pub input_snapshots: bool,
    /// Always false: an existing output is never replaced.
    pub overwrite: bool,
    /// Identity of the held output parent directory, when there is an output
    /// (with `create_dirs`, of its deepest existing ancestor, which is held).
    pub output_parent: Option<DirIdentity>,
    /// The missing parent directories of the output the call will make
    /// beneath `output_parent`, outermost first, as paths relative to the
    /// working directory (`[filesystem] create_parents`); absent when none
    /// is missing, so other descriptors and digests are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_dirs: Option<Vec<String>>,
    /// Flat set of read paths (Cedar cannot quantify over records).
    pub read_paths: Vec<String>,
    /// Flat set of read hashes.
    pub read_sha256: Vec<String>,
    /// Flat set of create paths.
    pub create_paths: Vec<String>,
    /// The evidence of a source query (absent for a command tool, so a
    /// command tool's descriptor and digest are unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<crate::source::SourceBoundary>,
    /// For a source query over a repository snapshot (e.g. `git_status`):
    /// what the one private snapshot holds. Absent for tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotBinding>,
    /// For an isolated submission: its named roots, budgets and helper
    /// digests. Absent for other calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker: Option<crate::broker::BrokerBoundary>,
}

/// What a repository snapshot holds, bound into the descriptor so policy
/// can bound it and the evidence names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SnapshotBinding {
    /// `git`.
    pub kind: String,
    /// Regular files and links recorded.
    pub files: u64,
    /// Of them, files recorded by their stat data alone (size, mode,
    /// time): their content was never read, as the index says the query
    /// does not need it (unchanged tracked files, untracked files).
    #[serde(default)]
    pub stat_only: u64,
    /// Bytes of file content copied.
    pub bytes: u64,
    /// Size of the archive the worker receives.
    pub archive_bytes: u64,
    /// `sha256:` digest of that archive.
    pub sha256: String,
    /// Files found with more than one hard link on the host, all left out
    /// (the default policy refuses a snapshot where this is not 0).
    pub linked_files: u64,
    /// Entries left out (control directories, hard-linked and special
    /// files, mount crossings, alternates, …).
    pub skipped: u64,
}

impl FilesystemBoundary {
    /// Builds the boundary and its flat sets.
    pub fn new(
        reads: Vec<ReadGrant>,
        create: Option<&RelPath>,
        max_file_bytes: u64,
        output_parent: Option<DirIdentity>,
    ) -> Self {
        let create: Vec<String> = create.map(|p| p.as_str().to_owned()).into_iter().collect();
        FilesystemBoundary {
            read_paths: reads.iter().map(|r| r.path.clone()).collect(),
            read_sha256: reads.iter().map(|r| r.sha256.clone()).collect(),
            create_paths: create.clone(),
            reads,
            create,
            max_file_bytes,
            input_snapshots: true,
            overwrite: false,
            output_parent,
            create_dirs: None,
            source: None,
            snapshot: None,
            broker: None,
        }
    }
}

/// `command_boundary`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CommandBoundary {
    /// The file boundary; absent for a tool without `[filesystem]`.
    pub filesystem: FilesystemBoundary,
}

/// The resolved call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Descriptor {
    /// Layout version.
    pub version: u32,
    /// Tool name.
    pub tool: String,
    /// Tool version from the manifest.
    pub tool_version: String,
    /// `sha256:` digest of the manifest's bytes.
    pub manifest_sha256: String,
    /// The validated arguments, as the strings substituted into argv.
    pub args: BTreeMap<String, String>,
    /// The argv after substitution.
    pub argv: Vec<String>,
    /// How the tool is reached (`exec` for a command).
    pub transport: String,
    /// The manifest's risk tier.
    pub risk_tier: String,
    /// Whether the manifest demands human approval.
    pub human_approval: bool,
    /// Where the worker sees declared paths.
    pub working_dir: String,
    /// The worker tier the call runs on (`native`, `gvisor`, `docker`,
    /// `docker+runsc`, …; `none` for a shape that starts no worker), so that
    /// a policy can require one.
    pub tier: String,
    /// The resolved boundary.
    pub command_boundary: CommandBoundary,
    /// The cluster's Cedar bundle the call is authorized under, when the
    /// edge takes its policy from the cluster (`[cluster] policy_bundle`);
    /// absent otherwise (and then not part of the digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_bundle: Option<PolicyBundle>,
}

/// Which revision of the cluster's policy bundle decides a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyBundle {
    /// The bucket's revision.
    pub revision: u64,
    /// `sha256:` of the bundle's bytes.
    pub sha256: String,
}

/// Who a call is for, as the catalog knows the tool: the part of a
/// descriptor that does not depend on the call's arguments or files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolIdentity {
    /// Tool name.
    pub name: String,
    /// Tool version (the manifest's, or airlock's for a built-in).
    pub version: String,
    /// `sha256:` digest of the manifest's bytes, or `builtin`.
    pub manifest_sha256: String,
    /// Risk tier (`low`, `medium`, `high`, `critical`).
    pub risk_tier: String,
    /// Whether the tool demands a human's approval of each call.
    pub human_approval: bool,
}

impl ToolIdentity {
    /// A tool built into airlock (`manifest_sha256` is `builtin`).
    pub fn builtin(name: &str, version: &str, risk_tier: &str) -> Self {
        ToolIdentity {
            name: name.to_owned(),
            version: version.to_owned(),
            manifest_sha256: "builtin".to_owned(),
            risk_tier: risk_tier.to_owned(),
            human_approval: false,
        }
    }
}

/// What one call resolved to, beside its tool: the parts of a descriptor
/// each call shape fills in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallShape {
    /// How the tool is reached (`exec`, `source`, `git-snapshot`, `isolated`).
    pub transport: String,
    /// The validated arguments.
    pub args: BTreeMap<String, String>,
    /// The argv after substitution.
    pub argv: Vec<String>,
    /// Where the worker sees declared paths.
    pub working_dir: String,
    /// The worker tier (see [`Descriptor::tier`]).
    pub tier: String,
    /// The resolved file boundary.
    pub filesystem: FilesystemBoundary,
}

impl Descriptor {
    /// The one way a descriptor is built, for every call shape.
    pub fn new(tool: &ToolIdentity, shape: CallShape) -> Descriptor {
        Descriptor {
            version: DESCRIPTOR_VERSION,
            tool: tool.name.clone(),
            tool_version: tool.version.clone(),
            manifest_sha256: tool.manifest_sha256.clone(),
            args: shape.args,
            argv: shape.argv,
            transport: shape.transport,
            risk_tier: tool.risk_tier.clone(),
            human_approval: tool.human_approval,
            working_dir: shape.working_dir,
            tier: shape.tier,
            command_boundary: CommandBoundary { filesystem: shape.filesystem },
            policy_bundle: None,
        }
    }

    /// RFC 8785 canonical JSON bytes.
    pub fn canonical_json(&self) -> Vec<u8> {
        canonical_json(self)
    }

    /// `sha256:` and the hex digest of [`Descriptor::canonical_json`].
    pub fn digest(&self) -> String {
        sha256_tagged(&self.canonical_json())
    }
}

/// RFC 8785 canonical JSON of any serializable value.
pub fn canonical_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json_canonicalizer::to_vec(value).expect("descriptor values are always representable as JSON")
}

/// `sha256:` followed by the lowercase hex SHA-256 of `bytes`.
pub fn sha256_tagged(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Descriptor {
        let reads = vec![ReadGrant { path: "data/in.txt".into(), bytes: 3, sha256: sha256_tagged(b"abc") }];
        let tool = ToolIdentity {
            name: "wc".into(),
            version: "1".into(),
            manifest_sha256: sha256_tagged(b"m"),
            risk_tier: "low".into(),
            human_approval: false,
        };
        Descriptor::new(
            &tool,
            CallShape {
                transport: "exec".into(),
                args: BTreeMap::from([("input".into(), "data/in.txt".into())]),
                argv: vec!["wc".into(), "data/in.txt".into()],
                working_dir: "/workspace".into(),
                tier: "native".into(),
                filesystem: FilesystemBoundary::new(
                    reads,
                    Some(&RelPath::parse("out/r.json").unwrap()),
                    8,
                    Some(DirIdentity::new(u64::MAX, 7)),
                ),
            },
        )
    }

    #[test]
    fn canonical_form_is_sorted_and_compact() {
        let json = String::from_utf8(sample().canonical_json()).unwrap();
        assert!(json.starts_with(r#"{"args":{"input":"data/in.txt"},"argv":["wc","data/in.txt"],"command_boundary":{"filesystem":{"create":["out/r.json"]"#), "{json}");
        assert!(json.contains(r#""output_parent":{"dev":"18446744073709551615","ino":"7"}"#));
        assert!(!json.contains(' ') || json.contains("\" \""));
    }

    #[test]
    fn digest_changes_with_any_field() {
        let a = sample();
        let mut b = sample();
        b.command_boundary.filesystem.reads[0].bytes = 4;
        assert_ne!(a.digest(), b.digest());
        assert_eq!(a.digest(), sample().digest());
        assert!(a.digest().starts_with("sha256:") && a.digest().len() == 71);
    }
}
