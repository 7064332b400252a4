//! `[tool.evidence] capture = true`: a call's raw standard output and
//! standard error, as bounded as the worker read them, kept in the state
//! directory as evidence blobs named by their SHA-256 (`sha256-HEX`, so the
//! same bytes are one blob), and an `EvidenceCaptured` journal record that
//! references them by hash; `airlock attest` carries that record's body.
//! The blobs are kept before the output is judged or published, so a call
//! that fails still leaves its evidence.

use crate::Runtime;
use airlock_core::descriptor::sha256_tagged;
use airlock_core::manifest::Manifest;
use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::PrivateDir;
use airlock_journal::kind;
use airlock_sandbox::WorkerOutcome;
use serde_json::{json, Value};

/// A blob's file name for `sha256:HEX`.
fn blob_name(digest: &str) -> String {
    format!("sha256-{}", digest.trim_start_matches("sha256:"))
}

fn internal(what: &str, e: impl std::fmt::Display) -> Refusal {
    Refusal::new(ReasonCode::Internal, format!("keeping the call's evidence: {what}: {e}"))
}

/// Writes `bytes` as a blob in `dir` (nothing to do when the blob exists:
/// its name is its digest) and returns its digest.
fn keep_blob(dir: &PrivateDir, bytes: &[u8]) -> Result<String, Refusal> {
    let digest = sha256_tagged(bytes);
    let name = blob_name(&digest);
    if !dir.contains(&name) {
        dir.write_new_file(&name, bytes).map_err(|e| internal(&name, e))?;
    }
    Ok(digest)
}

impl Runtime {
    /// Keeps the evidence of call `id` when its manifest captures it, and
    /// journals the blobs' digests (`EvidenceCaptured`).
    pub(crate) fn capture_evidence(
        &self,
        manifest: &Manifest,
        id: &str,
        outcome: &WorkerOutcome,
    ) -> Result<(), Refusal> {
        let Some(rel) = manifest.evidence_dir(id).transpose()? else { return Ok(()) };
        let mut dir = self.state().try_clone().map_err(|e| internal("the state directory", e))?;
        for name in rel.components() {
            dir = dir.ensure_subdir(name).map_err(|e| internal(name, e))?;
        }
        let mut blobs = Vec::new();
        for (stream, bytes, truncated) in [
            ("stdout", &outcome.stdout, outcome.stdout_truncated),
            ("stderr", &outcome.stderr, outcome.stderr_truncated),
        ] {
            let digest = keep_blob(&dir, bytes)?;
            blobs.push(json!({ "stream": stream, "sha256": digest, "bytes": bytes.len(), "truncated": truncated }));
        }
        dir.sync().map_err(|e| internal("sync", e))?;
        self.note(kind::EVIDENCE_CAPTURED, Some(id), json!({ "dir": rel.as_str(), "blobs": Value::Array(blobs) }))
    }
}
