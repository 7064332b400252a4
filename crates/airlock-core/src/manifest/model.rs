//! The typed sections of a manifest, exactly as serde reads them.
//!
//! Every struct here refuses keys it does not know (`deny_unknown_fields`),
//! so a misspelt key is an error that names the key and its line, never a
//! silently ignored setting. Meaning is checked elsewhere (`args`, `command`,
//! `filesystem`, `unsupported`); this file only says what may be written.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// `Display` as the name written in a manifest.
macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}

display_as_str!(Mode, RiskTier, Dispatch, OutputFormat);

/// `[tool] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One process per call (the only mode airlock executes).
    #[default]
    Oneshot,
    /// A long-lived interactive CLI session (ToolClad session mode).
    Session,
    /// A browser driven over CDP (ToolClad browser mode).
    Browser,
}

impl Mode {
    /// The name as written in a manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Oneshot => "oneshot",
            Mode::Session => "session",
            Mode::Browser => "browser",
        }
    }
}

/// `[tool] risk_tier`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RiskTier {
    /// Low risk (the default).
    #[default]
    Low,
    /// Medium risk.
    Medium,
    /// High risk.
    High,
    /// Critical risk.
    Critical,
}

impl RiskTier {
    /// The name as written in a manifest (and in the descriptor).
    pub fn as_str(self) -> &'static str {
        match self {
            RiskTier::Low => "low",
            RiskTier::Medium => "medium",
            RiskTier::High => "high",
            RiskTier::Critical => "critical",
        }
    }
}

/// `[tool] dispatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dispatch {
    /// The tool is run by an execution backend (the default).
    #[default]
    Exec,
    /// Validation only; the embedding dispatches the call itself.
    Callback,
}

impl Dispatch {
    /// The name as written in a manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            Dispatch::Exec => "exec",
            Dispatch::Callback => "callback",
        }
    }
}

/// `[output] format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// Unstructured text.
    Text,
    /// One JSON document.
    Json,
    /// One JSON document a line.
    Jsonl,
    /// Comma-separated values.
    Csv,
    /// XML.
    Xml,
}

impl OutputFormat {
    /// The name as written in a manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputFormat::Text => "text",
            OutputFormat::Json => "json",
            OutputFormat::Jsonl => "jsonl",
            OutputFormat::Csv => "csv",
            OutputFormat::Xml => "xml",
        }
    }
}

fn default_timeout() -> u64 {
    60
}

fn default_true() -> bool {
    true
}

/// `[tool]`: what the tool is.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolMeta {
    /// Tool name: `[a-z][a-z0-9_-]{0,63}`.
    pub name: String,
    /// Version of the tool (free text, not empty).
    pub version: String,
    /// The program, as ToolClad documents it (informational; argv comes from `[command]`).
    pub binary: Option<String>,
    /// What the tool does, for people and MCP clients.
    pub description: String,
    /// Execution mode.
    #[serde(default)]
    pub mode: Mode,
    /// Wall-clock limit in seconds (at least 1).
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
    /// Risk tier, for policy.
    #[serde(default)]
    pub risk_tier: RiskTier,
    /// Whether every call needs an exact-call human approval.
    #[serde(default)]
    pub human_approval: bool,
    /// Who dispatches the call.
    #[serde(default)]
    pub dispatch: Dispatch,
    /// `[tool.cedar]`.
    pub cedar: Option<CedarMeta>,
    /// `[tool.evidence]`.
    pub evidence: Option<EvidenceMeta>,
    /// `[tool.limits]` (airlock extension).
    pub limits: Option<ToolLimits>,
    /// `[tool.sandbox]` (airlock extension): where the tool's worker runs.
    pub sandbox: Option<ToolSandbox>,
}

/// `[tool.sandbox]` (airlock extension).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSandbox {
    /// The tier every call of the tool must run on (it must be in the
    /// operator's `[sandbox] tiers`; a call that asks for another is refused).
    pub tier: Option<crate::tier_settings::Tier>,
}

/// `[tool.cedar]`: the Cedar resource and action of the tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CedarMeta {
    /// Cedar resource, e.g. `Tool::NmapScan`.
    pub resource: String,
    /// Cedar action, e.g. `execute_tool`.
    pub action: String,
}

fn default_hash() -> String {
    "sha256".to_owned()
}

/// `[tool.evidence]`: ToolClad's raw-output capture.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceMeta {
    /// Where evidence goes: `{evidence_dir}` (airlock's state `evidence/`)
    /// and plain names or `{scan_id}` after it (see `evidence.rs`).
    pub output_dir: String,
    /// Whether the raw stdout and stderr are kept as evidence blobs.
    #[serde(default)]
    pub capture: bool,
    /// Hash algorithm name.
    #[serde(default = "default_hash")]
    pub hash: String,
}

/// `[tool.limits]` (airlock extension): per-call resource limits for the worker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolLimits {
    /// Address-space limit in bytes.
    pub memory_bytes: Option<u64>,
    /// CPU time in seconds.
    pub cpu_seconds: Option<u64>,
    /// Most processes and threads.
    pub pids: Option<u64>,
    /// Most open file descriptors.
    pub open_files: Option<u64>,
    /// Private scratch space in bytes.
    pub scratch_bytes: Option<u64>,
}

/// `[args.NAME]`: one argument.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgDef {
    /// Positional index: positional values fill arguments in ascending order.
    pub position: Option<u32>,
    /// Whether a value (or a default) must be present.
    #[serde(default)]
    pub required: bool,
    /// Default value (a TOML string, integer, float or boolean).
    pub default: Option<toml::Value>,
    /// What the argument means, for people and MCP clients.
    pub description: Option<String>,
    /// Type name (see [`ArgType`](super::ArgType)).
    #[serde(rename = "type")]
    pub type_name: String,
    /// Accepted values (`enum`; a further constraint on other string types).
    pub allowed: Option<Vec<String>>,
    /// Regular expression: a full match for most types, a search for `literal_text`.
    pub pattern: Option<String>,
    /// Sanitizers; only `injection` is supported: it keeps the shell
    /// metacharacter refusal even where an exec-form `string` would take them.
    pub sanitize: Option<Vec<String>>,
    /// Lower bound (`integer`, `port`, `duration` in seconds; `number` fallback).
    pub min: Option<i64>,
    /// Upper bound (`integer`, `port`, `duration` in seconds; `number` fallback).
    pub max: Option<i64>,
    /// Lower bound for `number`.
    pub min_float: Option<f64>,
    /// Upper bound for `number`.
    pub max_float: Option<f64>,
    /// Clamp out-of-range numbers to the bounds instead of refusing them.
    #[serde(default)]
    pub clamp: bool,
    /// URL schemes allowed for `url` (a subset of `http`, `https`).
    pub schemes: Option<Vec<String>>,
    /// ToolClad scope validation (not executed by airlock).
    #[serde(default)]
    pub scope_check: bool,
    /// ToolClad's internal-range blocking for scope targets (not executed by airlock).
    #[serde(default)]
    pub block_internal: bool,
}

/// `[command]`: how argv is built.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandDef {
    /// One argv word an element; placeholders substituted, never re-split.
    pub exec: Option<Vec<String>>,
    /// A command line split into words with shell-like quoting before substitution.
    pub template: Option<String>,
    /// ToolClad's wrapper-script escape hatch (not executed by airlock).
    pub executor: Option<String>,
    /// Insert `--` before the first word that holds a placeholder (airlock extension).
    #[serde(default)]
    pub end_of_options: bool,
    /// `[command.defaults]`: values for placeholders that are not arguments, and
    /// defaults for arguments that have none of their own.
    #[serde(default)]
    pub defaults: BTreeMap<String, toml::Value>,
    /// `[command.mappings]`: an argument's value → literal flags (see `mapping.rs`).
    pub mappings: Option<BTreeMap<String, BTreeMap<String, String>>>,
    /// `[command.conditionals]`: fragments included when a condition holds.
    pub conditionals: Option<BTreeMap<String, ConditionalDef>>,
}

/// `[command.conditionals.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionalDef {
    /// The condition.
    pub when: String,
    /// The fragment included when the condition holds.
    pub template: String,
}

/// `[output]`: what the tool prints.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputDef {
    /// Output format.
    pub format: OutputFormat,
    /// `builtin:<format>` or a parser program (only the former is executed).
    pub parser: Option<String>,
    /// Whether the result is wrapped in an envelope.
    #[serde(default = "default_true")]
    pub envelope: bool,
    /// Most bytes of output kept (airlock extension; at least 1).
    pub max_bytes: Option<u64>,
    /// JSON-Schema-like description of the parsed output.
    pub schema: Option<toml::Table>,
    /// The tool's standard output is written to this declared output
    /// (airlock extension): the `[filesystem] create` entry exactly as
    /// written, e.g. `"{output}"`. See `output_file.rs`.
    pub stdout_file: Option<String>,
}

impl OutputDef {
    /// The builtin parser the output is read with, as ToolClad picks it:
    /// `parser = "builtin:NAME"` (`text`, `json`, `jsonl`, `csv`, `xml`),
    /// else `format`. `None` for a custom parser or an unknown builtin.
    pub fn builtin(&self) -> Option<OutputFormat> {
        let Some(parser) = self.parser.as_deref() else { return Some(self.format) };
        let name = parser.strip_prefix("builtin:")?;
        [OutputFormat::Text, OutputFormat::Json, OutputFormat::Jsonl, OutputFormat::Csv, OutputFormat::Xml]
            .into_iter()
            .find(|f| f.as_str() == name)
    }

    /// The custom parser program, when `parser` is neither empty nor
    /// `builtin:…`: an absolute, normal path inside the worker image (no `.`
    /// or `..` component, no NUL). Anything else is not a custom parser.
    pub fn custom_parser(&self) -> Option<&str> {
        let p = self.parser.as_deref()?;
        let rest = p.strip_prefix('/')?;
        let normal =
            !rest.is_empty() && !p.contains('\0') && rest.split('/').all(|c| !c.is_empty() && c != "." && c != "..");
        normal.then_some(p)
    }
}

/// `[filesystem]`: the files one call may read and create.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemDef {
    /// Inputs: literal relative paths or whole `{arg}` references.
    #[serde(default)]
    pub read: Vec<String>,
    /// The one new output, same forms as `read`.
    #[serde(default)]
    pub create: Vec<String>,
    /// The output's size bound (1 B … what `[limits] max_file_bytes` allows).
    pub max_file_bytes: Option<u64>,
    /// Each input's size bound (1 B … what `[limits] max_input_file_bytes`
    /// allows); unset, the operator's limit, whatever `max_file_bytes` says.
    pub max_input_file_bytes: Option<u64>,
    /// Missing parent directories of the output may be made beneath its
    /// read-write ceiling (airlock extension; default `false`: the parent
    /// must exist).
    #[serde(default)]
    pub create_parents: bool,
}

/// `[source]`: a bounded source query (executed by a later component).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceDef {
    /// The query operation, e.g. `read_file`.
    pub operation: String,
}
