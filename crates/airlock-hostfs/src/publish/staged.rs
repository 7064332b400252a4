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
//! runs), then published in one call that refuses an existing name:
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
use crate::copy::hash_while;
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
        self.check_ready(expected_parent)?;
        let kept = match staged {
            StagedFile::Unnamed(file) if self.links_here(file)? => Kept::Unnamed,
            StagedFile::Named { file, dir, name } if self.renames_here(file, dir, name)? => {
                Kept::Staged { dir: dir.try_clone()?, name: name.clone() }
            }
            StagedFile::Unnamed(_) | StagedFile::Named { .. } => return Ok(None),
        };
        let staged = staged.file();
        let st = rustix::fs::fstat(staged).map_err(|e| Error::syscall(ReasonCode::Internal, "fstat(staged)", e))?;
        if st.st_size as u64 > max_bytes {
            return Err(Error::new(ReasonCode::LimitOutputSize, format!("output is larger than {max_bytes} bytes")));
        }
        let hashed = hash_while(staged, || {
            staged.sync_all().map_err(|e| Error::new(ReasonCode::Internal, format!("syncing the staged output: {e}")))
        })?;
        let after = rustix::fs::fstat(staged).map_err(|e| Error::syscall(ReasonCode::Internal, "fstat(staged)", e))?;
        if hashed.bytes != st.st_size as u64 || after.st_size != st.st_size {
            return Err(Error::new(
                ReasonCode::OutputIdentityMismatch,
                format!(
                    "the staged output holds {} bytes ({} hashed, {} before): it changed meanwhile",
                    after.st_size, hashed.bytes, st.st_size
                ),
            ));
        }
        let file = staged.try_clone().map_err(|e| Error::new(ReasonCode::Internal, format!("dup(staged): {e}")))?;
        Ok(Some(Candidate {
            held: self,
            file,
            kept,
            info: Published { bytes: hashed.bytes, sha256_hex: hashed.sha256_hex, dev_ino: (st.st_dev, st.st_ino) },
            done: false,
            mode: None,
        }))
    }
}

#[cfg(test)]
mod tests;
