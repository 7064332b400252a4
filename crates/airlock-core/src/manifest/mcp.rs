//! `[mcp]`: a tool whose worker is an upstream MCP server.
//!
//! ```toml
//! [mcp]
//! server = ["node", "/usr/lib/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "/workspace"]
//! tool = "read_text_file"          # the upstream tool each call invokes
//! [mcp.field_map]
//! input = "path"                   # local argument name = upstream argument name
//! [mcp.schema_pin]                 # optional: SchemaPin pin of the upstream tool's schema
//! key = "-----BEGIN PUBLIC KEY-----\n…"   # the signer's P-256 key, PEM
//! digest = "sha256:…"              # `airlock mcp pin TOOL` prints it
//! signature = "MEUCIQ…"            # SchemaPin's base64 signature of that schema
//! ```
//!
//! `server` is the argv of the server, started inside the native sandbox
//! with the call's own file grants (fixed words, never substituted, so a
//! call cannot change what runs; inline code such as `python3 -c …` is fine). Startup, discovery (`tools/list`) and the
//! one `tools/call` share one worker and one stdio connection. Every bound
//! argument is sent to the upstream tool under its `field_map` name (or its
//! own name); `[filesystem]` entries and placeholders use the local names.
//!
//! Refused, each with its own code: a server given by name, as ToolClad's
//! server registry does (`manifest.unsupported`); a malformed section (`mcp.invalid`);
//! `[mcp]` beside `[command]`, a custom `[output] parser` or a non-JSON
//! `[output] format` (`mcp.conflict`: there would be two things to run, or
//! an MCP result that no parser reads); a `field_map` entry for an argument
//! the manifest does not declare, or two arguments sent under one upstream
//! name (`mcp.field_map`); a `server` word that is exactly a declared
//! `{arg}` (`mcp.invalid`: server words are fixed). These are exit 65; at run time `mcp.protocol`, `mcp.tool_missing`
//! and `mcp.tool_error` are `failed` (exit 1), and the deadline is
//! `tool.timeout`.
//!
//! [`Manifest::build_argv`](super::Manifest::build_argv) returns the
//! server's argv, so the descriptor's `argv` is what runs; the upstream
//! arguments are a function of the bound arguments and the manifest, whose
//! digest the descriptor binds.
//!
//! Node in the worker: V8 reserves far more address space than it uses, so
//! an `[mcp]` manifest running node raises `[tool.limits] memory_bytes`
//! (`RLIMIT_AS`); at the 1 GiB default node dies at start-up. npm's global
//! modules live under `/usr` (`npm root -g`), inside the default image.

use super::model::OutputFormat;
use super::{BoundArgs, Manifest};
use crate::reason::{ReasonCode, Refusal};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Longest upstream tool name, in bytes.
pub const MAX_UPSTREAM_TOOL: usize = 128;

/// A checked `[mcp]` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSpec {
    /// The server's argv inside the worker.
    pub server: Vec<String>,
    /// The upstream tool each call invokes.
    pub tool: String,
    /// Local argument name → upstream argument name.
    #[serde(default)]
    pub field_map: BTreeMap<String, String>,
    /// `[mcp.schema_pin]`: the upstream tool's schema must be signed by
    /// this key and have this digest before the call's files are staged.
    #[serde(default)]
    pub schema_pin: Option<SchemaPin>,
}

/// `[mcp.schema_pin]`: a SchemaPin pin of the upstream tool's schema (the
/// tool object `tools/list` returns, canonicalized as SchemaPin does:
/// keys sorted, no whitespace).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaPin {
    /// The signer's ECDSA P-256 public key, PEM (SubjectPublicKeyInfo).
    pub key: String,
    /// `sha256:` and the hex SHA-256 of the canonical schema.
    pub digest: String,
    /// SchemaPin's signature of that schema: base64 of the DER ECDSA
    /// P-256 / SHA-256 signature over the 32-byte schema hash.
    pub signature: String,
}

/// Whether `digest` is `sha256:` and 64 lowercase hex digits.
pub fn is_schema_digest(digest: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

impl McpSpec {
    /// The upstream `tools/call` arguments of one call: every present
    /// argument in its JSON form, under its upstream name.
    pub fn arguments(&self, args: &BoundArgs) -> Map<String, Value> {
        let mut out = Map::new();
        if let Value::Object(values) = args.to_json() {
            for (local, value) in values {
                let upstream = self.field_map.get(&local).cloned().unwrap_or(local);
                out.insert(upstream, value);
            }
        }
        out
    }
}

/// Reads and checks `m`'s `[mcp]` section (`None` without one).
pub(crate) fn spec(m: &Manifest) -> Result<Option<McpSpec>, Refusal> {
    let Some(table) = &m.mcp else { return Ok(None) };
    let invalid = |why: String| Refusal::new(ReasonCode::McpInvalid, format!("{}: [mcp] {why}", m.origin));
    if let Some(name) = table.get("server").and_then(toml::Value::as_str) {
        // ToolClad's named servers come from a registry airlock does not have.
        return Err(Refusal::new(
            ReasonCode::ManifestUnsupported,
            format!(
                "{}: [mcp] server = {name:?} names a server from a registry airlock does not have; give the \
                 server's argv instead (server = [\"program\", \"arg\", …])",
                m.origin
            ),
        ));
    }
    let spec: McpSpec = toml::Value::Table(table.clone()).try_into().map_err(|e: toml::de::Error| {
        invalid(format!(
            "{} (expected server = [\"program\", \"arg\", …], tool = \"NAME\", optional [mcp.field_map])",
            e.message()
        ))
    })?;
    if spec.server.is_empty() || spec.server.iter().any(|w| w.is_empty() || w.contains('\0')) {
        return Err(invalid("server must be a non-empty list of non-empty words without NUL".into()));
    }
    // Words are never substituted; a word that looks like a whole
    // placeholder of a declared argument is a mistake, not a literal.
    if let Some(w) = spec
        .server
        .iter()
        .find(|w| w.strip_prefix('{').and_then(|r| r.strip_suffix('}')).is_some_and(|name| m.args.contains_key(name)))
    {
        return Err(invalid(format!("server word {w:?}: server words are fixed, placeholders are not substituted")));
    }
    let tool_ok = !spec.tool.is_empty()
        && spec.tool.len() <= MAX_UPSTREAM_TOOL
        && spec.tool.chars().all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
    if !tool_ok {
        return Err(invalid(format!("tool {:?} is not a valid MCP tool name", spec.tool)));
    }
    if let Some(pin) = &spec.schema_pin {
        if !is_schema_digest(&pin.digest) {
            return Err(invalid(format!(
                "schema_pin digest {:?} is not sha256: and 64 lowercase hex digits (`airlock mcp pin {}` prints it)",
                pin.digest, m.tool.name
            )));
        }
        if !pin.key.contains("-----BEGIN PUBLIC KEY-----") || pin.signature.is_empty() {
            return Err(invalid(
                "schema_pin needs key (a PEM public key), digest and signature (SchemaPin's base64)".into(),
            ));
        }
    }
    let conflict = |why: &str| Refusal::new(ReasonCode::McpConflict, format!("{}: [mcp] {why}", m.origin));
    if m.command.is_some() {
        return Err(conflict("and [command] both say what to run; an MCP tool's worker is its server"));
    }
    if let Some(out) = &m.output {
        if out.parser.is_some() {
            return Err(conflict("results are MCP tool results; [output] parser does not apply"));
        }
        if out.format != OutputFormat::Json {
            return Err(conflict("results are JSON; [output] format must be \"json\" or left out"));
        }
    }
    let mut upstream_names = BTreeMap::new();
    for name in m.args.keys() {
        let upstream = spec.field_map.get(name).unwrap_or(name);
        if let Some(other) = upstream_names.insert(upstream.clone(), name.clone()) {
            return Err(Refusal::new(
                ReasonCode::McpFieldMap,
                format!("{}: [mcp] arguments `{other}` and `{name}` would both be sent as `{upstream}`", m.origin),
            ));
        }
    }
    for (local, upstream) in &spec.field_map {
        if !m.args.contains_key(local) {
            return Err(Refusal::new(
                ReasonCode::McpFieldMap,
                format!("{}: [mcp.field_map] names `{local}`, which is not a declared argument", m.origin),
            ));
        }
        if upstream.is_empty() {
            return Err(Refusal::new(
                ReasonCode::McpFieldMap,
                format!("{}: [mcp.field_map] `{local}` maps to an empty name", m.origin),
            ));
        }
    }
    Ok(Some(spec))
}
