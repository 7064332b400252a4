//! Cancelling a process's workers from another thread (a signal handler's
//! thread, typically): [`Cancel::cancel`] kills every live worker started
//! by a tier that holds the same [`Cancel`], and every later start is
//! killed as soon as it exists, so no worker outlives a cancelled call.
//! The worker's [`Worker::wait`](crate::Worker::wait) then returns as for
//! any kill: everything reaped, nothing exported.
//!
//! A [`Cancel::child`] cancels one call of many (an MCP client's
//! `notifications/cancelled`): cancelling it kills only its own workers,
//! and cancelling its parent (a signal to the whole process) cancels it too.
#![forbid(unsafe_code)]

use crate::worker::KillHandle;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A cancellation shared by a tier and whoever may cancel (cheap to clone).
#[derive(Clone, Default)]
pub struct Cancel {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    cancelled: bool,
    /// Why, as the canceller said ([`Cancel::cancel_because`]).
    reason: Option<&'static str>,
    next: u64,
    live: BTreeMap<u64, KillHandle>,
    children: Vec<Weak<Mutex<State>>>,
}

impl State {
    /// Marks this state and every live child cancelled and kills their workers.
    fn cancel(&mut self, reason: Option<&'static str>) {
        if !self.cancelled {
            self.cancelled = true;
            self.reason = reason;
        }
        for kill in self.live.values() {
            let _ = kill.kill();
        }
        for child in self.children.drain(..).filter_map(|c| c.upgrade()) {
            child.lock().unwrap_or_else(PoisonError::into_inner).cancel(reason);
        }
    }
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
        self.state.lock().unwrap_or_else(PoisonError::into_inner).cancel(None);
    }

    /// [`Cancel::cancel`], saying why (the first reason given is kept).
    pub fn cancel_because(&self, reason: &'static str) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).cancel(Some(reason));
    }

    /// Why cancellation was requested, if a reason was given.
    pub fn reason(&self) -> Option<&'static str> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).reason
    }

    /// A cancellation of its own that this one's cancels too (already
    /// cancelled if this one is).
    pub fn child(&self) -> Cancel {
        let child = Cancel::new();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.cancelled {
            let reason = state.reason;
            child.state.lock().unwrap_or_else(PoisonError::into_inner).cancel(reason);
        } else {
            state.children.retain(|c| c.strong_count() > 0);
            state.children.push(Arc::downgrade(&child.state));
        }
        child
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

    /// A kill handle that counts its kills in `kills`.
    fn counting(kills: &Arc<AtomicUsize>) -> KillHandle {
        let kills = Arc::clone(kills);
        KillHandle::new(move || {
            kills.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }

    #[test]
    fn cancel_kills_live_and_later_workers_but_not_finished_ones() {
        let kills = Arc::new(AtomicUsize::new(0));
        let handle = || counting(&kills);
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

    #[test]
    fn a_child_is_cancelled_alone_or_with_its_parent() {
        let kills = Arc::new(AtomicUsize::new(0));
        let handle = || counting(&kills);
        let parent = Cancel::new();
        let (one, two) = (parent.child(), parent.child());
        let _a = one.register(handle());
        let _b = two.register(handle());
        one.cancel_because("client");
        assert_eq!(kills.load(Ordering::SeqCst), 1);
        assert_eq!((one.is_cancelled(), one.reason()), (true, Some("client")));
        assert!(!two.is_cancelled() && !parent.is_cancelled());
        parent.cancel();
        assert_eq!(kills.load(Ordering::SeqCst), 3, "the parent kills every child's workers");
        assert!(two.is_cancelled() && parent.child().is_cancelled());
        assert_eq!(one.reason(), Some("client"), "the first reason is kept");
    }
}
