//! How this crate's synchronous callers drive the NATS client: one
//! current-thread runtime per use, and the one retry rule for requests the
//! cluster does not take while it elects a leader.

use crate::error::ClusterError;
use std::future::Future;
use std::time::Duration;

/// A current-thread runtime for the NATS client.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ClusterError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClusterError::Io(format!("starting the NATS client's runtime: {e}")))
}

/// Runs `f` to its end on a runtime of its own.
pub(crate) fn block_on<T>(f: impl Future<Output = Result<T, ClusterError>>) -> Result<T, ClusterError> {
    runtime()?.block_on(f)
}

/// Runs `attempt` until it succeeds, fails with anything but
/// `cluster.unavailable`, or `give_up` passes (then its last error), with
/// a growing pause between attempts.
pub(crate) async fn retried<T, F: Future<Output = Result<T, ClusterError>>>(
    give_up: tokio::time::Instant,
    mut attempt: impl FnMut() -> F,
) -> Result<T, ClusterError> {
    let mut pause = Duration::from_millis(50);
    loop {
        match attempt().await {
            Err(ClusterError::Unavailable(why)) if tokio::time::Instant::now() + pause < give_up => {
                tracing::debug!(error = %why, pause_ms = pause.as_millis() as u64, "the cluster did not take it: retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}
