//! The worker's Landlock ruleset: a pure plan of (path, grant) pairs, and
//! its enforcement at the best ABI the kernel offers.
//!
//! Every file-system right of that ABI is handled, so anything not granted
//! below is denied: image directories may be read and executed, `/tmp` is
//! the worker's, `/proc` and `/etc` are readable, three devices are usable,
//! each input may only be read, and the output may be read, written and
//! truncated, but not removed or replaced. TCP bind/connect (ABI 4) are
//! handled with no rule (denied), and abstract unix sockets and signals are
//! scoped to the sandbox (ABI 6). A `NotEnforced` status is an error.
#![forbid(unsafe_code)]

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, RestrictionStatus, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

use crate::error::SandboxError;

/// What a rule grants, by role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    /// An image directory: read files, list, execute.
    Image,
    /// `/etc` and `/proc`: read files and list.
    ReadOnly,
    /// `/tmp`: everything.
    Scratch,
    /// `/dev/null`, `/dev/zero`, `/dev/urandom`: read, write, device ioctls.
    Device,
    /// The working directory, a provided file's directory: list only.
    ListOnly,
    /// An input or a provided data file: read the file.
    Input,
    /// The output: read, write, truncate the file.
    Output,
    /// The bound program or a provided executable: read and execute the file.
    Program,
    /// The directory of an output the worker creates: list, make regular
    /// files, read, write, truncate (never remove, link or rename away).
    OutputDir,
}

/// One planned rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlannedRule {
    /// Path inside the new root.
    pub path: String,
    /// What it grants.
    pub grant: Grant,
}

/// The rules for a worker. Pure.
///
/// `image_dirs` are the image entries that were bound as directories
/// (symlinked entries need no rule: their targets are image directories).
/// `provided` are the provided files' paths and whether each is executable.
pub(crate) fn plan(
    image_dirs: &[String],
    working_dir: &str,
    inputs: &[&str],
    output: Option<(&str, bool)>,
    program: bool,
    provided: &[(&str, bool)],
) -> Vec<PlannedRule> {
    let mut rules = Vec::new();
    let mut push = |path: String, grant| rules.push(PlannedRule { path, grant });
    for d in image_dirs {
        push(d.clone(), Grant::Image);
    }
    push("/etc".into(), Grant::ReadOnly);
    push("/proc".into(), Grant::ReadOnly);
    push("/tmp".into(), Grant::Scratch);
    for dev in crate::mounts::DEVICES {
        push(format!("/dev/{dev}"), Grant::Device);
    }
    push(working_dir.to_string(), Grant::ListOnly);
    for i in inputs {
        push(format!("{working_dir}/{i}"), Grant::Input);
    }
    match output {
        Some((o, false)) => push(format!("{working_dir}/{o}"), Grant::Output),
        Some((o, true)) => {
            let path = format!("{working_dir}/{o}");
            let parent = path.rsplit_once('/').map_or(working_dir.to_string(), |(p, _)| p.to_string());
            push(parent, Grant::OutputDir)
        }
        None => {}
    }
    if program {
        push(crate::spec::PROGRAM_PATH.to_string(), Grant::Program);
    }
    let mut dirs: Vec<&str> = Vec::new();
    for &(path, executable) in provided {
        push(path.to_string(), if executable { Grant::Program } else { Grant::Input });
        let dir = path.rsplit_once('/').map_or("/", |(d, _)| d);
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    for dir in dirs {
        push(dir.to_string(), Grant::ListOnly);
    }
    rules
}

/// The rights of a grant at `abi` (rights the ABI lacks are dropped).
pub(crate) fn access(grant: Grant, abi: ABI) -> BitFlags<AccessFs> {
    let all = AccessFs::from_all(abi);
    let want: BitFlags<AccessFs> = match grant {
        Grant::Image => AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute,
        Grant::ReadOnly => AccessFs::ReadFile | AccessFs::ReadDir,
        Grant::Scratch => all,
        Grant::Device => AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev,
        Grant::ListOnly => AccessFs::ReadDir.into(),
        Grant::Input => AccessFs::ReadFile.into(),
        Grant::Output => AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate,
        Grant::Program => AccessFs::ReadFile | AccessFs::Execute,
        Grant::OutputDir => {
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::ReadDir | AccessFs::MakeReg
        }
    };
    want & all
}

/// The crate's ABI value for the kernel's Landlock version (capped at the
/// newest the crate knows).
pub(crate) fn abi_of(version: i32) -> ABI {
    match version {
        i32::MIN..=0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        7 => ABI::V7,
        8 => ABI::V8,
        9 => ABI::V9,
        _ => ABI::V10,
    }
}

/// Enforces `rules` on the calling thread (inherited by its `execve`).
/// A ruleset at the kernel's best ABI that handles every file-system right,
/// TCP bind and connect (ABI 4) and scopes signals and abstract unix
/// sockets (ABI 6), with no rule yet: whatever the caller does not grant is
/// denied. Returns it with the kernel's ABI version and the crate's ABI.
pub(crate) fn deny_all_ruleset() -> Result<(RulesetCreated, i32, ABI), SandboxError> {
    let version = crate::sys::landlock_abi_version()
        .map_err(|e| SandboxError::Landlock(format!("landlock_create_ruleset(NULL, 0, VERSION): {e}")))?;
    let abi = abi_of(version);
    if abi == ABI::Unsupported {
        return Err(SandboxError::Landlock(format!("kernel Landlock ABI {version} is unsupported")));
    }
    let err = |what: &str, e: &dyn std::fmt::Display| SandboxError::Landlock(format!("{what}: {e}"));
    let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(abi)).map_err(|e| err("handle fs", &e))?;
    if version >= 4 {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi)).map_err(|e| err("handle net", &e))?;
    }
    if version >= 6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(|e| err("scope", &e))?;
    }
    let created = ruleset.create().map_err(|e| err("landlock_create_ruleset", &e))?;
    Ok((created, version, abi))
}

/// Returns the ABI version enforced and `"fully"` or `"partially"`.
pub(crate) fn enforce(rules: &[PlannedRule]) -> Result<(i32, &'static str), SandboxError> {
    let (mut created, version, abi) = deny_all_ruleset()?;
    let err = |what: &str, e: &dyn std::fmt::Display| SandboxError::Landlock(format!("{what}: {e}"));
    for r in rules {
        let fd = PathFd::new(&r.path).map_err(|e| err(&format!("open({:?}, O_PATH)", r.path), &e))?;
        created = created
            .add_rule(PathBeneath::new(fd, access(r.grant, abi)))
            .map_err(|e| err(&format!("landlock_add_rule({:?}, {:?})", r.path, r.grant), &e))?;
    }
    let status: RestrictionStatus = created.restrict_self().map_err(|e| err("landlock_restrict_self", &e))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok((version, "fully")),
        RulesetStatus::PartiallyEnforced => Ok((version, "partially")),
        RulesetStatus::NotEnforced => Err(SandboxError::Landlock("the kernel did not enforce the ruleset".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_grants_each_file_its_role_only() {
        let provided = [("/.airlock/bin/airlock-fs", true), ("/.airlock/bin/x", true), ("/.airlock/py/m.py", false)];
        let rules =
            plan(&["/usr".into()], "/workspace", &["data/in.txt"], Some(("out/o.json", false)), true, &provided);
        let find = |p: &str| rules.iter().find(|r| r.path == p).map(|r| r.grant);
        assert_eq!(find("/usr"), Some(Grant::Image));
        assert_eq!(find("/workspace"), Some(Grant::ListOnly));
        assert_eq!(find("/workspace/data/in.txt"), Some(Grant::Input));
        assert_eq!(find("/workspace/out/o.json"), Some(Grant::Output));
        assert_eq!(find("/tmp"), Some(Grant::Scratch));
        assert_eq!(find("/.airlock/program"), Some(Grant::Program));
        assert!(!plan(&[], "/workspace", &[], None, false, &[]).iter().any(|r| r.grant == Grant::Program));
        assert_eq!(find("/.airlock/bin/airlock-fs"), Some(Grant::Program));
        assert_eq!(find("/.airlock/py/m.py"), Some(Grant::Input));
        assert_eq!(find("/.airlock/bin"), Some(Grant::ListOnly));
        assert_eq!(find("/.airlock/py"), Some(Grant::ListOnly));
        assert_eq!(rules.iter().filter(|r| r.path == "/.airlock/bin").count(), 1);
        assert_eq!(find("/.airlock"), None, "only a provided file's own directory is listable");
        assert_eq!(find("/dev/null"), Some(Grant::Device));
        assert_eq!(find("/"), None, "the root itself is never granted");
    }

    #[test]
    fn inputs_cannot_be_written_and_outputs_cannot_be_removed() {
        for abi in [ABI::V1, ABI::V3, ABI::V7] {
            let input = access(Grant::Input, abi);
            assert!(input.contains(AccessFs::ReadFile));
            assert!(!input.intersects(AccessFs::WriteFile | AccessFs::Truncate | AccessFs::RemoveFile));
            let output = access(Grant::Output, abi);
            assert!(output.contains(AccessFs::WriteFile));
            assert!(!output.intersects(AccessFs::RemoveFile | AccessFs::MakeReg | AccessFs::Refer));
            let list = access(Grant::ListOnly, abi);
            assert!(!list.intersects(AccessFs::MakeReg | AccessFs::MakeSym | AccessFs::RemoveFile));
        }
        assert!(!access(Grant::Output, ABI::V1).contains(AccessFs::Truncate), "V1 has no truncate right");
        assert!(access(Grant::Output, ABI::V3).contains(AccessFs::Truncate));
    }

    #[test]
    fn abi_mapping_caps_and_floors() {
        assert_eq!(abi_of(0), ABI::Unsupported);
        assert_eq!(abi_of(-1), ABI::Unsupported);
        assert_eq!(abi_of(7), ABI::V7);
        assert_eq!(abi_of(99), ABI::V10);
    }
}
