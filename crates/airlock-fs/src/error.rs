//! The one error of every client call.

use std::fmt;

use airlock_fsproto::{codes, ProtoError};

/// A refused or failed operation: a stable reason code and a message for
/// people.
///
/// The code is the peer's (`broker.denied`, `broker.not_found`,
/// `path.traversal`, …) when airlock answered with an error, or one of two
/// local codes when the exchange itself failed: `broker.protocol` (a
/// malformed, mismatched or oversized frame, in either direction) and
/// `broker.io` (no socket, or reading or writing it failed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsError {
    /// Stable reason code.
    pub code: String,
    /// What happened.
    pub message: String,
}

impl FsError {
    /// An error with `code` and `message`.
    pub fn new(code: &str, message: impl Into<String>) -> FsError {
        FsError { code: code.to_string(), message: message.into() }
    }

    /// A local `broker.protocol` error.
    pub(crate) fn protocol(message: impl Into<String>) -> FsError {
        FsError::new(codes::PROTOCOL, message)
    }

    /// A local `broker.io` error.
    pub(crate) fn io(message: impl Into<String>) -> FsError {
        FsError::new(codes::IO, message)
    }
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for FsError {}

impl From<ProtoError> for FsError {
    fn from(e: ProtoError) -> FsError {
        match e {
            ProtoError::Io(io) => FsError::io(io.to_string()),
            other => FsError::protocol(other.to_string()),
        }
    }
}
