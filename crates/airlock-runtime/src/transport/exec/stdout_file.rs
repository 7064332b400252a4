//! `[output] stdout_file`: the tool's standard output is its output file.
//!
//! The worker gets no writable output file of its own (its sandbox has
//! `output: None`); its stdout pipe is bounded by `max_file_bytes` instead
//! of `[output] max_bytes`, and stdout past that bound fails the call with
//! `limit.output_size` and publishes nothing. After the usual verdict
//! (exit 0, cleanup confirmed, in time), the output's private staging file,
//! into which the sandbox streamed the pipe as it drained it
//! (`WorkerSpec::stdout_sink`: no stdout byte is held in memory beyond a
//! 4 KiB tail), is checked and the one publication publishes it. A stdout of
//! any size allowed by `max_file_bytes` costs bounded memory.
//!
//! `[output] format` says what the file holds: `json`, `jsonl` and `csv`
//! must parse (else `output.parse`, nothing published; checked by streaming,
//! without building the document); `text` is any bytes. The answer's `content` describes what was written:
//! `{stdout_file, bytes, sha256, format}`, plus `parsed` (the document as
//! the builtin parser reads it) when the format is structured and the file
//! is within `[output] max_bytes` (default 1 MiB), so a small JSON result is
//! usable from the answer alone and a large file is never copied into it.

use crate::engine::verdict::judge;
use airlock_core::manifest::{Manifest, OutputFormat};
use airlock_core::output::{check_output, parse_output};
use airlock_core::{ReasonCode, Refusal};
use airlock_sandbox::WorkerOutcome;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

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

/// Checks the output file the sandbox streamed stdout into against
/// `[output] format` and answers what was written: read once to hash and
/// check it with bounded memory, and parsed into the answer only when it is
/// within `[output] max_bytes`.
pub(super) fn describe(manifest: &Manifest, path: &str, staged: Option<&File>) -> Result<Value, Refusal> {
    let format = manifest.output_parser();
    let io = |e: std::io::Error| Refusal::new(ReasonCode::Internal, format!("reading the staged output: {e}"));
    let mut file = staged.ok_or_else(|| Refusal::new(ReasonCode::Internal, "no staged output"))?;
    // The sink wrote through the same open file: read from its start.
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut hashing = Hashing { inner: &mut file, hasher: Sha256::new(), bytes: 0 };
    check_output(format, &mut hashing)?;
    // What the check did not need to read is hashed too.
    std::io::copy(&mut hashing, &mut std::io::sink()).map_err(io)?;
    let (bytes, sha256) = (hashing.bytes, format!("sha256:{}", hex::encode(hashing.hasher.finalize())));
    let mut content = json!({ "stdout_file": path, "bytes": bytes, "sha256": sha256, "format": format.as_str() });
    if format != OutputFormat::Text && bytes <= super::output_max_bytes(manifest) {
        let mut text = Vec::new();
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.take(bytes).read_to_end(&mut text).map_err(io)?;
        content["parsed"] = parse_output(format, &text)?;
    }
    Ok(content)
}

/// A reader that hashes and counts what passes through it.
struct Hashing<'a, R> {
    inner: &'a mut R,
    hasher: Sha256,
    bytes: u64,
}

impl<R: Read> Read for Hashing<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}
