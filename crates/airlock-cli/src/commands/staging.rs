//! `airlock staging status|gc|release`.

use super::Answer;
use crate::cli::StagingCommand;
use airlock_core::{Envelope, Refusal};
use airlock_runtime::staging::PoolStatus;
use airlock_runtime::Runtime;
use std::fmt::Write;

/// Runs a staging subcommand.
pub fn run(runtime: &Runtime, cmd: StagingCommand) -> Result<Answer, Refusal> {
    let pool = runtime.pool();
    let content = match cmd {
        StagingCommand::Status { json } => {
            let status = pool.status()?;
            let mut content = to_json(serde_json::to_value(&status));
            // Live sessions hold their reservations in the session holder.
            let sessions = super::session::live_sessions(runtime);
            content["sessions"] = sessions.clone();
            let envelope = Envelope { content: Some(content), ..Envelope::ok() };
            return Ok(super::report::status(json, envelope, |_| {
                let mut text = table(&status);
                for s in sessions.as_array().into_iter().flatten() {
                    let _ = writeln!(text, "session {} ({}): live in the session holder", s["session"], s["tool"]);
                }
                text
            }));
        }
        StagingCommand::Gc => {
            let mut report = to_json(serde_json::to_value(pool.gc()?));
            // Settled calls' directories past `[state] keep_settled` go too.
            report["settled_invocations_removed"] = runtime.sweep_settled()?.into();
            // Containers, sandboxes and call directories of container tiers
            // whose calls' airlock died (after the pool's gc, which released
            // those calls' reservations).
            report["tier_leftovers_removed"] = to_json(serde_json::to_value(runtime.reap_tier_leftovers()?));
            report
        }
        StagingCommand::Release { id } => {
            airlock_runtime::check_invocation_id(&id)?;
            serde_json::json!({ "released": id, "bytes": pool.release(&id)? })
        }
    };
    Ok(Envelope { content: Some(content), ..Envelope::ok() }.into())
}

fn to_json(value: serde_json::Result<serde_json::Value>) -> serde_json::Value {
    value.expect("staging reports serialize")
}

/// The status for people: totals, then one line a reservation.
fn table(status: &PoolStatus) -> String {
    let mut out = format!(
        "staging pool: {} of {} reservations, {} of {} bytes reserved; {} waiting for dispatch ({} of {} bytes)\n",
        status.reserved_snapshots,
        status.max_snapshots,
        status.reserved_bytes,
        status.max_bytes,
        status.pending_reservations,
        status.pending_bytes,
        status.max_bytes
    );
    if !status.reservations.is_empty() {
        let _ = writeln!(out, "{:<40} {:<12} {:>12} {:>6}  holder", "invocation", "purpose", "bytes", "files");
    }
    for r in &status.reservations {
        let res = &r.reservation;
        let holder = match res.owner {
            None if r.expired => "durable, expired (the next admission or `airlock staging gc` reaps it)".to_owned(),
            None => "durable (prepared, waiting for dispatch)".to_owned(),
            Some(o) if r.live => format!("pid {} (live)", o.pid),
            Some(o) => format!("pid {} (gone: `airlock staging gc` reaps it)", o.pid),
        };
        let purpose = serde_json::to_value(res.purpose).ok().and_then(|v| v.as_str().map(str::to_owned));
        let _ = writeln!(
            out,
            "{:<40} {:<12} {:>12} {:>6}  {holder}",
            res.invocation_id,
            purpose.unwrap_or_default(),
            res.charged,
            res.files
        );
    }
    for orphan in &status.orphans {
        let _ = writeln!(
            out,
            "orphan: {orphan} (removed by `airlock staging gc`, or by an admission that finds the pool full)"
        );
    }
    out
}
