//! Holding an output's parent directory from prepare to publication.

use crate::dir::Dir;
use crate::error::{Error, Result};
use crate::resolve::Resolver;
use airlock_core::{ReasonCode, RelPath};
use rustix::fd::AsFd;
use rustix::fs::{AtFlags, OFlags};
use rustix::io::Errno;

/// The parent directory of a declared output, open and held, and the name
/// the output will take in it.
#[derive(Debug)]
pub struct HeldOutput {
    pub(crate) parent: Dir,
    pub(crate) name: String,
    pub(crate) path: RelPath,
    /// Parent directories of the output still to be made beneath `parent`,
    /// outermost first (`create_parents`; see `parents.rs`). Empty: `parent`
    /// is the output's own parent.
    pub(crate) missing: Vec<String>,
}

impl HeldOutput {
    /// Resolves the parent of `rel` beneath `ceiling` (it must exist, as a
    /// real directory reached without links) and checks that nothing, of any
    /// kind, already has the output's name. `path` is the declared path, for
    /// messages and receipts.
    pub fn hold(resolver: &Resolver, ceiling: &Dir, rel: &RelPath, path: &RelPath) -> Result<HeldOutput> {
        let parent = match rel.parent() {
            None => ceiling.try_clone()?,
            Some(parent) => {
                let fd = resolver.open_beneath(ceiling.as_fd(), &parent, OFlags::RDONLY | OFlags::DIRECTORY).map_err(
                    |e| {
                        let code = if e.code() == ReasonCode::InputMissing {
                            ReasonCode::OutputParentMissing
                        } else {
                            e.code()
                        };
                        e.with_code(code).context(format_args!("output parent of {:?}", path.as_str()))
                    },
                )?;
                Dir::from_fd(fd)?
            }
        };
        let held = HeldOutput { parent, name: rel.file_name().to_owned(), path: path.clone(), missing: Vec::new() };
        held.ensure_absent()?;
        Ok(held)
    }

    /// Re-opens the parent of an output that may already exist (for
    /// recovery): like [`HeldOutput::hold`] without the absence check, and
    /// refusing (`output.parent_changed`) a parent whose `(dev, ino)` is not
    /// `expected_parent`.
    pub fn reopen(
        resolver: &Resolver,
        ceiling: &Dir,
        rel: &RelPath,
        path: &RelPath,
        expected_parent: (u64, u64),
    ) -> Result<HeldOutput> {
        let parent = match rel.parent() {
            None => ceiling.try_clone()?,
            Some(parent) => {
                let fd = resolver.open_beneath(ceiling.as_fd(), &parent, OFlags::RDONLY | OFlags::DIRECTORY)?;
                Dir::from_fd(fd)?
            }
        };
        if parent.dev_ino() != expected_parent {
            return Err(Error::new(
                ReasonCode::OutputParentChanged,
                format!("the parent directory of {:?} is not the one the journal recorded", path.as_str()),
            ));
        }
        Ok(HeldOutput { parent, name: rel.file_name().to_owned(), path: path.clone(), missing: Vec::new() })
    }

    /// Refuses (`output.exists`) if anything — file, directory, symlink,
    /// dangling symlink, FIFO — has the output's name in the held parent.
    /// An output whose parent is still to be made cannot exist yet (what
    /// is in the way of that parent is refused when it is made).
    pub fn ensure_absent(&self) -> Result<()> {
        if !self.missing.is_empty() {
            return Ok(());
        }
        match rustix::fs::statat(self.parent.as_fd(), self.name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => Ok(()),
            Ok(_) => Err(Error::new(
                ReasonCode::OutputExists,
                format!("output {:?} already exists; airlock never overwrites", self.path.as_str()),
            )),
            Err(e) => Err(Error::syscall(ReasonCode::Internal, format_args!("fstatat(parent, {:?})", self.name), e)),
        }
    }

    /// The parent directories still to be made beneath [`HeldOutput::parent`],
    /// outermost first (empty unless held with `create_parents`).
    pub fn missing(&self) -> &[String] {
        &self.missing
    }

    /// The held parent directory (with [`HeldOutput::missing`] parents, the
    /// deepest existing ancestor of the output).
    pub fn parent(&self) -> &Dir {
        &self.parent
    }

    /// The output's file name inside the parent.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The declared path.
    pub fn path(&self) -> &RelPath {
        &self.path
    }
}
