//! `airlock run`.

use crate::cli::CallArgs;
use airlock_core::{Envelope, Refusal};
use airlock_runtime::Runtime;
use std::io::IsTerminal;

/// Runs one call end to end.
pub fn run(runtime: &Runtime, call: CallArgs) -> Result<Envelope, Refusal> {
    let request = super::prepare::request(call)?;
    let progress = std::io::stderr().is_terminal();
    if progress {
        eprintln!(
            "airlock: {} ({}): preparing, then running in the {:?} tier…",
            request.tool,
            request.invocation_id,
            runtime.config().tier
        );
    }
    let envelope = runtime.run(&request);
    if progress && envelope.error.is_none() {
        for f in &envelope.created_files {
            eprintln!("airlock: published {} ({} bytes, {})", f.path, f.bytes, f.sha256);
        }
    }
    Ok(envelope)
}
