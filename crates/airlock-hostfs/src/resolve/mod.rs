//! Resolution of a relative path beneath a directory handle, never
//! following a link at any component and never crossing a mount.
//!
//! Two backends give the same answers:
//!
//! - [`ResolverKind::Openat2`]: one `openat2(2)` call with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//!   RESOLVE_NO_XDEV`; the kernel does the walk.
//! - [`ResolverKind::Emulated`]: a walk of `openat(O_PATH | O_NOFOLLOW)`
//!   one component at a time, checking each step is a directory on the same
//!   mount, for hosts where openat2 is missing or blocked by seccomp.
//!
//! This is the crate's one resolver: inputs, outputs, source queries and
//! the filesystem broker ([`crate::rooted`]) all resolve through it. It
//! reports a typed [`Fault`]; [`Resolver::open_beneath`] maps it to this
//! crate's [`Error`] and [`crate::rooted`] to the broker's codes.
//!
//! Paths reaching a resolver have already passed a grammar
//! ([`airlock_core::RelPath`]'s, or the broker protocol's), so they hold no
//! `..`, `.`, empty component or leading `/`; the resolvers still refuse
//! anything the kernel reports as an escape.

mod emulated;
mod openat2;

use crate::error::{Error, Result};
use crate::fault::{Fault, FaultKind};
use airlock_core::{ReasonCode, RelPath, ResolverChoice};
use rustix::fd::{BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Which backend a [`Resolver`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolverKind {
    /// The kernel's `openat2` with `RESOLVE_*` restrictions.
    Openat2,
    /// The per-component `O_NOFOLLOW` walk.
    Emulated,
}

impl ResolverKind {
    /// `openat2` or `emulated`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResolverKind::Openat2 => "openat2",
            ResolverKind::Emulated => "emulated",
        }
    }
}

/// Resolves relative paths beneath directory handles.
#[derive(Debug, Clone, Copy)]
pub struct Resolver {
    kind: ResolverKind,
}

impl Resolver {
    /// Picks a backend: `Auto` uses openat2 where a probe says the kernel
    /// supports it; `Openat2` refuses (`host.unsupported`) where it does not;
    /// `Emulated` always walks.
    pub fn new(choice: ResolverChoice) -> Result<Resolver> {
        let kind =
            match choice {
                ResolverChoice::Emulated => ResolverKind::Emulated,
                ResolverChoice::Auto if openat2::supported() => ResolverKind::Openat2,
                ResolverChoice::Auto => ResolverKind::Emulated,
                ResolverChoice::Openat2 if openat2::supported() => ResolverKind::Openat2,
                ResolverChoice::Openat2 => return Err(Error::new(
                    ReasonCode::HostUnsupported,
                    "openat2 was required by [filesystem] resolver but this kernel or its seccomp profile refuses it",
                )),
            };
        Ok(Resolver { kind })
    }

    /// A resolver of exactly `kind` (tests compare the two).
    pub fn with_kind(kind: ResolverKind) -> Resolver {
        Resolver { kind }
    }

    /// The backend in use.
    pub fn kind(&self) -> ResolverKind {
        self.kind
    }

    /// Whether the running kernel accepts `openat2` with `RESOLVE_BENEATH`.
    pub fn openat2_supported() -> bool {
        openat2::supported()
    }

    /// Opens `path` beneath `root` with `flags` (`O_NOFOLLOW` and
    /// `O_CLOEXEC` are always added). With `O_PATH`, a final symlink is
    /// returned as itself; otherwise a final symlink is `path.symlink`.
    /// A missing component is `input.missing` (callers re-code it).
    pub fn open_beneath(&self, root: BorrowedFd<'_>, path: &RelPath, flags: OFlags) -> Result<OwnedFd> {
        let comps: Vec<&str> = path.components().collect();
        Ok(self.open_components(root, &comps, flags)?)
    }

    /// Opens the components `comps` beneath `root` with `flags` (plus
    /// `O_NOFOLLOW | O_CLOEXEC`); no component may be empty, `.`, `..` or
    /// hold `/` or NUL (callers pass a grammar-checked path). An empty
    /// slice opens `root` itself.
    pub(crate) fn open_components(
        &self,
        root: BorrowedFd<'_>,
        comps: &[&str],
        flags: OFlags,
    ) -> Result<OwnedFd, Fault> {
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        if let Some(bad) = comps.iter().find(|c| !crate::fault::is_component(c.as_bytes())) {
            return Err(Fault::new(FaultKind::NotComponent, format!("{bad:?} is not a single path component")));
        }
        if comps.is_empty() {
            return rustix::fs::openat(root, ".", flags, Mode::empty())
                .map_err(|e| Fault::syscall(FaultKind::Io, format_args!("openat(root, \".\", {flags:?})"), e));
        }
        match self.kind {
            ResolverKind::Openat2 => openat2::open(root, comps, flags),
            ResolverKind::Emulated => emulated::open(root, comps, flags),
        }
    }
}

/// Maps an errno from resolving `comps` (at the entry `name` beneath
/// `dir`) to a fault, looking at the offending entry (without following
/// it) when the errno is ambiguous.
fn classify(errno: Errno, dir: BorrowedFd<'_>, name: &str, call: &str, comps: &[&str]) -> Fault {
    let kind = match errno {
        Errno::NOENT => FaultKind::Missing,
        Errno::LOOP => FaultKind::Symlink,
        Errno::XDEV => FaultKind::MountCrossing,
        Errno::AGAIN => FaultKind::Race,
        // Look at the entry without following it. If it is a directory (or
        // gone) now, it was swapped while we looked: a race, not a file.
        Errno::NOTDIR => match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::Symlink => FaultKind::Symlink,
                FileType::Directory => FaultKind::Race,
                _ => FaultKind::NotDirectory,
            },
            Err(_) => FaultKind::Race,
        },
        _ => FaultKind::Io,
    };
    Fault::syscall(kind, format_args!("{call}(dirfd, {:?})", comps.join("/")), errno)
}

#[cfg(test)]
mod tests;
