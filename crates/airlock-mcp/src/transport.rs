//! Serving an [`AirlockServer`] over stdio, streamable HTTP on loopback, or
//! streamable HTTP on a Unix socket. Both HTTP fronts pass every request
//! through the [`crate::gate`] first.
//!
//! HTTP is rmcp's streamable transport at `/mcp`, with rmcp's session
//! manager, on axum; `--http` binds loopback addresses only, and rmcp's
//! Host check keeps its loopback allow-list. Over stdio, stdout carries only
//! MCP; notes go to stderr.

use crate::gate::{self, Gate, PeerCred};
use crate::server::AirlockServer;
use crate::socket::UnixSocket;
use airlock_core::mcp_server::MAX_BODY_BYTES;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServiceExt;
use std::net::SocketAddr;
use std::sync::Arc;

/// The HTTP path of the MCP endpoint.
pub const HTTP_PATH: &str = "/mcp";

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The MCP session could not start (bad handshake, closed transport).
    #[error("MCP session: {0}")]
    Session(String),
    /// The HTTP listener could not be bound or failed.
    #[error("HTTP server: {0}")]
    Http(std::io::Error),
    /// The address is not a loopback address.
    #[error("{0} is not a loopback address; airlock mcp --http serves 127.0.0.1 or ::1 only")]
    NotLoopback(SocketAddr),
    /// A token front was asked for with peer-uid authentication, or the
    /// reverse, or the socket was served twice.
    #[error("{0}")]
    Misconfigured(&'static str),
}

/// Serves one MCP session on the process's stdin/stdout until the client
/// closes it. Its calls are made as the runtime's principal.
/// At EOF its calls still running are cancelled, and it returns once they
/// have settled (journaled), or after [`SETTLE_LIMIT`].
pub async fn serve_stdio(server: AirlockServer) -> Result<(), ServeError> {
    let running =
        server.clone().serve(rmcp::transport::stdio()).await.map_err(|e| ServeError::Session(e.to_string()))?;
    let waited = running.waiting().await.map_err(|e| ServeError::Session(e.to_string()));
    server.settled(SETTLE_LIMIT).await;
    waited?;
    Ok(())
}

/// How long a closed stdio session waits for its cancelled calls to settle
/// (a worker is killed and reaped at once; a long snapshot copy stops at
/// its next step).
pub const SETTLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves streamable HTTP at `http://ADDR/mcp` until `shutdown` resolves.
/// Only loopback addresses are accepted, the `Host` header must name a
/// loopback host, and `gate` must authenticate by bearer token. `on_bound`
/// is told the bound address (useful with port 0).
pub async fn serve_http(
    server: AirlockServer,
    addr: SocketAddr,
    gate: Gate,
    on_bound: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    if !addr.ip().is_loopback() {
        return Err(ServeError::NotLoopback(addr));
    }
    if !matches!(gate.authentication, gate::Authentication::Bearer { .. }) {
        return Err(ServeError::Misconfigured("an HTTP port is served with bearer-token authentication only"));
    }
    let cancel = tokio_util::sync::CancellationToken::new();
    let router = router(server, gate, cancel.clone());
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(ServeError::Http)?;
    on_bound(listener.local_addr().map_err(ServeError::Http)?);
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown.await;
            cancel.cancel();
        })
        .await
        .map_err(ServeError::Http)
}

/// Serves streamable HTTP (path `/mcp`) on `socket` until `shutdown`
/// resolves; each connection's peer uid is its identity, so `gate` must
/// authenticate by peer uid.
pub async fn serve_unix(
    server: AirlockServer,
    socket: &mut UnixSocket,
    gate: Gate,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    if !matches!(gate.authentication, gate::Authentication::PeerUid(_)) {
        return Err(ServeError::Misconfigured("a Unix socket is served with peer-uid authentication only"));
    }
    let listener = socket.take_listener().ok_or(ServeError::Misconfigured("the socket is already served"))?;
    listener.set_nonblocking(true).map_err(ServeError::Http)?;
    let listener = tokio::net::UnixListener::from_std(listener).map_err(ServeError::Http)?;
    let cancel = tokio_util::sync::CancellationToken::new();
    let router = router(server, gate, cancel.clone());
    axum::serve(listener, router.into_make_service_with_connect_info::<PeerCred>())
        .with_graceful_shutdown(async move {
            shutdown.await;
            cancel.cancel();
        })
        .await
        .map_err(ServeError::Http)
}

/// rmcp's streamable HTTP service at [`HTTP_PATH`] (bounded sessions,
/// bounded bodies), every path behind the gate.
fn router(server: AirlockServer, gate: Gate, cancel: tokio_util::sync::CancellationToken) -> axum::Router {
    let server = server.behind_gate();
    let mut config = StreamableHttpServerConfig::default().with_max_request_body_bytes(MAX_BODY_BYTES);
    config.cancellation_token = cancel;
    let gate = Arc::new(gate);
    let service = StreamableHttpService::new(move || Ok(server.clone()), Arc::clone(&gate.sessions), config);
    axum::Router::new()
        .nest_service(HTTP_PATH, service)
        .fallback(|| async { axum::http::StatusCode::NOT_FOUND })
        .layer(axum::middleware::from_fn_with_state(gate, gate::check))
}
