//! One log line per MCP request airlock answers, for operators: target
//! `airlock::request`, level info (shown by `airlock mcp` by default; see
//! `AIRLOCK_LOG`). A `tools/call` line names the principal, the tool, the
//! invocation id, the envelope's status (and reason code) and
//! `duration_ms`; a `tools/list` line the principal, the number of tools
//! and `duration_ms`; a request the HTTP gate refused its HTTP status and
//! reason code. Arguments and contents are never logged: the journal is the
//! record of what a call did.

use airlock_core::{Envelope, Refusal};
use airlock_runtime::engine::elapsed_ms;
use std::time::Instant;

/// The target of every request line (for filters: `airlock::request=info`).
pub const TARGET: &str = "airlock::request";

/// A `tools/call` answered with `envelope`.
pub(crate) fn call(principal: &str, tool: &str, envelope: &Envelope, began: Instant) {
    tracing::info!(
        target: TARGET,
        method = "tools/call",
        principal,
        tool,
        invocation_id = envelope.invocation_id.as_deref().unwrap_or("-"),
        status = envelope.status.as_str(),
        code = envelope.error.as_ref().map(|e| e.code.as_str()),
        duration_ms = elapsed_ms(began),
        "request"
    );
}

/// A `tools/list` answered with `tools` tools.
pub(crate) fn list(principal: &str, tools: usize, began: Instant) {
    tracing::info!(
        target: TARGET,
        method = "tools/list",
        principal,
        tools,
        status = "ok",
        duration_ms = elapsed_ms(began),
        "request"
    );
}

/// An HTTP request the gate refused before rmcp saw it.
pub(crate) fn refused_at_gate(http_status: u16, refusal: &Refusal) {
    tracing::info!(
        target: TARGET,
        http_status,
        status = "refused",
        code = refusal.code.as_str(),
        "request refused at the gate"
    );
}
