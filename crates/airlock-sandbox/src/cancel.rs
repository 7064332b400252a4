//! Cancelling a process's workers from another thread (a signal handler's
//! thread, typically): [`Cancel::cancel`] kills every live worker started
//! by a tier that holds the same [`Cancel`], and every later start is
//! killed as soon as it exists, so no worker outlives a cancelled call.
//! The worker's [`Worker::wait`](crate::Worker::wait) then returns as for
//! any kill: everything reaped, nothing exported.
#![forbid(unsafe_code)]

use crate::worker::KillHandle;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// A cancellation shared by a tier and whoever may cancel (cheap to clone).
#[derive(Clone, Default)]
pub struct Cancel {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    cancelled: bool,
    next: u64,
    live: BTreeMap<u64, KillHandle>,
}

/// A live worker's place in a [`Cancel`]; dropped when the worker has been
/// waited for (or dropped).
#[derive(Debug)]
pub(crate) struct Registration {
    cancel: Cancel,
    key: u64,
}

impl Cancel {
    /// A cancellation not yet requested.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Requests cancellation: kills every live worker now and every worker
    /// started from now on. Idempotent.
    pub fn cancel(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.cancelled = true;
        for kill in state.live.values() {
            let _ = kill.kill();
        }
    }

    /// Whether [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).cancelled
    }

    /// Registers a started worker; kills it at once if cancellation was
    /// already requested.
    pub(crate) fn register(&self, kill: KillHandle) -> Registration {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.cancelled {
            let _ = kill.kill();
        }
        let key = state.next;
        state.next += 1;
        state.live.insert(key, kill);
        Registration { cancel: self.clone(), key }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.cancel.state.lock().unwrap_or_else(PoisonError::into_inner).live.remove(&self.key);
    }
}

impl fmt::Debug for Cancel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cancel").field("cancelled", &self.is_cancelled()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn cancel_kills_live_and_later_workers_but_not_finished_ones() {
        let kills = Arc::new(AtomicUsize::new(0));
        let handle = || {
            let kills = Arc::clone(&kills);
            KillHandle::new(move || {
                kills.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        };
        let cancel = Cancel::new();
        let finished = cancel.register(handle());
        drop(finished);
        let _live = cancel.register(handle());
        assert!(!cancel.is_cancelled());
        cancel.cancel();
        assert_eq!(kills.load(Ordering::SeqCst), 1);
        let _later = cancel.register(handle());
        assert_eq!(kills.load(Ordering::SeqCst), 2);
        assert!(cancel.is_cancelled());
    }
}
