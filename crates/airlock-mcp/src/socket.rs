//! The Unix socket of `airlock mcp --unix PATH`: made in a directory only
//! the caller can change, with a mode that admits exactly the uids the
//! operator mapped; who a peer is comes from the kernel (`SO_PEERCRED`).
//!
//! The peer's uid is taken per connection (tokio's `peer_cred`, handed to
//! the gate through axum's `ConnectInfo`) and mapped by `[mcp.principals]`
//! (`UID = "principal"`); an unmapped uid is 403 `mcp.peer_unmapped`. The
//! socket's directory must be the caller's and not group- or other-writable
//! (`mcp.socket_unsafe`); a stale socket of ours that nobody answers on is
//! replaced. The socket is `0600` when only the server's uid (or root) is
//! mapped, else `0666`: the mapping, not the file mode, is then the access
//! control (a `0600` socket would make mapping any other uid pointless).

use airlock_core::{ReasonCode, Refusal};
use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// A bound socket; its file is removed when this is dropped.
#[derive(Debug)]
pub struct UnixSocket {
    listener: Option<UnixListener>,
    path: PathBuf,
    mode: u32,
}

impl UnixSocket {
    /// Binds `path`. Its directory must be owned by the caller and not
    /// writable by group or others (so nobody else can swap the socket).
    /// A socket already there that nobody answers on (left by a server
    /// that died) is replaced; anything else there is refused. The socket
    /// is `0600` when `principals` maps no uid but the caller's (root
    /// connects regardless), else `0666`: then the mapping decides, and an
    /// unmapped uid is refused on its first request.
    pub fn bind(path: &Path, principals: &BTreeMap<u32, String>) -> Result<UnixSocket, Refusal> {
        let bad = |why: String| Refusal::new(ReasonCode::McpSocketUnsafe, format!("--unix {}: {why}", path.display()));
        let name = path.file_name().ok_or_else(|| bad("names no file".into()))?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let me = rustix::process::geteuid().as_raw();
        let dir = std::fs::symlink_metadata(parent).map_err(|e| bad(format!("its directory: {e}")))?;
        if !dir.is_dir() {
            return Err(bad(format!("{} is not a directory (a link is not followed)", parent.display())));
        }
        if dir.uid() != me || dir.mode() & 0o022 != 0 {
            return Err(bad(format!(
                "its directory {} must be owned by uid {me} and writable by nobody else (it is uid {}, mode {:o}); \
                 make a directory of your own for the socket",
                parent.display(),
                dir.uid(),
                dir.mode() & 0o7777
            )));
        }
        let path = parent.join(name);
        if let Ok(old) = std::fs::symlink_metadata(&path) {
            let stale = old.file_type().is_socket() && old.uid() == me && UnixStream::connect(&path).is_err();
            if !stale {
                return Err(bad(
                    "something is already there (a file, or a socket a live server answers on); remove it or pick \
                     another path"
                        .into(),
                ));
            }
            std::fs::remove_file(&path).map_err(|e| bad(format!("removing the stale socket: {e}")))?;
        }
        let listener = UnixListener::bind(&path).map_err(|e| bad(format!("bind: {e}")))?;
        let mode = if principals.keys().all(|&uid| uid == me || uid == 0) { 0o600 } else { 0o666 };
        let socket = UnixSocket { listener: Some(listener), path, mode };
        std::fs::set_permissions(&socket.path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| bad(format!("chmod {mode:o}: {e}")))?;
        Ok(socket)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The socket file's mode (`0600` or `0666`).
    pub fn mode(&self) -> u32 {
        self.mode
    }

    /// The listener, for serving (once).
    pub(crate) fn take_listener(&mut self) -> Option<UnixListener> {
        self.listener.take()
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn mode_follows_the_mapping_and_the_file_goes_with_it() {
        let dir = private_dir();
        let me = rustix::process::geteuid().as_raw();
        let path = dir.path().join("s");
        let own = UnixSocket::bind(&path, &BTreeMap::from([(me, "me".to_owned())])).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(own.mode(), 0o600);
        drop(own);
        assert!(!path.exists());
        let other = if me == 4242 { 4243 } else { 4242 };
        let shared = UnixSocket::bind(&path, &BTreeMap::from([(other, "x".to_owned())])).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o666);
        drop(shared);
    }

    #[test]
    fn unsafe_places_are_refused() {
        let dir = private_dir();
        let none = BTreeMap::new();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(UnixSocket::bind(&open.join("s"), &none).unwrap_err().code, ReasonCode::McpSocketUnsafe);
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert_eq!(UnixSocket::bind(&file, &none).unwrap_err().code, ReasonCode::McpSocketUnsafe);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert_eq!(UnixSocket::bind(&link.join("s"), &none).unwrap_err().code, ReasonCode::McpSocketUnsafe);
        let live = dir.path().join("live");
        let _held = UnixSocket::bind(&live, &none).unwrap();
        let again = UnixSocket::bind(&live, &none).unwrap_err();
        assert!(again.message.contains("already there"), "{}", again.message);
    }

    #[test]
    fn a_stale_socket_is_replaced() {
        let dir = private_dir();
        let path = dir.path().join("s");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        UnixSocket::bind(&path, &BTreeMap::new()).unwrap();
    }
}
