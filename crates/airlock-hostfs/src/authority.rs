//! The explicit token that lets code reach the host by absolute path.

use std::path::{Path, PathBuf};

/// Proof that the caller may open host paths by name.
///
/// Everything else in this crate works relative to a handle it was given.
/// Only the binary's entry point should make one (with
/// [`HostAuthority::ambient`]), so every place that turns a host path string
/// into a handle is greppable (cap-std's `ambient_authority()` idea).
#[derive(Debug)]
pub struct HostAuthority {
    _private: (),
}

impl HostAuthority {
    /// Claims ambient authority over host paths.
    pub fn ambient() -> HostAuthority {
        HostAuthority { _private: () }
    }
}

/// Reaching the host by path, for the few things that must: finding
/// configuration and manifests, naming a directory to compare identities,
/// and opening airlock's own executable. Each is a method of the token, so
/// a caller without one cannot reach a host path at all.
impl HostAuthority {
    /// `lstat(path)`: the entry itself, never what a link points to.
    pub fn lstat(&self, path: &Path) -> std::io::Result<std::fs::Metadata> {
        std::fs::symlink_metadata(path)
    }

    /// `stat(path)`, following links.
    pub fn stat(&self, path: &Path) -> std::io::Result<std::fs::Metadata> {
        std::fs::metadata(path)
    }

    /// Whether anything (a link included) is named `path`; an error other
    /// than "not found" counts as present, so a caller never takes an
    /// unreadable name for a free one.
    pub fn exists_nofollow(&self, path: &Path) -> bool {
        !self.lstat(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    }

    /// The absolute path with every link resolved (`realpath`).
    pub fn canonicalize(&self, path: &Path) -> std::io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }

    /// The regular files directly in `dir` whose names `keep` accepts,
    /// sorted; an unreadable directory has none.
    pub fn files_in(&self, dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = crate::stamp::kept_entries(dir, keep)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|(_, meta)| meta.is_file())
            .map(|(entry, _)| entry.path())
            .collect();
        found.sort();
        found
    }

    /// The stamp of `dir` and of the entries in it whose names `keep`
    /// accepts (`None` if one cannot be read): to tell, later, whether a
    /// listing and what it read may be reused ([`crate::ListingStamp`]).
    pub fn stamp_files_in(&self, dir: &Path, keep: impl Fn(&str) -> bool) -> Option<crate::ListingStamp> {
        crate::stamp::ListingStamp::take(dir, keep)
    }

    /// At most `max` bytes of the file at `path` as text (`None` if it
    /// cannot be read, is not UTF-8 or is larger). For files that only
    /// inform (a listing); anything trusted is read with
    /// [`crate::read_control_file`].
    pub fn read_text(&self, path: &Path, max: u64) -> Option<String> {
        use std::io::Read;
        let mut text = String::new();
        let file = std::fs::File::open(path).ok()?;
        file.take(max + 1).read_to_string(&mut text).ok()?;
        (text.len() as u64 <= max).then_some(text)
    }

    /// Opens `path` read-only (airlock's own executable, to bind into a worker).
    pub fn open_read(&self, path: &Path) -> std::io::Result<std::fs::File> {
        std::fs::File::open(path)
    }

    /// The path the kernel reports for an open handle (`/proc/self/fd/N`).
    pub fn path_of(&self, fd: std::os::fd::BorrowedFd<'_>) -> Option<PathBuf> {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
    }

    /// Creates `dir` and its missing parents with `mode`.
    pub fn create_dir_all(&self, dir: &Path, mode: u32) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(mode).create(dir)
    }

    /// `open(path, flags, mode)` (the caller chooses `O_NOFOLLOW`, `O_EXCL`, …).
    pub fn open_with(
        &self,
        path: &Path,
        flags: rustix::fs::OFlags,
        mode: rustix::fs::Mode,
    ) -> rustix::io::Result<std::os::fd::OwnedFd> {
        rustix::fs::open(path, flags, mode)
    }

    /// Removes the file named `path` (never a directory).
    pub fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_file(path)
    }
}
