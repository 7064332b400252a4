//! Root grants: parsed from `NAME=PATH:RIGHTS` (command line) or from a
//! manifest's `NAME:RIGHTS` with the path from `[broker.roots]`, then
//! opened like ceilings (no symlink as the last component, never a
//! protected path, never the state directory, never a tree holding a
//! control file: `config.control_file_exposed`) and identified by
//! `(dev, ino)`.

use std::os::fd::AsFd;
use std::path::PathBuf;

use airlock_core::broker::BrokerRoot;
use airlock_core::{Ceiling, CeilingMode, ReasonCode, Refusal};
use airlock_fsproto::{check_root_name, Rights, MAX_ROOTS};
use airlock_hostfs::Dir;

use crate::{ceilings, Runtime};

/// One requested root, before it is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootGrant {
    /// The name the worker uses.
    pub name: String,
    /// The host directory.
    pub path: PathBuf,
    /// What it grants.
    pub rights: Rights,
}

impl RootGrant {
    /// Parses `NAME=PATH:RIGHTS` (PATH may itself hold `=` or `:`; the name
    /// ends at the first `=`, the rights start after the last `:`).
    pub fn parse(spec: &str) -> Result<RootGrant, Refusal> {
        let bad = |why: String| Refusal::new(ReasonCode::BrokerRootInvalid, format!("--root {spec:?}: {why}"));
        let (name, rest) = spec.split_once('=').ok_or_else(|| bad("expected NAME=PATH:RIGHTS".into()))?;
        let (path, rights) = rest.rsplit_once(':').ok_or_else(|| bad("expected NAME=PATH:RIGHTS".into()))?;
        check_root_name(name).map_err(|e| bad(e.0))?;
        let rights = Rights::parse(rights).map_err(|e| bad(e.0))?;
        if path.is_empty() || path.contains('\0') {
            return Err(bad("the path is empty or holds NUL".into()));
        }
        Ok(RootGrant { name: name.to_owned(), path: PathBuf::from(path), rights })
    }

    /// A manifest's `NAME:RIGHTS`, the path taken from `[broker.roots]`.
    pub fn from_manifest(entry: &str, runtime: &Runtime) -> Result<RootGrant, Refusal> {
        let bad = |why: String| Refusal::new(ReasonCode::BrokerRootInvalid, format!("[broker] roots {entry:?}: {why}"));
        let (name, rights) = entry.split_once(':').ok_or_else(|| bad("expected NAME:RIGHTS".into()))?;
        check_root_name(name).map_err(|e| bad(e.0))?;
        let rights = Rights::parse(rights).map_err(|e| bad(e.0))?;
        let path = runtime
            .config()
            .broker
            .roots
            .get(name)
            .ok_or_else(|| bad(format!("airlock.toml has no [broker.roots] {name} = \"PATH\" for this name")))?;
        Ok(RootGrant { name: name.to_owned(), path: path.clone(), rights })
    }
}

/// Checks a set of grants: 1 to 64, names distinct.
pub(crate) fn check_grants(grants: &[RootGrant]) -> Result<(), Refusal> {
    if grants.is_empty() || grants.len() > MAX_ROOTS {
        return Err(Refusal::new(
            ReasonCode::BrokerRootInvalid,
            format!("{} roots granted; a submission holds 1 to {MAX_ROOTS}", grants.len()),
        ));
    }
    for (i, g) in grants.iter().enumerate() {
        if grants[..i].iter().any(|o| o.name == g.name) {
            return Err(Refusal::new(ReasonCode::BrokerRootInvalid, format!("root {:?} is granted twice", g.name)));
        }
    }
    Ok(())
}

/// A root opened for a submission.
#[derive(Debug)]
pub(crate) struct OpenRoot {
    /// The grant.
    pub grant: RootGrant,
    /// The directory handle (the broker gets a duplicate).
    pub dir: Dir,
    /// Where the handle leads, as the kernel reports it.
    pub real: PathBuf,
}

impl OpenRoot {
    /// The descriptor's view.
    pub fn describe(&self) -> BrokerRoot {
        let (dev, ino) = self.dir.dev_ino();
        BrokerRoot {
            name: self.grant.name.clone(),
            path: self.real.display().to_string(),
            rights: self.grant.rights.to_string(),
            dev: dev.to_string(),
            ino: ino.to_string(),
        }
    }
}

impl Runtime {
    /// Opens every root as a ceiling is opened.
    pub(crate) fn open_roots(&self, grants: &[RootGrant]) -> Result<Vec<OpenRoot>, Refusal> {
        check_grants(grants)?;
        grants
            .iter()
            .map(|grant| {
                let spec = format!("{}={}:{}", grant.name, grant.path.display(), grant.rights);
                let ceiling = Ceiling { host: grant.path.clone(), virtual_root: None, mode: CeilingMode::Ro, spec };
                let dir = ceilings::open_as("root", self.authority(), &ceiling, self.protected()).map_err(|r| {
                    let code = match r.code {
                        ReasonCode::ControlFileExposed => r.code,
                        _ => ReasonCode::BrokerRootUnusable,
                    };
                    Refusal::new(code, r.message)
                })?;
                let reads = grant.rights.read || grant.rights.list;
                let overlap = reads.then(|| ceilings::create_only_overlap(self.authority(), self.config(), &dir));
                if let Some(c) = overlap.flatten() {
                    return Err(ceilings::create_only(c, &format!("root {:?} (rights {})", grant.name, grant.rights)));
                }
                let real = self.authority().path_of(dir.as_fd()).unwrap_or_else(|| grant.path.clone());
                Ok(OpenRoot { grant: grant.clone(), dir, real })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_grants() {
        let g = RootGrant::parse("out=/srv/a=b:c:wl").unwrap();
        assert_eq!((g.name.as_str(), g.path.to_str().unwrap()), ("out", "/srv/a=b:c"));
        assert_eq!(g.rights, Rights { read: false, write: true, list: true });
        for bad in ["data", "data=/x", "Data=/x:r", "data=/x:", "data=/x:rx", "data=:r", "=/x:r"] {
            assert_eq!(RootGrant::parse(bad).unwrap_err().code, ReasonCode::BrokerRootInvalid, "{bad}");
        }
        let two = [RootGrant::parse("a=/x:r").unwrap(), RootGrant::parse("a=/y:w").unwrap()];
        assert!(check_grants(&two).is_err());
        assert!(check_grants(&[]).is_err());
        let many: Vec<RootGrant> = (0..65).map(|i| RootGrant::parse(&format!("r{i}=/x:r")).unwrap()).collect();
        assert!(check_grants(&many).is_err());
        check_grants(&many[..64]).unwrap();
    }
}
