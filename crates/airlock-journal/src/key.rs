//! The journal's Ed25519 signing key (`journal.key`) and its public half.

use crate::error::JournalError;
use airlock_hostfs::PrivateDir;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use zeroize::Zeroizing;

/// The key file's name in the state directory: the raw 32-byte seed.
pub const KEY_FILE: &str = "journal.key";
/// The public key's file, `ed25519:<hex>` and a newline, for operators.
pub const PUBLIC_KEY_FILE: &str = "journal.pub";

const SEED_BYTES: usize = 32;
const TEXT_PREFIX: &str = "ed25519:";

/// The journal's signing key, loaded from (or created in) the state
/// directory. The seed is never printed: `Debug` shows only the key id.
pub struct JournalKey {
    signing: SigningKey,
    public: PublicKey,
}

impl fmt::Debug for JournalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JournalKey").field("key_id", &self.public.key_id()).field("seed", &"<redacted>").finish()
    }
}

impl JournalKey {
    /// Loads `journal.key` from `state`, creating it if missing, and makes
    /// sure `journal.pub` holds its public half.
    ///
    /// A new key is 32 bytes from `getrandom(2)`, written `0600` to a
    /// temporary name, synced, then renamed into place without replacing
    /// anything (`RENAME_NOREPLACE`): of two processes creating it at once,
    /// one wins and the other loads the winner's key. Every load checks the
    /// file as [`JournalKey::open`] does.
    pub fn open_or_create(state: &PrivateDir) -> Result<JournalKey, JournalError> {
        let key = match JournalKey::open(state) {
            Err(JournalError::KeyMissing { .. }) => {
                create(state)?;
                JournalKey::open(state)?
            }
            other => other?,
        };
        key.write_public_file(state)?;
        Ok(key)
    }

    /// Loads an existing `journal.key` from `state` (`journal.key_missing`
    /// if there is none). Refuses (`journal.key_unsafe`) a symlink (it is
    /// opened `O_NOFOLLOW`), anything but a regular file, a file not owned by
    /// the effective user, one with any group or other permission bit, one
    /// with more than one link, and one that is not exactly 32 bytes.
    pub fn open(state: &PrivateDir) -> Result<JournalKey, JournalError> {
        let path = state.display_path().join(KEY_FILE);
        let mut file = state.open_nofollow(KEY_FILE).map_err(|e| match e.errno() {
            Some(Errno::NOENT) => JournalError::KeyMissing { file: path.clone() },
            Some(Errno::LOOP) => JournalError::KeyUnsafe { file: path.clone(), reason: "it is a symbolic link".into() },
            _ => JournalError::io(&path, e.message()),
        })?;
        check_private_file(&file, &path, Some(SEED_BYTES as u64)).map_err(|fault| match fault {
            Fault::Unsafe(reason) => JournalError::KeyUnsafe { file: path.clone(), reason },
            Fault::Io(e) => e,
        })?;
        let mut seed = Zeroizing::new([0u8; SEED_BYTES + 1]);
        let mut filled = 0;
        loop {
            match file.read(&mut seed[filled..]) {
                Ok(0) => break,
                Ok(n) => {
                    filled += n;
                    if filled == seed.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(JournalError::io(&path, format_args!("read({KEY_FILE}): {e}"))),
            }
        }
        if filled != SEED_BYTES {
            return Err(JournalError::KeyUnsafe {
                file: path,
                reason: format!("it holds {filled} bytes, not {SEED_BYTES}"),
            });
        }
        let mut exact = Zeroizing::new([0u8; SEED_BYTES]);
        exact.copy_from_slice(&seed[..SEED_BYTES]);
        Ok(JournalKey::from_seed(&exact))
    }

    pub(crate) fn from_seed(seed: &[u8; SEED_BYTES]) -> JournalKey {
        let signing = SigningKey::from_bytes(seed);
        let public = PublicKey(signing.verifying_key());
        JournalKey { signing, public }
    }

    /// The public half.
    pub fn public_key(&self) -> PublicKey {
        self.public
    }

    /// `sha256:` and the hex SHA-256 of the 32 public key bytes.
    pub fn key_id(&self) -> String {
        self.public.key_id()
    }

    /// An Ed25519 signature over `message`.
    pub(crate) fn sign(&self, message: &[u8]) -> Signature {
        self.signing.sign(message)
    }

    fn write_public_file(&self, state: &PrivateDir) -> Result<(), JournalError> {
        let want = format!("{}\n", self.public.to_text());
        let path = state.display_path().join(PUBLIC_KEY_FILE);
        let mut have = Vec::new();
        if let Ok(f) = state.open_nofollow(PUBLIC_KEY_FILE) {
            if let Ok(st) = rustix::fs::fstat(&f) {
                if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile {
                    let _ = f.take(want.len() as u64 + 1).read_to_end(&mut have);
                }
            }
        }
        if have != want.as_bytes() {
            state.replace_file(PUBLIC_KEY_FILE, want.as_bytes()).map_err(|e| JournalError::io(&path, e.message()))?;
        }
        Ok(())
    }
}

/// Writes a fresh seed to `journal.key` unless someone else got there first.
fn create(state: &PrivateDir) -> Result<(), JournalError> {
    let path = state.display_path().join(KEY_FILE);
    let mut seed = Zeroizing::new([0u8; SEED_BYTES]);
    let mut filled = 0;
    while filled < SEED_BYTES {
        match rustix::rand::getrandom(&mut seed[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(JournalError::io(&path, format_args!("getrandom(32): {e}"))),
        }
    }
    let tmp = format!(".tmp-{KEY_FILE}-{}", airlock_hostfs::random_suffix());
    let mut file = state.create_file(&tmp).map_err(|e| JournalError::io(&path, e.message()))?;
    let written = file.write_all(&seed[..]).and_then(|()| file.sync_all());
    drop(file);
    if let Err(e) = written {
        let _ = state.remove_tree(&tmp);
        return Err(JournalError::io(&path, format_args!("writing {tmp}: {e}")));
    }
    match state.rename_noreplace(&tmp, KEY_FILE) {
        Ok(()) => state.sync().map_err(|e| JournalError::io(&path, e.message())),
        Err(e) => {
            let _ = state.remove_tree(&tmp);
            if e.errno() == Some(Errno::EXIST) {
                // Another process created the key first; the caller loads it.
                Ok(())
            } else {
                Err(JournalError::io(&path, e.message()))
            }
        }
    }
}

/// Why a private file failed its checks.
pub(crate) enum Fault {
    /// It is not safe to use (and says why).
    Unsafe(String),
    /// `fstat` failed.
    Io(JournalError),
}

/// Checks an open file is a regular file owned by the effective user, with
/// no group or other permission bits, exactly one link, and (if `size` is
/// given) exactly that size.
pub(crate) fn check_private_file(file: &File, path: &Path, size: Option<u64>) -> Result<(), Fault> {
    let st = rustix::fs::fstat(file)
        .map_err(|e| Fault::Io(JournalError::io(path, format_args!("fstat({}): {e}", file_name(path)))))?;
    let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
    if kind != rustix::fs::FileType::RegularFile {
        return Err(Fault::Unsafe(format!("it is not a regular file ({kind:?})")));
    }
    let euid = rustix::process::geteuid().as_raw();
    if st.st_uid != euid {
        return Err(Fault::Unsafe(format!(
            "it is owned by uid {}, not by the user running airlock (uid {euid})",
            st.st_uid
        )));
    }
    if st.st_mode & 0o077 != 0 {
        return Err(Fault::Unsafe(format!(
            "it is open to other users (mode {:o}); it must be 0600",
            st.st_mode & 0o7777
        )));
    }
    if st.st_nlink != 1 {
        return Err(Fault::Unsafe(format!("it has {} links; it must have exactly one", st.st_nlink)));
    }
    if let Some(want) = size {
        if st.st_size as u64 != want {
            return Err(Fault::Unsafe(format!("it is {} bytes, not {want}", st.st_size)));
        }
    }
    Ok(())
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// An Ed25519 public key: the journal's verification anchor. Pin it (keep
/// its text form somewhere the state directory's writers cannot change)
/// and pass it to [`crate::verify`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// `ed25519:` and the 32 key bytes in lowercase hex.
    pub fn to_text(&self) -> String {
        format!("{TEXT_PREFIX}{}", hex::encode(self.0.as_bytes()))
    }

    /// Parses the form [`PublicKey::to_text`] writes, ignoring surrounding
    /// whitespace (so a `journal.pub` file's contents parse as they are).
    pub fn parse(text: &str) -> Result<PublicKey, JournalError> {
        let bad = |reason: &str| JournalError::PublicKeyInvalid {
            reason: format!("{:?}: {reason}", truncate(text.trim(), 80)),
        };
        let hex_part =
            text.trim().strip_prefix(TEXT_PREFIX).ok_or_else(|| bad("expected \"ed25519:\" and 64 hex digits"))?;
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut bytes).map_err(|_| bad("expected \"ed25519:\" and 64 hex digits"))?;
        PublicKey::from_bytes(&bytes).map_err(|_| bad("not a valid Ed25519 point"))
    }

    /// The key from its 32 raw bytes.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<PublicKey, JournalError> {
        VerifyingKey::from_bytes(bytes)
            .map(PublicKey)
            .map_err(|_| JournalError::PublicKeyInvalid { reason: "the 32 bytes are not a valid Ed25519 point".into() })
    }

    /// The 32 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        self.0.as_bytes()
    }

    /// `sha256:` and the hex SHA-256 of the 32 key bytes: the `key_id`
    /// every record and DSSE signature carries.
    pub fn key_id(&self) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(self.0.as_bytes())))
    }

    /// Checks `signature` over `message` (`verify_strict`: no small-order
    /// keys, no malleable signatures).
    pub(crate) fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        let Ok(sig) = Signature::from_slice(signature) else {
            return false;
        };
        self.0.verify_strict(message, &sig).is_ok()
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_text())
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::JournalErrorKind;

    #[test]
    fn debug_never_shows_the_seed() {
        let seed = [7u8; 32];
        let key = JournalKey::from_seed(&seed);
        let shown = format!("{key:?} {key:#?}");
        assert!(shown.contains("<redacted>"));
        assert!(!shown.contains(&hex::encode(seed)));
        assert!(!shown.contains("7, 7"));
        assert!(shown.contains(&key.key_id()));
    }

    #[test]
    fn public_key_text_round_trips_and_is_checked() {
        let key = JournalKey::from_seed(&[1u8; 32]);
        let pk = key.public_key();
        let text = pk.to_text();
        assert!(text.starts_with("ed25519:"));
        assert_eq!(text.len(), 8 + 64);
        assert_eq!(text, text.to_lowercase());
        assert_eq!(PublicKey::parse(&format!("  {text}\n")).unwrap(), pk);
        assert_eq!(format!("{pk}"), text);
        for bad in ["", "ed25519:", &text[8..], &text[..70], &format!("{text}00"), "rsa:00", "ed25519:zz"] {
            let err = PublicKey::parse(bad).unwrap_err();
            assert_eq!(err.kind(), JournalErrorKind::PublicKeyInvalid, "{bad}");
        }
        assert_eq!(pk.key_id(), format!("sha256:{}", hex::encode(Sha256::digest(pk.as_bytes()))));
        assert_eq!(key.key_id(), pk.key_id());
    }

    #[test]
    fn signatures_verify_only_for_their_message_and_key() {
        let key = JournalKey::from_seed(&[2u8; 32]);
        let other = JournalKey::from_seed(&[3u8; 32]);
        let sig = key.sign(b"message").to_bytes();
        assert!(key.public_key().verify(b"message", &sig));
        assert!(!key.public_key().verify(b"messagf", &sig));
        assert!(!other.public_key().verify(b"message", &sig));
        assert!(!key.public_key().verify(b"message", &sig[..63]));
    }
}
