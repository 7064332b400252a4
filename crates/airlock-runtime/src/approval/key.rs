//! An approver's Ed25519 key: a file of the raw 32-byte seed, `0600`, in
//! a directory only its owner may change, where the approver chooses
//! (by default `$XDG_CONFIG_HOME/airlock/approver.key`, else
//! `~/.config/airlock/approver.key`), and never inside a ceiling, a broker
//! root or the state directory, judged by directory identity.
//!
//! It does not keep the approver's key from a process running as the same
//! user: that is why `airlock doctor` warns when the key is readable by the
//! user that runs calls.

use airlock_core::{Config, ReasonCode, Refusal};
use airlock_hostfs::HostAuthority;
use ed25519_dalek::SigningKey;
use rustix::fs::{Mode, OFlags};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

const SEED_BYTES: usize = 32;
/// The key's file name in its default directory.
pub const DEFAULT_KEY_FILE: &str = "approver.key";

fn unusable(path: &Path, why: impl std::fmt::Display) -> Refusal {
    Refusal::new(ReasonCode::ApprovalKeyUnusable, format!("approver key {}: {why}", path.display()))
}

/// `$XDG_CONFIG_HOME/airlock/approver.key` (if that is absolute), else
/// `$HOME/.config/airlock/approver.key`; `None` when neither is set.
pub fn default_key_path() -> Option<PathBuf> {
    Some(crate::user_dirs::user_config_dir()?.join(DEFAULT_KEY_FILE))
}

/// The key file to use: `explicit`, else the default place.
pub fn key_path(explicit: Option<&Path>) -> Result<PathBuf, Refusal> {
    match explicit {
        Some(p) => Ok(p.to_path_buf()),
        None => default_key_path().ok_or_else(|| {
            Refusal::new(
                ReasonCode::ApprovalKeyUnusable,
                "neither XDG_CONFIG_HOME nor HOME is set, so there is no default approver key; name one with --key FILE",
            )
        }),
    }
}

/// The directories a key must never be in: every ceiling, every broker
/// root and the state directory, with a label for messages.
pub fn forbidden_places(config: &Config) -> Vec<(String, PathBuf)> {
    let mut places: Vec<(String, PathBuf)> =
        config.ceilings.iter().map(|c| (format!("the ceiling {:?}", c.spec), c.host.clone())).collect();
    places.extend(config.broker.roots.iter().map(|(name, p)| (format!("the broker root {name:?}"), p.clone())));
    places.push(("the state directory".to_owned(), config.state_dir.clone()));
    places
}

/// Refuses a key whose directory is, or lies beneath, one of `places`:
/// each ancestor of the key's directory is compared by `(dev, ino)` with
/// each place (a place that does not exist holds nothing).
pub fn check_placement(authority: &HostAuthority, key: &Path, places: &[(String, PathBuf)]) -> Result<(), Refusal> {
    let dir = parent_of(key);
    let real = authority.canonicalize(&dir).map_err(|e| unusable(key, format_args!("its directory: {e}")))?;
    let ids: Vec<(&str, (u64, u64))> = places
        .iter()
        .filter_map(|(label, p)| authority.stat(p).ok().map(|m| (label.as_str(), (m.dev(), m.ino()))))
        .collect();
    for ancestor in real.ancestors() {
        let Ok(m) = authority.stat(ancestor) else { continue };
        if let Some((label, _)) = ids.iter().find(|(_, id)| *id == (m.dev(), m.ino())) {
            return Err(unusable(
                key,
                format_args!(
                    "it is inside {label} ({}), where calls can reach it; keep it in the approver's own directory",
                    ancestor.display()
                ),
            ));
        }
    }
    Ok(())
}

fn parent_of(key: &Path) -> PathBuf {
    match key.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Refuses a key directory that another user could change: it must be a
/// directory owned by this user (or root) with no group or other write bit.
fn check_directory(authority: &HostAuthority, key: &Path) -> Result<(), Refusal> {
    let dir = parent_of(key);
    let m = authority.stat(&dir).map_err(|e| unusable(key, format_args!("its directory: {e}")))?;
    let euid = rustix::process::geteuid().as_raw();
    if !m.is_dir() {
        return Err(unusable(key, "its parent is not a directory"));
    }
    if m.uid() != euid && m.uid() != 0 {
        return Err(unusable(key, format_args!("its directory is owned by uid {}, not by uid {euid}", m.uid())));
    }
    if m.mode() & 0o022 != 0 {
        return Err(unusable(
            key,
            format_args!(
                "its directory is writable by other users (mode {:o}); use a 0700 directory",
                m.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

/// An approver's signing key. Its seed is never printed.
pub struct ApproverKey {
    signing: SigningKey,
    path: PathBuf,
}

impl std::fmt::Debug for ApproverKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApproverKey").field("path", &self.path).field("seed", &"<redacted>").finish()
    }
}

impl ApproverKey {
    /// Makes a new key at `path` (refused if something is there, if its
    /// directory is writable by others, or if it lies in one of `places`).
    /// The default directory is created `0700`; a named one must exist.
    pub fn create(
        authority: &HostAuthority,
        path: &Path,
        is_default: bool,
        places: &[(String, PathBuf)],
    ) -> Result<ApproverKey, Refusal> {
        let dir = parent_of(path);
        if is_default {
            authority
                .create_dir_all(&dir, 0o700)
                .map_err(|e| unusable(path, format_args!("creating {}: {e}", dir.display())))?;
        }
        check_placement(authority, path, places)?;
        check_directory(authority, path)?;
        let mut seed = Zeroizing::new([0u8; SEED_BYTES]);
        let mut filled = 0;
        while filled < SEED_BYTES {
            match rustix::rand::getrandom(&mut seed[filled..], rustix::rand::GetRandomFlags::empty()) {
                Ok(n) => filled += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(unusable(path, format_args!("getrandom: {e}"))),
            }
        }
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = authority.open_with(path, flags, Mode::from_raw_mode(0o600)).map_err(|e| {
            if e == rustix::io::Errno::EXIST {
                unusable(path, "a file is already there; use it, or choose another --key FILE")
            } else {
                unusable(path, format_args!("open(O_CREAT|O_EXCL): {e}"))
            }
        })?;
        let mut file = File::from(fd);
        if let Err(e) = file.write_all(&seed[..]).and_then(|()| file.sync_all()) {
            let _ = authority.remove_file(path);
            return Err(unusable(path, format_args!("writing: {e}")));
        }
        if let Ok(d) = authority.open_read(&dir) {
            let _ = d.sync_all();
        }
        Ok(ApproverKey { signing: SigningKey::from_bytes(&seed), path: path.to_path_buf() })
    }

    /// Loads the key at `path`, opened without following a link: a
    /// regular file of exactly 32 bytes, owned by this user, with no group
    /// or other permission bit and one link, in a directory only its owner
    /// may change, outside every one of `places`.
    pub fn load(authority: &HostAuthority, path: &Path, places: &[(String, PathBuf)]) -> Result<ApproverKey, Refusal> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = authority.open_with(path, flags, Mode::empty()).map_err(|e| match e {
            rustix::io::Errno::NOENT => unusable(
                path,
                "there is no key here; an approver makes one with `airlock approver init` (as their own user)",
            ),
            rustix::io::Errno::LOOP => unusable(path, "it is a symbolic link"),
            e => unusable(path, format_args!("open: {e}")),
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| unusable(path, format_args!("fstat: {e}")))?;
        let euid = rustix::process::geteuid().as_raw();
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(unusable(path, "it is not a regular file"));
        }
        if st.st_uid != euid {
            return Err(unusable(path, format_args!("it is owned by uid {}, not by uid {euid}", st.st_uid)));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(unusable(
                path,
                format_args!("it is open to other users (mode {:o}); it must be 0600", st.st_mode & 0o7777),
            ));
        }
        if st.st_nlink != 1 {
            return Err(unusable(path, format_args!("it has {} links; it must have exactly one", st.st_nlink)));
        }
        if st.st_size != SEED_BYTES as i64 {
            return Err(unusable(path, format_args!("it is {} bytes, not {SEED_BYTES}", st.st_size)));
        }
        check_directory(authority, path)?;
        check_placement(authority, path, places)?;
        let mut seed = Zeroizing::new([0u8; SEED_BYTES]);
        File::from(fd).read_exact(&mut seed[..]).map_err(|e| unusable(path, format_args!("read: {e}")))?;
        Ok(ApproverKey { signing: SigningKey::from_bytes(&seed), path: path.to_path_buf() })
    }

    /// The signing key.
    pub(crate) fn signing(&self) -> &SigningKey {
        &self.signing
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `ed25519:` and the public key in hex: what `[approval] approvers` pins.
    pub fn public_key_text(&self) -> String {
        super::statement::public_key_text(&self.signing.verifying_key())
    }

    /// `sha256:` and the hex SHA-256 of the public key.
    pub fn key_id(&self) -> String {
        super::statement::key_id(&self.signing.verifying_key())
    }
}
