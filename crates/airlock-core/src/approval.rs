//! `[approval]` in `airlock.toml`: who may approve a call, how long a
//! prepared call waits, and how many may wait per principal.
//!
//! ```toml
//! [approval]
//! ttl = "24h"          # seconds, or a number with s, m, h or d; 1 s … 30 days
//! max_pending = 8      # prepared calls kept per principal, 1 … 512
//! [[approval.approvers]]
//! id = "alice"
//! public_key = "ed25519:<64 hex>"   # printed by `airlock approver init`
//! ```
//!
//! Only the public keys live here; each approver's private key stays where
//! the approver made it. This module checks the form of a key (`ed25519:`
//! and 64 lowercase hex digits); `airlock-runtime` checks that it is a
//! valid Ed25519 point when it loads the configuration.

use crate::reason::{ReasonCode, Refusal};
use serde::Deserialize;

/// Default `[approval] ttl`: a day.
pub const DEFAULT_TTL_SECONDS: u64 = 24 * 3600;
/// Longest `[approval] ttl`: thirty days.
pub const MAX_TTL_SECONDS: u64 = 30 * 24 * 3600;
/// Default `[approval] max_pending` (per principal).
pub const DEFAULT_MAX_PENDING: u32 = 8;
/// Largest `[approval] max_pending`.
pub const MAX_PENDING: u32 = 512;
/// Most approvers a configuration may pin.
pub const MAX_APPROVERS: usize = 64;
/// The text form of an approver's public key starts with this.
pub const PUBLIC_KEY_PREFIX: &str = "ed25519:";

/// One pinned approver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approver {
    /// The name approvals are made under (1–64 of `A-Z a-z 0-9 . _ - @`).
    pub id: String,
    /// `ed25519:` and the 32 key bytes in lowercase hex.
    pub public_key: String,
}

/// The checked `[approval]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalConfig {
    /// How long a prepared call (and an approval of it) stays valid, in seconds.
    pub ttl_seconds: u64,
    /// Prepared calls kept at once per principal.
    pub max_pending: u32,
    /// The pinned approvers; none means no call can be approved.
    pub approvers: Vec<Approver>,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        ApprovalConfig { ttl_seconds: DEFAULT_TTL_SECONDS, max_pending: DEFAULT_MAX_PENDING, approvers: Vec::new() }
    }
}

/// `[approval]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawApproval {
    ttl: Option<RawTtl>,
    max_pending: Option<u32>,
    #[serde(default)]
    approvers: Vec<RawApprover>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawTtl {
    Seconds(i64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApprover {
    id: String,
    public_key: String,
}

fn invalid(message: String) -> Refusal {
    Refusal::new(ReasonCode::ConfigInvalid, format!("[approval] {message}"))
}

impl RawApproval {
    pub(crate) fn check(self) -> Result<ApprovalConfig, Refusal> {
        let ttl_seconds = match self.ttl {
            None => DEFAULT_TTL_SECONDS,
            Some(RawTtl::Seconds(n)) => u64::try_from(n).map_err(|_| invalid(format!("ttl = {n} is negative")))?,
            Some(RawTtl::Text(t)) => parse_duration(&t).ok_or_else(|| {
                invalid(format!("ttl = {t:?}: expected seconds, or a number followed by s, m, h or d (\"24h\")"))
            })?,
        };
        if !(1..=MAX_TTL_SECONDS).contains(&ttl_seconds) {
            return Err(invalid(format!("ttl = {ttl_seconds} s is outside 1 s … 30 days ({MAX_TTL_SECONDS} s)")));
        }
        let max_pending = self.max_pending.unwrap_or(DEFAULT_MAX_PENDING);
        if !(1..=MAX_PENDING).contains(&max_pending) {
            return Err(invalid(format!("max_pending = {max_pending} is outside 1 … {MAX_PENDING}")));
        }
        if self.approvers.len() > MAX_APPROVERS {
            return Err(invalid(format!("{} approvers, more than {MAX_APPROVERS}", self.approvers.len())));
        }
        let mut approvers: Vec<Approver> = Vec::with_capacity(self.approvers.len());
        for raw in self.approvers {
            check_approver_id(&raw.id).map_err(|why| invalid(format!("approver id {:?}: {why}", raw.id)))?;
            check_public_key(&raw.public_key)
                .map_err(|why| invalid(format!("approver {:?}: public_key {:?}: {why}", raw.id, raw.public_key)))?;
            if let Some(other) = approvers.iter().find(|a| a.id == raw.id || a.public_key == raw.public_key) {
                return Err(invalid(format!(
                    "approvers {:?} and {:?} share an id or a key; each approver needs their own",
                    other.id, raw.id
                )));
            }
            approvers.push(Approver { id: raw.id, public_key: raw.public_key });
        }
        Ok(ApprovalConfig { ttl_seconds, max_pending, approvers })
    }
}

/// Checks an approver id: 1–64 of `A-Z a-z 0-9 . _ - @`, not starting with `.` or `-`.
pub fn check_approver_id(id: &str) -> Result<(), &'static str> {
    if id.is_empty() || id.len() > 64 {
        return Err("must be 1 to 64 characters");
    }
    if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-@".contains(&b)) {
        return Err("may hold only A-Z a-z 0-9 . _ - @");
    }
    if id.starts_with(['.', '-']) {
        return Err("must not start with '.' or '-'");
    }
    Ok(())
}

/// Checks the form of a public key: `ed25519:` and 64 lowercase hex digits.
pub fn check_public_key(text: &str) -> Result<(), &'static str> {
    let hex = text.strip_prefix(PUBLIC_KEY_PREFIX).ok_or("expected \"ed25519:\" and 64 lowercase hex digits")?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err("expected \"ed25519:\" and 64 lowercase hex digits");
    }
    Ok(())
}

/// `"90"`, `"90s"`, `"30m"`, `"24h"`, `"7d"` to seconds (`None` if malformed or overflowing).
pub fn parse_duration(text: &str) -> Option<u64> {
    let (digits, unit) = match text.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&text[..i], c),
        _ => (text, 's'),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 12 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let scale = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    n.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<ApprovalConfig, Refusal> {
        #[derive(Deserialize)]
        struct Wrap {
            approval: RawApproval,
        }
        let w: Wrap = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        w.approval.check()
    }

    const KEY: &str = "ed25519:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn defaults_and_humane_ttls() {
        assert_eq!(check("[approval]").unwrap(), ApprovalConfig::default());
        assert_eq!(check("[approval]\nttl = 1").unwrap().ttl_seconds, 1);
        assert_eq!(check("[approval]\nttl = \"24h\"").unwrap().ttl_seconds, 86_400);
        assert_eq!(check("[approval]\nttl = \"30d\"").unwrap().ttl_seconds, MAX_TTL_SECONDS);
        assert_eq!(check("[approval]\nttl = \"90\"").unwrap().ttl_seconds, 90);
        assert_eq!(check("[approval]\nttl = \"15m\"").unwrap().ttl_seconds, 900);
        let c = check(&format!(
            "[approval]\nmax_pending = 3\n[[approval.approvers]]\nid = \"alice\"\npublic_key = \"{KEY}\""
        ))
        .unwrap();
        assert_eq!(c.max_pending, 3);
        assert_eq!(c.approvers, vec![Approver { id: "alice".into(), public_key: KEY.into() }]);
    }

    #[test]
    fn refusals_are_config_invalid() {
        let other = KEY.replace("ef\"", "ee\"").replace("cdef", "cdee");
        let cases = [
            "[approval]\nttl = 0".to_owned(),
            "[approval]\nttl = -5".to_owned(),
            "[approval]\nttl = \"31d\"".to_owned(),
            "[approval]\nttl = \"1w\"".to_owned(),
            "[approval]\nttl = \"h\"".to_owned(),
            "[approval]\nttl = \"99999999999999999d\"".to_owned(),
            "[approval]\nmax_pending = 0".to_owned(),
            "[approval]\nmax_pending = 513".to_owned(),
            "[approval]\nquota = 1".to_owned(),
            format!("[[approval.approvers]]\nid = \"a\"\npublic_key = \"{KEY}\"\nkey_file = \"x\""),
            format!("[[approval.approvers]]\nid = \"\"\npublic_key = \"{KEY}\""),
            format!("[[approval.approvers]]\nid = \"a b\"\npublic_key = \"{KEY}\""),
            format!("[[approval.approvers]]\nid = \"-a\"\npublic_key = \"{KEY}\""),
            "[[approval.approvers]]\nid = \"a\"\npublic_key = \"ed25519:00\"".to_owned(),
            format!("[[approval.approvers]]\nid = \"a\"\npublic_key = \"{}\"", KEY.to_uppercase()),
            format!("[[approval.approvers]]\nid = \"a\"\npublic_key = \"{}\"", KEY.replace("ed25519:", "rsa:")),
            format!(
                "[[approval.approvers]]\nid = \"a\"\npublic_key = \"{KEY}\"\n[[approval.approvers]]\nid = \"a\"\npublic_key = \"{other}\""
            ),
            format!(
                "[[approval.approvers]]\nid = \"a\"\npublic_key = \"{KEY}\"\n[[approval.approvers]]\nid = \"b\"\npublic_key = \"{KEY}\""
            ),
        ];
        for text in cases {
            assert_eq!(check(&text).unwrap_err().code, ReasonCode::ConfigInvalid, "{text}");
        }
    }
}
