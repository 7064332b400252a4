//! `[state]`: how long the state directory keeps what settled calls leave.
//!
//! ```toml
//! [state]
//! keep_settled = "7d"   # "12h", "30m", "45s", "0s"; default 7 days
//! ```
//!
//! A settled call's directory under `STATE/invocations/` (its record and
//! manifest bytes, or the note that reserved a refused id) is removed once
//! it is older than `keep_settled`; the journal keeps every record.

use crate::reason::{ReasonCode, Refusal};
use serde::Deserialize;
use std::time::Duration;

/// The longest `keep_settled` accepted (about ten years).
pub const MAX_KEEP_SETTLED: Duration = Duration::from_secs(3650 * 86_400);

/// `[state]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawState {
    keep_settled: Option<String>,
}

/// `[state]` after checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSettings {
    /// How long a settled call's `STATE/invocations/ID` stays (default 7 days).
    pub keep_settled: Duration,
}

impl Default for StateSettings {
    fn default() -> Self {
        StateSettings { keep_settled: Duration::from_secs(7 * 86_400) }
    }
}

impl RawState {
    pub(crate) fn check(self) -> Result<StateSettings, Refusal> {
        let Some(text) = self.keep_settled else { return Ok(StateSettings::default()) };
        let keep_settled = parse_duration(&text).ok_or_else(|| {
            Refusal::new(
                ReasonCode::ConfigInvalid,
                format!(
                    "[state] keep_settled = {text:?} is not a duration: write a whole number and a unit, \
                     d, h, m or s (\"7d\", \"12h\", \"0s\"), at most 3650d"
                ),
            )
        })?;
        Ok(StateSettings { keep_settled })
    }
}

/// `"7d"`, `"12h"`, `"30m"`, `"45s"`: a whole number and one unit, at most
/// [`MAX_KEEP_SETTLED`].
pub fn parse_duration(text: &str) -> Option<Duration> {
    let unit_at = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(unit_at);
    let n: u64 = number.parse().ok()?;
    let seconds = match unit {
        "d" => n.checked_mul(86_400)?,
        "h" => n.checked_mul(3_600)?,
        "m" => n.checked_mul(60)?,
        "s" => n,
        _ => return None,
    };
    Some(Duration::from_secs(seconds)).filter(|d| *d <= MAX_KEEP_SETTLED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_one_unit() {
        assert_eq!(parse_duration("7d"), Some(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("12h"), Some(Duration::from_secs(43_200)));
        assert_eq!(parse_duration("30m"), Some(Duration::from_secs(1_800)));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
        for bad in ["", "7", "d", "7w", "-1d", "1.5h", "7d12h", " 7d", "3651d", "99999999999999999999d"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
