//! A `[broker]` call kept for an exact-call approval, at its dispatch.
//!
//! The approval signs the descriptor digest, which binds every root (name,
//! host path, rights, `(dev, ino)`), the budgets and both helper digests.
//! Nothing is kept beside the record: dispatch re-opens each root from the
//! manifest and `[broker.roots]` as prepare did, re-seals the broker and
//! the client, builds the descriptor again and runs only if its digest is
//! the approved one. A root replaced by another directory (another
//! identity), a changed right or budget, or another helper build is
//! `approval.call_changed`, naming what changed; nothing has run.

use super::roots::RootGrant;
use super::{Isolated, IsolatedPayload, ISOLATED_TRANSPORT};
use crate::engine::{CallStart, PreparedCall, Transport};
use crate::transport::exec::KeptCall;
use crate::Runtime;
use airlock_core::broker::BrokerBoundary;
use airlock_core::manifest::OutputFormat;
use airlock_core::{CallShape, Descriptor, ReasonCode, Refusal};
use std::time::Duration;

impl Runtime {
    /// The kept `[broker]` call, its roots re-opened and its helpers
    /// re-sealed, refused unless its descriptor is still the approved one.
    pub(crate) fn load_kept_isolated(&self, kept: KeptCall) -> Result<PreparedCall<IsolatedPayload>, Refusal> {
        let KeptCall { store, record, manifest } = kept;
        let def = manifest
            .broker
            .as_ref()
            .ok_or_else(|| Refusal::new(ReasonCode::Internal, "the kept isolated call has no [broker] manifest"))?;
        let roots = def.roots.iter().map(|e| RootGrant::from_manifest(e, self)).collect::<Result<Vec<_>, _>>()?;
        let approved = &record.descriptor;
        let submission = Isolated {
            args: approved.args.clone(),
            argv: approved.argv.clone(),
            roots,
            timeout: Duration::from_secs(manifest.tool.timeout_seconds),
            format: manifest.output.as_ref().map_or(OutputFormat::Text, |o| o.format),
            broker_pin: None,
            pinned_tier: manifest.tool.sandbox.and_then(|s| s.tier),
        };
        let start = CallStart {
            invocation_id: &record.invocation_id,
            principal: &record.principal,
            keep: false,
            expires_at: None,
            progress: None,
            tier: None,
            session: false,
        };
        let prep = submission.prepare(self, &start)?;
        let mut again = Descriptor::new(
            &manifest.identity(),
            CallShape {
                transport: ISOLATED_TRANSPORT.to_owned(),
                args: prep.args,
                argv: prep.argv,
                working_dir: self.config().working_dir.clone(),
                tier: prep.tier,
                filesystem: prep.filesystem,
            },
        );
        again.policy_bundle = self.policy_bundle()?;
        if again.digest() != record.descriptor_sha256 {
            let was = approved.command_boundary.filesystem.broker.as_ref();
            let now = again.command_boundary.filesystem.broker.as_ref();
            return Err(Refusal::new(
                ReasonCode::ApprovalCallChanged,
                format!(
                    "{} changed since invocation {} was approved: {}; nothing ran. Prepare the call again and have it \
                     approved again",
                    approved.tool,
                    record.invocation_id,
                    what_changed(was, now)
                ),
            ));
        }
        let spec = airlock_policy::ToolSpec::from_manifest(&manifest);
        Ok(PreparedCall::reloaded(record, store, spec, None, prep.payload))
    }
}

/// For people: the first difference between the approved broker boundary
/// and the one dispatch found.
fn what_changed(was: Option<&BrokerBoundary>, now: Option<&BrokerBoundary>) -> String {
    let (Some(was), Some(now)) = (was, now) else { return "its boundary".to_owned() };
    for old in &was.roots {
        let Some(new) = now.roots.iter().find(|r| r.name == old.name) else {
            return format!("root {:?} is no longer granted", old.name);
        };
        if (&old.dev, &old.ino) != (&new.dev, &new.ino) || old.path != new.path {
            return format!(
                "root {:?} is another directory ({} at dev {} ino {} when approved, {} at dev {} ino {} now)",
                old.name, old.path, old.dev, old.ino, new.path, new.dev, new.ino
            );
        }
        if old.rights != new.rights {
            return format!("root {:?} grants {} where {} was approved", old.name, new.rights, old.rights);
        }
    }
    if was.roots.len() != now.roots.len() {
        return "the set of roots".to_owned();
    }
    if was.broker_sha256 != now.broker_sha256 {
        return format!("the broker is another build ({} now, {} approved)", now.broker_sha256, was.broker_sha256);
    }
    if was.client_sha256 != now.client_sha256 {
        return format!("the client is another build ({} now, {} approved)", now.client_sha256, was.client_sha256);
    }
    if was.budgets != now.budgets {
        return "the broker budgets ([broker.budgets] in airlock.toml)".to_owned();
    }
    "the call's descriptor".to_owned()
}
