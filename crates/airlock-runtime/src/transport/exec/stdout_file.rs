//! `[output] stdout_file`: the tool's standard output is its output file.
//!
//! The worker gets no writable output file of its own (its sandbox has
//! `output: None`); its stdout pipe is bounded by `max_file_bytes` instead
//! of `[output] max_bytes`, and stdout past that bound fails the call with
//! `limit.output_size` and publishes nothing. After the usual verdict
//! (exit 0, cleanup confirmed, in time), airlock writes the kept bytes into
//! the output's private staging file, where a worker-written output would
//! have been exported, and the one publication publishes them. The sandbox
//! keeps stdout in memory until the worker is done, so such a call holds up
//! to `max_file_bytes` of memory; streaming the pipe into the staging file
//! is the next step for operators who raise that limit far.
//!
//! `[output] format` says what the file holds: `json`, `jsonl` and `csv`
//! must parse (else `output.parse`, nothing published); `text` is any
//! bytes. The answer's `content` describes what was written:
//! `{stdout_file, bytes, sha256, format}`, plus `parsed` (the document as
//! the builtin parser reads it) when the format is structured and the file
//! is within `[output] max_bytes` (default 1 MiB), so a small JSON result is
//! usable from the answer alone and a large file is never copied into it.

use crate::engine::publish::OUTPUT_FILE;
use crate::engine::verdict::judge;
use airlock_core::descriptor::sha256_tagged;
use airlock_core::manifest::{Manifest, OutputFormat};
use airlock_core::output::parse_output;
use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::PrivateDir;
use airlock_sandbox::WorkerOutcome;
use serde_json::{json, Value};
use std::io::Write;

/// The verdict of a call whose stdout is its output: stdout past
/// `max_file_bytes` is `limit.output_size`, then the usual [`judge`].
pub(super) fn judge_stdout_file(outcome: &WorkerOutcome, timeout_seconds: u64, max_file: u64) -> Result<(), Refusal> {
    if outcome.stdout_truncated && outcome.cleanup_confirmed && !outcome.timed_out {
        return Err(Refusal::new(
            ReasonCode::LimitOutputSize,
            format!(
                "the tool printed more than max_file_bytes = {max_file} bytes to its standard output, which is its \
                 output file; nothing was published (raise [filesystem] max_file_bytes if the result is expected \
                 to be larger)"
            ),
        ));
    }
    judge(outcome, timeout_seconds, max_file)
}

/// Checks `stdout` against `[output] format`, writes it into the call's
/// staging output file and answers what was written.
pub(super) fn stage(manifest: &Manifest, path: &str, stdout: &[u8], staging: &PrivateDir) -> Result<Value, Refusal> {
    let output = manifest.output.as_ref();
    let format = output.map(|o| o.format).unwrap_or(OutputFormat::Text);
    let parsed = match format {
        OutputFormat::Text => None,
        f => Some(parse_output(f, stdout)?),
    };
    let mut file = staging.create_file(OUTPUT_FILE)?;
    file.write_all(stdout)
        .and_then(|()| file.sync_all())
        .map_err(|e| Refusal::new(ReasonCode::Internal, format!("writing the output to staging: {e}")))?;
    let mut content = json!({
        "stdout_file": path,
        "bytes": stdout.len(),
        "sha256": sha256_tagged(stdout),
        "format": format.as_str(),
    });
    if let Some(parsed) = parsed.filter(|_| stdout.len() as u64 <= super::output_max_bytes(manifest)) {
        content["parsed"] = parsed;
    }
    Ok(content)
}
