//! The `openat2(2)` backend.

use super::classify;
use crate::fault::{Fault, FaultKind};
use rustix::fd::{BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};
use rustix::io::Errno;
use std::sync::OnceLock;

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// `openat2` may return EAGAIN when a rename elsewhere races the lookup;
/// retry a few times before calling it a race.
const EAGAIN_RETRIES: usize = 16;

pub(super) fn supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED
        .get_or_init(|| rustix::fs::openat2(CWD, ".", OFlags::PATH | OFlags::CLOEXEC, Mode::empty(), RESOLVE).is_ok())
}

pub(super) fn open(root: BorrowedFd<'_>, comps: &[&str], flags: OFlags) -> Result<OwnedFd, Fault> {
    let path = comps.join("/");
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(root, path.as_str(), flags, Mode::empty(), RESOLVE) {
            Ok(fd) => return Ok(fd),
            Err(Errno::AGAIN) if tries < EAGAIN_RETRIES => tries += 1,
            Err(Errno::NOTDIR) => return Err(classify_notdir(root, comps, flags)),
            Err(errno) => return Err(classify(errno, root, &path, "openat2", comps)),
        }
    }
}

/// `ENOTDIR` from a whole-path lookup does not say which component; find
/// it with the same no-follow rules so both backends give the same answer.
fn classify_notdir(root: BorrowedFd<'_>, comps: &[&str], flags: OFlags) -> Fault {
    match super::emulated::open(root, comps, flags) {
        Err(f) => f,
        Ok(_) => Fault::new(FaultKind::Race, format!("{:?} changed while it was resolved", comps.join("/"))),
    }
}
