//! airlock's control files: what decides what a call may do.
//!
//! The configuration file, the tools directory (and every manifest in it),
//! the directory each `[policy] files` pattern names (and every policy file
//! it matches) and the state directory. Two rules protect them:
//!
//! - **Out of reach** ([`ControlFiles`], checked by `ceilings`): no
//!   ceiling or broker root may hold one, judged by `(dev, ino)` through
//!   handles, so a tool granted a tree cannot rewrite the configuration,
//!   plant a manifest or a policy, and widen the next call's grants.
//! - **Trusted owner** ([`read_text`]): each control file read, and the
//!   directory it is read from, must be owned by the caller's effective
//!   uid or root and not be writable by group or others (ssh's
//!   `StrictModes`, git's `safe.directory`); the file is opened without
//!   following a link and judged by `fstat` on the handle that is read.

use airlock_core::{Config, ReasonCode, Refusal};
use airlock_hostfs::{HostAuthority, Owner};
use std::path::{Path, PathBuf};

/// One control file or directory, for messages and for the exposure check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlFile {
    /// What it is, for people ("the configuration file").
    pub what: String,
    /// Where it is (absolute; it need not exist yet).
    pub path: PathBuf,
}

/// Every control file and directory of a configuration, except the state
/// directory (which has its own rule: it may sit inside a ceiling under a
/// control-directory name, see `ceilings`).
#[derive(Debug, Clone, Default)]
pub struct ControlFiles(pub Vec<ControlFile>);

impl ControlFiles {
    /// The control files `config` names. One line per kind: a new kind of
    /// control file (an approver key …) is one more `push`.
    pub fn of(authority: &HostAuthority, config: &Config) -> ControlFiles {
        let mut files = ControlFiles::default();
        match &config.source {
            Some(path) => files.push("the configuration file", absolute(path)),
            // With no configuration, `./airlock.toml` is where the next run
            // would find one: planting it there must be as impossible.
            None => files.push("the place of the configuration file", config.base_dir.join("airlock.toml")),
        }
        files.push("the tools directory", config.tools_dir.clone());
        for pattern in &config.policy_files {
            let full = config.base_dir.join(pattern);
            files.push(format!("the policy files {pattern:?}"), full.parent().map_or(full.clone(), Path::to_path_buf));
        }
        // The approver key at its default place, where one exists: a tool
        // that could read it could approve (keys named with --key are kept
        // out of ceilings and roots when they are made and used).
        if let Some(key) = crate::approval::key::default_key_path().filter(|k| authority.exists_nofollow(k)) {
            files.push("the default approver key", key);
        }
        // A tool that could read it could act as this airlock on the cluster.
        if let Some(file) = config.cluster.as_ref().and_then(|c| c.password_file.clone()) {
            files.push("the cluster's password file", file);
        }
        files
    }

    fn push(&mut self, what: impl Into<String>, path: PathBuf) {
        self.0.push(ControlFile { what: what.into(), path: absolute(&path) });
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The kind of a control file being read, with the codes its other
/// failures keep.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    /// What it is, for messages.
    pub what: &'static str,
    /// The code when it does not exist.
    pub missing: ReasonCode,
    /// The code when it cannot be read or is too large.
    pub invalid: ReasonCode,
}

/// `airlock.toml`.
pub const CONFIG_FILE: Kind =
    Kind { what: "configuration file", missing: ReasonCode::ConfigInvalid, invalid: ReasonCode::ConfigInvalid };
/// A tool's manifest.
pub const MANIFEST: Kind =
    Kind { what: "manifest", missing: ReasonCode::ManifestNotFound, invalid: ReasonCode::ManifestInvalid };
/// `[cluster] password_file`.
pub const CLUSTER_SECRET: Kind =
    Kind { what: "cluster password file", missing: ReasonCode::ConfigInvalid, invalid: ReasonCode::ConfigInvalid };
/// `[cluster] nkey_file`.
pub const CLUSTER_NKEY: Kind =
    Kind { what: "cluster NKey seed file", missing: ReasonCode::ConfigInvalid, invalid: ReasonCode::ConfigInvalid };
/// A Cedar policy file.
pub const POLICY: Kind =
    Kind { what: "policy file", missing: ReasonCode::PolicyInvalid, invalid: ReasonCode::PolicyInvalid };

/// Reads the control file at `path` (at most `max` bytes, UTF-8) after
/// checking the file and its directory are owned by the caller or root and
/// closed to writes by group and others (`config.control_file_unsafe`, like
/// a symbolic link or a file that is not regular).
pub fn read_text(authority: &HostAuthority, kind: Kind, path: &Path, max: u64) -> Result<String, Refusal> {
    read_owned_text(authority, kind, path, max).map(|(text, _)| text)
}

/// [`read_text`] of a secret (a password, a key's seed): also refused
/// (`config.control_file_unsafe`) when group or others may read it, judged
/// on the very file read. Its first line's end is trimmed.
pub fn read_secret(authority: &HostAuthority, kind: Kind, path: &Path, max: u64) -> Result<String, Refusal> {
    let (text, mode) = read_owned_text(authority, kind, path, max)?;
    if mode & 0o077 != 0 {
        return Err(Refusal::new(
            ReasonCode::ControlFileUnsafe,
            format!(
                "the {} {} is readable by group or others (mode {mode:04o}): chmod 600 it",
                kind.what,
                path.display()
            ),
        ));
    }
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

/// The text of a control file and the mode of the file read.
fn read_owned_text(authority: &HostAuthority, kind: Kind, path: &Path, max: u64) -> Result<(String, u32), Refusal> {
    let read = airlock_hostfs::read_control_file(authority, path, max).map_err(|e| {
        let code = match (e.code(), e.errno()) {
            (ReasonCode::ControlFileUnsafe, _) => ReasonCode::ControlFileUnsafe,
            (_, Some(rustix::io::Errno::NOENT)) => kind.missing,
            _ => kind.invalid,
        };
        Refusal::new(code, format!("{}: {}", kind.what, e.message()))
    })?;
    let euid = rustix::process::geteuid().as_raw();
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    judge(kind.what, path, read.file, euid)?;
    judge(&format!("directory of the {}", kind.what), dir, read.dir, euid)?;
    let text = String::from_utf8(read.bytes)
        .map_err(|_| Refusal::new(kind.invalid, format!("{} {} is not UTF-8", kind.what, path.display())))?;
    Ok((text, read.file.mode))
}

/// Why a control file owned as `owner` may not be trusted by `euid`, if it may not.
fn judge(what: &str, path: &Path, owner: Owner, euid: u32) -> Result<(), Refusal> {
    let stranger = owner.uid != euid && owner.uid != 0;
    let open_to_others = owner.mode & 0o022 != 0;
    if !stranger && !open_to_others {
        return Ok(());
    }
    let why = if stranger {
        format!("is owned by uid {}, neither you (uid {euid}) nor root", owner.uid)
    } else {
        "is writable by group or others".to_owned()
    };
    Err(Refusal::new(
        ReasonCode::ControlFileUnsafe,
        format!(
            "the {what} {} {why} (mode {:04o}): whoever can change it decides what airlock allows; make it yours \
             or root's and not writable by others (chown, chmod go-w)",
            path.display(),
            owner.mode
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_and_modes() {
        let p = Path::new("/p/airlock.toml");
        assert!(judge("x", p, Owner { uid: 1000, mode: 0o644 }, 1000).is_ok());
        assert!(judge("x", p, Owner { uid: 0, mode: 0o755 }, 1000).is_ok());
        assert!(judge("x", p, Owner { uid: 0, mode: 0o600 }, 0).is_ok());
        for (uid, mode, euid) in [(65534, 0o644, 0), (1001, 0o600, 1000), (1000, 0o664, 1000), (0, 0o777, 1000)] {
            let r = judge("x", p, Owner { uid, mode }, euid).unwrap_err();
            assert_eq!(r.code, ReasonCode::ControlFileUnsafe);
            assert!(r.message.contains("/p/airlock.toml") && r.message.contains(&format!("{mode:04o}")), "{r:?}");
        }
    }

    #[test]
    fn control_files_of_a_config() {
        let base = Path::new("/srv/p");
        let text = "tools_dir = \"t\"\n[policy]\nfiles = [\"pol/*.cedar\", \"one.cedar\"]\n";
        let c = Config::parse(text, Some(&base.join("airlock.toml")), base).unwrap();
        let paths: Vec<_> = ControlFiles::of(&HostAuthority::ambient(), &c).0.into_iter().map(|f| f.path).collect();
        assert_eq!(paths, [base.join("airlock.toml"), base.join("t"), base.join("pol"), base.to_path_buf()]);
        let none = ControlFiles::of(&HostAuthority::ambient(), &Config::embedded_default(base));
        assert_eq!(none.0[0].path, base.join("airlock.toml"));
    }
}
