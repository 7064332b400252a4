//! Shared fixtures: tools and descriptors built with airlock-core's own types.

#![allow(dead_code)]

use airlock_core::descriptor::{
    sha256_tagged, CommandBoundary, Descriptor, DirIdentity, FilesystemBoundary, ReadGrant, DESCRIPTOR_VERSION,
};
use airlock_core::RelPath;
use airlock_policy::{ArgKind, PolicyError, PolicySet, Request, ToolSpec, Verdict};
use serde_json::Value;
use std::collections::BTreeMap;

/// `copy`: args `input` and `output` (paths).
pub fn copy_tool() -> ToolSpec {
    ToolSpec {
        name: "copy".into(),
        action: None,
        resource: None,
        args: vec![("input".into(), ArgKind::String), ("output".into(), ArgKind::String)],
    }
}

/// `convert`: a string `mode`, a Long `level` and a Bool `verbose` beside the paths.
pub fn convert_tool() -> ToolSpec {
    ToolSpec {
        name: "convert".into(),
        action: None,
        resource: None,
        args: vec![
            ("input".into(), ArgKind::String),
            ("output".into(), ArgKind::String),
            ("mode".into(), ArgKind::String),
            ("level".into(), ArgKind::Long),
            ("verbose".into(), ArgKind::Bool),
        ],
    }
}

/// One read: path, content.
pub struct Call {
    pub tool: String,
    pub risk_tier: String,
    pub human_approval: bool,
    pub reads: Vec<(String, Vec<u8>)>,
    pub create: Option<String>,
    pub max_file_bytes: u64,
    pub parent: Option<(u64, u64)>,
    pub args: BTreeMap<String, String>,
}

impl Call {
    /// `copy data/in.txt results/out.txt`, low risk.
    pub fn copy(input: &str, output: &str) -> Call {
        Call {
            tool: "copy".into(),
            risk_tier: "low".into(),
            human_approval: false,
            reads: vec![(input.into(), b"hello\n".to_vec())],
            create: Some(output.into()),
            max_file_bytes: 1 << 20,
            parent: Some((2049, 131)),
            args: BTreeMap::from([("input".into(), input.into()), ("output".into(), output.into())]),
        }
    }

    pub fn descriptor(&self) -> Descriptor {
        let reads = self
            .reads
            .iter()
            .map(|(p, bytes)| ReadGrant { path: p.clone(), bytes: bytes.len() as u64, sha256: sha256_tagged(bytes) })
            .collect();
        let create = self.create.as_deref().map(|c| RelPath::parse(c).unwrap());
        Descriptor {
            version: DESCRIPTOR_VERSION,
            tool: self.tool.clone(),
            tool_version: "1.0".into(),
            manifest_sha256: sha256_tagged(b"manifest"),
            args: self.args.clone(),
            argv: vec![self.tool.clone()].into_iter().chain(self.args.values().cloned()).collect(),
            transport: "exec".into(),
            risk_tier: self.risk_tier.clone(),
            human_approval: self.human_approval,
            working_dir: "/workspace".into(),
            tier: "native".into(),
            command_boundary: CommandBoundary {
                filesystem: FilesystemBoundary::new(
                    reads,
                    create.as_ref(),
                    self.max_file_bytes,
                    self.parent.map(|(d, i)| DirIdentity::new(d, i)),
                ),
            },
            policy_bundle: None,
        }
    }

    pub fn json(&self) -> Value {
        serde_json::to_value(self.descriptor()).unwrap()
    }

    /// Authorizes this call of `tool` under `set`.
    pub fn authorize(&self, set: &PolicySet, tool: &ToolSpec) -> Result<Verdict, PolicyError> {
        let json = self.json();
        set.authorize(&Request {
            principal: "agent-1",
            tool,
            risk_tier: &self.risk_tier,
            human_approval: self.human_approval,
            descriptor: &json,
            invocation_id: "inv-1",
            approved: false,
        })
    }
}

/// Loads one file named `test.cedar`.
pub fn load(text: &str, tools: &[ToolSpec]) -> Result<PolicySet, PolicyError> {
    PolicySet::load(&[("test.cedar".to_owned(), text.to_owned())], tools)
}

/// A permit for everything, to pair with forbids.
pub const PERMIT_ALL: &str = "@id(\"permit-all\")\npermit(principal, action, resource);\n";

/// The filesystem boundary's path in a policy.
pub const FS: &str = "context.invocation.resolved.command_boundary.filesystem";
