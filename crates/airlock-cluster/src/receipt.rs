//! The receipt a worker signs for one order: who ran it on which tier, what
//! came of it (exit, bounds, the blobs of its streams and output), or why
//! it was refused.

use crate::error::ClusterError;
use crate::order::Blob;
use airlock_core::ReasonCode;
use airlock_sandbox::{AppliedLimits, ExitStatusKind, OutputExport};
use serde::{Deserialize, Serialize};

/// DSSE payload type of a receipt.
pub const RECEIPT_TYPE: &str = "application/vnd.airlock.cluster-receipt+json";
/// The receipt format this build writes and reads.
pub const RECEIPT_VERSION: u32 = 1;

/// The worker that signed a receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerIdentity {
    /// `sha256:<hex>` of its public key.
    pub key_id: String,
    /// The tier it ran the call on.
    pub tier: String,
    /// Its pool.
    pub pool: String,
    /// Its host name, for operators.
    pub host: String,
}

/// How long each part of a run took at the worker, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timings {
    /// Verifying the order and fetching its inputs.
    pub fetch_ms: u64,
    /// The sandboxed run, from start to confirmed cleanup.
    pub run_ms: u64,
    /// Uploading the streams and the output.
    pub upload_ms: u64,
}

/// A run that happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ran {
    /// How the tool ended.
    pub exit: ExitStatusKind,
    /// The deadline passed and the sandbox was killed.
    pub timed_out: bool,
    /// The kept stdout (with a stdout that is the output, its tail).
    pub stdout: Blob,
    /// More stdout was written than kept.
    pub stdout_truncated: bool,
    /// The kept stderr.
    pub stderr: Blob,
    /// More stderr was written than kept.
    pub stderr_truncated: bool,
    /// What happened to a file output (none for a stdout output).
    pub output_export: Option<OutputExport>,
    /// The output's bytes, when there are any to publish.
    pub output: Option<Blob>,
    /// Every process of the sandbox is known gone.
    pub cleanup_confirmed: bool,
    /// Which limits were in force on the worker.
    pub limits: AppliedLimits,
    /// Where the time went.
    pub timings: Timings,
}

/// A run refused before it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Refused {
    /// The reason code (`cluster.*`, `sandbox.*`).
    pub code: String,
    /// For people.
    pub message: String,
}

impl Refused {
    /// The edge's error for this signed refusal. A refusal that says the
    /// order waited too long (it was redelivered late, e.g. after a stream
    /// leader died) ran nothing and keeps its retryable `cluster.timeout`;
    /// every other refusal is `cluster.refused`, with the worker's code in
    /// the message.
    pub fn to_error(&self) -> ClusterError {
        match ReasonCode::from_str_code(&self.code) {
            Some(ReasonCode::ClusterTimeout) => {
                ClusterError::Timeout(format!("the worker refused the call: {}: {}", self.code, self.message))
            }
            _ => ClusterError::Refused { code: self.code.clone(), message: self.message.clone() },
        }
    }
}

/// What came of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Verdict {
    /// It ran.
    Ran(Box<Ran>),
    /// It did not run.
    Refused(Refused),
}

/// A worker's signed account of one order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// [`RECEIPT_VERSION`].
    pub version: u32,
    /// The invocation id of the order.
    pub invocation_id: String,
    /// `sha256:` of the order's signed payload: which order this answers.
    pub order_sha256: String,
    /// The descriptor's digest, as the order gave it.
    pub descriptor_sha256: String,
    /// Who signed it.
    pub worker: WorkerIdentity,
    /// When the worker took the order (Unix milliseconds).
    pub started_at_ms: u64,
    /// When it signed this (Unix milliseconds).
    pub finished_at_ms: u64,
    /// What came of it.
    pub verdict: Verdict,
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_core::HasReason as _;

    fn refused(code: &str) -> Refused {
        Refused { code: code.into(), message: "why".into() }
    }

    #[test]
    fn a_late_order_stays_retryable_and_other_refusals_are_final() {
        let late = refused("cluster.timeout").to_error();
        assert_eq!(late.reason(), ReasonCode::ClusterTimeout);
        assert!(late.to_string().contains("the worker refused the call: cluster.timeout: why"), "{late}");
        for code in ["cluster.refused", "cluster.over_limit", "cluster.unavailable", "no.such.code"] {
            assert_eq!(refused(code).to_error().reason(), ReasonCode::ClusterRefused, "{code}");
        }
    }
}
