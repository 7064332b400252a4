//! Reading a state directory's journal without its signing key: for
//! verification from a pinned public key alone.

use crate::error::JournalError;
use crate::journal::{read_file, sealed_numbers, visit_segments, JOURNAL_FILE};
use crate::key::{check_private_file, Fault};
use crate::segment::Segment;
use crate::verify::{ChainVerifier, VerifyReport};
use crate::PublicKey;
use airlock_hostfs::PrivateDir;
use rustix::fs::{AtFlags, FlockOperation};
use rustix::io::Errno;
use std::os::fd::AsFd;

/// The segments of the journal in a state directory, read-only.
#[derive(Debug)]
pub struct JournalReader {
    state: PrivateDir,
}

impl JournalReader {
    /// A reader of the journal in `state`. Nothing is opened yet.
    pub fn new(state: &PrivateDir) -> Result<JournalReader, JournalError> {
        let state =
            state.try_clone().map_err(|e| JournalError::io(&state.display_path().join(JOURNAL_FILE), e.message()))?;
        Ok(JournalReader { state })
    }

    /// [`crate::Journal::for_each_segment`] without a key: the live segment
    /// is opened (never created: a missing one is empty) and share-locked
    /// while the sealed ones are listed and it is read.
    pub fn for_each_segment(
        &self,
        each: impl FnMut(Segment) -> Result<bool, JournalError>,
    ) -> Result<(), JournalError> {
        let path = self.state.display_path().join(JOURNAL_FILE);
        let (sealed, live) = loop {
            let file = match self.state.open_nofollow(JOURNAL_FILE) {
                Ok(f) => f,
                Err(e) if e.errno() == Some(Errno::NOENT) => break (sealed_numbers(&self.state)?, Vec::new()),
                Err(e) => return Err(JournalError::io(&path, e.message())),
            };
            check_private_file(&file, &path, None).map_err(|fault| match fault {
                Fault::Unsafe(reason) => JournalError::FileUnsafe { file: path.clone(), reason },
                Fault::Io(e) => e,
            })?;
            loop {
                match rustix::fs::flock(&file, FlockOperation::LockShared) {
                    Ok(()) => break,
                    Err(Errno::INTR) => continue,
                    Err(e) => return Err(JournalError::io(&path, format_args!("flock({JOURNAL_FILE}): {e}"))),
                }
            }
            let ours = rustix::fs::fstat(&file).map_err(|e| JournalError::io(&path, format_args!("fstat: {e}")))?;
            let named = rustix::fs::statat(self.state.dir().as_fd(), JOURNAL_FILE, AtFlags::SYMLINK_NOFOLLOW);
            // Sealed between the open and the lock: open the new one.
            if !named.is_ok_and(|st| st.st_dev == ours.st_dev && st.st_ino == ours.st_ino) {
                continue;
            }
            let sealed = sealed_numbers(&self.state)?;
            break (sealed, read_file(&file, &path)?);
        };
        visit_segments(&self.state, sealed, live, each)
    }

    /// Verifies every kept segment as one chain (see
    /// [`crate::Journal::verify_chain`]).
    pub fn verify_chain(&self, public_key: &PublicKey) -> Result<VerifyReport, JournalError> {
        let mut verifier = ChainVerifier::new(public_key);
        self.for_each_segment(|segment| Ok(verifier.feed(Some(segment.number), &segment.bytes)))?;
        Ok(verifier.finish(true))
    }
}
