//! `airlock worker`, `airlock cluster init|trust|nkey|policy|reconcile`, `airlock workers list`.

use super::Answer;
use crate::cli::{ClusterCommand, ClusterPolicyCommand, WorkerArgs};
use airlock_cluster::worker::Event;
use airlock_cluster::Role;
use airlock_core::{Envelope, Refusal};
use airlock_runtime::cluster::WorkerRequest;
use airlock_runtime::Runtime;
use serde_json::json;
use std::fmt::Write as _;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Serves calls until SIGTERM or SIGINT, reporting each on stderr; answers
/// with what it served.
pub fn worker(runtime: &Runtime, args: WorkerArgs) -> Result<Answer, Refusal> {
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::drain_on_signal(Arc::clone(&stop))?;
    let request = WorkerRequest { nats: args.nats, tier: args.tier, pool: args.pool };
    let key = runtime.journal().key().public_key();
    let mut on_event = |e: &Event| match e {
        Event::Serving { key_id } => eprintln!(
            "airlock worker: serving; key {key_id}\n  (pin it once: airlock cluster trust worker {})",
            key.to_text()
        ),
        Event::Took { invocation_id } => eprintln!("airlock worker: took {invocation_id}"),
        Event::Answered { invocation_id, verdict, ms } => {
            eprintln!("airlock worker: answered {invocation_id}: {verdict} in {ms} ms")
        }
        Event::Returned { invocation_id, reason } => {
            eprintln!("airlock worker: gave {invocation_id} back to the queue: {reason}")
        }
        Event::Dropped { reason } => eprintln!("airlock worker: dropped a message: {reason}"),
        Event::Draining => eprintln!("airlock worker: drained"),
    };
    let served = runtime.serve_cluster_worker(&request, &stop, &mut on_event)?;
    Ok(Envelope { content: Some(json!({ "served": served })), ..Envelope::ok() }.into())
}

/// `airlock cluster init|trust|nkey|policy|reconcile`.
pub fn run(runtime: &Runtime, cmd: ClusterCommand) -> Result<Answer, Refusal> {
    let content = match cmd {
        ClusterCommand::Init { nats } => {
            let key = runtime.cluster_init(nats.as_deref())?;
            json!({ "initialized": true, "edge_key": key.to_text(), "edge_key_id": key.key_id() })
        }
        ClusterCommand::Trust { role, key, nats } => {
            let role = if role == "edge" { Role::Edge } else { Role::Worker };
            let key = runtime.cluster_trust(nats.as_deref(), role, &key)?;
            json!({ "pinned": role.as_str(), "key": key.to_text(), "key_id": key.key_id() })
        }
        ClusterCommand::Nkey { file } => {
            let public = airlock_runtime::cluster::new_nkey_file(&file)?;
            json!({ "seed_file": file, "public_key": public })
        }
        ClusterCommand::Policy(ClusterPolicyCommand::Push { files, nats }) => {
            let bundle = runtime.push_cluster_policy(nats.as_deref(), &files)?;
            json!({ "policy_bundle": bundle, "files": files })
        }
        ClusterCommand::Policy(ClusterPolicyCommand::Show { nats }) => {
            match runtime.show_cluster_policy(nats.as_deref())? {
                Some((bundle, bytes)) => json!({ "policy_bundle": bundle, "bytes": bytes }),
                None => json!({ "policy_bundle": null }),
            }
        }
        ClusterCommand::Reconcile { nats } => json!({ "reconciled": runtime.cluster_reconcile(nats.as_deref())? }),
    };
    Ok(Envelope { content: Some(content), ..Envelope::ok() }.into())
}

/// `airlock workers list`.
pub fn list(runtime: &Runtime, nats: Option<&str>, json: bool) -> Result<Answer, Refusal> {
    let workers = runtime.cluster_workers(nats)?;
    let envelope = Envelope { content: Some(json!({ "workers": workers })), ..Envelope::ok() };
    Ok(super::report::status(json, envelope, |_| {
        let now = airlock_cluster::order::now_ms();
        let mut text = format!("{} worker(s)\n", workers.len());
        for w in &workers {
            let age = now.saturating_sub(w.updated_at_ms) / 1000;
            let _ = writeln!(
                text,
                "{} {}/{} on {} (pid {}): {}, ran {}, refused {}; reported {age} s ago",
                w.key_id,
                w.tier,
                w.pool,
                w.host,
                w.pid,
                w.state.as_str(),
                w.served.ran,
                w.served.refused,
            );
        }
        text
    }))
}
