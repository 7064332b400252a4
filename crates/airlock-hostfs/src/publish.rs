//! Publishing an output through its held parent, in steps a journal can
//! announce: write and sync a private candidate, then give it the output's
//! name without replacing anything, then sync the directory.
//!
//! Publication is by identity, not by name: the candidate is an unnamed
//! `O_TMPFILE` linked from its open descriptor, so another user who can
//! write to a shared output directory has nothing to swap; where the file
//! system has no `O_TMPFILE`, a named candidate is renamed and the output's
//! `(dev, ino)` is then compared with the open candidate's. The hash a
//! receipt states is read back through that descriptor. Nothing is unlinked
//! by name unless the name is still the candidate's inode.
//!
//! The candidate is a copy of the staged output, except where the staged
//! output can be the candidate itself ([`HeldOutput::adopt_staged`],
//! `staged.rs`): no copy; an unnamed staged file is linked like an unnamed
//! candidate, a named one is renamed from the staging directory.

use crate::copy::copy_hashed;
use crate::error::{Error, Result};
use crate::output::HeldOutput;
use airlock_core::ReasonCode;
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

/// Prefix of publication candidates in a destination directory.
pub const CANDIDATE_PREFIX: &str = ".airlock-candidate-";

/// A published file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// Bytes written.
    pub bytes: u64,
    /// Lowercase hex SHA-256.
    pub sha256_hex: String,
    /// `(st_dev, st_ino)` of the published file.
    pub dev_ino: (u64, u64),
}

/// How a candidate is kept between being written and being published: what
/// the journal's `candidate_mode` records, and so what recovery looks for.
///
/// The staged output renamed from its staging directory is a mode of its
/// own, not an origin of the `Named` or `Tmpfile` kind: recovery decides by
/// the mode where a surviving candidate can be (a `Named` one under
/// [`CANDIDATE_PREFIX`]`ID` in the destination directory, which recovery
/// publishes) and whether a crash before the publishing call leaves
/// anything to publish. A `Staged` candidate is named, but outside the
/// destination directory, in a staging directory that is reaped with its
/// call: like a `Tmpfile` one, it is never visible at the destination
/// before one atomic call, and after a crash before that call nothing is
/// published. (`candidate_origin`, `staged` or `copy`, only says whether
/// the bytes were copied.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidateMode {
    /// An unnamed `O_TMPFILE` in the held parent, published by linking the
    /// open file under the output's name: nobody can swap what has no name,
    /// and `linkat` refuses a name that exists.
    Tmpfile,
    /// A named `0600` file [`CANDIDATE_PREFIX`]`TAG`, published with
    /// `renameat2(RENAME_NOREPLACE)` and then checked by `(dev, ino)`; for
    /// file systems without `O_TMPFILE`.
    Named,
    /// The named staged output in its private staging directory (same
    /// mount), published with `renameat2(RENAME_NOREPLACE)` from there and
    /// then checked by `(dev, ino)`; only [`HeldOutput::adopt_staged`] makes
    /// one.
    Staged,
}

impl CandidateMode {
    /// `"tmpfile"`, `"named"` or `"staged"`, as journaled.
    pub fn as_str(self) -> &'static str {
        match self {
            CandidateMode::Tmpfile => "tmpfile",
            CandidateMode::Named => "named",
            CandidateMode::Staged => "staged",
        }
    }

    /// The mode journaled as `s`; `None` for anything else.
    pub fn parse(s: &str) -> Option<CandidateMode> {
        [CandidateMode::Tmpfile, CandidateMode::Named, CandidateMode::Staged].into_iter().find(|m| m.as_str() == s)
    }
}

/// A synced candidate, not yet published, held open. Dropping it without
/// [`Candidate::publish`] leaves nothing beside the destination: an unnamed
/// candidate ends with its descriptor, a named one is unlinked only while
/// its name is still this file, and a staged one is left in its staging
/// directory (reaped with its call).
#[derive(Debug)]
pub struct Candidate<'a> {
    held: &'a HeldOutput,
    file: std::fs::File,
    kept: Kept,
    info: Published,
    done: bool,
    /// Permission bits the published file gets (`None`: it stays `0600`).
    mode: Option<u32>,
}

/// Where a candidate is until it is published.
#[derive(Debug)]
enum Kept {
    /// Unnamed (`O_TMPFILE`), on the held parent's file system.
    Unnamed,
    /// Under this name in the held parent.
    Named(String),
    /// Under `name` in the staging directory `dir` (the staged output).
    Staged { dir: crate::dir::Dir, name: String },
}

/// What is at a name in a directory, without following links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryIdentity {
    /// `(st_dev, st_ino)`.
    pub dev_ino: (u64, u64),
    /// Size in bytes.
    pub bytes: u64,
    /// Whether it is a regular file.
    pub regular: bool,
    /// Its owner's uid.
    pub owner: u32,
}

/// `errno`s of an `O_TMPFILE` open that mean "not supported here" (file
/// system or kernel), so the named candidate is used instead.
pub(crate) fn tmpfile_unsupported(e: Errno) -> bool {
    matches!(e, Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL)
}

impl HeldOutput {
    /// Step 1: checks the parent is still `expected_parent` and the name is
    /// still free, then copies `source` from its start (at most
    /// `max_bytes`) into a new `0600` candidate in the held parent, syncs
    /// it, and hashes what the candidate holds by reading it back through
    /// its descriptor (while the copy and the sync proceed).
    ///
    /// With [`CandidateMode::Tmpfile`] the candidate is an unnamed
    /// `O_TMPFILE`; where the file system does not support one (or with
    /// [`CandidateMode::Named`]) it is named [`CANDIDATE_PREFIX`] + `tag` (a
    /// single safe component, such as the invocation id), so recovery can
    /// find it even when a crash came before any record named it.
    /// [`CandidateMode::Staged`] is refused (`internal`): a copy is never
    /// the staged output.
    pub fn write_candidate(
        &self,
        source: &std::fs::File,
        max_bytes: u64,
        expected_parent: (u64, u64),
        tag: &str,
        mode: CandidateMode,
    ) -> Result<Candidate<'_>> {
        self.check_ready(expected_parent)?;
        if mode == CandidateMode::Staged {
            return Err(Error::new(ReasonCode::Internal, "a copy cannot be kept as the staged output"));
        }
        if tag.is_empty() || tag.contains('/') || tag.contains('\0') || tag.len() > 128 {
            return Err(Error::new(ReasonCode::Internal, format!("invalid candidate tag {tag:?}")));
        }
        let (fd, name) = self.open_candidate(tag, mode)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::syscall(ReasonCode::Internal, "fstat(candidate)", e))?;
        let mut candidate = Candidate {
            held: self,
            file: std::fs::File::from(fd),
            kept: name.map_or(Kept::Unnamed, Kept::Named),
            info: Published { bytes: 0, sha256_hex: String::new(), dev_ino: (st.st_dev, st.st_ino) },
            done: false,
            mode: None,
        };
        // Copied in the kernel; hashed from the candidate itself while the
        // copy and then its fsync proceed.
        let file = &candidate.file;
        let copied = copy_hashed(source, file, max_bytes.saturating_add(1), ReasonCode::Internal, &mut |_| {}, |n| {
            if n > max_bytes {
                return Err(Error::new(
                    ReasonCode::LimitOutputSize,
                    format!("output is larger than {max_bytes} bytes"),
                ));
            }
            file.sync_all().map_err(|e| Error::new(ReasonCode::Internal, format!("syncing candidate: {e}")))
        })?;
        candidate.info.bytes = copied.bytes;
        candidate.info.sha256_hex = copied.sha256_hex;
        Ok(candidate)
    }

    /// Before any candidate: the parent is still `expected_parent`, made
    /// (with `create_parents`), and the output's name is free.
    fn check_ready(&self, expected_parent: (u64, u64)) -> Result<()> {
        let now = rustix::fs::fstat(self.parent.as_fd())
            .map_err(|e| Error::syscall(ReasonCode::Internal, "fstat(parent)", e))?;
        if (now.st_dev, now.st_ino) != expected_parent || self.parent.dev_ino() != expected_parent {
            return Err(Error::new(
                ReasonCode::OutputParentChanged,
                format!("the parent directory of {:?} is not the one that was prepared", self.path.as_str()),
            ));
        }
        if !self.missing.is_empty() {
            return Err(Error::new(
                ReasonCode::Internal,
                format!("the parent directories of {:?} have not been made", self.path.as_str()),
            ));
        }
        self.ensure_absent()
    }

    /// Opens a new `0600` candidate for reading and writing: unnamed when
    /// `mode` asks for it and the file system allows it, else named.
    fn open_candidate(&self, tag: &str, mode: CandidateMode) -> Result<(OwnedFd, Option<String>)> {
        let mode_0600 = Mode::from_raw_mode(0o600);
        if mode == CandidateMode::Tmpfile {
            match rustix::fs::openat(
                self.parent.as_fd(),
                ".",
                OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
                mode_0600,
            ) {
                Ok(fd) => return Ok((fd, None)),
                Err(e) if tmpfile_unsupported(e) => {}
                Err(e) => {
                    return Err(Error::syscall(
                        ReasonCode::Internal,
                        "openat(parent, \".\", O_TMPFILE|O_RDWR, 0600)",
                        e,
                    ))
                }
            }
        }
        let name = format!("{CANDIDATE_PREFIX}{tag}");
        let fd = rustix::fs::openat(
            self.parent.as_fd(),
            name.as_str(),
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode_0600,
        )
        .map_err(|e| {
            Error::syscall(ReasonCode::Internal, format_args!("openat(parent, {name:?}, O_CREAT|O_EXCL)"), e)
        })?;
        Ok((fd, Some(name)))
    }

    /// What is at `name` in the held parent, if anything (no link followed).
    pub fn entry(&self, name: &str) -> Result<Option<EntryIdentity>> {
        match rustix::fs::statat(self.parent.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(EntryIdentity {
                dev_ino: (st.st_dev, st.st_ino),
                bytes: st.st_size as u64,
                regular: FileType::from_raw_mode(st.st_mode) == FileType::RegularFile,
                owner: st.st_uid,
            })),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(Error::syscall(ReasonCode::Internal, format_args!("fstatat(parent, {name:?})"), e)),
        }
    }

    /// SHA-256 (hex) and size of the regular file `name` in the held parent,
    /// which must be the inode `dev_ino`.
    pub fn hash_entry(&self, name: &str, dev_ino: (u64, u64)) -> Result<(u64, String)> {
        let fd = rustix::fs::openat(
            self.parent.as_fd(),
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("openat(parent, {name:?})"), e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::syscall(ReasonCode::Internal, "fstat", e))?;
        if (st.st_dev, st.st_ino) != dev_ino || FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::new(ReasonCode::PathRace, format!("{name:?} is not the recorded file")));
        }
        let mut file = std::fs::File::from(fd);
        let mut hasher = Sha256::new();
        let n = std::io::copy(&mut file, &mut hasher)
            .map_err(|e| Error::new(ReasonCode::Internal, format!("reading {name:?}: {e}")))?;
        Ok((n, hex::encode(hasher.finalize())))
    }

    /// Renames the existing candidate `name` (which must be the inode
    /// `dev_ino`) to the output's name without replacing anything, checks
    /// that the output's name now is that inode, gives it permission bits
    /// `mode` (when the intent recorded one) through a descriptor of that
    /// very inode, then syncs the directory. For recovery.
    pub fn publish_candidate_named(&self, name: &str, dev_ino: (u64, u64), mode: Option<u32>) -> Result<()> {
        match self.entry(name)? {
            Some(e) if e.dev_ino == dev_ino && e.regular => {}
            _ => return Err(Error::new(ReasonCode::PathRace, format!("{name:?} is not the recorded candidate"))),
        }
        rename_noreplace(self.parent.as_fd(), name, self)?;
        self.check_published(dev_ino)?;
        if let Some(mode) = mode {
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
            let fd =
                rustix::fs::openat(self.parent.as_fd(), self.name.as_str(), flags, Mode::empty()).map_err(|e| {
                    Error::syscall(ReasonCode::Internal, format_args!("openat(parent, {:?})", self.name), e)
                })?;
            let st = rustix::fs::fstat(&fd).map_err(|e| Error::syscall(ReasonCode::Internal, "fstat", e))?;
            if (st.st_dev, st.st_ino) != dev_ino {
                return Err(Error::new(ReasonCode::OutputIdentityMismatch, format!("{:?} changed", self.name)));
            }
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o666))
                .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("fchmod(output, {mode:o})"), e))?;
        }
        self.parent.sync()
    }

    /// Removes the candidate `name` if it is still the inode `dev_ino`.
    pub fn remove_candidate_named(&self, name: &str, dev_ino: (u64, u64)) -> Result<()> {
        match self.entry(name)? {
            Some(e) if e.dev_ino == dev_ino => {
                rustix::fs::unlinkat(self.parent.as_fd(), name, AtFlags::empty())
                    .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("unlinkat({name:?})"), e))?;
                self.parent.sync()
            }
            Some(_) => Err(Error::new(ReasonCode::PathRace, format!("{name:?} is not the recorded candidate"))),
            None => Ok(()),
        }
    }

    /// Refuses (`output.identity_mismatch`) unless the output's name now
    /// is the inode `dev_ino`. Whatever is there is left in place.
    fn check_published(&self, dev_ino: (u64, u64)) -> Result<()> {
        match self.entry(&self.name)? {
            Some(e) if e.dev_ino == dev_ino && e.regular => Ok(()),
            found => Err(Error::new(
                ReasonCode::OutputIdentityMismatch,
                format!(
                    "after the rename, {:?} is {}, not the candidate airlock wrote (dev {}, ino {}): another user \
                     replaced the candidate in the output directory; the file is left in place and nothing is \
                     vouched for. Use an output directory only you can write to",
                    self.path.as_str(),
                    match found {
                        Some(e) => format!("dev {}, ino {}", e.dev_ino.0, e.dev_ino.1),
                        None => "gone".to_owned(),
                    },
                    dev_ino.0,
                    dev_ino.1,
                ),
            )),
        }
    }
}

/// `renameat2(from_dir, candidate, parent, name, RENAME_NOREPLACE)`.
fn rename_noreplace(from_dir: BorrowedFd<'_>, candidate: &str, held: &HeldOutput) -> Result<()> {
    rustix::fs::renameat_with(from_dir, candidate, held.parent.as_fd(), held.name.as_str(), RenameFlags::NOREPLACE)
        .map_err(|e| {
            let code = match e {
                Errno::EXIST => ReasonCode::OutputExists,
                // The candidate was moved away: the same swap, caught earlier.
                Errno::NOENT => ReasonCode::OutputIdentityMismatch,
                _ => ReasonCode::Internal,
            };
            Error::syscall(code, format_args!("renameat2({candidate:?}, {:?}, RENAME_NOREPLACE)", held.name), e)
        })
}

/// `linkat(file, "", parent, name, AT_EMPTY_PATH)`: gives the open file the
/// output's name, failing with `EEXIST` if the name exists. Kernels before
/// 6.10 allow `AT_EMPTY_PATH` only with `CAP_DAC_READ_SEARCH`; there the
/// same link goes through `/proc/self/fd/N` with `AT_SYMLINK_FOLLOW`.
fn link_open_file(held: &HeldOutput, file: &std::fs::File) -> Result<()> {
    let name = held.name.as_str();
    let code = |e: Errno| if e == Errno::EXIST { ReasonCode::OutputExists } else { ReasonCode::Internal };
    match rustix::fs::linkat(file, "", held.parent.as_fd(), name, AtFlags::EMPTY_PATH) {
        Ok(()) => Ok(()),
        Err(e @ (Errno::NOENT | Errno::PERM)) => {
            let proc = format!("/proc/self/fd/{}", file.as_raw_fd());
            rustix::fs::linkat(rustix::fs::CWD, proc.as_str(), held.parent.as_fd(), name, AtFlags::SYMLINK_FOLLOW)
                .map_err(|e2| {
                    Error::syscall(
                        code(e2),
                        format_args!("linkat({proc:?}, parent, {name:?}, AT_SYMLINK_FOLLOW) after AT_EMPTY_PATH: {e}"),
                        e2,
                    )
                })
        }
        Err(e) => {
            Err(Error::syscall(code(e), format_args!("linkat(candidate, \"\", parent, {name:?}, AT_EMPTY_PATH)"), e))
        }
    }
}

impl Candidate<'_> {
    /// The published file gets permission bits `mode` instead of `0600`.
    /// They are set with `fchmod` on the open candidate only once it cannot
    /// change any more: an unnamed candidate just before it is linked, the
    /// staged output just before its rename (its staging directory is
    /// private), a named one after its rename is checked, so a candidate is
    /// never writable by anyone else while it has a name nobody vouched for.
    pub fn with_mode(mut self, mode: u32) -> Self {
        self.mode = Some(mode);
        self
    }

    fn apply_mode(&self) -> Result<()> {
        match self.mode {
            None => Ok(()),
            Some(mode) => rustix::fs::fchmod(&self.file, Mode::from_raw_mode(mode))
                .map_err(|e| Error::syscall(ReasonCode::Internal, format_args!("fchmod(candidate, {mode:o})"), e)),
        }
    }

    /// The candidate's file name in the destination directory; `None` for
    /// an unnamed (`O_TMPFILE`) candidate and for the staged output, which
    /// has no name there before it is published.
    pub fn name(&self) -> Option<&str> {
        match &self.kept {
            Kept::Named(name) => Some(name),
            Kept::Unnamed | Kept::Staged { .. } => None,
        }
    }

    /// How the candidate is kept.
    pub fn mode(&self) -> CandidateMode {
        match self.kept {
            Kept::Unnamed => CandidateMode::Tmpfile,
            Kept::Named(_) => CandidateMode::Named,
            Kept::Staged { .. } => CandidateMode::Staged,
        }
    }

    /// Size, hash (of the bytes read back through the open file) and inode.
    pub fn file(&self) -> &Published {
        &self.info
    }

    /// Step 2: publishes the open candidate under the output's name without
    /// replacing anything (an output that appeared meanwhile wins and this
    /// is `output.exists`), then syncs the directory.
    ///
    /// An unnamed candidate is linked from its descriptor, so the inode
    /// published is the one written and hashed. A named one is renamed with
    /// `RENAME_NOREPLACE`, then the output's name must be its `(dev, ino)`:
    /// otherwise another user swapped it, and this is
    /// `output.identity_mismatch` with the foreign file left in place. The
    /// staged output gets its mode in its private staging directory, then
    /// is renamed from there the same way and checked the same way; on
    /// `output.exists` it stays where it was.
    pub fn publish(mut self) -> Result<Published> {
        match &self.kept {
            Kept::Unnamed => {
                self.apply_mode()?;
                link_open_file(self.held, &self.file)?
            }
            Kept::Named(name) => {
                rename_noreplace(self.held.parent.as_fd(), name, self.held)?;
                // Whatever the check finds, the candidate's name is no
                // longer this file's to remove.
                self.done = true;
                self.held.check_published(self.info.dev_ino)?;
                self.apply_mode()?;
            }
            Kept::Staged { dir, name } => {
                self.apply_mode()?;
                rename_noreplace(dir.as_fd(), name, self.held)?;
                self.held.check_published(self.info.dev_ino)?;
            }
        }
        self.done = true;
        self.held.parent.sync()?;
        Ok(self.info.clone())
    }
}

impl Drop for Candidate<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Kept::Named(name) = &self.kept {
            // Only while the name is still this file: another user's file
            // under it is never removed.
            if matches!(self.held.entry(name), Ok(Some(e)) if e.dev_ino == self.info.dev_ino) {
                let _ = rustix::fs::unlinkat(self.held.parent.as_fd(), name.as_str(), AtFlags::empty());
            }
        }
    }
}

mod staged;
pub use staged::{AdoptError, StagedFile};

#[cfg(test)]
mod tests;
