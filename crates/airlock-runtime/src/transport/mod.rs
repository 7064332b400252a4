//! The call shapes, one module each, every one a [`Transport`] of the one
//! engine ([`crate::engine`]):
//!
//! - [`exec`]: a `[command]` tool in a worker with snapshots and one output
//!   (kept by `airlock prepare`, dispatched later);
//! - [`mcp`]: the run step of an `[mcp]` tool (prepared like exec, its
//!   upstream server in the worker);
//! - [`source`]: `read_file`, `list_files`, `grep_files`, answered in-process;
//! - [`git`]: Git queries over a private repository snapshot;
//! - [`isolated`]: a command reaching named roots through the broker.
//!
//! This module routes a request to its shape by the tool's manifest.
//!
//! # One manifest read per call
//!
//! [`Runtime::run`] reads the manifest once (`catalog::LoadedTool`: bytes and
//! parse) and hands it to its shape. Whether the call stops for approval is
//! decided from the tool's identity taken from that parse (`risk_tier`,
//! `human_approval`), which the descriptor binds with the same bytes' digest
//! (`manifest_sha256`), and Cedar's `ToolSpec` is built from the same parse.

pub mod exec;
pub mod git;
pub mod isolated;
pub mod mcp;
pub mod source;

use crate::catalog::{self, LoadedTool};
use crate::engine::{CallStart, PreparedCall, Transport};
use crate::Runtime;
use airlock_core::manifest::Manifest;
use airlock_core::{Envelope, ReasonCode, Refusal, SourceOp};
use exec::{CallRequest, Exec, ExecPayload};

/// Which shape a manifest's calls take.
enum Shape {
    Exec,
    Source(SourceOp),
    Git(SourceOp),
    Isolated,
}

impl Shape {
    fn of(manifest: &Manifest) -> Result<Shape, Refusal> {
        if let Some(op) = manifest.source_operation() {
            let op = op?;
            return Ok(if op.is_git() { Shape::Git(op) } else { Shape::Source(op) });
        }
        Ok(if manifest.broker.is_some() { Shape::Isolated } else { Shape::Exec })
    }

    /// Why a call of this shape cannot be kept for a later dispatch.
    fn not_kept(&self) -> Option<&'static str> {
        match self {
            Shape::Exec => <Exec<'_> as Transport>::NOT_KEPT,
            Shape::Source(_) => <source::Source<'_> as Transport>::NOT_KEPT,
            Shape::Git(_) => <git::Git<'_> as Transport>::NOT_KEPT,
            Shape::Isolated => <isolated::Isolated as Transport>::NOT_KEPT,
        }
    }
}

impl Runtime {
    /// Loads a tool by manifest path or name; the bundled source tools
    /// answer for their names when the tools directory has no manifest of
    /// that name.
    pub fn load_tool(&self, tool: &str) -> Result<LoadedTool, Refusal> {
        catalog::load_tool(self.authority(), tool, &self.config().tools_dir)
    }

    /// Prepares, authorizes, runs and publishes one call, whatever its
    /// shape, and answers with its envelope: a refusal before anything ran
    /// is one too (its status `refused` or `error`).
    pub fn run(&self, request: &CallRequest) -> Envelope {
        let principal = self.principal_of(request.principal.as_deref());
        self.as_call(&request.invocation_id, principal, Some(&request.tool), || {
            // The manifest is read once per call: whether it needs approval,
            // what policy sees and what runs all come from these bytes
            // (whose digest the descriptor binds).
            let tool = self.load_tool(&request.tool)?;
            let start = CallStart {
                invocation_id: &request.invocation_id,
                principal,
                keep: false,
                expires_at: None,
                progress: request.progress.as_deref(),
                tier: request.tier,
                session: false,
            };
            if tool.manifest.session_spec().is_some() {
                return Err(Refusal::new(
                    ReasonCode::ManifestUnsupported,
                    format!("{} is a [session] tool: start it with `airlock session start`", tool.manifest.name()),
                ));
            }
            match Shape::of(&tool.manifest)? {
                Shape::Exec => {
                    let call_tool = tool.call_tool();
                    self.drive(Exec { request, manifest: tool.manifest }, &call_tool, start)
                }
                Shape::Source(op) => {
                    let source = source::Source { request, manifest: &tool.manifest, op };
                    self.drive(source, &tool.call_tool(), start)
                }
                Shape::Git(op) => {
                    let args = tool.manifest.bind_args(&request.positional, &request.named)?.as_strings();
                    let git = git::Git { operation: op.as_str(), args: &args };
                    self.drive(git, &catalog::git_tool(op.as_str()), start)
                }
                Shape::Isolated => self.run_isolated_tool(request, &tool, start),
            }
        })
    }

    /// Prepares `request` and keeps it for `airlock dispatch`. Nothing runs;
    /// on any refusal nothing is kept in the state directory and no byte of
    /// a refused file has been read. The prepared call is synced to disk, so
    /// it survives a crash. The outcome is journaled (`InvocationPrepared`,
    /// or `InvocationRefused`, synced).
    pub fn prepare(&self, request: &CallRequest) -> Result<PreparedCall<ExecPayload>, Refusal> {
        let principal = self.principal_of(request.principal.as_deref());
        let _caller = self.enter_call(&request.invocation_id, principal);
        self.sweep_if_due();
        let start = CallStart {
            invocation_id: &request.invocation_id,
            principal,
            keep: true,
            expires_at: None,
            progress: request.progress.as_deref(),
            tier: request.tier,
            session: false,
        };
        let result = self.load_tool(&request.tool).and_then(|tool| match Shape::of(&tool.manifest)?.not_kept() {
            _ if tool.manifest.session_spec().is_some() => Err(Refusal::new(
                ReasonCode::ManifestUnsupported,
                format!("{} is a [session] tool: start it with `airlock session start`", tool.manifest.name()),
            )),
            Some(why) => Err(Refusal::new(ReasonCode::ManifestUnsupported, format!("{}: {why}", tool.manifest.name()))),
            None => {
                let call_tool = tool.call_tool();
                self.prepare_with(Exec { request, manifest: tool.manifest }, &call_tool, start)
            }
        });
        if let Err(refusal) = &result {
            let id =
                crate::id::check_invocation_id(&request.invocation_id).ok().map(|()| request.invocation_id.as_str());
            if let Some(id) = id {
                self.reserve_refused_id(id, refusal);
            }
            let body = serde_json::json!({ "code": refusal.code.as_str(), "message": refusal.message });
            self.record(airlock_journal::kind::INVOCATION_REFUSED, id, body)?;
        }
        result
    }
}
