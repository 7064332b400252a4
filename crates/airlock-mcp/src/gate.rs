//! The gate every HTTP request passes before rmcp sees it: the Origin
//! allow-list, then the caller's identity (bearer token, or the Unix-socket
//! peer's uid), then the body limit and the session cap. A request that
//! passes carries a [`Caller`] extension, which rmcp hands to the handler
//! with the request's parts; a refusal is answered here with the HTTP
//! status and an envelope naming the reason code.
//!
//! Every HTTP request, any method or path, passes this one axum middleware,
//! in this order: `Origin` (absent: accepted; present: its normalized
//! `scheme://host[:port]` must be in `[mcp] allowed_origins`, else 403
//! `mcp.origin_forbidden`) → identity → a declared `Content-Length` ≤ 4 MiB
//! (413 `mcp.body_too_large`; rmcp cuts a chunked body at the same limit) →
//! session admission (`sessions.rs`). Identity for `--http` is
//! `Authorization: Bearer T` (exactly one such header), compared in constant
//! time (`token.rs`); for `--unix` it is the peer's uid
//! (`socket.rs`). The handler's `call_tool` sets
//! `CallRequest.principal` from the [`Caller`] (token: `[mcp]
//! token_principal`, default the runtime's principal; socket: the uid's
//! mapping): nothing in the body is consulted, and a gated server refuses a
//! call without a `Caller`.

use crate::sessions::BoundedSessions;
use crate::token::Token;
use airlock_core::mcp_server::{normalize_origin, MAX_BODY_BYTES};
use airlock_core::{Envelope, ReasonCode, Refusal};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The identity a request was authenticated as: whose call it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The principal calls are made as; `None` is the runtime's own
    /// (`[policy] principal` or `--principal`).
    pub principal: Option<String>,
}

/// How callers prove who they are.
#[derive(Debug)]
pub enum Authentication {
    /// `Authorization: Bearer TOKEN` on every request; calls are made as
    /// `principal`.
    Bearer {
        /// The server's token.
        token: Token,
        /// `[mcp] token_principal`; `None` is the runtime's principal.
        principal: Option<String>,
    },
    /// The Unix-socket peer's uid, mapped to a principal; any other uid is
    /// refused.
    PeerUid(BTreeMap<u32, String>),
}

/// The peer of a Unix-socket connection, from `SO_PEERCRED`.
#[derive(Debug, Clone, Copy)]
pub struct PeerCred {
    /// The peer's effective uid when it connected; `None` if the kernel
    /// could not say (then the connection is refused).
    pub uid: Option<u32>,
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, tokio::net::UnixListener>> for PeerCred {
    fn connect_info(stream: axum::serve::IncomingStream<'_, tokio::net::UnixListener>) -> Self {
        PeerCred { uid: stream.io().peer_cred().ok().map(|c| c.uid()) }
    }
}

/// What the gate checks.
#[derive(Debug)]
pub struct Gate {
    /// Identity.
    pub authentication: Authentication,
    /// Normalized accepted origins (an absent Origin is always accepted).
    pub allowed_origins: Vec<String>,
    /// The session cap.
    pub sessions: Arc<BoundedSessions>,
}

/// The axum middleware: checks the request against `gate` and either
/// answers the refusal or runs the MCP service with a [`Caller`].
pub async fn check(State(gate): State<Arc<Gate>>, mut request: Request, next: Next) -> Response {
    if let Err((status, refusal)) = gate.origin(&request) {
        return refuse(status, &refusal);
    }
    let caller = match gate.identify(&request) {
        Ok(caller) => caller,
        Err((status, refusal)) => return refuse(status, &refusal),
    };
    if let Some(length) = declared_length(&request) {
        if length > MAX_BODY_BYTES as u64 {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                &Refusal::new(
                    ReasonCode::McpBodyTooLarge,
                    format!("the request body has {length} bytes; the server reads at most {MAX_BODY_BYTES}"),
                ),
            );
        }
    }
    // A POST without a session id is the only request that can open a
    // session (`initialize`); it holds a ticket until its answer is ready,
    // by which time the session (if any) is counted as live.
    let _ticket = if request.method() == Method::POST && !request.headers().contains_key("mcp-session-id") {
        match gate.sessions.admit() {
            Some(ticket) => Some(ticket),
            None => {
                let refusal = Refusal::new(
                    ReasonCode::McpSessionsExhausted,
                    format!(
                        "{} MCP sessions are open, the most this server keeps ([mcp] max_sessions); close one \
                         (HTTP DELETE with its Mcp-Session-Id) or retry when one has idled out",
                        gate.sessions.max()
                    ),
                );
                let mut response = refuse(StatusCode::SERVICE_UNAVAILABLE, &refusal);
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
                return response;
            }
        }
    } else {
        None
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

type Refused = (StatusCode, Refusal);

impl Gate {
    fn origin(&self, request: &Request) -> Result<(), Refused> {
        let mut origins = request.headers().get_all(header::ORIGIN).iter();
        let Some(origin) = origins.next() else { return Ok(()) };
        let forbidden = |why: String| (StatusCode::FORBIDDEN, Refusal::new(ReasonCode::McpOriginForbidden, why));
        if origins.next().is_some() {
            return Err(forbidden("the request has more than one Origin header".into()));
        }
        let text = origin.to_str().unwrap_or("");
        match normalize_origin(text) {
            Some(o) if self.allowed_origins.contains(&o) => Ok(()),
            _ => Err(forbidden(format!(
                "Origin {text:?} is not allowed; an operator can add it to [mcp] allowed_origins in airlock.toml"
            ))),
        }
    }

    fn identify(&self, request: &Request) -> Result<Caller, Refused> {
        match &self.authentication {
            Authentication::Bearer { token, principal } => {
                let unauthenticated = |why: &str| {
                    (
                        StatusCode::UNAUTHORIZED,
                        Refusal::new(
                            ReasonCode::McpUnauthenticated,
                            format!(
                                "{why}; send the token from the server's token file (its path is printed when \
                                 `airlock mcp --http` starts) as `Authorization: Bearer TOKEN`"
                            ),
                        ),
                    )
                };
                let mut values = request.headers().get_all(header::AUTHORIZATION).iter();
                let (Some(value), None) = (values.next(), values.next()) else {
                    return Err(unauthenticated("the request carries no single Authorization header"));
                };
                let presented = bearer(value.as_bytes()).ok_or_else(|| unauthenticated("not a Bearer credential"))?;
                if !token.matches(presented) {
                    return Err(unauthenticated("the bearer token is not this server's"));
                }
                Ok(Caller { principal: principal.clone() })
            }
            Authentication::PeerUid(principals) => {
                let uid = request.extensions().get::<ConnectInfo<PeerCred>>().and_then(|c| c.0.uid);
                let Some(uid) = uid else {
                    return Err((
                        StatusCode::FORBIDDEN,
                        Refusal::new(ReasonCode::McpPeerUnmapped, "the kernel did not say who the peer is"),
                    ));
                };
                match principals.get(&uid) {
                    Some(principal) => Ok(Caller { principal: Some(principal.clone()) }),
                    None => Err((
                        StatusCode::FORBIDDEN,
                        Refusal::new(
                            ReasonCode::McpPeerUnmapped,
                            format!(
                                "uid {uid} is not in [mcp.principals]; an operator maps it there (e.g. {uid} = \
                                 \"NAME\") to let it make calls"
                            ),
                        ),
                    )),
                }
            }
        }
    }
}

/// The credential of `Bearer CREDENTIAL` (the scheme in any letter case,
/// RFC 9110 §11.1).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let credential = rest.trim_ascii();
    (!credential.is_empty()).then_some(credential)
}

/// The `Content-Length` the request declares, if any (a malformed one
/// counts as too large).
fn declared_length(request: &Request) -> Option<u64> {
    let value = request.headers().get(header::CONTENT_LENGTH)?;
    Some(value.to_str().ok().and_then(|v| v.parse().ok()).unwrap_or(u64::MAX))
}

/// A refusal as an HTTP answer: `status` and the envelope as JSON.
fn refuse(status: StatusCode, refusal: &Refusal) -> Response {
    crate::request_log::refused_at_gate(status.as_u16(), refusal);
    let body = serde_json::to_vec(&Envelope::from_refusal(refusal)).unwrap_or_default();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::bearer;

    #[test]
    fn bearer_credentials() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bEaReR  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bearerabc"), None);
        assert_eq!(bearer(b""), None);
    }
}
