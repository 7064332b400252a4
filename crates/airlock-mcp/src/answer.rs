//! An airlock envelope as an MCP `tools/call` result.
//!
//! `structuredContent` is the envelope, `isError` is `status != ok`, and the
//! text starts with `CODE: message`, followed by the tool's last standard
//! error (the envelope's `stderr_tail`, at most 4 KiB), so a model that reads
//! only the text sees why a tool failed (jq's own message, say). An
//! `approval.required` result adds `approval:
//! {descriptor_sha256, invocation_id, waiting_for: "approver"}` and no
//! command line: the agent cannot approve.

use airlock_core::{Envelope, ReasonCode, Status};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Value};

/// The MCP result for `envelope`: `isError` unless the status is `ok`;
/// `structuredContent` is the envelope itself (status, invocation id,
/// content, `created_files`, evidence, error); the text content is the
/// tool's content for a success and `CODE: message` otherwise, with the
/// standard error's tail when the tool wrote any ([`error_text`]). An
/// approval-required call also carries `approval` with the descriptor
/// digest and the invocation id that wait for an approver (never a command
/// to run: only an approver's key can approve it).
pub fn to_result(envelope: &Envelope) -> CallToolResult {
    let mut structured = serde_json::to_value(envelope).unwrap_or_else(|e| {
        json!({ "status": "error", "error": {
        "code": ReasonCode::Internal.as_str(), "message": format!("encoding the envelope: {e}") } })
    });
    let ok = envelope.status == Status::Ok;
    let mut text = match (&envelope.error, &envelope.content) {
        (Some(_), _) => error_text(envelope),
        (None, Some(Value::String(s))) => s.clone(),
        (None, Some(v)) => v.to_string(),
        (None, None) => String::new(),
    };
    if let Some(approval) = approval(envelope) {
        if let Some(o) = structured.as_object_mut() {
            o.insert("approval".into(), approval);
        }
    }
    let mut content = vec![ContentBlock::text(std::mem::take(&mut text))];
    if ok && !envelope.created_files.is_empty() {
        let files: Vec<String> =
            envelope.created_files.iter().map(|f| format!("{} ({} bytes, {})", f.path, f.bytes, f.sha256)).collect();
        content.push(ContentBlock::text(format!("created: {}", files.join(", "))));
    }
    let mut result = if ok { CallToolResult::success(content) } else { CallToolResult::error(content) };
    result.structured_content = Some(structured);
    result
}

/// The text of a result that is not `ok`: `CODE: message`, then the tool's
/// standard error tail (already bounded by the envelope) after a line that
/// says what it is.
fn error_text(envelope: &Envelope) -> String {
    let Some(err) = &envelope.error else { return String::new() };
    let mut text = format!("{}: {}", err.code, err.message);
    if let Some(tail) = envelope.stderr_tail.as_deref().filter(|t| !t.trim().is_empty()) {
        text.push_str("\nstderr (last bytes):\n");
        text.push_str(tail);
    }
    text
}

/// For an `approval.required` answer: `{descriptor_sha256, invocation_id, waiting_for}`.
fn approval(envelope: &Envelope) -> Option<Value> {
    let err = envelope.error.as_ref()?;
    if err.code != ReasonCode::ApprovalRequired {
        return None;
    }
    let digest = envelope.evidence.as_ref()?.descriptor_sha256.clone()?;
    let id = envelope.invocation_id.clone()?;
    Some(json!({
        "descriptor_sha256": digest,
        "invocation_id": id,
        "waiting_for": "approver",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_core::{CreatedFile, Evidence, Refusal};

    #[test]
    fn a_refusal_is_an_error_result_with_its_code() {
        let e = Envelope::from_refusal(&Refusal::new(ReasonCode::OutputExists, "results/x exists"));
        let r = to_result(&e);
        assert_eq!(r.is_error, Some(true));
        let s = r.structured_content.unwrap();
        assert_eq!(s["status"], "refused");
        assert_eq!(s["error"]["code"], "output.exists");
        assert!(serde_json::to_string(&r.content).unwrap().contains("output.exists: results/x exists"));
    }

    #[test]
    fn a_failure_text_carries_the_stderr_tail() {
        let e = Envelope {
            stderr_tail: Some("jq: error: syntax error\n".into()),
            ..Envelope::from_refusal(&Refusal::new(ReasonCode::ToolFailed, "the tool exited with status 3"))
        };
        let r = to_result(&e);
        let text = serde_json::to_string(&r.content).unwrap();
        assert!(text.contains("tool.failed: the tool exited with status 3"), "{text}");
        assert!(text.contains("jq: error: syntax error"), "{text}");
    }

    #[test]
    fn a_success_carries_created_files_and_evidence() {
        let e = Envelope {
            content: Some(json!({"words": 3})),
            created_files: vec![CreatedFile { path: "results/o.json".into(), bytes: 5, sha256: "sha256:ab".into() }],
            evidence: Some(Evidence { descriptor_sha256: Some("sha256:cd".into()), ..Evidence::default() }),
            ..Envelope::ok()
        };
        let r = to_result(&e);
        assert_eq!(r.is_error, Some(false));
        let s = r.structured_content.unwrap();
        assert_eq!(s["created_files"][0]["path"], "results/o.json");
        assert_eq!(s["evidence"]["descriptor_sha256"], "sha256:cd");
    }

    #[test]
    fn approval_required_names_the_call_and_no_command() {
        let e = Envelope {
            invocation_id: Some("inv1".into()),
            evidence: Some(Evidence { descriptor_sha256: Some("sha256:ff".into()), ..Evidence::default() }),
            ..Envelope::from_refusal(&Refusal::new(ReasonCode::ApprovalRequired, "needs approval"))
        };
        let s = to_result(&e).structured_content.unwrap();
        assert_eq!(s["approval"]["descriptor_sha256"], "sha256:ff");
        assert_eq!(s["approval"]["invocation_id"], "inv1");
        assert_eq!(s["approval"]["waiting_for"], "approver");
        assert!(!serde_json::to_string(&to_result(&e)).unwrap().contains("airlock approve"));
    }
}
