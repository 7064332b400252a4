//! `airlock approver init`, `airlock approve` and `airlock approvals
//! list|show|deny`: the approver's side of exact-call approval.

use super::Answer;
use crate::cli::ApprovalsCommand;
use airlock_core::{Config, Envelope, Refusal};
use airlock_runtime::approval::{default_key_path, forbidden_places, key_path, ApproverKey};
use airlock_runtime::Runtime;
use serde_json::json;
use std::path::Path;

/// Makes an approver key and answers with the entry that pins it.
pub fn init(config: &Config, key: Option<&Path>, id: Option<&str>) -> Result<Envelope, Refusal> {
    let id = match id {
        Some(id) => id.to_owned(),
        None => std::env::var("USER")
            .ok()
            .filter(|u| airlock_core::approval::check_approver_id(u).is_ok())
            .unwrap_or_else(|| "approver".to_owned()),
    };
    airlock_core::approval::check_approver_id(&id).map_err(|why| crate::usage(format!("--id {id:?}: {why}")))?;
    let path = key_path(key)?;
    let is_default = key.is_none() || default_key_path().as_deref() == Some(path.as_path());
    let authority = airlock_hostfs::HostAuthority::ambient();
    let created = ApproverKey::create(&authority, &path, is_default, &forbidden_places(config))?;
    let public_key = created.public_key_text();
    let paste = format!("[[approval.approvers]]\nid = \"{id}\"\npublic_key = \"{public_key}\"\n");
    eprintln!(
        "airlock: approver key written to {}; add this to the [approval] section of airlock.toml:\n{paste}",
        path.display()
    );
    Ok(Envelope {
        content: Some(json!({
            "key_file": path.display().to_string(),
            "id": id,
            "public_key": public_key,
            "key_id": created.key_id(),
            "config": paste,
        })),
        ..Envelope::ok()
    })
}

/// Signs and stores an approval of the waiting call with `digest`.
pub fn approve(
    runtime: &Runtime,
    digest: &str,
    key: Option<&Path>,
    invocation: Option<&str>,
) -> Result<Envelope, Refusal> {
    if let Some(id) = invocation {
        airlock_runtime::check_invocation_id(id)?;
    }
    runtime.pinned_approvers()?;
    let key = runtime.approver_key(key)?;
    Ok(Envelope { content: Some(runtime.approve(digest, invocation, &key)?), ..Envelope::ok() })
}

/// `airlock approvals list|show|deny`.
pub fn run(runtime: &Runtime, cmd: ApprovalsCommand) -> Result<Answer, Refusal> {
    let content = match cmd {
        ApprovalsCommand::List { json } => {
            let waiting = runtime.waiting_for_approval()?;
            let envelope = Envelope { content: Some(json!({ "waiting": waiting })), ..Envelope::ok() };
            return Ok(super::report::status(json, envelope, |_| table(&waiting)));
        }
        ApprovalsCommand::Show { id } => runtime.show_prepared(&id)?,
        ApprovalsCommand::Deny { id, reason } => runtime.deny(&id, reason.as_deref())?,
    };
    Ok(Envelope { content: Some(content), ..Envelope::ok() }.into())
}

/// `approvals list` for people: one line a waiting call.
fn table(waiting: &[airlock_runtime::approval::WaitingCall]) -> String {
    if waiting.is_empty() {
        return "no call is waiting for an approval\n".to_owned();
    }
    let mut out = format!("{:<40} {:<20} {:<16} {:<26} digest\n", "invocation", "tool", "principal", "expires");
    for w in waiting {
        out.push_str(&format!(
            "{:<40} {:<20} {:<16} {:<26} {}\n",
            w.invocation_id,
            w.tool,
            w.principal.as_deref().unwrap_or("-"),
            w.expires_at.as_deref().unwrap_or("-"),
            w.descriptor_sha256
        ));
    }
    out
}
