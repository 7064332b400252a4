//! Making an output's missing parent directories (`create_parents`),
//! through handles, one component at a time, never through a link.
//!
//! At prepare, [`HeldOutput::hold_creating`] walks the output's parent
//! path from the ceiling one component at a time with the resolver (no
//! link, no mount crossed); the walk stops at the first component that does
//! not exist, and the deepest directory reached is held, like an existing
//! parent is. A link, a file or a mount in the way is refused as it is for
//! any path. The missing names are bound into the descriptor, and nothing
//! is made before the call is authorized and has run.
//!
//! At publication, [`HeldOutput::make_next_parent`] makes one missing
//! directory: `mkdirat(held, name)` relative to the held handle (a name
//! that appeared meanwhile, a planted symlink above all, is refused, never
//! used), then `openat(held, name, O_DIRECTORY | O_NOFOLLOW)` of what was
//! made, checked to be a directory owned by airlock's user on the held
//! directory's device and to be what the name holds now (`fstatat` with no
//! follow, same `(dev, ino)`), `fchmod` to the requested mode (so the
//! umask cannot narrow a configured mode), and the held directory synced.
//! The opened directory becomes the held handle for the next component and
//! finally for the candidate. A failure leaves the directories already made
//! (empty, and journaled by the caller as each was made).

use crate::dir::Dir;
use crate::error::{Error, Result};
use crate::output::HeldOutput;
use crate::resolve::Resolver;
use airlock_core::{ReasonCode, RelPath};
use rustix::fd::AsFd;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// A directory made by [`HeldOutput::make_next_parent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadeDir {
    /// Its path relative to the working directory (a prefix of the output's).
    pub path: String,
    /// `(st_dev, st_ino)`.
    pub dev_ino: (u64, u64),
    /// The permission bits it was given.
    pub mode: u32,
}

/// The declared path of the `index`-th missing parent (0 = outermost) of
/// `path`, which has `missing` of them.
fn missing_path(path: &RelPath, missing: usize, index: usize) -> String {
    let comps: Vec<&str> = path.components().collect();
    let parent_len = comps.len() - 1;
    comps[..parent_len - missing + index + 1].join("/")
}

impl HeldOutput {
    /// Like [`HeldOutput::hold`], but a missing parent is not refused: the
    /// deepest existing directory on the way is held and the names below it
    /// are kept as [`HeldOutput::missing`]. Each component is opened from
    /// the one before (no link, no mount crossed); anything but "does not
    /// exist" is refused as for any path.
    pub fn hold_creating(resolver: &Resolver, ceiling: &Dir, rel: &RelPath, path: &RelPath) -> Result<HeldOutput> {
        let mut parent = ceiling.try_clone()?;
        let mut missing = Vec::new();
        if let Some(dirs) = rel.parent() {
            for name in dirs.components() {
                if !missing.is_empty() {
                    missing.push(name.to_owned());
                    continue;
                }
                let one = RelPath::parse(name).map_err(|r| Error::new(r.code, r.message))?;
                match resolver.open_beneath(parent.as_fd(), &one, OFlags::RDONLY | OFlags::DIRECTORY) {
                    Ok(fd) => parent = Dir::from_fd(fd)?,
                    Err(e) if e.code() == ReasonCode::InputMissing => missing.push(name.to_owned()),
                    Err(e) => return Err(e.context(format_args!("output parent of {:?}", path.as_str()))),
                }
            }
        }
        let held = HeldOutput { parent, name: rel.file_name().to_owned(), path: path.clone(), missing };
        held.ensure_absent()?;
        Ok(held)
    }

    /// Re-holds, for a kept call's dispatch, an output prepared with
    /// `missing` parents to make: the deepest existing ancestor must be the
    /// directory `expected` (`output.parent_changed`), and the outermost
    /// missing name must still be free (a symlink there is `path.symlink`,
    /// anything else `output.parent_changed`).
    pub fn reopen_creating(
        resolver: &Resolver,
        ceiling: &Dir,
        rel: &RelPath,
        path: &RelPath,
        missing: usize,
        expected: (u64, u64),
    ) -> Result<HeldOutput> {
        let comps: Vec<&str> = rel.components().collect();
        if missing == 0 || missing >= comps.len() {
            return Err(Error::new(ReasonCode::Internal, format!("{missing} missing parents of {:?}", path.as_str())));
        }
        let kept = comps.len() - 1 - missing;
        let parent = if kept == 0 {
            ceiling.try_clone()?
        } else {
            let ancestor = RelPath::parse(&comps[..kept].join("/")).map_err(|r| Error::new(r.code, r.message))?;
            Dir::from_fd(resolver.open_beneath(ceiling.as_fd(), &ancestor, OFlags::RDONLY | OFlags::DIRECTORY)?)?
        };
        if parent.dev_ino() != expected {
            return Err(Error::new(
                ReasonCode::OutputParentChanged,
                format!("the deepest existing parent of {:?} is not the directory that was prepared", path.as_str()),
            ));
        }
        let held = HeldOutput {
            parent,
            name: rel.file_name().to_owned(),
            path: path.clone(),
            missing: comps[kept..comps.len() - 1].iter().map(|c| (*c).to_owned()).collect(),
        };
        held.check_free(&held.missing[0], &missing_path(path, missing, 0))?;
        Ok(held)
    }

    /// The declared paths of the [`HeldOutput::missing`] parents, outermost
    /// first (what a descriptor binds as `create_dirs`).
    pub fn missing_paths(&self) -> Vec<String> {
        (0..self.missing.len()).map(|i| missing_path(&self.path, self.missing.len(), i)).collect()
    }

    /// Refuses if anything has `name` in the held directory.
    fn check_free(&self, name: &str, shown: &str) -> Result<()> {
        match rustix::fs::statat(self.parent.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => Ok(()),
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => Err(Error::new(
                ReasonCode::PathSymlink,
                format!("{shown:?} became a symlink after the call was prepared; airlock never follows one"),
            )),
            Ok(_) => Err(Error::new(
                ReasonCode::OutputParentChanged,
                format!("{shown:?} appeared after the call was prepared, which bound it as a directory to make"),
            )),
            Err(e) => Err(Error::syscall(ReasonCode::Internal, format_args!("fstatat(parent, {name:?})"), e)),
        }
    }

    /// Makes the outermost missing parent with permission bits `mode` and
    /// returns the output held through it (one fewer missing) and what was
    /// made; `None` when nothing is missing.
    pub fn make_next_parent(&self, mode: u32) -> Result<Option<(HeldOutput, MadeDir)>> {
        let Some(name) = self.missing.first() else {
            return Ok(None);
        };
        let shown = missing_path(&self.path, self.missing.len(), 0);
        let at = self.parent.as_fd();
        match rustix::fs::mkdirat(at, name.as_str(), Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                self.check_free(name, &shown)?;
                return Err(Error::new(ReasonCode::PathRace, format!("{shown:?} came and went while it was made")));
            }
            Err(e) => {
                return Err(Error::syscall(ReasonCode::Internal, format_args!("mkdirat(parent, {name:?}, 0700)"), e))
            }
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(at, name.as_str(), flags, Mode::empty()).map_err(|e| {
            let code =
                if matches!(e, Errno::LOOP | Errno::NOTDIR) { ReasonCode::PathRace } else { ReasonCode::Internal };
            Error::syscall(code, format_args!("openat(parent, {name:?}, O_DIRECTORY|O_NOFOLLOW)"), e)
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::syscall(ReasonCode::Internal, "fstat(made dir)", e))?;
        let now = rustix::fs::statat(at, name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| Error::syscall(ReasonCode::PathRace, format_args!("fstatat(parent, {name:?})"), e))?;
        let ours = FileType::from_raw_mode(st.st_mode) == FileType::Directory
            && st.st_uid == rustix::process::geteuid().as_raw()
            && st.st_dev == self.parent.dev_ino().0
            && (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino);
        if !ours {
            return Err(Error::new(
                ReasonCode::PathRace,
                format!("{shown:?} was replaced between being made and being opened; nothing is written there"),
            ));
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
            .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("fchmod({name:?}, {mode:o})"), e))?;
        self.parent.sync()?;
        let made = Dir::from_fd(fd)?;
        let info = MadeDir { path: shown, dev_ino: made.dev_ino(), mode };
        let next = HeldOutput {
            parent: made,
            name: self.name.clone(),
            path: self.path.clone(),
            missing: self.missing[1..].to_vec(),
        };
        Ok(Some((next, info)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::HostAuthority;
    use airlock_core::ResolverChoice;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn setup() -> (tempfile::TempDir, Dir, Resolver) {
        let t = tempfile::tempdir().unwrap();
        let dir = Dir::open_ambient(&HostAuthority::ambient(), t.path()).unwrap();
        (t, dir, Resolver::new(ResolverChoice::Auto).unwrap())
    }

    #[test]
    fn missing_parents_are_made_one_by_one_with_the_mode() {
        let (t, ceiling, resolver) = setup();
        std::fs::create_dir(t.path().join("a")).unwrap();
        let rel = RelPath::parse("a/b/c/out.txt").unwrap();
        let held = HeldOutput::hold_creating(&resolver, &ceiling, &rel, &rel).unwrap();
        assert_eq!(held.missing(), ["b", "c"]);
        let (held, made) = held.make_next_parent(0o750).unwrap().unwrap();
        assert_eq!(made.path, "a/b");
        let (held, made) = held.make_next_parent(0o750).unwrap().unwrap();
        assert_eq!(made.path, "a/b/c");
        assert!(held.make_next_parent(0o750).unwrap().is_none());
        let meta = std::fs::metadata(t.path().join("a/b/c")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o750);
        assert_eq!(held.parent().dev_ino().1, std::os::unix::fs::MetadataExt::ino(&meta));
    }

    #[test]
    fn links_in_the_way_are_refused() {
        let (t, ceiling, resolver) = setup();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), t.path().join("a")).unwrap();
        let rel = RelPath::parse("a/b/out.txt").unwrap();
        let e = HeldOutput::hold_creating(&resolver, &ceiling, &rel, &rel).unwrap_err();
        assert_eq!(e.code(), ReasonCode::PathSymlink, "{e}");

        // Planted after the hold: mkdirat finds the name taken.
        std::fs::remove_file(t.path().join("a")).unwrap();
        let held = HeldOutput::hold_creating(&resolver, &ceiling, &rel, &rel).unwrap();
        symlink(outside.path(), t.path().join("a")).unwrap();
        let e = held.make_next_parent(0o755).unwrap_err();
        assert_eq!(e.code(), ReasonCode::PathSymlink, "{e}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
