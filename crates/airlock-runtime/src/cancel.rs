//! Cancelling the call in progress (SIGINT/SIGTERM to `airlock run`):
//! [`Runtime::canceller`] is handed to whoever may cancel (the CLI's signal
//! thread). Cancelling kills the call's worker (every tier the runtime makes
//! holds the call's [`Cancel`]); the call then stops at its next step — no
//! worker is started, nothing is published — and answers `call.cancelled`
//! (failed; the CLI exits 128 + the signal). Its end is journaled like any
//! other (`InvocationFinished` or `InvocationRefused` with the code), after
//! an `InvocationCancelled` (`reason`, `outcome`), and its staging
//! reservation is released when the prepared call is dropped, as on every
//! other path.
//!
//! One call of many (the MCP server's) is cancelled alone:
//! [`Runtime::call_canceller`] makes a child of the runtime's cancellation
//! (a signal still cancels every call) and [`Runtime::run_cancellable`]
//! runs a call under it. The call's cancellation is the calling thread's
//! for the length of the call (every step of a call runs on the thread that
//! called it), so the tiers it makes and the checks before each effect see
//! it without each step passing it along. A cancel that arrives once the
//! call is past its publication point (the publication's intent journaled)
//! does not stop it: the call completes, answers what it did, and its
//! `InvocationCancelled` says `outcome: "completed"`.

use crate::Runtime;
use airlock_core::{Envelope, ReasonCode, Refusal};
use airlock_journal::kind;
use airlock_sandbox::Cancel;
use std::cell::RefCell;

/// `reason` of a cancellation nobody named: a signal to the process.
const SIGNAL: &str = "signal";

thread_local! {
    /// The cancellation of the call running on this thread, if it has its own.
    static CALL_CANCEL: RefCell<Option<Cancel>> = const { RefCell::new(None) };
}

/// Restores the thread's previous call cancellation when dropped.
struct CallScope(Option<Cancel>);

impl CallScope {
    fn enter(cancel: Cancel) -> CallScope {
        CallScope(CALL_CANCEL.with(|c| c.replace(Some(cancel))))
    }
}

impl Drop for CallScope {
    fn drop(&mut self) {
        let previous = self.0.take();
        CALL_CANCEL.with(|c| *c.borrow_mut() = previous);
    }
}

impl Runtime {
    /// The cancellation of this runtime's calls: [`Cancel::cancel`] kills
    /// the running worker and makes the call in progress answer
    /// `call.cancelled`.
    pub fn canceller(&self) -> Cancel {
        self.cancel.clone()
    }

    /// A cancellation for one call: [`Cancel::cancel_because`] stops that
    /// call only; a cancel of the runtime's ([`Runtime::canceller`]) stops
    /// it too.
    pub fn call_canceller(&self) -> Cancel {
        self.cancel.child()
    }

    /// [`Runtime::run`] under `cancel` (from [`Runtime::call_canceller`]).
    pub fn run_cancellable(&self, request: &crate::CallRequest, cancel: Cancel) -> Envelope {
        let _scope = CallScope::enter(cancel);
        self.run(request)
    }

    /// The cancellation of the call on this thread: its own, else the
    /// runtime's.
    pub(crate) fn current_cancel(&self) -> Cancel {
        CALL_CANCEL.with(|c| c.borrow().clone()).unwrap_or_else(|| self.cancel.clone())
    }

    /// `call.cancelled` once cancellation was requested: checked before a
    /// step with an effect (starting a worker, publishing).
    pub(crate) fn check_cancelled(&self) -> Result<(), Refusal> {
        let cancel = self.current_cancel();
        if cancel.is_cancelled() {
            return Err(cancelled(cancel.reason()));
        }
        Ok(())
    }

    /// A call's result as it stands once cancellation was requested: an
    /// answer that published nothing becomes `call.cancelled` (keeping
    /// which invocation and tool it was); a call that completed before the
    /// signal keeps its answer, which is what happened.
    /// Journals `InvocationCancelled` for call `id` (when it has a valid
    /// one): `reason`, and `outcome` `cancelled` or `completed`.
    pub(crate) fn settle_cancelled(
        &self,
        id: Option<&str>,
        result: Result<Envelope, Refusal>,
    ) -> Result<Envelope, Refusal> {
        let cancel = self.current_cancel();
        if !cancel.is_cancelled() {
            return result;
        }
        let reason = cancel.reason();
        let (outcome, result) = match result {
            Ok(envelope) if envelope.error.is_none() || !envelope.created_files.is_empty() => {
                ("completed", Ok(envelope))
            }
            Ok(envelope) => {
                let refused = Envelope::from_refusal(&cancelled(reason));
                ("cancelled", Ok(Envelope { status: refused.status, error: refused.error, ..envelope }))
            }
            Err(_) => ("cancelled", Err(cancelled(reason))),
        };
        let body = serde_json::json!({ "reason": reason.unwrap_or(SIGNAL), "outcome": outcome });
        if let Some(id) = id {
            // The end record that follows says how the call ended either way.
            let _ = self.note(kind::INVOCATION_CANCELLED, Some(id), body);
        }
        result
    }
}

fn cancelled(reason: Option<&str>) -> Refusal {
    let by = match reason {
        None => "a signal to airlock".to_owned(),
        Some(why) => format!("its client ({why})"),
    };
    Refusal::new(
        ReasonCode::CallCancelled,
        format!(
            "the call was cancelled by {by}: its worker was killed and reaped, nothing was published, and its \
             staging reservation was released"
        ),
    )
}
