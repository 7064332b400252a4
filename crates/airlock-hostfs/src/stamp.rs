//! What a directory's listing looked like, to tell later whether anything
//! in it may have changed without reading the files again.

use std::ffi::OsString;
use std::fs::{DirEntry, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How old every time in a stamp must be for the stamp to be
/// [`ListingStamp::settled`]. A filesystem may keep times at the kernel's
/// clock tick (a few milliseconds): a change made within the same tick as
/// the one a stamp saw can leave every time as it was. Times older than
/// this at stamping are past any tick, so any later change moves them.
pub const SETTLED_AFTER: Duration = Duration::from_secs(2);

/// One file's identity and change times (`stat`, following a link).
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    mode: u32,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    fn of(meta: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mode: meta.mode(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether both times are at least [`SETTLED_AFTER`] before `now`.
    fn settled(&self, now: SystemTime) -> bool {
        let Some(before) = now.checked_sub(SETTLED_AFTER) else { return false };
        let Ok(limit) = before.duration_since(SystemTime::UNIX_EPOCH) else { return false };
        let limit = i64::try_from(limit.as_secs()).unwrap_or(i64::MAX);
        // Whole seconds strictly before the limit's second: nanoseconds
        // need not be compared.
        self.mtime.0 < limit && self.ctime.0 < limit
    }
}

/// The entries directly in `dir` whose names `keep` accepts, each with its
/// `stat` (following a link), in directory order: what
/// [`crate::HostAuthority::files_in`] lists and a stamp records.
pub(crate) fn kept_entries(
    dir: &Path,
    keep: impl Fn(&str) -> bool,
) -> std::io::Result<impl Iterator<Item = std::io::Result<(DirEntry, Metadata)>>> {
    Ok(std::fs::read_dir(dir)?
        .filter(move |entry| entry.as_ref().map_or(true, |e| e.file_name().to_str().is_some_and(&keep)))
        .map(|entry| entry.and_then(|e| std::fs::metadata(e.path()).map(|meta| (e, meta)))))
}

/// A directory's identity and times, and those of the entries a listing
/// kept (name, identity, mode, size, modification and change times). Two
/// equal stamps taken at different times mean no entry was added, removed,
/// renamed, written, or had its mode or owner changed in between — when
/// the earlier one was [`ListingStamp::settled`]: every change to a file
/// or to the directory's names moves a change time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListingStamp {
    dir: FileStamp,
    files: Vec<(OsString, FileStamp)>,
}

impl ListingStamp {
    pub(crate) fn take(dir: &Path, keep: impl Fn(&str) -> bool) -> Option<ListingStamp> {
        let stamp = FileStamp::of(&std::fs::metadata(dir).ok()?);
        let mut files = Vec::new();
        for kept in kept_entries(dir, keep).ok()? {
            // A kept name that cannot be read or stat'ed makes no stamp:
            // the caller reads the directory again rather than trust an
            // unknown.
            let (entry, meta) = kept.ok()?;
            files.push((entry.file_name(), FileStamp::of(&meta)));
        }
        files.sort_by(|a, b| a.0.cmp(&b.0));
        Some(ListingStamp { dir: stamp, files })
    }

    /// Whether every time in the stamp was at least [`SETTLED_AFTER`] old
    /// when it was taken (`now`): only then does an equal later stamp prove
    /// that nothing changed.
    pub fn settled(&self, now: SystemTime) -> bool {
        self.dir.settled(now) && self.files.iter().all(|(_, f)| f.settled(now))
    }
}

#[cfg(test)]
mod tests {
    use super::{ListingStamp, SETTLED_AFTER};
    use std::time::{Duration, SystemTime};

    /// Past a coarse clock's tick: within one, a change may keep the times
    /// (what [`ListingStamp::settled`] is for).
    fn next_tick() {
        std::thread::sleep(Duration::from_millis(25));
    }

    fn manifests(name: &str) -> bool {
        name.ends_with(".toml")
    }

    #[test]
    fn every_change_to_a_kept_file_or_the_names_moves_the_stamp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a.toml");
        std::fs::write(&a, "one").expect("write");
        let first = ListingStamp::take(dir.path(), manifests).expect("stamp");
        assert_eq!(ListingStamp::take(dir.path(), manifests), Some(first.clone()));
        // A file not kept changes the directory's times too.
        next_tick();
        std::fs::write(dir.path().join("notes.txt"), "x").expect("write");
        let second = ListingStamp::take(dir.path(), manifests).expect("stamp");
        assert_ne!(first, second);
        // Same size, new bytes.
        next_tick();
        std::fs::write(&a, "two").expect("write");
        let third = ListingStamp::take(dir.path(), manifests).expect("stamp");
        assert_ne!(second, third);
        next_tick();
        std::fs::set_permissions(&a, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
        assert_ne!(ListingStamp::take(dir.path(), manifests), Some(third));
    }

    #[test]
    fn a_stamp_of_fresh_files_is_not_settled_and_an_old_one_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.toml"), "one").expect("write");
        let stamp = ListingStamp::take(dir.path(), manifests).expect("stamp");
        let now = SystemTime::now();
        assert!(!stamp.settled(now));
        assert!(stamp.settled(now + SETTLED_AFTER * 2));
    }

    #[test]
    fn an_unreadable_directory_has_no_stamp() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(ListingStamp::take(&dir.path().join("absent"), manifests), None);
    }
}
