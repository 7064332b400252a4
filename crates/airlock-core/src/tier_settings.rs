//! Which worker tiers an operator allows and how each is reached
//! (`[sandbox] tiers`, `[sandbox.gvisor]`, `[sandbox.docker]`).

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
}

/// The tiers, their settings and the allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierSettings {
    /// Tiers a call may run on (`[sandbox] tiers`; default: every tier).
    pub allowed: Vec<Tier>,
    /// `[sandbox.gvisor]`.
    pub gvisor: GvisorConfig,
    /// `[sandbox.docker]`.
    pub docker: DockerConfig,
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

/// Every tier, in the order `doctor` reports them.
pub const ALL_TIERS: [Tier; 4] = [Tier::Native, Tier::Gvisor, Tier::Docker, Tier::Microvm];

impl TierSettings {
    /// Checks the raw sections: `default` must be allowed, paths absolute,
    /// names plain.
    pub(crate) fn check(
        default: Tier,
        allowed: Option<Vec<Tier>>,
        gvisor: RawGvisor,
        docker: RawDocker,
    ) -> Result<TierSettings, Refusal> {
        let bad = |msg: String| Refusal::new(ReasonCode::ConfigInvalid, msg);
        let allowed = allowed.unwrap_or_else(|| ALL_TIERS.to_vec());
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
        })
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
        TierSettings { allowed: ALL_TIERS.to_vec(), gvisor: GvisorConfig::default(), docker: DockerConfig::default() }
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
        }
    }

    /// Parses a configured name.
    pub fn parse(name: &str) -> Option<Tier> {
        ALL_TIERS.into_iter().find(|t| t.as_str() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_tier_must_be_allowed() {
        let err =
            TierSettings::check(Tier::Gvisor, Some(vec![Tier::Native]), RawGvisor::default(), RawDocker::default())
                .unwrap_err();
        assert!(err.message.contains("not in [sandbox] tiers"), "{}", err.message);
    }

    #[test]
    fn docker_with_runsc_is_named_for_policy() {
        let docker = RawDocker { image: Some("airlock-base:test".into()), runtime: Some("runsc".into()), socket: None };
        let s = TierSettings::check(Tier::Native, None, RawGvisor::default(), docker).unwrap();
        assert_eq!(s.descriptor_name(Tier::Docker), "docker+runsc");
        assert_eq!(s.descriptor_name(Tier::Gvisor), "gvisor");
    }

    #[test]
    fn relative_paths_and_odd_names_are_refused() {
        let g = RawGvisor { runsc: Some("bin/runsc".into()), platform: GvisorPlatformChoice::Auto };
        assert!(TierSettings::check(Tier::Native, None, g, RawDocker::default()).is_err());
        let d = RawDocker { image: Some("img;rm -rf".into()), ..RawDocker::default() };
        assert!(TierSettings::check(Tier::Native, None, RawGvisor::default(), d).is_err());
    }
}
