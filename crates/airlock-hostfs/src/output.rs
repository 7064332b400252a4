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
    parent: Dir,
    name: String,
    path: RelPath,
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
                let fd = resolver
                    .open_beneath(ceiling.as_fd(), &parent, OFlags::RDONLY | OFlags::DIRECTORY)
                    .map_err(|e| {
                        let code = if e.code() == ReasonCode::InputMissing {
                            ReasonCode::OutputParentMissing
                        } else {
                            e.code()
                        };
                        e.with_code(code)
                            .context(format_args!("output parent of {:?}", path.as_str()))
                    })?;
                Dir::from_fd(fd)?
            }
        };
        let held = HeldOutput {
            parent,
            name: rel.file_name().to_owned(),
            path: path.clone(),
        };
        held.ensure_absent()?;
        Ok(held)
    }

    /// Refuses (`output.exists`) if anything — file, directory, symlink,
    /// dangling symlink, FIFO — has the output's name in the held parent.
    pub fn ensure_absent(&self) -> Result<()> {
        match rustix::fs::statat(self.parent.as_fd(), self.name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => Ok(()),
            Ok(_) => Err(Error::new(
                ReasonCode::OutputExists,
                format!(
                    "output {:?} already exists; airlock never overwrites",
                    self.path.as_str()
                ),
            )),
            Err(e) => Err(Error::syscall(
                ReasonCode::Internal,
                format_args!("fstatat(parent, {:?})", self.name),
                e,
            )),
        }
    }

    /// The held parent directory.
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

impl HeldOutput {
    /// Publishes `source` (read from its start, at most `max_bytes`) under the
    /// output's name, through the held parent handle:
    ///
    /// 1. the parent's `(dev, ino)` must still be `expected_parent`;
    /// 2. a private (`0600`) candidate is written beside the destination and
    ///    synced;
    /// 3. it is renamed into place with `RENAME_NOREPLACE` (anything that
    ///    appeared meanwhile wins, and this call gets `output.exists`);
    /// 4. the directory is synced.
    ///
    /// On failure the candidate is removed and nothing is published.
    pub fn publish(
        &self,
        source: &mut std::fs::File,
        max_bytes: u64,
        expected_parent: (u64, u64),
    ) -> Result<Published> {
        use sha2::{Digest, Sha256};
        use std::io::{Read, Seek, Write};
        let now = rustix::fs::fstat(self.parent.as_fd())
            .map_err(|e| Error::syscall(ReasonCode::Internal, "fstat(parent)", e))?;
        if (now.st_dev, now.st_ino) != expected_parent || self.parent.dev_ino() != expected_parent {
            return Err(Error::new(
                ReasonCode::OutputParentChanged,
                format!(
                    "the parent directory of {:?} is not the one that was prepared",
                    self.path.as_str()
                ),
            ));
        }
        self.ensure_absent()?;
        let candidate = format!("{CANDIDATE_PREFIX}{}", crate::random_suffix());
        let fd = rustix::fs::openat(
            self.parent.as_fd(),
            candidate.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .map_err(|e| {
            Error::syscall(
                ReasonCode::Internal,
                format_args!("openat(parent, {candidate:?}, O_CREAT|O_EXCL)"),
                e,
            )
        })?;
        let mut out = std::fs::File::from(fd);
        let result = (|| -> Result<Published> {
            source
                .rewind()
                .map_err(|e| Error::new(ReasonCode::Internal, format!("rewinding output: {e}")))?;
            let mut hasher = Sha256::new();
            let mut buf = vec![0u8; 256 * 1024];
            let mut total = 0u64;
            loop {
                let n = source
                    .read(&mut buf)
                    .map_err(|e| Error::new(ReasonCode::Internal, format!("reading output: {e}")))?;
                if n == 0 {
                    break;
                }
                total += n as u64;
                if total > max_bytes {
                    return Err(Error::new(
                        ReasonCode::LimitOutputSize,
                        format!("output is larger than {max_bytes} bytes"),
                    ));
                }
                hasher.update(&buf[..n]);
                out.write_all(&buf[..n])
                    .map_err(|e| Error::new(ReasonCode::Internal, format!("writing candidate: {e}")))?;
            }
            out.sync_all()
                .map_err(|e| Error::new(ReasonCode::Internal, format!("syncing candidate: {e}")))?;
            let st =
                rustix::fs::fstat(&out).map_err(|e| Error::syscall(ReasonCode::Internal, "fstat(candidate)", e))?;
            rustix::fs::renameat_with(
                self.parent.as_fd(),
                candidate.as_str(),
                self.parent.as_fd(),
                self.name.as_str(),
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .map_err(|e| {
                let code = if e == Errno::EXIST {
                    ReasonCode::OutputExists
                } else {
                    ReasonCode::Internal
                };
                Error::syscall(
                    code,
                    format_args!("renameat2({candidate:?}, {:?}, RENAME_NOREPLACE)", self.name),
                    e,
                )
            })?;
            Ok(Published {
                bytes: total,
                sha256_hex: hex::encode(hasher.finalize()),
                dev_ino: (st.st_dev, st.st_ino),
            })
        })();
        match result {
            Ok(p) => {
                self.parent.sync()?;
                Ok(p)
            }
            Err(e) => {
                let _ = rustix::fs::unlinkat(self.parent.as_fd(), candidate.as_str(), AtFlags::empty());
                Err(e)
            }
        }
    }
}
