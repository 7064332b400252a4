//! Finding the configuration and the environment's overrides.

use airlock_core::{Config, ReasonCode, Refusal, ResolverChoice};
use std::path::{Path, PathBuf};

/// Environment variable that forces a resolver (`auto`, `openat2`,
/// `emulated`) over `[filesystem] resolver`; the test suite runs once with
/// `emulated` to prove both resolvers give the same answers.
pub const RESOLVER_ENV: &str = "AIRLOCK_RESOLVER";

/// Largest configuration file read.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// `--config`, else `./airlock.toml`, else the embedded default.
pub fn load_config(explicit: Option<&Path>) -> Result<Config, Refusal> {
    let cwd = std::env::current_dir()
        .map_err(|e| Refusal::new(ReasonCode::ConfigInvalid, format!("current directory: {e}")))?;
    let path: PathBuf = match explicit {
        Some(p) => p.to_path_buf(),
        // Any entry by that name counts (a symbolic link is then refused, never skipped).
        None if std::fs::symlink_metadata(cwd.join("airlock.toml")).is_ok() => cwd.join("airlock.toml"),
        None => return Ok(Config::embedded_default(&cwd)),
    };
    let text = read_bounded(&path)?;
    let base = path.parent().map(|p| if p.as_os_str().is_empty() { cwd.clone() } else { cwd.join(p) }).unwrap_or(cwd);
    Config::parse(&text, Some(&path), &base)
}

/// The configuration is a control file: read without following a link, and
/// refused unless it and its directory are the caller's or root's and
/// closed to others' writes.
fn read_bounded(path: &Path) -> Result<String, Refusal> {
    let authority = airlock_hostfs::HostAuthority::ambient();
    airlock_runtime::control::read_text(&authority, airlock_runtime::control::CONFIG_FILE, path, MAX_CONFIG_BYTES)
}

/// The resolver forced by the environment, if any.
pub fn resolver_override() -> Result<Option<ResolverChoice>, Refusal> {
    match std::env::var(RESOLVER_ENV) {
        Err(_) => Ok(None),
        Ok(v) => ResolverChoice::parse(&v).map(Some).ok_or_else(|| {
            Refusal::new(ReasonCode::ConfigInvalid, format!("{RESOLVER_ENV}={v:?}: expected auto, openat2 or emulated"))
        }),
    }
}
