//! Listing work-tree directories ahead of the snapshot's walk.
//!
//! The walk's cost is one `statx` per entry ([`Dir::read_entries`]),
//! directory after directory, on one core, while `git status` on the host
//! lists the work tree on several. Here helper threads list the
//! directories the walk has opened but not reached yet, while the walk
//! records what it has; the walk takes each listing back when it reaches
//! that directory, in its own order, so the archive, the counts and every
//! refusal are those of a walk on one thread. Helpers take the directory
//! handed over last, the walk the one it reaches next (the oldest): a
//! listing no helper has started when the walk reaches it is made by the
//! walk itself, so the walk never waits for a helper to get round to it,
//! only for one already at work on it, and the two work from opposite
//! ends.
//!
//! At most [`AHEAD`] directories are handed over and not yet taken back,
//! which bounds the descriptors held open and the listings held in memory.

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};

use airlock_hostfs::{Dir, Entry};

use crate::error::GitError;

/// A directory's entries, or why they could not be read.
pub(crate) type Listing = Result<Vec<Entry>, GitError>;

/// How a directory is listed (the walk's own rule, with its bounds).
pub(crate) type ListFn = fn(&Dir) -> Listing;

/// The most directories handed over and not yet taken back.
pub(crate) const AHEAD: usize = 32;

/// The most helper threads, whatever the host has.
const MAX_HELPERS: usize = 3;

/// A handed-over directory's number.
pub(crate) type Ticket = u64;

enum Job {
    /// Waiting for a helper (or for the walk to take it back).
    Queued(Dir),
    /// Being listed by a helper.
    Running,
    /// Listed.
    Done(Dir, Listing),
}

#[derive(Default)]
struct State {
    /// Tickets not started, in the order they were handed over.
    queue: VecDeque<Ticket>,
    jobs: HashMap<Ticket, Job>,
    next: Ticket,
    closed: bool,
}

/// Directories handed to the helpers and their listings.
pub(crate) struct Lookahead {
    state: Mutex<State>,
    /// Signalled when a ticket is queued or the lookahead closes.
    queued: Condvar,
    /// Signalled when a helper finishes a listing.
    finished: Condvar,
    list: ListFn,
    helpers: usize,
}

/// Helper threads for a host with `cores` CPUs: one fewer (the walk has
/// one), at most [`MAX_HELPERS`].
pub(crate) fn helpers_for(cores: usize) -> usize {
    cores.saturating_sub(1).min(MAX_HELPERS)
}

impl Lookahead {
    /// A lookahead served by `helpers` threads (see [`Lookahead::serve`]);
    /// with none, nothing is handed over.
    pub fn new(list: ListFn, helpers: usize) -> Lookahead {
        Lookahead {
            state: Mutex::new(State::default()),
            queued: Condvar::new(),
            finished: Condvar::new(),
            list,
            helpers,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A helper that panicked while holding the lock left the state as
        // it was between whole steps: go on with it.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether one more directory may be handed over.
    pub fn has_room(&self) -> bool {
        self.helpers > 0 && self.lock().jobs.len() < AHEAD
    }

    /// Hands `dir` over to be listed; its ticket takes it back.
    pub fn submit(&self, dir: Dir) -> Ticket {
        let mut state = self.lock();
        let ticket = state.next;
        state.next += 1;
        state.jobs.insert(ticket, Job::Queued(dir));
        state.queue.push_back(ticket);
        drop(state);
        self.queued.notify_one();
        ticket
    }

    /// The directory handed over as `ticket` and its listing: a helper's,
    /// waited for if one is at work on it, else made here.
    pub fn take(&self, ticket: Ticket) -> Option<(Dir, Listing)> {
        let mut state = self.lock();
        loop {
            match state.jobs.remove(&ticket)? {
                Job::Queued(dir) => {
                    state.queue.retain(|t| *t != ticket);
                    drop(state);
                    let listing = (self.list)(&dir);
                    return Some((dir, listing));
                }
                Job::Running => {
                    state.jobs.insert(ticket, Job::Running);
                    state = self.finished.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
                }
                Job::Done(dir, listing) => return Some((dir, listing)),
            }
        }
    }

    /// A helper: lists queued directories, newest first, until closed.
    pub fn serve(&self) {
        let mut state = self.lock();
        loop {
            if state.closed {
                return;
            }
            // The newest first: the walk takes the oldest next, and lists
            // it itself if no helper has started it.
            let Some(ticket) = state.queue.pop_back() else {
                state = self.queued.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
                continue;
            };
            let Some(Job::Queued(dir)) = state.jobs.insert(ticket, Job::Running) else {
                // Only queued tickets are in the queue.
                state.jobs.remove(&ticket);
                continue;
            };
            drop(state);
            let listing = (self.list)(&dir);
            state = self.lock();
            state.jobs.insert(ticket, Job::Done(dir, listing));
            self.finished.notify_all();
        }
    }

    /// Ends the helpers (each after the listing it is making); what was
    /// not taken back is dropped with the lookahead.
    pub fn close(&self) {
        self.lock().closed = true;
        self.queued.notify_all();
    }
}

/// Closes a lookahead when the walk ends, however it ends.
pub(crate) struct CloseOnDrop<'a>(pub &'a Lookahead);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_core::ReasonCode;

    fn list(dir: &Dir) -> Listing {
        let (entries, more) = dir.read_entries(1000)?;
        if more {
            return Err(GitError::new(ReasonCode::LimitInputs, "too many"));
        }
        Ok(entries)
    }

    fn names(listing: &Listing) -> Vec<Vec<u8>> {
        listing.as_ref().unwrap().iter().map(|e| e.name.clone()).collect()
    }

    /// Twenty directories, the `i`th holding `i` files.
    fn tree() -> (tempfile::TempDir, Dir) {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..20 {
            let d = tmp.path().join(format!("d{i:02}"));
            std::fs::create_dir(&d).unwrap();
            for j in 0..i {
                std::fs::write(d.join(format!("f{j}")), "x").unwrap();
            }
        }
        let root = Dir::open_ambient(&airlock_hostfs::HostAuthority::ambient(), tmp.path()).unwrap();
        (tmp, root)
    }

    fn children(root: &Dir) -> Vec<Dir> {
        list(root).unwrap().iter().map(|e| root.open_child_dir(e).unwrap()).collect()
    }

    #[test]
    fn every_listing_comes_back_whole_whoever_made_it() {
        let (_tmp, root) = tree();
        for helpers in [1, 3] {
            let lookahead = Lookahead::new(list, helpers);
            std::thread::scope(|s| {
                for _ in 0..helpers {
                    s.spawn(|| lookahead.serve());
                }
                let _closing = CloseOnDrop(&lookahead);
                let tickets: Vec<Ticket> = children(&root).into_iter().map(|d| lookahead.submit(d)).collect();
                // Taken back out of order: some finished, some stolen.
                for (i, t) in tickets.iter().enumerate().rev() {
                    let (dir, listing) = lookahead.take(*t).unwrap();
                    assert_eq!(names(&listing), names(&list(&dir)));
                    assert_eq!(names(&listing).len(), i);
                }
                assert!(lookahead.take(tickets[0]).is_none(), "a ticket is taken back once");
            });
        }
    }

    #[test]
    fn without_helpers_nothing_is_handed_over_and_the_walk_lists_alone() {
        let (_tmp, root) = tree();
        let lookahead = Lookahead::new(list, 0);
        assert!(!lookahead.has_room());
        let dir = children(&root).pop().unwrap();
        let t = lookahead.submit(dir);
        let (_, listing) = lookahead.take(t).unwrap();
        assert_eq!(names(&listing).len(), 19);
    }

    #[test]
    fn no_more_than_ahead_directories_are_held() {
        let (_tmp, root) = tree();
        let lookahead = Lookahead::new(list, 1);
        let mut held = Vec::new();
        while lookahead.has_room() {
            held.push(lookahead.submit(root.open_child_dir(&list(&root).unwrap()[0]).unwrap()));
        }
        assert_eq!(held.len(), AHEAD);
        let _ = lookahead.take(held[0]).unwrap();
        assert!(lookahead.has_room(), "taking one back makes room for one");
    }

    #[test]
    fn helpers_leave_a_core_to_the_walk_and_stay_few() {
        assert_eq!(helpers_for(1), 0);
        assert_eq!(helpers_for(2), 1);
        assert_eq!(helpers_for(64), MAX_HELPERS);
    }
}
