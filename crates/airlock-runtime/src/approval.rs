//! Exact-call approval: a tool with risk tier high or critical, or
//! `human_approval = true`, stops after prepare; an operator approves the
//! exact descriptor digest (`airlock approve DIGEST`), and `airlock dispatch
//! ID` runs that prepared call once, from its snapshots.
//!
//! An approval is a file `STATE/approvals/HEX` created exclusively and a
//! signed `ApprovalGranted` record; a dispatch consumes it by renaming it to
//! `HEX.used-ID` without replacing anything, so it serves exactly once.

use crate::prepare::PreparedCall;
use crate::Runtime;
use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::PrivateDir;
use airlock_journal::kind;
use serde_json::json;

/// Directory of approvals under the state dir.
pub const APPROVALS: &str = "approvals";
/// Marker file of a prepared call that has been dispatched.
pub const DISPATCHED: &str = "dispatched";

/// Whether a call to this tool needs an exact-call approval.
pub fn needs_approval(risk_tier: &str, human_approval: bool) -> bool {
    human_approval || matches!(risk_tier, "high" | "critical")
}

fn digest_hex(digest: &str) -> Result<&str, Refusal> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
        .ok_or_else(|| {
            Refusal::new(ReasonCode::Usage, format!("{digest:?} is not a descriptor digest (sha256:<64 hex>)"))
        })
}

impl Runtime {
    fn approvals(&self) -> Result<PrivateDir, Refusal> {
        Ok(self.state().ensure_subdir(APPROVALS)?)
    }

    /// Approves exactly `digest`. Refused (`approval.unknown`) unless a
    /// prepared, undispatched call has that digest. Approving twice is one
    /// approval.
    pub fn approve(&self, digest: &str) -> Result<serde_json::Value, Refusal> {
        let hex = digest_hex(digest)?;
        let waiting = self.prepared_with_digest(digest)?;
        if waiting.is_empty() {
            return Err(Refusal::new(
                ReasonCode::ApprovalUnknown,
                format!("no prepared call awaiting dispatch has the descriptor digest {digest}"),
            ));
        }
        let approvals = self.approvals()?;
        let fresh = match approvals.create_file(hex) {
            Ok(_) => true,
            Err(e) if e.errno() == Some(rustix::io::Errno::EXIST) => false,
            Err(e) => return Err(e.into()),
        };
        if fresh {
            approvals.sync()?;
            self.record(kind::APPROVAL_GRANTED,
                None,
                json!({ "descriptor_sha256": digest, "invocations": waiting, "approver_uid": rustix::process::getuid().as_raw() }),
            )?;
        }
        Ok(json!({ "descriptor_sha256": digest, "invocations": waiting, "new": fresh }))
    }

    /// Prepared calls with `digest` that have not been dispatched.
    fn prepared_with_digest(&self, digest: &str) -> Result<Vec<String>, Refusal> {
        let invocations = self.invocations()?;
        let mut out = Vec::new();
        for id in invocations.entries()? {
            if id.starts_with('.') {
                continue;
            }
            let Ok(dir) = invocations.open_subdir(&id) else { continue };
            if dir.contains(DISPATCHED) || !dir.contains(crate::store::PREPARED_FILE) {
                continue;
            }
            if self.prepared_record(&id).is_ok_and(|r| r.descriptor_sha256 == digest) {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// Uses the approval of `call`'s digest, once: a second use, or a call
    /// nobody approved, is `approval.required`.
    pub(crate) fn consume_approval(&self, call: &PreparedCall) -> Result<(), Refusal> {
        let hex = digest_hex(call.digest())?;
        let approvals = self.approvals()?;
        let used = format!("{hex}.used-{}", call.invocation_id());
        approvals.rename_noreplace(hex, &used).map_err(|_| {
            Refusal::new(
                ReasonCode::ApprovalRequired,
                format!(
                    "the descriptor digest {} has no unused approval; run `airlock approve {}`",
                    call.digest(),
                    call.digest()
                ),
            )
        })?;
        approvals.sync()?;
        self.record(kind::APPROVAL_CONSUMED, Some(call.invocation_id()), json!({ "descriptor_sha256": call.digest() }))
    }
}
