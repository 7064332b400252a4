//! Finding the configuration and the environment's overrides.
//!
//! The configuration in use is the first of (DESIGN.md §3 "Configuration
//! discovery"):
//!
//! 1. `--config FILE`;
//! 2. `AIRLOCK_CONFIG=FILE`;
//! 3. `airlock.toml` in the current directory or the nearest parent, the
//!    search stopping after a directory that holds `.git` (a repository's
//!    top: a configuration above it belongs to something else) and before
//!    crossing into another file system (as git does without
//!    `GIT_DISCOVERY_ACROSS_FILESYSTEM`);
//! 4. the user's `$XDG_CONFIG_HOME/airlock/airlock.toml`, else
//!    `~/.config/airlock/airlock.toml`;
//! 5. the embedded default, rooted in the current directory.
//!
//! Relative paths in a file are taken from that file's directory, so a
//! project's `.airlock/` and ceilings are the same from any of its
//! subdirectories.

use airlock_core::{Config, ReasonCode, Refusal, ResolverChoice};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Environment variable that forces a resolver (`auto`, `openat2`,
/// `emulated`) over `[filesystem] resolver`; the test suite runs once with
/// `emulated` to prove both resolvers give the same answers.
pub const RESOLVER_ENV: &str = "AIRLOCK_RESOLVER";

/// Environment variable naming the configuration file when `--config` does not.
pub const CONFIG_ENV: &str = "AIRLOCK_CONFIG";

/// The file name looked for in the current directory and its parents.
pub const CONFIG_NAME: &str = "airlock.toml";

/// Largest configuration file read.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Where the configuration in use came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `--config`.
    Flag,
    /// `AIRLOCK_CONFIG`.
    Env,
    /// `airlock.toml` in the current directory or a parent.
    Discovered,
    /// The user's configuration directory.
    User,
    /// None was found: the embedded default.
    Embedded,
}

impl Origin {
    /// The word `airlock doctor` reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Flag => "flag",
            Origin::Env => "env",
            Origin::Discovered => "discovered",
            Origin::User => "user",
            Origin::Embedded => "embedded",
        }
    }
}

/// The configuration in use, where it came from and why.
pub struct Loaded {
    /// The parsed configuration.
    pub config: Config,
    /// Which rule chose it.
    pub origin: Origin,
    /// The file read (`None`: the embedded default).
    pub file: Option<PathBuf>,
    /// For people: why this one (what was searched, where the search stopped).
    pub why: String,
}

impl Loaded {
    /// `airlock doctor`'s `config` object.
    pub fn report(&self) -> serde_json::Value {
        serde_json::json!({
            "file": self.file.as_ref().map(|f| f.display().to_string()),
            "origin": self.origin.as_str(),
            "why": self.why,
            "state_dir": self.config.state_dir.display().to_string(),
        })
    }

    /// One line for `--verbose`.
    pub fn describe(&self) -> String {
        let file = self.file.as_ref().map_or_else(|| "the embedded default".to_owned(), |f| f.display().to_string());
        format!(
            "configuration: {file} ({}: {}); state in {}",
            self.origin.as_str(),
            self.why,
            self.config.state_dir.display()
        )
    }
}

/// Why the upward search for `airlock.toml` ended without one.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// This directory holds `.git`: the top of a repository.
    Repository(PathBuf),
    /// The parent of this directory is on another file system.
    FileSystem(PathBuf),
    /// The root directory was searched.
    Root,
}

/// What the upward search found.
#[derive(Debug, PartialEq, Eq)]
enum Search {
    Found(PathBuf),
    NotFound(Stop),
}

/// Looks for `airlock.toml` in `start` and its parents (see the module doc).
/// Any entry by that name counts: a symbolic link or a file others may
/// write is then refused when it is read, never skipped.
fn discover(start: &Path) -> Search {
    let device = |dir: &Path| std::fs::metadata(dir).map(|m| m.dev()).ok();
    let mut dir = start.to_path_buf();
    let mut dev = device(&dir);
    loop {
        let candidate = dir.join(CONFIG_NAME);
        if std::fs::symlink_metadata(&candidate).is_ok() {
            return Search::Found(candidate);
        }
        if std::fs::symlink_metadata(dir.join(".git")).is_ok() {
            return Search::NotFound(Stop::Repository(dir));
        }
        let Some(parent) = dir.parent().map(Path::to_path_buf) else { return Search::NotFound(Stop::Root) };
        let parent_dev = device(&parent);
        if parent_dev.is_none() || parent_dev != dev {
            return Search::NotFound(Stop::FileSystem(dir));
        }
        (dir, dev) = (parent, parent_dev);
    }
}

/// The configuration in use (see the module doc for the order).
pub fn load_config(explicit: Option<&Path>) -> Result<Loaded, Refusal> {
    let cwd = std::env::current_dir()
        .map_err(|e| Refusal::new(ReasonCode::ConfigInvalid, format!("current directory: {e}")))?;
    if let Some(p) = explicit {
        return load_file(&cwd, p, Origin::Flag, "named by --config".to_owned());
    }
    if let Some(p) = std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty()) {
        return load_file(&cwd, Path::new(&p), Origin::Env, format!("named by {CONFIG_ENV}"));
    }
    let stop = match discover(&cwd) {
        Search::Found(p) => {
            let why = match p.parent() {
                Some(dir) if dir == cwd => "in the current directory".to_owned(),
                _ => format!("the nearest {CONFIG_NAME} above the current directory {}", cwd.display()),
            };
            return load_file(&cwd, &p, Origin::Discovered, why);
        }
        Search::NotFound(stop) => stop,
    };
    let searched = match stop {
        Stop::Repository(top) => {
            format!("{} and its parents up to the repository top {}", cwd.display(), top.display())
        }
        Stop::FileSystem(top) => {
            format!("{} and its parents up to {} (its parent is another file system)", cwd.display(), top.display())
        }
        Stop::Root => format!("{} and all its parents", cwd.display()),
    };
    let user = airlock_runtime::user_dirs::user_config_dir().map(|d| d.join(CONFIG_NAME));
    match &user {
        Some(p) if std::fs::symlink_metadata(p).is_ok() => {
            load_file(&cwd, p, Origin::User, format!("the user's configuration; no {CONFIG_NAME} in {searched}"))
        }
        _ => {
            let user = user.map_or_else(
                || "no user configuration (neither XDG_CONFIG_HOME nor HOME is set)".to_owned(),
                |p| format!("none at {}", p.display()),
            );
            Ok(Loaded {
                config: Config::embedded_default(&cwd),
                origin: Origin::Embedded,
                file: None,
                why: format!("no {CONFIG_NAME} in {searched}; {user}"),
            })
        }
    }
}

/// Reads and parses `path`; its relative paths are taken from its directory.
fn load_file(cwd: &Path, path: &Path, origin: Origin, why: String) -> Result<Loaded, Refusal> {
    let text = read_bounded(path)?;
    let base = path.parent().map(|p| if p.as_os_str().is_empty() { cwd.to_path_buf() } else { cwd.join(p) });
    let config = Config::parse(&text, Some(path), &base.unwrap_or_else(|| cwd.to_path_buf()))?;
    Ok(Loaded { config, origin, file: Some(path.to_path_buf()), why })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_config_wins_and_a_repository_top_stops_the_search() {
        let root = tempfile::tempdir().unwrap();
        let deep = root.path().join("project/a/b");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(root.path().join("airlock.toml"), "").unwrap();
        assert_eq!(discover(&deep), Search::Found(root.path().join("airlock.toml")));
        std::fs::write(root.path().join("project/airlock.toml"), "").unwrap();
        assert_eq!(discover(&deep), Search::Found(root.path().join("project/airlock.toml")));
        std::fs::remove_file(root.path().join("project/airlock.toml")).unwrap();
        // A repository's top is looked at, never above it.
        std::fs::create_dir(root.path().join("project/a/.git")).unwrap();
        assert_eq!(discover(&deep), Search::NotFound(Stop::Repository(root.path().join("project/a"))));
        std::fs::write(root.path().join("project/a/airlock.toml"), "").unwrap();
        assert_eq!(discover(&deep), Search::Found(root.path().join("project/a/airlock.toml")));
    }
}
