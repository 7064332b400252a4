//! Which worker tiers an operator allows and how each is reached
//! (`[sandbox] tiers`, `[sandbox.gvisor]`, `[sandbox.docker]`,
//! `[sandbox.microvm]`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::reason::{ReasonCode, Refusal};

/// The worker tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Namespaces, Landlock and seccomp on this host; no daemon.
    Native,
    /// gVisor `runsc`.
    Gvisor,
    /// A Docker engine.
    Docker,
    /// A micro virtual machine.
    Microvm,
    /// A worker on another host, reached through the NATS cluster of
    /// `[cluster]`.
    Cluster,
}

/// The tiers, their settings and the allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierSettings {
    /// Tiers a call may run on (`[sandbox] tiers`; default: every local
    /// tier, and `cluster` when `[cluster]` is configured).
    pub allowed: Vec<Tier>,
    /// `[sandbox.gvisor]`.
    pub gvisor: GvisorConfig,
    /// `[sandbox.docker]`.
    pub docker: DockerConfig,
    /// `[sandbox.microvm]`.
    pub microvm: MicrovmConfig,
}

/// The microVM tier's VMM (`[sandbox.microvm] vmm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VmmChoice {
    /// QEMU's `microvm` machine.
    #[default]
    Qemu,
    /// Firecracker (KVM only; needs `firecracker` and an ELF `vmlinux`).
    Firecracker,
}

/// The microVM tier's accelerator (`[sandbox.microvm] accel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AccelChoice {
    /// KVM if a guest boots with it here, else TCG.
    #[default]
    Auto,
    /// KVM only.
    Kvm,
    /// QEMU's software emulation.
    Tcg,
}

/// `[sandbox.microvm]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MicrovmConfig {
    /// The VMM.
    pub vmm: VmmChoice,
    /// The QEMU binary (absolute); `None`: `/usr/bin/qemu-system-x86_64`.
    pub qemu: Option<PathBuf>,
    /// The Firecracker binary (absolute); `None`:
    /// `/usr/local/bin/firecracker`.
    pub firecracker: Option<PathBuf>,
    /// Firecracker's jailer (absolute; airlock must run as root to use it);
    /// `None`: Firecracker runs in airlock's own namespaces.
    pub jailer: Option<PathBuf>,
    /// The guest kernel (absolute); `None`: the tier is not configured.
    pub kernel: Option<PathBuf>,
    /// The initramfs from `scripts/microvm-build.sh` (absolute); `None`:
    /// the tier is not configured.
    pub initramfs: Option<PathBuf>,
    /// Guest RAM in MiB (default 512).
    pub memory_mib: u32,
    /// Virtual CPUs (default 1).
    pub vcpus: u32,
    /// The accelerator (default `auto`).
    pub accel: AccelChoice,
    /// Milliseconds the guest may take to answer after the VM starts
    /// (default 30000).
    pub boot_timeout_ms: u64,
}

impl Default for MicrovmConfig {
    fn default() -> Self {
        MicrovmConfig {
            vmm: VmmChoice::Qemu,
            qemu: None,
            firecracker: None,
            jailer: None,
            kernel: None,
            initramfs: None,
            memory_mib: 512,
            vcpus: 1,
            accel: AccelChoice::Auto,
            boot_timeout_ms: 30_000,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMicrovm {
    #[serde(default)]
    vmm: VmmChoice,
    qemu: Option<String>,
    firecracker: Option<String>,
    jailer: Option<String>,
    kernel: Option<String>,
    initramfs: Option<String>,
    memory_mib: Option<u32>,
    vcpus: Option<u32>,
    #[serde(default)]
    accel: AccelChoice,
    boot_timeout_ms: Option<u64>,
}

/// gVisor's `runsc` platform (`[sandbox.gvisor] platform`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GvisorPlatformChoice {
    /// `systrap` where the installed runsc has it, else `ptrace`.
    #[default]
    Auto,
    /// Seccomp-trap based (runsc 2023 and later).
    Systrap,
    /// ptrace based (every runsc; Debian 12's only working one).
    Ptrace,
    /// KVM based (needs a working `/dev/kvm`).
    Kvm,
}

/// `[sandbox.gvisor]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GvisorConfig {
    /// The `runsc` binary (absolute); `None`: the first of
    /// `/usr/local/bin/runsc`, `/usr/bin/runsc`, `/usr/sbin/runsc` that exists.
    pub runsc: Option<PathBuf>,
    /// The platform.
    pub platform: GvisorPlatformChoice,
}

/// `[sandbox.docker]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DockerConfig {
    /// The engine's Unix socket (absolute); `None`: `DOCKER_HOST` if it is a
    /// `unix://` address, else `/var/run/docker.sock`.
    pub socket: Option<PathBuf>,
    /// The local image workers run in (airlock never pulls); `None`: the
    /// docker tier is not configured.
    pub image: Option<String>,
    /// The engine's OCI runtime for airlock's containers (`runsc` for
    /// Docker+gVisor); `None`: the engine's default.
    pub runtime: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGvisor {
    runsc: Option<String>,
    #[serde(default)]
    platform: GvisorPlatformChoice,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDocker {
    socket: Option<String>,
    image: Option<String>,
    runtime: Option<String>,
}

/// Every tier of this host, in the order `doctor` reports them.
pub const ALL_TIERS: [Tier; 4] = [Tier::Native, Tier::Gvisor, Tier::Docker, Tier::Microvm];
/// Every tier a call can name: this host's, then `cluster` (another
/// host's, through `[cluster]`).
pub const EVERY_TIER: [Tier; 5] = [Tier::Native, Tier::Gvisor, Tier::Docker, Tier::Microvm, Tier::Cluster];

impl TierSettings {
    /// Checks the raw sections: `default` must be allowed, paths absolute,
    /// names plain.
    pub(crate) fn check(
        default: Tier,
        allowed: Option<Vec<Tier>>,
        cluster: bool,
        gvisor: RawGvisor,
        docker: RawDocker,
    ) -> Result<TierSettings, Refusal> {
        let bad = |msg: String| Refusal::new(ReasonCode::ConfigInvalid, msg);
        let allowed = allowed.unwrap_or_else(|| {
            let mut every = ALL_TIERS.to_vec();
            if cluster {
                every.push(Tier::Cluster);
            }
            every
        });
        if allowed.contains(&Tier::Cluster) && !cluster {
            return Err(bad("[sandbox] tiers names \"cluster\", but there is no [cluster] section".into()));
        }
        if allowed.is_empty() {
            return Err(bad("[sandbox] tiers is empty: allow at least the default tier".into()));
        }
        if !allowed.contains(&default) {
            return Err(bad(format!(
                "[sandbox] tier = {:?} is not in [sandbox] tiers = {:?}",
                default.as_str(),
                allowed.iter().map(|t| t.as_str()).collect::<Vec<_>>()
            )));
        }
        let absolute = |key: &str, value: Option<String>| -> Result<Option<PathBuf>, Refusal> {
            match value {
                Some(v) if !v.starts_with('/') => Err(bad(format!("{key} = {v:?} must be an absolute path"))),
                other => Ok(other.map(PathBuf::from)),
            }
        };
        let plain = |key: &str, value: &Option<String>| -> Result<(), Refusal> {
            match value {
                Some(v)
                    if v.is_empty()
                        || v.len() > 255
                        || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-:/@".contains(&b)) =>
                {
                    Err(bad(format!("{key} = {v:?} is not a plain name (letters, digits, . _ - : / @)")))
                }
                _ => Ok(()),
            }
        };
        plain("[sandbox.docker] image", &docker.image)?;
        plain("[sandbox.docker] runtime", &docker.runtime)?;
        Ok(TierSettings {
            allowed,
            gvisor: GvisorConfig {
                runsc: absolute("[sandbox.gvisor] runsc", gvisor.runsc)?,
                platform: gvisor.platform,
            },
            docker: DockerConfig {
                socket: absolute("[sandbox.docker] socket", docker.socket)?,
                image: docker.image,
                runtime: docker.runtime,
            },
            microvm: MicrovmConfig::default(),
        })
    }

    /// Adds `[sandbox.microvm]`: absolute paths, 64..=65536 MiB of RAM,
    /// 1..=64 vCPUs, a boot timeout of at least 1 ms, no TCG for Firecracker.
    pub(crate) fn with_microvm(mut self, raw: RawMicrovm) -> Result<TierSettings, Refusal> {
        let bad = |msg: String| Refusal::new(ReasonCode::ConfigInvalid, msg);
        let absolute = |key: &str, value: Option<String>| -> Result<Option<PathBuf>, Refusal> {
            match value {
                Some(v) if !v.starts_with('/') => {
                    Err(bad(format!("[sandbox.microvm] {key} = {v:?} must be an absolute path")))
                }
                other => Ok(other.map(PathBuf::from)),
            }
        };
        let d = MicrovmConfig::default();
        let memory_mib = raw.memory_mib.unwrap_or(d.memory_mib);
        if !(64..=65536).contains(&memory_mib) {
            return Err(bad(format!("[sandbox.microvm] memory_mib = {memory_mib} must be 64 to 65536")));
        }
        let vcpus = raw.vcpus.unwrap_or(d.vcpus);
        if !(1..=64).contains(&vcpus) {
            return Err(bad(format!("[sandbox.microvm] vcpus = {vcpus} must be 1 to 64")));
        }
        let boot_timeout_ms = raw.boot_timeout_ms.unwrap_or(d.boot_timeout_ms);
        if boot_timeout_ms == 0 {
            return Err(bad("[sandbox.microvm] boot_timeout_ms must be at least 1".into()));
        }
        if raw.vmm == VmmChoice::Firecracker && raw.accel == AccelChoice::Tcg {
            return Err(bad(
                "[sandbox.microvm] vmm = \"firecracker\" runs on KVM only: accel = \"tcg\" needs vmm = \"qemu\"".into(),
            ));
        }
        self.microvm = MicrovmConfig {
            vmm: raw.vmm,
            qemu: absolute("qemu", raw.qemu)?,
            firecracker: absolute("firecracker", raw.firecracker)?,
            jailer: absolute("jailer", raw.jailer)?,
            kernel: absolute("kernel", raw.kernel)?,
            initramfs: absolute("initramfs", raw.initramfs)?,
            memory_mib,
            vcpus,
            accel: raw.accel,
            boot_timeout_ms,
        };
        Ok(self)
    }

    /// The name a call's descriptor records for `tier` (so Cedar can require
    /// one): `native`, `gvisor`, `docker`, `docker+runsc` (Docker with the
    /// gVisor runtime), `microvm`.
    pub fn descriptor_name(&self, tier: Tier) -> String {
        match (tier, self.docker.runtime.as_deref()) {
            (Tier::Docker, Some(runtime)) => format!("docker+{runtime}"),
            _ => tier.as_str().to_owned(),
        }
    }
}

impl Default for TierSettings {
    fn default() -> Self {
        TierSettings {
            allowed: ALL_TIERS.to_vec(),
            gvisor: GvisorConfig::default(),
            docker: DockerConfig::default(),
            microvm: MicrovmConfig::default(),
        }
    }
}

impl Tier {
    /// The tier's configured name.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Native => "native",
            Tier::Gvisor => "gvisor",
            Tier::Docker => "docker",
            Tier::Microvm => "microvm",
            Tier::Cluster => "cluster",
        }
    }

    /// Parses a configured name.
    pub fn parse(name: &str) -> Option<Tier> {
        EVERY_TIER.into_iter().find(|t| t.as_str() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_tier_must_be_allowed() {
        let err = TierSettings::check(
            Tier::Gvisor,
            Some(vec![Tier::Native]),
            false,
            RawGvisor::default(),
            RawDocker::default(),
        )
        .unwrap_err();
        assert!(err.message.contains("not in [sandbox] tiers"), "{}", err.message);
    }

    #[test]
    fn docker_with_runsc_is_named_for_policy() {
        let docker = RawDocker { image: Some("airlock-base:test".into()), runtime: Some("runsc".into()), socket: None };
        let s = TierSettings::check(Tier::Native, None, false, RawGvisor::default(), docker).unwrap();
        assert_eq!(s.descriptor_name(Tier::Docker), "docker+runsc");
        assert_eq!(s.descriptor_name(Tier::Gvisor), "gvisor");
    }

    #[test]
    fn firecracker_paths_are_absolute_and_it_has_no_tcg() {
        let raw = |firecracker: &str, accel| RawMicrovm {
            vmm: VmmChoice::Firecracker,
            firecracker: Some(firecracker.into()),
            accel,
            ..RawMicrovm::default()
        };
        let err = TierSettings::default().with_microvm(raw("bin/firecracker", AccelChoice::Auto)).unwrap_err();
        assert!(err.message.contains("firecracker = \"bin/firecracker\" must be an absolute path"), "{}", err.message);
        let err = TierSettings::default().with_microvm(raw("/opt/firecracker", AccelChoice::Tcg)).unwrap_err();
        assert!(err.message.contains("KVM only"), "{}", err.message);
        let ok = TierSettings::default().with_microvm(raw("/opt/firecracker", AccelChoice::Kvm)).unwrap();
        assert_eq!(ok.microvm.firecracker.as_deref(), Some(std::path::Path::new("/opt/firecracker")));
    }

    #[test]
    fn relative_paths_and_odd_names_are_refused() {
        let g = RawGvisor { runsc: Some("bin/runsc".into()), platform: GvisorPlatformChoice::Auto };
        assert!(TierSettings::check(Tier::Native, None, false, g, RawDocker::default()).is_err());
        let d = RawDocker { image: Some("img;rm -rf".into()), ..RawDocker::default() };
        assert!(TierSettings::check(Tier::Native, None, false, RawGvisor::default(), d).is_err());
    }
}
