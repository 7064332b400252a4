//! The staged output as its own publication candidate: no copy.
//!
//! A call's output is staged in its private staging directory: a named file
//! where the worker writes it (a bind needs a name), an unnamed `O_TMPFILE`
//! where the sandbox streams the tool's standard output into it (or where
//! the staging file system has no `O_TMPFILE`, a named one). Once every
//! process of the sandbox is gone only this process holds it. When it can
//! be moved into the output's held parent *and* the result is what a
//! candidate made in that parent would be, it is the candidate: synced and
//! hashed here (the hash read back through the descriptor while the `fsync`
//! runs; [`HeldOutput::adopt_staged_announced`] also hands the hashed
//! candidate to its caller, to journal, before the `fsync` ends), then
//! published in one call that refuses an existing name:
//!
//! - unnamed ([`StagedFile::Unnamed`]): exactly like an unnamed candidate —
//!   `fchmod` to the output's mode, `linkat` of the descriptor under the
//!   output's name, directory sync; journaled as `tmpfile`;
//! - named ([`StagedFile::Named`]): `fchmod` to the output's mode (the
//!   staging directory is `0700`), `renameat2(RENAME_NOREPLACE)` from the
//!   staging directory to the output's name, the output's name checked to
//!   be the candidate's `(dev, ino)`, directory sync; journaled as
//!   `staged` ([`CandidateMode::Staged`]).
//!
//! Either way it has one link once published, and a crash before that call
//! leaves nothing at the destination. The conditions are in `staged/fit.rs`;
//! where they do not hold (another mount: neither `linkat` nor `rename`
//! crosses one, and a bind mount of the same file system is another mount;
//! a parent with the set-group-ID bit or a default ACL, whose group or ACL a
//! file made in staging does not have; a staged name that is no longer the
//! open file) the answer is `None` and the caller copies, as before.

use super::{Candidate, Kept, Published};
use crate::copy::hash_file;
use crate::dir::Dir;
use crate::error::{Error, Result};
use crate::output::HeldOutput;
use airlock_core::ReasonCode;
use std::fs::File;

mod fit;

/// The staged output as the process that staged it holds it, by how it can
/// become the publication candidate without a copy.
#[derive(Debug)]
pub enum StagedFile {
    /// An unnamed `O_TMPFILE`: adopted by linking its descriptor into the
    /// output's parent.
    Unnamed(File),
    /// The file `name` in the staging directory `dir`: adopted by renaming
    /// it into the output's parent.
    Named {
        /// The open file.
        file: File,
        /// The directory that holds it.
        dir: Dir,
        /// Its name there (one component).
        name: String,
    },
}

impl StagedFile {
    /// The open staged file.
    pub fn file(&self) -> &File {
        match self {
            StagedFile::Unnamed(file) | StagedFile::Named { file, .. } => file,
        }
    }
}

/// Why [`HeldOutput::adopt_staged_announced`] gave no candidate, by
/// whether the candidate had been announced.
#[derive(Debug)]
pub enum AdoptError<E> {
    /// Before the announcement: nothing was announced.
    Unannounced(Error),
    /// The announcement itself failed.
    Announcing(E),
    /// After a successful announcement: the candidate's sync failed.
    Announced(Error),
}

impl HeldOutput {
    /// Makes the staged output `staged` (only this process writing it) the
    /// publication candidate, when it can be published as itself: checks
    /// the parent is still `expected_parent` and the name free (as
    /// [`HeldOutput::write_candidate`] does), refuses an output over
    /// `max_bytes` (`limit.output_size`), then syncs it while a second
    /// thread hashes it, and checks it did not change meanwhile. `None`
    /// when the staged output cannot be the candidate (see the module
    /// documentation): copy it with [`HeldOutput::write_candidate`].
    pub fn adopt_staged(
        &self,
        staged: &StagedFile,
        max_bytes: u64,
        expected_parent: (u64, u64),
    ) -> Result<Option<Candidate<'_>>> {
        self.adopt_staged_announced(staged, max_bytes, expected_parent, |_| Ok::<(), std::convert::Infallible>(()))
            .map_err(|e| match e {
                AdoptError::Unannounced(e) | AdoptError::Announced(e) => e,
                AdoptError::Announcing(never) => match never {},
            })
    }

    /// [`HeldOutput::adopt_staged`], handing the hashed candidate to
    /// `announce` (to journal it) while its `fsync` is still in flight:
    /// the sync starts first, on a thread of its own; the candidate is
    /// hashed here, checked unchanged, and announced; it is returned only
    /// once the sync and the announcement both succeeded. Its identity,
    /// size and hash are final when announced (every process of the
    /// sandbox is gone; only this one holds it). What is announced may not
    /// be durable yet: a crash before the sync ends leaves nothing at the
    /// destination, since only the returned candidate publishes.
    pub fn adopt_staged_announced<E>(
        &self,
        staged: &StagedFile,
        max_bytes: u64,
        expected_parent: (u64, u64),
        announce: impl FnOnce(&Candidate<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<Option<Candidate<'_>>, AdoptError<E>> {
        self.check_ready(expected_parent).map_err(AdoptError::Unannounced)?;
        let kept = match staged {
            StagedFile::Unnamed(file) if self.links_here(file).map_err(AdoptError::Unannounced)? => Kept::Unnamed,
            StagedFile::Named { file, dir, name }
                if self.renames_here(file, dir, name).map_err(AdoptError::Unannounced)? =>
            {
                Kept::Staged { dir: dir.try_clone().map_err(AdoptError::Unannounced)?, name: name.clone() }
            }
            StagedFile::Unnamed(_) | StagedFile::Named { .. } => return Ok(None),
        };
        let staged = staged.file();
        let fstat = |what| {
            rustix::fs::fstat(staged)
                .map_err(|e| AdoptError::Unannounced(Error::syscall(ReasonCode::Internal, what, e)))
        };
        let st = fstat("fstat(staged)")?;
        if st.st_size as u64 > max_bytes {
            return Err(AdoptError::Unannounced(Error::new(
                ReasonCode::LimitOutputSize,
                format!("output is larger than {max_bytes} bytes"),
            )));
        }
        let file = staged
            .try_clone()
            .map_err(|e| AdoptError::Unannounced(Error::new(ReasonCode::Internal, format!("dup(staged): {e}"))))?;
        std::thread::scope(|s| {
            let syncing = s.spawn(|| staged.sync_all());
            let adopted = hash_file(staged).map_err(AdoptError::Unannounced).and_then(|hashed| {
                let after = fstat("fstat(staged)")?;
                if hashed.bytes != st.st_size as u64 || after.st_size != st.st_size {
                    return Err(AdoptError::Unannounced(Error::new(
                        ReasonCode::OutputIdentityMismatch,
                        format!(
                            "the staged output holds {} bytes ({} hashed, {} before): it changed meanwhile",
                            after.st_size, hashed.bytes, st.st_size
                        ),
                    )));
                }
                let info =
                    Published { bytes: hashed.bytes, sha256_hex: hashed.sha256_hex, dev_ino: (st.st_dev, st.st_ino) };
                let candidate = Candidate { held: self, file, kept, info, done: false, mode: None };
                announce(&candidate).map_err(AdoptError::Announcing)?;
                Ok(candidate)
            });
            let synced = syncing.join().unwrap_or_else(|_| Err(std::io::Error::other("the syncing thread panicked")));
            match (adopted, synced) {
                (Err(e), _) => Err(e),
                (Ok(_), Err(e)) => Err(AdoptError::Announced(Error::new(
                    ReasonCode::Internal,
                    format!("syncing the staged output: {e}"),
                ))),
                (Ok(candidate), Ok(())) => Ok(Some(candidate)),
            }
        })
    }
}

#[cfg(test)]
mod tests;
