//! `airlock git-query OPERATION [NAME=VALUE]...`: one Git query
//! (`git_status`, `git_log`, `git_diff`, `git_staged_diff`) on a bounded
//! snapshot of a repository, answered by the driver in a native worker.

use airlock_core::{Envelope, Refusal};
use airlock_runtime::Runtime;
use clap::Args;
use std::collections::BTreeMap;

/// A Git query and its arguments.
#[derive(Debug, Args)]
pub struct GitQueryArgs {
    /// git_status, git_log, git_diff or git_staged_diff.
    pub operation: String,
    /// `path=DIR` (the repository, relative to the working directory;
    /// default `.`), `max_count=N` (git_log, 1…1000, default 100).
    #[arg(value_name = "NAME=VALUE")]
    pub args: Vec<String>,
    /// Use this invocation id instead of a fresh one.
    #[arg(long, value_name = "ID")]
    pub invocation_id: Option<String>,
}

/// Runs one Git query; a refusal is an envelope like any other.
pub fn run_git_query(runtime: &Runtime, query: GitQueryArgs) -> Result<Envelope, Refusal> {
    let mut args = BTreeMap::new();
    for pair in &query.args {
        let (name, value) =
            pair.split_once('=').ok_or_else(|| crate::usage(format!("expected NAME=VALUE, got {pair:?}")))?;
        if args.insert(name.to_owned(), value.to_owned()).is_some() {
            return Err(crate::usage(format!("argument {name:?} given twice")));
        }
    }
    let id = query.invocation_id.clone().unwrap_or_else(airlock_runtime::new_invocation_id);
    Ok(runtime.git_query(&query.operation, &args, &id).unwrap_or_else(|refusal| Envelope {
        invocation_id: Some(id.clone()),
        tool: Some(query.operation.clone()),
        ..Envelope::from_refusal(&refusal)
    }))
}
