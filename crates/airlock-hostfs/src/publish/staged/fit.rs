//! Whether a staged file, moved into the held parent, is what a file created
//! there would be: on the parent's mount (by `statx` mount id), into a
//! parent without the set-group-ID bit or a default ACL, and (named) still
//! the very file the staging name holds.

use crate::dir::Dir;
use crate::error::{Error, Result};
use crate::output::HeldOutput;
use airlock_core::ReasonCode;
use rustix::fd::{AsFd, BorrowedFd};
use rustix::fs::{AtFlags, FileType, Statx, StatxFlags};
use rustix::io::Errno;

/// The default ACL's extended attribute on a directory.
const DEFAULT_ACL: &str = "system.posix_acl_default";

/// The set-group-ID bit.
const SET_GID: u32 = 0o2000;

/// What every `statx` here must have answered.
const NEEDED: StatxFlags = StatxFlags::MNT_ID.union(StatxFlags::NLINK).union(StatxFlags::MODE).union(StatxFlags::INO);

/// `statx(fd, path, flags, MNT_ID | BASIC_STATS)`; `what` names it in errors.
fn statx(fd: BorrowedFd<'_>, path: &str, flags: AtFlags, what: &str) -> Result<Statx> {
    rustix::fs::statx(fd, path, flags, StatxFlags::MNT_ID | StatxFlags::BASIC_STATS)
        .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("statx({what}, MNT_ID)"), e))
}

/// Whether `st` answered everything needed and is a regular file.
fn regular(st: &Statx) -> bool {
    StatxFlags::from_bits_retain(st.stx_mask).contains(NEEDED)
        && FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::RegularFile
}

impl HeldOutput {
    /// Whether the unnamed `staged` can be linked from its descriptor into
    /// the held parent and be there what a file created there would be.
    pub(super) fn links_here(&self, staged: &std::fs::File) -> Result<bool> {
        let file = statx(staged.as_fd(), "", AtFlags::EMPTY_PATH, "staged")?;
        let parent = self.parent_statx()?;
        Ok(regular(&file) && file.stx_nlink == 0 && file.stx_mnt_id == parent.stx_mnt_id && self.adds_nothing(&parent))
    }

    /// Whether `staged`, named `name` in `dir`, can be renamed into the held
    /// parent and be there what a file created there would be: the entry
    /// (not followed if a link) is this very regular file with one link,
    /// and the directory, the entry and the parent are on one mount.
    pub(super) fn renames_here(&self, staged: &std::fs::File, dir: &Dir, name: &str) -> Result<bool> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
            return Err(Error::new(ReasonCode::Internal, format!("invalid staged name {name:?}")));
        }
        let entry = match rustix::fs::statx(
            dir.as_fd(),
            name,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::MNT_ID | StatxFlags::BASIC_STATS,
        ) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => {
                return Err(Error::syscall(ReasonCode::Internal, format_args!("statx(staging, {name:?}, MNT_ID)"), e))
            }
        };
        let file = statx(staged.as_fd(), "", AtFlags::EMPTY_PATH, "staged")?;
        let staging = statx(dir.as_fd(), "", AtFlags::EMPTY_PATH, "staging")?;
        let parent = self.parent_statx()?;
        let id = |st: &Statx| (st.stx_dev_major, st.stx_dev_minor, st.stx_ino);
        Ok(regular(&entry)
            && regular(&file)
            && id(&entry) == id(&file)
            && entry.stx_nlink == 1
            && StatxFlags::from_bits_retain(staging.stx_mask).contains(StatxFlags::MNT_ID)
            && entry.stx_mnt_id == parent.stx_mnt_id
            && staging.stx_mnt_id == parent.stx_mnt_id
            && self.adds_nothing(&parent))
    }

    fn parent_statx(&self) -> Result<Statx> {
        statx(self.parent.as_fd(), "", AtFlags::EMPTY_PATH, "parent")
    }

    /// Whether the parent gives a file created in it nothing a file created
    /// elsewhere lacks: no set-group-ID bit (its group), no default ACL.
    fn adds_nothing(&self, parent: &Statx) -> bool {
        if !StatxFlags::from_bits_retain(parent.stx_mask).contains(NEEDED) || u32::from(parent.stx_mode) & SET_GID != 0
        {
            return false;
        }
        match rustix::fs::fgetxattr(self.parent.as_fd(), DEFAULT_ACL, &mut [0u8; 0][..]) {
            // No default ACL, or no ACLs on this file system.
            Err(Errno::NODATA | Errno::OPNOTSUPP) => true,
            // One (its size answered, or too large for no buffer), or unknown.
            Ok(_) | Err(_) => false,
        }
    }
}
