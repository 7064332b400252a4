//! Opening the unpacked repository with gix, inert.
//!
//! The repository's own `.git/config` is replaced by a minimal one before
//! gix reads anything: only the repository format version and object
//! format are carried over. So `core.hooksPath`, `core.fsmonitor`,
//! `core.sshCommand`, `core.worktree`, `core.attributesFile`,
//! `core.excludesFile`, `include.*`, filter and diff drivers, `safe.*` and
//! every other setting are gone, not merely unused. gix is then opened
//! with isolated permissions: no system, global or user configuration, no
//! `git` binary asked for its installation's, no environment variables,
//! no includes. Two settings are the driver's own: `core.trustctime =
//! false` and `core.checkstat = minimal`, because the unpacked copies keep
//! the host's modification times (and sizes) but not its inode numbers or
//! change times, so gix trusts the index's stat data as git would on the
//! host, and hashes only files whose time or size moved (or are racy).
//! A third, `index.skipHash = true`, makes gix read the index without
//! checking its trailing SHA-1 (half of reading it, by gix's own measure):
//! that checksum guards against a torn write, not against a hostile
//! repository, whose author can write a valid one, so every byte of the
//! index is parsed as strictly either way.
//! gix never runs hooks; with no drivers configured it runs
//! no filter either. Alternates and linked-worktree pointers are refused
//! again here even though the snapshot never carries them.

use crate::error::GitError;
use airlock_core::ReasonCode;
use std::path::Path;

/// Most bytes of the repository's own configuration read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The configuration the driver writes: `(format version, object format)`.
fn minimal_config(version: i64, object_format: Option<&str>) -> String {
    let mut c = format!(
        "[core]\n\trepositoryformatversion = {version}\n\tbare = false\n\tfilemode = true\n\tsymlinks = true\n\
         \tignorecase = false\n\tprecomposeunicode = false\n\tlogallrefupdates = false\n\
         \ttrustctime = false\n\tcheckstat = minimal\n[index]\n\tskipHash = true\n"
    );
    if let Some(f) = object_format {
        c.push_str(&format!("[extensions]\n\tobjectformat = {f}\n"));
    }
    c
}

/// Reads what is kept from the original configuration.
fn kept_settings(git_dir: &Path) -> Result<(i64, Option<String>), GitError> {
    let path = git_dir.join("config");
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, None)),
        Err(e) => return Err(GitError::io("reading .git/config")(e)),
    };
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(GitError::new(ReasonCode::GitRepositoryInvalid, ".git/config is larger than 1 MiB"));
    }
    let text = String::from_utf8_lossy(&bytes);
    let file: gix::config::File =
        text.parse().map_err(GitError::git::<gix::config::parse::Error>(".git/config does not parse"))?;
    let version = match file.integer("core.repositoryformatversion") {
        Ok(None) => 0,
        Ok(Some(v)) if v == 0 || v == 1 => v,
        _ => return Err(GitError::new(ReasonCode::GitRepositoryInvalid, "unsupported core.repositoryformatversion")),
    };
    let format = file.string("extensions.objectformat").map(|v| v.to_string().to_ascii_lowercase());
    match format.as_deref() {
        None | Some("sha1") => Ok((version, None)),
        Some(other) => Err(GitError::new(
            ReasonCode::GitRepositoryInvalid,
            format!("object format {other:?} is not supported (only sha1)"),
        )),
    }
}

/// Replaces the configuration, refuses outside pointers, and opens `work_tree`.
pub(crate) fn open(work_tree: &Path) -> Result<gix::Repository, GitError> {
    let git_dir = work_tree.join(".git");
    for pointer in ["commondir", "gitdir", "objects/info/alternates", "objects/info/http-alternates"] {
        if git_dir.join(pointer).symlink_metadata().is_ok() {
            return Err(GitError::new(
                ReasonCode::GitRepositoryInvalid,
                format!(".git/{pointer} points outside the snapshot and is never followed"),
            ));
        }
    }
    let (version, format) = kept_settings(&git_dir)?;
    let config = git_dir.join("config");
    match std::fs::remove_file(&config) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(GitError::io("replacing .git/config")(e)),
    }
    std::fs::write(&config, minimal_config(version, format.as_deref())).map_err(GitError::io("writing .git/config"))?;
    let options = gix::open::Options::isolated();
    gix::open_opts(work_tree, options).map_err(GitError::git("opening the repository"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_settings_do_not_survive() {
        let t = tempfile::tempdir().unwrap();
        let wt = t.path().join("repo");
        std::fs::create_dir_all(&wt).unwrap();
        let init = std::process::Command::new("git").args(["init", "-q"]).current_dir(&wt).status().unwrap();
        assert!(init.success());
        std::fs::write(
            wt.join(".git/config"),
            "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = /bin/evil\n\thooksPath = /tmp\n\
             \tsshCommand = evil\n\tworktree = /etc\n[include]\n\tpath = /etc/passwd\n\
             [filter \"x\"]\n\tclean = touch /tmp/canary\n",
        )
        .unwrap();
        let repo = open(&wt).unwrap();
        let config = std::fs::read_to_string(wt.join(".git/config")).unwrap();
        for word in ["fsmonitor", "hooksPath", "sshCommand", "worktree", "include", "filter", "evil"] {
            assert!(!config.contains(word), "{word} survived: {config}");
        }
        let snapshot = repo.config_snapshot();
        assert!(snapshot.string("core.fsmonitor").is_none());
        assert!(snapshot.string("filter.x.clean").is_none());
        assert_eq!(repo.workdir(), Some(wt.as_path()));
    }

    #[test]
    fn outside_pointers_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let wt = t.path().join("repo");
        std::fs::create_dir_all(wt.join(".git/objects/info")).unwrap();
        std::fs::write(wt.join(".git/objects/info/alternates"), "/srv/other/objects\n").unwrap();
        assert_eq!(open(&wt).unwrap_err().code(), ReasonCode::GitRepositoryInvalid);
    }
}
