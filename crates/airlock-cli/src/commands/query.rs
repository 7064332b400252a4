//! `airlock query OPERATION [NAME=VALUE]...`: a bounded source query
//! through the whole pipeline (descriptor, policy, journal): `read_file`,
//! `list_files`, `grep_files` answered in-process by the fixed broker;
//! `git_status`, `git_log`, `git_diff`, `git_staged_diff` answered by the
//! Git driver in a native worker from a bounded snapshot.

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
        if named.iter().any(|(n, _)| n == name) {
            return Err(crate::usage(format!("argument {name:?} given twice")));
        }
        named.push((name.to_owned(), serde_json::Value::String(value.to_owned())));
    }

    let request = CallRequest {
        tool: op.as_str().to_owned(),
        positional: Vec::new(),
        named,
        invocation_id: args.invocation_id.unwrap_or_else(new_invocation_id),
        principal: None,
        progress: crate::progress::terminal_hook(),
        tier: None,
    };
    let progress = std::io::stderr().is_terminal();
    if progress && op.is_git() {
        eprintln!(
            "airlock: {op} ({}): snapshotting the repository, then answering in a sandbox…",
            request.invocation_id
        );
    } else if progress {
        eprintln!("airlock: {op} ({}): querying…", request.invocation_id);
    }
    let envelope = runtime.run(&request);
    if progress {
        if let Some(c) = envelope.content.as_ref().filter(|c| c["partial"] == true) {
            eprintln!("airlock: {op}: the result is partial: {}", c["partial_reasons"]);
        }
    }
    Ok(envelope)
}
