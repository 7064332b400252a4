//! The bearer token of `airlock mcp --http`: made at first start, kept in a
//! `0600` file only its owner can read, compared in constant time.
//!
//! The file (default `STATE/mcp/token`, or `--token-file`) is made with
//! `O_CREAT | O_EXCL | O_NOFOLLOW`, mode `0600`, from 32 `getrandom` bytes
//! written as hex. An existing one must be a regular file with one link,
//! owned by the server's euid, with `mode & 077 == 0`, holding 32–512 visible
//! ASCII characters; anything else is `mcp.token_unsafe` (78) at start-up.
//! Only its path is ever printed. Comparison is `subtle`'s `ct_eq`.

use airlock_core::{ReasonCode, Refusal};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use subtle::ConstantTimeEq;

/// Random bytes in a token made by airlock (written as 64 hex digits).
pub const TOKEN_BYTES: usize = 32;
/// Shortest token accepted from an operator's own file.
const MIN_TOKEN_CHARS: usize = 32;
/// Longest token file read.
const MAX_TOKEN_CHARS: usize = 512;

/// A bearer token. Its `Debug` never shows it.
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    /// Reads the token at `path`, or makes one there if nothing is there
    /// (32 random bytes from the kernel, hex, mode `0600`, created
    /// exclusively, synced). The file is opened without following a link
    /// and must be a regular file with one link, owned by the caller and
    /// not readable or writable by group or others; its content is one line
    /// of 32 to 512 visible ASCII characters. Anything else is
    /// `mcp.token_unsafe`, naming the file and the fix. Returns the token
    /// and whether it was made now.
    pub fn load_or_create(path: &Path) -> Result<(Token, bool), Refusal> {
        match open_nofollow(path) {
            Ok(file) => Ok((read_checked(path, file)?, false)),
            Err(e) if e.kind() == ErrorKind::NotFound => match create(path) {
                Ok(token) => Ok((token, true)),
                // Another server made it first: use that one.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    let file = open_nofollow(path).map_err(|e| unsafe_token(path, &e.to_string()))?;
                    Ok((read_checked(path, file)?, false))
                }
                Err(e) => Err(unsafe_token(path, &format!("cannot create it: {e}"))),
            },
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                Err(unsafe_token(path, "it is a symbolic link; point --token-file at the file itself"))
            }
            Err(e) => Err(unsafe_token(path, &e.to_string())),
        }
    }

    /// Whether `presented` is this token, in time independent of where
    /// they differ.
    pub fn matches(&self, presented: &[u8]) -> bool {
        bool::from(self.0.as_slice().ct_eq(presented))
    }
}

fn unsafe_token(path: &Path, why: &str) -> Refusal {
    Refusal::new(ReasonCode::McpTokenUnsafe, format!("bearer token file {}: {why}", path.display()))
}

fn open_nofollow(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(path)
}

fn create(path: &Path) -> std::io::Result<Token> {
    let mut bytes = [0u8; TOKEN_BYTES];
    rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())?;
    let text = hex::encode(bytes);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    let written = file.write_all(format!("{text}\n").as_bytes()).and_then(|()| file.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(Token(text.into_bytes()))
}

fn read_checked(path: &Path, file: File) -> Result<Token, Refusal> {
    let meta = file.metadata().map_err(|e| unsafe_token(path, &e.to_string()))?;
    if !meta.file_type().is_file() {
        return Err(unsafe_token(path, "it is not a regular file"));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(unsafe_token(
            path,
            &format!("it is owned by uid {}, not by uid {me} that runs the server; use a file of your own", meta.uid()),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(unsafe_token(
            path,
            &format!("other users can use it (mode {:o}); run chmod 600 on it", meta.mode() & 0o7777),
        ));
    }
    if meta.nlink() != 1 {
        return Err(unsafe_token(path, &format!("it has {} links; keep one", meta.nlink())));
    }
    let mut text = String::new();
    file.take(MAX_TOKEN_CHARS as u64 + 2)
        .read_to_string(&mut text)
        .map_err(|e| unsafe_token(path, &format!("reading it: {e}")))?;
    let token = text.strip_suffix('\n').unwrap_or(&text);
    if !(MIN_TOKEN_CHARS..=MAX_TOKEN_CHARS).contains(&token.len()) || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(unsafe_token(
            path,
            "it must hold one line of 32 to 512 visible ASCII characters; remove it to have a new token made",
        ));
    }
    Ok(Token(token.as_bytes().to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn made_once_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let (made, new) = Token::load_or_create(&path).unwrap();
        assert!(new);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.trim_end().len(), 2 * TOKEN_BYTES);
        let (read, new) = Token::load_or_create(&path).unwrap();
        assert!(!new);
        assert!(read.matches(text.trim_end().as_bytes()) && made.matches(text.trim_end().as_bytes()));
        assert!(!read.matches(&text.as_bytes()[..2 * TOKEN_BYTES - 1]));
        assert!(!read.matches(b""));
        assert_eq!(format!("{read:?}"), "Token(…)");
    }

    #[test]
    fn unsafe_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let good = "x".repeat(40);
        let open = dir.path().join("open");
        std::fs::write(&open, &good).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o640)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&open, &link).unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, "abc").unwrap();
        std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
        let linked = dir.path().join("linked");
        std::fs::write(&linked, &good).unwrap();
        std::fs::set_permissions(&linked, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::hard_link(&linked, dir.path().join("second")).unwrap();
        for (path, says) in [(&open, "chmod 600"), (&link, "symbolic link"), (&short, "32 to 512"), (&linked, "links")]
        {
            let err = Token::load_or_create(path).unwrap_err();
            assert_eq!(err.code, ReasonCode::McpTokenUnsafe, "{}", path.display());
            assert!(err.message.contains(says), "{}", err.message);
        }
        let dir_entry = dir.path().join("sub");
        std::fs::create_dir(&dir_entry).unwrap();
        assert_eq!(Token::load_or_create(&dir_entry).unwrap_err().code, ReasonCode::McpTokenUnsafe);
    }
}
