//! Opening configured ceilings, and refusing the ones that must never be
//! ceilings: `/proc`, `/sys`, `/dev` (or a directory holding them), the
//! state directory (or a directory holding it or inside it) and the config
//! file.
//!
//! The check is made on what was actually opened: the path the kernel
//! reports for the open handle, so a path that is swapped between a check
//! and the open is still judged by where it really leads.

use airlock_core::config::PROTECTED_HOST_PATHS;
use airlock_core::path::is_control_dir;
use airlock_core::{Ceiling, ReasonCode, Refusal};
use airlock_hostfs::{Dir, HostAuthority};
pub(crate) use rustix_path::fd_path;
use std::path::{Path, PathBuf};

mod rustix_path {
    use std::os::fd::AsRawFd;
    use std::path::PathBuf;

    /// The path the kernel reports for an open descriptor.
    pub fn fd_path(fd: &impl AsRawFd) -> Option<PathBuf> {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
    }
}

/// What ceilings are checked against.
#[derive(Debug, Clone)]
pub struct Protected {
    /// The canonical state directory.
    pub state_dir: PathBuf,
    /// The canonical config file, if any.
    pub config_file: Option<PathBuf>,
}

/// Opens `ceiling`'s host directory and checks it.
pub fn open(authority: &HostAuthority, ceiling: &Ceiling, protected: &Protected) -> Result<Dir, Refusal> {
    let dir = Dir::open_ceiling(authority, &ceiling.host).map_err(|e| {
        let what = if e.code() == ReasonCode::PathSymlink { "is a symbolic link" } else { "cannot be opened" };
        Refusal::new(
            e.code(),
            format!("ceiling {:?}: {} {what}: {}", ceiling.spec, ceiling.host.display(), e.message()),
        )
    })?;
    let real = fd_path(&std::os::fd::AsFd::as_fd(&dir))
        .or_else(|| std::fs::canonicalize(&ceiling.host).ok())
        .ok_or_else(|| {
            Refusal::new(ReasonCode::ConfigCeiling, format!("ceiling {:?}: cannot tell where it leads", ceiling.spec))
        })?;
    check(&real, protected).map_err(|why| {
        Refusal::new(ReasonCode::ConfigCeiling, format!("ceiling {:?} ({}): {why}", ceiling.spec, real.display()))
    })?;
    Ok(dir)
}

/// Why `real` (a canonical host directory) may not be a ceiling, if it may not.
pub fn check(real: &Path, protected: &Protected) -> Result<(), String> {
    for p in PROTECTED_HOST_PATHS {
        let p = Path::new(p);
        if real.starts_with(p) || p.starts_with(real) {
            return Err(format!("it overlaps {}, which is never a ceiling", p.display()));
        }
    }
    let state = &protected.state_dir;
    if real.starts_with(state) {
        return Err(format!("it is inside the state directory {}", state.display()));
    }
    if let Ok(below) = state.strip_prefix(real) {
        // A state directory under a control-directory name (`.airlock`) is
        // unreachable through the path grammar; any other name would be.
        let hidden = below.components().any(|c| is_control_dir(&c.as_os_str().to_string_lossy()));
        if !hidden {
            return Err(format!(
                "it holds the state directory {} under a name declared paths could reach (name it .airlock)",
                state.display()
            ));
        }
    }
    if protected.config_file.as_deref() == Some(real) {
        return Err("it is the configuration file".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_paths_are_refused_by_component() {
        let prot = Protected { state_dir: "/srv/p/.airlock".into(), config_file: Some("/srv/p/airlock.toml".into()) };
        for bad in
            ["/", "/proc", "/proc/1", "/sys/fs", "/dev", "/srv/p/.airlock", "/srv/p/.airlock/x", "/srv/p/airlock.toml"]
        {
            assert!(check(Path::new(bad), &prot).is_err(), "{bad}");
        }
        for good in ["/srv/p", "/srv/p/data", "/srv/p-evil", "/devices", "/srv/p/.airlock-not"] {
            assert!(check(Path::new(good), &prot).is_ok(), "{good}");
        }
        let named_state = Protected { state_dir: "/srv/p/state".into(), config_file: None };
        assert!(check(Path::new("/srv/p"), &named_state).is_err());
        assert!(check(Path::new("/srv"), &named_state).is_err());
    }
}
