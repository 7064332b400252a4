//! The worker tiers as the configuration describes them: the tier that runs
//! a call (by the name its descriptor records), what `doctor` reports about
//! each, and what `staging gc` reaps of calls whose airlock died.

use std::path::{Path, PathBuf};

use airlock_core::config::{Config, Tier};
use airlock_core::reason::{ReasonCode, Refusal};
use airlock_core::tier_settings::{AccelChoice, GvisorPlatformChoice, VmmChoice, ALL_TIERS, EVERY_TIER};
use airlock_sandbox::{
    docker, gvisor, microvm, AnyTier, DockerSettings, GvisorPlatform, GvisorSettings, Leftover, MicrovmSettings,
    TierReport,
};
use serde::Serialize;

use crate::Runtime;

/// Where `runsc` is looked for when `[sandbox.gvisor] runsc` names none.
const RUNSC_PLACES: [&str; 3] = ["/usr/local/bin/runsc", "/usr/bin/runsc", "/usr/sbin/runsc"];

/// The gVisor tier's settings: runsc, platform, and its state under the
/// state dir (`STATE/tiers/gvisor`).
pub fn gvisor_settings(config: &Config) -> GvisorSettings {
    let runsc = config.tiers.gvisor.runsc.clone().unwrap_or_else(|| {
        RUNSC_PLACES.iter().map(PathBuf::from).find(|p| p.is_file()).unwrap_or_else(|| PathBuf::from(RUNSC_PLACES[1]))
    });
    let platform = match config.tiers.gvisor.platform {
        GvisorPlatformChoice::Auto => GvisorPlatform::Auto,
        GvisorPlatformChoice::Systrap => GvisorPlatform::Systrap,
        GvisorPlatformChoice::Ptrace => GvisorPlatform::Ptrace,
        GvisorPlatformChoice::Kvm => GvisorPlatform::Kvm,
    };
    GvisorSettings { runsc, platform, state_dir: tier_dir(config, Tier::Gvisor) }
}

/// The Docker tier's settings, or why it is not configured.
pub fn docker_settings(config: &Config) -> Result<DockerSettings, String> {
    let d = &config.tiers.docker;
    let image = d.image.clone().ok_or_else(|| {
        "[sandbox.docker] image is not set: name a local image (airlock never pulls; scripts/docker-image.sh \
         builds one offline)"
            .to_owned()
    })?;
    let socket = d.socket.clone().unwrap_or_else(|| {
        std::env::var("DOCKER_HOST")
            .ok()
            .and_then(|h| h.strip_prefix("unix://").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("/var/run/docker.sock"))
    });
    Ok(DockerSettings { socket, image, runtime: d.runtime.clone(), state_dir: tier_dir(config, Tier::Docker) })
}

/// The QEMU looked for when `[sandbox.microvm] qemu` names none.
const QEMU_DEFAULT: &str = "/usr/bin/qemu-system-x86_64";

/// The Firecracker looked for when `[sandbox.microvm] firecracker` names none.
const FIRECRACKER_DEFAULT: &str = "/usr/local/bin/firecracker";

/// The microVM tier's settings, or why it is not configured.
pub fn microvm_settings(config: &Config) -> Result<MicrovmSettings, String> {
    let m = &config.tiers.microvm;
    let missing = |key: &str| {
        format!(
            "[sandbox.microvm] {key} is not set: build the guest with scripts/microvm-build.sh and point kernel and \
             initramfs at what it wrote"
        )
    };
    Ok(MicrovmSettings {
        vmm: match m.vmm {
            VmmChoice::Qemu => airlock_sandbox::Vmm::Qemu,
            VmmChoice::Firecracker => airlock_sandbox::Vmm::Firecracker,
        },
        qemu: m.qemu.clone().unwrap_or_else(|| PathBuf::from(QEMU_DEFAULT)),
        firecracker: m.firecracker.clone().unwrap_or_else(|| PathBuf::from(FIRECRACKER_DEFAULT)),
        jailer: m.jailer.clone(),
        kernel: m.kernel.clone().ok_or_else(|| missing("kernel"))?,
        initramfs: m.initramfs.clone().ok_or_else(|| missing("initramfs"))?,
        memory_mib: m.memory_mib,
        vcpus: m.vcpus,
        accel: match m.accel {
            AccelChoice::Auto => airlock_sandbox::Accel::Auto,
            AccelChoice::Kvm => airlock_sandbox::Accel::Kvm,
            AccelChoice::Tcg => airlock_sandbox::Accel::Tcg,
        },
        boot_timeout: std::time::Duration::from_millis(m.boot_timeout_ms),
        state_dir: tier_dir(config, Tier::Microvm),
    })
}

fn tier_dir(config: &Config, tier: Tier) -> PathBuf {
    config.state_dir.join("tiers").join(tier.as_str())
}

/// Every tier's report for `airlock doctor` (a trivial worker is started on
/// each configured container tier); the native tier from `host`, the probe
/// the caller already made.
pub fn tier_reports(config: &Config, host: &airlock_sandbox::HostSupport) -> Vec<TierReport> {
    let cluster = config.cluster.is_some().then_some(Tier::Cluster);
    ALL_TIERS
        .into_iter()
        .chain(cluster)
        .map(|tier| match tier {
            Tier::Native => match host.native_ready() {
                Ok(()) => TierReport {
                    tier: "native".into(),
                    found: true,
                    version: None,
                    platform: Some("namespaces, Landlock, seccomp".into()),
                    ready: true,
                    why: None,
                },
                Err(why) => TierReport { found: true, ..TierReport::not_ready("native", why) },
            },
            Tier::Gvisor => gvisor::probe(&gvisor_settings(config)),
            Tier::Docker => match docker_settings(config) {
                Ok(settings) => docker::probe(&settings),
                Err(why) => TierReport::not_ready("docker", why),
            },
            Tier::Microvm => match microvm_settings(config) {
                Ok(settings) => microvm::probe(&settings),
                Err(why) => TierReport::not_ready("microvm", why),
            },
            Tier::Cluster => cluster_report(config),
        })
        .collect()
}

/// The cluster tier as `doctor` sees it: the cluster answers, and a worker
/// of `[cluster]`'s tier and pool reported within `LIVE_WITHIN_MS`.
fn cluster_report(config: &Config) -> TierReport {
    let Some(c) = config.cluster.as_ref() else {
        return TierReport::not_ready("cluster", "there is no [cluster] section");
    };
    let workers = match crate::cluster::endpoint_of(&airlock_hostfs::HostAuthority::ambient(), config, None)
        .map_err(|r| r.message)
        .and_then(|at| airlock_cluster::admin::workers(&at).map_err(|e| e.to_string()))
    {
        Ok(w) => w,
        Err(e) => return TierReport::not_ready("cluster", format!("{e} (is `airlock cluster init` done?)")),
    };
    let now = airlock_cluster::order::now_ms();
    let live = workers.iter().filter(|w| w.is_live_for(&c.tier, &c.pool, now)).count();
    let platform = Some(format!("{} worker(s) of {}/{} at {}", live, c.tier, c.pool, c.nats));
    if live == 0 {
        let why = format!(
            "the cluster at {} answers, but no worker of tier {:?} in pool {:?} reported in the last {} s: start \
             `airlock worker --tier {} --pool {}` on a worker host",
            c.nats,
            c.tier,
            c.pool,
            airlock_cluster::worker::LIVE_WITHIN_MS / 1000,
            c.tier,
            c.pool
        );
        return TierReport { found: true, platform, ..TierReport::not_ready("cluster", why) };
    }
    TierReport { tier: "cluster".into(), found: true, version: None, platform, ready: true, why: None }
}

/// One leftover `staging gc` removed (or could not).
#[derive(Debug, Clone, Serialize)]
pub struct ReapedLeftover {
    /// The tier that left it.
    pub tier: &'static str,
    /// What it was.
    pub leftover: Leftover,
    /// Why it could not be removed; `None`: removed and its absence confirmed.
    pub error: Option<String>,
}

impl Runtime {
    /// The tier named `name` by a call's descriptor (`native`, `gvisor`,
    /// `docker`, `docker+RUNTIME`), ready to start that call's workers.
    /// What dead calls left on that tier is reaped first.
    pub(crate) fn worker_tier(&self, name: &str) -> Result<AnyTier, Refusal> {
        let tier = self.tier_named(name)?;
        let unavailable =
            |why: String| Refusal::new(ReasonCode::SandboxUnavailable, format!("tier {name:?} cannot run here: {why}"));
        match tier {
            Tier::Native => Ok(AnyTier::Native(self.native_tier()?)),
            Tier::Gvisor => {
                let settings = gvisor_settings(self.config());
                self.reap_dead(Tier::Gvisor);
                let mut t = airlock_sandbox::GvisorTier::new(settings);
                t.cancel_with(self.current_cancel());
                Ok(AnyTier::Gvisor(t))
            }
            Tier::Docker => {
                let settings = docker_settings(self.config()).map_err(unavailable)?;
                self.reap_dead(Tier::Docker);
                let mut t = airlock_sandbox::DockerTier::new(settings);
                t.cancel_with(self.current_cancel());
                Ok(AnyTier::Docker(t))
            }
            Tier::Microvm => {
                let settings = microvm_settings(self.config()).map_err(unavailable)?;
                self.reap_dead(Tier::Microvm);
                let mut t = airlock_sandbox::MicrovmTier::new(settings);
                t.cancel_with(self.cancel.clone());
                Ok(AnyTier::Microvm(t))
            }
            Tier::Cluster => Err(Refusal::new(
                ReasonCode::SandboxTierUnsupported,
                "this call's shape runs on a tier of this host, not on the cluster",
            )),
        }
    }

    /// The configured tier a descriptor's tier name stands for.
    fn tier_named(&self, name: &str) -> Result<Tier, Refusal> {
        let tiers = &self.config().tiers;
        EVERY_TIER.into_iter().find(|t| tiers.descriptor_name(*t) == name).ok_or_else(|| {
            Refusal::new(
                ReasonCode::SandboxUnavailable,
                format!(
                    "the call was prepared for tier {name:?}, which the configuration no longer describes \
                     (was [sandbox.docker] runtime changed?); prepare the call again"
                ),
            )
        })
    }

    /// Removes what calls whose airlock died left on every container tier
    /// (`staging gc`): a leftover is dead when no live process holds its
    /// call's staging reservation.
    pub fn reap_tier_leftovers(&self) -> Result<Vec<ReapedLeftover>, Refusal> {
        let mut reaped = Vec::new();
        for tier in [Tier::Gvisor, Tier::Docker, Tier::Microvm] {
            reaped.extend(self.reap_tier(tier)?);
        }
        Ok(reaped)
    }

    /// Reaping before a call starts a worker: best effort, logged.
    fn reap_dead(&self, tier: Tier) {
        // Every container of a call keeps its call directory until it is
        // gone, so without the directory of a dead call there is nothing to
        // reap, and the runtime's (slower) listing is skipped here;
        // `staging gc` always lists.
        if !self.has_dead_call_dir(tier) {
            return;
        }
        match self.reap_tier(tier) {
            Ok(done) => {
                for r in done {
                    tracing::info!(tier = r.tier, id = %r.leftover.id, error = r.error.as_deref(), "reaped a dead call's worker");
                }
            }
            Err(e) => {
                tracing::warn!(tier = tier.as_str(), error = %e.message, "could not look for dead calls' workers")
            }
        }
    }

    /// Whether a call directory of `tier` belongs to a call no live process
    /// holds (or that cannot be told).
    fn has_dead_call_dir(&self, tier: Tier) -> bool {
        let root = match tier {
            Tier::Gvisor => gvisor_settings(self.config()).calls_dir(),
            Tier::Docker => tier_dir(self.config(), Tier::Docker),
            Tier::Microvm => tier_dir(self.config(), Tier::Microvm).join("calls"),
            Tier::Native | Tier::Cluster => return false,
        };
        let names: Vec<String> = match std::fs::read_dir(&root) {
            Ok(entries) => entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
            Err(_) => return true,
        };
        if names.is_empty() {
            return false;
        }
        match self.live_reservations() {
            Ok(live) => names.iter().any(|n| !live.contains(n)),
            Err(_) => true,
        }
    }

    fn reap_tier(&self, tier: Tier) -> Result<Vec<ReapedLeftover>, Refusal> {
        let config = self.config();
        let live = self.live_reservations()?;
        let dead = |l: &Leftover| l.call_id.as_ref().is_some_and(|id| !live.contains(id));
        let sandbox_err =
            |e: airlock_sandbox::SandboxError| Refusal::new(ReasonCode::SandboxUnavailable, e.to_string());
        let mut out = Vec::new();
        match tier {
            Tier::Gvisor => {
                let settings = gvisor_settings(config);
                if !settings.state_dir.exists() {
                    return Ok(out);
                }
                for l in gvisor::leftovers(&settings).map_err(sandbox_err)?.into_iter().filter(dead) {
                    let error = gvisor::reap(&settings, &l).err().map(|e| e.to_string());
                    out.push(ReapedLeftover { tier: "gvisor", leftover: l, error });
                }
            }
            Tier::Docker => {
                let Ok(settings) = docker_settings(config) else { return Ok(out) };
                if !Path::new(&settings.socket).exists() {
                    return Ok(out);
                }
                for l in docker::leftovers(&settings).map_err(sandbox_err)?.into_iter().filter(dead) {
                    let error = docker::reap(&settings, &l).err().map(|e| e.to_string());
                    out.push(ReapedLeftover { tier: "docker", leftover: l, error });
                }
            }
            Tier::Microvm => {
                let Ok(settings) = microvm_settings(config) else { return Ok(out) };
                for l in microvm::leftovers(&settings).map_err(sandbox_err)?.into_iter().filter(dead) {
                    let error = microvm::reap(&settings, &l).err().map(|e| e.to_string());
                    out.push(ReapedLeftover { tier: "microvm", leftover: l, error });
                }
            }
            Tier::Native | Tier::Cluster => {}
        }
        Ok(out)
    }

    /// Invocation ids whose staging reservation a live process holds.
    fn live_reservations(&self) -> Result<std::collections::HashSet<String>, Refusal> {
        let status = self.pool().status()?;
        Ok(status.reservations.into_iter().filter(|r| r.live).map(|r| r.reservation.invocation_id).collect())
    }
}
