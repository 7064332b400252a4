//! Exact-call approval: a tool with risk tier high or critical, or
//! `human_approval = true`, stops after prepare; an approver signs a
//! statement for that exact call (descriptor digest and invocation id) with
//! their own Ed25519 key (`airlock approve DIGEST`), and `airlock dispatch
//! ID` runs the prepared call once, from its snapshots, only if the
//! statement verifies under a key pinned in `[approval] approvers`.
//!
//! The signed approval is the file `STATE/approvals/ID` (and a signed
//! `ApprovalGranted` record); a dispatch verifies it, then consumes it by
//! renaming it to `ID.used` without replacing anything, so it serves exactly
//! once. Anyone who can write the state directory can put a file there;
//! only an approver's key can make one that verifies.
//!
//! A prepared call waits at most `[approval] ttl`; an approver may instead
//! deny it (`airlock approvals deny`), which settles it and releases its
//! staging room.
//!
//! # Approval
//!
//! `needs_approval` = risk tier high or critical, or `human_approval`. The run
//! stops after a durable prepare whose record holds the principal,
//! `prepared_at` and `expires_at` (`[approval] ttl`, default 24 h, ≤ 30 d);
//! the agent's answer names the invocation id and digest and gives no command.
//! An approval is a signed statement (DESIGN.md §3, "Journal") by the
//! approver's own key; `[[approval.approvers]]` pins `id` and `public_key =
//! "ed25519:<64 hex>"` (the journal key's text form; points checked at
//! start-up).
//!
//! `airlock approve` loads the key (raw 32-byte seed, `O_NOFOLLOW`, owned by
//! the caller, `0600`, one link, in a directory no other user may write, and,
//! by `(dev, ino)` of every ancestor, not inside a ceiling, a broker root or
//! the state dir; `approver init` creates it under the same rules, by default
//! in `$XDG_CONFIG_HOME/airlock/` or `~/.config/airlock/` made `0700`), finds
//! the one waiting call with the digest (`--invocation` when several share
//! it), stores `STATE/approvals/ID` (replacing a file that does not verify)
//! and journals `ApprovalGranted` (approver, key id, expiry, signature).
//!
//! Dispatch refuses a denied call (`approval.denied`) or an expired one
//! (`approval.expired`) before reading anything, then verifies the stored
//! approval against the pinned keys only (`approval.no_approvers`,
//! `approval.unknown_approver`, `approval.invalid` for a bad signature or
//! another digest or invocation, `approval.expired`), and consumes it by a
//! no-replace rename to `ID.used` (+ `ApprovalConsumed` with approver and key
//! id) before `STATE/invocations/ID/dispatched` is created exclusively; it
//! re-hashes every snapshot against the descriptor and re-holds the output
//! parent by its recorded identity. `approvals deny` writes `denied` and then
//! takes the same exclusive `dispatched` marker (of a deny and a dispatch at
//! once, one wins), releases the reservation and journals `ApprovalDenied`.
//!
//! Not covered: an agent that can read an approver's key file can approve
//! (same uid: `airlock doctor` warns when the default key is readable); an
//! approver who must write the state directory to store an approval runs as a
//! user who can.

pub(crate) mod key;
mod statement;

pub use key::{check_placement, default_key_path, forbidden_places, key_path, ApproverKey, DEFAULT_KEY_FILE};
pub use statement::{pinned, PinnedApprover, SignedApproval, Statement, MAX_APPROVAL_BYTES, STATEMENT_TYPE};

use crate::store::PreparedRecord;
use crate::Runtime;
use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::PrivateDir;
use airlock_journal::{format_rfc3339, kind};
use serde::Serialize;
use serde_json::json;
use std::io::Read;

/// Directory of approvals under the state dir.
pub const APPROVALS: &str = "approvals";
pub use crate::store::DISPATCHED;
/// File of a prepared call an approver denied (its reason), beside [`DISPATCHED`].
pub const DENIED: &str = "denied";

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

/// A prepared call that has been neither dispatched nor denied.
#[derive(Debug, Clone, Serialize)]
pub struct WaitingCall {
    /// The invocation id.
    pub invocation_id: String,
    /// The tool.
    pub tool: String,
    /// Its descriptor digest.
    pub descriptor_sha256: String,
    /// Who made it, if recorded.
    pub principal: Option<String>,
    /// When it was prepared (RFC 3339), if recorded.
    pub prepared_at: Option<String>,
    /// When it expires (RFC 3339), if recorded.
    pub expires_at: Option<String>,
    /// Whether it needs an approval to run.
    pub needs_approval: bool,
    /// Whether an unused approval is stored for it (not yet verified).
    pub approval_stored: bool,
    /// Whether it is past its expiry.
    pub expired: bool,
    /// The session it starts or interacts with, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

impl Runtime {
    fn approvals(&self) -> Result<PrivateDir, Refusal> {
        Ok(self.state().ensure_subdir(APPROVALS)?)
    }

    fn config_name(&self) -> String {
        self.config().source.as_ref().map_or_else(|| "airlock.toml".to_owned(), |p| p.display().to_string())
    }

    /// The pinned approvers; none is `approval.no_approvers`, naming the
    /// configuration to add.
    pub fn pinned_approvers(&self) -> Result<Vec<PinnedApprover>, Refusal> {
        let pins = pinned(&self.config().approval.approvers)?;
        if pins.is_empty() {
            return Err(Refusal::new(
                ReasonCode::ApprovalNoApprovers,
                format!(
                    "no approver is configured, so no call can be approved: an approver runs `airlock approver \
                     init` as their own user and the operator adds the [[approval.approvers]] entry it prints (id \
                     and public_key) to {}",
                    self.config_name()
                ),
            ));
        }
        Ok(pins)
    }

    /// Loads the approver key at `path` (default place when `None`),
    /// refusing one kept where calls can reach it.
    pub fn approver_key(&self, path: Option<&std::path::Path>) -> Result<ApproverKey, Refusal> {
        let path = key_path(path)?;
        ApproverKey::load(self.authority(), &path, &forbidden_places(self.config()))
    }

    /// Signs an approval of the one waiting call with `digest` (or of
    /// `invocation`, when several share it) with `key`, stores it and
    /// journals `ApprovalGranted`. Refused without pinned approvers
    /// (`approval.no_approvers`), for a key that is not pinned
    /// (`approval.unknown_approver`), and when no waiting call has that
    /// digest (`approval.unknown`). Approving twice is one approval.
    pub fn approve(
        &self,
        digest: &str,
        invocation: Option<&str>,
        key: &ApproverKey,
    ) -> Result<serde_json::Value, Refusal> {
        digest_hex(digest)?;
        let pins = self.pinned_approvers()?;
        let public = key.signing().verifying_key();
        let approver = pins.iter().find(|p| p.key == public).ok_or_else(|| {
            Refusal::new(
                ReasonCode::ApprovalUnknownApprover,
                format!(
                    "the key {} ({}) is not pinned in [approval] approvers of {}; pin its public key {} first",
                    key.key_id(),
                    key.path().display(),
                    self.config_name(),
                    key.public_key_text()
                ),
            )
        })?;
        let now = airlock_staging::unix_now();
        let mut waiting: Vec<(String, PreparedRecord)> = self
            .waiting_records()?
            .into_iter()
            .filter(|(_, r)| r.descriptor_sha256 == digest && r.expires_at.is_some_and(|e| now < e))
            .filter(|(id, _)| invocation.is_none_or(|want| want == id))
            .collect();
        let (id, record) = match waiting.len() {
            0 => {
                return Err(Refusal::new(
                    ReasonCode::ApprovalUnknown,
                    format!("no prepared call waiting for dispatch has the descriptor digest {digest}"),
                ))
            }
            1 => waiting.remove(0),
            _ => {
                let ids: Vec<&str> = waiting.iter().map(|(id, _)| id.as_str()).collect();
                return Err(Refusal::new(
                    ReasonCode::Usage,
                    format!(
                        "{} calls wait with the digest {digest} ({}); approve one with --invocation ID",
                        ids.len(),
                        ids.join(", ")
                    ),
                ));
            }
        };
        let expires_at = record.expires_at.unwrap_or_else(|| now.saturating_add(self.config().approval.ttl_seconds));
        let approvals = self.approvals()?;
        if let Ok(existing) = read_approval(&approvals, &id) {
            if existing.verify(&pins, digest, &id, now).is_ok_and(|a| a.id == approver.id) {
                return Ok(granted(&existing, false));
            }
        }
        let statement = Statement {
            kind: STATEMENT_TYPE.to_owned(),
            descriptor_sha256: digest.to_owned(),
            invocation_id: id.clone(),
            approver: approver.id.clone(),
            expires_at,
        };
        let signed = SignedApproval::sign(statement, key.signing());
        // Replaces whatever was there (a file that did not verify, or
        // another approver's approval): the newest verified one serves.
        approvals.replace_file(&id, &signed.to_bytes())?;
        self.record(
            kind::APPROVAL_GRANTED,
            Some(&id),
            json!({
                "descriptor_sha256": digest,
                "approver": approver.id,
                "key_id": signed.key_id,
                "expires_at": expires_at,
                "signature": signed.signature,
            }),
        )?;
        Ok(granted(&signed, true))
    }

    /// Every prepared call neither dispatched nor denied, with its record.
    fn waiting_records(&self) -> Result<Vec<(String, PreparedRecord)>, Refusal> {
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
            // Only calls kept for a later dispatch have an expiry; a call
            // run at once left its record behind and waits for nothing.
            match self.prepared_record(&id) {
                Ok(record) if record.expires_at.is_some() => out.push((id, record)),
                _ => {}
            }
        }
        out.sort_by(|a, b| a.1.prepared_at.cmp(&b.1.prepared_at).then_with(|| a.0.cmp(&b.0)));
        Ok(out)
    }

    /// `airlock approvals list`: the calls that wait for an approval (not
    /// expired, not dispatched, not denied), oldest first.
    pub fn waiting_for_approval(&self) -> Result<Vec<WaitingCall>, Refusal> {
        let approvals = self.approvals()?;
        let now = airlock_staging::unix_now();
        Ok(self
            .waiting_records()?
            .into_iter()
            .map(|(id, r)| waiting_call(&approvals, &id, &r, now))
            .filter(|w| w.needs_approval && !w.expired)
            .collect())
    }

    /// `airlock approvals show ID`: a prepared call, where it stands, and its descriptor.
    pub fn show_prepared(&self, id: &str) -> Result<serde_json::Value, Refusal> {
        crate::id::check_invocation_id(id)?;
        let store = self.prepared_store(id)?;
        let record = self.prepared_record(id)?;
        let approvals = self.approvals()?;
        let call = waiting_call(&approvals, id, &record, airlock_staging::unix_now());
        let state = if store.contains(DENIED) {
            "denied"
        } else if store.contains(DISPATCHED) {
            "dispatched"
        } else if call.expired {
            "expired"
        } else {
            "waiting"
        };
        let mut value = serde_json::to_value(&call).expect("a waiting call serializes");
        value["state"] = json!(state);
        value["descriptor"] = serde_json::to_value(&record.descriptor).expect("a descriptor serializes");
        Ok(value)
    }

    fn prepared_store(&self, id: &str) -> Result<PrivateDir, Refusal> {
        let store = self.invocations()?.open_subdir(id).map_err(|_| {
            Refusal::new(ReasonCode::InvocationNotFound, format!("no prepared call {id:?} in this state directory"))
        })?;
        if !store.contains(crate::store::PREPARED_FILE) {
            return Err(Refusal::new(ReasonCode::InvocationNotFound, format!("{id} was refused, not prepared")));
        }
        Ok(store)
    }

    /// `airlock approvals deny ID`: settles a waiting call so it never
    /// runs (`approval.denied` on dispatch), releases its staging room,
    /// drops any stored approval of it and journals `ApprovalDenied`.
    pub fn deny(&self, id: &str, reason: Option<&str>) -> Result<serde_json::Value, Refusal> {
        crate::id::check_invocation_id(id)?;
        let store = self.prepared_store(id)?;
        let record = self.prepared_record(id)?;
        if record.expires_at.is_none() {
            return Err(Refusal::new(
                ReasonCode::InvocationNotFound,
                format!("{id} was not kept for a later dispatch; there is nothing to deny"),
            ));
        }
        let settled = |store: &PrivateDir| {
            if store.contains(DENIED) {
                Refusal::new(ReasonCode::ApprovalDenied, format!("{id} has already been denied"))
            } else {
                Refusal::new(ReasonCode::InvocationDuplicate, format!("{id} has already been dispatched"))
            }
        };
        if store.contains(DISPATCHED) {
            return Err(settled(&store));
        }
        let reason = reason.unwrap_or("");
        let uid = rustix::process::getuid().as_raw();
        store
            .write_new_file(DENIED, json!({ "reason": reason, "uid": uid }).to_string().as_bytes())
            .map_err(|_| settled(&store))?;
        // The same exclusive marker a dispatch takes: of a deny and a
        // dispatch at once, exactly one settles the call.
        if let Err(e) = crate::store::mark(&store, DISPATCHED) {
            let _ = store.remove_tree(DENIED);
            return Err(if e.errno() == Some(rustix::io::Errno::EXIST) {
                Refusal::new(ReasonCode::InvocationDuplicate, format!("{id} has already been dispatched"))
            } else {
                e.into()
            });
        }
        store.sync()?;
        let released = match self.pool().release(id) {
            Ok(bytes) => bytes,
            Err(r) if r.code == ReasonCode::StagingNotReserved => 0,
            Err(r) => return Err(r),
        };
        let approvals = self.approvals()?;
        if approvals.contains(id) {
            approvals.remove_tree(id)?;
        }
        self.record(
            kind::APPROVAL_DENIED,
            Some(id),
            json!({
                "descriptor_sha256": record.descriptor_sha256,
                "reason": reason,
                "denied_by_uid": uid,
                "released_bytes": released,
            }),
        )?;
        Ok(json!({ "denied": id, "descriptor_sha256": record.descriptor_sha256, "released_bytes": released }))
    }

    /// Refuses to dispatch a call that was denied (`approval.denied`) or is
    /// past its expiry (`approval.expired`), before anything else is read.
    pub(crate) fn check_waiting(&self, id: &str) -> Result<(), Refusal> {
        crate::id::check_invocation_id(id)?;
        let Ok(store) = self.invocations()?.open_subdir(id) else { return Ok(()) };
        if store.contains(DENIED) {
            return Err(denied(id));
        }
        if store.contains(DISPATCHED) || !store.contains(crate::store::PREPARED_FILE) {
            return Ok(());
        }
        let record = self.prepared_record(id)?;
        if let Some(at) = record.expires_at {
            if airlock_staging::unix_now() >= at {
                return Err(Refusal::new(
                    ReasonCode::ApprovalExpired,
                    format!(
                        "{id} expired at {} ([approval] ttl = {} s) and will not run; its snapshots are released by \
                         the next call or `airlock staging gc`; make the call again",
                        format_rfc3339(at),
                        self.config().approval.ttl_seconds
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Verifies the stored approval of prepared call `id` (descriptor
    /// `digest`) against the pinned keys, its digest, its invocation id and
    /// its expiry, then uses it, once: a call with no approval (or whose
    /// approval was used) is `approval.required`.
    pub(crate) fn consume_approval(&self, id: &str, digest: &str) -> Result<(), Refusal> {
        let pins = self.pinned_approvers()?;
        let approvals = self.approvals()?;
        let signed = read_approval(&approvals, id).map_err(|r| match r.code {
            ReasonCode::ApprovalInvalid | ReasonCode::RecordVersion => r,
            _ => Refusal::new(
                ReasonCode::ApprovalRequired,
                format!("{id} (descriptor {digest}) has no approval: it waits for an approver"),
            ),
        })?;
        let approver = signed.verify(&pins, digest, id, airlock_staging::unix_now())?;
        approvals.rename_noreplace(id, &format!("{id}.used")).map_err(|_| {
            Refusal::new(
                ReasonCode::ApprovalRequired,
                format!("the approval of {id} has already been used; it waits for an approver"),
            )
        })?;
        approvals.sync()?;
        self.record(
            kind::APPROVAL_CONSUMED,
            Some(id),
            json!({ "descriptor_sha256": digest, "approver": approver.id, "key_id": signed.key_id }),
        )
    }
}

/// `approval.denied` for `id`.
pub(crate) fn denied(id: &str) -> Refusal {
    Refusal::new(ReasonCode::ApprovalDenied, format!("{id} was denied by an approver and will not run"))
}

/// Reads `approvals/ID` (bounded, never through a link) and parses it.
fn read_approval(approvals: &PrivateDir, id: &str) -> Result<SignedApproval, Refusal> {
    let mut bytes = Vec::new();
    approvals
        .open_file(id)?
        .take(MAX_APPROVAL_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Refusal::new(ReasonCode::Internal, format!("reading the approval of {id}: {e}")))?;
    SignedApproval::parse(&bytes)
}

fn granted(signed: &SignedApproval, new: bool) -> serde_json::Value {
    let s = &signed.statement;
    json!({
        "descriptor_sha256": s.descriptor_sha256,
        "invocation_id": s.invocation_id,
        "approver": s.approver,
        "key_id": signed.key_id,
        "expires_at": format_rfc3339(s.expires_at),
        "new": new,
    })
}

fn waiting_call(approvals: &PrivateDir, id: &str, r: &PreparedRecord, now: u64) -> WaitingCall {
    let d = &r.descriptor;
    WaitingCall {
        invocation_id: id.to_owned(),
        tool: d.tool.clone(),
        descriptor_sha256: r.descriptor_sha256.clone(),
        principal: Some(r.principal.clone()),
        prepared_at: r.prepared_at.map(format_rfc3339),
        expires_at: r.expires_at.map(format_rfc3339),
        needs_approval: needs_approval(&d.risk_tier, d.human_approval),
        approval_stored: approvals.contains(id),
        expired: r.expires_at.is_some_and(|at| now >= at),
        session: r.session.clone(),
    }
}
