//! Cancelling the call in progress (SIGINT/SIGTERM to `airlock run`):
//! [`Runtime::canceller`] is handed to whoever may cancel (the CLI's signal
//! thread). Cancelling kills the call's worker (every tier the runtime makes
//! holds the same [`Cancel`]); the call then stops at its next step — no
//! worker is started, nothing is published — and answers `call.cancelled`
//! (failed; the CLI exits 128 + the signal). Its end is journaled like any
//! other (`InvocationFinished` or `InvocationRefused` with the code), and
//! its staging reservation is released when the prepared call is dropped,
//! as on every other path.

use crate::Runtime;
use airlock_core::{Envelope, ReasonCode, Refusal};
use airlock_sandbox::Cancel;

impl Runtime {
    /// The cancellation of this runtime's calls: [`Cancel::cancel`] kills
    /// the running worker and makes the call in progress answer
    /// `call.cancelled`.
    pub fn canceller(&self) -> Cancel {
        self.cancel.clone()
    }

    /// `call.cancelled` once cancellation was requested: checked before a
    /// step with an effect (starting a worker, publishing).
    pub(crate) fn check_cancelled(&self) -> Result<(), Refusal> {
        if self.cancel.is_cancelled() {
            return Err(cancelled());
        }
        Ok(())
    }

    /// A call's result as it stands once cancellation was requested: an
    /// answer that published nothing becomes `call.cancelled` (keeping
    /// which invocation and tool it was); a call that completed before the
    /// signal keeps its answer, which is what happened.
    pub(crate) fn settle_cancelled(&self, result: Result<Envelope, Refusal>) -> Result<Envelope, Refusal> {
        if !self.cancel.is_cancelled() {
            return result;
        }
        match result {
            Ok(envelope) if envelope.error.is_none() || !envelope.created_files.is_empty() => Ok(envelope),
            Ok(envelope) => {
                let refused = Envelope::from_refusal(&cancelled());
                Ok(Envelope { status: refused.status, error: refused.error, ..envelope })
            }
            Err(_) => Err(cancelled()),
        }
    }
}

fn cancelled() -> Refusal {
    Refusal::new(
        ReasonCode::CallCancelled,
        "the call was cancelled by a signal to airlock: its worker was killed and reaped, nothing was published, \
         and its staging reservation was released",
    )
}
