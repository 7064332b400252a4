//! `airlock mcp [--http ADDR [--token-file FILE] | --unix PATH]`: serve the
//! configured tools to MCP clients.
//!
//! Over stdio the process's stdout is the MCP channel, so nothing else is
//! ever printed there; notes for the operator go to stderr. The token
//! itself is never printed, only the path of its file.

use airlock_core::{ReasonCode, Refusal};
use airlock_mcp::{AirlockServer, Authentication, BoundedSessions, Gate, Token, UnixSocket};
use airlock_runtime::Runtime;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Where the server listens.
pub enum Front {
    /// stdin/stdout.
    Stdio,
    /// Streamable HTTP on a loopback address; the token file (`None`:
    /// `STATE/mcp/token`).
    Http(SocketAddr, Option<PathBuf>),
    /// Streamable HTTP on a Unix socket at this path.
    Unix(PathBuf),
}

impl Front {
    /// The front the command line asks for.
    pub fn choose(http: Option<String>, token_file: Option<PathBuf>, unix: Option<PathBuf>) -> Result<Front, Refusal> {
        Ok(match (http, unix) {
            (Some(addr), None) => Front::Http(parse_addr(&addr)?, token_file),
            (None, Some(path)) => Front::Unix(path),
            (None, None) => Front::Stdio,
            (Some(_), Some(_)) => return Err(crate::usage("--http and --unix exclude each other")),
        })
    }
}

/// Serves until the client closes stdin (stdio) or the process is asked to
/// stop (HTTP: SIGINT or SIGTERM).
pub fn run(runtime: Runtime, front: Front) -> Result<(), Refusal> {
    let settings = runtime.config().mcp.clone();
    let sessions = || Arc::new(BoundedSessions::new(settings.max_sessions, settings.session_idle));
    // Everything that can be refused is checked before serving starts.
    let (gate, mut socket) = match &front {
        Front::Stdio => (None, None),
        Front::Http(_, token_file) => {
            let path = match token_file {
                Some(path) => path.clone(),
                None => runtime.state().ensure_subdir("mcp")?.display_path().join("token"),
            };
            let (token, made) = Token::load_or_create(&path)?;
            let verb = if made { "made" } else { "read" };
            eprintln!(
                "airlock mcp: bearer token {verb} at {}; send it as `Authorization: Bearer TOKEN`",
                path.display()
            );
            let authentication = Authentication::Bearer { token, principal: settings.token_principal.clone() };
            (
                Some(Gate { authentication, allowed_origins: settings.allowed_origins.clone(), sessions: sessions() }),
                None,
            )
        }
        Front::Unix(path) => {
            let socket = UnixSocket::bind(path, &settings.principals)?;
            let authentication = Authentication::PeerUid(settings.principals.clone());
            let gate = Gate { authentication, allowed_origins: settings.allowed_origins.clone(), sessions: sessions() };
            (Some(gate), Some(socket))
        }
    };
    let server = AirlockServer::new(runtime);
    for (path, why) in &server.catalog().skipped {
        eprintln!("airlock mcp: not serving {}: {why}", path.display());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Refusal::new(ReasonCode::Internal, format!("starting the async runtime: {e}")))?;
    let served = rt.block_on(async {
        match (front, gate, socket.as_mut()) {
            (Front::Http(addr, _), Some(gate), _) => {
                let announce = |bound: SocketAddr| {
                    eprintln!("airlock mcp: listening on http://{bound}{}", airlock_mcp::HTTP_PATH);
                };
                airlock_mcp::serve_http(server, addr, gate, announce, stop_signal()).await
            }
            (Front::Unix(_), Some(gate), Some(socket)) => {
                eprintln!(
                    "airlock mcp: listening on unix:{} (mode {:o}), path {}",
                    socket.path().display(),
                    socket.mode(),
                    airlock_mcp::HTTP_PATH
                );
                airlock_mcp::serve_unix(server, socket, gate, stop_signal()).await
            }
            _ => airlock_mcp::serve_stdio(server).await,
        }
    });
    // A pending stdin read cannot be cancelled; do not wait for it.
    rt.shutdown_background();
    drop(socket);
    served.map_err(|e| Refusal::new(ReasonCode::Internal, format!("airlock mcp: {e}")))
}

/// `IP:PORT` with a loopback IP, or `localhost:PORT` (127.0.0.1). No other
/// name is resolved: what a name resolves to is up to `/etc/hosts` and DNS,
/// may change between the check and the bind, and may not be loopback,
/// while `localhost` is loopback by definition (RFC 6761), so it is mapped
/// here without asking a resolver.
fn parse_addr(text: &str) -> Result<SocketAddr, Refusal> {
    let localhost = text.strip_prefix("localhost:").map(|port| format!("127.0.0.1:{port}"));
    let addr: SocketAddr = localhost.as_deref().unwrap_or(text).parse().map_err(|_| {
        crate::usage(format!(
            "--http {text:?}: expected IP:PORT or localhost:PORT, e.g. 127.0.0.1:8765 (other host names are not \
             resolved: a name may resolve to a non-loopback address)"
        ))
    })?;
    if !addr.ip().is_loopback() {
        return Err(crate::usage(format!(
            "--http {text}: only a loopback address is served (for other hosts, put a TLS proxy in front)"
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
