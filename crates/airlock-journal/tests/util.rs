//! Shared helpers: a private state directory in a fresh temp directory.

use airlock_hostfs::{HostAuthority, PrivateDir};
use std::path::PathBuf;

/// A temp directory holding a `0700` state directory `state/`.
pub struct State {
    /// The temp directory (removed when dropped).
    pub tmp: tempfile::TempDir,
    /// `state/` in it.
    pub dir: PrivateDir,
}

impl State {
    /// A fresh one.
    pub fn new() -> State {
        let tmp = tempfile::tempdir().unwrap();
        let dir = PrivateDir::open_or_create(&HostAuthority::ambient(), &tmp.path().join("state")).unwrap();
        State { tmp, dir }
    }

    /// A second handle to the same state directory (as another process
    /// would have).
    pub fn reopen(&self) -> PrivateDir {
        PrivateDir::open_or_create(&HostAuthority::ambient(), &self.path("")).unwrap()
    }

    /// `state/NAME`.
    pub fn path(&self, name: &str) -> PathBuf {
        let base = self.tmp.path().join("state");
        if name.is_empty() {
            base
        } else {
            base.join(name)
        }
    }
}
