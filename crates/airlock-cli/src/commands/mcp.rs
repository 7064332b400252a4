//! `airlock mcp [--http ADDR]`: serve the configured tools to MCP clients.
//!
//! Over stdio the process's stdout is the MCP channel, so nothing else is
//! ever printed there; notes for the operator go to stderr.

use airlock_core::{ReasonCode, Refusal};
use airlock_mcp::AirlockServer;
use airlock_runtime::Runtime;
use std::net::SocketAddr;

/// Serves until the client closes stdin (stdio) or the process is asked to
/// stop (HTTP: SIGINT or SIGTERM).
pub fn run(runtime: Runtime, http: Option<String>) -> Result<(), Refusal> {
    let addr = http.map(|a| parse_addr(&a)).transpose()?;
    let server = AirlockServer::new(runtime);
    for (path, why) in server.catalog().skipped {
        eprintln!("airlock mcp: not serving {}: {why}", path.display());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Refusal::new(ReasonCode::Internal, format!("starting the async runtime: {e}")))?;
    let served = rt.block_on(async move {
        match addr {
            None => airlock_mcp::serve_stdio(server).await,
            Some(addr) => {
                let announce = |bound: SocketAddr| {
                    eprintln!("airlock mcp: listening on http://{bound}{}", airlock_mcp::HTTP_PATH);
                };
                airlock_mcp::serve_http(server, addr, announce, stop_signal()).await
            }
        }
    });
    // A pending stdin read cannot be cancelled; do not wait for it.
    rt.shutdown_background();
    served.map_err(|e| Refusal::new(ReasonCode::Internal, format!("airlock mcp: {e}")))
}

fn parse_addr(text: &str) -> Result<SocketAddr, Refusal> {
    let addr: SocketAddr =
        text.parse().map_err(|_| crate::usage(format!("--http {text:?}: expected IP:PORT, e.g. 127.0.0.1:8765")))?;
    if !addr.ip().is_loopback() {
        return Err(crate::usage(format!(
            "--http {text}: only a loopback address is served (the endpoint has no authentication)"
        )));
    }
    Ok(addr)
}

async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
