//! The named-root broker's contracts that are pure data: per-submission
//! budgets, the operator's `[broker]` settings, and the descriptor section
//! that binds a submission's roots.
//!
//! Root names and rights are checked by `airlock-fsproto` (the protocol
//! every party speaks); this module only carries them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::reason::{ReasonCode, Refusal};

/// Cumulative budgets of one submission. Charged before an operation is
/// checked and never refunded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerBudgets {
    /// File operations.
    pub calls: u64,
    /// Operations received and not yet answered.
    pub outstanding: u64,
    /// Bytes reserved by reads (each read charges its `max`).
    pub read_bytes: u64,
    /// Bytes of write payloads.
    pub write_bytes: u64,
    /// Directory entries reserved by lists (each list charges its `max`).
    pub entries: u64,
}

impl Default for BrokerBudgets {
    /// 100 calls, 8 outstanding, 4 MiB read, 4 MiB write, 4,096 entries.
    fn default() -> Self {
        BrokerBudgets { calls: 100, outstanding: 8, read_bytes: 4 << 20, write_bytes: 4 << 20, entries: 4096 }
    }
}

/// `[broker]` budget overrides: each may lower its default or raise it up
/// to its hard cap ([`BrokerBudgets::HARD_CAPS`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetOverrides {
    /// `calls` (1 … 1,000,000).
    pub calls: Option<u64>,
    /// `outstanding` (1 … 8: the broker holds at most this many frames at once).
    pub outstanding: Option<u64>,
    /// `read_bytes` (1 … 16 GiB).
    pub read_bytes: Option<u64>,
    /// `write_bytes` (1 … 16 GiB).
    pub write_bytes: Option<u64>,
    /// `entries` (1 … 1,000,000).
    pub entries: Option<u64>,
}

impl BrokerBudgets {
    /// The most any configuration may allow: 1,000,000 calls, 8
    /// outstanding (not raisable), 16 GiB read, 16 GiB written (the hard cap
    /// of a call's inputs), 1,000,000 entries.
    pub const HARD_CAPS: BrokerBudgets = BrokerBudgets {
        calls: 1_000_000,
        outstanding: 8,
        read_bytes: 16 << 30,
        write_bytes: 16 << 30,
        entries: 1_000_000,
    };

    /// The defaults with `o` applied: a value of 0 or above its hard cap is
    /// refused (`config.invalid`), as is `outstanding` above `calls`.
    pub fn configured(o: &BudgetOverrides) -> Result<BrokerBudgets, Refusal> {
        let (d, cap) = (BrokerBudgets::default(), BrokerBudgets::HARD_CAPS);
        let pick = |name: &str, value: Option<u64>, default: u64, cap: u64| match value {
            None => Ok(default),
            Some(v) if (1..=cap).contains(&v) => Ok(v),
            Some(v) => Err(Refusal::new(
                ReasonCode::ConfigInvalid,
                format!("[broker] {name} = {v} is outside 1 … {cap} (the hard cap; the default is {default})"),
            )),
        };
        let b = BrokerBudgets {
            calls: pick("calls", o.calls, d.calls, cap.calls)?,
            outstanding: pick("outstanding", o.outstanding, d.outstanding, cap.outstanding)?,
            read_bytes: pick("read_bytes", o.read_bytes, d.read_bytes, cap.read_bytes)?,
            write_bytes: pick("write_bytes", o.write_bytes, d.write_bytes, cap.write_bytes)?,
            entries: pick("entries", o.entries, d.entries, cap.entries)?,
        };
        if b.outstanding > b.calls {
            return Err(Refusal::new(
                ReasonCode::ConfigInvalid,
                format!("[broker] outstanding = {} exceeds calls = {}; lower it too", b.outstanding, b.calls),
            ));
        }
        Ok(b)
    }
}

/// The operator's `[broker]` settings in `airlock.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerConfig {
    /// Root name → host directory (joined with the config's directory), for
    /// manifests that name roots (`[broker] roots = ["data:r"]`).
    pub roots: BTreeMap<String, PathBuf>,
    /// Budgets after overrides.
    pub budgets: BrokerBudgets,
    /// The broker executable; `None` is `airlock-broker` beside `airlock`.
    pub program: Option<PathBuf>,
    /// Pinned SHA-256 (hex) of the broker executable.
    pub program_sha256: Option<String>,
    /// The `airlock-fs` client executable given to workers; `None` is
    /// `airlock-fs` beside `airlock`.
    pub client: Option<PathBuf>,
    /// Pinned SHA-256 (hex) of the client executable.
    pub client_sha256: Option<String>,
}

/// `[broker]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBroker {
    #[serde(default)]
    roots: BTreeMap<String, String>,
    #[serde(flatten)]
    budgets: BudgetOverrides,
    program: Option<String>,
    program_sha256: Option<String>,
    client: Option<String>,
    client_sha256: Option<String>,
}

impl RawBroker {
    pub(crate) fn check(self, base_dir: &std::path::Path) -> Result<BrokerConfig, Refusal> {
        for pin in [&self.program_sha256, &self.client_sha256].into_iter().flatten() {
            check_sha256_hex(pin).map_err(|m| Refusal::new(ReasonCode::ConfigInvalid, format!("[broker] {m}")))?;
        }
        Ok(BrokerConfig {
            roots: self.roots.into_iter().map(|(name, path)| (name, base_dir.join(path))).collect(),
            budgets: BrokerBudgets::configured(&self.budgets)?,
            program: self.program.map(|p| base_dir.join(p)),
            program_sha256: self.program_sha256,
            client: self.client.map(|p| base_dir.join(p)),
            client_sha256: self.client_sha256,
        })
    }
}

/// Checks a pinned digest: 64 lower-case hex digits.
pub fn check_sha256_hex(pin: &str) -> Result<(), String> {
    if pin.len() == 64 && pin.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(format!("{pin:?} is not a SHA-256 digest (64 lower-case hex digits)"))
    }
}

/// One granted root, as the descriptor binds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerRoot {
    /// The name the worker uses.
    pub name: String,
    /// The host directory (as opened, canonical).
    pub path: String,
    /// `r`, `w`, `l` in that order.
    pub rights: String,
    /// Device of the opened directory (decimal string).
    pub dev: String,
    /// Inode of the opened directory (decimal string).
    pub ino: String,
}

/// `command_boundary.filesystem.broker`: what an isolated submission may
/// reach, and through what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerBoundary {
    /// Every root, by name order.
    pub roots: Vec<BrokerRoot>,
    /// Flat sets of root names by right (Cedar cannot quantify over records).
    pub read_roots: Vec<String>,
    /// Roots granting `w`.
    pub write_roots: Vec<String>,
    /// Roots granting `l`.
    pub list_roots: Vec<String>,
    /// Budgets of the submission.
    pub budgets: BrokerBudgets,
    /// SHA-256 of the broker executable that runs.
    pub broker_sha256: String,
    /// SHA-256 of the `airlock-fs` client given to the worker.
    pub client_sha256: String,
}

impl BrokerBoundary {
    /// A boundary over `roots` (sorted by name here), filling the flat sets.
    pub fn new(
        mut roots: Vec<BrokerRoot>,
        budgets: BrokerBudgets,
        broker_sha256: String,
        client_sha256: String,
    ) -> Self {
        roots.sort_by(|a, b| a.name.cmp(&b.name));
        let with = |c: char| roots.iter().filter(|r| r.rights.contains(c)).map(|r| r.name.clone()).collect();
        BrokerBoundary {
            read_roots: with('r'),
            write_roots: with('w'),
            list_roots: with('l'),
            roots,
            budgets,
            broker_sha256,
            client_sha256,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_are_raised_up_to_their_hard_caps_and_no_further() {
        assert_eq!(BrokerBudgets::configured(&BudgetOverrides::default()).unwrap(), BrokerBudgets::default());
        let low =
            BrokerBudgets::configured(&BudgetOverrides { calls: Some(3), outstanding: Some(2), ..Default::default() })
                .unwrap();
        assert_eq!((low.calls, low.outstanding), (3, 2));
        let cap = BrokerBudgets::HARD_CAPS;
        let top = BudgetOverrides {
            calls: Some(cap.calls),
            outstanding: Some(cap.outstanding),
            read_bytes: Some(cap.read_bytes),
            write_bytes: Some(cap.write_bytes),
            entries: Some(cap.entries),
        };
        assert_eq!(BrokerBudgets::configured(&top).unwrap(), cap);
        for bad in [
            BudgetOverrides { calls: Some(cap.calls + 1), ..Default::default() },
            BudgetOverrides { outstanding: Some(cap.outstanding + 1), ..Default::default() },
            BudgetOverrides { read_bytes: Some(cap.read_bytes + 1), ..Default::default() },
            BudgetOverrides { write_bytes: Some(cap.write_bytes + 1), ..Default::default() },
            BudgetOverrides { entries: Some(cap.entries + 1), ..Default::default() },
            BudgetOverrides { read_bytes: Some(0), ..Default::default() },
            BudgetOverrides { calls: Some(3), ..Default::default() },
        ] {
            let err = BrokerBudgets::configured(&bad).unwrap_err();
            assert_eq!(err.code, ReasonCode::ConfigInvalid, "{bad:?}");
        }
        let msg = BrokerBudgets::configured(&BudgetOverrides { calls: Some(1_000_001), ..Default::default() })
            .unwrap_err()
            .message;
        assert!(msg.contains("[broker] calls") && msg.contains("1000000"), "{msg}");
    }

    #[test]
    fn boundary_flat_sets() {
        let root = |name: &str, rights: &str| BrokerRoot {
            name: name.into(),
            path: format!("/srv/{name}"),
            rights: rights.into(),
            dev: "1".into(),
            ino: "2".into(),
        };
        let b = BrokerBoundary::new(
            vec![root("out", "wl"), root("data", "r")],
            BrokerBudgets::default(),
            "a".into(),
            "b".into(),
        );
        assert_eq!(b.roots[0].name, "data");
        assert_eq!(
            (b.read_roots, b.write_roots, b.list_roots),
            (vec!["data".into()], vec!["out".to_string()], vec!["out".to_string()])
        );
    }
}
