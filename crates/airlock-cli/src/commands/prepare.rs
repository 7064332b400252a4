//! `airlock prepare`.

use crate::cli::CallArgs;
use airlock_core::{Envelope, Evidence, Refusal};
use airlock_runtime::{new_invocation_id, CallRequest, Runtime};

/// Builds the runtime's request from the command line.
pub fn request(call: CallArgs) -> Result<CallRequest, Refusal> {
    let mut named = Vec::with_capacity(call.named.len());
    for pair in call.named {
        let (name, value) =
            pair.split_once('=').ok_or_else(|| crate::usage(format!("--arg {pair:?}: expected NAME=VALUE")))?;
        named.push((name.to_owned(), serde_json::Value::String(value.to_owned())));
    }
    Ok(CallRequest {
        tool: call.tool,
        positional: call.values,
        named,
        invocation_id: call.invocation_id.unwrap_or_else(new_invocation_id),
        principal: None,
        progress: crate::progress::terminal_hook(),
        tier: call.tier,
    })
}

/// Prepares the call and answers with its descriptor.
pub fn run(runtime: &Runtime, call: CallArgs) -> Result<Envelope, Refusal> {
    let request = request(call)?;
    let tool_hint = request.tool.clone();
    match runtime.prepare(&request) {
        Ok(prepared) => Ok(Envelope {
            invocation_id: Some(prepared.invocation_id().to_owned()),
            tool: Some(prepared.descriptor().tool.clone()),
            stage: Some("prepared"),
            descriptor: Some(prepared.descriptor().clone()),
            evidence: Some(Evidence { descriptor_sha256: Some(prepared.digest().to_owned()), ..Evidence::default() }),
            ..Envelope::ok()
        }),
        Err(refusal) => Ok(Envelope {
            invocation_id: Some(request.invocation_id),
            tool: Some(tool_hint),
            ..Envelope::from_refusal(&refusal)
        }),
    }
}
