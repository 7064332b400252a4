//! Retention of `STATE/invocations/`: the directory a settled call leaves
//! (its record and manifest bytes, or the note that reserved a refused id)
//! is removed once it is older than `[state] keep_settled` (default 7
//! days), and then every shared manifest copy no call names any more
//! (`store::SHARED_MANIFESTS`). The journal is never touched: it keeps
//! every record.
//!
//! A call is settled when its end was journaled ([`SETTLED`], written by
//! [`Runtime::journal_end`](crate::Runtime) unless the call waits for an
//! approval), when it was refused before it was committed (`refused.json`),
//! when an approver denied it, or when it was kept for a dispatch that never
//! came and has expired. Never removed, whatever their age: a call with a
//! staging reservation (running, or waiting for dispatch), one with a
//! pending-publication marker (recovery needs its record), and any other
//! (in progress, or waiting for an approval). Age is the directory's last
//! change (for a settled call: when it settled).
//!
//! Sweeps run at safe moments: at the start of a call (at most once per
//! `min(keep_settled, 1 h)`) and on `airlock staging gc`. Once removed, an
//! id is no longer reserved in the state directory; the journal still
//! names it.

use crate::approval::DENIED;
use crate::store::{DISPATCHED, PREPARED_FILE};
use crate::{ledger, Runtime};
use airlock_core::Refusal;
use std::collections::BTreeSet;

/// Marker in `STATE/invocations/ID` of a call whose end is journaled.
pub const SETTLED: &str = "settled";
/// Marker of a refused id (written when the refusal reserves the id).
pub const REFUSED: &str = "refused.json";
/// Marker in `STATE/invocations/` whose change time is the last sweep.
const SWEPT: &str = ".swept";
/// The longest time between two sweeps at the start of calls.
const SWEEP_EVERY_SECONDS: u64 = 3600;

impl Runtime {
    /// Marks invocation `id` settled: its end has been journaled.
    pub(crate) fn mark_settled(&self, id: &str) {
        if let Ok(dir) = self.invocations().and_then(|i| Ok(i.open_subdir(id)?)) {
            let _ = crate::store::mark(&dir, SETTLED);
        }
    }

    /// Removes every settled call's directory older than `[state]
    /// keep_settled` (see the module documentation); returns how many.
    pub fn sweep_settled(&self) -> Result<usize, Refusal> {
        let invocations = self.invocations()?;
        let _ = invocations.remove_tree(SWEPT);
        let _ = invocations.create_file(SWEPT);
        let keep = self.config().state.keep_settled.as_secs();
        let now = airlock_staging::unix_now();
        let busy: BTreeSet<String> = ledger::pending(self.state())?
            .into_iter()
            .map(|p| p.invocation_id)
            .chain(self.pool().status()?.reservations.into_iter().map(|r| r.reservation.invocation_id))
            .collect();
        let mut removed = 0;
        for id in invocations.entries()? {
            if id.starts_with('.') || busy.contains(&id) {
                continue;
            }
            let Some(changed) = invocations.modified_at(&id) else { continue };
            if now.saturating_sub(u64::try_from(changed).unwrap_or(u64::MAX)) < keep {
                continue;
            }
            let Ok(dir) = invocations.open_subdir(&id) else { continue };
            let settled = [SETTLED, REFUSED, DENIED].iter().any(|m| dir.contains(m))
                || (dir.contains(PREPARED_FILE)
                    && !dir.contains(DISPATCHED)
                    && self.prepared_record(&id).is_ok_and(|r| r.expires_at.is_some_and(|at| at <= now)));
            if settled && invocations.remove_tree(&id).is_ok() {
                removed += 1;
            }
        }
        crate::store::sweep_shared_manifests(&invocations);
        Ok(removed)
    }

    /// At the start of a call: sweeps if the last sweep is older than
    /// `min(keep_settled, 1 h)`. A failed sweep never stops the call.
    pub(crate) fn sweep_if_due(&self) {
        let Ok(invocations) = self.invocations() else { return };
        let every = self.config().state.keep_settled.as_secs().min(SWEEP_EVERY_SECONDS);
        let last = invocations.modified_at(SWEPT).and_then(|t| u64::try_from(t).ok()).unwrap_or(0);
        if airlock_staging::unix_now().saturating_sub(last) >= every {
            let _ = self.sweep_settled();
        }
    }
}
