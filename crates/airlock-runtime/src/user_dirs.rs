//! Where the user's own airlock files live (outside any project).

use std::path::PathBuf;

/// The user's airlock directory: `$XDG_CONFIG_HOME/airlock` (if that is
/// absolute), else `$HOME/.config/airlock`; `None` when neither is set. It
/// holds the user's `airlock.toml` and the default approver key.
pub fn user_config_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from).filter(|p| p.is_absolute()).or_else(|| {
        std::env::var_os("HOME").map(PathBuf::from).filter(|p| p.is_absolute()).map(|h| h.join(".config"))
    })?;
    Some(base.join("airlock"))
}
