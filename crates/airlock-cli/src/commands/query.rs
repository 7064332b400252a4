//! `airlock query OPERATION [NAME=VALUE]...`: a bounded source query
//! (read_file, list_files, grep_files) answered by the fixed broker
//! through the whole pipeline (descriptor, policy, journal).

use crate::cli::QueryArgs;
use airlock_core::{Envelope, Refusal, SourceOp};
use airlock_runtime::{new_invocation_id, CallRequest, Runtime};
use std::io::IsTerminal;

/// Runs one source query.
pub fn run(runtime: &Runtime, args: QueryArgs) -> Result<Envelope, Refusal> {
    let op = SourceOp::parse(&args.operation).ok_or_else(|| {
        let known: Vec<&str> = SourceOp::ALL.iter().map(|o| o.as_str()).collect();
        crate::usage(format!("{:?} is not a source operation (one of {})", args.operation, known.join(", ")))
    })?;
    let mut named = Vec::with_capacity(args.pairs.len());
    for pair in args.pairs {
        let (name, value) =
            pair.split_once('=').ok_or_else(|| crate::usage(format!("{pair:?}: expected NAME=VALUE")))?;
        named.push((name.to_owned(), serde_json::Value::String(value.to_owned())));
    }
    let request = CallRequest {
        tool: op.as_str().to_owned(),
        positional: Vec::new(),
        named,
        invocation_id: args.invocation_id.unwrap_or_else(new_invocation_id),
    };
    let progress = std::io::stderr().is_terminal();
    if progress {
        eprintln!("airlock: {op} ({}): querying…", request.invocation_id);
    }
    let envelope = runtime.run(&request).unwrap_or_else(|refusal| Envelope {
        invocation_id: Some(request.invocation_id.clone()),
        tool: Some(request.tool.clone()),
        ..Envelope::from_refusal(&refusal)
    });
    if progress {
        if let Some(c) = envelope.content.as_ref().filter(|c| c["partial"] == true) {
            eprintln!("airlock: {op}: the result is partial: {}", c["partial_reasons"]);
        }
    }
    Ok(envelope)
}
