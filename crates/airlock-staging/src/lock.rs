//! The pool's lock: an exclusive `flock(2)` on `STATE/staging/lock`, taken
//! by every process that admits, releases, reaps or reads reservations, plus
//! a mutex for the threads of one process (a `flock` belongs to the open
//! file description, which those threads share).

use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::PrivateDir;
use rustix::fs::FlockOperation;
use std::fs::File;
use std::sync::{Mutex, MutexGuard};

/// The lock file's name in the pool directory.
pub(crate) const LOCK_FILE: &str = "lock";

/// The pool lock of one process.
#[derive(Debug)]
pub(crate) struct PoolLock {
    file: File,
    threads: Mutex<()>,
}

/// Held while it lives: this process's threads and every other process
/// are kept out.
pub(crate) struct Held<'a> {
    lock: &'a PoolLock,
    _thread: MutexGuard<'a, ()>,
}

impl PoolLock {
    /// Opens (creating `0600`) the lock file, never through a link, and
    /// checks it is a regular file.
    pub(crate) fn open(pool: &PrivateDir) -> Result<PoolLock, Refusal> {
        let file = pool.open_append(LOCK_FILE)?;
        let st = rustix::fs::fstat(&file)
            .map_err(|e| Refusal::new(ReasonCode::ConfigStateDir, format!("fstat(staging/{LOCK_FILE}): {e}")))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(Refusal::new(
                ReasonCode::ConfigStateDir,
                format!("staging/{LOCK_FILE} in {} is not a regular file", pool.display_path().display()),
            ));
        }
        Ok(PoolLock { file, threads: Mutex::new(()) })
    }

    /// Blocks until this thread holds the pool exclusively.
    pub(crate) fn hold(&self) -> Result<Held<'_>, Refusal> {
        let thread = self.threads.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        loop {
            match rustix::fs::flock(&self.file, FlockOperation::LockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    return Err(Refusal::new(ReasonCode::Internal, format!("flock(staging/{LOCK_FILE}, LOCK_EX): {e}")))
                }
            }
        }
        Ok(Held { lock: self, _thread: thread })
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(&self.lock.file, FlockOperation::Unlock);
    }
}
