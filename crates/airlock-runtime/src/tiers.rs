//! The worker tiers as the configuration describes them: the tier that runs
//! a call (by the name its descriptor records), what `doctor` reports about
//! each, and what `staging gc` reaps of calls whose airlock died.

use airlock_core::config::Tier;
use airlock_core::reason::{ReasonCode, Refusal};
use airlock_sandbox::AnyTier;

use crate::Runtime;

impl Runtime {
    /// The tier named `name` by a call's descriptor (`native`, `gvisor`,
    /// `docker`, `docker+RUNTIME`), ready to start that call's workers.
    /// Refused if the configuration changed since the call was prepared so
    /// that the name means another tier now.
    pub(crate) fn worker_tier(&self, name: &str) -> Result<AnyTier, Refusal> {
        let tier = self.tier_named(name)?;
        match tier {
            Tier::Native => Ok(AnyTier::Native(self.native_tier()?)),
            other => Err(Refusal::new(
                ReasonCode::SandboxUnavailable,
                format!("tier {:?} is not built in this version of airlock", other.as_str()),
            )),
        }
    }

    /// The configured tier a descriptor's tier name stands for.
    fn tier_named(&self, name: &str) -> Result<Tier, Refusal> {
        let tiers = &self.config().tiers;
        airlock_core::tier_settings::ALL_TIERS.into_iter().find(|t| tiers.descriptor_name(*t) == name).ok_or_else(
            || {
                Refusal::new(
                    ReasonCode::SandboxUnavailable,
                    format!(
                        "the call was prepared for tier {name:?}, which the configuration no longer describes \
                         (was [sandbox.docker] runtime changed?); prepare the call again"
                    ),
                )
            },
        )
    }
}
