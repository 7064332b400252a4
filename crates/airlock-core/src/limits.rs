//! Per-call limits (DESIGN.md §4).
//!
//! Three layers, each inside the one above it:
//!
//! - **Hard caps** ([`hard`]): no configuration can go past them (4 GiB a
//!   file, 16 GiB of inputs a call, 32 inputs, one output).
//! - **The operator's limits** (`[limits]` in `airlock.toml`, [`Limits`]):
//!   they default to the seed's values ([`defaults`]: a manifest may ask for
//!   up to 16 MiB a file, 32 MiB of inputs a call) and may be lowered, or
//!   raised up to the hard caps.
//! - **A manifest's bounds** (`[filesystem] max_file_bytes` for the output,
//!   `max_input_file_bytes` for each input): at most what the operator
//!   allows; asking for more is refused with both numbers and the
//!   configuration key that would raise the limit.
//!
//! An input is bounded by `max_input_file_bytes`, never by the output's
//! `max_file_bytes`: a manifest that sets only `max_file_bytes` (the old
//! spelling, which bounded both) gets the operator's input limit for its
//! inputs, so a word-count tool with a 1 MiB output still reads a 40 MB log.
//! A configuration that sets only `[limits] max_file_bytes` keeps bounding
//! inputs by it as before, but only ever lower (an operator who lowered the
//! one number meant to bound both; raising it never raises inputs).

use crate::reason::{ReasonCode, Refusal};

/// One mebibyte.
pub const MIB: u64 = 1024 * 1024;

/// One gibibyte.
pub const GIB: u64 = 1024 * MIB;

/// Hard ceilings no configuration can raise.
pub mod hard {
    use super::{GIB, MIB};
    /// Inputs per call.
    pub const MAX_INPUTS: usize = 32;
    /// Input snapshot bytes per call, all inputs together.
    pub const MAX_INPUT_BYTES: u64 = 16 * GIB;
    /// New outputs per call.
    pub const MAX_OUTPUTS: usize = 1;
    /// Largest `max_file_bytes` and `max_input_file_bytes` any configuration
    /// or manifest may set.
    pub const MAX_FILE_BYTES: u64 = 4 * GIB;
    /// Smallest allowed `max_file_bytes` or `max_input_file_bytes`.
    pub const MIN_FILE_BYTES: u64 = 1;
    /// `max_file_bytes` when a manifest does not say (never above the
    /// operator's `max_file_bytes`).
    pub const DEFAULT_FILE_BYTES: u64 = 8 * MIB;
    /// Longest deadline of one call, `timeout_seconds` or `--timeout` (24 h):
    /// a bound that every clock and `Duration` addition holds with room.
    pub const MAX_TIMEOUT_SECONDS: u64 = 24 * 60 * 60;
}

/// The operator's limits when `[limits]` does not set them (the seed's values).
pub mod defaults {
    use super::MIB;
    /// Largest `max_file_bytes` a manifest may ask for.
    pub const MAX_FILE_BYTES: u64 = 16 * MIB;
    /// Largest input file, and the largest `max_input_file_bytes` a manifest may ask for.
    pub const MAX_INPUT_FILE_BYTES: u64 = 16 * MIB;
    /// Input bytes per call, all inputs together.
    pub const MAX_INPUT_BYTES: u64 = 32 * MIB;
}

/// Sizing of the shared staging pool (`[staging]` in `airlock.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StagingLimits {
    /// Reservations held at once, host-wide (1 … [`StagingLimits::HARD_MAX_SNAPSHOTS`]).
    pub max_snapshots: u32,
    /// Bytes reserved at once, host-wide (at least 1).
    pub max_bytes: u64,
}

impl StagingLimits {
    /// No configuration may allow more concurrent reservations than this.
    pub const HARD_MAX_SNAPSHOTS: u32 = 512;
    /// Default concurrent reservations.
    pub const DEFAULT_MAX_SNAPSHOTS: u32 = 16;
    /// Default reserved bytes: 1 GiB.
    pub const DEFAULT_MAX_BYTES: u64 = 1024 * MIB;

    /// Refuses a pool of zero, or of more than the hard cap of snapshots.
    pub fn check(&self) -> Result<(), Refusal> {
        if !(1..=Self::HARD_MAX_SNAPSHOTS).contains(&self.max_snapshots) {
            return Err(Refusal::new(
                ReasonCode::ConfigInvalid,
                format!("[staging] max_snapshots = {} is outside 1 … {}", self.max_snapshots, Self::HARD_MAX_SNAPSHOTS),
            ));
        }
        if self.max_bytes == 0 {
            return Err(Refusal::new(ReasonCode::ConfigInvalid, "[staging] max_bytes must be at least 1"));
        }
        Ok(())
    }
}

impl Default for StagingLimits {
    fn default() -> Self {
        StagingLimits { max_snapshots: Self::DEFAULT_MAX_SNAPSHOTS, max_bytes: Self::DEFAULT_MAX_BYTES }
    }
}

/// The limits in force for one host (after configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    /// Most inputs per call.
    pub max_inputs: usize,
    /// Most input bytes per call, all inputs together.
    pub max_input_bytes: u64,
    /// Largest input file, and upper bound for a manifest's `max_input_file_bytes`.
    pub max_input_file_bytes: u64,
    /// Upper bound for a manifest's `max_file_bytes` (the output's bound).
    pub max_file_bytes: u64,
    /// `max_file_bytes` when a manifest does not say (never above `max_file_bytes`).
    pub default_file_bytes: u64,
    /// Most live sessions one holder keeps (`[limits] max_sessions`, 1 … 256; default 16).
    pub max_sessions: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_inputs: hard::MAX_INPUTS,
            max_input_bytes: defaults::MAX_INPUT_BYTES,
            max_input_file_bytes: defaults::MAX_INPUT_FILE_BYTES,
            max_file_bytes: defaults::MAX_FILE_BYTES,
            default_file_bytes: hard::DEFAULT_FILE_BYTES,
            max_sessions: DEFAULT_MAX_SESSIONS,
        }
    }
}

/// `[limits]` in `airlock.toml`: each key lowers or raises its default,
/// within 1 and its hard cap (`max_inputs` may only be lowered).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    /// Inputs per call (1 … 32).
    pub max_inputs: Option<usize>,
    /// Input bytes per call, all inputs together (1 … 16 GiB).
    pub max_input_bytes: Option<u64>,
    /// Largest input file (1 … 4 GiB).
    pub max_input_file_bytes: Option<u64>,
    /// Largest `max_file_bytes` a manifest may ask for (1 … 4 GiB).
    pub max_file_bytes: Option<u64>,
    /// Live sessions (1 … 256).
    pub max_sessions: Option<usize>,
}

/// Live sessions a holder keeps unless `[limits] max_sessions` says otherwise (as Symbiont).
pub const DEFAULT_MAX_SESSIONS: usize = 16;
/// The most `[limits] max_sessions` may allow.
pub const MAX_SESSIONS_CAP: usize = 256;

/// One operator setting: `wanted` if it lies in 1 … `cap`, else `default`
/// when unset; anything else is `config.invalid` naming the key and the range.
fn setting<T>(name: &str, wanted: Option<T>, default: T, cap: T) -> Result<T, Refusal>
where
    T: PartialOrd + Copy + std::fmt::Display + From<u8>,
{
    match wanted {
        None => Ok(default),
        Some(w) if w >= T::from(1) && w <= cap => Ok(w),
        Some(w) => Err(Refusal::new(
            ReasonCode::ConfigInvalid,
            format!("[limits] {name} = {w} is outside 1 … {cap} (the hard cap; the default is {default})"),
        )),
    }
}

/// A manifest's request for a per-file bound: `requested` when it lies in
/// 1 … `allowed`, else a refusal with `code` naming both numbers and the
/// `[limits]` key that raises `allowed`.
fn within(code: ReasonCode, key: &str, requested: u64, allowed: u64) -> Result<u64, Refusal> {
    if requested < hard::MIN_FILE_BYTES {
        return Err(Refusal::new(
            code,
            format!("{key} = {requested}: a bound is at least {} byte", hard::MIN_FILE_BYTES),
        ));
    }
    if requested > allowed {
        let how = if allowed < hard::MAX_FILE_BYTES {
            format!("an operator may raise it with [limits] {key} in airlock.toml, up to {}", hard::MAX_FILE_BYTES)
        } else {
            "that is the hard cap".to_owned()
        };
        return Err(Refusal::new(
            code,
            format!("{key} = {requested} is more than this host allows ({allowed} bytes); {how}"),
        ));
    }
    Ok(requested)
}

impl Limits {
    /// The operator's limits from `[limits]`: each key within 1 and its hard
    /// cap. With `max_file_bytes` set and `max_input_file_bytes` not, inputs
    /// are bounded by the lower of the two (the old single spelling).
    pub fn configured(o: &LimitOverrides) -> Result<Limits, Refusal> {
        let d = Limits::default();
        let max_file_bytes = setting("max_file_bytes", o.max_file_bytes, d.max_file_bytes, hard::MAX_FILE_BYTES)?;
        let input_default = match o.max_file_bytes {
            Some(_) => d.max_input_file_bytes.min(max_file_bytes),
            None => d.max_input_file_bytes,
        };
        Ok(Limits {
            max_inputs: setting("max_inputs", o.max_inputs, d.max_inputs, hard::MAX_INPUTS)?,
            max_input_bytes: setting("max_input_bytes", o.max_input_bytes, d.max_input_bytes, hard::MAX_INPUT_BYTES)?,
            max_input_file_bytes: setting(
                "max_input_file_bytes",
                o.max_input_file_bytes,
                input_default,
                hard::MAX_FILE_BYTES,
            )?,
            max_file_bytes,
            default_file_bytes: d.default_file_bytes.min(max_file_bytes),
            max_sessions: setting("max_sessions", o.max_sessions, d.max_sessions, MAX_SESSIONS_CAP)?,
        })
    }

    /// The output bound for a manifest that asked for `requested`
    /// (`[filesystem] max_file_bytes`): the default when it did not say.
    pub fn file_bytes(&self, requested: Option<u64>) -> Result<u64, Refusal> {
        match requested {
            None => Ok(self.default_file_bytes),
            Some(n) => within(ReasonCode::LimitFileBytes, "max_file_bytes", n, self.max_file_bytes),
        }
    }

    /// The bound of each input for a manifest that asked for `requested`
    /// (`[filesystem] max_input_file_bytes`): the operator's limit when it
    /// did not say, whatever its `max_file_bytes`.
    pub fn input_file_bytes(&self, requested: Option<u64>) -> Result<u64, Refusal> {
        match requested {
            None => Ok(self.max_input_file_bytes),
            Some(n) => within(ReasonCode::LimitInputFileBytes, "max_input_file_bytes", n, self.max_input_file_bytes),
        }
    }

    /// Checks a manifest's bounds against the hard caps alone (at parse,
    /// before any configuration is known).
    pub fn check_manifest_bounds(
        max_file_bytes: Option<u64>,
        max_input_file_bytes: Option<u64>,
    ) -> Result<(), Refusal> {
        let hard = Limits {
            max_file_bytes: hard::MAX_FILE_BYTES,
            max_input_file_bytes: hard::MAX_FILE_BYTES,
            ..Limits::default()
        };
        hard.file_bytes(max_file_bytes)?;
        hard.input_file_bytes(max_input_file_bytes)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(o: LimitOverrides) -> Result<Limits, ReasonCode> {
        Limits::configured(&o).map_err(|r| r.code)
    }

    #[test]
    fn defaults_are_the_seed_values() {
        let l = Limits::configured(&LimitOverrides::default()).unwrap();
        assert_eq!(l, Limits::default());
        assert_eq!((l.max_inputs, l.max_input_bytes), (32, 32 * MIB));
        assert_eq!((l.max_file_bytes, l.default_file_bytes, l.max_input_file_bytes), (16 * MIB, 8 * MIB, 16 * MIB));
    }

    #[test]
    fn config_raises_to_the_hard_cap_and_no_further() {
        let at = |o| with(o).map(|l: Limits| (l.max_file_bytes, l.max_input_file_bytes, l.max_input_bytes));
        let top = LimitOverrides {
            max_file_bytes: Some(4 * GIB),
            max_input_file_bytes: Some(4 * GIB),
            max_input_bytes: Some(16 * GIB),
            ..Default::default()
        };
        assert_eq!(at(top), Ok((4 * GIB, 4 * GIB, 16 * GIB)));
        for past in [
            LimitOverrides { max_file_bytes: Some(4 * GIB + 1), ..Default::default() },
            LimitOverrides { max_input_file_bytes: Some(4 * GIB + 1), ..Default::default() },
            LimitOverrides { max_input_bytes: Some(16 * GIB + 1), ..Default::default() },
            LimitOverrides { max_inputs: Some(33), ..Default::default() },
            LimitOverrides { max_input_bytes: Some(0), ..Default::default() },
            LimitOverrides { max_input_file_bytes: Some(0), ..Default::default() },
        ] {
            assert_eq!(with(past.clone()), Err(ReasonCode::ConfigInvalid), "{past:?}");
        }
        let msg = Limits::configured(&LimitOverrides { max_file_bytes: Some(4 * GIB + 1), ..Default::default() })
            .unwrap_err()
            .message;
        assert!(msg.contains("[limits] max_file_bytes") && msg.contains("4294967296"), "{msg}");
        let ok = with(LimitOverrides { max_inputs: Some(4), ..Default::default() }).unwrap();
        assert_eq!(ok.max_inputs, 4);
    }

    #[test]
    fn the_old_single_spelling_in_config_still_bounds_inputs_but_never_raises_them() {
        let small = with(LimitOverrides { max_file_bytes: Some(1024), ..Default::default() }).unwrap();
        assert_eq!((small.default_file_bytes, small.max_input_file_bytes), (1024, 1024));
        let big = with(LimitOverrides { max_file_bytes: Some(GIB), ..Default::default() }).unwrap();
        assert_eq!((big.default_file_bytes, big.max_input_file_bytes), (8 * MIB, 16 * MIB));
        let both =
            with(LimitOverrides { max_file_bytes: Some(1024), max_input_file_bytes: Some(GIB), ..Default::default() })
                .unwrap();
        assert_eq!(both.max_input_file_bytes, GIB);
    }

    #[test]
    fn a_manifest_asks_for_at_most_what_the_operator_allows() {
        let l = Limits::default();
        assert_eq!(l.file_bytes(None).unwrap(), 8 * MIB);
        assert_eq!(l.file_bytes(Some(1)).unwrap(), 1);
        assert_eq!(l.file_bytes(Some(16 * MIB)).unwrap(), 16 * MIB);
        assert_eq!(l.file_bytes(Some(0)).unwrap_err().code, ReasonCode::LimitFileBytes);
        let over = l.file_bytes(Some(16 * MIB + 1)).unwrap_err();
        assert_eq!(over.code, ReasonCode::LimitFileBytes);
        for part in ["16777217", "16777216", "[limits] max_file_bytes"] {
            assert!(over.message.contains(part), "{}", over.message);
        }
        assert_eq!(l.input_file_bytes(None).unwrap(), 16 * MIB);
        assert_eq!(l.input_file_bytes(Some(16 * MIB)).unwrap(), 16 * MIB);
        let over = l.input_file_bytes(Some(16 * MIB + 1)).unwrap_err();
        assert_eq!(over.code, ReasonCode::LimitInputFileBytes);
        assert!(over.message.contains("[limits] max_input_file_bytes"), "{}", over.message);
        // Only the hard cap at parse.
        assert!(Limits::check_manifest_bounds(Some(4 * GIB), Some(4 * GIB)).is_ok());
        let past = Limits::check_manifest_bounds(Some(4 * GIB + 1), None).unwrap_err();
        assert!(past.message.contains("hard cap"), "{}", past.message);
        assert_eq!(
            Limits::check_manifest_bounds(None, Some(4 * GIB + 1)).unwrap_err().code,
            ReasonCode::LimitInputFileBytes
        );
    }

    #[test]
    fn staging_pool_size_is_bounded_at_both_ends() {
        assert!(StagingLimits::default().check().is_ok());
        let at = |n, b| StagingLimits { max_snapshots: n, max_bytes: b }.check();
        assert!(at(512, 1).is_ok());
        assert_eq!(at(513, 1).unwrap_err().code, ReasonCode::ConfigInvalid);
        assert_eq!(at(0, 1).unwrap_err().code, ReasonCode::ConfigInvalid);
        assert_eq!(at(1, 0).unwrap_err().code, ReasonCode::ConfigInvalid);
    }
}
