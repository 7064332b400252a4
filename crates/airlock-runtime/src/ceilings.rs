//! Opening configured ceilings (and broker roots), and refusing the ones
//! that must never be granted: `/proc`, `/sys`, `/dev` (or a directory
//! holding them), a directory inside the state directory, and any
//! directory whose tree holds one of airlock's control files
//! ([`crate::control`]): the configuration, the tools directory, a policy
//! file's directory, or the state directory where declared paths could
//! reach it.
//!
//! Control files are judged by identity, not by name: at start-up every
//! directory holding a control file is collected as `(dev, ino)` by
//! walking `..` from handles ([`airlock_hostfs::holders`]), and a ceiling
//! is refused when its opened handle's identity is among them. A ceiling
//! that reaches the project through another path (a bind mount, a link
//! the operator followed) has the same identity and is refused too.
//!
//! # Ceilings and control files
//!
//! A ceiling directory that is itself a symlink is refused (`path.symlink`),
//! since another host process could have swapped it. `/proc`, `/sys` and
//! `/dev` are judged on the path the kernel reports for the opened handle.
//! A ceiling inside the state directory is always refused; a ceiling may
//! contain the state directory only when the state directory sits under a
//! control-directory name (`.airlock`), which the path grammar makes
//! unreachable. That exception is kept by identity: walking up from the
//! state handle, each step's name is the last component of the kernel's path
//! for the handle, confirmed by `fstatat(parent, name, NOFOLLOW)`; a ceiling
//! above the first control-named step is allowed.
//!
//! The config file (or, with none, `./airlock.toml` where discovery would find
//! one), `tools_dir`, the directory of each `[policy] files` pattern and the
//! state directory are airlock's control files ([`control::ControlFiles::of`]:
//! one line a kind). At start-up every directory holding one is collected as
//! `(dev, ino)`: for each existing prefix of its path, the directory opened
//! (`O_PATH`) and every directory above it by `openat(fd, "..")` up to `/`, so
//! a link on the way counts where it lies and where it leads, and a missing
//! file where it would be made. A ceiling or broker root whose opened handle
//! is one of them is `config.control_file_exposed` (refused, 78), whatever its
//! mode: checked for existing ceilings and `[broker.roots]` at start-up, and
//! again whenever a ceiling or root is opened. A bind mount of the project has
//! the project's identity.
//!
//! Control files are read by `airlock_hostfs::read_control_file` (the file
//! opened beneath its directory's handle without following a link, owner and
//! mode of both from `fstat` on those handles); owned by someone other than
//! the euid or root, or writable by group or others, is
//! `config.control_file_unsafe` (78), like a symlink. Only the direct
//! directory is checked, not every ancestor (ssh checks up to the home
//! directory). `policy schema`'s tool list still reads manifests plainly: it
//! types policies, and no call runs from it.

use crate::control::ControlFiles;
use airlock_core::config::PROTECTED_HOST_PATHS;
use airlock_core::path::is_control_name;
use airlock_core::{Ceiling, Config, ReasonCode, Refusal};
use airlock_hostfs::{Ancestor, Dir, HostAuthority, PrivateDir};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What ceilings are checked against, collected once when the runtime opens.
#[derive(Debug, Clone)]
pub struct Protected {
    /// The canonical state directory (for messages and the image check).
    pub state_dir: PathBuf,
    /// The state directory and every directory above it, nearest first.
    state_ancestry: Vec<Ancestor>,
    /// The first position in `state_ancestry` whose name is a control
    /// directory name: from any directory above it, the path grammar
    /// cannot reach the state directory.
    state_hidden_at: Option<usize>,
    /// Every directory holding a control file, with the first such file.
    holders: HashMap<(u64, u64), usize>,
    controls: ControlFiles,
}

impl Protected {
    /// Collects the identities of the state directory `state` and of every
    /// directory that holds one of `config`'s control files.
    pub fn new(authority: &HostAuthority, config: &Config, state: &PrivateDir) -> Result<Protected, Refusal> {
        let state_dir = authority
            .path_of(std::os::fd::AsFd::as_fd(state.dir()))
            .or_else(|| authority.canonicalize(&config.state_dir).ok())
            .unwrap_or_else(|| config.state_dir.clone());
        let state_ancestry = state.dir().ancestry().map_err(|e| {
            Refusal::new(ReasonCode::ConfigStateDir, format!("{}: {}", config.state_dir.display(), e.message()))
        })?;
        let state_hidden_at =
            state_ancestry.iter().position(|a| a.name.as_ref().and_then(|n| n.to_str()).is_some_and(is_control_name));
        let controls = ControlFiles::of(authority, config);
        let mut holders = HashMap::new();
        for (i, file) in controls.0.iter().enumerate() {
            for id in airlock_hostfs::holders(authority, &file.path) {
                holders.entry(id).or_insert(i);
            }
        }
        Ok(Protected { state_dir, state_ancestry, state_hidden_at, holders, controls })
    }
}

/// Opens `ceiling`'s host directory and checks it.
pub fn open(authority: &HostAuthority, ceiling: &Ceiling, protected: &Protected) -> Result<Dir, Refusal> {
    open_as("ceiling", authority, ceiling, protected)
}

/// [`open`] for reading or listing: a create-only ceiling (`create`) is
/// refused before it is opened (`grant.create_only`); `what` names the
/// path or query that reached it, for the message.
pub fn open_readable(
    authority: &HostAuthority,
    ceiling: &Ceiling,
    protected: &Protected,
    what: &str,
) -> Result<Dir, Refusal> {
    if !ceiling.mode.reads() {
        return Err(create_only(ceiling, what));
    }
    open(authority, ceiling, protected)
}

/// `grant.create_only`: `what` would read or list beneath `ceiling`.
pub fn create_only(ceiling: &Ceiling, what: &str) -> Refusal {
    Refusal::new(
        ReasonCode::GrantCreateOnly,
        format!(
            "{what} is under the create-only ceiling {:?}, which only receives new outputs and is never read or \
             listed; read it through an ro or rw ceiling instead",
            ceiling.spec
        ),
    )
}

/// The first create-only ceiling that `dir` is, lies beneath or holds, by
/// identity (a broker root with read or list rights there would read what
/// the ceiling keeps create-only). A ceiling that cannot be opened is
/// judged when it is used.
pub fn create_only_overlap<'c>(authority: &HostAuthority, config: &'c Config, dir: &Dir) -> Option<&'c Ceiling> {
    let id = dir.dev_ino();
    let above_dir = dir.ancestor_ids().unwrap_or_default();
    config.ceilings.iter().filter(|c| !c.mode.reads()).find(|c| {
        let Ok(ceiling) = Dir::open_ceiling(authority, &c.host) else { return false };
        let cid = ceiling.dev_ino();
        cid == id || above_dir.contains(&cid) || ceiling.ancestor_ids().is_ok_and(|above| above.contains(&id))
    })
}

/// [`open`], the messages calling it `label` (`ceiling`, `root`).
pub fn open_as(
    label: &str,
    authority: &HostAuthority,
    ceiling: &Ceiling,
    protected: &Protected,
) -> Result<Dir, Refusal> {
    let dir = Dir::open_ceiling(authority, &ceiling.host).map_err(|e| {
        let what = if e.code() == ReasonCode::PathSymlink { "is a symbolic link" } else { "cannot be opened" };
        Refusal::new(
            e.code(),
            format!("{label} {:?}: {} {what}: {}", ceiling.spec, ceiling.host.display(), e.message()),
        )
    })?;
    let real = authority
        .path_of(std::os::fd::AsFd::as_fd(&dir))
        .or_else(|| authority.canonicalize(&ceiling.host).ok())
        .ok_or_else(|| {
            Refusal::new(ReasonCode::ConfigCeiling, format!("{label} {:?}: cannot tell where it leads", ceiling.spec))
        })?;
    check(&dir, &real, protected)
        .map_err(|(code, why)| Refusal::new(code, format!("{label} {:?} ({}): {why}", ceiling.spec, real.display())))?;
    Ok(dir)
}

/// Refuses a forbidden ceiling or `[broker.roots]` entry at start-up, not
/// only when a call reaches it; one that does not exist yet (or cannot be
/// opened) is judged when it is used.
pub fn check_at_start(authority: &HostAuthority, config: &Config, protected: &Protected) -> Result<(), Refusal> {
    let roots = config.broker.roots.iter().map(|(name, path)| (format!("[broker.roots] {name}"), path));
    let ceilings = config.ceilings.iter().map(|c| (format!("ceiling {:?}", c.spec), &c.host));
    for (what, path) in ceilings.chain(roots) {
        let Ok(dir) = Dir::open_ceiling(authority, path) else { continue };
        let real = authority.path_of(std::os::fd::AsFd::as_fd(&dir)).unwrap_or_else(|| path.clone());
        check(&dir, &real, protected).map_err(|(code, why)| {
            let code = match code {
                ReasonCode::ConfigCeiling if what.starts_with('[') => ReasonCode::BrokerRootUnusable,
                other => other,
            };
            Refusal::new(code, format!("{what} ({}): {why}", real.display()))
        })?;
    }
    Ok(())
}

/// Why the opened directory `dir` (which the kernel says is `real`) may not
/// be a ceiling, if it may not.
pub fn check(dir: &Dir, real: &Path, protected: &Protected) -> Result<(), (ReasonCode, String)> {
    if let Some(why) = protected_host_path(real) {
        return Err((ReasonCode::ConfigCeiling, why));
    }
    let state = protected.state_ancestry.first().map(|a| a.id);
    let above = dir.ancestor_ids().map_err(|e| (ReasonCode::ConfigCeiling, e.message().to_owned()))?;
    if above.iter().any(|id| Some(*id) == state) {
        return Err((
            ReasonCode::ConfigCeiling,
            format!("it is inside the state directory {}", protected.state_dir.display()),
        ));
    }
    let id = dir.dev_ino();
    if let Some(at) = protected.state_ancestry.iter().position(|a| a.id == id) {
        // A state directory under a control-directory name (`.airlock`) is
        // unreachable through the path grammar from any directory above
        // that name; under any other name a tool could read or write it.
        if protected.state_hidden_at.is_none_or(|hidden| hidden >= at) {
            return Err((
                ReasonCode::ControlFileExposed,
                format!(
                    "it holds the state directory {} under a name declared paths could reach; name the state \
                     directory .airlock, or move it out of the tree",
                    protected.state_dir.display()
                ),
            ));
        }
    }
    if let Some(&i) = protected.holders.get(&id) {
        let file = &protected.controls.0[i];
        return Err((
            ReasonCode::ControlFileExposed,
            format!(
                "its tree holds {} {}: a tool granted it could change what later calls may do; move the \
                 configuration, tools_dir and [policy] files out of the granted tree (or point them elsewhere), or \
                 grant a narrower directory",
                file.what,
                file.path.display()
            ),
        ));
    }
    Ok(())
}

/// `/proc`, `/sys` and `/dev` are never ceilings, nor is a directory above them.
fn protected_host_path(real: &Path) -> Option<String> {
    PROTECTED_HOST_PATHS
        .iter()
        .map(Path::new)
        .find(|p| real.starts_with(p) || p.starts_with(real))
        .map(|p| format!("it overlaps {}, which is never a ceiling", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_paths_are_refused_by_component() {
        for bad in ["/", "/proc", "/proc/1", "/sys/fs", "/dev"] {
            assert!(protected_host_path(Path::new(bad)).is_some(), "{bad}");
        }
        for good in ["/srv/p", "/srv/p/data", "/devices", "/procfs"] {
            assert!(protected_host_path(Path::new(good)).is_none(), "{good}");
        }
    }

    fn protected_for(text: &str, base: &Path) -> (Config, Protected) {
        let config = Config::parse(text, Some(&base.join("airlock.toml")), base).unwrap();
        let authority = HostAuthority::ambient();
        let state = PrivateDir::open_or_create(&authority, &config.state_dir).unwrap();
        let protected = Protected::new(&authority, &config, &state).unwrap();
        (config, protected)
    }

    fn verdict(dir: &Path, protected: &Protected) -> Option<ReasonCode> {
        let d = Dir::open_ambient(&HostAuthority::ambient(), dir).unwrap();
        check(&d, dir, protected).err().map(|(code, _)| code)
    }

    #[test]
    fn control_files_are_judged_by_identity() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("p");
        for d in ["data", "tools", "pol", "elsewhere/tools"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        let (_, protected) = protected_for("[policy]\nfiles = [\"pol/*.cedar\"]\n", &base);
        assert_eq!(verdict(&base.join("data"), &protected), None);
        for exposed in [base.clone(), base.join("tools"), base.join("pol"), tmp.path().to_path_buf()] {
            assert_eq!(verdict(&exposed, &protected), Some(ReasonCode::ControlFileExposed), "{exposed:?}");
        }
        // The same directory through a symbolic link is the same identity.
        std::os::unix::fs::symlink(&base, tmp.path().join("alias")).unwrap();
        assert_eq!(verdict(&tmp.path().join("alias"), &protected), Some(ReasonCode::ControlFileExposed));
        // Inside the state directory: always refused.
        std::fs::create_dir_all(base.join(".airlock/x")).unwrap();
        assert_eq!(verdict(&base.join(".airlock/x"), &protected), Some(ReasonCode::ConfigCeiling));
        assert_eq!(verdict(&base.join(".airlock"), &protected), Some(ReasonCode::ConfigCeiling));
    }

    #[test]
    fn a_state_directory_is_hidden_only_under_a_control_name() {
        let tmp = tempfile::tempdir().unwrap();
        let conf = tmp.path().join("conf");
        std::fs::create_dir_all(tmp.path().join("tree/.airlock")).unwrap();
        std::fs::create_dir_all(&conf).unwrap();
        let tree = tmp.path().join("tree");
        let text = format!("state_dir = {:?}\ntools_dir = \"tools\"\n", tree.join(".airlock/state"));
        let (_, hidden) = protected_for(&text, &conf);
        assert_eq!(verdict(&tree, &hidden), None);
        let text = format!("state_dir = {:?}\n", tree.join("state"));
        let (_, named) = protected_for(&text, &conf);
        assert_eq!(verdict(&tree, &named), Some(ReasonCode::ControlFileExposed));
    }
}
