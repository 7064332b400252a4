//! One reservation as written in `STATE/staging/leases/ID`.

use crate::ProcessIdentity;
use airlock_core::{ReasonCode, Refusal};
use serde::{Deserialize, Serialize};

/// Bytes charged for every file besides its contents: a block of data and
/// its inode, so a call of many empty files still costs something.
pub const PER_FILE_OVERHEAD: u64 = 4096;

/// The layout version of a reservation file (its `version`); a file of
/// another version is refused with `record.version`. Files from before the
/// field existed are version 1.
pub const RESERVATION_VERSION: u32 = 1;

fn first_version() -> u32 {
    1
}

/// Largest lease file read back; anything longer is damage.
pub(crate) const MAX_RECORD_BYTES: u64 = 4096;

/// What a reservation holds private copies for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// A governed call: its input snapshots and its one output.
    Call,
    /// A bounded copy of a Git repository for a Git query.
    GitSnapshot,
}

/// What a caller asks the pool for, before copying anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The invocation the copies belong to (a safe single file name).
    pub invocation_id: String,
    /// Why.
    pub purpose: Purpose,
    /// Bytes of content: inputs plus the output's maximum size.
    pub bytes: u64,
    /// Files that will be written (inputs plus the output).
    pub files: u64,
}

impl Request {
    /// Bytes this request is charged: content plus [`PER_FILE_OVERHEAD`] a file.
    pub fn charge(&self) -> u64 {
        self.bytes.saturating_add(self.files.saturating_mul(PER_FILE_OVERHEAD))
    }
}

/// A reservation as kept on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reservation {
    /// [`RESERVATION_VERSION`].
    #[serde(default = "first_version")]
    pub version: u32,
    /// The invocation it belongs to.
    pub invocation_id: String,
    /// Why.
    pub purpose: Purpose,
    /// Bytes of content requested.
    pub bytes: u64,
    /// Files requested.
    pub files: u64,
    /// Bytes counted against the pool.
    pub charged: u64,
    /// The process holding it; `None` for a durable reservation kept by a
    /// prepared call that waits for dispatch.
    pub owner: Option<ProcessIdentity>,
    /// Set for a prepared call kept for a later dispatch: it is charged to
    /// the pending budget (per principal), not to the running pool, and
    /// expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
}

/// Whose a pending reservation is and until when it is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pending {
    /// The principal that made the call (quotas are per principal).
    pub principal: String,
    /// Unix seconds after which the call may no longer be dispatched and
    /// its reservation is reaped.
    pub expires_at: u64,
}

impl Pending {
    /// Whether `now` (Unix seconds) is at or past the expiry.
    pub fn expired_at(&self, now: u64) -> bool {
        now >= self.expires_at
    }
}

/// Now, in Unix seconds (a clock before 1970 reads as 0).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Reservation {
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a reservation serializes")
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Reservation, Refusal> {
        use airlock_core::record_version::{check, Missing};
        check("staging reservation", bytes, "/version", RESERVATION_VERSION.into(), Missing::Is(1))?;
        serde_json::from_slice(bytes)
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("unreadable staging reservation: {e}")))
    }

    /// Whether it may be reaped at `now`: an owner that is no longer alive,
    /// or a durable reservation of a pending call past its expiry.
    pub fn stale(&self, now: u64) -> bool {
        match self.owner {
            Some(o) => !o.alive(),
            None => self.pending.as_ref().is_some_and(|p| p.expired_at(now)),
        }
    }
}
