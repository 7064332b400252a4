//! Who makes each call: the principal of every invocation in flight.
//!
//! A call's principal comes from its request (`CallRequest::principal`, set
//! by a front from an authenticated identity: the MCP transport, the
//! command line's `--principal`) or, when the request names none, from the
//! runtime (`[policy] principal`). It is registered for the call's
//! invocation id while the call runs, so every journal record of that call
//! carries it ([`Runtime::record`], [`Runtime::note`]) without each step
//! passing it along; Cedar sees the same value. The seq of each record
//! written for the call widens its range, the answer's `evidence.records`.
//!
//! # Principals
//!
//! A call's principal is its request's (`CallRequest.principal`, set by a front
//! from an authenticated identity: the MCP transport, the command line's
//! `--principal`), else `[policy] principal` (default `local`). It is
//! registered for the invocation id while the call runs (`caller.rs`), and
//! `Runtime::record`/`Runtime::note` put it in every journal record body
//! of that call (`"principal"`); records of no call (recovery, approvals)
//! carry the acting process's. The prepared record keeps it (`prepared.json`
//! format 2), so a dispatched call stays its preparer's: Cedar judges the
//! preparer, whoever dispatches. The envelope's `evidence.principal` and the
//! attestation's `predicate.principal` name it.

use crate::{ledger, Runtime};
use airlock_core::{RecordRange, Refusal};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;

/// Key of the principal in every journal record body of a call.
pub const PRINCIPAL_FIELD: &str = "principal";

/// One call in flight: its principal, and the seq range of the records
/// written for it so far (the answer's `evidence.records`).
#[derive(Debug)]
struct InFlight {
    principal: String,
    records: Option<RecordRange>,
}

/// Invocation id → the call in flight, for the calls of one runtime.
#[derive(Debug, Default)]
pub(crate) struct Callers(Mutex<HashMap<String, InFlight>>);

/// Registration of one call's principal; removed when dropped.
#[derive(Debug)]
pub(crate) struct CallerScope<'a> {
    callers: &'a Callers,
    id: Option<String>,
}

impl Drop for CallerScope<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.callers.lock().remove(&id);
        }
    }
}

impl Callers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, InFlight>> {
        // A panic while the map was held leaves it consistent (one insert,
        // update or remove), so a poisoned lock is still usable.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get(&self, id: &str) -> Option<String> {
        self.lock().get(id).map(|call| call.principal.clone())
    }

    /// Widens the record range of call `id` (if in flight) to `seq`.
    fn wrote(&self, id: Option<&str>, seq: u64) {
        let Some(id) = id else { return };
        if let Some(call) = self.lock().get_mut(id) {
            call.records = Some(match call.records {
                Some(r) => RecordRange { first: r.first.min(seq), last: r.last.max(seq) },
                None => RecordRange { first: seq, last: seq },
            });
        }
    }
}

impl CallerScope<'_> {
    /// The seq range of the records written for this call so far (none if
    /// this scope did not register the call: a duplicate in flight).
    pub(crate) fn records(&self) -> Option<RecordRange> {
        let id = self.id.as_deref()?;
        self.callers.lock().get(id).and_then(|call| call.records)
    }
}

impl Runtime {
    /// The principal of `requested`, else the runtime's own.
    pub fn principal_of<'a>(&'a self, requested: Option<&'a str>) -> &'a str {
        requested.unwrap_or(&self.principal)
    }

    /// Registers `principal` for invocation `id` until the scope is
    /// dropped. A second registration of an id in flight keeps the first
    /// (the id is refused as a duplicate further on anyway).
    pub(crate) fn enter_call(&self, id: &str, principal: &str) -> CallerScope<'_> {
        let mut map = self.callers.lock();
        if map.contains_key(id) {
            return CallerScope { callers: &self.callers, id: None };
        }
        map.insert(id.to_owned(), InFlight { principal: principal.to_owned(), records: None });
        CallerScope { callers: &self.callers, id: Some(id.to_owned()) }
    }

    /// The principal a record of invocation `id` is written for: the call's
    /// registered principal, else the runtime's (an operator's own action,
    /// such as recovery, or a record of no invocation).
    pub(crate) fn record_principal(&self, id: Option<&str>) -> String {
        id.and_then(|id| self.callers.get(id)).unwrap_or_else(|| self.principal.clone())
    }

    /// [`ledger::record`] with the call's principal in the body; the
    /// record's seq joins the call's range.
    pub(crate) fn record(&self, kind: &str, id: Option<&str>, body: Value) -> Result<(), Refusal> {
        let seq = ledger::record(self.journal(), kind, id, self.stamped(id, body))?;
        self.callers.wrote(id, seq);
        Ok(())
    }

    /// [`ledger::note`] with the call's principal in the body; the record's
    /// seq joins the call's range.
    pub(crate) fn note(&self, kind: &str, id: Option<&str>, body: Value) -> Result<(), Refusal> {
        let seq = ledger::note(self.journal(), kind, id, self.stamped(id, body))?;
        self.callers.wrote(id, seq);
        Ok(())
    }

    fn stamped(&self, id: Option<&str>, mut body: Value) -> Value {
        if let Value::Object(map) = &mut body {
            map.entry(PRINCIPAL_FIELD).or_insert_with(|| Value::String(self.record_principal(id)));
        }
        body
    }
}
