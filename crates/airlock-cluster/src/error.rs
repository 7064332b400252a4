//! What can go wrong between an edge, the cluster and a worker, each with
//! the reason code an answer carries.

use airlock_core::{HasReason, ReasonCode, Refusal};

/// A cluster failure; [`HasReason::reason`] is its stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The cluster could not be reached or did not take a request
    /// (`cluster.unavailable`, retryable).
    #[error("the NATS cluster is unavailable: {0}")]
    Unavailable(String),
    /// No answer came in time (`cluster.timeout`, retryable).
    #[error("{0}")]
    Timeout(String),
    /// A signature does not verify under a pinned key, or its key is not
    /// pinned (`cluster.untrusted`).
    #[error("{0}")]
    Untrusted(String),
    /// A blob's bytes are not what its name and size say
    /// (`cluster.blob_mismatch`).
    #[error("{0}")]
    BlobMismatch(String),
    /// A worker refused an order; the code and message are the worker's.
    #[error("the worker refused the call: {code}: {message}")]
    Refused {
        /// The worker's reason code (`cluster.*`, `sandbox.*`).
        code: String,
        /// The worker's message.
        message: String,
    },
    /// An order asks for more than the worker host allows
    /// (`cluster.over_limit`).
    #[error("{0}")]
    OverLimit(String),
    /// A message is not a well-formed order or receipt (`cluster.protocol`).
    #[error("{0}")]
    Protocol(String),
    /// A local file could not be read or written while moving a blob
    /// (`internal`).
    #[error("{0}")]
    Io(String),
}

impl HasReason for ClusterError {
    fn reason(&self) -> ReasonCode {
        match self {
            ClusterError::Unavailable(_) => ReasonCode::ClusterUnavailable,
            ClusterError::Timeout(_) => ReasonCode::ClusterTimeout,
            ClusterError::Untrusted(_) => ReasonCode::ClusterUntrusted,
            ClusterError::BlobMismatch(_) => ReasonCode::ClusterBlobMismatch,
            ClusterError::Refused { .. } => ReasonCode::ClusterRefused,
            ClusterError::OverLimit(_) => ReasonCode::ClusterOverLimit,
            ClusterError::Protocol(_) => ReasonCode::ClusterProtocol,
            ClusterError::Io(_) => ReasonCode::Internal,
        }
    }
}

impl From<ClusterError> for Refusal {
    fn from(e: ClusterError) -> Refusal {
        Refusal::new(e.reason(), e.to_string())
    }
}

/// `Unavailable` naming what was being done, for NATS client errors.
pub(crate) fn unavailable(what: &str, e: impl std::fmt::Display) -> ClusterError {
    ClusterError::Unavailable(format!("{what}: {e}"))
}
