//! Source queries through the pipeline: a tool whose manifest has
//! `[source]` is answered by the fixed broker (`airlock-source`) in this
//! process, with no worker, no mount and no staging.
//!
//! Prepare runs the bounded query and keeps its result in memory; the
//! descriptor binds the operation, the working directory, the limits, every
//! byte range read with its hash, the result digest and the broker's
//! implementation hash at `command_boundary.filesystem.source` (and each
//! range in `reads`/`read_paths`, so a policy written about file paths
//! applies to source reads too). Only after the authorizer permits the
//! descriptor is the result put in the envelope; a refusal journals why and
//! releases nothing. The prepared record (descriptor, no content) is kept
//! under `STATE/invocations/ID`, which also reserves the id.

use crate::prepare::{CallRequest, PreparedCall};
use crate::store::{PendingInvocation, PreparedRecord};
use crate::tools::LoadedTool;
use crate::{ceilings, id, Runtime};
use airlock_core::descriptor::DESCRIPTOR_VERSION;
use airlock_core::manifest::Manifest;
use airlock_core::source::limits;
use airlock_core::{
    canonical_json, sha256_tagged, CommandBoundary, Descriptor, Envelope, Evidence, FilesystemBoundary, ReadGrant,
    ReasonCode, Refusal, RelPath, SourceOp,
};
use airlock_hostfs::{Dir, HostAuthority};
use airlock_journal::kind;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `transport` of a source call's descriptor.
pub const SOURCE_TRANSPORT: &str = "source";

/// The configured ceilings as the broker reaches them: each opened (and
/// checked against the protected paths) when a query needs it.
struct ConfiguredCeilings<'a> {
    runtime: &'a Runtime,
}

impl airlock_source::Ceilings for ConfiguredCeilings<'_> {
    fn roots(&self) -> Vec<Option<RelPath>> {
        self.runtime.config().ceilings.iter().map(|c| c.virtual_root.clone()).collect()
    }

    fn open(&self, root: Option<&RelPath>) -> Result<Dir, Refusal> {
        let ceiling =
            self.runtime.config().ceilings.iter().find(|c| c.virtual_root.as_ref() == root).ok_or_else(|| {
                Refusal::new(ReasonCode::GrantNoCeiling, format!("no ceiling is mounted at {root:?}"))
            })?;
        ceilings::open(self.runtime.authority(), ceiling, self.runtime.protected())
    }
}

/// Loads `tool` as [`crate::tools::load`] does, with the bundled source
/// tools as a fallback: a name of a bundled operation (`read_file`,
/// `list_files`, `grep_files`) with no manifest in the tools directory is
/// the bundled manifest; a manifest there of that name must itself be a
/// valid source manifest for the same operation (`source.shadowed`
/// otherwise), so a command tool can never stand in for a source query.
pub(crate) fn load(authority: &HostAuthority, tool: &str, path: &Path) -> Result<LoadedTool, Refusal> {
    let Some(text) = airlock_source::bundled(tool).filter(|_| !tool.contains('/') && !tool.ends_with(".toml")) else {
        return crate::tools::load(authority, path);
    };
    if std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        let origin = format!("bundled:{tool}.clad.toml");
        let manifest = Manifest::parse(text, &origin)?;
        return Ok(LoadedTool { manifest, text: text.to_owned(), origin: PathBuf::from(origin) });
    }
    let loaded = crate::tools::load(authority, path)?;
    match loaded.manifest.source_operation() {
        Some(Ok(op)) if op.as_str() == tool => Ok(loaded),
        Some(Err(refusal)) => Err(refusal),
        _ => Err(Refusal::new(
            ReasonCode::SourceShadowed,
            format!(
                "{} is named like the bundled source tool {tool:?} but is not a [source] manifest with operation = \
                 {tool:?}; rename it, or make it one",
                path.display()
            ),
        )),
    }
}

/// The bundled source tools whose names have no manifest in `tools_dir`:
/// the tools `run NAME` would load from the binary. Policies are validated
/// against them too, so a policy may name `Airlock::Action::"tool_call::read_file"`
/// in a project that keeps no copy of the manifest.
pub fn bundled_missing_from(tools_dir: &Path) -> Vec<Manifest> {
    airlock_source::BUNDLED
        .iter()
        .filter(|(name, _)| {
            std::fs::symlink_metadata(tools_dir.join(format!("{name}.clad.toml")))
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        })
        .filter_map(|(name, text)| Manifest::parse(text, &format!("bundled:{name}.clad.toml")).ok())
        .collect()
}

impl Runtime {
    /// Answers a source tool's call: prepare (bounded query, descriptor),
    /// journal, authorize, release.
    pub(crate) fn run_source(&self, request: &CallRequest, tool: LoadedTool) -> Result<Envelope, Refusal> {
        // Git queries are answered from a snapshot by the driver in a worker.
        if let Some(Ok(op)) = tool.manifest.source_operation() {
            if op.is_git() {
                let args = tool.manifest.bind_args(&request.positional, &request.named)?.as_strings();
                return self.git_query_journaled(op.as_str(), &args, &request.invocation_id);
            }
        }
        let prepared = self.prepare_source(request, tool)?;
        // Answered by this call only: `airlock dispatch` of the id is
        // `invocation.duplicate` (nothing later needs this to survive a
        // crash, so it is not synced).
        prepared.store().create_file(crate::store::DISPATCHED)?;
        let id = prepared.invocation_id().to_owned();
        let principal = self.record_principal(Some(&id));
        let digest = prepared.digest().to_owned();
        let name = prepared.descriptor().tool.clone();
        let authorized = self.authorize_call(prepared.0, false)?;
        let decision = authorized.decision().clone();
        Ok(Envelope {
            invocation_id: Some(id),
            tool: Some(name),
            stage: Some("finished"),
            content: Some(prepared.1),
            evidence: Some(Evidence {
                descriptor_sha256: Some(digest),
                policy_ids: decision.policy_ids,
                principal: Some(principal),
                limits: None,
            }),
            ..Envelope::ok()
        })
    }

    fn prepare_source(&self, request: &CallRequest, tool: LoadedTool) -> Result<SourcePrepared, Refusal> {
        id::check_invocation_id(&request.invocation_id)?;
        let invocations = self.invocations()?;
        id::check_unused(&invocations, &request.invocation_id)?;
        let manifest = &tool.manifest;
        let op = manifest
            .source_operation()
            .ok_or_else(|| Refusal::new(ReasonCode::Internal, "not a source manifest"))??;
        let args = manifest.bind_args(&request.positional, &request.named)?;
        let strings = args.as_strings();
        let query = airlock_source::Query::from_args(op, &strings)?;
        let deadline = Instant::now() + Duration::from_secs(manifest.tool.timeout_seconds);
        let answer =
            airlock_source::run(&query, &ConfiguredCeilings { runtime: self }, self.resolver(), Some(deadline))?;

        let reads: Vec<ReadGrant> = answer
            .boundary
            .ranges
            .iter()
            .map(|r| ReadGrant { path: r.path.clone(), bytes: r.bytes, sha256: r.sha256.clone() })
            .collect();
        let max_file_bytes = match op {
            SourceOp::ReadFile => query.limit,
            SourceOp::GrepFiles => limits::MAX_GREP_FILE_BYTES,
            _ => 0,
        };
        let mut filesystem = FilesystemBoundary::new(reads, None, max_file_bytes, None);
        let ranges_sha256 = sha256_tagged(&canonical_json(&answer.boundary.ranges));
        let summary = json!({
            "operation": op.as_str(),
            "path": answer.boundary.path,
            "broker_sha256": answer.boundary.broker_sha256,
            "result_sha256": answer.boundary.result_sha256,
            "partial": answer.boundary.partial,
            "ranges": answer.boundary.ranges.len(),
            "ranges_sha256": ranges_sha256,
        });
        filesystem.source = Some(answer.boundary);
        let descriptor = Descriptor {
            version: DESCRIPTOR_VERSION,
            tool: manifest.name().to_owned(),
            tool_version: manifest.tool.version.clone(),
            manifest_sha256: manifest.sha256().to_owned(),
            args: strings,
            argv: Vec::new(),
            transport: SOURCE_TRANSPORT.to_owned(),
            risk_tier: manifest.tool.risk_tier.to_string(),
            human_approval: manifest.tool.human_approval,
            working_dir: self.config().working_dir.clone(),
            command_boundary: CommandBoundary { filesystem },
        };
        let record = PreparedRecord {
            format: crate::store::RECORD_FORMAT,
            invocation_id: request.invocation_id.clone(),
            principal: self.principal_of(request.principal.as_deref()).to_owned(),
            manifest_origin: tool.origin.display().to_string(),
            descriptor_sha256: descriptor.digest(),
            descriptor,
            inputs: Vec::new(),
            output: None,
            prepared_at: None,
            expires_at: None,
        };
        let store = PendingInvocation::begin(&invocations)?.commit(&record, &tool.text, false)?;
        let digest = record.descriptor_sha256.clone();
        let prepared = PreparedCall::from_parts(record, tool.manifest, None, store);
        // Ranges can number thousands: the journal binds them by digest
        // (the full list is in the descriptor the digest covers).
        self.note(
            kind::INVOCATION_PREPARED,
            Some(&request.invocation_id),
            json!({
                "descriptor_sha256": digest,
                "tool": prepared.descriptor().tool,
                "manifest_sha256": prepared.descriptor().manifest_sha256,
                "transport": SOURCE_TRANSPORT,
                "source": summary,
                "owner_pid": std::process::id(),
            }),
        )?;
        Ok(SourcePrepared(prepared, answer.result))
    }
}

/// A prepared source call and the result it holds until authorization.
struct SourcePrepared(PreparedCall, serde_json::Value);

impl std::ops::Deref for SourcePrepared {
    type Target = PreparedCall;
    fn deref(&self) -> &PreparedCall {
        &self.0
    }
}
