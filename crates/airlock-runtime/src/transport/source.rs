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
//! under `STATE/invocations/ID`, which also reserves the id. Source queries
//! change no host file, so a crashed publication elsewhere does not stop them.
//!
//! # Source queries
//!
//! `Runtime::run` dispatches any manifest with `[source]` to the source
//! shape (this module) before staging is touched, so `airlock run`, `airlock
//! query` and MCP get it alike; the Git operations go to the Git pipeline. A
//! source query announces no effect, so an unconfirmed publication does not
//! block it. It uses no worker, no mount, no staging and no worker slot.
//!
//! A name of a bundled operation (`airlock_source::BUNDLED`) with no manifest
//! in `tools_dir` loads the bundled manifest (origin `bundled:NAME.clad.toml`).
//! A manifest of that name in `tools_dir` replaces the bundled one **only if
//! it is itself a valid source manifest for the same operation** (an operator
//! may lower its risk, change its description or drop optional arguments);
//! anything else is `source.shadowed`, so a command tool can never stand in for
//! a source query. `airlock query OP` accepts only source operation names.
//! `airlock tools list` shows the bundled tools (manifest
//! `bundled:NAME.clad.toml`), and policies are validated at start-up (and
//! `airlock policy schema` built) with the bundled tools a project does not
//! shadow.
//!
//! The prepared record (descriptor, no content) is kept in
//! `STATE/invocations/ID` with a `dispatched` marker (so `airlock dispatch` of
//! a source id is `invocation.duplicate`); the result stays in memory.
//! `InvocationPrepared` carries a summary (operation, path, broker hash, result
//! digest, partial, number of ranges and the digest of the ranges list) rather
//! than the ranges, which can exceed a 64 KiB record; the descriptor digest
//! binds the full list. The result enters the envelope (`content`) only after
//! `InvocationAuthorized`; a policy refusal is `InvocationRefused` and the
//! envelope has no content.

use super::exec::CallRequest;
use crate::engine::{answer, AuthorizedCall, CallStart, Preparation, Transport};
use crate::{ceilings, Runtime};
use airlock_core::manifest::Manifest;
use airlock_core::source::limits;
use airlock_core::{
    canonical_json, sha256_tagged, Envelope, FilesystemBoundary, ReadGrant, ReasonCode, Refusal, RelPath, SourceOp,
};
use airlock_hostfs::Dir;
use serde_json::{json, Value};
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
        let what = format!("a source query reaching {:?}", root.map_or(".", RelPath::as_str));
        ceilings::open_readable(self.runtime.authority(), ceiling, self.runtime.protected(), &what)
    }
}

/// One source query (`read_file`, `list_files`, `grep_files`).
pub(crate) struct Source<'a> {
    pub request: &'a CallRequest,
    pub manifest: &'a Manifest,
    pub op: SourceOp,
}

impl Transport for Source<'_> {
    /// The query's result, released only once the call is authorized.
    type Payload = Value;
    const NAME: &'static str = SOURCE_TRANSPORT;
    const WRITES: bool = false;
    const NOT_KEPT: Option<&'static str> =
        Some("it is a source query: it is answered in one call (`airlock query`), not kept for dispatch");
    const WAITS_FOR_APPROVAL: bool = true;

    /// The sealed result, released by the dispatch after approval.
    fn kept(payload: &Value) -> Result<Option<Vec<u8>>, Refusal> {
        serde_json::to_vec(payload).map(Some).map_err(|e| Refusal::new(ReasonCode::Internal, e.to_string()))
    }

    fn prepare(self, rt: &Runtime, start: &CallStart<'_>) -> Result<Preparation<Value>, Refusal> {
        let Source { request, manifest, op } = self;
        let args = manifest.bind_args(&request.positional, &request.named)?;
        let strings = args.as_strings();
        let query = airlock_source::Query::from_args(op, &strings)?;
        let deadline = Instant::now() + Duration::from_secs(manifest.tool.timeout_seconds);
        let answer = airlock_source::run(&query, &ConfiguredCeilings { runtime: rt }, rt.resolver(), Some(deadline))?;

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
        // Ranges can number thousands: the journal binds them by digest
        // (the full list is in the descriptor the digest covers).
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
        let mut journal = serde_json::Map::new();
        journal.insert("source".into(), summary);
        Ok(Preparation {
            args: strings,
            argv: Vec::new(),
            filesystem,
            inputs: Vec::new(),
            output: None,
            lease: None,
            journal,
            tier: crate::tier_choice::no_worker(start.tier, "a source query")?,
            payload: answer.result,
        })
    }

    fn execute(_rt: &Runtime, call: AuthorizedCall<Value>) -> Result<Envelope, Refusal> {
        let base = answer::finished(call.prepared(), &call.decision().policy_ids, None);
        let (prepared, _) = call.into_parts();
        Ok(Envelope { content: Some(prepared.into_payload()), ..base })
    }
}

/// Bound on a kept result read back at dispatch (results are bounded far
/// below it by the source limits).
const MAX_KEPT_RESULT_BYTES: u64 = 256 << 20;

impl Runtime {
    /// A source query kept for an approval: its sealed result read back and
    /// checked against the digest the descriptor (and so the approval)
    /// binds; the host is not read again.
    pub(crate) fn load_kept_source(
        &self,
        kept: crate::transport::exec::KeptCall,
    ) -> Result<crate::engine::PreparedCall<Value>, Refusal> {
        use std::io::Read;
        let crate::transport::exec::KeptCall { store, record, manifest } = kept;
        let changed = |why: &str| Refusal::new(ReasonCode::InputChanged, format!("the kept query result {why}"));
        let mut bytes = Vec::new();
        store
            .open_file(crate::store::KEPT_FILE)
            .map_err(|_| changed("is missing"))?
            .take(MAX_KEPT_RESULT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("reading the kept result: {e}")))?;
        let result: Value = serde_json::from_slice(&bytes).map_err(|_| changed("is not JSON"))?;
        let bound = record.descriptor.command_boundary.filesystem.source.as_ref().map(|s| s.result_sha256.clone());
        let claimed = result.get("result_sha256").and_then(Value::as_str).map(str::to_owned);
        if airlock_source::verify_result(&result) != Some(true) || bound.is_none() || bound != claimed {
            return Err(changed("does not match the descriptor's result_sha256"));
        }
        let spec = airlock_policy::ToolSpec::from_manifest(&manifest);
        Ok(crate::engine::PreparedCall::reloaded(record, store, spec, None, result))
    }
}
