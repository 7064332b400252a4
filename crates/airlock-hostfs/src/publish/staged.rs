//! The staged output as its own publication candidate: no copy.
//!
//! A call's output is staged in an unnamed `O_TMPFILE` of its private
//! staging directory (PID 1 of the worker exports into it once every
//! process of the sandbox is gone; only this process holds it after). When
//! that file can be linked into the output's held parent *and* the result
//! is what a candidate made in that parent would be, it is the candidate:
//! synced and hashed here (the hash read back through the descriptor while
//! the `fsync` runs), then published exactly like an unnamed candidate —
//! `fchmod` to the output's mode, `linkat` of the descriptor under the
//! output's name (no replace), directory sync. Its link count is then 1
//! (it never had another name), and a crash before the link leaves nothing,
//! so the journal and recovery treat it as the `tmpfile` candidate it is.
//!
//! Otherwise (the answer is then `None` and the caller copies, as before):
//! a named staged file (a staging file system without `O_TMPFILE`); another
//! mount (`linkat` crosses none, and a bind mount of the same file system is
//! another mount); a parent with the set-group-ID bit or a default ACL (a
//! file created there takes the directory's group or ACL, which a file
//! created in staging does not have); a named candidate asked for.

use super::{Candidate, CandidateMode, Published};
use crate::copy::hash_while;
use crate::error::{Error, Result};
use crate::output::HeldOutput;
use airlock_core::ReasonCode;
use rustix::fd::AsFd;
use rustix::fs::{AtFlags, FileType, StatxFlags};
use rustix::io::Errno;

/// The default ACL's extended attribute on a directory.
const DEFAULT_ACL: &str = "system.posix_acl_default";

/// The set-group-ID bit.
const SET_GID: u32 = 0o2000;

impl HeldOutput {
    /// Makes the staged output `staged` (unnamed, only this process writing
    /// it) the publication candidate, when it can be published as itself:
    /// checks the parent is still `expected_parent` and the name free (as
    /// [`HeldOutput::write_candidate`] does), refuses an output over
    /// `max_bytes` (`limit.output_size`), then syncs it while a second
    /// thread hashes it, and checks it did not change meanwhile. `None`
    /// when the staged output cannot be the candidate (see the module
    /// documentation): copy it with [`HeldOutput::write_candidate`].
    pub fn adopt_staged(
        &self,
        staged: &std::fs::File,
        max_bytes: u64,
        expected_parent: (u64, u64),
        mode: CandidateMode,
    ) -> Result<Option<Candidate<'_>>> {
        self.check_ready(expected_parent)?;
        if mode != CandidateMode::Tmpfile || !self.links_here(staged)? {
            return Ok(None);
        }
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
            name: None,
            info: Published { bytes: hashed.bytes, sha256_hex: hashed.sha256_hex, dev_ino: (st.st_dev, st.st_ino) },
            done: false,
            mode: None,
        }))
    }

    /// Whether `staged` can be linked from its descriptor into the held
    /// parent and be there what a file created there would be.
    fn links_here(&self, staged: &std::fs::File) -> Result<bool> {
        let mount = |fd: rustix::fd::BorrowedFd<'_>, what: &str| {
            rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID | StatxFlags::BASIC_STATS)
                .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("statx({what}, MNT_ID)"), e))
        };
        let file = mount(staged.as_fd(), "staged")?;
        let parent = mount(self.parent.as_fd(), "parent")?;
        let known = StatxFlags::from_bits_retain(file.stx_mask) & StatxFlags::from_bits_retain(parent.stx_mask);
        if !known.contains(StatxFlags::MNT_ID | StatxFlags::NLINK | StatxFlags::MODE)
            || FileType::from_raw_mode(u32::from(file.stx_mode)) != FileType::RegularFile
            || file.stx_nlink != 0
            || file.stx_mnt_id != parent.stx_mnt_id
            || u32::from(parent.stx_mode) & SET_GID != 0
        {
            return Ok(false);
        }
        match rustix::fs::fgetxattr(self.parent.as_fd(), DEFAULT_ACL, &mut [0u8; 0][..]) {
            // No default ACL, or no ACLs on this file system.
            Err(Errno::NODATA | Errno::OPNOTSUPP) => Ok(true),
            // One (its size answered, or too large for no buffer), or unknown.
            Ok(_) | Err(_) => Ok(false),
        }
    }
}
