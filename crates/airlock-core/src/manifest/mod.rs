//! ToolClad-format manifests (`*.clad.toml`): parse, argument validation,
//! argv construction and the files of one call.
//!
//! [`Manifest::parse`] reads every section of the ToolClad format, refusing
//! unknown keys (the message names the key and its line) and anything
//! structurally wrong (`manifest.invalid`, or the path and limit codes of
//! `[filesystem]`). An existing ToolClad manifest loads unchanged even when
//! it uses features airlock does not execute; [`Manifest::check_executable`]
//! then refuses it with `manifest.unsupported` naming each feature. Each
//! kind of tool has its own section and rules: `[command]`, `[source]`
//! (`source.rs`), `[mcp]` (`mcp.rs`) and `[broker]` (named roots, beside
//! `[command]`; beside `[filesystem]`, `[source]` or `[mcp]` it is
//! `broker.conflict`).
//!
//! One call goes [`Manifest::bind_args`] → [`Manifest::filesystem_plan`] and
//! [`Manifest::build_argv`]. No shell is involved anywhere: values are
//! substituted into words that were fixed at parse.
//!
//! ```
//! use airlock_core::manifest::Manifest;
//! let m = Manifest::parse(r#"
//!     [tool]
//!     name = "wordcount"
//!     version = "1"
//!     description = "Count words"
//!     [args.input]
//!     position = 1
//!     required = true
//!     type = "path"
//!     [args.out]
//!     position = 2
//!     required = true
//!     type = "path"
//!     [command]
//!     exec = ["wc", "-w", "{input}", "--out={_output_file}"]
//!     [filesystem]
//!     read = ["{input}"]
//!     create = ["{out}"]
//! "#, "wordcount.clad.toml").unwrap();
//! m.check_executable().unwrap();
//! let args = m.bind_args(&["data/in.txt".into(), "results/wc.txt".into()], &[]).unwrap();
//! assert_eq!(m.build_argv(&args).unwrap(), ["wc", "-w", "data/in.txt", "--out=results/wc.txt"]);
//! assert_eq!(m.filesystem_plan(&args).unwrap().reads[0].as_str(), "data/in.txt");
//! ```

mod args;
mod bind;
mod command;
mod evidence;
mod filesystem;
mod mapping;
mod mcp;
mod model;
mod output_file;
mod output_schema;
mod schema;
mod scope;
mod session;
mod source;
mod template;
mod unsupported;

#[cfg(test)]
mod tests;

pub use args::{ArgType, MAX_VALUE_BYTES, SHELL_METACHARACTERS};
pub use bind::BoundArgs;
pub use command::END_OF_OPTIONS;
pub use evidence::EVIDENCE_DIR;
pub use filesystem::FilesystemPlan;
pub use mcp::{is_schema_digest, McpSpec, SchemaPin, MAX_UPSTREAM_TOOL};
pub use model::{
    ArgDef, CedarMeta, CommandDef, ConditionalDef, Dispatch, EvidenceMeta, FilesystemDef, Mode, OutputDef,
    OutputFormat, RiskTier, SourceDef, ToolLimits, ToolMeta,
};
pub use scope::SCOPE_TARGET_MAX_LEN;
pub use session::{SessionCommand, SessionSpec, DEFAULT_MAX_INTERACTION_BYTES};
pub use template::OUTPUT_FILE_PLACEHOLDER;

/// `[broker]` (airlock extension): the command runs isolated and reaches
/// named roots through the broker; `roots` are `NAME:RIGHTS`, the host path
/// of each name comes from the operator's `airlock.toml` `[broker.roots]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerDef {
    /// `NAME:RIGHTS` entries, e.g. `["data:r", "out:wl"]`.
    pub roots: Vec<String>,
}

use crate::descriptor::sha256_tagged;
use crate::reason::{ReasonCode, Refusal};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Longest tool name, in bytes.
pub const MAX_TOOL_NAME: usize = 64;

/// The whole file, as serde reads it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    tool: ToolMeta,
    #[serde(default)]
    args: BTreeMap<String, ArgDef>,
    command: Option<CommandDef>,
    output: Option<OutputDef>,
    filesystem: Option<FilesystemDef>,
    source: Option<SourceDef>,
    broker: Option<BrokerDef>,
    mcp: Option<toml::Table>,
    session: Option<toml::Table>,
    http: Option<toml::Table>,
    browser: Option<toml::Table>,
}

/// What parse derives from the sections: compiled patterns, command words,
/// resolved `[filesystem]` entries.
#[derive(Debug, Clone)]
struct Compiled {
    args: BTreeMap<String, args::ArgRule>,
    command: Option<command::CompiledCommand>,
    filesystem: filesystem::CompiledFilesystem,
    /// `[output] stdout_file`: the tool's stdout is its output file.
    stdout_output: bool,
    /// `[output] schema`, compiled.
    output_schema: Option<output_schema::OutputSchema>,
    /// `[tool.evidence]` with `capture = true`: where the blobs go.
    evidence: Option<evidence::EvidenceDir>,
    /// `[session]`, compiled.
    session: Option<session::SessionSpec>,
}

/// A parsed, structurally checked manifest.
///
/// The public fields are the manifest as written; what airlock derives from
/// them (compiled patterns, command words) is fixed at parse, so changing a
/// field afterwards does not change how calls are validated or built.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// `[tool]`.
    pub tool: ToolMeta,
    /// `[args.NAME]`, by name.
    pub args: BTreeMap<String, ArgDef>,
    /// `[command]`.
    pub command: Option<CommandDef>,
    /// `[output]`.
    pub output: Option<OutputDef>,
    /// `[filesystem]`.
    pub filesystem: Option<FilesystemDef>,
    /// `[source]`.
    pub source: Option<SourceDef>,
    /// `[broker]`: named roots the command reaches through the broker.
    pub broker: Option<BrokerDef>,
    /// `[mcp]`, kept as written; [`Manifest::mcp_spec`] checks it.
    pub mcp: Option<toml::Table>,
    /// `[session]`, as written ([`Manifest::session_spec`] is what runs).
    pub session: Option<toml::Table>,
    /// `[http]`, kept as written (not executed).
    pub http: Option<toml::Table>,
    /// `[browser]`, kept as written (not executed).
    pub browser: Option<toml::Table>,
    sha256: String,
    origin: String,
    compiled: Compiled,
}

fn invalid(message: String) -> Refusal {
    Refusal::new(ReasonCode::ManifestInvalid, message)
}

/// `[a-z][a-z0-9_-]{0,63}`.
fn is_tool_name(name: &str) -> bool {
    name.len() <= MAX_TOOL_NAME
        && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn check_tool(tool: &ToolMeta) -> Result<(), Refusal> {
    if !is_tool_name(&tool.name) {
        return Err(invalid(format!(
            "[tool] name {:?}: a tool name is a lowercase letter followed by at most 63 of a-z, 0-9, `_`, `-`",
            tool.name
        )));
    }
    if tool.version.trim().is_empty() {
        return Err(invalid("[tool] version is empty".to_owned()));
    }
    if tool.description.trim().is_empty() {
        return Err(invalid("[tool] description is empty".to_owned()));
    }
    if tool.timeout_seconds == 0 {
        return Err(invalid("[tool] timeout_seconds must be at least 1".to_owned()));
    }
    if tool.timeout_seconds > crate::limits::hard::MAX_TIMEOUT_SECONDS {
        return Err(invalid(format!(
            "[tool] timeout_seconds = {} is more than the limit of {} (24 h)",
            tool.timeout_seconds,
            crate::limits::hard::MAX_TIMEOUT_SECONDS
        )));
    }
    if let Some(l) = &tool.limits {
        for (key, v) in [
            ("memory_bytes", l.memory_bytes),
            ("cpu_seconds", l.cpu_seconds),
            ("pids", l.pids),
            ("open_files", l.open_files),
            ("scratch_bytes", l.scratch_bytes),
        ] {
            if v == Some(0) {
                return Err(invalid(format!("[tool.limits] {key} must be at least 1")));
            }
        }
    }
    Ok(())
}

fn check_positions(defs: &BTreeMap<String, ArgDef>) -> Result<(), Refusal> {
    let mut seen: BTreeMap<u32, &str> = BTreeMap::new();
    for (name, def) in defs {
        if let Some(p) = def.position {
            if let Some(other) = seen.insert(p, name) {
                return Err(invalid(format!("[args.{other}] and [args.{name}] both have position {p}")));
            }
        }
    }
    Ok(())
}

impl Manifest {
    /// Parses and structurally checks `text`; `origin` (usually the file
    /// path) opens every message.
    pub fn parse(text: &str, origin: &str) -> Result<Manifest, Refusal> {
        let at = |r: Refusal| Refusal::new(r.code, format!("{origin}: {}", r.message));
        let raw: RawManifest = toml::from_str(text).map_err(|e| at(invalid(e.to_string().trim_end().to_owned())))?;
        check_tool(&raw.tool).map_err(at)?;
        check_positions(&raw.args).map_err(at)?;
        // A session's startup command is its argv, built like `[command] template`.
        // Beside [mcp] the argv is the server's.
        let startup =
            raw.session.as_ref().filter(|_| raw.mcp.is_none()).map(session::startup_command).transpose().map_err(at)?;
        if startup.is_some() && raw.command.is_some() {
            return Err(at(invalid("[session] beside [command]: a session's argv is its startup_command".to_owned())));
        }
        let command_def = raw.command.as_ref().or(startup.as_ref());
        let command = command_def.map(|c| command::compile(c, &raw.args)).transpose().map_err(at)?;
        let end_of_options = command_def.is_some_and(|c| c.end_of_options);
        let mut rules = BTreeMap::new();
        for (name, def) in &raw.args {
            let fallback = command_def.and_then(|c| c.defaults.get(name));
            // A source tool builds no argv, so a leading dash is only data.
            let dash_ok = raw.source.is_some() || command.as_ref().is_some_and(|c| c.dash_ok(end_of_options, name));
            let reach = command.as_ref().map_or(args::ShellReach::NoCommand, command::CompiledCommand::shell_reach);
            rules.insert(name.clone(), args::compile(name, def, fallback, dash_ok, reach).map_err(at)?);
        }
        let filesystem = filesystem::compile(raw.filesystem.as_ref(), &raw.args).map_err(at)?;
        if raw.output.as_ref().is_some_and(|o| o.max_bytes == Some(0)) {
            return Err(at(invalid("[output] max_bytes must be at least 1".to_owned())));
        }
        let stdout_output = output_file::compile(raw.output.as_ref(), &filesystem, raw.mcp.is_some()).map_err(at)?;
        let evidence = evidence::compile(raw.tool.evidence.as_ref()).map_err(at)?;
        let output_schema = raw
            .output
            .as_ref()
            .and_then(|o| o.schema.as_ref())
            .map(output_schema::OutputSchema::compile)
            .transpose()
            .map_err(at)?;
        let session = raw
            .session
            .as_ref()
            .map(|t| session::compile(t, filesystem.has_create(), raw.mcp.is_some()))
            .transpose()
            .map_err(at)?;
        Ok(Manifest {
            tool: raw.tool,
            args: raw.args,
            command: raw.command,
            output: raw.output,
            filesystem: raw.filesystem,
            source: raw.source,
            broker: raw.broker,
            mcp: raw.mcp,
            session: raw.session,
            http: raw.http,
            browser: raw.browser,
            sha256: sha256_tagged(text.as_bytes()),
            origin: origin.to_owned(),
            compiled: Compiled { args: rules, command, filesystem, stdout_output, output_schema, evidence, session },
        })
    }

    /// The compiled `[session]`, if the tool is a session.
    pub fn session_spec(&self) -> Option<&session::SessionSpec> {
        self.compiled.session.as_ref()
    }

    /// `sha256:` and the hex digest of the manifest's bytes.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The tool as a descriptor names it.
    pub fn identity(&self) -> crate::descriptor::ToolIdentity {
        crate::descriptor::ToolIdentity {
            name: self.name().to_owned(),
            version: self.tool.version.clone(),
            manifest_sha256: self.sha256().to_owned(),
            risk_tier: self.tool.risk_tier.to_string(),
            human_approval: self.tool.human_approval,
        }
    }

    /// The tool name.
    pub fn name(&self) -> &str {
        &self.tool.name
    }

    /// Where the manifest came from, as given to [`Manifest::parse`].
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Argument names that take positional values, in order.
    pub fn positional_names(&self) -> Vec<&str> {
        bind::positional_order(&self.args)
    }

    /// Every feature airlock does not execute, for people (empty when
    /// [`Manifest::check_executable`] would only look at defaults).
    pub fn unsupported_features(&self) -> Vec<String> {
        unsupported::features(self)
    }

    /// `Ok` when airlock can run this manifest. A source manifest follows the
    /// source rules instead (see [`Manifest::source_operation`]).
    /// `manifest.unsupported` lists
    /// every section or feature it does not execute (`[mcp]`, `[session]`,
    /// `[http]`, `[browser]`, `[source]`, a mode other than oneshot, callback
    /// dispatch, no `[command]`, an executor,
    /// `{_…}` placeholders other than `{_output_file}`,
    /// XML or a non-builtin parser, unimplemented argument types,
    /// `scope_check`, `block_internal`, sanitizers other than `injection`);
    /// `manifest.invalid` when a default fails its argument's validation.
    pub fn check_executable(&self) -> Result<(), Refusal> {
        if self.broker.is_some() {
            let beside = [
                (self.filesystem.is_some(), "[filesystem]"),
                (self.source.is_some(), "[source]"),
                (self.mcp.is_some(), "[mcp]"),
            ];
            if let Some((_, what)) = beside.iter().find(|(present, _)| *present) {
                return Err(Refusal::new(
                    ReasonCode::BrokerConflict,
                    format!("{}: [broker] cannot be combined with {what}; an isolated tool reaches files only through its roots", self.origin),
                ));
            }
        }
        if self.source.is_some() {
            return source::check(self).map(|_| ());
        }
        unsupported::check(self)
    }

    /// The programs a call of this tool executes in a worker, each with
    /// what it is for people: `("program", argv[0])` of `[command]` or
    /// `[mcp] server`, and `("parser", path)` of a custom `[output] parser`.
    /// Empty for a source tool, which runs no program.
    pub fn programs(&self) -> Vec<(&'static str, String)> {
        if self.source.is_some() {
            return Vec::new();
        }
        let command = self.compiled.command.as_ref().and_then(command::CompiledCommand::program);
        let server =
            self.mcp.as_ref().and_then(|_| self.mcp_spec().ok().flatten()).and_then(|s| s.server.first().cloned());
        let parser = self.output.as_ref().and_then(|o| o.custom_parser()).map(str::to_owned);
        command.or(server).map(|p| ("program", p)).into_iter().chain(parser.map(|p| ("parser", p))).collect()
    }

    /// The operation of a source tool (`[source]`), after the source rules
    /// (`source.operation_unknown`, `source.conflict`, …); `None` for a
    /// command tool.
    pub fn source_operation(&self) -> Option<Result<crate::source::SourceOp, Refusal>> {
        self.source.as_ref().map(|_| source::check(self))
    }

    /// Binds values to arguments and validates each one.
    ///
    /// Positional values fill the arguments that have a `position`, in
    /// ascending order; named values may be JSON strings, numbers or
    /// booleans. Refused: too many positional values or an undeclared name
    /// (`arg.unknown`), a value given twice (`arg.invalid`), a required
    /// argument with neither value nor default (`arg.missing`), and every
    /// validation failure of the argument's type. Defaults (from the
    /// argument, else from `[command.defaults]`) are validated like values.
    pub fn bind_args(
        &self,
        positional: &[String],
        named: &[(String, serde_json::Value)],
    ) -> Result<BoundArgs, Refusal> {
        bind::bind(&self.args, &self.compiled.args, positional, named)
    }

    /// The argv of one call: each word of `exec` or `template` with its
    /// placeholders substituted (for an `[mcp]` tool, the server's fixed
    /// argv), `--` before the first word with a
    /// placeholder when `end_of_options = true`. A word that is only absent
    /// placeholders is left out; a word that needs an absent value is
    /// refused (`arg.missing`). Refused first when
    /// [`Manifest::check_executable`] refuses.
    pub fn build_argv(&self, args: &BoundArgs) -> Result<Vec<String>, Refusal> {
        self.check_executable()?;
        if let Some(spec) = self.mcp_spec()? {
            // An MCP tool's worker is its server; the call goes over stdio.
            return Ok(spec.server);
        }
        self.preview_argv(args)
    }

    /// The argv a call would run, built like [`Manifest::build_argv`] but
    /// without the executability check (a tool that needs the network, say,
    /// still shows its argv): for previews and conformance tests, never to
    /// run. `{_output_file}` is the call's one declared output.
    pub fn preview_argv(&self, args: &BoundArgs) -> Result<Vec<String>, Refusal> {
        let command = self
            .compiled
            .command
            .as_ref()
            .ok_or_else(|| Refusal::new(ReasonCode::ManifestUnsupported, format!("{}: no command", self.origin)))?;
        let plan = self.filesystem_plan(args)?;
        command.build(args, plan.create.as_ref())
    }

    /// The files of one call: literal entries and the bound values of `{arg}`
    /// entries (absent optional arguments left out), with no path twice
    /// (`path.duplicate`) and within the input and output counts.
    pub fn filesystem_plan(&self, args: &BoundArgs) -> Result<FilesystemPlan, Refusal> {
        self.compiled.filesystem.plan(args)
    }

    /// Checks a call's parsed output against `[output] schema` (`Ok` when
    /// the manifest has none): a violation is `output.schema`. For a tool
    /// whose stdout is its output file, `content` is what describes the
    /// file and the schema applies to its `parsed` member, when present.
    pub fn check_output_schema(&self, content: &serde_json::Value) -> Result<(), Refusal> {
        let Some(schema) = &self.compiled.output_schema else { return Ok(()) };
        let target = if self.compiled.stdout_output { content.get("parsed") } else { Some(content) };
        target.map_or(Ok(()), |c| schema.check(c))
    }

    /// Where a call's evidence blobs go when `[tool.evidence] capture =
    /// true`: a directory relative to the state directory, under
    /// [`EVIDENCE_DIR`] (see `evidence.rs`); `None` when nothing is captured.
    pub fn evidence_dir(&self, invocation_id: &str) -> Option<Result<crate::path::RelPath, Refusal>> {
        self.compiled.evidence.as_ref().map(|d| d.resolve(invocation_id))
    }

    /// The builtin parser of the tool's output ([`OutputDef::builtin`]);
    /// `text` without `[output]` (or with a custom parser, which runs
    /// instead).
    pub fn output_parser(&self) -> OutputFormat {
        self.output.as_ref().and_then(OutputDef::builtin).unwrap_or(OutputFormat::Text)
    }

    /// Whether the tool's standard output is its output file (`[output]
    /// stdout_file`): airlock writes the bounded stdout into the declared
    /// output and the worker gets no writable output file of its own.
    pub fn stdout_is_output(&self) -> bool {
        self.compiled.stdout_output
    }

    /// Whether argument `name` is the `[filesystem] create` entry: the path
    /// of the new output (every other `path` argument names a file or
    /// directory to read).
    pub fn creates_from_arg(&self, name: &str) -> bool {
        self.compiled.filesystem.creates_from_arg(name)
    }

    /// The checked `[mcp]` section, `None` for a tool without one. Refused
    /// with `mcp.invalid`, `mcp.conflict` or `mcp.field_map` (see
    /// [`McpSpec`]).
    pub fn mcp_spec(&self) -> Result<Option<McpSpec>, Refusal> {
        mcp::spec(self)
    }

    /// JSON Schema of the arguments, for MCP `inputSchema`.
    pub fn input_schema(&self) -> serde_json::Value {
        schema::input_schema(&self.args, &self.compiled.args)
    }
}
