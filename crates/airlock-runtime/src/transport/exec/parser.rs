//! A ToolClad custom parser: run in a fresh worker with no file grant but
//! the tool's bounded raw output; its standard output must be JSON.

use super::{output_max_bytes, STDERR_LIMIT};
use crate::engine::worker::run_worker;
use airlock_core::manifest::Manifest;
use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::PrivateDir;
use airlock_sandbox::{AnyTier, ImageMount, StagedInput, WorkerLimits, WorkerSpec};
use std::time::Duration;

/// Name of the raw output inside a parser's worker (ToolClad passes its path
/// as `argv[1]`).
const RAW_OUTPUT: &str = "raw_output";

/// Runs a custom parser in a fresh worker with no file grant but the tool's
/// bounded raw output, and parses its standard output as JSON.
/// Where a parser runs: the call's staging, the worker's directory, the image.
pub(super) struct ParserPlace<'a> {
    pub staging: &'a PrivateDir,
    pub working_dir: &'a str,
    pub image: Vec<ImageMount>,
    /// The call's invocation id: container tiers name the parser's
    /// container after it (the tool's is gone by then).
    pub invocation_id: &'a str,
}

pub(super) fn run_parser(
    tier: &AnyTier,
    program: &str,
    raw: &[u8],
    place: ParserPlace<'_>,
    manifest: &Manifest,
) -> Result<serde_json::Value, Refusal> {
    let ParserPlace { staging, working_dir, image, invocation_id } = place;
    use std::io::Write;
    let internal = |e: std::io::Error| Refusal::new(ReasonCode::Internal, format!("staging the raw output: {e}"));
    staging.create_file(RAW_OUTPUT)?.write_all(raw).map_err(internal)?;
    let spec = WorkerSpec {
        argv: vec![program.to_owned(), RAW_OUTPUT.to_owned()],
        env: Vec::new(),
        working_dir: working_dir.to_owned(),
        inputs: vec![StagedInput {
            virtual_path: RAW_OUTPUT.to_owned(),
            file: staging.open_file(RAW_OUTPUT)?,
            held: false,
        }],
        output: None,
        image,
        limits: WorkerLimits::default(),
        timeout: Duration::from_secs(manifest.tool.timeout_seconds),
        stdout_limit: usize::try_from(output_max_bytes(manifest)).unwrap_or(usize::MAX),
        stdout_sink: None,
        stderr_limit: STDERR_LIMIT,
        fs_socket: None,
        start_gate: None,
        provided: Vec::new(),
        call_id: Some(invocation_id.to_owned()),
    };
    let outcome = run_worker(tier, spec, &format!("the parser {program}"))?;
    let failed = |why: String| Refusal::new(ReasonCode::OutputParse, format!("the parser {program} {why}"));
    if !outcome.cleanup_confirmed {
        return Err(Refusal::new(ReasonCode::WorkerCleanup, "the parser's processes could not be confirmed gone"));
    }
    if outcome.timed_out {
        return Err(failed("ran out of time".into()));
    }
    if !outcome.exit.success() {
        return Err(failed(format!(
            "failed ({:?}): {}",
            outcome.exit,
            airlock_core::stream_tail(&outcome.stderr).unwrap_or_default()
        )));
    }
    if outcome.stdout_truncated {
        return Err(failed("printed more than [output] max_bytes".into()));
    }
    serde_json::from_slice(&outcome.stdout).map_err(|e| failed(format!("did not print JSON: {e}")))
}
