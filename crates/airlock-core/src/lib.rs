//! airlock-core: the pure model of airlock.
//!
//! Nothing here touches the host. It holds:
//!
//! - [`ReasonCode`], [`Status`] and the exit codes: the stable contract of
//!   every refusal (DESIGN.md §3);
//! - [`RelPath`]: the one path grammar every declared path passes;
//! - [`Limits`]: per-call bounds that configuration may lower or raise up to hard caps;
//! - [`Config`]: `airlock.toml`, with its ceilings;
//! - [`manifest`]: ToolClad-format manifests, argument validation and argv
//!   construction;
//! - [`source`]: the fixed source operations, their limits and evidence;
//! - [`Descriptor`]: the canonical (RFC 8785) description of a resolved call
//!   and its digest.
//!
//! ```
//! use airlock_core::{RelPath, ReasonCode};
//! assert!(RelPath::parse("data/input.csv").is_ok());
//! let refusal = RelPath::parse("data/../etc/passwd").unwrap_err();
//! assert_eq!(refusal.code, ReasonCode::PathTraversal);
//! assert_eq!(refusal.code.as_str(), "path.traversal");
//! ```
#![deny(missing_docs)]

pub mod approval;
pub mod broker;
pub mod cluster;
pub mod config;
pub mod descriptor;
pub mod envelope;
pub mod envelope_schema;
pub mod jcs;
pub mod limits;
pub mod manifest;
pub mod mcp_server;
pub mod modes;
pub mod output;
pub mod output_xml;
pub mod path;
pub mod reason;
pub mod record_version;
pub mod source;
pub mod state;
pub mod tier_settings;

pub use config::{Ceiling, CeilingMode, Config, JournalSettings, ResolverChoice, Tier};
pub use descriptor::{
    canonical_json, sha256_tagged, CallShape, CommandBoundary, Descriptor, DirIdentity, FilesystemBoundary,
    PolicyBundle, ReadGrant, SnapshotBinding, ToolIdentity,
};
pub use envelope::{
    stream_tail, CreatedFile, Envelope, ErrorBody, Evidence, JournalEvidence, LimitsEvidence, RecordRange, TAIL_BYTES,
};
pub use jcs::canonical_value;
pub use limits::{Limits, StagingLimits};
pub use mcp_server::McpServerConfig;
pub use path::{PathEntry, RelPath};
pub use reason::{exit, HasReason, ReasonCode, Refusal, Status};
pub use source::{SourceBoundary, SourceLimits, SourceOp, SourceRange};
