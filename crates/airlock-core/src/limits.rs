//! Per-call limits (DESIGN.md §4). Defaults come from the seeds; the
//! configuration may only lower them, and a manifest's `max_file_bytes` must
//! fit inside what the configuration allows.

use crate::reason::{ReasonCode, Refusal};

/// One mebibyte.
pub const MIB: u64 = 1024 * 1024;

/// Hard ceilings no configuration can raise.
pub mod hard {
    use super::MIB;
    /// Inputs per call.
    pub const MAX_INPUTS: usize = 32;
    /// Input snapshot bytes per call, all inputs together.
    pub const MAX_INPUT_BYTES: u64 = 32 * MIB;
    /// New outputs per call.
    pub const MAX_OUTPUTS: usize = 1;
    /// Largest allowed `max_file_bytes`.
    pub const MAX_FILE_BYTES: u64 = 16 * MIB;
    /// Smallest allowed `max_file_bytes`.
    pub const MIN_FILE_BYTES: u64 = 1;
    /// `max_file_bytes` when a manifest does not say.
    pub const DEFAULT_FILE_BYTES: u64 = 8 * MIB;
    /// Longest deadline of one call, `timeout_seconds` or `--timeout` (24 h):
    /// a bound that every clock and `Duration` addition holds with room.
    pub const MAX_TIMEOUT_SECONDS: u64 = 24 * 60 * 60;
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
    /// Upper bound for any `max_file_bytes`.
    pub max_file_bytes: u64,
    /// `max_file_bytes` when a manifest does not say (never above `max_file_bytes`).
    pub default_file_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_inputs: hard::MAX_INPUTS,
            max_input_bytes: hard::MAX_INPUT_BYTES,
            max_file_bytes: hard::MAX_FILE_BYTES,
            default_file_bytes: hard::DEFAULT_FILE_BYTES,
        }
    }
}

/// Optional lowerings from `[limits]` in `airlock.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    /// Lower the number of inputs per call.
    pub max_inputs: Option<usize>,
    /// Lower the input bytes per call.
    pub max_input_bytes: Option<u64>,
    /// Lower the largest allowed `max_file_bytes`.
    pub max_file_bytes: Option<u64>,
}

impl Limits {
    /// Applies configuration overrides, refusing any that would raise a limit
    /// or leave it at zero.
    pub fn lowered(overrides: &LimitOverrides) -> Result<Limits, Refusal> {
        let mut limits = Limits::default();
        fn lower<T: PartialOrd + Copy + std::fmt::Display + Default>(
            name: &str,
            current: &mut T,
            wanted: Option<T>,
        ) -> Result<(), Refusal> {
            if let Some(w) = wanted {
                if w > *current || w == T::default() {
                    return Err(Refusal::new(
                        ReasonCode::ConfigInvalid,
                        format!("[limits] {name} = {w}: configuration may only lower this limit, to at least 1 and at most {current}"),
                    ));
                }
                *current = w;
            }
            Ok(())
        }
        lower("max_inputs", &mut limits.max_inputs, overrides.max_inputs)?;
        lower("max_input_bytes", &mut limits.max_input_bytes, overrides.max_input_bytes)?;
        lower("max_file_bytes", &mut limits.max_file_bytes, overrides.max_file_bytes)?;
        limits.default_file_bytes = limits.default_file_bytes.min(limits.max_file_bytes);
        Ok(limits)
    }

    /// The effective `max_file_bytes` for a manifest that asked for `requested`.
    pub fn file_bytes(&self, requested: Option<u64>) -> Result<u64, Refusal> {
        match requested {
            None => Ok(self.default_file_bytes),
            Some(n) if (hard::MIN_FILE_BYTES..=self.max_file_bytes).contains(&n) => Ok(n),
            Some(n) => Err(Refusal::new(
                ReasonCode::LimitFileBytes,
                format!("max_file_bytes = {n} is outside {} … {} bytes", hard::MIN_FILE_BYTES, self.max_file_bytes),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_only_lowers() {
        let ok = Limits::lowered(&LimitOverrides { max_inputs: Some(4), ..Default::default() }).unwrap();
        assert_eq!(ok.max_inputs, 4);
        assert!(Limits::lowered(&LimitOverrides { max_inputs: Some(33), ..Default::default() }).is_err());
        assert!(Limits::lowered(&LimitOverrides { max_input_bytes: Some(0), ..Default::default() }).is_err());
        let small = Limits::lowered(&LimitOverrides { max_file_bytes: Some(1024), ..Default::default() }).unwrap();
        assert_eq!(small.default_file_bytes, 1024);
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

    #[test]
    fn file_bytes_bounds() {
        let l = Limits::default();
        assert_eq!(l.file_bytes(None).unwrap(), 8 * MIB);
        assert_eq!(l.file_bytes(Some(1)).unwrap(), 1);
        assert_eq!(l.file_bytes(Some(16 * MIB)).unwrap(), 16 * MIB);
        assert_eq!(l.file_bytes(Some(0)).unwrap_err().code, ReasonCode::LimitFileBytes);
        assert_eq!(l.file_bytes(Some(16 * MIB + 1)).unwrap_err().code, ReasonCode::LimitFileBytes);
    }
}
