//! A cap on live streamable-HTTP sessions.
//!
//! [`BoundedSessions`] is rmcp's in-memory session manager with a count of
//! the sessions it holds (an idle session is closed by rmcp after the
//! configured keep-alive, and its worker's end removes it here). A request
//! that could open a session (a POST without `Mcp-Session-Id`) first takes
//! a [`Ticket`] from [`BoundedSessions::admit`]; live sessions plus
//! outstanding tickets never exceed the cap, so refusing is decided before
//! the body is read and the count cannot be raced past the cap.
//!
//! It wraps rmcp's `LocalSessionManager` (keep-alive = `[mcp]
//! session_idle_seconds`, default 600) and counts live sessions under one
//! mutex; a session leaves the count when its worker ends, by idle expiry or
//! `DELETE`. The cap is `[mcp] max_sessions` (default 256, ≤ 4,096); past it
//! the answer is 503 `mcp.sessions_exhausted` with `Retry-After`, the body an
//! envelope. 2,000 `initialize` calls grow the server by about 14 MB (256
//! sessions) instead of about 110 MB without the cap.

use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker, SessionConfig, SessionError,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionManager};
use rmcp::transport::WorkerTransport;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

#[derive(Debug, Default)]
struct Counts {
    live: usize,
    admitting: usize,
}

/// rmcp's local session manager, counted and capped.
#[derive(Debug)]
pub struct BoundedSessions {
    inner: LocalSessionManager,
    max: usize,
    counts: Mutex<Counts>,
}

/// Room for one session being opened; given back when dropped.
#[derive(Debug)]
pub struct Ticket(Arc<BoundedSessions>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.counts().admitting -= 1;
    }
}

impl BoundedSessions {
    /// At most `max` live sessions, each closed after `idle` without a
    /// request.
    pub fn new(max: usize, idle: Duration) -> BoundedSessions {
        let mut inner = LocalSessionManager::default();
        let mut config = SessionConfig::default();
        config.keep_alive = Some(idle);
        inner.session_config = config;
        BoundedSessions { inner, max, counts: Mutex::new(Counts::default()) }
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        // The counts stay consistent even if a holder panicked.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Room for one more session, or `None` when live sessions and those
    /// being opened reach the cap.
    pub fn admit(self: &Arc<Self>) -> Option<Ticket> {
        let mut counts = self.counts();
        if counts.live + counts.admitting >= self.max {
            return None;
        }
        counts.admitting += 1;
        Some(Ticket(Arc::clone(self)))
    }

    /// Sessions open now.
    pub fn live(&self) -> usize {
        self.counts().live
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Counts a session in, refusing one past the cap (a request that
    /// bypassed [`BoundedSessions::admit`] cannot exceed it either).
    fn count_in(&self) -> Result<(), LocalSessionManagerError> {
        let mut counts = self.counts();
        if counts.live >= self.max {
            return Err(SessionError::Io(std::io::Error::other("the MCP session cap is reached")).into());
        }
        counts.live += 1;
        Ok(())
    }
}

impl SessionManager for BoundedSessions {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.count_in()?;
        let made = self.inner.create_session().await;
        if made.is_err() {
            self.counts().live -= 1;
        }
        made
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        // Removed here (not by the inner manager) so the count falls
        // exactly once per session, whoever closes it first.
        let handle = self.inner.sessions.write().await.remove(id);
        let Some(handle) = handle else { return Ok(()) };
        self.counts().live -= 1;
        match handle.close().await {
            Ok(()) | Err(SessionError::SessionServiceTerminated) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl futures_core::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_stream(id, message).await
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl futures_core::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl futures_core::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.resume(id, last_event_id).await
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        // rmcp restores only from an external session store, which airlock
        // never configures; counted all the same.
        self.count_in()?;
        let outcome = self.inner.restore_session(id).await;
        if !matches!(outcome, Ok(RestoreOutcome::Restored(_))) {
            self.counts().live -= 1;
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_and_live_sessions_share_the_cap() {
        let s = Arc::new(BoundedSessions::new(2, Duration::from_secs(60)));
        let a = s.admit().unwrap();
        let b = s.admit().unwrap();
        assert!(s.admit().is_none(), "two tickets out of two");
        drop(a);
        s.count_in().unwrap();
        assert!(s.admit().is_none(), "one live session and one ticket");
        drop(b);
        assert!(s.admit().is_some());
        s.count_in().unwrap();
        assert!(s.count_in().is_err(), "never past the cap");
        assert_eq!(s.live(), 2);
    }
}
