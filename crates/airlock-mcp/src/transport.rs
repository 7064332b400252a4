//! Serving an [`AirlockServer`] over stdio or streamable HTTP.

use crate::server::AirlockServer;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServiceExt;
use std::net::SocketAddr;

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
}

/// Serves one MCP session on the process's stdin/stdout until the client
/// closes it.
pub async fn serve_stdio(server: AirlockServer) -> Result<(), ServeError> {
    let running = server.serve(rmcp::transport::stdio()).await.map_err(|e| ServeError::Session(e.to_string()))?;
    running.waiting().await.map_err(|e| ServeError::Session(e.to_string()))?;
    Ok(())
}

/// Serves streamable HTTP at `http://ADDR/mcp` until `shutdown` resolves.
/// Only loopback addresses are accepted (there is no authentication), and
/// the `Host` header must name a loopback host. `on_bound` is told the
/// bound address (useful with port 0).
pub async fn serve_http(
    server: AirlockServer,
    addr: SocketAddr,
    on_bound: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    if !addr.ip().is_loopback() {
        return Err(ServeError::NotLoopback(addr));
    }
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = cancel.clone();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        std::sync::Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().nest_service(HTTP_PATH, service);
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
