//! `airlock isolated --root NAME=PATH:RIGHTS … -- COMMAND…` and
//! `airlock isolated recover --root …`.

use crate::cli::{IsolatedArgs, IsolatedCommand};
use airlock_core::{Envelope, Refusal};
use airlock_runtime::{new_invocation_id, IsolatedRequest, RootGrant, Runtime};
use std::io::IsTerminal;
use std::time::Duration;

/// Runs one submission, or a recovery.
pub fn run(runtime: &Runtime, args: IsolatedArgs) -> Result<Envelope, Refusal> {
    let grants = |specs: &[String]| specs.iter().map(|s| RootGrant::parse(s)).collect::<Result<Vec<_>, _>>();
    if let Some(IsolatedCommand::Recover { roots }) = args.action {
        let report = runtime.isolated_recover(&grants(&roots)?)?;
        return Ok(Envelope { content: Some(report), ..Envelope::ok() });
    }
    if args.command.is_empty() {
        return Err(crate::usage("no command: give it after `--`, e.g. `-- sh -c 'airlock-fs list data'`"));
    }
    if args.roots.is_empty() {
        return Err(crate::usage("no --root NAME=PATH:RIGHTS was given; the command would reach nothing"));
    }
    if args.timeout == Some(0) {
        return Err(crate::usage("--timeout must be at least 1 second"));
    }
    let most = airlock_core::limits::hard::MAX_TIMEOUT_SECONDS;
    if args.timeout.is_some_and(|t| t > most) {
        return Err(crate::usage(format!("--timeout must be at most {most} seconds (24 h)")));
    }
    let request = IsolatedRequest {
        roots: grants(&args.roots)?,
        argv: args.command,
        invocation_id: args.invocation_id.unwrap_or_else(new_invocation_id),
        timeout: args.timeout.map(Duration::from_secs),
        broker_sha256: args.broker_sha256,
        principal: None,
    };
    if std::io::stderr().is_terminal() {
        let names: Vec<&str> = request.roots.iter().map(|r| r.name.as_str()).collect();
        eprintln!(
            "airlock: isolated ({}): starting the broker for {} and the worker…",
            request.invocation_id,
            names.join(", ")
        );
    }
    Ok(runtime.isolated(&request))
}
