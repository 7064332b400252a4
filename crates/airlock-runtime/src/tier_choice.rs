//! Which worker tier a call runs on: the caller's request (`airlock run
//! --tier`), else the manifest's `[tool.sandbox] tier`, else `[sandbox]
//! tier`. The choice must be in the operator's `[sandbox] tiers` and one the
//! call's shape can run on; it is recorded in the descriptor, so Cedar sees
//! it and the journal keeps it.

use airlock_core::config::{Config, Tier};
use airlock_core::reason::{ReasonCode, Refusal};

/// The descriptor's `tier` of a shape that starts no worker (source queries
/// read through airlock's own handles).
pub(crate) const NO_WORKER: &str = "none";

/// Tiers every worker-running shape can use.
pub(crate) const NATIVE_ONLY: &[Tier] = &[Tier::Native];

/// Tiers a `[session]` tool's program (on a terminal of this host) can run
/// on in this build: every local tier.
pub(crate) const LOCAL_TIERS: &[Tier] = &airlock_core::tier_settings::ALL_TIERS;

/// Tiers a `[command]` tool can run on: every local tier, and a worker of
/// the cluster.
pub(crate) const COMMAND_TIERS: &[Tier] = &airlock_core::tier_settings::EVERY_TIER;

/// Chooses the tier of one call of a shape that runs on `supported`.
pub(crate) fn choose(
    config: &Config,
    requested: Option<Tier>,
    pinned: Option<Tier>,
    supported: &[Tier],
    shape: &str,
) -> Result<Tier, Refusal> {
    let tier = match (requested, pinned) {
        (Some(asked), Some(pin)) if asked != pin => {
            return Err(Refusal::new(
                ReasonCode::SandboxTierNotAllowed,
                format!(
                    "the call asks for tier {:?}, but the manifest's [tool.sandbox] tier is {:?}; \
                     leave out --tier or ask for {:?}",
                    asked.as_str(),
                    pin.as_str(),
                    pin.as_str()
                ),
            ))
        }
        (asked, pin) => asked.or(pin).unwrap_or(config.tier),
    };
    if !config.tiers.allowed.contains(&tier) {
        return Err(Refusal::new(
            ReasonCode::SandboxTierNotAllowed,
            format!(
                "tier {:?} is not in [sandbox] tiers = {:?}; the operator allows only those",
                tier.as_str(),
                config.tiers.allowed.iter().map(|t| t.as_str()).collect::<Vec<_>>()
            ),
        ));
    }
    if !supported.contains(&tier) {
        return Err(Refusal::new(
            ReasonCode::SandboxTierUnsupported,
            format!(
                "{shape} cannot run on tier {:?}; it runs on {:?}. Ask for one of those with --tier, \
                 or pin it in the manifest's [tool.sandbox] tier",
                tier.as_str(),
                supported.iter().map(|t| t.as_str()).collect::<Vec<_>>()
            ),
        ));
    }
    Ok(tier)
}

/// The descriptor's `tier` of a shape that starts no worker; asking for a
/// tier is refused rather than ignored.
pub(crate) fn no_worker(requested: Option<Tier>, shape: &str) -> Result<String, Refusal> {
    match requested {
        None => Ok(NO_WORKER.to_owned()),
        Some(t) => Err(Refusal::new(
            ReasonCode::SandboxTierUnsupported,
            format!("{shape} starts no worker, so it cannot run on tier {:?}; leave out --tier", t.as_str()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::parse(text, None, std::path::Path::new("/srv/project")).unwrap()
    }

    #[test]
    fn request_then_manifest_then_default() {
        let c = config("[sandbox]\ntier = \"native\"\n");
        assert_eq!(choose(&c, None, None, LOCAL_TIERS, "t").unwrap(), Tier::Native);
        assert_eq!(choose(&c, None, Some(Tier::Gvisor), LOCAL_TIERS, "t").unwrap(), Tier::Gvisor);
        assert_eq!(choose(&c, Some(Tier::Docker), None, LOCAL_TIERS, "t").unwrap(), Tier::Docker);
        let conflict = choose(&c, Some(Tier::Native), Some(Tier::Gvisor), LOCAL_TIERS, "t").unwrap_err();
        assert_eq!(conflict.code, ReasonCode::SandboxTierNotAllowed);
    }

    #[test]
    fn the_allow_list_and_the_shape_bound_the_choice() {
        let c = config("[sandbox]\ntiers = [\"native\", \"gvisor\"]\n");
        assert_eq!(
            choose(&c, Some(Tier::Docker), None, LOCAL_TIERS, "t").unwrap_err().code,
            ReasonCode::SandboxTierNotAllowed
        );
        let e = choose(&c, Some(Tier::Gvisor), None, NATIVE_ONLY, "a Git query").unwrap_err();
        assert_eq!(e.code, ReasonCode::SandboxTierUnsupported);
        assert!(e.message.contains("a Git query"), "{}", e.message);
        assert_eq!(
            no_worker(Some(Tier::Gvisor), "a source query").unwrap_err().code,
            ReasonCode::SandboxTierUnsupported
        );
        assert_eq!(no_worker(None, "a source query").unwrap(), NO_WORKER);
    }
}
