//! What `airlock doctor` and `staging gc` ask of the gVisor tier: whether it
//! runs here ([`probe`]), what a dead airlock left ([`leftovers`]) and
//! removing one such leftover ([`reap`]).
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::runsc::{self, Runsc};
use super::{GvisorPlatform, GvisorSettings, GvisorTier};
use crate::error::SandboxError;
use crate::parent::KILL_GRACE;
use crate::spec::WorkerSpec;
use crate::tier_report::{Leftover, TierReport};
use crate::worker::{Tier, Worker};

/// The file in a call directory that holds the call's id, when the spec
/// gave one.
pub(crate) const CALL_ID_FILE: &str = "call-id";

/// How long `runsc --version` / `runsc flags` may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the probe's trivial worker may take (a platform that hangs,
/// such as KVM on some hosts, fails here instead of blocking `doctor`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// `systrap` when this runsc knows it (its `flags` output names it for
/// `--platform`), else `ptrace`. Asked once per binary and process, and
/// remembered in `state_dir` for later processes (each `airlock run` is
/// one) while the binary's identity is the same.
pub(crate) fn auto_platform(bin: &Path, state_dir: &Path) -> Result<&'static str, SandboxError> {
    static SEEN: Mutex<Vec<(PathBuf, &'static str)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, p)) = seen.iter().find(|(b, _)| b == bin) {
        return Ok(p);
    }
    let cache = state_dir.join(PLATFORM_CACHE);
    let identity = binary_identity(bin);
    let cached = identity.as_ref().and_then(|id| {
        let text = std::fs::read_to_string(&cache).ok()?;
        let (key, platform) = text.trim_end().rsplit_once(' ')?;
        (key == id).then(|| ["systrap", "ptrace"].into_iter().find(|p| *p == platform)).flatten()
    });
    let platform = match cached {
        Some(p) => p,
        None => {
            let p = query_platform(bin)?;
            if let Some(id) = identity {
                // Best effort: a missed write only costs the next process a query.
                let tmp = state_dir.join(format!("{PLATFORM_CACHE}.{}", std::process::id()));
                if std::fs::write(&tmp, format!("{id} {p}\n")).is_ok() && std::fs::rename(&tmp, &cache).is_err() {
                    let _ = std::fs::remove_file(&tmp);
                }
            }
            p
        }
    };
    seen.push((bin.to_path_buf(), platform));
    Ok(platform)
}

/// The file in the tier's state dir that remembers the platform query.
const PLATFORM_CACHE: &str = "platform";

/// What identifies a runsc build on disk: path, device, inode, size and
/// modification time (a replaced or upgraded binary is asked again).
fn binary_identity(bin: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(bin).ok()?;
    Some(format!("{}:{}:{}:{}:{}.{}", bin.display(), m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// Asks runsc which platforms it has (once per binary and process).
fn query_platform(bin: &Path) -> Result<&'static str, SandboxError> {
    let mut cmd = std::process::Command::new(bin);
    cmd.env_clear().arg("flags");
    let out = runsc::output_within(cmd, QUERY_TIMEOUT)
        .map_err(|e| SandboxError::Unavailable(format!("cannot run {} flags: {e}", bin.display())))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Ok(platform_from_flags(&text))
}

/// `systrap` when the help of `-platform` in `runsc flags` names it.
fn platform_from_flags(flags: &str) -> &'static str {
    let platform_help = flags.split("-platform ").nth(1).and_then(|rest| rest.lines().nth(1)).unwrap_or("");
    if platform_help.contains("systrap") {
        "systrap"
    } else {
        "ptrace"
    }
}

/// Whether runsc can make a memory cgroup for a sandbox here: a writable
/// cgroup v1 `memory` hierarchy, or a cgroup v2 root that delegates `memory`.
pub(crate) fn cgroup_usable() -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("not root: runsc makes no cgroup for a rootless sandbox".into());
    }
    let writable = |p: &str| rustix::fs::access(p, rustix::fs::Access::WRITE_OK).is_ok();
    let v1 = "/sys/fs/cgroup/memory";
    if Path::new(v1).is_dir() {
        return if writable(v1) { Ok(()) } else { Err(format!("{v1} is not writable")) };
    }
    let controllers = std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control").unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "memory") && writable("/sys/fs/cgroup") {
        Ok(())
    } else {
        Err("no writable cgroup v1 memory hierarchy and no cgroup v2 root delegating memory".into())
    }
}

/// Whether the tier can run a worker here, and why not (with a fix).
pub fn probe(settings: &GvisorSettings) -> TierReport {
    let mut report = TierReport::not_ready("gvisor", "");
    let mut cmd = std::process::Command::new(&settings.runsc);
    cmd.env_clear().arg("--version");
    match runsc::output_within(cmd, QUERY_TIMEOUT) {
        Ok(out) if out.status.success() => {
            report.found = true;
            report.version = String::from_utf8_lossy(&out.stdout).lines().next().map(|l| l.trim().to_string());
        }
        Ok(out) => {
            report.why = Some(format!(
                "{} --version failed ({}): {}",
                settings.runsc.display(),
                out.status,
                runsc::tail(&out.stderr)
            ));
            return report;
        }
        Err(e) => {
            report.why = Some(format!(
                "{} cannot be run ({e}); install gVisor (Debian: `apt-get install runsc`) or set \
                 [sandbox.gvisor] runsc to its path",
                settings.runsc.display()
            ));
            return report;
        }
    }
    let runsc = match settings.resolve() {
        Ok(r) => r,
        Err(e) => {
            report.why = Some(e.to_string());
            return report;
        }
    };
    report.platform =
        Some(if runsc.rootless { format!("{} (rootless)", runsc.platform) } else { runsc.platform.into() });
    let mut spec = WorkerSpec::new(["true"]);
    spec.timeout = PROBE_TIMEOUT;
    spec.limits.memory_bytes = None;
    let outcome = GvisorTier::new(settings.clone()).start(spec).and_then(|w| w.wait());
    let fix = match (settings.platform, runsc.rootless) {
        (GvisorPlatform::Kvm, _) => "; try platform = \"ptrace\" (or \"auto\")",
        (_, true) => "; rootless runsc needs unprivileged user namespaces, or run airlock as root",
        _ => "",
    };
    match outcome {
        Ok(o) if o.exit.success() && o.cleanup_confirmed && !o.timed_out => {
            report.ready = true;
            report.why = None;
        }
        Ok(o) => {
            report.why = Some(format!(
                "a trivial worker (`true`) did not run cleanly on platform {}: exit {:?}, timed out {}, cleanup \
                 confirmed {}, stderr {:?}{fix}",
                runsc.platform,
                o.exit,
                o.timed_out,
                o.cleanup_confirmed,
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
        Err(e) => report.why = Some(format!("a trivial worker (`true`) failed to start: {e}{fix}")),
    }
    report
}

fn calls_listing(settings: &GvisorSettings) -> Result<Vec<String>, SandboxError> {
    crate::call_dir::list_call_dirs(&settings.calls_dir())
}

fn driver(settings: &GvisorSettings) -> Runsc {
    // Listing, killing and deleting do not depend on the platform.
    Runsc {
        bin: settings.runsc.clone(),
        root: settings.runsc_root(),
        platform: "ptrace",
        rootless: !rustix::process::geteuid().is_root(),
    }
}

/// Every container in the tier's runsc root and every call directory, with
/// the call id each belongs to where it is recorded. Live calls are listed
/// too: the caller decides which are dead.
pub fn leftovers(settings: &GvisorSettings) -> Result<Vec<Leftover>, SandboxError> {
    let mut ids = driver(settings).list()?;
    ids.extend(calls_listing(settings)?);
    ids.sort();
    ids.dedup();
    Ok(ids
        .into_iter()
        .map(|id| {
            let call_id = std::fs::read_to_string(settings.calls_dir().join(&id).join(CALL_ID_FILE))
                .ok()
                .filter(|c| crate::call_dir::is_safe_name(c));
            Leftover { id, call_id }
        })
        .collect())
}

/// Removes one leftover: kills and force-deletes its container, confirms
/// runsc no longer knows it, kills any of its host processes still alive
/// (`runsc run`, gofer, sandbox, stubs), removes its call directory and log.
pub fn reap(settings: &GvisorSettings, leftover: &Leftover) -> Result<(), SandboxError> {
    let id = &leftover.id;
    if !crate::call_dir::is_safe_name(id) {
        return Err(SandboxError::InvalidSpec(format!("{id:?} is not a gvisor call name")));
    }
    let runsc = driver(settings);
    let bundle = settings.calls_dir().join(id);
    let known = runsc.list()?.iter().any(|c| c == id);
    if known {
        runsc.kill(id);
    }
    let left = runsc::kill_processes(&runsc.root, &bundle, KILL_GRACE);
    if known {
        runsc.delete(id)?;
        if runsc.exists(id)? {
            return Err(SandboxError::Unavailable(format!("runsc still lists container {id} after delete --force")));
        }
    }
    if !left.is_empty() {
        return Err(SandboxError::Unavailable(format!("processes {left:?} of container {id} survived SIGKILL")));
    }
    super::remove_cgroup(id).map_err(SandboxError::Unavailable)?;
    crate::call_dir::remove_call_dir(&bundle)?;
    let _ = std::fs::remove_file(settings.logs_dir().join(format!("{id}.log")));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::platform_from_flags;

    #[test]
    fn auto_picks_systrap_only_where_runsc_has_it() {
        let old = "  -platform string\n    \tspecifies which platform to use: ptrace (default), kvm. (default \"ptrace\")\n  \
                   -platform_device_path string\n    \tpath to a platform-specific device file (systrap)";
        assert_eq!(platform_from_flags(old), "ptrace");
        let new = "  -platform string\n    \tspecifies which platform to use: systrap (default), ptrace, kvm.\n";
        assert_eq!(platform_from_flags(new), "systrap");
        assert_eq!(platform_from_flags(""), "ptrace");
    }
}
