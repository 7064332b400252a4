//! What `airlock doctor` and `staging gc` ask of the microVM tier: the
//! accelerator (`auto`: KVM if a guest boots with it, else TCG, remembered
//! in the state dir), whether the tier runs here ([`probe`]), what a dead
//! airlock left ([`leftovers`]) and removing one such leftover ([`reap`]).
#![forbid(unsafe_code)]

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use super::{qemu, Accel, MicrovmSettings, MicrovmTier, Vmm};
use crate::error::SandboxError;
use crate::parent::KILL_GRACE;
use crate::spec::WorkerSpec;
use crate::tier_report::{Leftover, TierReport};
use crate::worker::{Tier, Worker};

/// The file in a call directory that holds the call's id.
pub(crate) const CALL_ID_FILE: &str = "call-id";

/// The file in the tier's state dir that remembers the `auto` verdict.
const ACCEL_CACHE: &str = "accel";

/// How long a KVM probe boot may take (a stock guest that cannot boot on
/// this host's KVM, such as a PVM host's, hangs silently).
const KVM_PROBE_BOOT: Duration = Duration::from_secs(5);

/// How long the probe's trivial worker may run.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

fn identity(p: &Path) -> String {
    match std::fs::metadata(p) {
        Ok(m) => format!("{}:{}:{}:{}:{}", p.display(), m.dev(), m.ino(), m.size(), m.mtime()),
        Err(_) => format!("{}:missing", p.display()),
    }
}

/// The accelerator workers use, and why.
pub(crate) fn resolve_accel(s: &MicrovmSettings) -> Result<(Accel, String), SandboxError> {
    if s.vmm == Vmm::Firecracker {
        return Ok((Accel::Kvm, "Firecracker runs on KVM only".into()));
    }
    match s.accel {
        Accel::Kvm => return Ok((Accel::Kvm, "accel = \"kvm\" is configured".into())),
        Accel::Tcg => return Ok((Accel::Tcg, "accel = \"tcg\" is configured".into())),
        Accel::Auto => {}
    }
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        return Ok((Accel::Tcg, format!("auto: /dev/kvm cannot be opened ({e}), so TCG")));
    }
    let key = format!("{} {} {}", identity(&s.qemu), identity(&s.kernel), identity(&s.initramfs));
    let cache = s.state_dir.join(ACCEL_CACHE);
    if let Ok(text) = std::fs::read_to_string(&cache) {
        if let Some((k, verdict)) = text.trim_end().rsplit_once(' ') {
            if k == key {
                match verdict {
                    "kvm" => return Ok((Accel::Kvm, "auto: a guest booted with KVM here (remembered)".into())),
                    "tcg" => {
                        return Ok((Accel::Tcg, "auto: a guest did not boot with KVM here (remembered), so TCG".into()))
                    }
                    _ => {}
                }
            }
        }
    }
    let probe = MicrovmSettings { accel: Accel::Kvm, boot_timeout: KVM_PROBE_BOOT, ..s.clone() };
    let mut spec = WorkerSpec::new(["true"]);
    spec.timeout = Duration::from_secs(10);
    let booted = MicrovmTier::new(probe).start(spec).and_then(|w| w.wait());
    let (accel, why) = match booted {
        Ok(o) if o.exit.success() => (Accel::Kvm, "auto: a guest booted with KVM here".to_owned()),
        Ok(o) => (Accel::Tcg, format!("auto: a KVM guest ran `true` badly ({:?}), so TCG", o.exit)),
        Err(e) => (Accel::Tcg, format!("auto: a guest did not boot with KVM here ({}), so TCG", e.kind())),
    };
    let _ = std::fs::create_dir_all(&s.state_dir);
    let tmp = s.state_dir.join(format!("{ACCEL_CACHE}.{}", std::process::id()));
    if std::fs::write(&tmp, format!("{key} {}\n", accel.as_str())).is_ok() && std::fs::rename(&tmp, &cache).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    Ok((accel, why))
}

/// Whether the tier can run a worker here, and why not (with a fix).
pub fn probe(settings: &MicrovmSettings) -> TierReport {
    let mut report = TierReport::not_ready("microvm", "");
    let (vmm, install) = match settings.vmm {
        Vmm::Qemu => (
            &settings.qemu,
            "install QEMU (Debian: `apt-get install qemu-system-x86`) or set [sandbox.microvm] qemu to its path",
        ),
        Vmm::Firecracker => (
            &settings.firecracker,
            "install Firecracker (scripts/firecracker-fetch.sh DIR) and set [sandbox.microvm] firecracker to its path",
        ),
    };
    let mut cmd = std::process::Command::new(vmm);
    cmd.env_clear().arg("--version");
    match cmd.output() {
        Ok(out) if out.status.success() => {
            report.found = true;
            report.version = String::from_utf8_lossy(&out.stdout).lines().next().map(|l| l.trim().to_owned());
        }
        _ => {
            report.why = Some(format!("{} cannot be run; {install}", vmm.display()));
            return report;
        }
    }
    // A Firecracker guest that cannot boot here hangs silently: the probe
    // waits at most KVM_PROBE_BOOT for it.
    let settings = &match settings.vmm {
        Vmm::Firecracker => {
            MicrovmSettings { boot_timeout: settings.boot_timeout.min(KVM_PROBE_BOOT), ..settings.clone() }
        }
        Vmm::Qemu => settings.clone(),
    };
    let tier = MicrovmTier::new(settings.clone());
    if let Err(e) = tier.check() {
        report.why = Some(e.to_string());
        return report;
    }
    let accel = match tier.accel() {
        Ok((a, why)) => {
            report.platform = Some(format!("{} ({why})", a.as_str()));
            a
        }
        Err(e) => {
            report.why = Some(e.to_string());
            return report;
        }
    };
    let mut spec = WorkerSpec::new(["true"]);
    spec.timeout = PROBE_TIMEOUT;
    match tier.start(spec).and_then(|w| w.wait()) {
        Ok(o) if o.exit.success() && o.cleanup_confirmed && !o.timed_out => {
            report.ready = true;
            report.why = None;
        }
        Ok(o) => {
            report.why = Some(format!(
                "a trivial worker (`true`) did not run cleanly on {}: exit {:?}, timed out {}, cleanup confirmed {}",
                accel.as_str(),
                o.exit,
                o.timed_out,
                o.cleanup_confirmed
            ))
        }
        Err(e) => report.why = Some(format!("a trivial worker (`true`) failed to start on {}: {e}", accel.as_str())),
    }
    report
}

/// Every call directory of the tier, with the call id each belongs to.
/// Live calls are listed too: the caller decides which are dead.
pub fn leftovers(settings: &MicrovmSettings) -> Result<Vec<Leftover>, SandboxError> {
    let dir = settings.calls_dir();
    let mut ids = crate::call_dir::list_call_dirs(&dir)?;
    ids.sort();
    Ok(ids
        .into_iter()
        .map(|id| {
            let call_id = std::fs::read_to_string(dir.join(&id).join(CALL_ID_FILE))
                .ok()
                .filter(|c| crate::call_dir::is_safe_name(c));
            Leftover { id, call_id }
        })
        .collect())
}

/// Removes one leftover: kills its VMM process, confirms it gone, removes
/// its call directory.
pub fn reap(settings: &MicrovmSettings, leftover: &Leftover) -> Result<(), SandboxError> {
    let id = &leftover.id;
    if !crate::call_dir::is_safe_name(id) {
        return Err(SandboxError::InvalidSpec(format!("{id:?} is not a microvm call name")));
    }
    let dir = settings.calls_dir().join(id);
    let left = qemu::kill_processes(&dir, KILL_GRACE);
    if !left.is_empty() {
        return Err(SandboxError::Unavailable(format!("VMM processes {left:?} of call {id} survived SIGKILL")));
    }
    crate::call_dir::remove_call_dir(&dir)
}
